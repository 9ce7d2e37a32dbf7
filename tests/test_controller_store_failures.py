"""Failures of the metadata store are contained: in-process brokers over the embedded store, with
failures injected into one broker's session (a subclass of the real store that raises on chosen
operations) or damaged nodes written into the shared tree. Admin requests come from a real client
(confluent_kafka, in a worker thread) over the brokers' real sockets.

What must hold: a failing or unreachable store, or a node that does not parse, is logged and
retried or answered with a Kafka error; it stops no broker, loses nothing a broker hosts, and
the cluster works again once the store does."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Callable

import trio

from kafkacompat.controller.controller import state_path, topic_path
from kafkacompat.dev_cluster import InProcessCluster
from kafkacompat.controller.store import EmbeddedStore, Op, StoreUnavailableError
from kafkacompat.wire.errors import ErrorCode, KafkaError
from tests.conftest import trio_test


class FailingStore(EmbeddedStore):
    """An embedded store session that raises ``failure`` from every operation ``matches``
    (operation name, path) selects, while ``failure`` is set."""

    def __init__(self, tree) -> None:
        super().__init__(tree)
        self.failure: Exception | None = None
        self.matches: Callable[[str, str], bool] = lambda op, path: True
        self.raised = 0

    def _inject(self, op: str, path: str) -> None:
        if self.failure is not None and self.matches(op, path):
            self.raised += 1
            raise self.failure

    async def get(self, path: str):
        self._inject("get", path)
        return await super().get(path)

    async def exists(self, path: str):
        self._inject("exists", path)
        return await super().exists(path)

    async def children(self, path: str):
        self._inject("children", path)
        return await super().children(path)

    async def create(self, path: str, data: bytes = b"", **kwargs):
        self._inject("create", path)
        return await super().create(path, data, **kwargs)

    async def set(self, path: str, data: bytes, version: int = -1):
        self._inject("set", path)
        return await super().set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False):
        self._inject("delete", path)
        return await super().delete(path, version, recursive=recursive)

    async def multi(self, ops: list[Op]):
        for op in ops:
            self._inject("multi", op.path)
        return await super().multi(ops)


@asynccontextmanager
async def cluster_with_failing_store(tmp_path, count: int = 3, failing: int = 0):
    """``count`` brokers; broker ``failing`` runs on a FailingStore (yielded with the cluster)."""
    async with trio.open_nursery() as nursery:
        cluster = InProcessCluster(nursery, tmp_path)
        store = FailingStore(cluster.tree)
        for broker_id in range(count):
            await cluster.start_broker(broker_id, store=store if broker_id == failing else None)
        try:
            await wait_for(lambda: all(len(b.metadata.brokers()) == count for b in cluster.brokers.values()))
            yield cluster, store
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()


async def wait_for(predicate, timeout: float = 15.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def all_running(cluster: InProcessCluster) -> bool:
    return all(not done.is_set() for done in cluster._done.values())


def admin_result(bootstrap: str, call: str, *args, **kwargs):
    """An AdminClient call's future for one resource: (error code or None, the exception)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = getattr(admin, call)(*args, **kwargs)
    future = next(iter(futures.values())) if isinstance(futures, dict) else futures
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return exc.args[0].code(), exc
    return None, None


@trio_test
async def test_a_failing_sync_stops_no_broker_and_recovers(tmp_path, caplog):
    # Broker 1's reads of partition states raise a bug-like error (not a StoreError): its sync
    # loop logs it and retries; it keeps serving, and applies what it missed once reads work.
    async with cluster_with_failing_store(tmp_path, failing=1) as (cluster, store):
        b0, b1 = cluster.brokers[0], cluster.brokers[1]
        await b0.admin.create_topic("before", 1, 3, {})
        await wait_for(lambda: b1.partition("before", 0) is not None)
        store.matches = lambda op, path: op == "get" and path.endswith("/state")
        store.failure = RuntimeError("injected read failure")
        with caplog.at_level(logging.WARNING, logger="kafkacompat.controller"):
            await b0.admin.create_topic("during", 1, 3, {})
            await wait_for(lambda: store.raised >= 3)
        assert all_running(cluster)
        assert any("syncing the cluster metadata failed" in r.getMessage() for r in caplog.records)
        assert b1.partition("before", 0) is not None  # still served from its last view
        store.failure = None
        await wait_for(lambda: b1.partition("during", 0) is not None)
        assert all_running(cluster)


@trio_test
async def test_a_store_unreachable_during_admin_requests_is_a_kafka_error(tmp_path):
    # One broker, the controller, whose store session fails every write under /brokers/topics
    # and /config/topics as an unreachable ZooKeeper does: the real client gets REQUEST_TIMED_OUT
    # for CreateTopics, CreatePartitions, IncrementalAlterConfigs, DeleteTopics - answered, not a
    # closed connection - and nothing changed; once the store is back the same calls succeed.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

    async with cluster_with_failing_store(tmp_path, count=1, failing=0) as (cluster, store):
        broker = cluster.brokers[0]
        bootstrap = cluster.bootstrap()
        await broker.admin.create_topic("kept", 1, 1, {})
        await wait_for(lambda: broker.partition("kept", 0) is not None)
        store.matches = lambda op, path: op in ("create", "set", "multi") and path.startswith(
            ("/brokers/topics", "/config/topics", "/admin"))
        store.failure = StoreUnavailableError("injected: ZooKeeper unreachable")

        def calls():
            entry = ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)
            resource = ConfigResource("topic", "kept", incremental_configs=[entry])
            return [
                admin_result(bootstrap, "create_topics", [NewTopic("new", 1, 1)], operation_timeout=10),
                admin_result(bootstrap, "create_partitions", [NewPartitions("kept", 2)], operation_timeout=10),
                admin_result(bootstrap, "incremental_alter_configs", [resource]),
                admin_result(bootstrap, "delete_topics", ["kept"], operation_timeout=10),
            ]

        failed = await trio.to_thread.run_sync(calls)
        assert [code for code, _ in failed] == [ErrorCode.REQUEST_TIMED_OUT] * 4, failed
        assert all_running(cluster)
        assert broker.metadata.topic("new") is None
        kept = broker.metadata.topic("kept")
        assert kept is not None and kept.partitions == 1 and "retention.ms" not in kept.configs
        assert broker.partition("kept", 0).log.config.retention_ms != 12345

        store.failure = None
        succeeded = await trio.to_thread.run_sync(calls)
        assert [code for code, _ in succeeded] == [None] * 4, succeeded
        await wait_for(lambda: broker.metadata.topic("kept") is None and broker.metadata.topic("new") is not None)


@trio_test
async def test_alter_configs_reports_a_failed_store_write(tmp_path):
    # The config write used to be fired into the broker's root nursery after the client had been
    # told it succeeded; a failing write then stopped the broker (and, in dev-cluster, all of them).
    async with cluster_with_failing_store(tmp_path, failing=0) as (cluster, store):
        broker = cluster.brokers[0]
        await broker.admin.create_topic("configs", 1, 3, {})
        await wait_for(lambda: broker.partition("configs", 0) is not None)
        topic = broker.metadata.topic("configs")
        store.matches = lambda op, path: path.startswith("/config/topics")
        store.failure = OSError(28, "No space left on device")
        try:
            await broker.admin.alter_topic_configs(topic, {"retention.ms": "1000"})
            raise AssertionError("the failed write was reported as a success")
        except KafkaError as exc:
            assert exc.code == ErrorCode.UNKNOWN_SERVER_ERROR and "configs" in exc.message
        await trio.sleep(0.2)
        assert all_running(cluster)
        assert "retention.ms" not in broker.metadata.topic("configs").configs
        store.failure = None
        await broker.admin.alter_topic_configs(topic, {"retention.ms": "1000"})
        await wait_for(lambda: all(b.metadata.topic("configs").configs.get("retention.ms") == "1000"
                                   for b in cluster.brokers.values()))


@trio_test
async def test_malformed_topic_and_state_nodes_are_logged_and_skipped(tmp_path, caplog):
    async with cluster_with_failing_store(tmp_path) as (cluster, _store):
        b0 = cluster.brokers[0]
        await b0.admin.create_topic("good", 1, 3, {})
        await b0.admin.create_topic("hosted", 2, 3, {})
        await wait_for(lambda: all(b.partition("hosted", 1) is not None for b in cluster.brokers.values()))
        hosted_log_dirs = [b.partition("hosted", 0).log.dir for b in cluster.brokers.values()]
        with caplog.at_level(logging.ERROR, logger="kafkacompat.controller"):
            # Garbage in a new topic's node, in a hosted topic's node and in a partition state.
            cluster.tree.create(topic_path("garbage"), b"{not json", None, False, True)
            cluster.tree.set(topic_path("hosted"), b'{"version":3,"partitions":"oops"}', -1)
            cluster.tree.set(state_path("hosted", 1), b"[1, 2", -1)
            await b0.admin.create_topic("after", 1, 3, {})
            await wait_for(lambda: all(b.partition("after", 0) is not None for b in cluster.brokers.values()))
        assert all_running(cluster)
        logged = " ".join(r.getMessage() for r in caplog.records)
        for path in (topic_path("garbage"), topic_path("hosted"), state_path("hosted", 1)):
            assert path in logged
        for broker in cluster.brokers.values():
            assert broker.partition("after", 0) is not None and broker.partition("good", 0) is not None
            # The damaged topic keeps its last good version: still served, its logs not deleted.
            assert broker.metadata.topic("hosted") is not None and broker.partition("hosted", 1) is not None
            assert broker.metadata.topic("garbage") is None
        assert all(path.exists() for path in hosted_log_dirs)
        # Each damaged node is logged once, not at every sync.
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="kafkacompat.controller"):
            await b0.admin.create_topic("later", 1, 3, {})
            await wait_for(lambda: all(b.partition("later", 0) is not None for b in cluster.brokers.values()))
        assert not [r for r in caplog.records if "does not parse" in r.getMessage()]


@trio_test
async def test_one_in_process_broker_failing_does_not_stop_the_others(tmp_path, caplog):
    # dev-cluster's brokers share one nursery: a broker one of whose tasks fails is logged and
    # stops alone (its session ends, so the others see it go).
    async def fail() -> None:
        raise OSError(5, "injected I/O error")

    async with cluster_with_failing_store(tmp_path) as (cluster, _store):
        with caplog.at_level(logging.ERROR, logger="kafkacompat.dev_cluster"):
            cluster.brokers[2].replicas._nursery.start_soon(fail)  # a task in one of broker 2's nurseries
            await wait_for(lambda: cluster._done[2].is_set())
        assert "Broker 2 stopped after an error" in " ".join(r.getMessage() for r in caplog.records)
        survivors = [cluster.brokers[0], cluster.brokers[1]]
        await wait_for(lambda: all(len(b.metadata.brokers()) == 2 for b in survivors))
        await survivors[0].admin.create_topic("still-working", 1, 2, {})
        await wait_for(lambda: all(b.partition("still-working", 0) is not None for b in survivors))
        del cluster.brokers[2]


@trio_test
async def test_controlled_shutdown_gives_up_after_its_retries(tmp_path, caplog):
    async with cluster_with_failing_store(tmp_path, failing=1) as (cluster, store):
        leaving = cluster.brokers[1]
        store.failure = StoreUnavailableError("injected: ZooKeeper unreachable")
        with caplog.at_level(logging.INFO, logger="kafkacompat.controller"):
            with trio.fail_after(20):
                done = await leaving.cluster.controlled_shutdown(max_retries=3, retry_backoff=0.2, timeout=2)
        assert done is False
        messages = [r.getMessage() for r in caplog.records]
        assert len([m for m in messages if " of 3 failed" in m]) == 3
        assert any("Proceeding to an unclean shutdown" in m for m in messages)
        store.failure = None
