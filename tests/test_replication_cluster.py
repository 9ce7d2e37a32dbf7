"""Replication between three Broker objects in one Trio process: real sockets on loopback, real
logs in tmp dirs, follower fetchers speaking Fetch as replicas. A tiny fake controller stands in
for controller/ (it applies PartitionStates directly and answers alter_partition with
compare-and-set semantics); the compat-tests use the real controller."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import trio

from kafkacompat.broker import Broker, serve
from kafkacompat.config import BrokerConfig
from kafkacompat.controller.state import BrokerInfo, PartitionState
from kafkacompat.handlers.offset_for_leader_epoch import handle_offset_for_leader_epoch
from kafkacompat.handlers.produce import handle_produce
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.wire.codec import request_class
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.frame import RequestHeader
from kafkacompat.wire.produce import ProducePartitionData, ProduceRequestData, ProduceTopicData
from tests.test_log_cleaner import make_batch

TOPIC = "t"
_correlation = itertools.count(1)


class FakeController:
    def __init__(self) -> None:
        self.brokers: dict[int, "HarnessBroker"] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.alter_calls: list[tuple] = []
        self.isolated: set[int] = set()  # brokers that get no states (as if partitioned away)

    def infos(self) -> dict[int, BrokerInfo]:
        return {i: BrokerInfo(i, "127.0.0.1", b.port) for i, b in self.brokers.items()}

    async def publish(self, state: PartitionState, to=None) -> None:
        self.states[(state.topic, state.partition)] = state
        for broker_id in (to if to is not None else state.replicas):
            broker = self.brokers.get(broker_id)
            if broker is not None and broker.running and broker_id not in self.isolated:
                await broker.apply_partition_state(state)

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


class HarnessBroker(Broker):
    controller_client = None  # a plain attribute here (the real broker's comes from the controller)

    def __init__(self, config: BrokerConfig, controller: FakeController) -> None:
        super().__init__(config)
        self.controller_client = controller
        self.running = False

    def brokers(self) -> dict[int, BrokerInfo]:
        return self.controller_client.infos()

    async def apply_partition_state(self, state: PartitionState) -> None:
        self._apply_replication_state(state)


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

    async def start(self, broker_id: int) -> HarnessBroker:
        broker = HarnessBroker(config(self.tmp_path, broker_id, **self.overrides), self.controller)
        self.controller.brokers[broker_id] = broker
        scope = trio.CancelScope()
        self.scopes[broker_id] = scope

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await serve(broker, task_status=task_status)

        await self.nursery.start(run)
        broker.running = True
        return broker

    def stop_fetching(self, broker_id: int, partition: int = 0) -> None:
        """Like SIGSTOP for replication: the broker fetches no more and hears no states."""
        self.controller.isolated.add(broker_id)
        self.broker(broker_id).fetchers.remove_partition((TOPIC, partition))

    async def resume_fetching(self, broker_id: int, partition: int = 0) -> None:
        self.controller.isolated.discard(broker_id)
        await self.broker(broker_id).apply_partition_state(self.controller.states[(TOPIC, partition)])
        self.broker(broker_id).fetchers.add_partition((TOPIC, partition), self.controller.states[(TOPIC, partition)].leader)

    def kill(self, broker_id: int) -> None:
        self.controller.brokers[broker_id].running = False
        self.scopes[broker_id].cancel()

    async def start_all(self) -> None:
        for i in range(self.size):
            await self.start(i)

    def broker(self, i: int) -> HarnessBroker:
        return self.controller.brokers[i]

    async def create_topic(self, partitions: int = 1, min_isr: int = 1) -> None:
        replicas = tuple(range(self.size))
        first, *others = self.controller.brokers.values()
        topic = first.create_topic(TOPIC, partitions, self.size, {"min.insync.replicas": str(min_isr)})
        for broker in others:  # the same topic id everywhere, as the metadata store gives it
            copy = dataclasses.replace(topic, configs=dict(topic.configs))
            broker.topics.add(copy)
            broker._open_partitions(copy, range(partitions))
        for p in range(partitions):
            leader = replicas[p % self.size]
            ordered = (leader,) + tuple(r for r in replicas if r != leader)
            await self.controller.publish(PartitionState(TOPIC, p, ordered, ordered, leader, 1, 1))


async def produce(broker: Broker, values: list[bytes], *, acks: int = -1, partition: int = 0,
                  timeout_ms: int = 5000) -> tuple[int, int]:
    blob = memoryview(bytearray(make_batch([(b"k", v) for v in values])))
    request = ProduceRequestData(None, acks, timeout_ms,
                                 [ProduceTopicData(TOPIC, None, [ProducePartitionData(partition, blob)])])
    ctx = RequestContext(broker, RequestHeader(0, 10, next(_correlation), "test", True), None)
    response = await handle_produce(request, ctx)
    result = response.topics[0].partitions[0]
    return result.error_code, result.base_offset


def log_bytes(broker: Broker, partition: int = 0) -> bytes:
    p = broker.partition(TOPIC, partition)
    return p.log.read(p.log_start_offset, 1 << 30).read_all()


async def wait_until(predicate, timeout: float = 10.0, what: str = "") -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def run(test):
    """Run ``test(cluster)`` with three started brokers, then stop them all."""

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


@run
async def test_followers_copy_the_leader_byte_for_byte_and_acks_all_waits_for_the_hw(cluster):
    await cluster.create_topic(partitions=3, min_isr=2)
    for p in range(3):
        leader = cluster.broker(p)
        for i in range(5):
            code, offset = await produce(leader, [b"m%d-%d" % (p, i)] * 3, partition=p)
            assert (code, offset) == (0, 3 * i)
            assert leader.partition(TOPIC, p).high_watermark >= offset + 3
    for p in range(3):
        leader_log = log_bytes(cluster.broker(p), p)
        await wait_until(lambda: all(log_bytes(cluster.broker(i), p) == leader_log for i in range(3)))
        await wait_until(lambda: all(cluster.broker(i).partition(TOPIC, p).high_watermark == 15 for i in range(3)))
        follower = cluster.broker((p + 1) % 3).partition(TOPIC, p)
        assert follower.epochs.entries() == [(1, 0)]
    # A follower refuses produce with NOT_LEADER_OR_FOLLOWER naming the leader (KIP-951).
    code, _ = await produce(cluster.broker(1), [b"x"], partition=0)
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER


@run
async def test_isr_shrinks_when_a_follower_stops_and_expands_when_it_catches_up(cluster):
    await cluster.create_topic(min_isr=2)
    leader = cluster.broker(0)
    assert (await produce(leader, [b"a"]))[0] == 0
    cluster.stop_fetching(2)
    await wait_until(lambda: leader.partition(TOPIC, 0).isr == [0, 1], timeout=6)
    for i in range(5):  # acks=all goes on with two in-sync replicas
        assert (await produce(leader, [b"b%d" % i]))[0] == 0
    assert cluster.broker(2).partition(TOPIC, 0).log_end_offset == 1
    await cluster.resume_fetching(2)
    await wait_until(lambda: sorted(leader.partition(TOPIC, 0).isr) == [0, 1, 2], timeout=6)
    assert log_bytes(cluster.broker(2)) == log_bytes(leader)
    # With broker 1 stopped too, the ISR drops to the leader alone: NOT_ENOUGH_REPLICAS.
    cluster.stop_fetching(1)
    cluster.stop_fetching(2)
    await wait_until(lambda: leader.partition(TOPIC, 0).isr == [0], timeout=6)
    assert (await produce(leader, [b"c"]))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await produce(leader, [b"c"], acks=1))[0] == 0


@run
async def test_acks_all_times_out_when_the_isr_does_not_advance(cluster):
    await cluster.create_topic(min_isr=2)
    leader = cluster.broker(0)
    for i in (1, 2):
        cluster.stop_fetching(i)
    code, offset = await produce(leader, [b"a"], timeout_ms=300)
    assert code == ErrorCode.REQUEST_TIMED_OUT
    assert leader.partition(TOPIC, 0).log_end_offset == 1  # written, not acknowledged


@run
async def test_a_returning_old_leader_truncates_its_divergent_tail(cluster):
    await cluster.create_topic(min_isr=1)
    old = cluster.broker(0)
    for i in range(3):
        assert (await produce(old, [b"committed-%d" % i] * 2))[0] == 0
    committed = log_bytes(old)
    await wait_until(lambda: all(log_bytes(cluster.broker(i)) == committed for i in (1, 2)))
    for i in (1, 2):
        cluster.stop_fetching(i)
    for i in range(3):  # acks=1 writes the followers never see
        assert (await produce(old, [b"lost-%d" % i] * 3, acks=1))[0] == 0
    assert old.partition(TOPIC, 0).log_end_offset == 15
    cluster.kill(0)
    await trio.sleep(0.05)
    cluster.controller.isolated.clear()
    state = await cluster.controller.elect(TOPIC, 0, 1, (1, 2))
    new_leader = cluster.broker(1)
    assert new_leader.partition(TOPIC, 0).is_leader
    for i in range(2):
        assert (await produce(new_leader, [b"new-%d" % i]))[0] == 0
    assert new_leader.partition(TOPIC, 0).epochs.entries() == [(1, 0), (2, 6)]
    # OffsetForLeaderEpoch on the new leader: epoch 1 ended at 6.
    request_cls = request_class(23)
    topic_cls = request_cls.OffsetForLeaderTopic
    request = request_cls(replica_id=-1, topics=[topic_cls(topic=TOPIC, partitions=[
        topic_cls.OffsetForLeaderPartition(partition=0, current_leader_epoch=2, leader_epoch=1)])])
    ctx = RequestContext(new_leader, RequestHeader(23, 4, 1, "test", True), None)
    answer = (await handle_offset_for_leader_epoch(request, ctx)).topics[0].partitions[0]
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, 1, 6)
    request.topics[0].partitions[0].current_leader_epoch = 1
    answer = (await handle_offset_for_leader_epoch(request, ctx)).topics[0].partitions[0]
    assert answer.error_code == ErrorCode.FENCED_LEADER_EPOCH
    # The old leader comes back as a follower: its tail goes, then it copies the new leader.
    returned = await cluster.start(0)
    await returned.apply_partition_state(state)
    await wait_until(lambda: log_bytes(returned) == log_bytes(new_leader))
    assert returned.partition(TOPIC, 0).log_end_offset == 8
    assert returned.partition(TOPIC, 0).epochs.entries() == [(1, 0), (2, 6)]
    assert b"lost-" not in log_bytes(returned)
    await wait_until(lambda: new_leader.partition(TOPIC, 0).isr == [1, 2, 0] or
                     sorted(new_leader.partition(TOPIC, 0).isr) == [0, 1, 2])


@run
async def test_internal_acks_all_append_waits_for_the_isr(cluster):
    """Partition.wait_replicated (offset commits, as Kafka's acks=-1 append of them): not done
    while the followers do not fetch (REQUEST_TIMED_OUT at the timeout), done once they do, and
    NOT_LEADER_OR_FOLLOWER when leadership moves."""
    await cluster.create_topic(min_isr=1)
    leader = cluster.broker(0)
    partition = leader.partition(TOPIC, 0)
    for i in (1, 2):
        cluster.stop_fetching(i)
    assert (await produce(leader, [b"a"], acks=1))[0] == 0
    epoch = partition.leader_epoch
    assert await partition.wait_replicated(1, epoch, 300) == ErrorCode.REQUEST_TIMED_OUT
    async with trio.open_nursery() as nursery:
        results = []

        async def wait():
            results.append(await partition.wait_replicated(1, epoch, 5000))

        nursery.start_soon(wait)
        await trio.sleep(0.2)
        assert results == []
        for i in (1, 2):
            await cluster.resume_fetching(i)
    assert results == [0] and partition.high_watermark == 1
    assert (await produce(leader, [b"b"], acks=1))[0] == 0
    for i in (1, 2):
        cluster.stop_fetching(i)
    await cluster.controller.elect(TOPIC, 0, 1, (1, 2))
    assert await partition.wait_replicated(2, epoch, 1000) == ErrorCode.NOT_LEADER_OR_FOLLOWER
