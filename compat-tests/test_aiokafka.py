"""aiokafka against a real broker process: the data-path contract (AIOKafkaProducer batches,
AIOKafkaConsumer with assign() and no group) plus the per-message send path."""

import asyncio

import pytest

pytest.register_assert_rewrite("clients")

from clients import SAMPLE, AioKafkaDriver, DataPathContract, offsets  # noqa: E402


class TestAioKafka(DataPathContract):
    driver_class = AioKafkaDriver


def test_send_and_wait_one_message_at_a_time(broker, topic_name):
    from aiokafka import AIOKafkaProducer

    async def send_all():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, linger_ms=0)
        await producer.start()
        try:
            return [
                (await producer.send_and_wait(topic_name, value=m.value, key=m.key, headers=list(m.headers),
                                              timestamp_ms=1_700_000_000_000 + i)).offset
                for i, m in enumerate(SAMPLE)
            ]
        finally:
            await producer.stop()

    assert asyncio.run(send_all()) == list(range(len(SAMPLE)))
    got = AioKafkaDriver(broker.bootstrap).consume(topic_name, 0, 0, len(SAMPLE))
    assert [r.msg() for r in got] == list(SAMPLE)
    assert offsets(got) == list(range(len(SAMPLE)))
    assert [r.timestamp for r in got] == [1_700_000_000_000 + i for i in range(len(SAMPLE))]
