"""ZooKeeperStore: the MetadataStore over a real ZooKeeper, through kazoo (imported lazily: only
``--zookeeper`` / ``zookeeper.connect`` pays for it).

kazoo is threaded: every blocking call runs in a Trio worker thread (``trio.to_thread``), and
kazoo's watch and connection-state callbacks (on kazoo's own threads) are handed to the Trio
loop with the loop's token (``run_sync_soon``). The event loop never blocks on ZooKeeper.

A chroot (``host:port/kafka``) is handled by kazoo: every path here is relative to it, and the
chroot node is created at start if missing (as Kafka does).

ZooKeeper going away never blocks a caller for long: while the connection is down an operation
waits for it at most ``zookeeper.connection.timeout.ms`` and then raises StoreUnavailableError
(nothing is queued behind the outage, so nothing runs late when it ends); a request sent on a
connection that then goes quiet is given up after the session timeout; a write whose connection
drops with it in flight is settled once reconnected (applied, or sent again). The worker threads are
abandoned on cancellation (they are daemon threads), so a cancel scope - an admin request's
deadline, a shutdown - always ends the wait. kazoo reconnects on its own, every second at most.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Callable, TypeVar

import trio

from kafkacompat.controller.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    StoreError,
    StoreUnavailableError,
    Watch,
    _call_soon,
)

log = logging.getLogger("kafkacompat.zookeeper")

CLOSE_TIMEOUT_SECONDS = 5.0


class _ConnectionLost(StoreUnavailableError):
    """The connection dropped with the request in flight: a read can simply be sent again."""


def _translate(exc: Exception) -> Exception:
    from kazoo import exceptions as kz

    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(str(exc))
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(str(exc))
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError(str(exc))
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(str(exc))
    if isinstance(exc, kz.ConnectionLoss):
        return _ConnectionLost("ZooKeeper connection lost (ConnectionLoss)")
    if isinstance(exc, (kz.SessionExpiredError, kz.ConnectionClosedError, kz.OperationTimeoutError)):
        return StoreUnavailableError(f"ZooKeeper connection lost ({type(exc).__name__})")
    return StoreError(f"{type(exc).__name__}: {exc}")


def _reconnect_policy():
    """Reconnect forever, at most about a second apart, as ZooKeeper's Java client (Kafka's) does.
    kazoo's default doubles its delay up to an hour, so a broker cut off from ZooKeeper for a
    few minutes would stay away for minutes more after the network healed. The same policy
    paces the re-reads of kazoo's watch recipes (its command retry)."""
    from kazoo.retry import KazooRetry

    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)


# Requests pipelined in one worker thread's call, which must be answered within the session
# timeout: kazoo spends ~0.5 ms of Python per request, so 3,000 nodes at once took over 1.5 s.
PIPELINE_CHUNK = 250

_Item = TypeVar("_Item")


def _chunks(items: list[_Item]) -> list[list[_Item]]:
    return [items[i:i + PIPELINE_CHUNK] for i in range(0, len(items), PIPELINE_CHUNK)]


class _DataWatcher:
    """One data watch kept armed: ZooKeeper's watches fire once, so ``fired`` (on kazoo's
    callback thread) sends an ``exists`` with the watch again and tells the Trio loop only once
    ZooKeeper has answered it. Any change made after the callback runs therefore fires the
    watch again, even one from another session that ZooKeeper would otherwise apply before a
    re-arming request still in flight. The answers of many watchers are pipelined, so a multi
    that changed many nodes costs one round trip, not one per node. ``exists`` watches a node
    whether or not it exists (created, changed, deleted)."""

    def __init__(self, store: "ZooKeeperStore", path: str, watch: Watch, callback: Callable[[], None]) -> None:
        self.store = store
        self.path = path
        self.watch = watch
        self.callback = callback

    def arm(self) -> None:
        """Set the watch again; the callback runs once it is set (or cannot be, while disconnected)."""
        client = self.store.client
        if self.watch.cancelled or client is None:
            return
        client.exists_async(self.path, watch=self.fired).rawlink(self._armed)

    def _armed(self, result) -> None:
        if result.successful():
            self._notify()
            return
        client = self.store.client
        # The lock spans the check and the add: a reconnection's re-arming pass (_rearm_watches)
        # cannot run between them and miss this watcher, which would stay unarmed until the next one.
        with self.store._unarmed_lock:
            connected = client is not None and client.connected
            if not connected:
                self.store._unarmed.add(self)  # armed again (and notified again) by the next reconnection
        if connected:
            self.arm()
        else:
            self._notify()

    def _notify(self) -> None:
        _call_soon(self.store._token, self.watch, self.callback)

    def fired(self, _event) -> None:
        """A change, a deletion, a creation, or the session lost (kazoo calls every watch then)."""
        if self.watch.cancelled:
            return
        self.arm()


class ZooKeeperStore(MetadataStore):
    def __init__(self, connect: str, *, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.client = None
        self._token = None
        self._session_listeners: list[Callable[[], None]] = []
        self._reconnect_listeners: list[Callable[[], None]] = []
        self._watches: list[object] = []
        self._unarmed: set[_DataWatcher] = set()  # data watches to arm again once connected
        self._unarmed_lock = threading.Lock()  # kazoo's completion thread adds, the Trio thread takes
        self._connected = trio.Event()  # replaced by a fresh one whenever the connection drops
        self._disconnected = False

    async def start(self) -> "ZooKeeperStore":
        from kazoo.client import KazooClient

        hosts, _, chroot = self.connect.partition("/")
        self._token = trio.lowlevel.current_trio_token()
        if chroot:
            # Create the chroot with a client outside it, as Kafka's ZooKeeper client does.
            await trio.to_thread.run_sync(self._ensure_chroot, hosts, "/" + chroot)
        self.client = KazooClient(hosts=self.connect, timeout=self.session_timeout_ms / 1000,
                                  connection_retry=_reconnect_policy(), command_retry=_reconnect_policy())
        self.client.add_listener(self._state_changed)
        client = self.client
        try:
            await trio.to_thread.run_sync(lambda: client.start(timeout=self.connection_timeout_ms / 1000),
                                          abandon_on_cancel=True)
        except Exception as exc:
            trio.lowlevel.start_thread_soon(client.stop, lambda _result: None)  # stop its reconnecting
            raise StoreUnavailableError(f"cannot connect to ZooKeeper at {self.connect}: {exc}") from exc
        self._connected.set()
        log.info("Connected to ZooKeeper at %s (session 0x%x)", self.connect, self.session_id)
        return self

    def _ensure_chroot(self, hosts: str, chroot: str) -> None:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000, connection_retry=_reconnect_policy())
        client.start(timeout=self.connection_timeout_ms / 1000)
        try:
            client.ensure_path(chroot)
        finally:
            client.stop()
            client.close()

    def _state_changed(self, state) -> None:
        """kazoo's connection listener (on kazoo's thread): handed to the Trio loop in order."""
        _call_soon(self._token, Watch(), lambda: self._on_state(state))

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.CONNECTED:
            reconnected = self._disconnected
            if reconnected:
                log.info("Reconnected to ZooKeeper at %s (session 0x%x)", self.connect, self.session_id)
            self._disconnected = False
            self._connected.set()
            self._rearm_watches()
            if reconnected:
                for callback in self._reconnect_listeners:
                    _call_soon(self._token, Watch(), callback)
            return
        self._disconnected = True
        if self._connected.is_set():
            self._connected = trio.Event()
        if state == KazooState.LOST:
            if self.client is not None:
                log.warning("ZooKeeper session lost (expired or closed); this broker's ephemeral nodes are gone "
                            "and it registers again once reconnected")
            for callback in self._session_listeners:
                _call_soon(self._token, Watch(), callback)
        elif state == KazooState.SUSPENDED:
            log.warning("Connection to ZooKeeper at %s lost; retrying. Metadata operations (admin requests, "
                        "ISR changes, leader elections) fail until it is back; produce and fetch go on",
                        self.connect)

    @property
    def session_id(self) -> int:
        if self.client is None:
            return 0
        session = self.client.client_id
        return session[0] if session else 0

    async def _wait_connected(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            await self._connected.wait()
            return
        raise StoreUnavailableError(
            f"ZooKeeper at {self.connect} has been unreachable for at least "
            f"{self.connection_timeout_ms / 1000:g} s (zookeeper.connection.timeout.ms)")

    async def _read(self, fn, *args, **kwargs):
        """A read, sent again when the connection drops under it (as Kafka's ZooKeeper client
        does), until zookeeper.connection.timeout.ms has passed."""
        deadline = trio.current_time() + self.connection_timeout_ms / 1000
        while True:
            try:
                return await self._run(fn, *args, deadline=deadline, **kwargs)
            except _ConnectionLost:
                if trio.current_time() >= deadline:
                    raise

    async def _run(self, fn, *args, deadline: float | None = None, **kwargs):
        """``fn`` in a worker thread once connected, for at most the session timeout. A write
        whose connection drops with it in flight raises _ConnectionLost (settled by ``_write``)."""
        if self.client is None:
            raise StoreUnavailableError("the ZooKeeper session is closed")
        await self._wait_connected(deadline or trio.current_time() + self.connection_timeout_ms / 1000)
        timeout = self.session_timeout_ms / 1000
        with trio.move_on_after(timeout):
            try:
                return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)
            except StoreError:
                raise
            except Exception as exc:
                raise _translate(exc) from exc
        raise StoreUnavailableError(f"ZooKeeper at {self.connect} did not answer within {timeout:g} s; "
                                    "the operation may or may not have been applied")

    async def get(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._read(self.client.get, path)
        return data or b"", stat.version

    async def get_many(self, paths: list[str]) -> dict[str, tuple[bytes, int] | None]:
        """All the reads sent at once (kazoo's get_async) and collected in one worker thread:
        one round trip's worth of latency instead of one per node."""
        def run(chunk: list[str]) -> dict[str, tuple[bytes, int] | None]:
            from kazoo.exceptions import NoNodeError as KazooNoNode

            pending = [(path, self.client.get_async(path)) for path in chunk]
            found: dict[str, tuple[bytes, int] | None] = {}
            for path, result in pending:
                try:
                    data, stat = result.get()
                    found[path] = (data or b"", stat.version)
                except KazooNoNode:
                    found[path] = None
            return found

        found: dict[str, tuple[bytes, int] | None] = {}
        for chunk in _chunks(paths):
            found.update(await self._read(run, chunk))
        return found

    async def exists(self, path: str) -> int | None:
        stat = await self._read(self.client.exists, path)
        return None if stat is None else stat.version

    async def children(self, path: str) -> list[str]:
        return sorted(await self._read(self.client.get_children, path))

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, makepath: bool = True) -> str:
        send = lambda: self._run(self.client.create, path, bytes(data), ephemeral=ephemeral,  # noqa: E731
                                 sequence=sequential, makepath=makepath)
        if sequential:
            return await send()  # a lost sequential create cannot be told from another's
        return await self._write(send, lambda: self._created(path, data, ephemeral), path)

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        async def send() -> int:
            return (await self._run(self.client.set, path, bytes(data), version=version)).version

        return await self._write(send, lambda: self._was_set(path, data, version), path)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        await self._write(lambda: self._run(self.client.delete, path, version=version, recursive=recursive),
                          lambda: self._deleted(path), path)

    async def multi(self, ops) -> None:
        def run() -> None:
            from kazoo.exceptions import RolledBackError

            transaction = self.client.transaction()
            for op in ops:
                if op.kind == "check":
                    transaction.check(op.path, op.version)
                elif op.kind == "create":
                    transaction.create(op.path, bytes(op.data))
                elif op.kind == "set":
                    transaction.set_data(op.path, bytes(op.data), op.version)
                elif op.kind == "delete":
                    transaction.delete(op.path, op.version)
                else:
                    raise ValueError(f"unknown multi op {op.kind!r}")
            results = transaction.commit()
            for result in results:
                if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                    raise result

        await self._write(lambda: self._run(run), lambda: self._multi_applied(ops),
                          ", ".join(op.path for op in ops))

    async def _write(self, send, applied, what: str):
        """A write whose connection drops with the request in flight may or may not have been
        applied. As Kafka's ZooKeeper client retries such requests once reconnected, the write is
        settled after the reconnection: if its effect is there it succeeded (``applied`` returns
        the result, or None when the effect is absent), else it is sent again, until
        zookeeper.connection.timeout.ms has passed."""
        deadline = trio.current_time() + self.connection_timeout_ms / 1000
        try:
            return await send()
        except _ConnectionLost:
            pass
        while True:
            try:
                result = await self._read_at(applied, deadline)
                if result is not None:
                    log.info("A ZooKeeper write to %s was in flight when the connection dropped; "
                             "it had been applied", what)
                    return result[0]
                return await send()
            except _ConnectionLost:
                if trio.current_time() >= deadline:
                    raise

    async def _read_at(self, applied, deadline: float):
        await self._wait_connected(deadline)
        return await applied()

    async def _created(self, path: str, data: bytes, ephemeral: bool) -> tuple[str] | None:
        stat_and_data = await self._stat(path)
        if stat_and_data is None:
            return None
        found, stat = stat_and_data
        if found != bytes(data) or (ephemeral and stat.ephemeralOwner != self.session_id):
            return None  # somebody else's node: sending again reports NodeExists
        return (path,)

    async def _was_set(self, path: str, data: bytes, version: int) -> tuple[int] | None:
        stat_and_data = await self._stat(path)
        if stat_and_data is None:
            return None
        found, stat = stat_and_data
        if found == bytes(data) and (version == -1 or stat.version == version + 1):
            return (stat.version,)
        return None

    async def _deleted(self, path: str) -> tuple[None] | None:
        return (None,) if await self._stat(path) is None else None

    async def _multi_applied(self, ops) -> tuple[None] | None:
        for op in ops:
            if op.kind == "create" and await self._created(op.path, op.data, False) is None:
                return None
            if op.kind == "set" and await self._was_set(op.path, op.data, op.version) is None:
                return None
            if op.kind == "delete" and await self._deleted(op.path) is None:
                return None
        return (None,)

    async def _stat(self, path: str):
        from kazoo.exceptions import NoNodeError as KazooNoNode

        def run():
            try:
                data, stat = self.client.get(path)
            except KazooNoNode:
                return None
            return data or b"", stat

        return await self._run(run)

    async def ephemeral_owner(self, path: str) -> int | None:
        data, stat = await self._read(self.client.get, path)
        return stat.ephemeralOwner or None

    async def watch(self, path: str, callback: Callable[[], None], *, children: bool = False) -> Watch:
        """A children watch is kazoo's ChildrenWatch (it re-registers itself after every event
        and after a reconnection; it needs the node, so that is created first, empty and
        persistent). A data watch is a plain ZooKeeper watch that ``_DataWatcher`` re-arms the
        moment it fires, as Kafka's ZooKeeperClient does: kazoo's DataWatch re-reads the node
        with a blocking get on kazoo's one callback thread for every event, so the events of a
        multi that changed many nodes reached the broker one round trip apart. Either calls
        ``callback`` once when registered (as DataWatch did)."""
        watch = Watch()
        token = self._token

        def forward(*_args) -> bool | None:
            if watch.cancelled:
                return False  # tells kazoo to stop watching
            _call_soon(token, watch, callback)
            return None

        def register() -> None:
            if children:
                self.client.ensure_path(path)
                self._watches.append(self.client.ChildrenWatch(path, forward, send_event=True))
                return
            watcher = _DataWatcher(self, path, watch, callback)
            self.client.exists(path, watch=watcher.fired)
            self._watches.append(watcher)

        await self._run(register)
        if not children:
            _call_soon(token, watch, callback)
        return watch

    async def watch_many(self, watches: list[tuple[str, Callable[[], None]]]) -> list[Watch]:
        """Data watches registered in one worker thread, their ``exists`` requests pipelined: a
        topic of thousands of partitions is one round trip's worth of waiting, not thousands."""
        token = self._token
        watchers = [_DataWatcher(self, path, Watch(), callback) for path, callback in watches]

        def register(chunk: list[_DataWatcher]) -> None:
            pending = [self.client.exists_async(w.path, watch=w.fired) for w in chunk]
            for result in pending:
                result.get()
            self._watches.extend(chunk)

        for chunk in _chunks(watchers):
            await self._run(register, chunk)
        for watcher in watchers:
            _call_soon(token, watcher.watch, watcher.callback)
        return [watcher.watch for watcher in watchers]

    def _rearm_watches(self) -> None:
        """After a reconnection: the data watches whose re-arming failed while the session was
        being replaced (kazoo refuses requests then) are armed again, and their callbacks run
        once armed: a change made while they were not armed fired nothing."""
        with self._unarmed_lock:
            unarmed, self._unarmed = self._unarmed, set()
        for watcher in unarmed:
            watcher.arm()

    def add_session_listener(self, callback: Callable[[], None]) -> None:
        self._session_listeners.append(callback)

    def add_reconnect_listener(self, callback: Callable[[], None]) -> None:
        self._reconnect_listeners.append(callback)

    async def close(self) -> None:
        """End the session (its ephemeral nodes go at once). With ZooKeeper unreachable there is
        nothing to wait for: kazoo is told to stop in the background and the session expires on
        the server."""
        client, self.client = self.client, None
        if client is None:
            return

        def stop() -> None:
            client.stop()
            client.close()

        # kazoo registers an atexit hook that joins its worker threads; while ZooKeeper is
        # unreachable one of them can be blocked re-reading a watched node, and the hook then
        # holds the process at exit for as long as the outage lasts. The threads are daemons and
        # hold nothing once the session is over: the process need not wait for them.
        atexit.unregister(client.handler.stop)
        if not self._connected.is_set():
            trio.lowlevel.start_thread_soon(stop, lambda _result: None)
            return
        with trio.move_on_after(CLOSE_TIMEOUT_SECONDS):
            await trio.to_thread.run_sync(stop, abandon_on_cancel=True)
            return
        log.warning("The ZooKeeper session did not close within %g s; it expires on the server after "
                    "zookeeper.session.timeout.ms", CLOSE_TIMEOUT_SECONDS)

    def expire_session_for_tests(self) -> None:
        """Force a real session expiry (tests): kazoo's client closes its socket; a second client
        with the same session id and password closing it makes the server expire it."""
        from kazoo.client import KazooClient

        session_id, password = self.client.client_id
        other = KazooClient(hosts=self.connect.partition("/")[0], client_id=(session_id, password))
        other.start(timeout=10)
        other.stop()
        other.close()
