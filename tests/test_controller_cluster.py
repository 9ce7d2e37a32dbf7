"""The controller on the MetadataStore interface: brokers in one Trio process sharing an embedded
store (and, where marked, a real ZooKeeper): registration, election, assignment, leader election
from the ISR, unclean election, compare-and-set of partition states, controlled shutdown, topic
creation and deletion, and every broker's metadata cache agreeing."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
import trio

from kafkacompat.controller.controller import CONTROLLER_EPOCH, assign_replicas, decide_state, state_path
from kafkacompat.dev_cluster import InProcessCluster
from kafkacompat.controller.state import PartitionState
from tests.conftest import trio_test
from kafkacompat.wire.errors import ErrorCode, KafkaError


@asynccontextmanager
async def running_cluster(tmp_path, count=3, racks=None, overrides=None, zookeeper_connect=None):
    async with trio.open_nursery() as nursery:
        cluster = InProcessCluster(nursery, tmp_path, overrides=overrides, zookeeper_connect=zookeeper_connect)
        for broker_id in range(count):
            await cluster.start_broker(broker_id, rack=racks[broker_id] if racks else None)
        try:
            await wait_for(lambda: all(len(b.metadata.brokers()) == count for b in cluster.brokers.values()))
            yield cluster
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()


async def wait_for(predicate, timeout=15.0):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def controllers(cluster):
    return [b.node_id for b in cluster.brokers.values() if b.cluster.is_controller]


def states(broker, topic):
    topic_info = broker.metadata.topic(topic)
    return [broker.cluster.cache.partition_state(topic, p) for p in range(topic_info.partitions)]


def led_without(broker, topic, victim) -> bool:
    """Whether ``broker`` has every partition state of ``topic`` and none is led by ``victim`` or
    has it in the ISR. A broker other than the creator learns a new topic a little later (its
    node, then its states, each from a watch), so one may not know all of them yet."""
    if broker.metadata.topic(topic) is None:
        return False
    current = states(broker, topic)
    return all(s is not None and s.leader != victim and victim not in s.isr for s in current)


# ---- assignment (pure) -------------------------------------------------------------------------


def test_round_robin_assignment_matches_kafka():
    # Kafka's AdminZkClientTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, start 0.
    result = assign_replicas({b: None for b in range(5)}, 10, 3, start_index=0, replica_shift=0)
    assert result == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                      5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_rack_aware_assignment_puts_replicas_on_distinct_racks():
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    result = assign_replicas(racks, 12, 3)
    leaders = {}
    for replicas in result.values():
        assert len(set(replicas)) == 3
        assert {racks[r] for r in replicas} == {"a", "b", "c"}
        leaders[replicas[0]] = leaders.get(replicas[0], 0) + 1
    assert sorted(leaders.values()) == [2] * 6  # leaders spread evenly


def test_assignment_refuses_more_replicas_than_brokers():
    with pytest.raises(KafkaError) as info:
        assign_replicas({0: None, 1: None}, 1, 3)
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_leader_decisions():
    state = PartitionState("t", 0, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=4)
    assert decide_state(state, {1, 2, 3}, set(), False) is None
    assert decide_state(state, {2, 3}, set(), False) == (2, [2, 3])          # dead leader
    assert decide_state(state, {1, 2, 3}, {1}, False) == (2, [2, 3])        # controlled shutdown
    assert decide_state(state, {1, 3}, set(), False) == (1, [1, 3])          # dead follower leaves ISR
    narrow = PartitionState("t", 0, (1, 2, 3), (1,), leader=1, leader_epoch=4)
    assert decide_state(narrow, {2, 3}, set(), False) == (-1, [1])           # offline, ISR kept
    assert decide_state(narrow, {2, 3}, set(), True) == (2, [2])             # unclean
    assert decide_state(narrow, {1, 2, 3}, {1}, False) is None               # nobody to take over
    offline = PartitionState("t", 0, (1, 2, 3), (1,), leader=-1, leader_epoch=5)
    assert decide_state(offline, {1, 2}, set(), False) == (1, [1])           # last ISR member is back


# ---- the cluster -------------------------------------------------------------------------------


@trio_test
async def test_one_controller_and_reelection_when_its_broker_goes(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await wait_for(lambda: len(controllers(cluster)) == 1)
        first = controllers(cluster)[0]
        store = cluster.brokers[first].store
        epoch = int((await store.get(CONTROLLER_EPOCH))[0])
        for broker in cluster.brokers.values():
            assert broker.metadata.controller_id == first
        await cluster.stop_broker(first, controlled=False)
        await wait_for(lambda: len(controllers(cluster)) == 1)
        second = controllers(cluster)[0]
        assert second != first
        await wait_for(lambda: all(b.metadata.controller_id == second for b in cluster.brokers.values()))
        any_store = next(iter(cluster.brokers.values())).store
        assert int((await any_store.get(CONTROLLER_EPOCH))[0]) == epoch + 1


@trio_test
async def test_reelection_when_the_controller_session_expires(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await wait_for(lambda: len(controllers(cluster)) == 1)
        first = controllers(cluster)[0]
        cluster.brokers[first].store.expire_session()
        # Another broker wins, or the same one after re-registering: either way exactly one
        # controller, a higher epoch, and the expired broker registered again.
        store = cluster.brokers[first].store
        with trio.fail_after(10):
            while int((await store.get(CONTROLLER_EPOCH))[0]) < 2:
                await trio.sleep(0.02)
        await wait_for(lambda: len(controllers(cluster)) == 1 and all(
            len(b.metadata.brokers()) == 3 for b in cluster.brokers.values()))


@trio_test
async def test_create_topic_rf3_every_broker_agrees(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        broker = cluster.brokers[1]
        topic = await broker.admin.create_topic("orders", 6, 3, {"retention.ms": "1000000"})
        assert topic.partitions == 6 and topic.replication_factor == 3
        await wait_for(lambda: all(b.metadata.topic("orders") and all(states(b, "orders"))
                                   for b in cluster.brokers.values()))
        reference = states(broker, "orders")
        for state in reference:
            assert len(state.replicas) == 3 and state.leader == state.replicas[0]
            assert set(state.isr) == set(state.replicas)
            assert state.leader_epoch == 0 and state.offline_replicas == ()
        assert {s.leader for s in reference} == {0, 1, 2}  # leaders spread
        for other in cluster.brokers.values():
            assert states(other, "orders") == reference
            assert other.metadata.topic("orders").configs == {"retention.ms": "1000000"}
            # every broker hosts its replicas
            for state in reference:
                assert (other.partition("orders", state.partition) is not None) == (other.node_id in state.replicas)
        with pytest.raises(KafkaError) as info:
            await cluster.brokers[2].admin.create_topic("orders", 1, 1, {})
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS


@trio_test
async def test_leaders_move_to_isr_members_with_an_epoch_bump_when_a_broker_dies(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.brokers[0].admin.create_topic("events", 3, 3, {})
        before = {s.partition: s for s in states(cluster.brokers[0], "events")}
        victim = before[0].leader
        await cluster.stop_broker(victim, controlled=False)
        survivor = next(iter(cluster.brokers.values()))
        await wait_for(lambda: led_without(survivor, "events", victim))
        for state in states(survivor, "events"):
            old = before[state.partition]
            if old.leader == victim:
                assert state.leader in old.isr and state.leader != victim
                assert state.leader_epoch == old.leader_epoch + 1
            else:
                assert state.leader == old.leader and state.leader_epoch == old.leader_epoch
            assert state.offline_replicas == (victim,)
            assert state.partition_epoch > old.partition_epoch


@trio_test
async def test_unclean_leader_election_is_honoured(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        b0 = cluster.brokers[0]
        await b0.admin.create_topic("clean", 1, 2, {}, assignment={0: [1, 2]})
        await b0.admin.create_topic("unclean", 1, 2, {"unclean.leader.election.enable": "true"},
                                    assignment={0: [1, 2]})
        # The follower dies and leaves the ISR; then the leader dies, and the follower returns
        # out of sync (with no leader alive, nothing can re-admit it to the ISR).
        for topic in ("clean", "unclean"):
            await wait_for(lambda: b0.cluster.cache.partition_state(topic, 0) is not None)
        await cluster.stop_broker(2, controlled=False)
        for topic in ("clean", "unclean"):
            await wait_for(lambda: b0.cluster.cache.partition_state(topic, 0).isr == (1,))
        await cluster.stop_broker(1, controlled=False)
        await cluster.start_broker(2)
        await wait_for(lambda: b0.cluster.cache.partition_state("unclean", 0).leader == 2)
        await wait_for(lambda: b0.cluster.cache.partition_state("clean", 0).leader == -1)
        assert b0.cluster.cache.partition_state("unclean", 0).isr == (2,)
        assert b0.cluster.cache.partition_state("clean", 0).isr == (1,)  # kept for its return


@trio_test
async def test_alter_partition_compare_and_set(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.brokers[0].admin.create_topic("cas", 1, 3, {}, assignment={0: [2, 0, 1]})
        leader = cluster.brokers[2]
        await wait_for(lambda: leader.cluster.cache.partition_state("cas", 0) is not None)
        state = leader.cluster.cache.partition_state("cas", 0)
        client = leader.cluster
        shrunk = await client.alter_partition("cas", 0, state.leader_epoch, state.partition_epoch, [2, 0])
        assert shrunk.isr == (2, 0) and shrunk.partition_epoch == state.partition_epoch + 1
        with pytest.raises(KafkaError) as stale:
            await client.alter_partition("cas", 0, state.leader_epoch, state.partition_epoch, [2])
        assert stale.value.code == ErrorCode.INVALID_UPDATE_VERSION
        with pytest.raises(KafkaError) as fenced:
            await client.alter_partition("cas", 0, state.leader_epoch - 1, shrunk.partition_epoch, [2])
        assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH
        with pytest.raises(KafkaError) as not_leader:
            await cluster.brokers[0].cluster.alter_partition(
                "cas", 0, state.leader_epoch, shrunk.partition_epoch, [2])
        assert not_leader.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        expanded = await client.alter_partition("cas", 0, state.leader_epoch, shrunk.partition_epoch, [2, 0, 1])
        assert expanded.isr == (2, 0, 1)
        # The store holds exactly what the last successful write said.
        data, version = await leader.store.get(state_path("cas", 0))
        assert version == expanded.partition_epoch and b'"isr":[2,0,1]' in data
        await wait_for(lambda: all(b.cluster.cache.partition_state("cas", 0) == expanded
                                   for b in cluster.brokers.values()))


@trio_test
async def test_controlled_shutdown_moves_leaders_first(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.brokers[0].admin.create_topic("moving", 6, 3, {})
        leaving = cluster.brokers[1]
        await wait_for(lambda: leaving.metadata.topic("moving") and all(states(leaving, "moving")))
        before = {s.partition: s for s in states(leaving, "moving")}
        assert any(s.leader == 1 for s in before.values())
        assert await leaving.cluster.controlled_shutdown(timeout=10)
        # Still registered (alive), but it leads nothing and is in no ISR.
        assert 1 in leaving.metadata.brokers()
        for state in states(leaving, "moving"):
            assert state.leader != 1 and 1 not in state.isr
            if before[state.partition].leader == 1:
                assert state.leader_epoch == before[state.partition].leader_epoch + 1
        await cluster.stop_broker(1, controlled=False)


@trio_test
async def test_topic_deletion_and_partition_addition_through_the_store(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        b0, b2 = cluster.brokers[0], cluster.brokers[2]
        topic = await b0.admin.create_topic("temp", 2, 2, {})
        await wait_for(lambda: b2.metadata.topic("temp") is not None)
        await b2.admin.add_partitions(b2.metadata.topic("temp"), 5)
        await wait_for(lambda: all(b.metadata.topic("temp") and b.metadata.topic("temp").partitions == 5
                                   and all(states(b, "temp")) for b in cluster.brokers.values()))
        await b2.admin.delete_topic(b2.metadata.topic("temp"))
        await wait_for(lambda: all(b.metadata.topic("temp") is None and not any(
            k[0] == "temp" for k in b.replicas.partitions) for b in cluster.brokers.values()))
        assert await b0.store.exists("/brokers/topics/temp") is None
        assert await b0.store.children("/admin/delete_topics") == []
        assert b0.metadata.topic_by_id(topic.topic_id) is None


@trio_test
async def test_zookeeper_cluster_election_failover_and_topics(tmp_path, zookeeper):
    connect = f"{zookeeper.connect}/{tmp_path.name}"
    overrides = {"zookeeper.session.timeout.ms": "2000"}
    async with running_cluster(tmp_path, overrides=overrides, zookeeper_connect=connect) as cluster:
        await wait_for(lambda: len(controllers(cluster)) == 1)
        await cluster.brokers[0].admin.create_topic("zk-topic", 3, 3, {})
        before = {s.partition: s for s in states(cluster.brokers[0], "zk-topic")}
        first = controllers(cluster)[0]
        # The controller's ZooKeeper session dies: its ephemerals go, a controller is elected again.
        await trio.to_thread.run_sync(cluster.brokers[first].store.expire_session_for_tests)
        await wait_for(lambda: len(controllers(cluster)) == 1 and all(
            len(b.metadata.brokers()) == 3 for b in cluster.brokers.values()), timeout=30)
        # A broker dies: leaders move within the ISR.
        victim = before[0].leader
        await cluster.stop_broker(victim, controlled=False)
        survivor = next(iter(cluster.brokers.values()))
        await wait_for(lambda: led_without(survivor, "zk-topic", victim), timeout=30)
        # Its view of the live brokers converges too (the expired broker registers again).
        await wait_for(lambda: len(survivor.metadata.brokers()) == 2, timeout=30)
        await survivor.admin.create_topic("after-failover", 2, 2, {})
        assert all(states(survivor, "after-failover"))


@trio_test
async def test_preferred_and_unclean_elections_through_the_controller(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        b0 = cluster.brokers[0]
        await b0.admin.create_topic("pref", 1, 3, {}, assignment={0: [1, 0, 2]})
        await wait_for(lambda: b0.cluster.cache.partition_state("pref", 0) is not None)
        results = await b0.cluster.elect_leaders(0, [("pref", 0), ("nope", 0)])
        assert results[("pref", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
        assert results[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Leadership moves off the preferred replica (controlled shutdown of 1): no preferred
        # election while 1 is away (checked then: once back, replication may re-admit it to the
        # ISR at any moment); it comes back as a follower, and the preferred election gives
        # leadership back once it is in the ISR again.
        leaving = cluster.brokers[1]
        assert await leaving.cluster.controlled_shutdown(timeout=10)
        await cluster.stop_broker(1, controlled=False)
        await wait_for(lambda: 1 not in b0.cluster.cache.partition_state("pref", 0).isr)
        moved = b0.cluster.cache.partition_state("pref", 0)
        assert moved.leader == 0
        results = await b0.cluster.elect_leaders(0, [("pref", 0)])
        assert results[("pref", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        await cluster.start_broker(1)
        await wait_for(lambda: 1 in b0.metadata.brokers())
        leader = cluster.brokers[0]
        await wait_for(lambda: leader.cluster.cache.partition_state("pref", 0).leader == 0)
        # Replication re-admits the caught-up follower (the leader's AlterPartition).
        await wait_for(lambda: 1 in leader.cluster.cache.partition_state("pref", 0).isr)
        results = await cluster.brokers[2].cluster.elect_leaders(0, [("pref", 0)])
        assert results[("pref", 0)] == (ErrorCode.NONE, None)
        await wait_for(lambda: all(b.cluster.cache.partition_state("pref", 0).leader == 1
                                   for b in cluster.brokers.values()))
        assert b0.cluster.cache.partition_state("pref", 0).leader_epoch == moved.leader_epoch + 1
        results = await b0.cluster.elect_leaders(1, [("pref", 0)])
        assert results[("pref", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED


@trio_test
async def test_producer_id_blocks_come_from_the_store(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        ids = [await broker.producer_ids.generate() for broker in cluster.brokers.values()]
        blocks = {producer_id // 1000 for producer_id in ids}
        assert len(blocks) == 3  # one block per broker, claimed by compare-and-set in the store
        assert await cluster.brokers[0].store.exists("/latest_producer_id_block") is not None


@trio_test
async def test_auto_leader_rebalance_returns_leadership_to_preferred_replicas(tmp_path):
    overrides = {"leader.imbalance.check.interval.seconds": "1"}
    async with running_cluster(tmp_path, overrides=overrides) as cluster:
        b0 = cluster.brokers[0]
        await b0.admin.create_topic("rebalance", 3, 3, {}, assignment={0: [1, 0, 2], 1: [1, 2, 0], 2: [0, 1, 2]})
        await cluster.stop_broker(1, controlled=False)
        await wait_for(lambda: all(s.leader != 1 for s in states(b0, "rebalance")))
        await cluster.start_broker(1)
        await wait_for(lambda: 1 in b0.metadata.brokers())
        # The returning follower rejoins the ISR (replication reports it once caught up; the test
        # reports it too, in case replication has not yet).
        with trio.fail_after(20):
            for partition in range(3):
                while 1 not in (state := b0.cluster.cache.partition_state("rebalance", partition)).isr:
                    leader = cluster.brokers.get(state.leader)
                    if leader is not None:
                        try:
                            await leader.cluster.alter_partition(
                                "rebalance", partition, state.leader_epoch, state.partition_epoch,
                                list(state.isr) + [1])
                        except KafkaError:
                            pass  # stale view or replication got there first: look again
                    await trio.sleep(0.05)
        await wait_for(lambda: [s.leader for s in states(b0, "rebalance")] == [1, 1, 0], timeout=20)


@trio_test
async def test_a_deposed_controller_is_fenced_by_the_controller_epoch(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        b0 = cluster.brokers[0]
        await b0.admin.create_topic("fenced", 1, 3, {}, assignment={0: [0, 1, 2]})
        await wait_for(lambda: len(controllers(cluster)) == 1)
        zombie = cluster.brokers[controllers(cluster)[0]].cluster
        state = zombie.view.state("fenced", 0)
        raw = zombie.view.raw_states[("fenced", 0)][0]
        # A successor took a newer epoch (as after an election the zombie has not noticed yet).
        store = zombie.store
        data, version = await store.get(CONTROLLER_EPOCH)
        await store.set(CONTROLLER_EPOCH, str(int(data) + 1).encode(), version)
        assert not await zombie._write_state(state, raw, 2, [2])
        assert not zombie.is_controller
        data, written = await store.get(state_path("fenced", 0))
        assert written == state.partition_epoch and b'"leader":0' in data
