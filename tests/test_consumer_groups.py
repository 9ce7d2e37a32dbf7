"""KIP-848 consumer groups in-process: the server assignors, the per-member reconciliation
(a partition reaches its new owner only after the old owner revoked it) and the group's records
in __consumer_offsets read back to the same state."""

from __future__ import annotations

import uuid

from kafkacompat.groups import consumer_records
from kafkacompat.groups.assignors import MemberSpec, configured_assignors, range_, uniform
from kafkacompat.groups.consumer_group import (
    ClassicMembership,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    TopicMetadata,
)
from kafkacompat.groups.consumer_protocol import decode_assignment, decode_subscription, encode_assignment

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def counts(assignment) -> list[int]:
    return sorted(sum(len(p) for p in a.values()) for a in assignment.values())


def test_uniform_balances_and_keeps_what_it_can():
    members = {m: MemberSpec(frozenset({A})) for m in ("m1", "m2", "m3")}
    first = uniform(members, {A: 7})
    assert counts(first) == [2, 2, 3]
    assert sorted(p for a in first.values() for p in a.get(A, ())) == list(range(7))
    # A fourth member takes partitions from the others; everyone else keeps what stays theirs.
    members = {m: MemberSpec(frozenset({A}), first[m]) for m in first}
    members["m4"] = MemberSpec(frozenset({A}))
    second = uniform(members, {A: 7})
    assert counts(second) == [1, 2, 2, 2]
    for member_id in first:
        assert second[member_id][A] <= first[member_id][A]


def test_uniform_respects_each_members_subscription():
    members = {"m1": MemberSpec(frozenset({A})), "m2": MemberSpec(frozenset({A, B}))}
    result = uniform(members, {A: 2, B: 2})
    assert B not in result["m1"]
    assert counts(result) == [2, 2]


def test_range_gives_co_partitioned_ranges():
    members = {m: MemberSpec(frozenset({A, B})) for m in ("m2", "m1")}
    result = range_(members, {A: 3, B: 3})
    assert result["m1"] == {A: frozenset({0, 1}), B: frozenset({0, 1})}
    assert result["m2"] == {A: frozenset({2}), B: frozenset({2})}


def test_assignor_names_and_kafka_class_names():
    assert configured_assignors(["org.apache.kafka.coordinator.group.assignor.RangeAssignor", "uniform"]) == \
        ["range", "uniform"]


def test_a_partition_moves_only_after_its_owner_revoked_it():
    state = ConsumerGroupState("g")
    state.group_epoch = state.assignment_epoch = 1
    state.target = {"m1": {A: frozenset({0, 1})}}
    m1 = state.reconcile(ConsumerMember("m1"), [])
    state.put_member(m1)
    assert (m1.member_epoch, m1.assigned) == (1, {A: frozenset({0, 1})})

    # Epoch 2: partition 1 goes to m2.
    state.group_epoch = state.assignment_epoch = 2
    state.target = {"m1": {A: frozenset({0})}, "m2": {A: frozenset({1})}}
    m2 = state.reconcile(ConsumerMember("m2"), [])
    state.put_member(m2)
    assert (m2.state, m2.member_epoch, m2.assigned) == (MemberState.UNRELEASED_PARTITIONS, 2, {})

    m1 = state.reconcile(m1, None)  # a heartbeat that does not list its partitions: still owns them
    state.put_member(m1)
    assert (m1.state, m1.member_epoch, m1.pending_revocation) == (MemberState.UNREVOKED_PARTITIONS, 1,
                                                                 {A: frozenset({1})})
    assert state.reconcile(m2, []) == m2  # still held by m1

    m1 = state.reconcile(m1, [(A, [0])])  # revoked
    state.put_member(m1)
    assert (m1.state, m1.member_epoch, m1.previous_member_epoch) == (MemberState.STABLE, 2, 1)
    m2 = state.reconcile(m2, [])
    assert (m2.state, m2.assigned) == (MemberState.STABLE, {A: frozenset({1})})


def test_records_read_back_to_the_same_state():
    state = ConsumerGroupState("g")
    state.group_epoch, state.assignment_epoch = 5, 4
    state.subscription_metadata = {"t": TopicMetadata(A, "t", 3)}
    state.put_member(ConsumerMember(
        "m1", instance_id="i1", rack_id=None, rebalance_timeout_ms=30000, client_id="c", client_host="/127.0.0.1",
        subscribed_topic_names=("t",), subscribed_topic_regex="(^t.*)", server_assignor="range",
        member_epoch=4, previous_member_epoch=3, state=MemberState.UNREVOKED_PARTITIONS,
        assigned={A: frozenset({0})}, pending_revocation={A: frozenset({2})}))
    state.put_member(ConsumerMember(  # a classic member of the group (after an online upgrade)
        "m2", client_id="c2", subscribed_topic_names=("t",), member_epoch=4, previous_member_epoch=4,
        classic=ClassicMembership(10000, (("range", b"\x00\x01sub"), ("roundrobin", b"")))))
    state.target = {"m1": {A: frozenset({0, 1})}, "m2": {}}
    loaded: dict[str, ConsumerGroupState] = {}
    for key, value in consumer_records.group_records(state):
        assert consumer_records.replay(loaded, key, value) == "g"
    again = loaded["g"]
    assert (again.group_epoch, again.assignment_epoch) == (5, 4)
    assert again.subscription_metadata == state.subscription_metadata
    assert again.members == state.members and again.target == state.target
    assert again.owners == state.owners and again.static_members == {"i1": "m1"}

    for member_id in ("m1", "m2"):
        for key, value in consumer_records.member_tombstones("g", member_id):
            consumer_records.replay(loaded, key, value)
    assert loaded["g"].members == {} and loaded["g"].owners == {}
    for key, value in consumer_records.group_tombstones("g"):
        consumer_records.replay(loaded, key, value)
    assert "g" not in loaded


def test_consumer_group_intervals_are_checked_at_start_up():
    import pytest

    from kafkacompat.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="group.consumer.min.heartbeat.interval.ms"):
        BrokerConfig.load(overrides={"group.consumer.heartbeat.interval.ms": "500"})
    with pytest.raises(ConfigError, match="less than group.consumer.session.timeout.ms"):
        BrokerConfig.load(overrides={"group.consumer.heartbeat.interval.ms": "45000",
                                     "group.consumer.max.heartbeat.interval.ms": "50000"})
    with pytest.raises(ConfigError, match="group.consumer.assignors"):
        BrokerConfig.load(overrides={"group.consumer.assignors": "sticky"})
    config = BrokerConfig.load(overrides={"group.consumer.assignors": "range,uniform"})
    assert configured_assignors(config.group_consumer_assignors) == ["range", "uniform"]


def test_regexes_follow_re2_syntax():
    import pytest

    from kafkacompat.groups.consumer_group import compile_regex
    from kafkacompat.wire.errors import ErrorCode, KafkaError

    # librdkafka's form: each subscribed pattern in (...) joined with |, matched against whole names.
    compiled = compile_regex("(^orders-.*)|(^audit)")
    assert [n for n in ("orders-eu", "audit", "audit-log", "xorders-") if compiled.fullmatch(n)] == \
        ["orders-eu", "audit"]
    assert compile_regex(r"(foo\.)*bar-[0-9]{1,3}").fullmatch("foo.foo.bar-12")
    # RE2 refuses these; the nested unbounded quantifier would backtrack exponentially here.
    for pattern in ("(unclosed", "(?=a)b", r"(a)\1", "(?>a)", "a*+", "(a+)+b"):
        with pytest.raises(KafkaError) as raised:
            compile_regex(pattern)
        assert raised.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_embedded_consumer_protocol():
    # ConsumerProtocolSubscription v1 as a classic client writes it: topics, user data, owned partitions.
    sub = (b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
           + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02")
    decoded = decode_subscription(sub)
    assert (decoded.version, decoded.topics, decoded.owned) == (1, ["t"], [("t", [2])])
    assert decode_assignment(encode_assignment([("t", [1, 0])], 1)) == [("t", [0, 1])]


def test_offset_commit_validation_follows_kafkas_consumer_group():
    from kafkacompat.wire.errors import ErrorCode

    state = ConsumerGroupState("g")
    assert state.validate_offset_commit("", -1, 9) == ErrorCode.NONE  # an empty group: simple commits
    state.put_member(ConsumerMember("m1", member_epoch=3))
    state.put_member(ConsumerMember("c1", member_epoch=3, classic=ClassicMembership(10000, (("range", b""),))))
    assert state.validate_offset_commit("m1", 3, 9) == ErrorCode.NONE
    assert state.validate_offset_commit("m1", 2, 9) == ErrorCode.STALE_MEMBER_EPOCH
    assert state.validate_offset_commit("m1", 3, 8) == ErrorCode.UNSUPPORTED_VERSION
    assert state.validate_offset_commit("nobody", 3, 9) == ErrorCode.UNKNOWN_MEMBER_ID
    assert state.validate_offset_commit("c1", 2, 8) == ErrorCode.ILLEGAL_GENERATION  # a classic member
    assert state.validate_offset_commit("c1", 3, 8) == ErrorCode.NONE
    # TxnOffsetCommit: no version floor; no membership fields at all is accepted.
    assert state.validate_offset_commit("m1", 3, 5, transactional=True) == ErrorCode.NONE
    assert state.validate_offset_commit("", -1, 5, transactional=True) == ErrorCode.NONE
    assert state.validate_offset_commit("m1", 2, 5, transactional=True) == ErrorCode.STALE_MEMBER_EPOCH
    assert state.validate_offset_fetch(None, -1) == ErrorCode.NONE
    assert state.validate_offset_fetch("m1", 2) == ErrorCode.STALE_MEMBER_EPOCH


def test_classic_members_must_share_a_protocol():
    state = ConsumerGroupState("g")
    assert state.supports_classic_protocols("consumer", ["range"], "consumer")
    assert not state.supports_classic_protocols("connect", ["range"], "consumer")
    assert not state.supports_classic_protocols("consumer", [], "consumer")
    state.put_member(ConsumerMember("m1"))  # consumer-protocol members do not constrain
    assert state.supports_classic_protocols("consumer", ["roundrobin"], "consumer")
    state.put_member(ConsumerMember("c1", classic=ClassicMembership(10000, (("range", b""), ("sticky", b"")))))
    assert state.supports_classic_protocols("consumer", ["roundrobin", "sticky"], "consumer")
    assert not state.supports_classic_protocols("consumer", ["roundrobin"], "consumer")
