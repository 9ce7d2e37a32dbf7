"""Share groups (KIP-932) through raw requests built with the generated codecs against a real
broker process: the share session rules, acknowledgement errors and membership errors, with
Kafka's error codes. The real-client tests are in test_shares_confluent.py."""

from __future__ import annotations

import base64
import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import Msg, RawConnection, confluent_send, create_topic, frame, request_header  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402
from kafkacompat.wire import codec  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402
from kafkacompat.wire.frame import is_flexible  # noqa: E402

HEARTBEAT, DESCRIBE, FETCH, ACKNOWLEDGE = 76, 77, 78, 79
VERSIONS = {HEARTBEAT: 1, DESCRIBE: 1, FETCH: 1, ACKNOWLEDGE: 1}
ACCEPT, RELEASE, REJECT = 1, 2, 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("shares-raw") / "data").start()
    yield proc
    proc.kill()


@pytest.fixture
def topic(broker):
    name = f"share-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, name)
    return name


def new_member_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def call(conn: RawConnection, api_key: int, version: int | None = None, **fields):
    version = VERSIONS[api_key] if version is None else version
    request = codec.request_class(api_key)(**fields)
    correlation_id = 4242
    header = request_header(api_key, version, correlation_id, flexible=is_flexible(api_key, version))
    conn.send(frame(header + codec.encode_request(request, version)))
    payload = conn.recv_frame()
    assert int.from_bytes(payload[:4], "big") == correlation_id
    return codec.decode_response(api_key, version, payload[5:])


class Member:
    """One share-group member speaking the protocol by hand."""

    def __init__(self, conn: RawConnection, group: str, topic: str) -> None:
        self.conn, self.group, self.topic = conn, group, topic
        self.member_id = new_member_id()
        self.epoch = 0
        self.session_epoch = 0
        self.topic_id: uuid.UUID | None = None

    def join(self):
        answer = call(self.conn, HEARTBEAT, group_id=self.group, member_id=self.member_id, member_epoch=0,
                      subscribed_topic_names=[self.topic])
        assert answer.error_code == 0, answer
        self.epoch = answer.member_epoch
        (assigned,) = answer.assignment.topic_partitions
        self.topic_id = assigned.topic_id
        return answer

    def fetch(self, acks=(), *, epoch=None, max_wait_ms=0):
        cls = codec.request_class(FETCH)
        batches = [cls.FetchTopic.FetchPartition.AcknowledgementBatch(first_offset=f, last_offset=l,
                                                                      acknowledge_types=[t]) for f, l, t in acks]
        partition = cls.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=batches)
        answer = call(self.conn, FETCH, group_id=self.group, member_id=self.member_id,
                      share_session_epoch=self.session_epoch if epoch is None else epoch, max_wait_ms=max_wait_ms,
                      min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
                      topics=[cls.FetchTopic(topic_id=self.topic_id, partitions=[partition])])
        if answer.error_code == 0 and epoch is None:
            self.session_epoch += 1
        return answer

    def acknowledge(self, acks, *, epoch=None):
        cls = codec.request_class(ACKNOWLEDGE)
        batches = [cls.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(
            first_offset=f, last_offset=l, acknowledge_types=[t]) for f, l, t in acks]
        answer = call(self.conn, ACKNOWLEDGE, group_id=self.group, member_id=self.member_id,
                      share_session_epoch=self.session_epoch if epoch is None else epoch,
                      topics=[cls.AcknowledgeTopic(topic_id=self.topic_id, partitions=[
                          cls.AcknowledgeTopic.AcknowledgePartition(partition_index=0,
                                                                    acknowledgement_batches=batches)])])
        if answer.error_code == 0 and epoch is None:
            self.session_epoch += 1
        return answer


def acquired(answer) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count)
            for t in answer.responses for p in t.partitions for r in p.acquired_records]


def partition_errors(answer, field="error_code") -> list[int]:
    return [getattr(p, field) for t in answer.responses for p in t.partitions]


def test_records_are_acquired_acknowledged_and_released_with_counted_deliveries(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, f"g-{topic}", topic)
        member.join()
        first = member.fetch()  # opens the session; the share partition starts at the log end
        assert first.error_code == 0 and acquired(first) == []
        confluent_send(broker.bootstrap, topic, [Msg(b"v%d" % i) for i in range(5)])
        got = member.fetch(max_wait_ms=5000)
        assert acquired(got) == [(0, 4, 1)]
        # accept 0-1, release 2-4: the released records come back with delivery count 2
        again = member.fetch([(0, 1, ACCEPT), (2, 4, RELEASE)], max_wait_ms=5000)
        assert partition_errors(again, "acknowledge_error_code") == [0]
        assert acquired(again) == [(2, 4, 2)]
        answer = member.acknowledge([(2, 3, REJECT), (4, 4, ACCEPT)])
        assert answer.error_code == 0 and partition_errors(answer) == [0]
        # acknowledging again: those records are no longer acquired
        answer = member.acknowledge([(4, 4, ACCEPT)])
        assert partition_errors(answer) == [ErrorCode.INVALID_RECORD_STATE]


def test_share_session_epochs(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, f"g-{topic}", topic)
        member.join()
        assert member.fetch(epoch=1).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert member.acknowledge([(0, 0, ACCEPT)], epoch=1).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert member.fetch().error_code == 0
        assert member.fetch(epoch=7).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert member.acknowledge([(0, 0, ACCEPT)], epoch=0).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert member.fetch([(0, 0, ACCEPT)], epoch=0).error_code == ErrorCode.INVALID_REQUEST
        assert member.fetch().error_code == 0  # epoch 1 still expected after the refusals above
        assert member.acknowledge([], epoch=-1).error_code == 0  # closes the session
        assert member.fetch(epoch=2).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_a_closed_session_releases_its_records_to_another_member(broker, topic):
    with RawConnection(broker.bootstrap) as conn_a, RawConnection(broker.bootstrap) as conn_b:
        group = f"g-{topic}"
        a, b = Member(conn_a, group, topic), Member(conn_b, group, topic)
        a.join(), b.join()
        a.fetch(), b.fetch()
        confluent_send(broker.bootstrap, topic, [Msg(b"x"), Msg(b"y")])
        assert acquired(a.fetch(max_wait_ms=5000)) == [(0, 1, 1)]
        assert acquired(b.fetch()) == []
        assert a.acknowledge([(0, 0, ACCEPT)], epoch=-1).error_code == 0
        # offset 1 comes back with its delivery count decremented (this is its first delivery)
        assert acquired(b.fetch(max_wait_ms=5000)) == [(1, 1, 1)]


def test_heartbeat_errors(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        group = f"g-{topic}"
        member = Member(conn, group, topic)
        joined = member.join()
        assert joined.heartbeat_interval_ms == 5000 and joined.member_epoch >= 1

        def beat(**fields):
            return call(conn, HEARTBEAT, **{"group_id": group, "member_id": member.member_id,
                                            "member_epoch": member.epoch, **fields})

        assert beat().error_code == 0
        assert beat(member_epoch=member.epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert beat(member_id=new_member_id()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert beat(member_id="").error_code == ErrorCode.INVALID_REQUEST
        assert beat(member_epoch=0, member_id=new_member_id()).error_code == ErrorCode.INVALID_REQUEST  # no topics
        left = beat(member_epoch=-1)
        assert (left.error_code, left.member_epoch) == (0, -1)
        assert beat().error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_share_heartbeat_for_a_classic_group_and_a_classic_join_for_a_share_group(broker, topic):
    from confluent_kafka import Consumer

    classic = f"classic-{topic}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        for _ in range(30):
            consumer.poll(0.5)
            if consumer.assignment():
                break
        assert consumer.assignment()
        with RawConnection(broker.bootstrap) as conn:
            answer = call(conn, HEARTBEAT, group_id=classic, member_id=new_member_id(), member_epoch=0,
                          subscribed_topic_names=[topic])
            assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            described = call(conn, DESCRIBE, group_ids=[classic])
            assert described.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        consumer.close()
    share_group = f"g-{topic}"
    with RawConnection(broker.bootstrap) as conn:
        Member(conn, share_group, topic).join()
    joiner = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": share_group})
    joiner.subscribe([topic])
    try:
        errors = []
        for _ in range(20):
            msg = joiner.poll(0.5)
            if msg is not None and msg.error():
                errors.append(msg.error().code())
                break
        from confluent_kafka import KafkaError

        assert errors == [KafkaError.INCONSISTENT_GROUP_PROTOCOL]
    finally:
        joiner.close()


def test_describe_a_share_group(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        group = f"g-{topic}"
        member = Member(conn, group, topic)
        member.join()
        (described,) = call(conn, DESCRIBE, group_ids=[group]).groups
        assert (described.error_code, described.group_state, described.assignor_name) == (0, "Stable", "simple")
        (m,) = described.members
        assert m.member_id == member.member_id and m.subscribed_topic_names == [topic]
        assert [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [(topic, [0])]
        (missing,) = call(conn, DESCRIBE, group_ids=["no-such-share-group"]).groups
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        listed = call(conn, 16, 5, types_filter=["Share"]).groups
        assert [(g.group_id, g.group_type, g.group_state) for g in listed if g.group_id == group] == \
            [(group, "share", "Stable")]
        assert group not in [g.group_id for g in call(conn, 16, 5, types_filter=["classic"]).groups]


def test_a_dropped_connection_ends_its_share_session_and_releases_the_records(broker, topic):
    group = f"g-{topic}"
    with RawConnection(broker.bootstrap) as conn_b:
        b = Member(conn_b, group, topic)
        with RawConnection(broker.bootstrap) as conn_a:
            a = Member(conn_a, group, topic)
            a.join(), b.join()
            a.fetch(), b.fetch()
            confluent_send(broker.bootstrap, topic, [Msg(b"x")])
            assert acquired(a.fetch(max_wait_ms=5000)) == [(0, 0, 1)]
        # a's socket closed without a word: b's long poll gets the record well before the lock expires
        assert acquired(b.fetch(max_wait_ms=20000)) == [(0, 0, 1)]


def test_describe_share_group_offsets(broker, topic):
    describe = 90
    cls = codec.request_class(describe)
    group_cls = cls.DescribeShareGroupOffsetsRequestGroup
    with RawConnection(broker.bootstrap) as conn:
        group = f"g-{topic}"
        member = Member(conn, group, topic)
        member.join()

        def start_offsets(topics):
            (answer,) = call(conn, describe, 0, groups=[group_cls(group_id=group, topics=topics)]).groups
            return {(t.topic_name, p.partition_index): (p.start_offset, p.error_code)
                    for t in answer.topics for p in t.partitions}

        assert start_offsets(None) == {(topic, 0): (-1, 0)}  # not started yet
        member.fetch()
        confluent_send(broker.bootstrap, topic, [Msg(b"a"), Msg(b"b"), Msg(b"c")])
        assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 2, 1)]
        member.acknowledge([(0, 1, ACCEPT)])
        assert start_offsets(None) == {(topic, 0): (2, 0)}
        asked = [group_cls.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0, 5]),
                 group_cls.DescribeShareGroupOffsetsRequestTopic(topic_name="no-such-topic", partitions=[0])]
        assert start_offsets(asked) == {(topic, 0): (2, 0), (topic, 5): (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                        ("no-such-topic", 0): (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}


def describe_lags(conn, group: str, version: int = 1) -> dict[int, tuple[int, int]]:
    """DescribeShareGroupOffsets of a group: partition -> (start offset, lag)."""
    cls = codec.request_class(90)
    (answer,) = call(conn, 90, version, groups=[cls.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]).groups
    assert answer.error_code == 0, answer
    return {p.partition_index: (p.start_offset, p.lag) for t in answer.topics for p in t.partitions}


def test_share_group_lag_is_what_is_produced_less_what_is_acknowledged_or_archived(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        group = f"g-{topic}"
        member = Member(conn, group, topic)
        member.join()
        assert describe_lags(conn, group) == {0: (-1, -1)}  # not started: the lag is unknown
        member.fetch()
        assert describe_lags(conn, group) == {0: (0, 0)}
        confluent_send(broker.bootstrap, topic, [Msg(b"%d" % i) for i in range(10)])
        assert describe_lags(conn, group) == {0: (0, 10)}
        assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 9, 1)]
        assert describe_lags(conn, group) == {0: (0, 10)}  # acquired records still lag
        # accept 2-3 (behind the start: not yet moved), reject 5, release 6-7
        answer = member.acknowledge([(2, 3, ACCEPT), (5, 5, REJECT), (6, 7, RELEASE)])
        assert partition_errors(answer) == [0]
        assert describe_lags(conn, group) == {0: (0, 7)}
        member.acknowledge([(0, 1, ACCEPT)])  # the start moves past 0-3
        assert describe_lags(conn, group) == {0: (4, 5)}  # 4 and 6-9 left; 5 archived
        assert describe_lags(conn, group, version=0) == {0: (4, -1)}  # v0 carries no lag
        confluent_send(broker.bootstrap, topic, [Msg(b"more")])
        assert describe_lags(conn, group) == {0: (4, 6)}


def test_find_coordinator_finds_the_share_coordinator(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, f"g-{topic}", topic)
        member.join()
        topic_id = base64.urlsafe_b64encode(member.topic_id.bytes).decode().rstrip("=")
        found = call(conn, 10, 6, key_type=2, coordinator_keys=[f"g-{topic}:{topic_id}:0", "no-colons"]).coordinators
        assert [(c.error_code, c.node_id, c.port) for c in found] == [
            (0, 0, broker.port), (ErrorCode.INVALID_REQUEST, -1, -1)]


def test_renew_needs_v2_and_keeps_the_records_acquired(broker, topic):
    renew = 4
    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, f"g-{topic}", topic)
        member.join()
        member.fetch()
        confluent_send(broker.bootstrap, topic, [Msg(b"r")])
        assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 0, 1)]
        assert member.acknowledge([(0, 0, renew)], epoch=member.session_epoch).error_code == ErrorCode.INVALID_REQUEST
        cls = codec.request_class(ACKNOWLEDGE)
        partition = cls.AcknowledgeTopic.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            cls.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                                          acknowledge_types=[renew])])
        answer = call(conn, ACKNOWLEDGE, 2, group_id=member.group, member_id=member.member_id,
                      share_session_epoch=member.session_epoch, is_renew_ack=True,
                      topics=[cls.AcknowledgeTopic(topic_id=member.topic_id, partitions=[partition])])
        assert answer.error_code == 0 and partition_errors(answer) == [0]
        member.session_epoch += 1
        assert partition_errors(member.acknowledge([(0, 0, ACCEPT)])) == [0]


def test_unknown_topic_ids_are_answered_and_not_kept_in_the_session(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, f"g-{topic}", topic)
        member.join()
        real = member.topic_id
        member.topic_id = uuid.uuid4()
        answer = member.fetch()
        assert answer.error_code == 0 and partition_errors(answer) == [ErrorCode.UNKNOWN_TOPIC_ID]
        member.topic_id = real
        answer = member.fetch()  # incremental: the real partition joins, with nothing to say yet
        assert answer.error_code == 0 and partition_errors(answer) == []


def test_alter_and_delete_share_group_offsets_of_an_empty_group(broker, topic):
    alter, delete = 91, 92
    alter_cls, delete_cls = codec.request_class(alter), codec.request_class(delete)
    group = f"g-{topic}"

    def altered(start_offset):
        topic_cls = alter_cls.AlterShareGroupOffsetsRequestTopic
        return call(conn, alter, 0, group_id=group, topics=[topic_cls(
            topic_name=topic, partitions=[topic_cls.AlterShareGroupOffsetsRequestPartition(
                partition_index=0, start_offset=start_offset)])])

    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, group, topic)
        member.join()
        member.fetch()
        confluent_send(broker.bootstrap, topic, [Msg(b"%d" % i) for i in range(5)])
        assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 4, 1)]
        member.acknowledge([(0, 4, ACCEPT)])
        assert altered(0).error_code == ErrorCode.NON_EMPTY_GROUP
        call(conn, HEARTBEAT, group_id=group, member_id=member.member_id, member_epoch=-1)
        answer = altered(1)
        assert answer.error_code == 0
        assert [p.error_code for t in answer.responses for p in t.partitions] == [0]
        # the group starts again at offset 1, every record a first delivery
        again = Member(conn, group, topic)
        again.join()
        assert acquired(again.fetch(max_wait_ms=5000)) == [(1, 4, 1)]
        call(conn, HEARTBEAT, group_id=group, member_id=again.member_id, member_epoch=-1)
        deleted = call(conn, delete, 0, group_id=group,
                       topics=[delete_cls.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)])
        assert deleted.error_code == 0 and [t.error_code for t in deleted.responses] == [0]
        # without state the group starts at the log end (share.auto.offset.reset=latest)
        fresh = Member(conn, group, topic)
        fresh.join()
        assert acquired(fresh.fetch()) == []
        confluent_send(broker.bootstrap, topic, [Msg(b"later")])
        assert acquired(fresh.fetch(max_wait_ms=5000)) == [(5, 5, 1)]
        missing = call(conn, delete, 0, group_id="no-such-share-group",
                       topics=[delete_cls.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)])
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
