"""Old producers: Produce v0-v2 with legacy magic 0/1 message sets are stored as v2 batches and
read back by today's consumers, as on Kafka 3.x."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaProducer


def consume_all(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        while len(got) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(got)} of {count} messages came back"
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("api_version, codec", [((0, 10, 1), None), ((0, 10, 1), "gzip"), ((0, 9), None),
                                                 ((0, 9), "snappy")])
def test_legacy_producer_messages_are_readable(broker, topic_name, api_version, codec):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             compression_type=codec, enable_idempotence=False, linger_ms=50)
    timestamp = 1_700_000_000_000
    futures = [producer.send(topic_name, key=b"k%d" % i, value=b"legacy %d " % i * 20, partition=0,
                             timestamp_ms=timestamp + i) for i in range(10)]
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    assert offsets == list(range(10))
    got = consume_all(broker.bootstrap, topic_name, 10)
    assert [(m.key(), m.value(), m.offset()) for m in got] == [
        (b"k%d" % i, b"legacy %d " % i * 20, i) for i in range(10)
    ]
    if api_version >= (0, 10):
        assert [m.timestamp()[1] for m in got] == [timestamp + i for i in range(10)]
    else:
        assert all(m.timestamp()[1] == -1 for m in got)  # magic 0 carries no timestamp
