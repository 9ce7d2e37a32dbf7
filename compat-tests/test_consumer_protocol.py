"""KIP-848 consumer groups (group.protocol=consumer) with confluent-kafka against a real broker
process: members joining and leaving under a numbered produce load, both server assignors, a
regex subscription picking up a new topic, a static member's restart, the admin group APIs, and
bad heartbeats answered with Kafka's error codes."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from clients import RawConnection
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from kafkacompat.wire.messages.consumer_group_describe_response import ConsumerGroupDescribeResponse
from kafkacompat.wire.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from kafkacompat.wire.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse
from kafkacompat.testing.process import BrokerProcess

TIMEOUT = 60
HEARTBEAT, DESCRIBE = 68, 69
SETTINGS = ("--set", "group.consumer.heartbeat.interval.ms=500", "--set", "group.consumer.min.heartbeat.interval.ms=500",
            "--set", "group.initial.rebalance.delay.ms=0",
            "--set", "group.consumer.max.size=5",
            "--set", "group.consumer.session.timeout.ms=6000", "--set", "group.consumer.min.session.timeout.ms=6000")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", extra_args=list(SETTINGS)).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def consumer(broker, group: str, **extra) -> Consumer:
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "topic.metadata.refresh.interval.ms": 500}
    config.update(extra)
    return Consumer(config)


def assigned(c: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def poll_until(consumers: list[Consumer], done, timeout: float = TIMEOUT, on_message=None) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for the consumer group"
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and not msg.error() and on_message is not None:
                on_message(c, msg)


def described(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group])[group].result(15)


def test_members_join_and_leave_under_load_nothing_lost(broker, admin):
    topic, group = unique("load"), unique("g")
    create_topic(admin, topic, 6)
    total = 600
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    stop_producing = threading.Event()

    def produce_numbered() -> None:
        for i in range(total):
            producer.produce(topic, str(i).encode(), partition=i % 6)
            producer.poll(0)
            if i % 50 == 49:
                time.sleep(0.25)  # about 3 s of load: members join and leave while it lasts
        producer.flush(15)
        stop_producing.set()

    received: dict[tuple[int, int], list[tuple[float, int]]] = {}  # (partition, offset) -> [(when, value)]
    commits: list[tuple[float, int, int]] = []  # (when, partition, committed offset)

    def on_message(c: Consumer, msg) -> None:
        received.setdefault((msg.partition(), msg.offset()), []).append((time.monotonic(), int(msg.value())))
        try:
            c.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            # A commit racing a rebalance carries the member epoch the heartbeat just replaced
            # (Kafka answers STALE_MEMBER_EPOCH too): that offset stays uncommitted.
            if exc.args[0].code() not in (KafkaError.STALE_MEMBER_EPOCH, KafkaError.UNKNOWN_MEMBER_ID):
                raise
            return
        commits.append((time.monotonic(), msg.partition(), msg.offset() + 1))

    members = [consumer(broker, group)]
    members[0].subscribe([topic])
    writer = threading.Thread(target=produce_numbered)
    writer.start()
    try:
        distinct = lambda: len({v for got in received.values() for _, v in got})  # noqa: E731
        poll_until(members, lambda: distinct() >= 100, on_message=on_message)
        for _ in range(2):  # two more members join while records keep coming
            members.append(consumer(broker, group))
            members[-1].subscribe([topic])
        poll_until(members, lambda: distinct() >= 300 and all(assigned(c) for c in members),
                   on_message=on_message)
        members.pop(0).close()  # the first one leaves: its partitions move to the others
        poll_until(members, lambda: stop_producing.is_set() and distinct() >= total, on_message=on_message)
    finally:
        writer.join(30)
        for c in members:
            c.close()
    assert sorted(v for got in received.values() for _, v in got[:1]) == list(range(total))
    for (partition, offset), got in received.items():
        for when, _ in got[1:]:
            # A record read twice was not committed by the time it was read again.
            assert not any(p == partition and at < when and committed > offset for at, p, committed in commits), \
                f"record at {partition}/{offset} was read again after its commit"


MEMBER_SCRIPT = r"""
import sys
from confluent_kafka import Consumer
bootstrap, topic, group = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([topic])
shown = None
while True:
    c.poll(0.05)
    owned = sorted(tp.partition for tp in c.assignment())
    if owned != shown:
        print(*owned, flush=True)
        shown = owned
"""


def test_a_crashed_member_is_removed_after_its_session_timeout(broker, admin):
    """group.consumer.session.timeout.ms (6 s here): a member killed with SIGKILL stops
    heartbeating; the coordinator removes it and its partitions go to the member left."""
    import subprocess
    import sys

    topic, group = unique("crash"), unique("g")
    create_topic(admin, topic, 4)
    child = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, broker.bootstrap, topic, group],
                             stdout=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:  # its assignment, each time it changes: wait for partitions
            if line.split():
                break
        else:
            raise AssertionError(f"the member process exited with {child.wait()} before getting partitions")
        survivor = consumer(broker, group)
        survivor.subscribe([topic])
        poll_until([survivor], lambda: len(assigned(survivor)) == 2)
        assert len(described(admin, group).members) == 2
    finally:
        child.kill()
        child.wait()
    try:
        poll_until([survivor], lambda: len(assigned(survivor)) == 4)
        assert len(described(admin, group).members) == 1
    finally:
        survivor.close()


@pytest.mark.parametrize("assignor", ["range", "uniform"])
def test_server_assignors(broker, admin, assignor):
    topics, group = [unique("a"), unique("b")], unique("g")
    for topic in topics:
        create_topic(admin, topic, 3)
    members = [consumer(broker, group, **{"group.remote.assignor": assignor}) for _ in range(2)]
    for c in members:
        c.subscribe(topics)
    try:
        poll_until(members, lambda: sum(len(assigned(c)) for c in members) == 6 and all(assigned(c) for c in members))
        description = described(admin, group)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.partition_assignor == assignor
        owned = sorted(sorted(assigned(c)) for c in members)
        if assignor == "range":
            # Co-partitioned: the first member by id gets partitions 0-1 of both topics, the other 2.
            by_partition = [sorted({p for _, p in parts}) for parts in owned]
            assert sorted(by_partition) == [[0, 1], [2]]
            assert all({t for t, _ in parts} == set(topics) for parts in owned)
        else:
            assert sorted(len(parts) for parts in owned) == [3, 3]
    finally:
        for c in members:
            c.close()


def test_unsupported_assignor_is_reported(broker, admin):
    topic, group = unique("u"), unique("g")
    create_topic(admin, topic, 1)
    c = consumer(broker, group, **{"group.remote.assignor": "sticky"})
    c.subscribe([topic])
    errors = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while not errors and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error():
                errors.append(msg.error())
    finally:
        c.close()
    # librdkafka treats UNSUPPORTED_ASSIGNOR as fatal, quoting the broker's error.
    assert errors and errors[0].code() == KafkaError._FATAL
    assert "The assignor or its version range is not supported" in errors[0].str()


def test_regex_subscription_picks_up_a_new_topic(broker, admin):
    prefix = unique("rx")
    create_topic(admin, f"{prefix}-one", 2)
    c = consumer(broker, unique("g"))
    c.subscribe([f"^{prefix}-.*"])
    try:
        poll_until([c], lambda: assigned(c) == {(f"{prefix}-one", 0), (f"{prefix}-one", 1)})
        create_topic(admin, f"{prefix}-two", 1)
        create_topic(admin, unique("other"), 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(f"{prefix}-two", b"found")
        producer.flush(15)
        got = []
        poll_until([c], lambda: got == [b"found"], on_message=lambda _c, m: got.append(m.value()))
        assert assigned(c) == {(f"{prefix}-one", 0), (f"{prefix}-one", 1), (f"{prefix}-two", 0)}
        # Partitions added to a subscribed topic are assigned too.
        admin.create_partitions([NewPartitions(f"{prefix}-two", 2)])[f"{prefix}-two"].result(15)
        poll_until([c], lambda: (f"{prefix}-two", 1) in assigned(c))
    finally:
        c.close()


def test_static_member_restart_keeps_its_partitions(broker, admin):
    topic, group = unique("s"), unique("g")
    create_topic(admin, topic, 4)
    first = consumer(broker, group, **{"group.instance.id": "instance-a"})
    other = consumer(broker, group, **{"group.instance.id": "instance-b"})
    for c in (first, other):
        c.subscribe([topic])
    poll_until([first, other], lambda: len(assigned(first)) == 2 and len(assigned(other)) == 2)
    before = assigned(first)
    first.close()  # a static member leaves with epoch -2: its partitions wait for it
    description = described(admin, group)
    assert {m.group_instance_id for m in description.members} == {"instance-a", "instance-b"}
    again = consumer(broker, group, **{"group.instance.id": "instance-a"})
    again.subscribe([topic])
    try:
        poll_until([again, other], lambda: assigned(again) == before)
        assert len(assigned(other)) == 2
        description = described(admin, group)
        assert sorted(m.group_instance_id for m in description.members) == ["instance-a", "instance-b"]
    finally:
        again.close()
        other.close()


def test_admin_describe_and_list(broker, admin):
    topic, group = unique("d"), unique("g")
    create_topic(admin, topic, 2)
    c = consumer(broker, group, **{"client.id": "describe-me"})
    c.subscribe([topic])
    try:
        poll_until([c], lambda: len(assigned(c)) == 2)
        poll_until([c], lambda: described(admin, group).state == ConsumerGroupState.STABLE, timeout=20)
        description = described(admin, group)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.partition_assignor == "uniform"
        (member,) = description.members
        assert member.client_id == "describe-me"
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {(topic, 0), (topic, 1)}
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15).valid
        assert group in {g.group_id for g in listed}
        assert {g.type for g in listed} == {ConsumerGroupType.CONSUMER}
        classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(15).valid
        assert group not in {g.group_id for g in classic}
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(15).valid
        assert group in {g.group_id for g in stable}
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(15).valid
        assert group not in {g.group_id for g in empty}
        # A group with members is not deleted; its subscribed topics' offsets are not either.
        with pytest.raises(KafkaException) as raised:
            admin.delete_consumer_groups([group])[group].result(15)
        assert raised.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        c.commit(asynchronous=False, offsets=[TopicPartition(topic, 0, 1)])
        assert offset_delete(broker, group, topic) == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    finally:
        c.close()
    admin.delete_consumer_groups([group])[group].result(15)
    listed = admin.list_consumer_groups().result(15).valid
    assert group not in {g.group_id for g in listed}


# ---- raw requests: Kafka's error codes ------------------------------------------------------------


def offset_delete(broker, group: str, topic: str) -> int:
    """OffsetDelete v0 (written by kafka-python's schema): the partition's error code."""
    from clients import request_class, response_class

    cls = request_class(47)
    topic_cls = cls.OffsetDeleteRequestTopic
    request = cls(version=0, group_id=group, topics=[topic_cls(
        name=topic, partitions=[topic_cls.OffsetDeleteRequestPartition(partition_index=0)])])
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(request, response_class(47), 0)
    assert response.error_code == ErrorCode.NONE
    return response.topics[0].partitions[0].error_code



def heartbeat(broker, version: int = 1, **fields) -> ConsumerGroupHeartbeatResponse:
    return _call(broker, HEARTBEAT, version, ConsumerGroupHeartbeatRequest(**fields), ConsumerGroupHeartbeatResponse)


def _call(broker, api_key: int, version: int, request, response_cls):
    from clients import frame, request_header

    with RawConnection(broker.bootstrap) as conn:
        conn.send(frame(request_header(api_key, version, 7, flexible=True) + bytes(request.encode(version))))
        payload = conn.recv_frame()
    return response_cls.decode(memoryview(payload)[5:], version)


def join(broker, group: str, member_id: str, **extra) -> ConsumerGroupHeartbeatResponse:
    fields = dict(group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
                  subscribed_topic_names=[], topic_partitions=[])
    fields.update(extra)
    return heartbeat(broker, **fields)


def test_a_member_that_heartbeats_but_never_revokes_is_removed_after_its_rebalance_timeout(broker, admin):
    """The rebalance timeout starts when a member is asked to revoke and is not pushed back by its
    heartbeats (Kafka arms it when reconciliation moves the member, not on every heartbeat): a
    member that keeps heartbeating while still claiming what it was asked to give up is fenced."""
    from kafkacompat.wire.messages.consumer_group_heartbeat_request import TopicPartitions

    topic, group = unique("norevoke"), unique("g")
    create_topic(admin, topic, 2)
    first = join(broker, group, "m1", rebalance_timeout_ms=3000, subscribed_topic_names=[topic])
    for _ in range(40):  # until m1 holds both partitions (the topic id reaches the assignment)
        if first.assignment is not None and sum(len(t.partitions) for t in first.assignment.topic_partitions) == 2:
            break
        time.sleep(0.25)
        first = heartbeat(broker, group_id=group, member_id="m1", member_epoch=first.member_epoch)
    (owned,) = first.assignment.topic_partitions
    held = [TopicPartitions(owned.topic_id, sorted(owned.partitions))]
    epoch = first.member_epoch
    second = join(broker, group, "m2", subscribed_topic_names=[topic])
    assert second.error_code == ErrorCode.NONE
    started = time.monotonic()
    answer = None
    while time.monotonic() - started < 20:
        answer = heartbeat(broker, group_id=group, member_id="m1", member_epoch=epoch, topic_partitions=held)
        if answer.error_code != ErrorCode.NONE:
            break
        epoch = answer.member_epoch
        time.sleep(0.4)  # well inside the 3 s rebalance timeout: each heartbeat used to re-arm it
    assert answer.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH), answer
    assert time.monotonic() - started >= 2.5  # not before its rebalance timeout


def test_bad_heartbeats_get_kafkas_errors(broker):
    group = unique("raw")
    assert heartbeat(broker, group_id=group, member_id="", member_epoch=0).error_code == ErrorCode.INVALID_REQUEST
    assert join(broker, group, "m1", rebalance_timeout_ms=-1).error_code == ErrorCode.INVALID_REQUEST
    assert join(broker, group, "m1", topic_partitions=None).error_code == ErrorCode.INVALID_REQUEST
    assert join(broker, group, "m1", subscribed_topic_names=None).error_code == ErrorCode.INVALID_REQUEST
    assert join(broker, group, "m1", member_epoch=-3).error_code == ErrorCode.INVALID_REQUEST
    assert join(broker, group, "m1", server_assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    bad_regex = join(broker, group, "m1", subscribed_topic_names=None, subscribed_topic_regex="(unclosed")
    assert bad_regex.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert heartbeat(broker, group_id=unique("none"), member_id="m1",
                     member_epoch=1).error_code == ErrorCode.GROUP_ID_NOT_FOUND

    joined = join(broker, group, "m1")
    assert joined.error_code == ErrorCode.NONE and joined.member_epoch >= 1 and joined.heartbeat_interval_ms == 500
    assert heartbeat(broker, group_id=group, member_id="m2", member_epoch=1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert heartbeat(broker, group_id=group, member_id="m1",
                     member_epoch=joined.member_epoch + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    stable = heartbeat(broker, group_id=group, member_id="m1", member_epoch=joined.member_epoch)
    assert stable.error_code == ErrorCode.NONE and stable.member_epoch == joined.member_epoch

    # v0: the coordinator gives the member its id.
    v0 = heartbeat(broker, version=0, group_id=group, member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                   subscribed_topic_names=[], topic_partitions=[])
    assert v0.error_code == ErrorCode.NONE and len(v0.member_id) == 22

    # Static members: a live instance id cannot be taken over; -2 releases it.
    assert join(broker, group, "s1", instance_id="inst").error_code == ErrorCode.NONE
    assert join(broker, group, "s2", instance_id="inst").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    left = heartbeat(broker, group_id=group, member_id="s1", member_epoch=-2, instance_id="inst")
    assert left.error_code == ErrorCode.NONE and left.member_epoch == -2
    assert join(broker, group, "s2", instance_id="inst").error_code == ErrorCode.NONE

    # group.consumer.max.size=5: m1, the v0 member, s2, and two more.
    for member_id in ("m3", "m4"):
        assert join(broker, group, member_id).error_code == ErrorCode.NONE
    assert join(broker, group, "m5").error_code == ErrorCode.GROUP_MAX_SIZE_REACHED

    leave = heartbeat(broker, group_id=group, member_id="m1", member_epoch=-1)
    assert leave.error_code == ErrorCode.NONE and leave.member_epoch == -1
    assert heartbeat(broker, group_id=group, member_id="m1", member_epoch=-1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_consumer_group_describe_errors(broker):
    group = unique("desc")
    assert join(broker, group, "m1").error_code == ErrorCode.NONE
    for version in (0, 1):
        response = _call(broker, DESCRIBE, version, ConsumerGroupDescribeRequest(group_ids=[group, unique("nope")]),
                         ConsumerGroupDescribeResponse)
        found, missing = response.groups
        assert found.error_code == ErrorCode.NONE and [m.member_id for m in found.members] == ["m1"]
        assert found.assignor_name == "uniform" and found.group_epoch >= 1
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        if version >= 1:
            assert found.members[0].member_type == 1  # the consumer protocol
    # DescribeGroups describes classic groups only: Dead before v6, GROUP_ID_NOT_FOUND from v6.
    from kafkacompat.wire.messages.describe_groups_request import DescribeGroupsRequest
    from kafkacompat.wire.messages.describe_groups_response import DescribeGroupsResponse

    (old,) = _call(broker, 15, 5, DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse).groups
    assert (old.error_code, old.group_state) == (ErrorCode.NONE, "Dead")
    (new,) = _call(broker, 15, 6, DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse).groups
    assert (new.error_code, new.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.")


def commit(broker, group: str, topic: str, member_id: str, epoch: int, version: int = 9) -> int:
    from kafkacompat.wire.messages.offset_commit_request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kafkacompat.wire.messages.offset_commit_response import OffsetCommitResponse

    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, topics=[
        OffsetCommitRequestTopic(name=topic, partitions=[OffsetCommitRequestPartition(0, 5)])])
    (topic_result,) = _call(broker, 8, version, request, OffsetCommitResponse).topics
    return topic_result.partitions[0].error_code


def fetch_offset(broker, group: str, topic: str, member_id: str | None, epoch: int) -> tuple[int, int]:
    from kafkacompat.wire.messages.offset_fetch_request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )
    from kafkacompat.wire.messages.offset_fetch_response import OffsetFetchResponse

    request = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
        group_id=group, member_id=member_id, member_epoch=epoch,
        topics=[OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])])
    (result,) = _call(broker, 9, 9, request, OffsetFetchResponse).groups
    offset = result.topics[0].partitions[0].committed_offset if result.topics else -1
    return result.error_code, offset


def test_offset_commit_and_fetch_are_fenced_by_member_epoch(broker, admin):
    topic, group = unique("o"), unique("g")
    create_topic(admin, topic, 1)
    joined = join(broker, group, "m1", subscribed_topic_names=[topic])
    epoch = joined.member_epoch
    assert commit(broker, group, topic, "m1", epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(broker, group, topic, "nobody", epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(broker, group, topic, "m1", epoch, version=8) == ErrorCode.UNSUPPORTED_VERSION
    assert commit(broker, group, topic, "m1", epoch) == ErrorCode.NONE
    assert fetch_offset(broker, group, topic, "m1", epoch) == (ErrorCode.NONE, 5)
    assert fetch_offset(broker, group, topic, "m1", epoch - 1)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch_offset(broker, group, topic, "nobody", epoch)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert fetch_offset(broker, group, topic, None, -1) == (ErrorCode.NONE, 5)  # an admin client



def test_offsets_by_topic_id_from_v10(broker, admin):
    from kafkacompat.wire.messages.offset_commit_request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kafkacompat.wire.messages.offset_commit_response import OffsetCommitResponse
    from kafkacompat.wire.messages.offset_fetch_request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )
    from kafkacompat.wire.messages.offset_fetch_response import OffsetFetchResponse

    topic, group = unique("ids"), unique("g")
    create_topic(admin, topic, 1)
    joined = join(broker, group, "m1", subscribed_topic_names=[topic])
    topic_id = joined.assignment.topic_partitions[0].topic_id
    unknown = uuid.uuid4()
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=joined.member_epoch, member_id="m1",
                                  topics=[OffsetCommitRequestTopic(topic_id=topic_id,
                                                                   partitions=[OffsetCommitRequestPartition(0, 7)]),
                                          OffsetCommitRequestTopic(topic_id=unknown,
                                                                   partitions=[OffsetCommitRequestPartition(0, 7)])])
    committed = _call(broker, 8, 10, request, OffsetCommitResponse).topics
    assert [(t.topic_id, t.partitions[0].error_code) for t in committed] == [
        (topic_id, ErrorCode.NONE), (unknown, ErrorCode.UNKNOWN_TOPIC_ID)]
    fetch = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
        group_id=group, member_id="m1", member_epoch=joined.member_epoch,
        topics=[OffsetFetchRequestTopics(topic_id=topic_id, partition_indexes=[0]),
                OffsetFetchRequestTopics(topic_id=unknown, partition_indexes=[0])])])
    (fetched,) = _call(broker, 9, 10, fetch, OffsetFetchResponse).groups
    assert [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code) for t in fetched.topics] == [
        (topic_id, 7, ErrorCode.NONE), (unknown, -1, ErrorCode.UNKNOWN_TOPIC_ID)]
    every = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, topics=None)])
    (everything,) = _call(broker, 9, 10, every, OffsetFetchResponse).groups
    assert [(t.topic_id, t.partitions[0].committed_offset) for t in everything.topics] == [(topic_id, 7)]


def test_group_types_do_not_mix(broker, admin):
    """A heartbeat of a consumer-protocol member (not joining) for a classic group is
    GROUP_ID_NOT_FOUND; a classic JoinGroup of another protocol type for a consumer group is
    INCONSISTENT_GROUP_PROTOCOL."""
    from kafkacompat.wire.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
    from kafkacompat.wire.messages.join_group_response import JoinGroupResponse

    topic = unique("mix")
    create_topic(admin, topic, 1)
    classic_group, consumer_group = unique("classic"), unique("consumer")
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic_group,
                        "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    try:
        poll_until([classic], lambda: bool(assigned(classic)))
        refused = heartbeat(broker, group_id=classic_group, member_id="m1", member_epoch=1)
        assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        classic.close()
    assert join(broker, consumer_group, "m1", subscribed_topic_names=[topic]).error_code == ErrorCode.NONE
    request = JoinGroupRequest(group_id=consumer_group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                               member_id="", protocol_type="connect",
                               protocols=[JoinGroupRequestProtocol(name="default", metadata=b"")])
    response = _call(broker, 11, 6, request, JoinGroupResponse)
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_group_survives_a_restart(broker_factory, tmp_path):
    proc = broker_factory(*SETTINGS)
    topic, group = unique("r"), unique("g")
    restart_admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    create_topic(restart_admin, topic, 2)
    first = join(proc, group, "m1", subscribed_topic_names=[topic])
    second = join(proc, group, "m2", subscribed_topic_names=[topic])
    # m1 is told to give up a partition, confirms it, and m2 then gets it: both at the same epoch.
    m1 = heartbeat(proc, group_id=group, member_id="m1", member_epoch=first.member_epoch)
    kept = [ConsumerGroupHeartbeatRequest.TopicPartitions(t.topic_id, t.partitions)
            for t in m1.assignment.topic_partitions]
    assert sum(len(t.partitions) for t in kept) == 1
    m1 = heartbeat(proc, group_id=group, member_id="m1", member_epoch=first.member_epoch, topic_partitions=kept)
    m2 = heartbeat(proc, group_id=group, member_id="m2", member_epoch=second.member_epoch)
    assert m2.assignment is not None and sum(len(t.partitions) for t in m2.assignment.topic_partitions) == 1
    assert m1.member_epoch == m2.member_epoch
    assert commit(proc, group, topic, "m2", m2.member_epoch) == ErrorCode.NONE
    before = _call(proc, DESCRIBE, 0, ConsumerGroupDescribeRequest(group_ids=[group]),
                   ConsumerGroupDescribeResponse).groups[0]
    proc.kill()  # SIGKILL: what was answered must have been written
    proc.start()
    after = _call(proc, DESCRIBE, 0, ConsumerGroupDescribeRequest(group_ids=[group]),
                  ConsumerGroupDescribeResponse).groups[0]
    assert after == before
    again = heartbeat(proc, group_id=group, member_id="m2", member_epoch=m2.member_epoch)
    assert again.error_code == ErrorCode.NONE and again.member_epoch == m2.member_epoch
    assert fetch_offset(proc, group, topic, "m2", m2.member_epoch) == (ErrorCode.NONE, 5)


def test_online_upgrade_and_downgrade(broker, admin):
    """group.consumer.migration.policy=bidirectional (Kafka's default): a consumer-protocol member
    joining a classic group makes it a consumer group whose classic members keep working through
    JoinGroup/SyncGroup/Heartbeat; when that member leaves, the group is classic again."""
    topic, group = unique("mig"), unique("g")
    create_topic(admin, topic, 4)
    classic_config = {"group.protocol": "classic", "session.timeout.ms": 10000, "heartbeat.interval.ms": 300}
    classic = [consumer(broker, group, **classic_config) for _ in range(2)]
    for c in classic:
        c.subscribe([topic])
    poll_until(classic, lambda: sum(len(assigned(c)) for c in classic) == 4 and all(assigned(c) for c in classic))
    assert described(admin, group).type == ConsumerGroupType.CLASSIC

    modern = consumer(broker, group)
    modern.subscribe([topic])
    everyone = [*classic, modern]

    def split_three_ways() -> bool:
        owned = [assigned(c) for c in everyone]
        return all(owned) and sum(len(o) for o in owned) == 4 and len(set().union(*owned)) == 4

    poll_until(everyone, split_three_ways)
    description = described(admin, group)
    assert description.type == ConsumerGroupType.CONSUMER and len(description.members) == 3

    modern.close()
    poll_until(classic, lambda: sum(len(assigned(c)) for c in classic) == 4 and all(assigned(c) for c in classic))
    poll_until(classic, lambda: described(admin, group).type == ConsumerGroupType.CLASSIC, timeout=20)
    for c in classic:
        c.close()
