"""Hand-made RecordBatch v2 batches, sound and damaged, for the validation tests and benchmark.

Each damaged batch has a correct CRC (the damage is inside what the CRC covers, recomputed), so
only a record-by-record validator can see it. ``DAMAGED`` maps a name to a builder and the error
code Kafka's broker answers for it.
"""

from __future__ import annotations

import gzip
import struct
import time
from dataclasses import dataclass
from typing import Callable

import crc32c

from kafkacompat.wire.records import write_varint

INVALID_RECORD = 87
UNKNOWN_SERVER_ERROR = -1
INVALID_TIMESTAMP = 32

CONTROL_FLAG = 0x20
TRANSACTIONAL_FLAG = 0x10
LOG_APPEND_TIME_FLAG = 0x08
_HEADER = struct.Struct(">qiibIhiqqqhii")


def varint(value: int) -> bytes:
    return write_varint(value)


def record(index: int, *, key: bytes | None = b"key", value: bytes | None = b"value",
           headers: tuple[tuple[bytes, bytes | None], ...] = (), timestamp_delta: int = 0,
           offset_delta: int | None = None, length_change: int = 0, body: bytes | None = None) -> bytes:
    """One encoded record; ``length_change`` makes its length varint lie; ``body`` replaces
    everything after the length."""
    if body is None:
        parts = [b"\x00", varint(timestamp_delta), varint(index if offset_delta is None else offset_delta)]
        parts += [varint(-1)] if key is None else [varint(len(key)), key]
        parts += [varint(-1)] if value is None else [varint(len(value)), value]
        parts.append(varint(len(headers)))
        for name, content in headers:
            parts += [varint(len(name)), name]
            parts += [varint(-1)] if content is None else [varint(len(content)), content]
        body = b"".join(parts)
    return varint(len(body) + length_change) + body


def records(count: int, **options) -> bytes:
    return b"".join(record(i, value=b"value-%d" % i, **options) for i in range(count))


def batch(section: bytes, count: int, *, last_offset_delta: int | None = None, codec: int = 0,
          compress: bool = True, attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, base_timestamp: int | None = None, max_timestamp: int | None = None) -> bytes:
    """A sealed batch (length and CRC right) around ``section``, compressed with ``codec`` unless
    ``compress`` is False (then ``section`` is the payload as given, whatever the codec bits say)."""
    now = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    payload = compress_with(codec, section) if codec and compress else section
    out = bytearray(61) + payload
    _HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, attributes | codec,
                      count - 1 if last_offset_delta is None else last_offset_delta, now,
                      now if max_timestamp is None else max_timestamp, producer_id, producer_epoch, base_sequence,
                      count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def compress_with(codec: int, data: bytes) -> bytes:
    from kafkacompat.wire.records import compress

    return compress(codec, data)


def sound(count: int = 3, codec: int = 0) -> bytes:
    return batch(records(count), count, codec=codec)


@dataclass(frozen=True)
class Damaged:
    build: Callable[[], bytes]
    code: int
    per_record: bool = False  # Kafka-style record_errors name the failing record


def _cut_last_record() -> bytes:
    section = records(3)
    return batch(section[:-4], 3)


def _repeat_offsets() -> bytes:
    return batch(record(0) + record(1) + record(2, offset_delta=1), 3)


def _skip_offsets() -> bytes:
    return batch(record(0) + record(1, offset_delta=2) + record(2, offset_delta=3), 3)


def _too_long_varint() -> bytes:
    return batch(b"\xff\xff\xff\xff\xff\x01" + records(2), 3)


def _lying_compressed(codec: int) -> Callable[[], bytes]:
    return lambda: batch(records(3), 5, codec=codec)


def _compressed_trailing(codec: int) -> Callable[[], bytes]:
    return lambda: batch(records(3) + b"\x00garbage", 3, codec=codec)


def _garbage(codec: int) -> Callable[[], bytes]:
    return lambda: batch(b"this is not a compressed payload at all" * 4, 3, codec=codec, compress=False)


def _truncated_gzip() -> bytes:
    return batch(gzip.compress(records(3))[:-12], 3, codec=1, compress=False)


def bomb(codec: int, size: int) -> bytes:
    """``size`` zero bytes compressed with ``codec`` as a 1-record batch."""
    return batch(bytes(size), 1, codec=codec)


DAMAGED: dict[str, Damaged] = {
    "count-above-the-records": Damaged(lambda: batch(records(3), 5), INVALID_RECORD, True),
    "count-below-the-records": Damaged(lambda: batch(records(3), 2), INVALID_RECORD, True),
    "count-and-last-offset-delta-disagree": Damaged(lambda: batch(records(3), 3, last_offset_delta=9),
                                                    INVALID_RECORD),
    "huge-count-and-last-offset-delta": Damaged(lambda: batch(records(3), 577_673_135), INVALID_RECORD, True),
    "record-length-too-long": Damaged(lambda: batch(record(0, length_change=7) + record(1) + record(2), 3),
                                      INVALID_RECORD, True),
    "record-length-too-short": Damaged(lambda: batch(record(0, length_change=-3) + record(1) + record(2), 3),
                                       INVALID_RECORD, True),
    "record-length-negative": Damaged(lambda: batch(b"\x03" + records(3), 3), INVALID_RECORD, True),
    "truncated-record": Damaged(_cut_last_record, INVALID_RECORD, True),
    "trailing-garbage": Damaged(lambda: batch(records(3) + b"\x00garbage", 3), INVALID_RECORD, True),
    "key-length-past-the-record": Damaged(lambda: batch(record(0, body=b"\x00\x00\x00\x7e") + records(2), 3),
                                          INVALID_RECORD, True),
    "value-length-past-the-record": Damaged(lambda: batch(record(0, body=b"\x00\x00\x00\x01\x60") + records(2), 3),
                                            INVALID_RECORD, True),
    "negative-header-count": Damaged(lambda: batch(record(0, body=b"\x00\x00\x00\x01\x01\x03") + records(2), 3),
                                     INVALID_RECORD, True),
    "header-count-past-the-record": Damaged(lambda: batch(record(0, body=b"\x00\x00\x00\x01\x01\x40") + records(2), 3),
                                            INVALID_RECORD, True),
    "negative-header-key-size": Damaged(lambda: batch(record(0, body=b"\x00\x00\x00\x01\x01\x02\x05") + records(2), 3),
                                        INVALID_RECORD, True),
    "header-value-past-the-record": Damaged(
        lambda: batch(record(0, body=b"\x00\x00\x00\x01\x01\x02\x02h\x40") + records(2), 3), INVALID_RECORD, True),
    "offset-deltas-repeat": Damaged(_repeat_offsets, INVALID_RECORD, True),
    "offset-deltas-skip": Damaged(_skip_offsets, INVALID_RECORD, True),
    "varint-too-long": Damaged(_too_long_varint, INVALID_RECORD, True),
    **{f"{name}-garbage-payload": Damaged(_garbage(codec), UNKNOWN_SERVER_ERROR)
       for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd"))},
    "gzip-truncated-payload": Damaged(_truncated_gzip, UNKNOWN_SERVER_ERROR),
    **{f"{name}-count-above-the-records": Damaged(_lying_compressed(codec), INVALID_RECORD, True)
       for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd"))},
    **{f"{name}-trailing-garbage": Damaged(_compressed_trailing(codec), INVALID_RECORD, True)
       for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd"))},
    **{f"codec-id-{codec}": Damaged(lambda codec=codec: batch(records(3), 3, codec=codec, compress=False),
                                    UNKNOWN_SERVER_ERROR)
       for codec in (5, 6, 7)},
    "control-batch-from-a-client": Damaged(lambda: batch(records(1), 1, attributes=CONTROL_FLAG), INVALID_RECORD),
    "transactional-without-producer-id": Damaged(lambda: batch(records(3), 3, attributes=TRANSACTIONAL_FLAG),
                                                 INVALID_RECORD),
    "producer-id-without-sequence": Damaged(lambda: batch(records(3), 3, producer_id=7, producer_epoch=0),
                                            INVALID_RECORD),
    "log-append-time-without-timestamp": Damaged(
        lambda: batch(records(3), 3, attributes=LOG_APPEND_TIME_FLAG, max_timestamp=-1), INVALID_TIMESTAMP, True),
}
