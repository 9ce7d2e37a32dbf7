"""The MetadataStore contract, on the embedded store and on a real ZooKeeper (through kazoo)."""

from __future__ import annotations


import pytest
import trio

from kafkacompat.controller.store import (
    BadVersionError,
    EmbeddedStore,
    EmbeddedTree,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from tests.conftest import trio_test


class Stores:
    """Opens sessions on one shared namespace: an EmbeddedTree, or a ZooKeeper chroot."""

    def __init__(self, kind: str, zookeeper, name: str) -> None:
        self.kind = kind
        self.tree = EmbeddedTree() if kind == "embedded" else None
        self.connect = f"{zookeeper.connect}/{name}" if zookeeper else None
        self.opened = []

    async def open(self):
        if self.kind == "embedded":
            store = EmbeddedStore(self.tree)
        else:
            from kafkacompat.controller.zookeeper import ZooKeeperStore

            # Short sessions, but the first connect may wait as long as a broker's would: on a busy
            # machine ZooKeeper can take more than a session's timeout to answer a new session.
            store = await ZooKeeperStore(self.connect, session_timeout_ms=2000, connection_timeout_ms=18000).start()
        self.opened.append(store)
        return store

    async def close(self):
        for store in self.opened:
            await store.close()


@pytest.fixture(params=["embedded", "zookeeper"])
def stores(request):
    zk = request.getfixturevalue("zookeeper") if request.param == "zookeeper" else None
    return Stores(request.param, zk, request.node.name.replace("[", "_").replace("]", ""))


async def wait_for(predicate, timeout=10.0):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


@trio_test
async def test_create_get_set_compare_and_set_delete(stores):
    store = await stores.open()
    try:
        assert await store.create("/a/b/c", b"one") == "/a/b/c"
        assert await store.get("/a/b/c") == (b"one", 0)
        assert await store.children("/a/b") == ["c"]
        with pytest.raises(NodeExistsError):
            await store.create("/a/b/c", b"again")
        assert await store.set("/a/b/c", b"two", 0) == 1
        with pytest.raises(BadVersionError):
            await store.set("/a/b/c", b"stale", 0)
        assert await store.get("/a/b/c") == (b"two", 1)
        assert await store.set("/a/b/c", b"any") == 2
        with pytest.raises(NoNodeError):
            await store.get("/a/none")
        assert await store.exists("/a/none") is None
        assert await store.exists("/a/b/c") == 2
        with pytest.raises(NotEmptyError):
            await store.delete("/a/b")
        with pytest.raises(BadVersionError):
            await store.delete("/a/b/c", 0)
        await store.delete("/a/b/c", 2)
        await store.create("/a/b/d/e", b"")
        await store.delete("/a", recursive=True)
        assert await store.exists("/a") is None
        with pytest.raises(NoNodeError):
            await store.create("/x/y", b"", makepath=False)
    finally:
        await stores.close()


@trio_test
async def test_sequential_ids(stores):
    store = await stores.open()
    try:
        first = await store.create("/seq/id-", b"", sequential=True)
        second = await store.create("/seq/id-", b"", sequential=True)
        assert first.startswith("/seq/id-") and len(first) == len("/seq/id-") + 10
        assert int(second[-10:]) > int(first[-10:])
    finally:
        await stores.close()


@trio_test
async def test_ephemeral_nodes_go_with_their_session(stores):
    one = await stores.open()
    other = await stores.open()
    try:
        await one.create("/brokers/ids/1", b"{}", ephemeral=True)
        assert await other.ephemeral_owner("/brokers/ids/1") == one.session_id
        await other.create("/persistent", b"")
        assert await other.ephemeral_owner("/persistent") is None
        await one.close()
        await wait_for_async(lambda: other.exists("/brokers/ids/1"), None)
    finally:
        await stores.close()


async def wait_for_async(get, expected, timeout=10.0):
    with trio.fail_after(timeout):
        while await get() != expected:
            await trio.sleep(0.02)


@trio_test
async def test_watches_fire_on_data_children_creation_and_deletion(stores):
    store = await stores.open()
    writer = await stores.open()
    try:
        data_events, child_events = [], []
        await store.watch("/w/node", lambda: data_events.append(1))
        await store.watch("/w", lambda: child_events.append(1), children=True)
        await trio.sleep(0.2)
        data_events.clear()
        child_events.clear()
        await writer.create("/w/node", b"1")
        await wait_for(lambda: data_events and child_events)
        data_events.clear()
        await writer.set("/w/node", b"2")
        await wait_for(lambda: data_events)
        data_events.clear()
        child_events.clear()
        await writer.delete("/w/node")
        await wait_for(lambda: data_events and child_events)
        cancelled = []
        watch = await store.watch("/w/other", lambda: cancelled.append(1))
        await trio.sleep(0.1)
        cancelled.clear()
        watch.cancel()
        await writer.create("/w/other", b"")
        await trio.sleep(0.3)
        assert cancelled == []
    finally:
        await stores.close()


@trio_test
async def test_session_expiry_removes_ephemerals_and_tells_listeners(stores):
    store = await stores.open()
    other = await stores.open()
    try:
        lost = []
        store.add_session_listener(lambda: lost.append(1))
        await store.create("/controller", b"{}", ephemeral=True)
        old_session = store.session_id
        if stores.kind == "embedded":
            store.expire_session()
        else:
            await trio.to_thread.run_sync(store.expire_session_for_tests)
        await wait_for(lambda: lost)
        await wait_for_async(lambda: other.exists("/controller"), None)
        # The store carries on under a new session, as kazoo reconnects.
        with trio.fail_after(10):
            while True:
                try:
                    await store.create("/controller", b"{}", ephemeral=True)
                    break
                except Exception:
                    await trio.sleep(0.05)
        assert store.session_id != old_session
        assert await other.ephemeral_owner("/controller") == store.session_id
    finally:
        await stores.close()


def test_embedded_tree_persists_persistent_nodes_only(tmp_path):
    async def write():
        store = EmbeddedStore(EmbeddedTree(tmp_path / "store.json"))
        await store.create("/brokers/topics/t", b'{"x":1}')
        await store.set("/brokers/topics/t", b'{"x":2}')
        await store.create("/brokers/ids/0", b"", ephemeral=True)
        await store.close()

    async def read():
        store = EmbeddedStore(EmbeddedTree(tmp_path / "store.json"))
        assert await store.get("/brokers/topics/t") == (b'{"x":2}', 1)
        assert await store.exists("/brokers/ids/0") is None
        assert await store.children("/brokers") == ["ids", "topics"]

    trio.run(write)
    trio.run(read)


def test_single_node_topics_live_in_the_embedded_store_and_legacy_registries_migrate(tmp_path):
    import json
    import uuid

    from kafkacompat.controller.topics import TopicInfo, TopicRegistry

    topic_id = uuid.uuid4()
    legacy = {"version": 1, "topics": [{"name": "old", "topic_id": str(topic_id), "partitions": 3,
                                        "replication_factor": 1, "configs": {"retention.ms": "5"}}]}
    (tmp_path / "kafkacompat-topics.json").write_text(json.dumps(legacy))
    registry = TopicRegistry(tmp_path, broker_id=7)
    registry.load()
    assert registry.get("old") == TopicInfo("old", topic_id, 3, 1, {"retention.ms": "5"})
    assert not (tmp_path / "kafkacompat-topics.json").exists()
    assert (tmp_path / "kafkacompat-topics.json.migrated").exists()
    registry.add(TopicInfo("new", uuid.uuid4(), 2, 1, {}))
    changed = registry.get("old")
    changed.partitions, changed.configs = 4, {"cleanup.policy": "compact"}
    registry.update(changed)

    reloaded = TopicRegistry(tmp_path, broker_id=7)
    reloaded.load()
    assert sorted(reloaded.names()) == ["new", "old"]
    assert reloaded.get("old") == TopicInfo("old", topic_id, 4, 1, {"cleanup.policy": "compact"})
    assert reloaded.get_by_id(topic_id).name == "old"
    nodes = json.loads((tmp_path / "metadata-store.json").read_text())["nodes"]
    assert json.loads(nodes["/brokers/topics/old"]["data"])["partitions"] == {str(p): [7] for p in range(4)}
    reloaded.remove("new")
    again = TopicRegistry(tmp_path, broker_id=7)
    again.load()
    assert again.names() == ["old"]


def test_a_change_the_store_cannot_save_is_undone(tmp_path):
    """A real failing write: the temporary file's name is taken by a directory, so open() fails."""
    import uuid

    from kafkacompat.controller.store import StoreWriteError
    from kafkacompat.controller.topics import TopicInfo, TopicRegistry

    registry = TopicRegistry(tmp_path)
    registry.load()
    kept = TopicInfo("kept", uuid.uuid4(), 1, 1, {})
    registry.add(kept)
    blocker = tmp_path / "metadata-store.json.tmp"
    blocker.mkdir()
    with pytest.raises(StoreWriteError, match="nothing was changed"):
        registry.add(TopicInfo("lost", uuid.uuid4(), 2, 1, {}))
    with pytest.raises(StoreWriteError):
        registry.remove("kept")
    grown = TopicInfo("kept", kept.topic_id, 5, 1, {"retention.ms": "1"})
    with pytest.raises(StoreWriteError):
        registry.update(grown)
    assert registry.names() == ["kept"] and registry.get("kept") is kept
    assert registry.tree.exists("/brokers/topics/lost") is None
    assert registry.tree.exists("/config/topics/lost") is None

    blocker.rmdir()
    registry.add(TopicInfo("later", uuid.uuid4(), 2, 1, {}))
    reloaded = TopicRegistry(tmp_path)
    reloaded.load()
    assert sorted(reloaded.names()) == ["kept", "later"]
    assert reloaded.get("kept").partitions == 1


def test_an_unreadable_store_stops_the_start(tmp_path):
    from kafkacompat.controller.topics import TopicRegistry

    (tmp_path / "metadata-store.json").write_text("{not json")
    with pytest.raises(RuntimeError, match="cannot read the metadata store"):
        TopicRegistry(tmp_path).load()


@trio_test
async def test_multi_is_all_or_nothing(stores):
    from kafkacompat.controller.store import Op

    store = await stores.open()
    try:
        await store.create("/m/epoch", b"1")
        await store.create("/m/state", b"a")
        await store.multi([Op.check("/m/epoch", 0), Op.set("/m/state", b"b", 0), Op.create("/m/new", b"n")])
        assert await store.get("/m/state") == (b"b", 1)
        assert await store.get("/m/new") == (b"n", 0)
        await store.set("/m/epoch", b"2")  # a newer controller
        with pytest.raises(BadVersionError):
            await store.multi([Op.check("/m/epoch", 0), Op.set("/m/state", b"zombie", 1)])
        assert await store.get("/m/state") == (b"b", 1)
        with pytest.raises(NodeExistsError):
            await store.multi([Op.set("/m/state", b"c", 1), Op.create("/m/new", b"again")])
        assert await store.get("/m/state") == (b"b", 1)
        with pytest.raises(NoNodeError):
            await store.multi([Op.delete("/m/missing")])
        await store.multi([Op.delete("/m/new", 0), Op.set("/m/state", b"d")])
        assert await store.exists("/m/new") is None and await store.get("/m/state") == (b"d", 2)
    finally:
        await stores.close()


@trio_test
async def test_get_many(stores):
    store = await stores.open()
    try:
        await store.create("/g/a", b"1")
        await store.create("/g/b", b"2")
        await store.set("/g/b", b"3")
        assert await store.get_many(["/g/a", "/g/b", "/g/none"]) == {
            "/g/a": (b"1", 0), "/g/b": (b"3", 1), "/g/none": None}
        assert await store.get_many([]) == {}
    finally:
        await stores.close()


class ReplyDropper:
    """A TCP proxy in front of the real ZooKeeper that, once armed, lets the next request reach
    the server and then cuts the connection before its reply gets back: the client sees a
    ConnectionLoss for a write the server has applied. kazoo reconnects through the proxy."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.armed = False
        self.dropped = 0
        self.port = 0

    async def serve(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._proxy, listeners)

    async def _proxy(self, client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, server, nursery.cancel_scope, False)
            nursery.start_soon(self._pump, server, client, nursery.cancel_scope, True)

    async def _pump(self, source, sink, scope: trio.CancelScope, replies: bool) -> None:
        buffered = b""
        first = True  # the session handshake's answer has no reply header
        try:
            while True:
                chunk = await source.receive_some(65536)
                if not chunk:
                    break
                if not replies:
                    await sink.send_all(chunk)
                    continue
                buffered += chunk
                while len(buffered) >= 4 and len(buffered) >= 4 + int.from_bytes(buffered[:4], "big"):
                    size = 4 + int.from_bytes(buffered[:4], "big")
                    frame, buffered = buffered[:size], buffered[size:]
                    xid = int.from_bytes(frame[4:8], "big", signed=True)
                    if not first and self.armed and xid > 0:  # a reply to a request (not a ping or an event)
                        self.armed = False
                        self.dropped += 1
                        scope.cancel()
                        return
                    first = False
                    await sink.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


@pytest.mark.parametrize("write", ["create", "set", "versioned set", "delete", "multi"])
@trio_test
async def test_a_write_whose_reply_is_lost_is_settled_after_the_reconnection(zookeeper, write):
    """The connection drops after ZooKeeper applied a write but before its answer arrived (seen
    under CI load with short sessions: CreateTopics answered REQUEST_TIMED_OUT for a topic that
    was created). The store settles it once reconnected instead of failing the caller."""
    from kafkacompat.controller.store import Op
    from kafkacompat.controller.zookeeper import ZooKeeperStore

    async with trio.open_nursery() as nursery:
        proxy = ReplyDropper(zookeeper.port)
        await proxy.serve(nursery)
        root = f"/lost-{write.replace(' ', '-')}"
        store = await ZooKeeperStore(f"127.0.0.1:{proxy.port}", session_timeout_ms=4000).start()
        try:
            await store.create(f"{root}/existing", b"old")
            proxy.armed = True
            if write == "create":
                assert await store.create(f"{root}/node", b"v") == f"{root}/node"
                assert await store.get(f"{root}/node") == (b"v", 0)
            elif write == "set":
                assert await store.set(f"{root}/existing", b"new") == 1
                assert await store.get(f"{root}/existing") == (b"new", 1)
            elif write == "versioned set":
                assert await store.set(f"{root}/existing", b"new", 0) == 1
                assert await store.get(f"{root}/existing") == (b"new", 1)
            elif write == "delete":
                await store.delete(f"{root}/existing", 0)
                assert await store.exists(f"{root}/existing") is None
            else:
                await store.multi([Op.set(f"{root}/existing", b"m", 0), Op.create(f"{root}/made", b"x")])
                assert await store.get(f"{root}/existing") == (b"m", 1)
                assert await store.get(f"{root}/made") == (b"x", 0)
            assert proxy.dropped == 1
            # Somebody else's node is still reported, not taken for ours.
            await store.create(f"{root}/theirs", b"theirs")
            proxy.armed = True
            with pytest.raises(NodeExistsError):
                await store.create(f"{root}/theirs", b"ours")
            assert proxy.dropped == 2
        finally:
            await store.close()
            nursery.cancel_scope.cancel()
