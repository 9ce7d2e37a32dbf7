"""Compacted topics against a real broker process: librdkafka and kafka-python producers, the
cleaner task at work, consumers reading the cleaned log (gaps in offsets, emptied batches), and
the produce-time rule that a compacted topic refuses records without a key."""

from __future__ import annotations

import os
import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import admin, create_topic  # noqa: E402

KEYS = 10
MESSAGES = 2000
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture
def broker(broker_factory):
    return broker_factory("--set", "log.cleaner.backoff.ms=100", "--log-level", "INFO")


def log_bytes(broker, topic: str) -> int:
    directory = broker.data_dir / f"{topic}-0"
    return sum(os.path.getsize(directory / name) for name in os.listdir(directory) if name.endswith(".log"))


def consume_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    rows: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (not rows or rows[-1][0] < high - 1):
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                rows.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return rows


def test_librdkafka_producer_then_the_cleaner_then_consumers_see_the_latest_values(broker, topic_name):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    # Written with cleanup.policy=delete, so that what was written is measured before any
    # cleaning (the cleaner is fast enough to compact while a producer writes); then the policy
    # becomes compact dynamically and the cleaner takes the log at its next pass.
    create_topic(broker.bootstrap, topic_name, 1, {**COMPACTED, "cleanup.policy": "delete"})
    # batch.size below segment.bytes: Kafka refuses a batch larger than a segment.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 1000})
    failures = []
    expected: dict[bytes, bytes | None] = {}
    for i in range(MESSAGES):
        key, value = b"key-%d" % (i % KEYS), b"value-%d" % i
        if i == MESSAGES - 3:
            value = None  # a tombstone near the end
        producer.produce(topic_name, value=value, key=key,
                         on_delivery=lambda err, msg: err is not None and failures.append(err))
        expected[key] = value
        producer.poll(0)
    assert producer.flush(30) == 0 and not failures, failures[:3]
    written = log_bytes(broker, topic_name)
    resource = ConfigResource("TOPIC", topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    for future in admin(broker).incremental_alter_configs([resource]).values():
        future.result(30)
    assert written > 20_000

    deadline = time.monotonic() + 30
    while log_bytes(broker, topic_name) > written // 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert log_bytes(broker, topic_name) <= written // 4, "the cleaner did not compact the topic"

    rows = consume_all(broker.bootstrap, topic_name)
    offsets = [offset for offset, _, _ in rows]
    assert offsets == sorted(set(offsets)) and offsets[-1] == MESSAGES - 1
    latest: dict[bytes, bytes | None] = {}
    for _, key, value in rows:
        latest[key] = value
    assert latest == expected
    assert len(rows) < MESSAGES // 2

    from kafka import KafkaConsumer, TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([KTopicPartition(topic_name, 0)])
    consumer.seek_to_beginning()
    kafka_python_rows = [(r.offset, r.key, r.value) for r in consumer]
    consumer.close()
    assert kafka_python_rows == rows


def test_compacted_topics_refuse_records_without_a_key(broker, topic_name):
    from confluent_kafka import KafkaError, Producer

    create_topic(broker.bootstrap, topic_name, 1, COMPACTED)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "retries": 0})
    reports = []
    producer.produce(topic_name, value=b"keyless", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(10)  # one batch each: Kafka rejects a whole batch when one record has no key
    producer.produce(topic_name, key=b"k", value=b"keyed", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(10)
    assert len(reports) == 2
    errors = [err.code() if err is not None else None for err in reports]
    assert errors == [KafkaError.INVALID_RECORD, None]
