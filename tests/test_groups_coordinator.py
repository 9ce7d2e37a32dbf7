"""The group coordinator's state machine, transition by transition, on a real broker (real logs,
real __consumer_offsets) with Trio's MockClock driving every timeout: nothing here sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.controller.state import PartitionState
from kafkacompat.groups.coordinator import CommitPartition, GroupCoordinator, JoinRequest
from kafkacompat.groups.state import GroupState
from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.wire.errors import ErrorCode

E = ErrorCode
SESSION = 10_000
REBALANCE = 30_000


class Harness:
    def __init__(self, broker: Broker, clock: trio.testing.MockClock, nursery: trio.Nursery) -> None:
        self.broker = broker
        self.coord: GroupCoordinator = broker.groups
        self.clock = clock
        self.nursery = nursery
        self.results: dict[str, object] = {}

    async def advance(self, ms: float) -> None:
        """Move the clock, stopping at every timer deadline on the way, and let the timer task
        and every woken handler run at each stop (as if the time had really passed)."""
        await trio.testing.wait_all_tasks_blocked()
        target = trio.current_time() + ms / 1000
        while True:
            deadline = self.coord._timers.next_deadline()
            stop = target if deadline is None else min(target, deadline / 1000)
            if stop > trio.current_time():
                self.clock.jump(stop - trio.current_time())
            await trio.testing.wait_all_tasks_blocked()
            if stop >= target:
                return

    def join_soon(self, tag: str, group: str, member_id: str = "", *, protocols=(("range", b"m"),),
                  instance: str | None = None, version: int = 5, session: int = SESSION,
                  rebalance: int = REBALANCE, protocol_type: str = "consumer") -> None:
        request = JoinRequest(group, member_id, instance, session, rebalance, protocol_type,
                              [(n, m) for n, m in protocols], client_id=tag, client_host="/127.0.0.1",
                              version=version)

        async def run():
            self.results[tag] = await self.coord.join_group(request)

        self.results.pop(tag, None)
        self.nursery.start_soon(run)

    async def join(self, *args, **kwargs):
        self.join_soon(*args, **kwargs)
        await trio.testing.wait_all_tasks_blocked()
        return self.results.get(args[0])

    async def join_dynamic(self, tag: str, group: str, **kwargs):
        """MEMBER_ID_REQUIRED round trip, then the parked join (returns None while parked)."""
        first = await self.join(tag, group, **kwargs)
        assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith(tag + "-")
        return first.member_id, await self.join(tag, group, first.member_id, **kwargs)

    def sync_soon(self, tag: str, group: str, generation: int, member_id: str, assignments=None,
                  instance: str | None = None) -> None:
        async def run():
            self.results[tag] = await self.coord.sync_group(group, generation, member_id, instance, None, None,
                                                            assignments or {})

        self.results.pop(tag, None)
        self.nursery.start_soon(run)

    async def sync(self, *args, **kwargs):
        self.sync_soon(*args, **kwargs)
        await trio.testing.wait_all_tasks_blocked()
        return self.results.get(args[0])

    async def stable_group(self, group: str, tags: list[str], **kwargs) -> dict[str, str]:
        """Members join (during the initial delay), the leader assigns, everybody syncs."""
        ids = {}
        for tag in tags:
            ids[tag], parked = await self.join_dynamic(tag, group, **kwargs)
            assert parked is None
        await h_advance_until(self, tags, self.broker.config.group_initial_rebalance_delay_ms)
        results = {tag: self.results[tag] for tag in tags}
        leader = [t for t in tags if results[t].members][0]
        generation = results[leader].generation_id
        for tag in tags:
            if tag != leader:
                self.sync_soon(tag, group, generation, ids[tag])
        await self.sync(leader, group, generation, ids[leader], {ids[t]: t.encode() for t in tags})
        await trio.testing.wait_all_tasks_blocked()
        for tag in tags:
            assert self.results[tag].error == E.NONE and self.results[tag].assignment == tag.encode()
        assert self.coord.groups[group].state == GroupState.STABLE
        return ids


async def h_advance_until(h: "Harness", tags: list[str], step: int) -> None:
    for _ in range(20):
        if all(tag in h.results for tag in tags):
            return
        await h.advance(step)
    raise AssertionError("the join phase did not complete")


def run_test(tmp_path: Path, body, **config):
    config.setdefault("group_initial_rebalance_delay_ms", 3000)
    config.setdefault("group_min_session_timeout_ms", 1000)

    async def main():
        broker = Broker(BrokerConfig(data_dir=tmp_path / "data", **config))
        broker.open()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.groups.run)
                await body(Harness(broker, trio.lowlevel.current_clock(), nursery))
                nursery.cancel_scope.cancel()
        finally:
            broker.close()

    trio.run(main, clock=trio.testing.MockClock())


# ---- join phase -------------------------------------------------------------------------------


def test_member_id_required_then_initial_delay_then_sync(tmp_path):
    async def body(h: Harness):
        member_id, parked = await h.join_dynamic("a", "g")
        assert parked is None
        group = h.coord.groups["g"]
        assert group.state == GroupState.PREPARING_REBALANCE
        await h.advance(2_900)
        assert "a" not in h.results  # still inside group.initial.rebalance.delay.ms
        await h.advance(100)
        result = h.results["a"]
        assert (result.error, result.generation_id, result.leader_id, result.member_id) == (E.NONE, 1, member_id, member_id)
        assert result.protocol_name == "range" and result.members == [(member_id, None, b"m")]
        assert group.state == GroupState.COMPLETING_REBALANCE
        sync = await h.sync("a", "g", 1, member_id, {member_id: b"assigned"})
        assert (sync.error, sync.assignment, sync.protocol_name) == (E.NONE, b"assigned", "range")
        assert group.state == GroupState.STABLE
        assert h.coord.heartbeat("g", 1, member_id, None) == E.NONE

    run_test(tmp_path, body)


def test_join_v3_needs_no_member_id_round_trip(tmp_path):
    async def body(h: Harness):
        assert await h.join("a", "g", version=3) is None
        await h.advance(3_000)
        assert h.results["a"].error == E.NONE and h.results["a"].member_id.startswith("a-")

    run_test(tmp_path, body)


def test_initial_delay_is_extended_while_members_keep_joining(tmp_path):
    async def body(h: Harness):
        await h.join_dynamic("a", "g", rebalance=10_000)
        await h.advance(2_000)
        await h.join_dynamic("b", "g", rebalance=10_000)
        await h.advance(1_000)  # t=3s: a member joined during the delay, so it is extended by 3s
        assert "a" not in h.results and "b" not in h.results
        await h.advance(2_999)
        assert "a" not in h.results
        await h.advance(1)  # t=6s
        assert h.results["a"].generation_id == h.results["b"].generation_id == 1
        assert len(h.results["a"].members) == 2  # the first member to join leads

    run_test(tmp_path, body)


def test_protocol_selection_most_votes_among_common_protocols(tmp_path):
    async def body(h: Harness):
        await h.join_dynamic("a", "g", protocols=[("range", b"1"), ("roundrobin", b"1"), ("sticky", b"1")])
        await h.join_dynamic("b", "g", protocols=[("sticky", b"2"), ("roundrobin", b"2")])
        await h.join_dynamic("c", "g", protocols=[("roundrobin", b"3"), ("sticky", b"3")])
        await h.advance(6_000)  # members joined during the initial delay: it was extended once
        # range is not supported by all; votes: a->roundrobin, b->sticky, c->roundrobin
        assert h.results["a"].protocol_name == "roundrobin"
        assert sorted(md for _, _, md in h.results["a"].members) == [b"1", b"2", b"3"]

    run_test(tmp_path, body)


def test_inconsistent_group_protocol(tmp_path):
    async def body(h: Harness):
        await h.stable_group("g", ["a"])
        assert (await h.join("x", "g", protocol_type="connect")).error == E.INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join("y", "g", protocols=[("other", b"")])).error == E.INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join("z", "g2", protocol_type="")).error == E.INCONSISTENT_GROUP_PROTOCOL
        ids = h.coord.groups["g"].members
        member_id = next(iter(ids))
        result = await h.coord.sync_group("g", 1, member_id, None, "consumer", "roundrobin", {})
        assert result.error == E.INCONSISTENT_GROUP_PROTOCOL

    run_test(tmp_path, body)


def test_join_and_request_validation_errors(tmp_path):
    async def body(h: Harness):
        assert (await h.join("a", "")).error == E.INVALID_GROUP_ID
        assert (await h.join("a", "g", session=500)).error == E.INVALID_SESSION_TIMEOUT
        assert (await h.join("a", "g", session=2_000_000)).error == E.INVALID_SESSION_TIMEOUT
        assert (await h.join("a", "nogroup", "some-member")).error == E.UNKNOWN_MEMBER_ID
        assert h.coord.heartbeat("nogroup", 1, "m", None) == E.UNKNOWN_MEMBER_ID
        assert (await h.coord.sync_group("nogroup", 1, "m", None, None, None, {})).error == E.UNKNOWN_MEMBER_ID
        assert h.coord.leave_group("nogroup", [("m", None)])[0] == E.UNKNOWN_MEMBER_ID
        assert h.coord.describe_group("") == (E.INVALID_GROUP_ID, None)
        assert h.coord.describe_group("nogroup") == (E.NONE, None)  # described as Dead
        ids = await h.stable_group("g", ["a", "b"])
        assert h.coord.heartbeat("g", 1, "stranger", None) == E.UNKNOWN_MEMBER_ID
        assert h.coord.heartbeat("g", 7, ids["a"], None) == E.ILLEGAL_GENERATION
        assert (await h.coord.sync_group("g", 7, ids["a"], None, None, None, {})).error == E.ILLEGAL_GENERATION
        assert h.coord.delete_groups(["g", "missing", ""]) == [E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND,
                                                              E.INVALID_GROUP_ID]

    run_test(tmp_path, body)


def test_group_max_size(tmp_path):
    async def body(h: Harness):
        await h.stable_group("g", ["a", "b"])
        # Kafka checks the size before handing out a member id
        assert (await h.join("c", "g")).error == E.GROUP_MAX_SIZE_REACHED
        assert len(h.coord.groups["g"].members) == 2
        # existing members still rejoin
        h.join_soon("a", "g", next(iter(h.coord.groups["g"].members)))
        await trio.testing.wait_all_tasks_blocked()
        assert h.coord.groups["g"].state == GroupState.PREPARING_REBALANCE

    run_test(tmp_path, body, group_max_size=2)


# ---- timeouts ---------------------------------------------------------------------------------


def test_session_timeout_removes_member_and_rebalances(tmp_path):
    async def body(h: Harness):
        ids = await h.stable_group("g", ["a", "b"])
        group = h.coord.groups["g"]
        for _ in range(3):
            assert h.coord.heartbeat("g", 1, ids["a"], None) == E.NONE
            await h.advance(SESSION / 4)
            assert ids["b"] in group.members
        await h.advance(SESSION / 4)
        # b never heartbeated: it was removed after its session timeout
        assert ids["b"] not in group.members
        assert group.state == GroupState.PREPARING_REBALANCE
        assert h.coord.heartbeat("g", 1, ids["a"], None) == E.REBALANCE_IN_PROGRESS
        assert (await h.coord.sync_group("g", 1, ids["a"], None, None, None, {})).error == E.REBALANCE_IN_PROGRESS
        rejoin = await h.join("a", "g", ids["a"])
        # all remaining members rejoined and this is not the initial rebalance: completes at once
        assert rejoin.generation_id == 2 and [m for m, _, _ in rejoin.members] == [ids["a"]]

    run_test(tmp_path, body)


def test_rebalance_timeout_removes_members_that_did_not_rejoin(tmp_path):
    async def body(h: Harness):
        ids = await h.stable_group("g", ["a", "b"], rebalance=20_000)
        h.join_soon("a", "g", ids["a"], rebalance=20_000)  # the leader rejoins: rebalance
        await trio.testing.wait_all_tasks_blocked()
        group = h.coord.groups["g"]
        assert group.state == GroupState.PREPARING_REBALANCE and "a" not in h.results
        for _ in range(3):  # b keeps heartbeating but never rejoins
            await h.advance(6_000)
            assert h.coord.heartbeat("g", 1, ids["b"], None) == E.REBALANCE_IN_PROGRESS
        await h.advance(2_000)  # t = 20s
        result = h.results["a"]
        assert result.generation_id == 2 and [m for m, _, _ in result.members] == [ids["a"]]
        assert ids["b"] not in group.members
        assert h.coord.heartbeat("g", 2, ids["b"], None) == E.UNKNOWN_MEMBER_ID

    run_test(tmp_path, body)


def test_pending_member_that_never_rejoins_expires(tmp_path):
    async def body(h: Harness):
        first = await h.join("a", "g")
        assert h.coord.groups["g"].pending_members == {first.member_id}
        await h.advance(SESSION)
        assert not h.coord.groups["g"].pending_members

    run_test(tmp_path, body)


def test_follower_sync_waits_for_leader_and_laggard_leader_times_out(tmp_path):
    async def body(h: Harness):
        ids = {}
        for tag in ("a", "b"):
            ids[tag], _ = await h.join_dynamic(tag, "g", rebalance=15_000)
        await h.advance(6_000)  # the second join extended the initial delay once
        h.sync_soon("b", "g", 1, ids["b"])
        await h.advance(5_000)
        assert "b" not in h.results  # parked until the leader's assignment
        assert h.coord.heartbeat("g", 1, ids["b"], None) == E.NONE
        await h.advance(10_000)  # the leader never synced within the rebalance timeout
        assert h.results["b"].error == E.REBALANCE_IN_PROGRESS
        assert ids["a"] not in h.coord.groups["g"].members

    run_test(tmp_path, body)


# ---- static membership ----------------------------------------------------------------------


def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced(tmp_path):
    async def body(h: Harness):
        static = await h.join("s", "g", instance="inst-1")  # static members need no member id round trip
        assert static is None
        dyn_id, _ = await h.join_dynamic("d", "g")
        await h.advance(6_000)
        s_id = h.results["s"].member_id
        assert s_id.startswith("inst-1-") and h.results["s"].members  # first to join leads
        h.sync_soon("d", "g", 1, dyn_id)
        await h.sync("s", "g", 1, s_id, {s_id: b"S", dyn_id: b"D"}, instance="inst-1")
        group = h.coord.groups["g"]
        assert group.state == GroupState.STABLE
        # the static member restarts: unknown member id, same instance id
        again = await h.join("s2", "g", instance="inst-1", version=5)
        assert again.error == E.NONE and again.generation_id == 1 and again.member_id != s_id
        assert again.leader_id == s_id  # before v9 the old leader id is returned: no reassignment
        assert group.state == GroupState.STABLE and group.generation_id == 1
        assert h.coord.heartbeat("g", 1, dyn_id, None) == E.NONE  # the other member sees no rebalance
        sync = await h.coord.sync_group("g", 1, again.member_id, "inst-1", None, None, {})
        assert (sync.error, sync.assignment) == (E.NONE, b"S")
        assert h.coord.heartbeat("g", 1, s_id, "inst-1") == E.FENCED_INSTANCE_ID
        assert (await h.join("s", "g", s_id, instance="inst-1")).error == E.FENCED_INSTANCE_ID
        # leave by instance id only
        error, errors = h.coord.leave_group("g", [("", "inst-1")])
        assert (error, errors) == (E.NONE, [E.NONE])
        assert group.state == GroupState.PREPARING_REBALANCE

    run_test(tmp_path, body)


def test_static_leader_rejoin_v9_skips_assignment(tmp_path):
    async def body(h: Harness):
        await h.join("s", "g", instance="i", version=9)
        await h.advance(3_000)
        s_id = h.results["s"].member_id
        await h.sync("s", "g", 1, s_id, {s_id: b"A"}, instance="i")
        again = await h.join("s2", "g", instance="i", version=9)
        assert again.skip_assignment and again.leader_id == again.member_id and len(again.members) == 1

    run_test(tmp_path, body)


# ---- group metadata stored with acks=-1 (Kafka's storeGroup) ------------------------------------


class ReplicatedOffsets:
    """The group's __consumer_offsets partition led here with a second replica in its ISR, as in a
    cluster: its high watermark moves only when that follower fetches (``follower_fetches`` is
    the leader's side of a replica Fetch, what a real follower's request runs)."""

    def __init__(self, h: Harness, group_id: str) -> None:
        h.coord.ensure_offsets_topic()
        self.index = h.coord.partition_for(group_id)
        self.partition = h.broker.partition(OFFSETS_TOPIC, self.index)
        self.node = h.broker.node_id
        self.follower = self.node + 1
        self.partition.become_leader(self.state(leader=self.node, epoch=self.partition.leader_epoch + 1))

    def state(self, *, leader: int, epoch: int) -> PartitionState:
        replicas = (self.node, self.follower)
        return PartitionState(OFFSETS_TOPIC, self.index, replicas, replicas, leader, epoch,
                              self.partition.partition_epoch + 1)

    @property
    def unreplicated(self) -> bool:
        return self.partition.high_watermark < self.partition.log_end_offset

    async def follower_fetches(self) -> None:
        self.partition.update_follower_fetch(self.follower, self.partition.log_end_offset)
        await trio.testing.wait_all_tasks_blocked()

    def leadership_moves_away(self) -> PartitionState:
        """The controller makes the follower leader: this replica follows (the first half of
        ReplicaManager.apply_partition_state; its leadership listener, the coordinator, is the second)."""
        state = self.state(leader=self.follower, epoch=self.partition.leader_epoch + 1)
        self.partition.become_follower(state)
        return state


async def two_members_at_generation_1(h: Harness, group: str = "g") -> dict[str, str]:
    """a and b joined (a leads); the group awaits the leader's SyncGroup."""
    ids = {}
    for tag in ("a", "b"):
        ids[tag], _ = await h.join_dynamic(tag, group)
    await h_advance_until(h, ["a", "b"], h.broker.config.group_initial_rebalance_delay_ms)
    assert h.results["a"].members and h.results["a"].generation_id == 1
    assert h.coord.groups[group].state == GroupState.COMPLETING_REBALANCE
    return ids


def test_sync_answers_once_the_assignment_is_replicated(tmp_path):
    async def body(h: Harness):
        offsets = ReplicatedOffsets(h, "g")
        ids = await two_members_at_generation_1(h)  # JoinGroup does not wait for the ISR, as in Kafka
        group = h.coord.groups["g"]
        await h.sync("b", "g", 1, ids["b"])  # parked
        await h.sync("a", "g", 1, ids["a"], {ids["a"]: b"A", ids["b"]: b"B"})
        assert offsets.unreplicated  # the group record is in the leader's log only
        assert "a" not in h.results and "b" not in h.results
        assert group.state == GroupState.COMPLETING_REBALANCE
        assert h.coord.heartbeat("g", 1, ids["b"], None) == E.NONE
        await h.advance(h.broker.config.offsets_commit_timeout_ms - 1)
        assert "a" not in h.results and "b" not in h.results
        await offsets.follower_fetches()
        assert (h.results["a"].error, h.results["a"].assignment) == (E.NONE, b"A")
        assert (h.results["b"].error, h.results["b"].assignment) == (E.NONE, b"B")
        assert group.state == GroupState.STABLE and group.generation_id == 1
        assert h.coord.heartbeat("g", 1, ids["a"], None) == E.NONE

    run_test(tmp_path, body)


def test_store_timeout_answers_every_sync_with_the_error_and_rebalances(tmp_path):
    async def body(h: Harness):
        offsets = ReplicatedOffsets(h, "g")
        ids = await two_members_at_generation_1(h)
        group = h.coord.groups["g"]
        await h.sync("b", "g", 1, ids["b"])  # parked
        await h.sync("a", "g", 1, ids["a"], {ids["a"]: b"A", ids["b"]: b"B"})
        await h.advance(h.broker.config.offsets_commit_timeout_ms)
        # REQUEST_TIMED_OUT of the acks=-1 append is COORDINATOR_NOT_AVAILABLE for the client
        for tag in ("a", "b"):
            assert (h.results[tag].error, h.results[tag].assignment) == (E.COORDINATOR_NOT_AVAILABLE, b"")
        assert group.state == GroupState.PREPARING_REBALANCE and group.generation_id == 1
        assert all(m.assignment == b"" for m in group.members.values())
        assert h.coord.heartbeat("g", 1, ids["b"], None) == E.REBALANCE_IN_PROGRESS
        # the members rejoin and the next generation is stored once the follower has it
        h.join_soon("a", "g", ids["a"])
        await h.join("b", "g", ids["b"])
        assert h.results["a"].generation_id == h.results["b"].generation_id == 2
        await h.sync("b", "g", 2, ids["b"])
        await h.sync("a", "g", 2, ids["a"], {ids["a"]: b"A2", ids["b"]: b"B2"})
        await offsets.follower_fetches()
        assert (h.results["b"].error, h.results["b"].assignment) == (E.NONE, b"B2")
        assert group.state == GroupState.STABLE and group.generation_id == 2

    run_test(tmp_path, body)


def test_store_cut_short_by_a_leadership_change_answers_not_coordinator(tmp_path):
    async def body(h: Harness):
        offsets = ReplicatedOffsets(h, "g")
        ids = await two_members_at_generation_1(h)
        await h.sync("b", "g", 1, ids["b"])  # parked
        await h.sync("a", "g", 1, ids["a"], {ids["a"]: b"A", ids["b"]: b"B"})
        offsets.leadership_moves_away()  # NOT_LEADER_OR_FOLLOWER for the waiting append
        await trio.testing.wait_all_tasks_blocked()
        assert h.results["a"].error == h.results["b"].error == E.NOT_COORDINATOR
        assert h.coord.groups["g"].state == GroupState.PREPARING_REBALANCE

    run_test(tmp_path, body)


def test_store_failing_on_append_answers_unknown_server_error(tmp_path):
    async def body(h: Harness):
        ids = await two_members_at_generation_1(h)
        too_large = b"x" * (h.broker.config.message_max_bytes + 1)  # MESSAGE_TOO_LARGE from the log
        await h.sync("b", "g", 1, ids["b"])  # parked
        await h.sync("a", "g", 1, ids["a"], {ids["a"]: too_large, ids["b"]: b"B"})
        for tag in ("a", "b"):
            assert h.results[tag].error == E.UNKNOWN_SERVER_ERROR
        group = h.coord.groups["g"]
        assert group.state == GroupState.PREPARING_REBALANCE
        assert all(m.assignment == b"" for m in group.members.values())

    run_test(tmp_path, body)


def test_store_outcome_is_discarded_when_the_generation_moved_on(tmp_path):
    async def body(h: Harness):
        offsets = ReplicatedOffsets(h, "g")
        ids = await two_members_at_generation_1(h)
        group = h.coord.groups["g"]
        await h.sync("b", "g", 1, ids["b"])  # parked
        await h.sync("a", "g", 1, ids["a"], {ids["a"]: b"A1", ids["b"]: b"B1"})
        # while generation 1's assignment is being stored, c joins: a rebalance starts...
        ids["c"], _ = await h.join_dynamic("c", "g")
        assert h.results["a"].error == h.results["b"].error == E.REBALANCE_IN_PROGRESS
        # ...and completes: generation 2 awaits its leader's SyncGroup
        h.join_soon("a", "g", ids["a"])
        await h.join("b", "g", ids["b"])
        assert {h.results[t].generation_id for t in ("a", "b", "c")} == {2}
        assert group.state == GroupState.COMPLETING_REBALANCE
        await offsets.follower_fetches()  # generation 1's record is replicated now: too late
        assert group.state == GroupState.COMPLETING_REBALANCE and group.generation_id == 2
        assert all(m.assignment == b"" for m in group.members.values())
        await h.sync("c", "g", 2, ids["c"])
        await h.sync("a", "g", 2, ids["a"], {ids["a"]: b"A2", ids["b"]: b"B2", ids["c"]: b"C2"})
        assert "c" not in h.results and offsets.unreplicated
        await offsets.follower_fetches()
        assert (h.results["c"].error, h.results["c"].assignment) == (E.NONE, b"C2")
        assert group.state == GroupState.STABLE and group.members[ids["b"]].assignment == b"B2"

    run_test(tmp_path, body)


def test_losing_the_offsets_partition_answers_parked_syncs_not_coordinator(tmp_path):
    async def body(h: Harness):
        offsets = ReplicatedOffsets(h, "g")
        h.coord.owned_partitions = {offsets.index}  # coordinating it as a cluster member would
        ids = await two_members_at_generation_1(h)
        await h.sync("b", "g", 1, ids["b"])  # parked
        await h.sync("a", "g", 1, ids["a"], {ids["a"]: b"A", ids["b"]: b"B"})
        h.coord.on_partition_state(offsets.leadership_moves_away(), offsets.node)  # unloads the group
        await trio.testing.wait_all_tasks_blocked()
        assert h.results["a"].error == h.results["b"].error == E.NOT_COORDINATOR
        assert "g" not in h.coord.groups
        assert h.coord.heartbeat("g", 1, ids["a"], None) == E.NOT_COORDINATOR

    run_test(tmp_path, body)


def test_static_rejoin_is_answered_once_stored_and_undone_when_the_store_fails(tmp_path):
    async def body(h: Harness):
        offsets = ReplicatedOffsets(h, "g")
        await h.join("s", "g", instance="i")
        await h.advance(h.broker.config.group_initial_rebalance_delay_ms)
        first_id = h.results["s"].member_id
        await h.sync("s", "g", 1, first_id, {first_id: b"S"}, instance="i")
        await offsets.follower_fetches()
        group = h.coord.groups["g"]
        assert h.results["s"].assignment == b"S" and group.state == GroupState.STABLE
        # the restarted static member's new id is answered once the ISR has it
        await h.join("s2", "g", instance="i")
        assert "s2" not in h.results and offsets.unreplicated
        await offsets.follower_fetches()
        second_id = h.results["s2"].member_id
        assert h.results["s2"].error == E.NONE and second_id not in ("", first_id)
        assert h.coord.heartbeat("g", 1, first_id, "i") == E.FENCED_INSTANCE_ID
        assert h.coord.heartbeat("g", 1, second_id, "i") == E.NONE
        # a rejoin whose store times out is undone: the previous id stays the member's
        await h.join("s3", "g", instance="i")
        await h.advance(h.broker.config.offsets_commit_timeout_ms)
        assert (h.results["s3"].error, h.results["s3"].member_id) == (E.COORDINATOR_NOT_AVAILABLE, "")
        assert group.static_members["i"] == second_id and group.state == GroupState.STABLE
        assert h.coord.heartbeat("g", 1, second_id, "i") == E.NONE

    run_test(tmp_path, body)


# ---- leave ------------------------------------------------------------------------------------


def test_leave_batch_and_last_member_leaving_empties_group(tmp_path):
    async def body(h: Harness):
        ids = await h.stable_group("g", ["a", "b"])
        error, errors = h.coord.leave_group("g", [(ids["a"], None), ("ghost", None), (ids["b"], None)])
        assert (error, errors) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE])
        await trio.testing.wait_all_tasks_blocked()
        group = h.coord.groups["g"]
        assert group.state == GroupState.EMPTY and group.generation_id == 2
        assert h.coord.delete_groups(["g"]) == [E.NONE]
        assert "g" not in h.coord.groups

    run_test(tmp_path, body)


# ---- offsets ----------------------------------------------------------------------------------


def _topic(h: Harness, name="orders", partitions=3):
    h.broker.admin.create_topic_now(name, partitions, 1, {})


def test_a_commit_is_visible_only_once_the_isr_has_it(tmp_path):
    async def body(h: Harness):
        _topic(h)
        offsets = ReplicatedOffsets(h, "simple")
        results: dict[str, list[int]] = {}

        async def commit(tag: str, offset: int) -> None:
            results[tag] = await h.coord.commit_offsets_replicated(
                "simple", -1, "", None, [CommitPartition("orders", 0, offset)])

        h.nursery.start_soon(commit, "first", 5)
        await trio.testing.wait_all_tasks_blocked()
        assert offsets.unreplicated and "first" not in results
        # Kafka's pendingOffsetCommits: not visible yet; require_stable says it is coming
        assert h.coord.fetch_offsets("simple", [("orders", [0])])[1][0].offset == -1
        pending = h.coord.fetch_offsets("simple", [("orders", [0])], require_stable=True)[1][0]
        assert (pending.error, pending.offset) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        await offsets.follower_fetches()
        assert results["first"] == [E.NONE]
        stable = h.coord.fetch_offsets("simple", [("orders", [0])], require_stable=True)[1][0]
        assert (stable.error, stable.offset) == (E.NONE, 5)

        # a commit the ISR never gets is answered with an error and never becomes visible
        h.nursery.start_soon(commit, "second", 9)
        await h.advance(h.broker.config.offsets_commit_timeout_ms)
        assert results["second"] == [E.COORDINATOR_NOT_AVAILABLE]
        after = h.coord.fetch_offsets("simple", [("orders", [0])], require_stable=True)[1][0]
        assert (after.error, after.offset) == (E.NONE, 5)

    run_test(tmp_path, body)


def test_an_older_commit_completing_late_does_not_replace_a_newer_one():
    from kafkacompat.groups.state import Group
    from kafkacompat.groups.storage import OffsetCommitValue

    group = Group("g", 0)
    older, newer = OffsetCommitValue(5, -1, "", 0, -1), OffsetCommitValue(7, -1, "", 0, -1)
    group.begin_pending_commits([("t", 0)])
    group.begin_pending_commits([("t", 0)])
    group.apply_commits([(("t", 0), newer)], position=12)
    group.end_pending_commits([("t", 0)])
    assert group.has_pending_commit(("t", 0))
    group.apply_commits([(("t", 0), older)], position=11)
    group.end_pending_commits([("t", 0)])
    assert group.offsets[("t", 0)] == newer and not group.has_pending_commit(("t", 0))


def test_commits_follow_kafka_rules(tmp_path):
    async def body(h: Harness):
        _topic(h)
        # a simple consumer (no membership) commits to a group that does not exist yet
        assert h.coord.commit_offsets("simple", -1, "", None, [CommitPartition("orders", 0, 5, 3, "md")]) == [E.NONE]
        assert h.coord.fetch_offsets("simple", [("orders", [0, 1])])[1][0].offset == 5
        fetched = h.coord.fetch_offsets("simple", [("orders", [0, 1])])[1]
        assert [(f.offset, f.leader_epoch, f.metadata) for f in fetched] == [(5, 3, "md"), (-1, -1, "")]
        assert h.coord.commit_offsets("nogroup", 3, "m", None, [CommitPartition("orders", 0, 1)], version=8) == [
            E.ILLEGAL_GENERATION]
        assert h.coord.commit_offsets("nogroup", 3, "m", None, [CommitPartition("orders", 0, 1)], version=9) == [
            E.GROUP_ID_NOT_FOUND]
        errors = h.coord.commit_offsets("simple", -1, "", None, [
            CommitPartition("orders", 9, 1), CommitPartition("nope", 0, 1),
            CommitPartition("orders", 1, 1, metadata="x" * 5000)])
        assert errors == [E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION, E.OFFSET_METADATA_TOO_LARGE]
        ids = await h.stable_group("g", ["a", "b"])
        assert h.coord.commit_offsets("g", 1, ids["a"], None, [CommitPartition("orders", 0, 10)]) == [E.NONE]
        assert h.coord.commit_offsets("g", -1, "", None, [CommitPartition("orders", 0, 11)]) == [E.UNKNOWN_MEMBER_ID]
        assert h.coord.commit_offsets("g", 0, ids["a"], None, [CommitPartition("orders", 0, 11)]) == [
            E.ILLEGAL_GENERATION]
        h.join_soon("a", "g", ids["a"])  # leader rejoins: PreparingRebalance still takes commits
        await trio.testing.wait_all_tasks_blocked()
        assert h.coord.commit_offsets("g", 1, ids["b"], None, [CommitPartition("orders", 1, 20)]) == [E.NONE]
        await h.join("b", "g", ids["b"])
        assert h.coord.groups["g"].state == GroupState.COMPLETING_REBALANCE
        assert h.coord.commit_offsets("g", 2, ids["b"], None, [CommitPartition("orders", 1, 21)]) == [
            E.REBALANCE_IN_PROGRESS]
        _, all_offsets = h.coord.fetch_offsets("g", None)
        assert [(f.topic, f.partition, f.offset) for f in all_offsets] == [("orders", 0, 10), ("orders", 1, 20)]

    run_test(tmp_path, body)


def test_offset_delete_rules(tmp_path):
    async def body(h: Harness):
        _topic(h)
        _topic(h, "other")
        subscription = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x06orders" + b"\x00\x00\x00\x00"
        ids = await h.stable_group("g", ["a"], protocols=[("range", subscription)])
        h.coord.commit_offsets("g", 1, ids["a"], None, [CommitPartition("orders", 0, 1), CommitPartition("other", 0, 2)])
        assert h.coord.delete_offsets("g", [("orders", 0), ("other", 0)]) == (
            E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
        assert [f.topic for f in h.coord.fetch_offsets("g", None)[1]] == ["orders"]
        assert h.coord.delete_offsets("missing", [("orders", 0)])[0] == E.GROUP_ID_NOT_FOUND

    run_test(tmp_path, body)


def test_state_survives_restart(tmp_path):
    async def first(h: Harness):
        _topic(h)
        ids = await h.stable_group("live", ["a", "b"])
        h.coord.commit_offsets("live", 1, ids["a"], None, [CommitPartition("orders", 0, 42, 7, "meta")])
        h.coord.commit_offsets("simple", -1, "", None, [CommitPartition("orders", 1, 9)])
        h.coord.commit_offsets("gone", -1, "", None, [CommitPartition("orders", 2, 3)])
        assert h.coord.delete_groups(["gone"]) == [E.NONE]
        h.coord.commit_offsets("simple", -1, "", None, [CommitPartition("orders", 1, 10)])
        first.ids = ids

    run_test(tmp_path, first)

    async def second(h: Harness):
        coord = h.coord
        assert set(coord.groups) == {"live", "simple"}
        live = coord.groups["live"]
        assert live.state == GroupState.STABLE and live.generation_id == 1
        assert set(live.members) == set(first.ids.values()) and live.protocol_name == "range"
        assert live.members[first.ids["b"]].assignment == b"b"
        fetched = coord.fetch_offsets("live", None)[1]
        assert [(f.offset, f.leader_epoch, f.metadata) for f in fetched] == [(42, 7, "meta")]
        assert coord.fetch_offsets("simple", None)[1][0].offset == 10
        # a loaded member must heartbeat within its session timeout
        await h.advance(SESSION / 2)
        assert coord.heartbeat("live", 1, first.ids["a"], None) == E.NONE
        await h.advance(SESSION / 2)
        assert first.ids["b"] not in live.members and live.state == GroupState.PREPARING_REBALANCE

    run_test(tmp_path, second)


def test_offsets_of_empty_group_expire_after_retention(tmp_path):
    now = [1_000_000_000_000]

    async def body(h: Harness):
        h.coord.wall_clock = lambda: now[0]
        _topic(h)
        h.coord.commit_offsets("simple", -1, "", None, [CommitPartition("orders", 0, 1)])
        ids = await h.stable_group("g", ["a"])
        h.coord.commit_offsets("g", 1, ids["a"], None, [CommitPartition("orders", 0, 5)])
        now[0] += 8 * 24 * 3600 * 1000
        assert h.coord.cleanup_expired_offsets() == 1  # the standalone commit; g is not empty
        assert "simple" not in h.coord.groups
        h.coord.leave_group("g", [(ids["a"], None)])
        now[0] += 6 * 24 * 3600 * 1000
        assert h.coord.cleanup_expired_offsets() == 0  # empty for 6 days only
        now[0] += 2 * 24 * 3600 * 1000
        assert h.coord.cleanup_expired_offsets() == 1
        assert "g" not in h.coord.groups

    run_test(tmp_path, body)

    async def after(h: Harness):
        assert h.coord.groups == {}

    run_test(tmp_path, after)


# ---- load ---------------------------------------------------------------------------------------


def test_join_storm_of_1000_members_leaves_other_groups_unaffected(tmp_path):
    async def body(h: Harness):
        quiet = await h.stable_group("quiet", ["q"])
        ids = []
        for i in range(1000):
            first = await h.coord.join_group(JoinRequest("storm", "", None, SESSION, REBALANCE, "consumer",
                                                         [("range", b"x" * 100)], f"c{i}", "/127.0.0.1", 5))
            ids.append(first.member_id)
        for i, member_id in enumerate(ids):
            h.join_soon(f"s{i}", "storm", member_id)
        await trio.testing.wait_all_tasks_blocked()
        assert h.coord.heartbeat("quiet", 1, quiet["q"], None) == E.NONE
        await h.advance(6_000)
        results = [h.results[f"s{i}"] for i in range(1000)]
        assert all(r.error == E.NONE and r.generation_id == 1 for r in results)
        leader = [r for r in results if r.members]
        assert len(leader) == 1 and len(leader[0].members) == 1000
        assignments = {m: b"a" for m in ids}
        for i, member_id in enumerate(ids):
            h.sync_soon(f"s{i}", "storm", 1, member_id, assignments if member_id == leader[0].member_id else None)
        await trio.testing.wait_all_tasks_blocked()
        assert all(h.results[f"s{i}"].assignment == b"a" for i in range(1000))
        assert h.coord.groups["storm"].state == GroupState.STABLE
        assert h.coord.heartbeat("quiet", 1, quiet["q"], None) == E.NONE

    run_test(tmp_path, body)


def test_large_member_metadata(tmp_path):
    async def body(h: Harness):
        big = bytes(range(256)) * 2048  # 512 KiB
        ids = await h.stable_group("g", ["a"], protocols=[("range", big)])
        assert h.coord.groups["g"].members[ids["a"]].metadata("range") == big

    run_test(tmp_path, body)
