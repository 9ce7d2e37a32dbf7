"""Compaction in the broker: the produce rule for compacted topics, and the cleaner task running
its rewrite in a worker thread while the event loop keeps appending and reading."""

from __future__ import annotations

from pathlib import Path

import trio

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.handlers.produce import handle_produce
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.log import LogCleaner
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.frame import RequestHeader
from kafkacompat.wire.produce import ProducePartitionData, ProduceRequestData, ProduceTopicData
from kafkacompat.wire.records import validate_batches
from tests.support import T0, latest, make_batch, records


def open_broker(tmp_path: Path) -> Broker:
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data"))
    broker.open()
    return broker


def produce(broker: Broker, topic: str, items) -> tuple[int, str | None]:
    blob = memoryview(bytearray(make_batch(items)))
    request = ProduceRequestData(None, 1, 1000, [ProduceTopicData(topic, None, [ProducePartitionData(0, blob)])])
    ctx = RequestContext(broker.services(), RequestHeader(0, 9, 1, "test", True), None)
    response = trio.run(handle_produce, request, ctx)
    result = response.topics[0].partitions[0]
    return result.error_code, result.error_message


def test_compacted_topics_reject_keyless_records_at_produce_time(tmp_path):
    broker = open_broker(tmp_path)
    try:
        broker.admin.create_topic_now("compacted", 1, 1, {"cleanup.policy": "compact"})
        broker.admin.create_topic_now("both", 1, 1, {"cleanup.policy": "compact,delete"})
        broker.admin.create_topic_now("plain", 1, 1, {})
        for topic in ("compacted", "both"):
            code, message = produce(broker, topic, [(b"k", b"v"), (None, b"v")])
            assert code == ErrorCode.INVALID_RECORD
            assert message == f"Compacted topic cannot accept message without key in topic partition {topic}-0."
            assert produce(broker, topic, [(b"k", b"v"), (b"j", None)])[0] == ErrorCode.NONE
            assert broker.partition(topic, 0).log.log_end_offset == 2
        assert produce(broker, "plain", [(None, b"v")])[0] == ErrorCode.NONE
    finally:
        broker.close()


def test_the_cleaner_task_cleans_in_a_thread_while_appends_and_reads_go_on(tmp_path):
    broker = open_broker(tmp_path)
    broker.admin.create_topic_now("c", 1, 1, {"cleanup.policy": "compact", "segment.bytes": "20000",
                                    "min.cleanable.dirty.ratio": "0.1"})
    log = broker.partition("c", 0).log
    expected: dict[bytes, bytes] = {}

    def append(key: bytes, value: bytes) -> None:
        blob = memoryview(bytearray(make_batch([(key, value)], timestamp=T0)))
        log.append(blob, validate_batches(blob, 1 << 20))
        expected[key] = value

    for i in range(2000):
        append(b"key%d" % (i % 50), b"value-%d" % i)
    cleaner = LogCleaner.for_manager(broker.logs, broker.config)

    async def main():
        done = trio.Event()

        async def clean():
            assert await cleaner.run_once(T0 + 3_600_000)
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(clean)
            appended = 0
            while not done.is_set():  # the event loop is free while the rewrite runs
                append(b"key%d" % (appended % 50), b"during-%d" % appended)
                appended += 1
                rows = records(log)
                assert [row[0] for row in rows] == sorted({row[0] for row in rows})
                await trio.sleep(0)
        return appended

    try:
        appended_during = trio.run(main)
        rows = records(log)
        assert latest(rows) == expected
        assert appended_during >= 1 and len(rows) < 2000 + appended_during
        assert cleaner.last_stats is not None and cleaner.last_stats.segments_after >= 1
        assert cleaner.checkpoints[("c", 0)] > 0
    finally:
        broker.close()
    reopened = open_broker(tmp_path)  # and the broker reopens it after a clean shutdown
    try:
        assert latest(records(reopened.partition("c", 0).log)) == expected
    finally:
        reopened.close()
