"""Client quotas enforced (KIP-13, KIP-219): a confluent-kafka producer over its
producer_byte_rate, and a confluent-kafka and a kafka-python consumer (the latter in a fetch
session) over their consumer_byte_rate, are throttled to them.

The rates are measured by the test over the steady part of a run of about 12 s (after the first
25 % of the bytes, which include the burst a fresh rate window allows) as the slope of the bytes
done against time, so they check the long-run rate, not any single request's latency. The broker
runs with quota.window.num=2 (windows of quota.window.size.seconds=1): Kafka's rate over few
samples lets a client burst for about one window after an old sample expires, which averages out
over the measured span (runs measured 0.90-1.04 of the quota).
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

pytest.register_assert_rewrite("clients")
from clients import RawConnection, admin, frame, request_class, request_header, response_class  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

from test_admin_acls_quotas import alter_quotas, quotas  # noqa: E402

QUOTA = 200_000          # bytes per second
TOTAL = 2_400_000        # bytes of record values per run (about 12 s at the quota)
VALUE = b"x" * 1000
STEADY_FROM = 0.25       # the measured span starts once this share of the bytes went through
TIMEOUT = 60
METADATA = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("quotas") / "data", extra_args=[
        "--set", "quota.window.num=2", "--set", "quota.window.size.seconds=1"]).start()
    yield proc
    proc.kill()


def steady_rate(events: list[tuple[float, int]]) -> float:
    """Bytes per second over the steady part (from the event where STEADY_FROM of the bytes were
    done): the least-squares slope of the bytes done against time. A throttled client moves in
    steps (a burst, then a muted connection), so a slope between two single events would depend
    on where in a step each falls; the fit over every event does not."""
    total = sum(size for _, size in events)
    points, done = [], 0
    for when, size in events:
        done += size
        if done >= STEADY_FROM * total:
            points.append((when, done))
    assert points[-1][0] - points[0][0] > 3, "the measured span is too short to tell a rate"
    mean_t = sum(t for t, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    return (sum((t - mean_t) * (b - mean_b) for t, b in points)
            / sum((t - mean_t) ** 2 for t, _ in points))


def set_quota(broker, client_id: str, key: str, value: float = QUOTA) -> None:
    assert alter_quotas(broker, [([("client-id", client_id)], [(key, float(value))])]) == {
        frozenset({("client-id", client_id)}): (0, None)}
    assert quotas(broker)[frozenset({("client-id", client_id)})] == {key: float(value)}


def create_topic(broker, topic: str) -> None:
    admin(broker).create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)


def produce(broker, topic: str, client_id: str, stats: list | None = None) -> list[tuple[float, int]]:
    """Produce TOTAL bytes; return (acknowledgement time, bytes) per message."""
    config = {"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5,
              "batch.size": 16384}
    if stats is not None:
        config.update({"statistics.interval.ms": 500, "stats_cb": stats.append})
    producer = Producer(config)
    acked: list[tuple[float, int]] = []

    def delivered(err, msg):
        assert err is None, err
        acked.append((time.monotonic(), len(msg.value())))

    for _ in range(TOTAL // len(VALUE)):
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    return acked


def test_a_producer_over_its_byte_rate_is_throttled_to_it(broker):
    topic = "quota-produce"
    create_topic(broker, topic)
    set_quota(broker, "slow-producer", "producer_byte_rate")
    stats: list[str] = []
    acked = produce(broker, topic, "slow-producer", stats)
    assert len(acked) == TOTAL // len(VALUE)
    rate = steady_rate(acked)
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"measured {rate:.0f} B/s against a quota of {QUOTA} B/s"
    # The client saw the throttle times the broker answered with (librdkafka's statistics).
    throttled = [b["throttle"]["max"] for s in stats for b in json.loads(s)["brokers"].values() if b["nodeid"] >= 0]
    assert max(throttled) > 0


def consume_confluent(broker, topic: str, client_id: str) -> list[tuple[float, int]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "group.id": client_id,
                         "enable.auto.commit": False, "fetch.max.bytes": 8192, "message.max.bytes": 8192,
                         "max.partition.fetch.bytes": 8192})
    received: list[tuple[float, int]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while sum(size for _, size in received) < TOTAL:
            assert time.monotonic() < deadline, f"consumed {sum(s for _, s in received)} of {TOTAL} bytes"
            msg = consumer.poll(0.5)   # one at a time: each message timed when it arrives
            if msg is not None:
                assert msg.error() is None, msg.error()
                received.append((time.monotonic(), len(msg.value())))
    finally:
        consumer.close()
    return received


def consume_kafka_python(broker, topic: str, client_id: str) -> list[tuple[float, int]]:
    """kafka-python fetches in a session (KIP-227): a throttled fetch keeps the session as it was."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_bytes=8192, max_partition_fetch_bytes=8192, auto_offset_reset="earliest")
    received: list[tuple[float, int]] = []
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek(KTopicPartition(topic, 0), 0)
        deadline = time.monotonic() + TIMEOUT
        while sum(size for _, size in received) < TOTAL:
            assert time.monotonic() < deadline, f"consumed {sum(s for _, s in received)} of {TOTAL} bytes"
            for records in consumer.poll(timeout_ms=500).values():
                now = time.monotonic()
                received.extend((now, len(record.value)) for record in records)
    finally:
        consumer.close()
    return received


@pytest.mark.parametrize("consume", [consume_confluent, consume_kafka_python], ids=["confluent", "kafka-python"])
def test_a_consumer_over_its_byte_rate_is_throttled_to_it(broker, consume):
    topic = f"quota-fetch-{consume.__name__}"
    create_topic(broker, topic)
    produce(broker, topic, "unthrottled-producer")
    client_id = f"slow-{consume.__name__}"
    set_quota(broker, client_id, "consumer_byte_rate")
    received = consume(broker, topic, client_id)
    rate = steady_rate(received)
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"measured {rate:.0f} B/s against a quota of {QUOTA} B/s"
    assert sum(size for _, size in received) == TOTAL   # nothing lost or repeated through the empty answers


def test_a_client_without_a_quota_is_not_throttled(broker):
    topic = "quota-free"
    create_topic(broker, topic)
    stats: list[str] = []
    produce(broker, topic, "free-producer", stats)
    assert all(b["throttle"]["max"] == 0 for s in stats for b in json.loads(s)["brokers"].values())


def metadata_throttle_times(broker, client_id: str, count: int) -> list[int]:
    """throttle_time_ms of up to ``count`` Metadata v12 requests (every topic) sent one after
    another, until the first throttled one."""
    cls = request_class(METADATA)
    body = bytes(cls(topics=None, allow_auto_topic_creation=False,
                     include_topic_authorized_operations=False).encode(version=12))
    throttles = []
    with RawConnection(broker.bootstrap) as conn:
        for correlation_id in range(count):
            conn.send(frame(request_header(METADATA, 12, correlation_id, flexible=True, client_id=client_id) + body))
            throttles.append(conn.read_response(response_class(METADATA), 12, correlation_id).throttle_time_ms)
            if throttles[-1]:
                break
    return throttles


def test_request_percentage_throttles_a_busy_client(broker):
    """KIP-124: 0.01 % of a thread is 100 us of handler time a second; a client sending Metadata
    requests back to back goes over it and is told to back off (at most one window, 1000 ms)."""
    set_quota(broker, "busy", "request_percentage", 0.01)
    throttles = metadata_throttle_times(broker, "busy", 20)
    assert 0 < throttles[-1] <= 1000
    assert metadata_throttle_times(broker, "idle", 20) == [0] * 20


# ---- controller_mutation_rate (KIP-599) -----------------------------------------------------------

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
THROTTLING_QUOTA_EXCEEDED = 89
MUTATIONS_PER_SECOND = 2.0   # a burst of 2 x quota.window.num (2) x 1 s = 4 partitions


def admin_call(broker, client_id: str, api_key: int, version: int, request):
    body = bytes(request.encode(version=version))
    with RawConnection(broker.bootstrap) as conn:
        flexible = {CREATE_TOPICS: 5, DELETE_TOPICS: 4, CREATE_PARTITIONS: 2}[api_key] <= version
        conn.send(frame(request_header(api_key, version, 7, flexible=flexible, client_id=client_id) + body))
        return conn.read_response(response_class(api_key), version, 7)


def create_request(topics: list[tuple[str, int]]):
    cls = request_class(CREATE_TOPICS)
    return cls(topics=[cls.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                          assignments=[], configs=[]) for name, partitions in topics],
               timeout_ms=15000, validate_only=False)


def wait_for_a_full_bucket(owed_ms: int = 0) -> None:
    """The throttle time pays what the bucket owes; the burst refills after that."""
    time.sleep(owed_ms / 1000 + 4 / MUTATIONS_PER_SECOND + 0.2)


def test_controller_mutation_rate_refuses_topics_past_the_burst_and_throttles(broker):
    client = "mutator"
    set_quota(broker, client, "controller_mutation_rate", MUTATIONS_PER_SECOND)
    wait_for_a_full_bucket()
    names = [f"mutated-{i}" for i in range(3)]
    # One request: the first topic takes the bucket from 4 to 1, the second (admitted while the
    # bucket is not empty) to -11, which takes 5.5 s to refill, so the third is refused.
    answer = admin_call(broker, client, CREATE_TOPICS, 7, create_request([(names[0], 3), (names[1], 12),
                                                                          (names[2], 1)]))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        (names[0], 0), (names[1], 0), (names[2], THROTTLING_QUOTA_EXCEEDED)]
    assert 0 < answer.throttle_time_ms <= 5500   # 11 owed at 2 a second, less what refilled meanwhile
    # Before v6 the quota is only recorded: everything is done, the answer is throttled.
    wait_for_a_full_bucket(answer.throttle_time_ms)
    answer = admin_call(broker, client, CREATE_TOPICS, 5, create_request([(f"mutated-old-{i}", 3) for i in range(3)]))
    assert [t.error_code for t in answer.topics] == [0, 0, 0]
    assert 0 < answer.throttle_time_ms <= 2500   # 5 owed
    # Another client is not limited by this one's quota.
    answer = admin_call(broker, "someone-else", CREATE_TOPICS, 7, create_request([(names[2], 1)]))
    assert ([t.error_code for t in answer.topics], answer.throttle_time_ms) == ([0], 0)

    wait_for_a_full_bucket(answer.throttle_time_ms + 2500)
    partitions = request_class(CREATE_PARTITIONS)
    answer = admin_call(broker, client, CREATE_PARTITIONS, 3, partitions(
        topics=[partitions.CreatePartitionsTopic(name=name, count=count, assignments=None)
                for name, count in ((names[0], 4), (names[1], 24), (names[2], 2))],
        timeout_ms=15000, validate_only=False))
    assert [(r.name, r.error_code) for r in answer.results] == [
        (names[0], 0), (names[1], 0), (names[2], THROTTLING_QUOTA_EXCEEDED)]   # 4 - 1 - 12 = -9

    wait_for_a_full_bucket(answer.throttle_time_ms)
    deletions = request_class(DELETE_TOPICS)
    answer = admin_call(broker, client, DELETE_TOPICS, 5, deletions(topic_names=names, timeout_ms=15000))
    # names[0] has 4 partitions, names[1] 24: deleting them takes the bucket to -24; names[2] waits.
    assert {r.name: r.error_code for r in answer.responses} == {
        names[0]: 0, names[1]: 0, names[2]: THROTTLING_QUOTA_EXCEEDED}
    assert 0 < answer.throttle_time_ms <= 12000
