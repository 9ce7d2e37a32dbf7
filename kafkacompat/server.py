"""Listener and connection loop: framing, ordered responses, sendfile. No protocol knowledge
beyond the request header; every request goes to ``Broker.dispatch``.

Like Kafka, a connection processes one request at a time, so responses leave in request order.
A connection that sends bytes that cannot be a Kafka request is logged and closed; nothing a
client sends can reach past its own connection task.

Connection limits as Kafka's SocketServer: ``max.connections.per.ip`` closes a new connection
from an address that already has that many; ``max.connections`` stops accepting (new clients
wait in the listen backlog) until one closes; ``connections.max.idle.ms`` closes a connection
that has neither received a request nor been busy with one for that long, or whose client has
not taken a byte of its response for that long (Kafka's Selector counts no activity either).

Memory per connection stays small and bounded whatever the client does: an idle connection holds
a 4 KiB read buffer (a larger frame gets its own buffer, handed to the handler and dropped after
it); the connection reads nothing while it sends a response, so a client that does not read its
socket stops being read from; a response streamed a piece at a time (down-converted records,
produced in a worker thread) keeps one piece in memory, and all connections together at most
``UNSENT_BYTES_LIMIT`` of them (a connection waits for room before converting its next piece).

Descriptor exhaustion (EMFILE, ENFILE) and kernel memory pressure (ENOBUFS, ENOMEM) on accept
are waited out (retried every 100 ms, as trio's serve_listeners does), logged once per burst; a
connection aborted before it was accepted is skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import gc
import itertools
import logging
import os
import socket as stdlib_socket
import time
from typing import TYPE_CHECKING, Callable, Protocol

import trio

from kafkacompat.security.authenticator import RequestBeforeAuthentication, SaslAuthenticator, State
from kafkacompat.security.principal import ANONYMOUS, KafkaPrincipal
from kafkacompat.wire.chunks import Chunk, FileRegion, StreamedChunk, close_chunks
from kafkacompat.wire.frame import FrameDecoder, ProtocolViolation, api_name, parse_request_header

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.quotas import ConnectionRateQuotas
    from kafkacompat.security.listeners import ListenerSecurity
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
# Streamed pieces (converted records) held in memory by all connections of a listener until sent.
UNSENT_BYTES_LIMIT = 32 * 1024 * 1024
# accept() errors that mean "out of descriptors or kernel memory for now": wait and retry
# (trio's serve_listeners sleeps 100 ms too); and errors of one connection that died in the
# backlog, to skip (trio's SocketListener ignores them).
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_IGNORED_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ECONNABORTED", "EPERM", "EPROTO", "ENETDOWN", "ENOPROTOOPT", "EHOSTDOWN", "ENONET", "EHOSTUNREACH",
    "EOPNOTSUPP", "ENETUNREACH") if hasattr(errno, name))
_ACCEPT_RETRY_SECONDS = 0.1
_ACCEPT_QUIET_SECONDS = 10.0
# After this many connections closed (or one that streamed a response: its pieces were large),
# hand the memory they freed back to the system: glibc keeps freed heap pages below live
# allocations otherwise (a burst of connections would leave the broker's RSS at its peak).
# malloc_trim takes under a millisecond; the idle check also trims after any close.
_TRIM_AFTER_CLOSES = 64
# A burst of this many closes is followed, once closes have stopped for a second, by a full
# garbage collection: it empties CPython's free lists (thousands of cached tuples, frames and
# dicts the connections used), whose blocks otherwise keep the allocator's 1 MiB arenas alive,
# so the RSS a burst of connections took comes back. It pauses the loop for tens of
# milliseconds, hence only after bursts.
_COLLECT_AFTER_CLOSES = 256
_QUIET_BEFORE_COLLECT_S = 1.0


def _load_malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_malloc_trim = _load_malloc_trim()


def _return_freed_memory() -> None:
    if _malloc_trim is not None:
        _malloc_trim(0)


class UnsentBytes:
    """The bytes of streamed response pieces produced but not yet sent, across connections: a
    connection waits for room before it produces its next piece."""

    def __init__(self, limit: int = UNSENT_BYTES_LIMIT) -> None:
        self.limit = limit
        self.in_use = 0
        self._freed = trio.Event()

    async def wait_for_room(self) -> None:
        while self.in_use >= self.limit:
            await self._freed.wait()

    def hold(self, count: int) -> None:
        self.in_use += count

    def release(self, count: int) -> None:
        self.in_use -= count
        self._freed.set()
        self._freed = trio.Event()


class ConnectionClosed(Exception):
    pass


class Connection:
    """One client connection: reads frames, hands them to the broker, writes responses."""

    def __init__(self, broker: "RequestDispatcher", sock: trio.socket.SocketType, unsent: UnsentBytes | None = None,
                 security: "ListenerSecurity | None" = None) -> None:
        self.broker = broker
        self.sock = sock
        self.fd = sock.fileno()
        self._waited = False
        self.last_active = time.monotonic()
        self.busy = False  # handling a request (a parked JoinGroup or long poll is not idleness)
        self.send_stalled = False  # waiting for the client to take response bytes (that is idleness)
        self.unsent = unsent if unsent is not None else UnsentBytes()
        self.unsent_held = 0  # this connection's part of unsent.in_use
        self.streamed = False  # has sent a streamed response (its pieces' memory is returned at close)
        self.cancel_scope: trio.CancelScope | None = None
        self.id = next(_connection_ids)
        self.peer = self.client_host = "unknown"
        self.client_port = 0
        # what the client said it is in ApiVersions v3+ (KIP-511; client telemetry matches on it)
        self.client_software_name = self.client_software_version = ""
        try:
            peer = sock.getpeername()
        except OSError:
            peer = None
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.client_host, self.client_port = peer[0], peer[1]
            self.peer = f"{peer[0]}:{peer[1]}"
        self.decoder = FrameDecoder(broker.config.socket_request_max_bytes)
        self.client_id: str | None = None
        # who the requests on this connection act as; authentication (SASL, mTLS) replaces it
        self.principal: KafkaPrincipal = ANONYMOUS
        self.throttled_until = 0.0  # trio time before which nothing is read (KIP-219 quota throttling)
        # called once when the connection ends (state tied to it: share sessions)
        self.close_callbacks: dict[object, Callable[[], None]] = {}
        self.listener_name = security.listener.name if security is not None else broker.config.listener_name
        self.security_protocol = security.listener.protocol if security is not None else "PLAINTEXT"
        self.authenticator: SaslAuthenticator | None = None
        if security is not None and security.sasl is not None:
            self.authenticator = SaslAuthenticator(security.sasl, self.describe, self._authenticated)
            # Before authentication a frame is at most sasl.server.max.receive.size (as Kafka):
            # an anonymous client cannot make the broker buffer socket.request.max.bytes.
            self.decoder.max_frame_bytes = min(security.sasl.max_receive_size, self.decoder.max_frame_bytes)
            self.decoder.limit_name = "sasl.server.max.receive.size, before authentication"

    def _authenticated(self, principal: KafkaPrincipal) -> None:
        self.principal = principal
        self.decoder.max_frame_bytes = self.broker.config.socket_request_max_bytes
        self.decoder.limit_name = "socket.request.max.bytes"

    def describe(self) -> str:
        client = f" (client id {self.client_id!r})" if self.client_id else ""
        return f"connection {self.id} from {self.peer}{client}"

    def throttle(self, throttle_ms: int) -> None:
        """Mute the connection for a quota's throttle time, once its response is sent (KIP-219)."""
        self.throttled_until = max(self.throttled_until, trio.current_time() + throttle_ms / 1000)

    async def serve(self) -> None:
        try:
            while True:
                self._waited = False
                if self.throttled_until > trio.current_time():
                    await trio.sleep_until(self.throttled_until)
                    self._waited = True
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
        except (ProtocolViolation, RequestBeforeAuthentication) as exc:
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
            self.decoder.close()
            for callback in self.close_callbacks.values():
                try:
                    callback()
                except Exception:
                    log.exception("A close callback of %s failed", self.describe())

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
        authenticator = self.authenticator
        if authenticator is not None and authenticator.state is State.RAW_TOKENS:
            await self._raw_sasl_token(authenticator, frame)
            return
        header, body_offset = parse_request_header(frame)
        if header.client_id is not None:
            self.client_id = header.client_id
        if authenticator is not None:
            authenticator.admit(header.api_key, api_name(header.api_key))
        chunks = await self.broker.dispatch(header, memoryview(frame)[body_offset:], self)
        if chunks is not None:
            try:
                await self.send_chunks(chunks)
            finally:
                close_chunks(chunks)
        if authenticator is not None and authenticator.close_after_response:
            raise ConnectionClosed("authentication failed")

    async def _raw_sasl_token(self, authenticator: SaslAuthenticator, frame: bytearray) -> None:
        """After a v0 SaslHandshake the client sends bare size-prefixed tokens and gets bare
        size-prefixed answers; a failure closes the connection without one (as Kafka)."""
        response = await authenticator.raw_token(bytes(frame))
        if response is None:
            await trio.sleep(authenticator.settings.failure_delay_ms / 1000)
            raise ConnectionClosed("authentication failed")
        await self._send_buffers([len(response).to_bytes(4, "big") + response])

    async def send_chunks(self, chunks: list[Chunk]) -> None:
        """Send the chunks in order: memory chunks gathered into one writev, file regions up to
        _INLINE_FILE_BYTES read into it too (one syscall for a small fetch response), larger
        regions with sendfile, streamed chunks a piece at a time."""
        pending: list[Chunk] = []
        for chunk in chunks:
            if isinstance(chunk, StreamedChunk):
                if pending:
                    await self._send_buffers(pending)
                    pending = []
                await self._send_streamed(chunk)
            elif isinstance(chunk, FileRegion):
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

    async def _send_streamed(self, chunk: StreamedChunk) -> None:
        """Produce a piece only when the listener's unsent pieces leave room, then send it.
        Producing one is CPU work (down-conversion, milliseconds for a piece, more for a large
        compressed batch): it runs in a worker thread, so the event loop gets its turns at
        the interpreter's switch interval meanwhile."""
        unsent = self.unsent
        self.streamed = True
        while True:
            await unsent.wait_for_room()
            piece = await trio.to_thread.run_sync(next, chunk.pieces, None)
            if piece is None:
                return
            self.unsent_held = len(piece)
            unsent.hold(self.unsent_held)
            try:
                await self._send_buffers([piece])
            finally:
                unsent.release(self.unsent_held)
                self.unsent_held = 0
            del piece

    async def _wait_writable(self) -> None:
        """The client has not taken what was sent: wait, counted as idle time."""
        self.send_stalled = True
        try:
            await trio.lowlevel.wait_writable(self.sock)
        finally:
            self.send_stalled = False
        self.last_active = time.monotonic()

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
                await self._wait_writable()
                sent = 0

    async def _send_file(self, region: FileRegion) -> None:
        offset, remaining = region.offset, region.length
        fd = self.fd
        while remaining > 0:
            try:
                sent = os.sendfile(fd, region.fd, offset, remaining)
            except BlockingIOError:
                await self._wait_writable()
                continue
            if sent == 0:
                raise ConnectionClosed("file shrank under an in-flight fetch")
            offset += sent
            remaining -= sent


class TlsConnection(Connection):
    """A connection on an SSL / SASL_SSL listener: the TLS handshake first (a client certificate
    gives the principal, mapped by ssl.principal.mapping.rules), then the same request loop
    through trio's SSLStream. File regions are read and encrypted (no sendfile for TLS, as in
    Kafka)."""

    _FILE_PIECE = 256 * 1024

    def __init__(self, broker: "RequestDispatcher", sock: trio.socket.SocketType, unsent: UnsentBytes | None,
                 security: "ListenerSecurity") -> None:
        super().__init__(broker, sock, unsent, security)
        assert security.ssl_context is not None
        self.security = security
        self.stream = trio.SSLStream(trio.SocketStream(sock), security.ssl_context, server_side=True)

    async def serve(self) -> None:
        from kafkacompat.security.listeners import HANDSHAKE_TIMEOUT_SECONDS
        from kafkacompat.security.tls import certificate_principal

        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_SECONDS):
                await self.stream.do_handshake()
            self.principal = certificate_principal(self.stream, self.security.principal_mapper)
            if self.principal is not ANONYMOUS:
                log.info("TLS client certificate of %s on listener %s: %s", self.describe(), self.listener_name,
                         self.principal)
        except (trio.BrokenResourceError, trio.TooSlowError, trio.ClosedResourceError, OSError, ValueError) as exc:
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
            reason = "no handshake within %.0f s" % HANDSHAKE_TIMEOUT_SECONDS if isinstance(exc, trio.TooSlowError) \
                else f"{type(cause).__name__}: {cause}"
            log.warning("Closing %s on listener %s: TLS handshake failed: %s", self.describe(), self.listener_name,
                        reason)
            self.sock.close()
            self.decoder.close()
            return
        await super().serve()

    async def _read_frame(self) -> bytearray | None:
        decoder = self.decoder
        while True:
            frame = decoder.next_frame()
            if frame is not None:
                return frame
            view = decoder.writable()
            data = await self.stream.receive_some(len(view))
            self._waited = True
            if not data:
                if decoder.has_partial_frame():
                    log.info("%s closed in the middle of a request", self.describe())
                return None
            view[:len(data)] = data
            decoder.received(len(data))

    async def _send_buffers(self, buffers: list[Chunk]) -> None:
        await self._send(buffers[0] if len(buffers) == 1 else b"".join(buffers))  # type: ignore[arg-type]

    async def _send_file(self, region: FileRegion) -> None:
        offset, remaining = region.offset, region.length
        while remaining > 0:
            data = os.pread(region.fd, min(remaining, self._FILE_PIECE), offset)
            if not data:
                raise ConnectionClosed("file shrank under an in-flight fetch")
            await self._send(data)
            offset += len(data)
            remaining -= len(data)

    async def _send(self, data: "bytes | bytearray | memoryview") -> None:
        """Send in pieces, each counted as idle time until it is taken: a client that stops
        reading is closed after connections.max.idle.ms, as on a plain connection."""
        view = memoryview(data).cast("B")
        for start in range(0, len(view), self._FILE_PIECE):
            self.send_stalled = True
            try:
                await self.stream.send_all(view[start:start + self._FILE_PIECE])
            finally:
                self.send_stalled = False
            self.last_active = time.monotonic()


class ConnectionLimits:
    """The live connections of a listener, per client address, and Kafka's limits on them."""

    def __init__(self, broker: "RequestDispatcher") -> None:
        self.broker = broker
        self.connections: set[Connection] = set()
        self.per_ip: dict[str, int] = {}
        self._slot_freed = trio.Event()
        self.unsent = UnsentBytes()
        self._closed_since_trim = 0
        self._closed_since_collect = 0
        self._burst_closed = trio.Event()

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
            self._closed_since_trim += 1
            self._closed_since_collect += 1
            if self._closed_since_collect >= _COLLECT_AFTER_CLOSES:
                self._burst_closed.set()
            if self._closed_since_trim >= _TRIM_AFTER_CLOSES or connection.streamed:
                self._closed_since_trim = 0
                _return_freed_memory()

    async def wait_for_slot(self) -> None:
        """Kafka's Acceptor blocks while max.connections are open."""
        warned = False
        while len(self.connections) >= self.broker.config.max_connections:
            if not warned:
                log.warning("%d connections are open, the configured max.connections: new connections "
                            "wait until one closes", len(self.connections))
                warned = True
            await self._slot_freed.wait()

    async def return_memory_after_bursts(self) -> None:
        while True:
            await self._burst_closed.wait()
            seen = -1
            while seen != self._closed_since_collect:  # wait for the burst to end
                seen = self._closed_since_collect
                await trio.sleep(_QUIET_BEFORE_COLLECT_S)
            self._closed_since_collect = 0
            self._burst_closed = trio.Event()
            gc.collect()
            _return_freed_memory()

    async def close_idle(self) -> None:
        """Close connections idle for connections.max.idle.ms (Kafka's Selector does it on poll)."""
        while True:
            idle_ms = self.broker.config.connections_max_idle_ms
            await trio.sleep(max(idle_ms / 1000 / 4, 0.05) if idle_ms >= 0 else 60)
            if self._closed_since_trim:
                self._closed_since_trim = 0
                _return_freed_memory()
            if idle_ms < 0:
                continue
            cutoff = time.monotonic() - idle_ms / 1000
            for connection in [c for c in self.connections
                               if (not c.busy or c.send_stalled) and c.last_active < cutoff]:
                if connection.cancel_scope is not None and not connection.cancel_scope.cancel_called:
                    log.info("Closing %s: idle for more than connections.max.idle.ms (%d ms)",
                             connection.describe(), idle_ms)
                    # Its task is waiting for bytes; it ends and closes its own socket (never
                    # close a descriptor another task may still use).
                    connection.cancel_scope.cancel()


class ConnectionRateGate:
    """One listener's view of the connection creation rates (quotas.ConnectionRateQuotas)."""

    def __init__(self, broker: "RequestDispatcher", rates: "ConnectionRateQuotas", listener: str) -> None:
        self.config = broker.config
        self.rates = rates
        self.listener = listener
        self.exempt = listener == self.config.inter_broker_listener.name and len(self.config.served_listeners) > 1
        self._waits = 0
        self._refusals = 0

    def _listener_bound(self) -> float:
        config = self.config
        key = "max.connection.creation.rate"
        return config.listener_value(self.listener, key) if config.set_for_listener(self.listener, key) \
            else float("inf")

    async def wait(self) -> None:
        """Kafka's Acceptor waits out the broker's and the listener's connection creation rate."""
        delay_ms = self.rates.accept_delay_ms(self.listener, self._listener_bound(),
                                              self.config.max_connection_creation_rate, self.exempt,
                                              trio.current_time())
        if delay_ms:
            self._waits += 1
            if self._waits == 1 or self._waits % 1000 == 0:
                log.warning("New connections on listener %s arrive faster than max.connection.creation.rate: "
                            "each waits up to %d ms before it is accepted (%d waits so far)", self.listener,
                            delay_ms, self._waits)
            await trio.sleep(delay_ms / 1000)

    def refused_for_ms(self, sock: trio.socket.SocketType) -> int:
        """A connection from an address over its connection_creation_rate: how long to hold it
        before closing it (0: it is accepted)."""
        try:
            host, port = sock.getpeername()[:2]
        except OSError:
            return 0
        refused_ms = self.rates.ip_throttle_ms(host, self.listener, self.exempt, trio.current_time())
        if refused_ms:
            self._refusals += 1
            if self._refusals == 1 or self._refusals % 1000 == 0:
                log.info("Refused a connection from %s:%s on listener %s: its address is over its "
                         "connection_creation_rate quota; closing it in %d ms (%d refused so far)",
                         host, port, self.listener, refused_ms, self._refusals)
        return refused_ms


async def _close_after(sock: trio.socket.SocketType, seconds: float) -> None:
    """Kafka closes a throttled connection only after its throttle time, so the client backs off."""
    try:
        await trio.sleep(seconds)
    finally:
        sock.close()


async def serve_listener(broker: "RequestDispatcher", host: str, port: int, *, accepting: trio.Event | None = None,
                         security: "ListenerSecurity | None" = None, rates: "ConnectionRateQuotas | None" = None,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections forever; each runs in its own task in this nursery. Started once the
    port is bound; with ``accepting``, nothing is accepted before it is set (clients that connect
    meanwhile wait in the backlog), so no request can reach a broker that is not ready. With
    ``rates``, Kafka's connection creation rates apply (ConnectionRateGate)."""
    listener = trio.socket.socket(
        stdlib_socket.AF_INET6 if ":" in host else stdlib_socket.AF_INET, stdlib_socket.SOCK_STREAM
    )
    listener.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
    await listener.bind((host, port))
    listener.listen(1024)
    bound_port = listener.getsockname()[1]
    limits = ConnectionLimits(broker)
    exhaustion = _AcceptExhaustion(limits)
    listener_name = security.listener.name if security is not None else broker.config.listener_name
    gate = ConnectionRateGate(broker, rates, listener_name) if rates is not None else None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(limits.close_idle)
        nursery.start_soon(limits.return_memory_after_bursts)
        task_status.started(bound_port)
        with listener:
            if accepting is not None:
                await accepting.wait()
            while True:
                await limits.wait_for_slot()
                sock = await _accept(listener, exhaustion)
                if gate is not None:
                    await gate.wait()
                    refused_ms = gate.refused_for_ms(sock)
                    if refused_ms:
                        nursery.start_soon(_close_after, sock, refused_ms / 1000)
                        continue
                try:
                    sock.setsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_NODELAY, 1)
                except OSError:
                    sock.close()  # reset before we got to it
                    continue
                if security is not None and security.ssl_context is not None:
                    connection: Connection = TlsConnection(broker, sock, limits.unsent, security)
                else:
                    connection = Connection(broker, sock, limits.unsent, security)
                if limits.admit(connection):
                    nursery.start_soon(_serve_counted, connection, limits)
                else:
                    sock.close()


async def _accept(listener: trio.socket.SocketType, exhaustion: "_AcceptExhaustion") -> trio.socket.SocketType:
    """The next connection. Out of descriptors or kernel memory: wait for connections to close
    and retry (the clients wait in the listen backlog meanwhile)."""
    while True:
        try:
            sock, _ = await listener.accept()
        except OSError as exc:
            if exc.errno in _ACCEPT_IGNORED_ERRNOS:
                continue
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            exhaustion.failed(exc)
            await trio.sleep(_ACCEPT_RETRY_SECONDS)
            continue
        exhaustion.accepted()
        return sock


class _AcceptExhaustion:
    """Says what happened and what to do once per burst of accept failures (a burst ends after
    _ACCEPT_QUIET_SECONDS without one), and once that accepting resumed."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.last_failure = -_ACCEPT_QUIET_SECONDS
        self.started: float | None = None

    def failed(self, exc: OSError) -> None:
        now = time.monotonic()
        if now - self.last_failure > _ACCEPT_QUIET_SECONDS:
            self.started = now
            log.warning(
                "Cannot accept new connections: %s (%d connections open). New clients wait in the listen "
                "backlog until connections close; raise the open-files limit (ulimit -n, systemd's "
                "LimitNOFILE=) or lower max.connections", os.strerror(exc.errno), len(self.limits.connections))
        self.last_failure = now

    def accepted(self) -> None:
        if self.started is not None:
            log.warning("Accepting connections again, %.1f s after accept first failed", time.monotonic() - self.started)
            self.started = None


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
