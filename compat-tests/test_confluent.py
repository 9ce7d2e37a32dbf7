"""confluent-kafka (librdkafka) against a real broker process: the data-path contract plus what
only this client exposes."""

import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    SAMPLE, ConfluentDriver, DataPathContract, Msg, confluent_send, create_topic, offsets, values,
)


class TestConfluent(DataPathContract):
    driver_class = ConfluentDriver


def test_default_configuration_just_works(broker, topic_name):
    """A producer with nothing but bootstrap.servers (acks=all, librdkafka's defaults) and a
    consumer with nothing more than the group.id it requires (auto-commit on, closing commits)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for m in SAMPLE:
        producer.produce(topic_name, value=m.value, key=m.key, headers=list(m.headers) or None)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-readers"})
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        got = consumer.consume(len(SAMPLE), timeout=10)
    finally:
        started = time.monotonic()
        consumer.close()
    assert time.monotonic() - started < 5, "closing a default consumer hung"
    assert [m.error() for m in got] == [None] * len(SAMPLE)
    assert [(m.key(), m.value(), tuple(m.headers() or ())) for m in got] == [
        (m.key, m.value, m.headers) for m in SAMPLE
    ]


def test_metadata_lists_broker_and_topics(broker, topic_name):
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, topic_name, partitions=4)
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [(0, "127.0.0.1", broker.port)]
    assert metadata.controller_id == 0
    topic = metadata.topics[topic_name]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    assert {(p.leader, tuple(p.replicas), tuple(p.isrs)) for p in topic.partitions.values()} == {(0, (0,), (0,))}


def test_many_small_batches_then_consume_across_them(broker, topic_name):
    """linger.ms=0 and one message per flush: many batches, read back in one go from the middle."""
    for i in range(20):
        confluent_send(broker.bootstrap, topic_name, [Msg(f"b{i}".encode())], **{"linger.ms": 0})
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 7, 13)
    assert offsets(got) == list(range(7, 20))
    assert values(got) == [f"b{i}".encode() for i in range(7, 20)]
