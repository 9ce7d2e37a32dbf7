"""The streams group's pure parts: topology validation and configuration against topics, the
sticky task assignor, and reconciliation of tasks (a task moves only once revoked)."""

from __future__ import annotations

import uuid

import pytest

from kafkacompat.controller.topics import TopicInfo
from kafkacompat.groups.consumer_group import MemberState
from kafkacompat.groups.streams_group import (
    CopartitionGroup,
    InternalTopic,
    Status,
    StreamsGroupState,
    StreamsMember,
    StreamsTopology,
    Subtopology,
    assign_tasks,
    configure,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError


def topics(**counts: int) -> dict[str, TopicInfo]:
    return {name.replace("_", "-"): TopicInfo(name.replace("_", "-"), uuid.uuid4(), n) for name, n in counts.items()}


def two_step(explicit: int = 0) -> StreamsTopology:
    return StreamsTopology(1, (
        Subtopology("0", source_topics=("in",), repartition_sink_topics=("app-r",),
                    state_changelog_topics=(InternalTopic("app-s-changelog"),)),
        Subtopology("1", repartition_source_topics=(InternalTopic("app-r", explicit),),
                    state_changelog_topics=(InternalTopic("app-t-changelog",
                                                          configs=(("cleanup.policy", "delete"),)),)),
    ))


def test_missing_source_topics_come_first():
    configured = configure(two_step(), topics(other=1))
    assert configured.statuses == [(Status.MISSING_SOURCE_TOPICS, "Source topics in are missing.")]
    assert not configured.ready and configured.tasks == {}


def test_internal_topics_are_derived_and_changelogs_compacted_unless_configured():
    configured = configure(two_step(), topics(**{"in": 3}))
    assert configured.statuses == [(Status.MISSING_INTERNAL_TOPICS,
                                    "Internal topics are missing: [app-r, app-s-changelog, app-t-changelog]")]
    assert {t.name: (t.partitions, t.configs) for t in configured.to_create} == {
        "app-r": (3, ()), "app-s-changelog": (3, (("cleanup.policy", "compact"),)),
        "app-t-changelog": (3, (("cleanup.policy", "delete"),))}
    ready = configure(two_step(), topics(**{"in": 3, "app_r": 3, "app_s_changelog": 3, "app_t_changelog": 3}))
    assert ready.ready and ready.tasks == {"0": 3, "1": 3}


def test_an_explicit_repartition_count_wins_and_a_wrong_existing_one_is_reported():
    configured = configure(two_step(explicit=5), topics(**{"in": 3}))
    assert {t.name: t.partitions for t in configured.to_create}["app-r"] == 5
    wrong = configure(two_step(), topics(**{"in": 3, "app_r": 2, "app_s_changelog": 3, "app_t_changelog": 3}))
    assert wrong.statuses[0][0] == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert "app-r has invalid number of partitions: expected 3, actual 2" in wrong.statuses[0][1]


def test_copartitioned_source_topics_must_match():
    topology = StreamsTopology(1, (Subtopology("0", source_topics=("a", "b"),
                                               copartition_groups=(CopartitionGroup((0, 1)),)),))
    assert configure(topology, topics(a=2, b=3)).statuses[0][0] == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert configure(topology, topics(a=3, b=3)).tasks == {"0": 3}


@pytest.mark.parametrize("topology", [
    StreamsTopology(1, (Subtopology("0", ("a",)), Subtopology("0", ("b",)))),
    StreamsTopology(1, (Subtopology("0", ("bad name",)),)),
    StreamsTopology(1, (Subtopology("0", ("a",), copartition_groups=(CopartitionGroup((1,)),)),)),
    StreamsTopology(1, (Subtopology("0", ("a",), repartition_sink_topics=("nowhere",)),)),
    StreamsTopology(1, (Subtopology("0", source_topic_regex=("(?=x)",)),)),
    StreamsTopology(1, (Subtopology("0", ("a",), state_changelog_topics=(InternalTopic("c", 2),)),)),
])
def test_invalid_topologies(topology):
    with pytest.raises(KafkaError) as raised:
        topology.validate()
    assert raised.value.code == ErrorCode.STREAMS_INVALID_TOPOLOGY


def members(*ids: str, process: dict[str, str] | None = None) -> dict[str, StreamsMember]:
    return {m: StreamsMember(m, process_id=(process or {}).get(m, m)) for m in ids}


def count(assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


def test_assignor_balances_and_keeps_previous_owners():
    tasks = {"0": 4, "1": 3}
    active, _ = assign_tasks(members("a"), tasks, {}, 0)
    assert active["a"] == {"0": frozenset(range(4)), "1": frozenset(range(3))}
    active2, _ = assign_tasks(members("a", "b", "c"), tasks, active, 0)
    assert sorted(count(a) for a in active2.values()) == [2, 2, 3]
    assert all(ps <= active["a"][s] for s, ps in active2["a"].items())
    everything = {(s, p) for a in active2.values() for s, ps in a.items() for p in ps}
    assert len(everything) == 7
    active3, _ = assign_tasks(members("a", "c"), tasks, active2, 0)
    for member in ("a", "c"):
        assert all(ps <= active3[member].get(s, frozenset()) for s, ps in active2[member].items())
    assert sorted(count(a) for a in active3.values()) == [3, 4]


def test_standby_tasks_go_to_another_process_only():
    tasks = {"0": 2}
    group = members("a", "b", "c", process={"a": "p1", "b": "p1", "c": "p2"})
    active, standby = assign_tasks(group, tasks, {}, 1)
    for member, held in active.items():
        for sub, ps in held.items():
            for p in ps:
                holders = [m for m, s in standby.items() if p in s.get(sub, ())]
                assert len(holders) == 1 and group[holders[0]].process_id != group[member].process_id
    alone = members("a", "b", process={"a": "p", "b": "p"})
    assert all(not s for s in assign_tasks(alone, tasks, {}, 1)[1].values())


def test_a_task_moves_only_after_its_owner_revoked_it():
    state = StreamsGroupState("g")
    a = StreamsMember("a", member_epoch=1, assigned={"0": frozenset({0, 1})})
    b = StreamsMember("b", member_epoch=0)
    state.put_member(a)
    state.put_member(b)
    state.group_epoch = state.assignment_epoch = 2
    state.target = {"a": {"0": frozenset({0})}, "b": {"0": frozenset({1})}}
    b2 = state.reconcile(b, [])
    assert b2.state == MemberState.UNRELEASED_PARTITIONS and b2.assigned == {}
    state.put_member(b2)
    a2 = state.reconcile(a, [("0", [0, 1])])
    assert a2.state == MemberState.UNREVOKED_PARTITIONS and a2.pending_revocation == {"0": frozenset({1})}
    state.put_member(a2)
    a3 = state.reconcile(a2, [("0", [0])])
    assert (a3.state, a3.member_epoch, a3.assigned) == (MemberState.STABLE, 2, {"0": frozenset({0})})
    state.put_member(a3)
    b3 = state.reconcile(b2, [])
    assert (b3.state, b3.assigned) == (MemberState.STABLE, {"0": frozenset({1})})


def test_the_topics_a_streams_group_reads_are_its_subscribed_topics():
    state = StreamsGroupState("g")
    assert state.group_type == "streams" and state.subscribed_topic_names() == set()
    state.topology = two_step()
    assert state.subscribed_topic_names() == {"in", "app-r"}
    assert state.is_subscribed_to("in") and not state.is_subscribed_to("app-s-changelog")
