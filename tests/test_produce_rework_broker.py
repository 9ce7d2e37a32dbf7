"""The produce handler's rare batch repairs in an in-process broker (real data dir and files), for
what no client sends over a socket: Produce v0-2 requests carrying several RecordBatch v2, each
checked and rebuilt on its own."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import trio

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.handlers.produce import handle_produce
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.wire.frame import RequestHeader
from kafkacompat.wire.produce import ProducePartitionData, ProduceRequestData, ProduceTopicData
from tests.test_log_support import read_bytes

T0 = 1_600_000_000_000


def batch(timestamps: list[int], *, broken_max: bool = False) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, timestamp in enumerate(timestamps):
        builder.append(offset, timestamp=timestamp, key=b"k", value=b"value %d " % offset * 20, headers=[])
    data = bytearray(builder.build())
    if broken_max:
        struct.pack_into(">q", data, 35, -1)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def produce(broker: Broker, topic: str, records: bytes, version: int):
    request = ProduceRequestData(None, 1, 1000, [ProduceTopicData(topic, None, [
        ProducePartitionData(0, memoryview(bytearray(records)))])])
    ctx = RequestContext(broker.services(), RequestHeader(0, version, 1, "test", False), None)
    return trio.run(handle_produce, request, ctx).topics[0].partitions[0]


def stored(broker: Broker, topic: str):
    from kafka.record import MemoryRecords

    records = MemoryRecords(read_bytes(broker.partition(topic, 0).log, 0, 1 << 20))
    found = []
    while (read := records.next_batch()) is not None:
        crc_valid = read.validate_crc()
        found.append((crc_valid, read.compression_type, read.base_offset, read.max_timestamp,
                      [r.timestamp for r in read]))
    return found


def test_every_batch_of_an_old_request_is_repaired_and_recompressed(tmp_path: Path):
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data"))
    broker.open()
    try:
        broker.admin.create_topic_now("plain", 1, 1, {})
        broker.admin.create_topic_now("gzip", 1, 1, {"compression.type": "gzip"})
        blob = batch([T0, T0 + 5]) + batch([T0 + 9, T0 + 30, T0 + 20], broken_max=True)
        for topic, codec in (("plain", 0), ("gzip", 1)):
            result = produce(broker, topic, blob, version=2)
            assert (result.error_code, result.base_offset) == (0, 0)
            assert stored(broker, topic) == [
                (True, codec, 0, T0 + 5, [T0, T0 + 5]),
                (True, codec, 2, T0 + 30, [T0 + 9, T0 + 30, T0 + 20]),
            ]
        assert broker.partition("plain", 0).log.offset_for_timestamp(T0 + 25) == (3, T0 + 30)
    finally:
        broker.close()
