"""ListOffsets with real clients (confluent-kafka's AdminClient.list_offsets, Consumer.
offsets_for_times and get_watermark_offsets; kafka-python's KafkaConsumer) after producing
records with explicit timestamps, and raw requests for versions and special timestamps the
clients do not send."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

pytest.register_assert_rewrite("clients")
from clients import RawConnection  # noqa: E402

from clients import request_class, response_class  # noqa: E402

LIST_OFFSETS = 2
TIMEOUT = 15
BASE = 1_600_000_000_000
# Out of order on purpose: the max timestamp is not the last record's, and 2500 falls between.
TIMESTAMPS = [BASE + 1000, BASE + 5000, BASE + 3000, BASE + 9000, BASE + 2000]


@pytest.fixture
def client(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    yield admin
    del admin


def make_topic(admin: AdminClient, name: str, partitions: int = 1) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=TIMEOUT)


def produce(broker, topic: str, timestamps: list[int], *, one_batch: bool = False, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100 if one_batch else 0})
    for i, timestamp in enumerate(timestamps):
        producer.produce(topic, value=b"v%d" % i, timestamp=timestamp, partition=partition)
        if not one_batch:
            producer.flush(TIMEOUT)
    assert producer.flush(TIMEOUT) == 0


@pytest.fixture
def filled(broker, client, topic_name) -> str:
    make_topic(client, topic_name)
    produce(broker, topic_name, TIMESTAMPS)
    return topic_name


def list_offset(admin: AdminClient, topic: str, spec: OffsetSpec, partition: int = 0, **options):
    tp = TopicPartition(topic, partition)
    result = admin.list_offsets({tp: spec}, **options)[tp].result(timeout=TIMEOUT)
    return result.offset, result.timestamp, result.leader_epoch


def raw_list(broker, version: int, topic: str, *partitions: tuple[int, int, int], isolation_level: int = 0,
             replica_id: int = -1):
    """(partition, timestamp, current_leader_epoch) triples -> the response's partitions."""
    topic_cls = request_class(LIST_OFFSETS).ListOffsetsTopic
    fields = dict(replica_id=replica_id, topics=[topic_cls(name=topic, partitions=[
        topic_cls.ListOffsetsPartition(partition_index=p, timestamp=ts, current_leader_epoch=epoch)
        for p, ts, epoch in partitions])])
    if version >= 2:
        fields["isolation_level"] = isolation_level
    if version >= 10:
        fields["timeout_ms"] = 1000
    request = request_class(LIST_OFFSETS)(version=version, **fields)
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(request, response_class(LIST_OFFSETS), version)
    return [p for t in response.topics for p in t.partitions]


# ---- with real clients -------------------------------------------------------------------------


def test_earliest_latest_max_and_by_timestamp(client, filled):
    assert list_offset(client, filled, OffsetSpec.earliest()) == (0, -1, 0)
    assert list_offset(client, filled, OffsetSpec.latest()) == (5, -1, 0)
    assert list_offset(client, filled, OffsetSpec.max_timestamp()) == (3, BASE + 9000, 0)
    assert list_offset(client, filled, OffsetSpec.for_timestamp(BASE + 2500)) == (1, BASE + 5000, 0)
    assert list_offset(client, filled, OffsetSpec.for_timestamp(BASE + 1000)) == (0, BASE + 1000, 0)
    assert list_offset(client, filled, OffsetSpec.for_timestamp(0)) == (0, BASE + 1000, 0)


def test_timestamp_after_every_record_finds_nothing(client, filled):
    offset, timestamp, _ = list_offset(client, filled, OffsetSpec.for_timestamp(BASE + 9001))
    assert (offset, timestamp) == (-1, -1)


def test_read_committed_latest_is_the_last_stable_offset(client, filled):
    assert list_offset(client, filled, OffsetSpec.latest(), isolation_level=IsolationLevel.READ_COMMITTED)[0] == 5


def test_empty_partition(client, topic_name):
    make_topic(client, topic_name)
    assert list_offset(client, topic_name, OffsetSpec.earliest())[:2] == (0, -1)
    assert list_offset(client, topic_name, OffsetSpec.latest()) == (0, -1, 0)
    assert list_offset(client, topic_name, OffsetSpec.max_timestamp())[:2] == (-1, -1)
    assert list_offset(client, topic_name, OffsetSpec.for_timestamp(BASE))[:2] == (-1, -1)


def test_max_timestamp_inside_one_batch(broker, client, topic_name):
    make_topic(client, topic_name)
    produce(broker, topic_name, [BASE + 1000, BASE + 9000, BASE + 5000, BASE + 9000], one_batch=True)
    assert list_offset(client, topic_name, OffsetSpec.max_timestamp())[:2] == (1, BASE + 9000)
    assert list_offset(client, topic_name, OffsetSpec.for_timestamp(BASE + 4000))[:2] == (1, BASE + 9000)


def test_each_partition_answers_for_itself(broker, client, topic_name):
    make_topic(client, topic_name, partitions=2)
    produce(broker, topic_name, [BASE, BASE + 1], partition=1)
    latest = {p: list_offset(client, topic_name, OffsetSpec.latest(), partition=p)[0] for p in (0, 1)}
    assert latest == {0: 0, 1: 2}


def test_consumer_offsets_for_times_and_watermarks(broker, filled):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(filled, 0), timeout=TIMEOUT) == (0, 5)
        (found,) = consumer.offsets_for_times([TopicPartition(filled, 0, BASE + 2500)], timeout=TIMEOUT)
        assert (found.offset, found.error) == (1, None)
        (missing,) = consumer.offsets_for_times([TopicPartition(filled, 0, BASE + 10_000)], timeout=TIMEOUT)
        assert missing.offset == -1
    finally:
        consumer.close()


def test_kafka_python_consumer_offsets(broker, filled):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = KTopicPartition(filled, 0)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 5}
        found = consumer.offsets_for_times({tp: BASE + 2500})[tp]
        assert (found.offset, found.timestamp) == (1, BASE + 5000)
        assert consumer.offsets_for_times({tp: BASE + 10_000})[tp] is None
    finally:
        consumer.close()


# ---- raw requests ------------------------------------------------------------------------------


def test_unknown_topic_and_partition(broker, client, filled):
    (unknown_topic,) = raw_list(broker, 7, f"missing-{uuid.uuid4().hex[:6]}", (0, -1, -1))
    assert (unknown_topic.error_code, unknown_topic.offset, unknown_topic.timestamp) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART, -1, -1)
    (unknown_partition,) = raw_list(broker, 7, filled, (3, -1, -1))
    assert unknown_partition.error_code == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_partition_named_twice_is_refused_once(broker, filled):
    (twice,) = raw_list(broker, 4, filled, (0, -1, -1), (0, -2, -1))
    assert (twice.error_code, twice.offset, twice.timestamp) == (KafkaError.INVALID_REQUEST, -1, -1)


def test_current_leader_epoch_is_checked(broker, filled):
    (current,) = raw_list(broker, 4, filled, (0, -1, 0))
    assert (current.error_code, current.offset, current.leader_epoch) == (0, 5, 0)
    (newer,) = raw_list(broker, 4, filled, (0, -1, 5))
    assert newer.error_code == KafkaError.UNKNOWN_LEADER_EPOCH


@pytest.mark.parametrize("timestamp, first_version", [(-3, 7), (-4, 8), (-5, 9), (-6, 11)])
def test_special_timestamps_need_their_version(broker, filled, timestamp, first_version):
    (too_old,) = raw_list(broker, first_version - 1, filled, (0, timestamp, -1))
    assert too_old.error_code == KafkaError.UNSUPPORTED_VERSION
    (supported,) = raw_list(broker, first_version, filled, (0, timestamp, -1))
    assert supported.error_code == 0


def test_special_timestamps_without_tiered_storage(broker, filled):
    results = [raw_list(broker, 11, filled, (0, ts, -1))[0] for ts in (-4, -5, -6)]
    assert [(r.offset, r.timestamp, r.leader_epoch) for r in results] == [(0, -1, 0), (-1, -1, -1), (-1, -1, -1)]


def test_undefined_negative_timestamp(broker, filled):
    (result,) = raw_list(broker, 11, filled, (0, -7, -1))
    assert result.error_code == KafkaError.UNSUPPORTED_VERSION


def test_version_1_answers_with_offset_and_timestamp(broker, filled):
    latest, by_time = raw_list(broker, 1, filled, (0, -1, -1)) + raw_list(broker, 1, filled, (0, BASE + 2500, -1))
    assert (latest.error_code, latest.offset, latest.timestamp) == (0, 5, -1)
    assert (by_time.offset, by_time.timestamp) == (1, BASE + 5000)


def test_follower_style_request_sees_the_log_end(broker, filled):
    (result,) = raw_list(broker, 9, filled, (0, -1, -1), replica_id=1, isolation_level=1)
    assert (result.error_code, result.offset) == (0, 5)


# ---- v0: the legacy answer (old Sarama, kafka-python at api_version 0.10.0 and older) -----------


def raw_list_v0(broker, topic: str, timestamp: int, max_num_offsets: int, partition: int = 0):
    topic_cls = request_class(LIST_OFFSETS).ListOffsetsTopic
    request = request_class(LIST_OFFSETS)(version=0, replica_id=-1, topics=[topic_cls(name=topic, partitions=[
        topic_cls.ListOffsetsPartition(partition_index=partition, timestamp=timestamp, max_num_offsets=max_num_offsets)])])
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(request, response_class(LIST_OFFSETS), 0)
    (result,) = [p for t in response.topics for p in t.partitions]
    return result.error_code, list(result.old_style_offsets)


def test_v0_answers_segment_offsets_before_a_time(broker, filled):
    import time

    assert raw_list_v0(broker, filled, -1, 1) == (0, [5])  # latest
    assert raw_list_v0(broker, filled, -2, 1) == (0, [0])  # earliest
    assert raw_list_v0(broker, filled, -1, 10) == (0, [5, 0])  # the log end, then the segment's base
    # by time: what was there no later than the timestamp (segment modification times, not record times)
    assert raw_list_v0(broker, filled, int(time.time() * 1000) + 60_000, 10) == (0, [5, 0])
    assert raw_list_v0(broker, filled, BASE, 10) == (0, [])
    assert raw_list_v0(broker, filled, -1, 0) == (0, [])
    assert raw_list_v0(broker, filled, -1, 1, partition=7)[0] == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_at_0_10_0_resets_with_v0(broker, filled):
    """kafka-python pinned to broker 0.10.0 resets offsets with ListOffsets v0 (and fetches with v2)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    tp = KTopicPartition(filled, 0)
    for reset, first in (("earliest", 0), ("latest", None)):
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 0), auto_offset_reset=reset,
                                 enable_auto_commit=False, group_id=None)
        try:
            consumer.assign([tp])
            assert consumer.position(tp) == (0 if reset == "earliest" else 5)
            records = [r for batch in consumer.poll(timeout_ms=3000).values() for r in batch]
            assert [r.offset for r in records][:1] == ([first] if first is not None else [])
        finally:
            consumer.close()
