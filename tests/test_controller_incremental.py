"""Incremental metadata: a change to one partition costs that partition's reads, on the embedded
store and on a real ZooKeeper; a change whose watch is missed (while the connection is down) is
caught by the full resync after the reconnection; an election of many partitions is written in
batches (multi), still fenced by the controller epoch."""

from __future__ import annotations

from collections import Counter

import pytest
import trio

from kafkacompat.controller.controller import state_path
from kafkacompat.controller.store import MetadataStore
from tests.conftest import trio_test
from tests.test_controller_cluster import controllers, running_cluster, states, wait_for

CLUSTER_PREFIXES = ("/brokers/", "/controller", "/config/topics", "/admin/delete_topics", "/kafkacompat/shutting_down")


class ReadCounter:
    """Counts the cluster nodes a broker's store reads (the store is real; its read methods are
    wrapped to record the paths they are called with)."""

    def __init__(self, broker) -> None:
        self.member = broker.cluster
        store = broker.store
        self.paths: Counter[str] = Counter()
        for name in ("get", "exists", "children"):
            self._wrap(store, name, lambda args: [args[0]])
        if type(store).get_many is not MetadataStore.get_many:  # else it is made of get()s
            self._wrap(store, "get_many", lambda args: list(args[0]))

    def _wrap(self, store, name, paths_of) -> None:
        original = getattr(store, name)

        async def counted(*args, **kwargs):
            for path in paths_of(args):
                if path.startswith(CLUSTER_PREFIXES):
                    self.paths[path] += 1
            return await original(*args, **kwargs)

        setattr(store, name, counted)

    def total(self) -> int:
        return sum(self.paths.values())


def everywhere(cluster, topic: str) -> bool:
    return all(b.metadata.topic(topic) is not None and all(states(b, topic)) for b in cluster.brokers.values())


async def quiet(counters: list[ReadCounter], timeout: float = 60.0) -> None:
    """Until half a second passes with no cluster read and nothing left to read (the start-up's
    and the new watches' re-reads are over; a step can spend longer than that creating the logs
    of a new topic, with the new watches' re-reads still to come)."""
    with trio.fail_after(timeout):
        while True:
            for counter in counters:
                counter.paths.clear()
            await trio.sleep(0.5)
            if all(counter.total() == 0 and counter.member.settled() for counter in counters):
                return


@pytest.fixture(params=["embedded", "zookeeper"])
def connect(request, tmp_path):
    if request.param == "embedded":
        return None
    zookeeper = request.getfixturevalue("zookeeper")
    return f"{zookeeper.connect}/{tmp_path.name}"


OVERRIDES = {"zookeeper.session.timeout.ms": "4000"}


@trio_test
async def test_a_change_to_one_partition_rereads_that_partition_only(tmp_path, connect):
    async with running_cluster(tmp_path, overrides=OVERRIDES, zookeeper_connect=connect) as cluster:
        await cluster.brokers[0].admin.create_topic("wide", 60, 3, {})
        await wait_for(lambda: everywhere(cluster, "wide"), timeout=60)
        counters = {b.node_id: ReadCounter(b) for b in cluster.brokers.values()}
        await quiet(list(counters.values()))
        full_reads = {b.node_id: b.cluster.reads for b in cluster.brokers.values()}
        state = cluster.brokers[0].cluster.cache.partition_state("wide", 7)
        leader = cluster.brokers[state.leader]
        # A compare-and-set of the same ISR: a new partition epoch, and nothing for the leader
        # to undo (a shrunk ISR would be expanded again as the follower keeps fetching).
        shrunk = await leader.cluster.alter_partition("wide", 7, state.leader_epoch, state.partition_epoch,
                                                      list(state.isr))
        assert shrunk.partition_epoch == state.partition_epoch + 1
        await wait_for(lambda: all(b.cluster.cache.partition_state("wide", 7) == shrunk
                                   for b in cluster.brokers.values()), timeout=30)
        await trio.sleep(1.0)  # any further read the change caused has happened by now
        for node_id, counter in counters.items():
            # The leader's own write reads the state once before the compare-and-set; every
            # broker then reads that one node again when its watch fires: nothing else.
            why = (node_id, full_reads, {b.node_id: b.cluster.reads for b in cluster.brokers.values()},
                   controllers(cluster), sorted(p for p in counter.paths if "/partitions/" not in p))
            assert set(counter.paths) == {state_path("wide", 7)}, (why, counter.paths)
            expected = 2 if node_id == state.leader else 1
            assert counter.paths[state_path("wide", 7)] == expected, (why, counter.paths)


@trio_test
async def test_an_election_is_written_in_batches_and_rereads_only_the_changed_partitions(tmp_path, connect):
    async with running_cluster(tmp_path, overrides=OVERRIDES, zookeeper_connect=connect) as cluster:
        await cluster.brokers[0].admin.create_topic("many", 90, 3, {})
        await wait_for(lambda: everywhere(cluster, "many"), timeout=60)
        await wait_for(lambda: len(controllers(cluster)) == 1)
        controller = cluster.brokers[controllers(cluster)[0]]
        victim = next(b for b in cluster.brokers if b != controller.node_id)
        before = {s.partition: s for s in states(controller, "many")}
        led = [p for p, s in before.items() if s.leader == victim]
        assert led
        multis: list[int] = []
        original_multi = controller.store.multi

        async def recorded(ops):
            multis.append(len(ops))
            return await original_multi(ops)

        controller.store.multi = recorded
        counter = ReadCounter(controller)
        await quiet([counter])
        full_reads = controller.cluster.reads
        await cluster.stop_broker(victim, controlled=False)
        await wait_for(lambda: all(s.leader != victim and victim not in s.isr for s in states(controller, "many")),
                       timeout=60)
        await trio.sleep(1.0)
        after = {s.partition: s for s in states(controller, "many")}
        for p in led:
            assert after[p].leader_epoch == before[p].leader_epoch + 1
        # Every partition lost a replica from its ISR: one multi (the epoch check and 90 sets)
        # rather than 90 writes. Each partition is then read exactly twice on the controller:
        # the read-back in the step that wrote it (so that the step's view, its cache and the
        # states it applies show the write) and the read its watch causes (the watch cannot
        # tell our write from a later one). Leaders here no longer propose taking the dead broker
        # back into the ISR (a fetch it had parked before dying, read again when the state
        # changed): those proposals were the third and fourth reads (alter_partition's read
        # before its compare-and-set, refused anyway), one per wake-up of the parked fetch.
        assert multis and max(multis) == 91, multis
        reads = {path: n for path, n in counter.paths.items() if "/partitions/" in path}
        assert len(reads) == 90 and set(reads.values()) == {2}, (multis, counter.paths)
        assert controller.cluster.reads == full_reads  # no full re-read of the cluster


@trio_test
async def test_a_change_missed_while_disconnected_is_caught_by_the_resync(tmp_path):
    async with running_cluster(tmp_path, overrides=OVERRIDES) as cluster:
        await cluster.brokers[0].admin.create_topic("missed", 3, 3, {}, assignment={0: [0, 1, 2], 1: [0, 1, 2],
                                                                                      2: [0, 1, 2]})
        await wait_for(lambda: everywhere(cluster, "missed"))
        deaf = cluster.brokers[2]
        await quiet([ReadCounter(deaf)])  # its new watches' re-reads are done
        state = deaf.cluster.cache.partition_state("missed", 1)
        full_reads = deaf.cluster.reads
        with deaf.store.disconnected_for_tests():
            written = await cluster.brokers[0].cluster.alter_partition(
                "missed", 1, state.leader_epoch, state.partition_epoch, list(state.isr))
            await wait_for(lambda: cluster.brokers[1].cluster.cache.partition_state("missed", 1) == written)
            await trio.sleep(0.5)
            assert deaf.cluster.cache.partition_state("missed", 1) == state  # the watch never fired
        await wait_for(lambda: deaf.cluster.cache.partition_state("missed", 1) == written)
        assert deaf.cluster.reads == full_reads + 1


@trio_test
async def test_a_change_during_a_zookeeper_session_expiry_is_not_lost(tmp_path, zookeeper):
    connect = f"{zookeeper.connect}/{tmp_path.name}"
    async with running_cluster(tmp_path, overrides=OVERRIDES, zookeeper_connect=connect) as cluster:
        await cluster.brokers[0].admin.create_topic("expiry", 3, 3, {}, assignment={0: [0, 1, 2], 1: [0, 1, 2],
                                                                                      2: [0, 1, 2]})
        await wait_for(lambda: everywhere(cluster, "expiry"), timeout=30)
        expired = cluster.brokers[2]
        await quiet([ReadCounter(expired)])
        state = expired.cluster.cache.partition_state("expiry", 1)
        full_reads = expired.cluster.reads
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, expired.store.expire_session_for_tests)
            written = await cluster.brokers[0].cluster.alter_partition(
                "expiry", 1, state.leader_epoch, state.partition_epoch, list(state.isr))
        # Its expiry moves the partitions on (it leaves the ISR, then comes back): what counts is
        # that its view ends up as the store has it, at or past the write it was away for.
        other = cluster.brokers[0]
        with trio.fail_after(60):
            while True:
                seen = expired.cluster.cache.partition_state("expiry", 1)
                _, version = await other.store.get(state_path("expiry", 1))
                if (len(expired.metadata.brokers()) == 3 and seen.partition_epoch == version
                        and seen == other.cluster.cache.partition_state("expiry", 1)):
                    break
                await trio.sleep(0.05)
        assert seen.partition_epoch >= written.partition_epoch
        await wait_for(lambda: expired.cluster.reads > full_reads, timeout=60)
