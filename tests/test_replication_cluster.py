"""Replication between three replica nodes in one Trio process (tests/support.py: the real
ReplicaManager, logs and handlers of each, real sockets on loopback, follower fetchers speaking
Fetch as replicas). A tiny fake controller stands in for controller/ (it applies PartitionStates
directly and answers alter_partition with compare-and-set semantics); the compat-tests use the
real controller."""

from __future__ import annotations


import trio

from kafkacompat.handlers.offset_for_leader_epoch import handle_offset_for_leader_epoch
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.wire.codec import request_class
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.frame import RequestHeader
from tests.support import TOPIC, log_bytes, produce, run, wait_until


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
    ctx = RequestContext(new_leader.services(), RequestHeader(23, 4, 1, "test", True), None)
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
