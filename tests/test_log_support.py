"""Helpers for the log tests: valid RecordBatch v2 bytes built from scratch (crc32c)."""

from __future__ import annotations

import struct

import crc32c

from kafkacompat.wire.records import BatchHeader, validate_batches

HEADER = struct.Struct(">qiibIhiqqqhii")


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, value: bytes) -> bytes:
    body = b"\x00" + _varint(timestamp_delta) + _varint(offset_delta) + _varint(-1)
    body += _varint(len(value)) + value + _varint(0)
    return _varint(len(body)) + body


def make_batch(values: list[bytes] | int, *, timestamps: list[int] | None = None, base_timestamp: int = 1_000,
               base_offset: int = 0, value_size: int = 10, attributes: int = 0) -> bytearray:
    """One uncompressed batch; ``values`` may be a record count (values of ``value_size`` bytes)."""
    if isinstance(values, int):
        values = [bytes([65 + i % 26]) * value_size for i in range(values)]
    if timestamps is None:
        timestamps = [base_timestamp + i for i in range(len(values))]
    first = timestamps[0]
    records = b"".join(_record(i, ts - first, value) for i, (ts, value) in enumerate(zip(timestamps, values)))
    batch = bytearray(HEADER.size) + records
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, -1, 2, 0, attributes, len(values) - 1,
                     first, max(timestamps), -1, -1, -1, len(values))
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def make_compressed_batch(timestamps: list[int], codec: int = 1, value: bytes = b"v" * 50) -> bytearray:
    """A batch compressed with ``codec`` (1 gzip, 2 snappy, 3 lz4, 4 zstd) by kafka-python's builder."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, timestamp in enumerate(timestamps):
        builder.append(offset, timestamp=timestamp, key=None, value=value, headers=[])
    return builder.build()


def records_of(*batches: bytearray) -> tuple[memoryview, list[BatchHeader]]:
    """What a produce handler hands the log: a writable view and validated headers."""
    blob = bytearray().join(batches)
    view = memoryview(blob)
    return view, validate_batches(view, 1 << 30)


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch in ``data``."""
    spans, position = [], 0
    while position < len(data):
        fields = HEADER.unpack_from(data, position)
        spans.append((fields[0], fields[0] + fields[6]))
        position += fields[1] + 12
    assert position == len(data), "read returned a partial batch"
    return spans


def read_bytes(log, offset: int, max_bytes: int, **options) -> bytes:
    """PartitionLog.read's bytes; closes the regions' descriptors as the server would."""
    result = log.read(offset, max_bytes, **options)
    try:
        return result.read_all()
    finally:
        result.close()
