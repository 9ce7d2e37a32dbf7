"""Helpers shared by test modules: an in-process replication harness built from the real services
(LogManager, ReplicaManager, handlers, listener) with a fake controller, and request helpers."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from pathlib import Path

import trio
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkacompat.config import BrokerConfig
from kafkacompat.controller.feature_store import FinalizedFeatureStore
from kafkacompat.controller.producer_ids import FileBlockStore, ProducerIdManager
from kafkacompat.controller.state import BrokerInfo, PartitionState
from kafkacompat.controller.store import EmbeddedStore
from kafkacompat.controller.topics import TopicInfo, topic_collision
from kafkacompat.dispatch import dispatch
from kafkacompat.fetch_sessions import FetchSessionCache
from kafkacompat.groups.coordinator import GroupCoordinator
from kafkacompat.groups.offsets_log import OffsetsTopicLog
from kafkacompat.handlers.produce import handle_produce
from kafkacompat.handlers.registry import RequestContext, Services
from kafkacompat.log import LogManager, PartitionLog
from kafkacompat.replication.manager import ReplicaManager
from kafkacompat.server import serve_listener
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.frame import RequestHeader
from kafkacompat.wire.produce import ProducePartitionData, ProduceRequestData, ProduceTopicData

TOPIC = "t"
_correlation = itertools.count(1)

# ---- record batches ----------------------------------------------------------------------------

T0 = 1_700_000_000_000  # a wall-clock-like base, so "now" arithmetic looks like the broker's


def make_batch(items: list[tuple[bytes | None, bytes | None]], *, timestamp: int = T0, codec: int = 0,
               producer: tuple[int, int, int] = (-1, -1, -1), headers: list | None = None) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 20)
    for offset, (key, value) in enumerate(items):
        builder.append(offset, timestamp=timestamp + offset, key=key, value=value, headers=headers or [])
    return builder.build()


def records(log: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record from ``start``, decoded by kafka-python."""
    result = log.read(log.log_start_offset if start is None else start, 1 << 30)
    data = result.read_all()
    result.close()
    found = []
    batches = MemoryRecords(data)
    while batches.has_next():
        batch = batches.next_batch()
        for record in batch:
            found.append((record.offset, record.key, record.value, record.timestamp))
    return found


def latest(rows) -> dict:
    state = {}
    for _, key, value, _ in rows:
        state[key] = value
    return state


# ---- the replication harness -------------------------------------------------------------------


class FakeController:
    """Publishes PartitionStates straight to the nodes' replica managers; AlterPartition with
    compare-and-set on (leader epoch, partition epoch)."""

    def __init__(self) -> None:
        self.nodes: dict[int, ReplicaNode] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.alter_calls: list[tuple] = []
        self.isolated: set[int] = set()  # nodes that get no states (as if partitioned away)

    def infos(self) -> dict[int, BrokerInfo]:
        return {i: BrokerInfo(i, "127.0.0.1", n.port) for i, n in self.nodes.items()}

    async def publish(self, state: PartitionState, to=None) -> None:
        self.states[(state.topic, state.partition)] = state
        for node_id in (to if to is not None else state.replicas):
            node = self.nodes.get(node_id)
            if node is not None and node.running and node_id not in self.isolated:
                await node.apply_partition_state(state)

    async def alter_partition(self, topic, partition, leader_epoch, partition_epoch, new_isr) -> PartitionState:
        current = self.states[(topic, partition)]
        self.alter_calls.append((topic, partition, tuple(new_isr)))
        if (leader_epoch, partition_epoch) != (current.leader_epoch, current.partition_epoch):
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, "stale")
        state = dataclasses.replace(current, isr=tuple(new_isr), partition_epoch=current.partition_epoch + 1)
        await self.publish(state)
        return state

    async def elect(self, topic: str, partition: int, leader: int, isr) -> PartitionState:
        current = self.states[(topic, partition)]
        state = dataclasses.replace(current, leader=leader, isr=tuple(isr), leader_epoch=current.leader_epoch + 1,
                                    partition_epoch=current.partition_epoch + 1)
        await self.publish(state)
        return state


class Topics:
    """The topics a node knows (TopicLookup and the topic part of MetadataView)."""

    def __init__(self) -> None:
        self.by_name: dict[str, TopicInfo] = {}

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)


class NodeMetadata:
    """MetadataView of a harness node: its topics, the fake controller's brokers and states."""

    def __init__(self, node_id: int, topics: Topics, controller: FakeController) -> None:
        self.node_id = node_id
        self.cluster_id = "harness"
        self.controller_id = -1
        self._topics = topics
        self._controller = controller

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self._topics.by_name.values() if t.topic_id == topic_id), None)

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.by_name.values())

    def colliding_topic(self, name: str) -> str | None:
        return topic_collision(name, self._topics.by_name)

    def partition_state(self, topic: str, index: int) -> PartitionState | None:
        return self._controller.states.get((topic, index))

    def brokers(self) -> dict[int, BrokerInfo]:
        return self._controller.infos()


class NoAdmin:
    """The admin side of a ReplicaNode: no admin operations (the fake controller places the
    topics), only the finalized feature levels ApiVersions reads, from a store of its own."""

    def __init__(self) -> None:
        self._features = FinalizedFeatureStore(EmbeddedStore())

    def feature_store(self) -> FinalizedFeatureStore:
        return self._features


class ReplicaNode:
    """One broker's data plane from the real services: logs, ReplicaManager (fetchers, ISR) and
    the request handlers behind a real listener. No admin operations (the fake controller places
    the topics)."""

    def __init__(self, config: BrokerConfig, controller: FakeController) -> None:
        self.config = config
        self.node_id = config.broker_id
        self.data_dir = Path(config.data_dir)
        self.port = 0
        self.running = False
        self.topics = Topics()
        self.logs = LogManager(self.data_dir, producer_id_expiration_ms=config.producer_id_expiration_ms)
        self.replicas = ReplicaManager(self.node_id, config, self.logs, self.topics, controller.infos,
                                       isr_client=controller)
        self.metadata = NodeMetadata(self.node_id, self.topics, controller)
        groups = GroupCoordinator(config, OffsetsTopicLog(self.topics, self.replicas, create=None), clustered=True)
        self._services = Services(config, self.metadata, NoAdmin(), self.replicas, groups,  # type: ignore[arg-type]
                                  ProducerIdManager(self.node_id, FileBlockStore(self.data_dir)), self.data_dir,
                                  FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                                    config.min_incremental_fetch_session_eviction_ms))

    def services(self) -> Services:
        return self._services

    def partition(self, topic: str, index: int):
        return self.replicas.partition(topic, index)

    async def apply_partition_state(self, state: PartitionState) -> None:
        await self.replicas.apply_partition_state(state)

    def add_topic(self, topic: TopicInfo) -> None:
        self.topics.by_name[topic.name] = topic
        self.replicas.open_partitions(topic, range(topic.partitions))

    async def dispatch(self, header, body, connection):
        return await dispatch(self._services, header, body, connection)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs.load_all(self.replicas.log_config_for_topic_name)
        try:
            async with trio.open_nursery() as nursery:
                self.port = await nursery.start(serve_listener, self, self.config.host, 0)
                await nursery.start(self.replicas.run)
                task_status.started()
        finally:
            self.logs.close()


def config(tmp_path: Path, broker_id: int, **overrides) -> BrokerConfig:
    options = dict(data_dir=tmp_path / f"b{broker_id}", broker_id=broker_id, host="127.0.0.1", port=0,
                   replica_lag_time_max_ms=1500, replica_fetch_wait_max_ms=100, replica_fetch_backoff_ms=50,
                   replica_socket_timeout_ms=2000, log_cleaner_enable=False)
    options.update(overrides)
    return BrokerConfig(**options)


class Cluster:
    def __init__(self, tmp_path: Path, nursery: trio.Nursery, size: int = 3, **overrides) -> None:
        self.tmp_path = tmp_path
        self.nursery = nursery
        self.controller = FakeController()
        self.scopes: dict[int, trio.CancelScope] = {}
        self.size = size
        self.overrides = overrides
        self.topics: list[TopicInfo] = []

    async def start(self, node_id: int) -> ReplicaNode:
        node = ReplicaNode(config(self.tmp_path, node_id, **self.overrides), self.controller)
        for topic in self.topics:  # the same topic ids everywhere, as the metadata store gives them
            node.topics.by_name[topic.name] = dataclasses.replace(topic, configs=dict(topic.configs))
        self.controller.nodes[node_id] = node
        scope = trio.CancelScope()
        self.scopes[node_id] = scope

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await node.serve(task_status=task_status)

        await self.nursery.start(run)
        node.running = True
        return node

    def stop_fetching(self, node_id: int, partition: int = 0) -> None:
        """Like SIGSTOP for replication: the node fetches no more and hears no states."""
        self.controller.isolated.add(node_id)
        self.broker(node_id).replicas.fetchers.remove_partition((TOPIC, partition))

    async def resume_fetching(self, node_id: int, partition: int = 0) -> None:
        self.controller.isolated.discard(node_id)
        state = self.controller.states[(TOPIC, partition)]
        await self.broker(node_id).apply_partition_state(state)
        self.broker(node_id).replicas.fetchers.add_partition((TOPIC, partition), state.leader)

    def kill(self, node_id: int) -> None:
        self.controller.nodes[node_id].running = False
        self.scopes[node_id].cancel()

    async def start_all(self) -> None:
        for i in range(self.size):
            await self.start(i)

    def broker(self, i: int) -> ReplicaNode:
        return self.controller.nodes[i]

    async def create_topic(self, partitions: int = 1, min_isr: int = 1) -> None:
        replicas = tuple(range(self.size))
        topic = TopicInfo(TOPIC, uuid.uuid4(), partitions, self.size, {"min.insync.replicas": str(min_isr)})
        self.topics.append(topic)
        for node in self.controller.nodes.values():
            node.add_topic(dataclasses.replace(topic, configs=dict(topic.configs)))
        for p in range(partitions):
            leader = replicas[p % self.size]
            ordered = (leader,) + tuple(r for r in replicas if r != leader)
            await self.controller.publish(PartitionState(TOPIC, p, ordered, ordered, leader, 1, 1))


async def produce(broker, values: list[bytes], *, acks: int = -1, partition: int = 0,
                  timeout_ms: int = 5000) -> tuple[int, int]:
    """One Produce request through the handler, to a Broker or a ReplicaNode."""
    blob = memoryview(bytearray(make_batch([(b"k", v) for v in values])))
    request = ProduceRequestData(None, acks, timeout_ms,
                                 [ProduceTopicData(TOPIC, None, [ProducePartitionData(partition, blob)])])
    ctx = RequestContext(broker.services(), RequestHeader(0, 10, next(_correlation), "test", True), None)
    response = await handle_produce(request, ctx)
    result = response.topics[0].partitions[0]
    return result.error_code, result.base_offset


def log_bytes(broker, partition: int = 0) -> bytes:
    p = broker.partition(TOPIC, partition)
    return p.log.read(p.log_start_offset, 1 << 30).read_all()


async def wait_until(predicate, timeout: float = 10.0, what: str = "") -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def run(test):
    """Run ``test(cluster)`` with three started nodes, then stop them all."""

    def wrapper(tmp_path):
        async def main():
            async with trio.open_nursery() as nursery:
                cluster = Cluster(tmp_path, nursery)
                await cluster.start_all()
                await test(cluster)
                nursery.cancel_scope.cancel()

        trio.run(main)

    wrapper.__name__ = test.__name__
    return wrapper
