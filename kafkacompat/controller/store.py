"""The metadata store: a small tree of versioned nodes (ZooKeeper's model), the one interface
the controller and the brokers' metadata sync run on.

Two implementations: ``EmbeddedStore`` (this module; in-process, for the single-node default and
for in-process clusters such as ``dev-cluster``) and ``ZooKeeperStore`` (``zookeeper.py``, over
kazoo). Every operation is an ``async`` method; watches call a plain callback on the Trio thread
that registered them (scheduled with ``run_sync_soon``, never from inside a store operation), so
consumers nudge an event and re-read (level-triggered: a missed or merged notification is harmless).

Node versions are ZooKeeper's ``version`` (0 at creation, +1 on every set): compare-and-set
passes the version read; a mismatch raises ``BadVersionError``.

Each ``EmbeddedStore`` object is one *session* over a shared ``EmbeddedTree``: ephemeral nodes
belong to the session and vanish when it closes or expires (``expire_session()`` simulates a
ZooKeeper session expiry in tests; the session then continues as a new one, as kazoo reconnects).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import trio

log = logging.getLogger("kafkacompat.store")


class StoreError(Exception):
    pass


class StoreUnavailableError(StoreError):
    """The store cannot be reached (ZooKeeper down, connection lost, no answer in time): the
    operation may or may not have been applied; retry once the store is back."""


class NoNodeError(StoreError):
    pass


class NodeExistsError(StoreError):
    pass


class BadVersionError(StoreError):
    pass


class NotEmptyError(StoreError):
    pass


class StoreWriteError(StoreError):
    """The embedded store could not save a change to its file (disk full or failing); the change
    was undone, so the tree is as before and a retry may succeed once the disk has room."""


@dataclass(frozen=True)
class Op:
    """One operation of ``MetadataStore.multi``: kind is "check" (the node's version must be
    ``version``), "create", "set" (``version`` -1: any) or "delete"."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1

    @classmethod
    def check(cls, path: str, version: int) -> "Op":
        return cls("check", path, b"", version)

    @classmethod
    def create(cls, path: str, data: bytes = b"") -> "Op":
        return cls("create", path, data)

    @classmethod
    def set(cls, path: str, data: bytes, version: int = -1) -> "Op":
        return cls("set", path, data, version)

    @classmethod
    def delete(cls, path: str, version: int = -1) -> "Op":
        return cls("delete", path, b"", version)


class Watch:
    """A registered watch; ``cancel()`` stops its callbacks."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class MetadataStore(ABC):
    """Paths are absolute, '/'-separated, without a trailing slash. Data is bytes."""

    @abstractmethod
    async def get(self, path: str) -> tuple[bytes, int]:
        """(data, version); raises NoNodeError."""

    @abstractmethod
    async def exists(self, path: str) -> int | None:
        """The node's version, or None when it does not exist."""

    @abstractmethod
    async def children(self, path: str) -> list[str]:
        """Child names, sorted; raises NoNodeError."""

    @abstractmethod
    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, makepath: bool = True) -> str:
        """Create a node (parents too with makepath, as persistent nodes); returns its path (with the
        10-digit suffix for a sequential node). Raises NodeExistsError."""

    @abstractmethod
    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Compare-and-set: write when the version matches (-1: any); returns the new version.
        Raises NoNodeError, BadVersionError."""

    @abstractmethod
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """Raises NoNodeError, BadVersionError, NotEmptyError (children, not recursive)."""

    @abstractmethod
    async def multi(self, ops: list[Op]) -> None:
        """All the operations or none (ZooKeeper's multi): raises the error of the first that
        fails (BadVersionError, NoNodeError, NodeExistsError, NotEmptyError). Creates are
        persistent and need their parent."""

    @abstractmethod
    async def watch(self, path: str, callback: Callable[[], None], *, children: bool = False) -> Watch:
        """Call ``callback()`` on this Trio thread whenever the node's data (or, with children=True,
        its list of children) changes, it is created or deleted, and after a session loss.
        Persistent until cancelled. The callback must not block: nudge and re-read."""

    async def watch_many(self, watches: list[tuple[str, Callable[[], None]]]) -> list[Watch]:
        """A data watch per (path, callback), as ``watch``; a store with a network round trip per
        registration sends them all at once."""
        return [await self.watch(path, callback) for path, callback in watches]

    @abstractmethod
    def add_session_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` on the Trio thread after this session expired (its ephemerals are gone)."""

    def add_reconnect_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` on the Trio thread whenever the connection comes back after a drop (with
        the same session or a new one): a change made while it was down may have fired no watch,
        so a consumer that keeps a view resyncs it. An in-process store never disconnects."""

    @property
    @abstractmethod
    def session_id(self) -> int:
        """The current session; ``ephemeral_owner`` of the nodes it created."""

    @abstractmethod
    async def ephemeral_owner(self, path: str) -> int | None:
        """The session owning an ephemeral node, None for a persistent one; raises NoNodeError."""

    async def start(self) -> "MetadataStore":
        """Connect (and open the session); nothing to do for an in-process store."""
        return self

    async def close(self) -> None:
        """End the session (its ephemeral nodes go)."""

    # ---- helpers ------------------------------------------------------------------------------

    async def get_or_none(self, path: str) -> tuple[bytes, int] | None:
        try:
            return await self.get(path)
        except NoNodeError:
            return None

    async def get_json(self, path: str) -> tuple[dict, int] | None:
        found = await self.get_or_none(path)
        if found is None:
            return None
        data, version = found
        return (json.loads(data) if data else {}), version

    async def get_many(self, paths: list[str]) -> dict[str, tuple[bytes, int] | None]:
        """Several nodes at once (None for a missing one); ZooKeeper pipelines the reads."""
        return {path: await self.get_or_none(path) for path in paths}

    async def children_or_empty(self, path: str) -> list[str]:
        try:
            return await self.children(path)
        except NoNodeError:
            return []

    async def ensure_path(self, path: str) -> None:
        try:
            await self.create(path, b"", makepath=True)
        except NodeExistsError:
            pass


def encode_json(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _parent(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


def _check_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"bad store path {path!r}")


@dataclass
class _Node:
    data: bytes
    version: int = 0
    owner: int | None = None                      # session id for ephemeral nodes
    children: set[str] = field(default_factory=set)
    cversion: int = 0                             # sequential-node counter


class EmbeddedTree:
    """The shared node tree behind EmbeddedStore sessions; thread-safe (one lock). With a path,
    persistent nodes are saved there as JSON after every change (atomically), so the single node
    and dev-cluster keep their topics across restarts; ephemeral nodes never are."""

    def __init__(self, persist_path: Path | None = None) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._watches: list[tuple[str, bool, Watch, Callable[[], None], object]] = []
        self._session_ids = itertools.count(1)
        self._deferred = 0        # deferred_save() nesting
        self._dirty = False
        self.persist_path = Path(persist_path) if persist_path else None
        if self.persist_path is not None and self.persist_path.exists():
            self._load()

    # persistence ---------------------------------------------------------------------------------

    def _load(self) -> None:
        assert self.persist_path is not None
        try:
            entries = json.loads(self.persist_path.read_text())["nodes"]
        except (OSError, ValueError, KeyError) as exc:
            raise RuntimeError(f"cannot read the metadata store {self.persist_path}: {exc}") from exc
        for path in sorted(entries, key=lambda p: p.count("/")):
            entry = entries[path]
            if path == "/":
                continue
            self._nodes[path] = _Node(entry["data"].encode("latin-1"), entry["version"], None, set(),
                                      entry.get("cversion", 0))
            self._nodes[_parent(path)].children.add(path.rsplit("/", 1)[1])

    @contextmanager
    def deferred_save(self):
        """Several changes, one write of the file (at the end of the outermost block), all or
        none: when the block fails or the file cannot be written, the tree is restored as it was
        before the block (StoreWriteError for the file)."""
        with self._lock:
            outermost = self._deferred == 0
            before = self._copy_nodes() if outermost and self.persist_path is not None else None
            self._deferred += 1
            try:
                yield
            except BaseException:
                if before is not None:
                    self._restore(before)
                raise
            finally:
                self._deferred -= 1
            if outermost and self._dirty:
                try:
                    self._save()
                except OSError as error:
                    if before is not None:
                        self._restore(before)
                    raise StoreWriteError(f"could not save the metadata store {self.persist_path}: {error}; "
                                          "nothing was changed") from error

    def _copy_nodes(self) -> dict[str, _Node]:
        return {path: _Node(node.data, node.version, node.owner, set(node.children), node.cversion)
                for path, node in self._nodes.items()}

    def _restore(self, nodes: dict[str, _Node]) -> None:
        changed = [path for path in self._nodes.keys() | nodes.keys()
                   if path not in nodes or path not in self._nodes or nodes[path].version != self._nodes[path].version]
        self._nodes = nodes
        self._dirty = False
        self._fire(changed, changed_children={_parent(p) for p in changed})

    def save_now(self) -> None:
        with self.deferred_save():
            self._dirty = True

    def _save(self) -> None:
        if self.persist_path is None:
            return
        if self._deferred:
            self._dirty = True
            return
        self._dirty = False
        entries = {
            path: {"data": node.data.decode("latin-1"), "version": node.version, "cversion": node.cversion}
            for path, node in self._nodes.items() if node.owner is None
        }
        tmp = self.persist_path.with_name(self.persist_path.name + ".tmp")
        try:
            with open(tmp, "w") as handle:
                json.dump({"version": 1, "nodes": entries}, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.persist_path)
        except OSError:
            self._dirty = True
            with suppress(OSError):
                tmp.unlink(missing_ok=True)  # a partial file must not keep the little room left
            raise

    # sessions --------------------------------------------------------------------------------------

    def new_session_id(self) -> int:
        with self._lock:
            return next(self._session_ids)

    def drop_session(self, session_id: int) -> None:
        with self._lock:
            owned = [path for path, node in self._nodes.items() if node.owner == session_id]
            fired: list[str] = []
            for path in sorted(owned, key=lambda p: -p.count("/")):
                if path in self._nodes and not self._nodes[path].children:
                    self._remove(path)
                    fired.append(path)
            self._fire(fired, changed_children={_parent(p) for p in fired})

    # operations (synchronous; the session wraps them as async) -----------------------------------

    def get(self, path: str) -> tuple[bytes, int]:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            return node.data, node.version

    def owner(self, path: str) -> int | None:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            return node.owner

    def exists(self, path: str) -> int | None:
        with self._lock:
            node = self._nodes.get(path)
            return None if node is None else node.version

    def children(self, path: str) -> list[str]:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            return sorted(node.children)

    def create(self, path: str, data: bytes, owner: int | None, sequential: bool, makepath: bool) -> str:
        _check_path(path)
        with self.deferred_save():  # saved, or undone
            parent_path = _parent(path)
            created: list[str] = []
            if parent_path not in self._nodes:
                if not makepath:
                    raise NoNodeError(parent_path)
                missing = []
                walk = parent_path
                while walk not in self._nodes:
                    missing.append(walk)
                    walk = _parent(walk)
                for ancestor in reversed(missing):
                    self._nodes[ancestor] = _Node(b"")
                    self._nodes[_parent(ancestor)].children.add(ancestor.rsplit("/", 1)[1])
                    created.append(ancestor)
            parent = self._nodes[parent_path]
            if parent.owner is not None:
                raise StoreError(f"ephemeral node {parent_path} cannot have children")
            if sequential:
                path = f"{path}{parent.cversion:010d}"
            if path in self._nodes:
                raise NodeExistsError(path)
            parent.cversion += 1
            self._nodes[path] = _Node(bytes(data), 0, owner)
            parent.children.add(path.rsplit("/", 1)[1])
            created.append(path)
            if owner is None or len(created) > 1:
                self._save()
            self._fire(created, changed_children={_parent(p) for p in created})
            return path

    def set(self, path: str, data: bytes, version: int) -> int:
        with self.deferred_save():  # saved, or undone
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            if version != -1 and version != node.version:
                raise BadVersionError(f"{path}: version {node.version}, expected {version}")
            node.data = bytes(data)
            node.version += 1
            if node.owner is None:
                self._save()
            self._fire([path], changed_children=set())
            return node.version

    def delete(self, path: str, version: int, recursive: bool) -> None:
        with self.deferred_save():  # saved, or undone
            node = self._nodes.get(path)
            if node is None or path == "/":
                raise NoNodeError(path)
            if version != -1 and version != node.version:
                raise BadVersionError(f"{path}: version {node.version}, expected {version}")
            if node.children and not recursive:
                raise NotEmptyError(path)
            removed = [p for p in self._nodes if p == path or p.startswith(path + "/")]
            for p in sorted(removed, key=lambda p: -p.count("/")):
                self._remove(p)
            self._save()
            self._fire(removed, changed_children={_parent(p) for p in removed})

    def multi(self, ops: list[Op]) -> None:
        with self._lock:
            exists = {}  # the state the earlier ops of this transaction leave behind

            def version_of(path: str):
                if path in exists:
                    return exists[path]
                node = self._nodes.get(path)
                return None if node is None else node.version

            for op in ops:
                current = version_of(op.path)
                if op.kind == "create":
                    if current is not None:
                        raise NodeExistsError(op.path)
                    if version_of(_parent(op.path)) is None:
                        raise NoNodeError(_parent(op.path))
                    exists[op.path] = 0
                    continue
                if current is None:
                    raise NoNodeError(op.path)
                if op.version != -1 and op.version != current:
                    raise BadVersionError(f"{op.path}: version {current}, expected {op.version}")
                if op.kind == "set":
                    exists[op.path] = current + 1
                elif op.kind == "delete":
                    node = self._nodes.get(op.path)
                    if node is not None and node.children:
                        raise NotEmptyError(op.path)
                    exists[op.path] = None
                elif op.kind != "check":
                    raise ValueError(f"unknown multi op {op.kind!r}")
            with self.deferred_save():
                for op in ops:
                    if op.kind == "create":
                        self.create(op.path, op.data, None, False, False)
                    elif op.kind == "set":
                        self.set(op.path, op.data, -1)
                    elif op.kind == "delete":
                        self.delete(op.path, -1, False)

    def _remove(self, path: str) -> None:
        del self._nodes[path]
        parent = self._nodes.get(_parent(path))
        if parent is not None:
            parent.children.discard(path.rsplit("/", 1)[1])

    # watches ------------------------------------------------------------------------------------

    def add_watch(self, path: str, children: bool, watch: Watch, callback: Callable[[], None], token) -> None:
        with self._lock:
            self._watches = [w for w in self._watches if not w[2].cancelled]
            self._watches.append((path, children, watch, callback, token))

    def _fire(self, data_paths: list[str], changed_children: set[str]) -> None:
        touched = set(data_paths)
        for path, children, watch, callback, token in self._watches:
            if watch.cancelled:
                continue
            # A children watch fires when the children change and when the node itself comes or goes.
            if path in touched or (children and path in changed_children):
                _call_soon(token, watch, callback)


def _call_soon(token, watch: Watch, callback: Callable[[], None]) -> None:
    def run() -> None:
        if not watch.cancelled:
            try:
                callback()
            except Exception:  # a watcher's bug must not break the store
                log.exception("metadata store watch callback failed")

    try:
        token.run_sync_soon(run)
    except trio.RunFinishedError:
        watch.cancel()


class EmbeddedStore(MetadataStore):
    """One session over an EmbeddedTree (a new private tree when none is given)."""

    def __init__(self, tree: EmbeddedTree | None = None) -> None:
        self.tree = tree if tree is not None else EmbeddedTree()
        self._session_id = self.tree.new_session_id()
        self._session_listeners: list[tuple[Callable[[], None], object]] = []
        self._closed = False
        self._reconnect_listeners: list[tuple[Callable[[], None], object]] = []
        self._deaf = False  # disconnected_for_tests()

    @property
    def session_id(self) -> int:
        return self._session_id

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store session is closed")

    async def get(self, path: str) -> tuple[bytes, int]:
        self._check_open()
        return self.tree.get(path)

    async def exists(self, path: str) -> int | None:
        self._check_open()
        return self.tree.exists(path)

    async def children(self, path: str) -> list[str]:
        self._check_open()
        return self.tree.children(path)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, makepath: bool = True) -> str:
        self._check_open()
        return self.tree.create(path, data, self._session_id if ephemeral else None, sequential, makepath)

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        self._check_open()
        return self.tree.set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self._check_open()
        self.tree.delete(path, version, recursive)

    async def ephemeral_owner(self, path: str) -> int | None:
        self._check_open()
        return self.tree.owner(path)

    async def multi(self, ops: list[Op]) -> None:
        self._check_open()
        self.tree.multi(ops)

    async def watch(self, path: str, callback: Callable[[], None], *, children: bool = False) -> Watch:
        self._check_open()
        watch = Watch()

        def heard() -> None:
            if not self._deaf:
                callback()

        self.tree.add_watch(path, children, watch, heard, trio.lowlevel.current_trio_token())
        return watch

    def add_reconnect_listener(self, callback: Callable[[], None]) -> None:
        self._reconnect_listeners.append((callback, trio.lowlevel.current_trio_token()))

    @contextmanager
    def disconnected_for_tests(self):
        """As a dropped connection (tests): this session's watches hear nothing of the changes
        made meanwhile, as events a client misses; on leaving, the reconnect listeners are told."""
        self._deaf = True
        try:
            yield
        finally:
            self._deaf = False
            for callback, token in self._reconnect_listeners:
                _call_soon(token, Watch(), callback)

    def add_session_listener(self, callback: Callable[[], None]) -> None:
        self._session_listeners.append((callback, trio.lowlevel.current_trio_token()))

    def expire_session(self) -> None:
        """As a ZooKeeper session expiry: the ephemerals go, listeners hear of it, and the store
        carries on under a new session id."""
        old = self._session_id
        self._session_id = self.tree.new_session_id()
        self.tree.drop_session(old)
        for callback, token in self._session_listeners:
            _call_soon(token, Watch(), callback)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.tree.drop_session(self._session_id)
