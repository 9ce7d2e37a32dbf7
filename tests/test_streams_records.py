"""The StreamsGroup* records of __consumer_offsets: what a group writes replays to the same group,
changes write only what changed, and removed members and deleted groups leave tombstones."""

from __future__ import annotations

from kafkacompat.groups import streams_records
from kafkacompat.groups.consumer_group import MemberState
from kafkacompat.groups.consumer_records import key_version
from kafkacompat.groups.streams_group import (
    CopartitionGroup,
    InternalTopic,
    StreamsGroupState,
    StreamsMember,
    StreamsTopology,
    Subtopology,
)

TOPOLOGY = StreamsTopology(3, (
    Subtopology("0", source_topics=("input", "other"), repartition_sink_topics=("app-rekey-repartition",),
                state_changelog_topics=(InternalTopic("app-store-changelog", 0, 3, (("cleanup.policy", "compact"),)),),
                copartition_groups=(CopartitionGroup(source_topics=(0, 1)),)),
    Subtopology("1", repartition_source_topics=(InternalTopic("app-rekey-repartition", 6, 0, ()),)),
))


def group() -> StreamsGroupState:
    state = StreamsGroupState("app")
    state.group_epoch, state.assignment_epoch, state.metadata_hash = 7, 6, -1234567890123
    state.assignment_configs = (("num.standby.replicas", "1"),)
    state.topology = TOPOLOGY
    state.validated_topology_epoch = 3
    state.put_member(StreamsMember(
        "m1", member_epoch=6, previous_member_epoch=5, state=MemberState.UNREVOKED_PARTITIONS, rack_id="r1",
        client_id="c1", client_host="/10.0.0.1", rebalance_timeout_ms=30000, topology_epoch=3, process_id="p1",
        user_endpoint=("host-1", 65000), client_tags=(("zone", "a"), ("az", "1")),
        assigned={"0": frozenset({0, 1})}, pending_revocation={"1": frozenset({2})}, standby={"1": frozenset({0})}))
    state.put_member(StreamsMember("m2", member_epoch=6, previous_member_epoch=6, client_id="c2", client_host="/h2",
                                   rebalance_timeout_ms=1000, topology_epoch=3, process_id="p2",
                                   assigned={"1": frozenset({0, 1})}))
    state.target = {"m1": {"0": frozenset({0, 1})}, "m2": {"1": frozenset({0, 1, 2})}}
    state.standby_target = {"m1": {"1": frozenset({0})}}
    return state


def replayed(records) -> dict[str, StreamsGroupState]:
    groups: dict[str, StreamsGroupState] = {}
    for key, value in records:
        assert key_version(key) in streams_records.STREAMS_KEY_VERSIONS
        streams_records.replay(groups, key, value)
    return groups


def test_every_record_round_trips():
    state = group()
    written = streams_records.group_records(state)
    assert sorted({key_version(k) for k in written}) == [17, 19, 20, 21, 22, 23]
    loaded = replayed(written.items())["app"]
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.metadata_hash) == (7, 6, -1234567890123)
    assert loaded.assignment_configs == (("num.standby.replicas", "1"),)
    assert loaded.validated_topology_epoch == 3 and loaded.state_name() == "Assigning"  # epoch 7, target 6
    assert loaded.topology == TOPOLOGY
    assert loaded.members == state.members
    assert loaded.target == state.target
    assert loaded.standby_target == {"m1": {"1": frozenset({0})}, "m2": {}}
    assert loaded.owners == state.owners
    assert loaded.persisted == written
    assert streams_records.group_records(loaded) == written  # what it would write again: nothing new


def test_the_member_value_is_kafkas_layout():
    key, value = streams_records.member_metadata("g", StreamsMember(
        "m", client_id="c", client_host="h", rebalance_timeout_ms=5, topology_epoch=2, process_id="p"))
    assert key == b"\x00\x13\x00\x01g\x00\x01m"  # version 19, then non-flexible GroupId and MemberId
    # version 0; InstanceId null, RackId null, "c", "h", 5, 2, "p", UserEndpoint null, no tags, no tagged fields
    assert value == b"\x00\x00" + b"\x00\x00" + b"\x02c\x02h" + b"\x00\x00\x00\x05\x00\x00\x00\x02" + b"\x02p" \
        + b"\xff" + b"\x01" + b"\x00"


def test_the_metadata_value_puts_what_kafka_4_1_lacks_in_tagged_fields():
    state = StreamsGroupState("g")
    state.group_epoch, state.metadata_hash = 2, 1
    _, plain = streams_records.group_metadata(state)
    assert plain == b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00" * 7 + b"\x01" + b"\x00"  # no tagged fields
    state.validated_topology_epoch, state.assignment_configs = 1, (("k", "v"),)
    _, tagged = streams_records.group_metadata(state)
    assert tagged[14:] == b"\x02" + b"\x00\x04\x00\x00\x00\x01" + b"\x01\x06\x02\x02k\x02v\x00"
    loaded = replayed([streams_records.group_metadata(state)])["g"]
    assert (loaded.validated_topology_epoch, loaded.assignment_configs) == (1, (("k", "v"),))


def test_changes_write_what_changed_and_tombstone_what_went():
    state = group()
    before = streams_records.group_records(state)
    assert streams_records.changes(before, before) == []
    state.remove_member("m2")
    state.group_epoch += 1
    after = streams_records.group_records(state)
    written = streams_records.changes(before, after)
    assert [key_version(k) for k, v in written if v is not None] == [17]
    tombstones = [k for k, v in written if v is None]
    assert [key_version(k) for k in tombstones] == [22, 21, 19]  # current assignment, target, member
    loaded = replayed([*before.items(), *written])["app"]
    assert set(loaded.members) == {"m1"} and loaded.group_epoch == 8
    assert set(loaded.target) == {"m1"} and loaded.persisted == after


def test_a_deleted_group_replays_to_nothing():
    state = group()
    records = list(streams_records.group_records(state).items())
    state.persisted = dict(records)
    tombstones = streams_records.group_tombstones(state)
    assert all(v is None for _, v in tombstones) and key_version(tombstones[-1][0]) == 17
    assert {k for k, _ in tombstones} >= {k for k, _ in records}
    assert replayed([*records, *tombstones]) == {}


def test_a_kafka_4_0_partition_metadata_record_is_skipped():
    key = b"\x00\x12\x00\x03app"
    assert replayed([(key, b"\x00\x00\x01\x00")]) == {}


# ---- through the coordinator, on a real broker (real __consumer_offsets), MockClock time ---------

import uuid  # noqa: E402

import trio.testing  # noqa: E402

from kafkacompat.controller.topics import TopicInfo  # noqa: E402
from kafkacompat.groups.coordinator import CommitPartition  # noqa: E402
from kafkacompat.groups.storage import OFFSETS_TOPIC  # noqa: E402
from kafkacompat.groups.streams_coordinator import StreamsHeartbeat  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402
from tests.test_groups_coordinator import Harness, ReplicatedOffsets, _topic, run_test  # noqa: E402

SOURCE = [TopicInfo("orders", uuid.uuid4(), 3)]
SIMPLE = StreamsTopology(1, (Subtopology("0", source_topics=("orders",)),))


def join(member_id: str, group_id: str = "app") -> StreamsHeartbeat:
    return StreamsHeartbeat(group_id, member_id, 0, rebalance_timeout_ms=30000, topology=SIMPLE, active=[],
                            standby=[], warmup=[], process_id=f"process-{member_id}")


async def heartbeat(h: Harness, req: StreamsHeartbeat):
    return await h.coord.streams.heartbeat(req, lambda: SOURCE)


def test_a_heartbeat_is_answered_once_the_isr_has_its_records(tmp_path):
    async def body(h: Harness):
        await trio.testing.wait_all_tasks_blocked()  # the coordinator's background tasks run
        offsets = ReplicatedOffsets(h, "app")
        answers = []

        async def run():
            answers.append(await heartbeat(h, join("m1")))

        h.nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == [] and offsets.unreplicated
        await offsets.follower_fetches()
        assert answers[0].error == ErrorCode.NONE and answers[0].member_epoch == 1

    run_test(tmp_path, body)


def test_a_heartbeat_whose_records_cannot_be_appended_changes_nothing(tmp_path):
    async def body(h: Harness):
        assert (await heartbeat(h, join("m1"))).error == ErrorCode.NONE
        state = h.coord.groups["app"].consumer
        epoch, persisted = state.group_epoch, state.persisted
        offsets = ReplicatedOffsets(h, "app")
        offsets.leadership_moves_away()  # the coordinator is not told yet: its append fails
        failed = await heartbeat(h, join("m2"))
        assert failed.error == ErrorCode.NOT_COORDINATOR
        state = h.coord.groups["app"].consumer
        assert set(state.members) == {"m1"} and state.group_epoch == epoch and state.persisted == persisted

    run_test(tmp_path, body)


def test_a_silent_member_is_removed_and_stays_removed(tmp_path):
    async def first(h: Harness):
        for member_id in ("m1", "m2"):
            assert (await heartbeat(h, join(member_id))).error == ErrorCode.NONE
        session = h.coord.group_configs.of("app").streams_session_timeout_ms
        for _ in range(4):  # m1 keeps heartbeating, m2 is silent
            await h.advance(session / 3)
            member = h.coord.groups["app"].consumer.members["m1"]
            owned = [(s, sorted(ps)) for s, ps in member.assigned.items()]
            answer = await heartbeat(h, StreamsHeartbeat("app", "m1", member.member_epoch, active=owned,
                                                         standby=[], warmup=[]))
            assert answer.error == ErrorCode.NONE
        first.state = h.coord.groups["app"].consumer
        assert set(first.state.members) == {"m1"}

    run_test(tmp_path, first)

    async def second(h: Harness):
        state = h.coord.groups["app"].consumer
        assert set(state.members) == {"m1"} and set(state.target) == {"m1"}
        assert state.group_epoch == first.state.group_epoch and state.topology == SIMPLE
        assert state.persisted == first.state.persisted

    run_test(tmp_path, second)


def test_an_empty_streams_group_expires_with_its_offsets_and_stays_deleted(tmp_path):
    now = [1_000_000_000_000]

    async def body(h: Harness):
        h.coord.wall_clock = lambda: now[0]
        _topic(h)
        assert (await heartbeat(h, join("m1"))).error == ErrorCode.NONE
        left = await heartbeat(h, StreamsHeartbeat("app", "m1", -1))
        assert left.error == ErrorCode.NONE and not h.coord.groups["app"].consumer.members
        assert h.coord.commit_offsets("app", -1, "", None, [CommitPartition("orders", 0, 5)]) == [ErrorCode.NONE]
        now[0] += 8 * 24 * 3600 * 1000
        assert h.coord.cleanup_expired_offsets() == 1
        assert "app" not in h.coord.groups

    run_test(tmp_path, body)

    async def after(h: Harness):
        assert h.coord.groups == {}

    run_test(tmp_path, after)


def test_a_heartbeat_that_changes_nothing_writes_nothing(tmp_path):
    async def body(h: Harness):
        joined = await heartbeat(h, join("m1"))
        assert joined.error == ErrorCode.NONE
        partition = h.broker.partition(OFFSETS_TOPIC, h.coord.partition_for("app"))
        end = partition.log_end_offset
        owned = [(s, sorted(ps)) for s, ps in joined.active.items()]
        for _ in range(3):
            again = await heartbeat(h, StreamsHeartbeat("app", "m1", joined.member_epoch, active=owned, standby=[],
                                                        warmup=[]))
            assert again.error == ErrorCode.NONE and again.member_epoch == joined.member_epoch
        assert partition.log_end_offset == end

    run_test(tmp_path, body)


def compacted(h: Harness, group_id: str) -> dict[bytes, bytes]:
    """What compaction keeps of the group's partition: the last value of every key, tombstoned
    keys gone."""
    from kafkacompat.groups.storage import iter_loaded_records

    partition = h.broker.partition(OFFSETS_TOPIC, h.coord.partition_for(group_id))
    result = partition.log.read(partition.log_start_offset, 1 << 24, max_offset=partition.log_end_offset,
                                min_one_batch=True)
    try:
        data = result.read_all()
    finally:
        result.close()
    latest: dict[bytes, bytes | None] = {}
    for record in iter_loaded_records(data):
        if record.key is not None and key_version(record.key) in streams_records.STREAMS_KEY_VERSIONS:
            latest[bytes(record.key)] = None if record.value is None else bytes(record.value)
    return {k: v for k, v in latest.items() if v is not None}


def test_the_compacted_partition_converges_to_the_group(tmp_path):
    async def body(h: Harness):
        for member_id in ("m1", "m2", "m3"):
            assert (await heartbeat(h, join(member_id))).error == ErrorCode.NONE
        assert (await heartbeat(h, StreamsHeartbeat("app", "m2", -1))).error == ErrorCode.NONE
        state = h.coord.groups["app"].consumer
        for _ in range(3):  # the others revoke and take over what m2 had
            for member_id in ("m1", "m3"):
                member = state.members[member_id]
                owned = [(s, sorted(ps)) for s, ps in member.assigned.items()]
                answer = await heartbeat(h, StreamsHeartbeat("app", member_id, member.member_epoch, active=owned,
                                                             standby=[], warmup=[]))
                assert answer.error == ErrorCode.NONE
                state = h.coord.groups["app"].consumer
        assert set(state.members) == {"m1", "m3"}
        kept = compacted(h, "app")
        assert kept == streams_records.group_records(state) == state.persisted
        assert not any(b"m2" in key for key in kept)
        assert replayed(kept.items())["app"].members == state.members

    run_test(tmp_path, body)
