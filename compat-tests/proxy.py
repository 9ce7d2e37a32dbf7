"""A loopback TCP proxy between Kafka clients and a broker that loses Produce responses.

It reads Kafka framing in both directions. Client -> broker, it notes the correlation ids of
Produce requests (api key 0) and forwards every request untouched. Broker -> client, it forwards
responses, except that every ``drop_every``-th Produce response is swallowed and the connection
closed: the batch is written but the client never hears so, and must retry it. Every
``reset_every``-th Produce request is forwarded and then the connection reset at once (RST),
before its response can come back. While the broker is down (refused connections) clients are
disconnected straight away, so they keep retrying through the proxy.

Since the broker must advertise the proxy's address, start it with
``--set advertised.listeners=PLAINTEXT://127.0.0.1:<proxy.port>``. Plain threads, no event loop:
the clients under test run their own.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass

PRODUCE = 0
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


@dataclass
class ProxyStats:
    connections: int = 0
    produce_requests: int = 0
    dropped_responses: int = 0
    resets: int = 0
    refused: int = 0


class _Link:
    """One client connection and its broker connection; closing either closes both."""

    def __init__(self, proxy: "FaultyProxy", client: socket.socket, broker: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.broker = broker
        self.produce_ids: set[int] = set()
        self.lock = threading.Lock()
        self.closed = False

    def close(self, *, reset: bool = False) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.broker):
            try:
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def client_to_broker(self) -> None:
        try:
            while True:
                frame = _read_frame(self.client)
                if frame is None:
                    break
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
                reset = False
                if api_key == PRODUCE:
                    with self.lock:
                        self.produce_ids.add(correlation_id)
                    reset = self.proxy._count_produce_request()
                self.broker.sendall(frame)
                if reset:
                    self.close(reset=True)
                    break
        except OSError:
            pass
        self.close()

    def broker_to_client(self) -> None:
        try:
            while True:
                frame = _read_frame(self.broker)
                if frame is None:
                    break
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                with self.lock:
                    is_produce = correlation_id in self.produce_ids
                    self.produce_ids.discard(correlation_id)
                if is_produce and self.proxy._should_drop_response():
                    break  # swallow it and close: the client must retry a batch that is written
                self.client.sendall(frame)
        except OSError:
            pass
        self.close()


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(sock: socket.socket) -> bytes | None:
    """One whole frame, size prefix included; None at EOF."""
    prefix = _read_exact(sock, 4)
    if prefix is None:
        return None
    (size,) = struct.unpack(">i", prefix)
    body = _read_exact(sock, size)
    return None if body is None else prefix + body


class FaultyProxy:
    def __init__(self, upstream_port: int | None = None, *, drop_every: int = 0, reset_every: int = 0) -> None:
        self.upstream_port = upstream_port
        self.drop_every = drop_every
        self.reset_every = reset_every
        self.faults = True
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._produce_responses = 0
        self._links: list[_Link] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self._stopped = False
        self._thread = threading.Thread(target=self._accept_loop, name="faulty-proxy", daemon=True)

    def __enter__(self) -> "FaultyProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _count_produce_request(self) -> bool:
        """Count a Produce request; True when this one's connection is to be reset."""
        with self._lock:
            self.stats.produce_requests += 1
            reset = self.faults and self.reset_every and self.stats.produce_requests % self.reset_every == 0
            if reset:
                self.stats.resets += 1
            return bool(reset)

    def _should_drop_response(self) -> bool:
        with self._lock:
            self._produce_responses += 1
            drop = self.faults and self.drop_every and self._produce_responses % self.drop_every == 0
            if drop:
                self.stats.dropped_responses += 1
            return bool(drop)

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                broker = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
                broker.settimeout(None)
                broker.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                with self._lock:
                    self.stats.refused += 1
                client.close()  # broker down: the client reconnects and tries again
                continue
            link = _Link(self, client, broker)
            with self._lock:
                self.stats.connections += 1
                self._links = [existing for existing in self._links if not existing.closed] + [link]
            threading.Thread(target=link.client_to_broker, daemon=True).start()
            threading.Thread(target=link.broker_to_client, daemon=True).start()

    def close(self) -> None:
        self._stopped = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the proxy thread
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
