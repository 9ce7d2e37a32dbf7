"""A small HTTP/1.1 server on Trio, h11 doing the protocol (sans-IO): keep-alive, bounded request
bodies, one request at a time per connection. ``serve_http`` binds, then serves ``App.handle``;
a port already in use is a warning (many brokers run side by side in tests), never a failure."""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import h11
import trio

log = logging.getLogger("kafkacompat.http")

MAX_BODY_BYTES = 1 << 20
MAX_HEADER_BYTES = 16 * 1024
IDLE_TIMEOUT_S = 60
MAX_CONNECTIONS = 64  # more are closed at once: HTTP must not eat the descriptors Kafka clients need
RECEIVE_SIZE = 16 * 1024


@dataclass(slots=True)
class Request:
    method: str
    path: str  # as sent (percent-encoded), without the query; App decodes each path parameter
    query: dict[str, list[str]]
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


class HttpError(Exception):
    """A 4xx answer with a message for the user (bad input, unknown route)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Handle = Callable[["Request"], "Response | Awaitable[Response]"]


async def serve_http(handle: Handle, host: str, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``handle`` on host:port until cancelled. Reports the bound port (None when the port
    could not be bound: that is logged and the broker runs on without HTTP)."""
    if not _is_loopback(host):
        log.warning("The HTTP console and API on %s:%d have no authentication and are reachable from other "
                    "machines; use --http-host 127.0.0.1 unless that is intended", host, port)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        reason = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
        log.warning("HTTP port %s:%d %s; this broker runs without its console, metrics and fault API "
                    "(choose another with --http-port, or --no-http)", host, port, reason)
        task_status.started(None)
        return
    bound = listeners[0].socket.getsockname()[1]
    log.info("HTTP console, /metrics and /v1 API on http://%s:%d/", _url_host(host), bound)
    task_status.started(bound)
    open_connections = [0]

    async def serve_one(stream: trio.abc.Stream) -> None:
        if open_connections[0] >= MAX_CONNECTIONS:
            await stream.aclose()
            return
        open_connections[0] += 1
        try:
            await _serve_connection(handle, stream)
        finally:
            open_connections[0] -= 1

    await trio.serve_listeners(serve_one, listeners)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: say so, it may resolve to anything
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _serve_connection(handle: Handle, stream: trio.abc.Stream) -> None:
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
    try:
        while True:
            with trio.move_on_after(IDLE_TIMEOUT_S) as idle:
                request = await _read_request(connection, stream)
            if idle.cancelled_caught or request is None:
                return
            if isinstance(request, Response):  # the request itself was bad
                await _send(connection, stream, request, close=True)
                return
            response = await _answer(handle, request)
            await _send(connection, stream, response, close=False, head=request.method == "HEAD")
            if connection.our_state is h11.MUST_CLOSE or connection.their_state is h11.MUST_CLOSE:
                return
            try:
                connection.start_next_cycle()
            except h11.ProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, OSError):
        pass
    finally:
        await stream.aclose()


async def _read_request(connection: h11.Connection, stream: trio.abc.Stream) -> "Request | Response | None":
    head: h11.Request | None = None
    body = bytearray()
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            return _text(exc.error_status_hint, f"bad HTTP request: {exc}\n")
        if event is h11.NEED_DATA:
            data = await stream.receive_some(RECEIVE_SIZE)
            connection.receive_data(data)
            if not data and head is None:
                return None
            continue
        if isinstance(event, h11.Request):
            head = event
            length = dict(event.headers).get(b"content-length")
            if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
                return _text(413, f"request body over {MAX_BODY_BYTES} bytes\n")
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                return _text(413, f"request body over {MAX_BODY_BYTES} bytes\n")
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return _request(head, bytes(body))
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _request(head: h11.Request, body: bytes) -> Request:
    target = urlsplit(head.target.decode("latin-1"))
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers}
    return Request(head.method.decode("ascii", "replace").upper(), target.path,
                   parse_qs(target.query, keep_blank_values=True), body, headers)


async def _answer(handle, request: Request) -> Response:
    try:
        response = handle(request)
        if not isinstance(response, Response):
            response = await response
        return response
    except HttpError as exc:
        return _error(request, exc.status, exc.message)
    except Exception:
        log.exception("HTTP %s %s failed; the broker is unaffected", request.method, request.path)
        return _error(request, 500, "internal error; see the broker's log")


def _error(request: Request, status: int, message: str) -> Response:
    if request.path.startswith("/v1/") or request.path == "/v1":
        return Response(status, (json.dumps({"error": message}) + "\n").encode(), "application/json")
    return _text(status, message + "\n")


def _text(status: int, message: str) -> Response:
    return Response(status, message.encode())


async def _send(connection: h11.Connection, stream: trio.abc.Stream, response: Response, *, close: bool,
                head: bool = False) -> None:
    headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
               ("Cache-Control", "no-store"), *response.headers]
    if close:
        headers.append(("Connection", "close"))
    try:
        data = connection.send(h11.Response(status_code=response.status, headers=headers))
        if not head:
            data += connection.send(h11.Data(data=response.body))
        data += connection.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        return
    await stream.send_all(data)
