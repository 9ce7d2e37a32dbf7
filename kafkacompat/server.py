"""Listener and connection loop: framing, ordered responses, sendfile. No protocol knowledge
beyond the request header; every request goes to ``Broker.dispatch``.

Like Kafka, a connection processes one request at a time, so responses leave in request order.
A connection that sends bytes that cannot be a Kafka request is logged and closed; nothing a
client sends can reach past its own connection task.

Connection limits as Kafka's SocketServer: ``max.connections.per.ip`` closes a new connection
from an address that already has that many; ``max.connections`` stops accepting (new clients
wait in the listen backlog) until one closes; ``connections.max.idle.ms`` closes a connection
that has neither received a request nor been busy with one for that long.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import socket as stdlib_socket
import time
from typing import TYPE_CHECKING, Protocol

import trio

from kafkacompat.wire.chunks import Chunk, FileRegion, close_chunks
from kafkacompat.wire.frame import FrameDecoder, ProtocolViolation, api_name, parse_request_header

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.wire.frame import RequestHeader

log = logging.getLogger("kafkacompat.server")


class RequestDispatcher(Protocol):
    """What the listener needs of the broker: its limits and a request runner."""

    config: "BrokerConfig"

    async def dispatch(self, header: "RequestHeader", body: memoryview,
                       connection: "Connection | None") -> "list[Chunk] | None": ...

_connection_ids = itertools.count(1)
_SENDMSG_MAX_BUFFERS = 64
# File regions up to this size are read (pread) into the response's writev instead of being
# sent with a separate sendfile: one syscall and one TCP segment for a small fetch response.
_INLINE_FILE_BYTES = 16 * 1024


class ConnectionClosed(Exception):
    pass


class Connection:
    """One client connection: reads frames, hands them to the broker, writes responses."""

    def __init__(self, broker: "RequestDispatcher", sock: trio.socket.SocketType) -> None:
        self.broker = broker
        self.sock = sock
        self.fd = sock.fileno()
        self._waited = False
        self.last_active = time.monotonic()
        self.busy = False  # handling a request (a parked JoinGroup or long poll is not idleness)
        self.cancel_scope: trio.CancelScope | None = None
        self.id = next(_connection_ids)
        self.peer = self.client_host = "unknown"
        try:
            peer = sock.getpeername()
        except OSError:
            peer = None
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.client_host = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"
        self.decoder = FrameDecoder(broker.config.socket_request_max_bytes)
        self.client_id: str | None = None

    def describe(self) -> str:
        client = f" (client id {self.client_id!r})" if self.client_id else ""
        return f"connection {self.id} from {self.peer}{client}"

    async def serve(self) -> None:
        try:
            while True:
                self._waited = False
                frame = await self._read_frame()
                if frame is None:
                    return
                self.busy = True
                try:
                    if not self._waited:
                        # The frame was already there: give other tasks their turn (one schedule
                        # point per request, where trio's socket methods would have taken two).
                        await trio.lowlevel.checkpoint()
                    await self._handle_frame(frame)
                finally:
                    self.busy = False
                    self.last_active = time.monotonic()
        except ProtocolViolation as exc:
            log.warning("Closing %s: %s", self.describe(), exc)
        except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT):
                log.warning("Closing %s after a socket error: %s", self.describe(), exc)
        except Exception:
            log.exception("Closing %s after an internal error; other clients are unaffected", self.describe())
        finally:
            self.sock.close()

    # The socket calls below go straight to the (non-blocking) descriptor and wait for epoll only
    # when the kernel says EAGAIN. trio's socket methods would add a scheduler pass after every
    # successful call, and the old sendfile path registered with epoll before every send.

    async def _read_frame(self) -> bytearray | None:
        decoder = self.decoder
        fd = self.fd
        while True:
            frame = decoder.next_frame()
            if frame is not None:
                return frame
            try:
                count = os.readv(fd, (decoder.writable(),))
            except BlockingIOError:
                self._waited = True
                await trio.lowlevel.wait_readable(self.sock)
                continue
            if count == 0:
                if decoder.has_partial_frame():
                    log.info("%s closed in the middle of a request", self.describe())
                return None
            decoder.received(count)

    async def _handle_frame(self, frame: bytearray) -> None:
        header, body_offset = parse_request_header(frame)
        if header.client_id is not None:
            self.client_id = header.client_id
        chunks = await self.broker.dispatch(header, memoryview(frame)[body_offset:], self)
        if chunks is not None:
            try:
                await self.send_chunks(chunks)
            finally:
                close_chunks(chunks)

    async def send_chunks(self, chunks: list[Chunk]) -> None:
        """Send the chunks in order: memory chunks gathered into one writev, file regions up to
        _INLINE_FILE_BYTES read into it too (one syscall for a small fetch response), larger
        regions with sendfile."""
        pending: list[Chunk] = []
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                if chunk.length <= _INLINE_FILE_BYTES:
                    data = os.pread(chunk.fd, chunk.length, chunk.offset)
                    if len(data) != chunk.length:
                        raise ConnectionClosed("file shrank under an in-flight fetch")
                    pending.append(data)
                    continue
                if pending:
                    await self._send_buffers(pending)
                    pending = []
                await self._send_file(chunk)
            elif len(chunk):
                pending.append(chunk)
        if pending:
            await self._send_buffers(pending)

    async def _send_buffers(self, buffers: list[Chunk]) -> None:
        fd = self.fd
        if len(buffers) <= _SENDMSG_MAX_BUFFERS:
            try:
                sent = os.writev(fd, buffers)  # type: ignore[arg-type]
            except BlockingIOError:
                sent = 0
            if sent == sum(b.nbytes if isinstance(b, memoryview) else len(b) for b in buffers):
                return
        else:
            sent = 0
        views = [memoryview(b).cast("B") for b in buffers]  # type: ignore[arg-type]
        while True:
            while sent and views:
                if sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0
            if not views:
                return
            try:
                sent = os.writev(fd, views[:_SENDMSG_MAX_BUFFERS])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)
                sent = 0

    async def _send_file(self, region: FileRegion) -> None:
        offset, remaining = region.offset, region.length
        fd = self.fd
        while remaining > 0:
            try:
                sent = os.sendfile(fd, region.fd, offset, remaining)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)
                continue
            if sent == 0:
                raise ConnectionClosed("file shrank under an in-flight fetch")
            offset += sent
            remaining -= sent


class ConnectionLimits:
    """The live connections of a listener, per client address, and Kafka's limits on them."""

    def __init__(self, broker: "RequestDispatcher") -> None:
        self.broker = broker
        self.connections: set[Connection] = set()
        self.per_ip: dict[str, int] = {}
        self._slot_freed = trio.Event()

    def admit(self, connection: Connection) -> bool:
        """Count a new connection in, unless its address already has max.connections.per.ip."""
        host = connection.client_host
        limit = self.broker.config.max_connections_per_ip
        if self.per_ip.get(host, 0) >= limit:
            log.info("Rejected %s: address %s already has the configured maximum of %d connections "
                     "(max.connections.per.ip)", connection.describe(), host, limit)
            return False
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        self.connections.add(connection)
        return True

    def release(self, connection: Connection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            host = connection.client_host
            self.per_ip[host] -= 1
            if not self.per_ip[host]:
                del self.per_ip[host]
            self._slot_freed.set()
            self._slot_freed = trio.Event()

    async def wait_for_slot(self) -> None:
        """Kafka's Acceptor blocks while max.connections are open."""
        warned = False
        while len(self.connections) >= self.broker.config.max_connections:
            if not warned:
                log.warning("%d connections are open, the configured max.connections: new connections "
                            "wait until one closes", len(self.connections))
                warned = True
            await self._slot_freed.wait()

    async def close_idle(self) -> None:
        """Close connections idle for connections.max.idle.ms (Kafka's Selector does it on poll)."""
        while True:
            idle_ms = self.broker.config.connections_max_idle_ms
            await trio.sleep(max(idle_ms / 1000 / 4, 0.05) if idle_ms >= 0 else 60)
            if idle_ms < 0:
                continue
            cutoff = time.monotonic() - idle_ms / 1000
            for connection in [c for c in self.connections if not c.busy and c.last_active < cutoff]:
                if connection.cancel_scope is not None and not connection.cancel_scope.cancel_called:
                    log.info("Closing %s: idle for more than connections.max.idle.ms (%d ms)",
                             connection.describe(), idle_ms)
                    # Its task is waiting for bytes; it ends and closes its own socket (never
                    # close a descriptor another task may still use).
                    connection.cancel_scope.cancel()


async def serve_listener(broker: "RequestDispatcher", host: str, port: int, *, accepting: trio.Event | None = None,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections forever; each runs in its own task in this nursery. Started once the
    port is bound; with ``accepting``, nothing is accepted before it is set (clients that connect
    meanwhile wait in the backlog), so no request can reach a broker that is not ready."""
    listener = trio.socket.socket(
        stdlib_socket.AF_INET6 if ":" in host else stdlib_socket.AF_INET, stdlib_socket.SOCK_STREAM
    )
    listener.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
    await listener.bind((host, port))
    listener.listen(1024)
    bound_port = listener.getsockname()[1]
    limits = ConnectionLimits(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(limits.close_idle)
        task_status.started(bound_port)
        with listener:
            if accepting is not None:
                await accepting.wait()
            while True:
                await limits.wait_for_slot()
                sock, _ = await listener.accept()
                sock.setsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_NODELAY, 1)
                connection = Connection(broker, sock)
                if limits.admit(connection):
                    nursery.start_soon(_serve_counted, connection, limits)
                else:
                    sock.close()


async def _serve_counted(connection: Connection, limits: ConnectionLimits) -> None:
    try:
        with trio.CancelScope() as connection.cancel_scope:
            await connection.serve()
    finally:
        limits.release(connection)


def describe_request(header, connection: Connection) -> str:
    return (
        f"{api_name(header.api_key)} v{header.api_version} (correlation id {header.correlation_id}) "
        f"on {connection.describe()}"
    )
