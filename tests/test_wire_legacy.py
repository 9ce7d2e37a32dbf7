"""Legacy message sets (magic 0/1) from old producers become one RecordBatch v2."""

from __future__ import annotations

import zlib

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.legacy import is_legacy, upconvert
from kafkacompat.wire.records import validate_batches


VALUE = b"compressible value %d " + b"x" * 200  # long enough that every codec shrinks it


def legacy_set(magic: int, codec: int, count: int = 3) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_000 + i if magic else None, key=b"k%d" % i, value=VALUE % i)
    return bytes(builder.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_upconverted_batch_keeps_keys_values_timestamps_and_codec(magic, codec):
    source = memoryview(bytearray(legacy_set(magic, codec)))
    assert is_legacy(source)
    converted = upconvert(source)
    (header,) = validate_batches(converted, 1 << 20)
    assert header.magic == 2 and header.records_count == 3 and header.compression == codec
    records = list(DefaultRecordBatch(bytes(converted)))
    assert [(r.key, r.value) for r in records] == [(b"k%d" % i, VALUE % i) for i in range(3)]
    expected_timestamps = [1_000, 1_001, 1_002] if magic == 1 else [-1, -1, -1]
    assert [r.timestamp for r in records] == expected_timestamps


def test_several_legacy_messages_become_one_batch():
    source = legacy_set(1, 0, 2) + legacy_set(1, 0, 2)
    (header,) = validate_batches(upconvert(memoryview(bytearray(source))), 1 << 20)
    assert header.records_count == 4


def test_bad_legacy_crc_is_corrupt_message():
    source = bytearray(legacy_set(1, 0, 1))
    source[-1] ^= 0xFF
    with pytest.raises(KafkaError) as caught:
        upconvert(memoryview(source))
    assert caught.value.code == ErrorCode.CORRUPT_MESSAGE


def test_magic_2_is_not_legacy():
    assert not is_legacy(memoryview(bytearray(17)[:0] + bytes(16) + b"\x02"))


@pytest.mark.parametrize("entries", [
    [(1_000, b"k0", b"v0"), (1_005, None, b"x" * 300), (999, b"k2", None)],
    [(-1, None, b"")],
])
def test_a_new_batch_is_what_kafka_python_builds(entries):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kafkacompat.wire.records import iter_records, new_batch, read_header, record_value

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, (timestamp, key, value) in enumerate(entries):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=[])
    ours = new_batch(entries)
    assert bytes(ours) == bytes(builder.build())
    records = list(iter_records(ours, read_header(ours)))
    assert [(r.timestamp, r.key, record_value(r)) for r in records] == entries


def test_a_magic_1_wrapper_with_log_append_time_gives_its_timestamp_to_every_record():
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for i in range(2):
        builder.append(i, timestamp=1_000 + i, key=None, value=VALUE % i)
    source = bytearray(builder.build())  # offset, size, crc, magic (16), attributes (17), timestamp (18)
    source[17] |= 0x08  # the wrapper's timestamp type: LogAppendTime
    source[18:26] = (7_777).to_bytes(8, "big")
    source[12:16] = zlib.crc32(bytes(source[16:])).to_bytes(4, "big")
    records = list(DefaultRecordBatch(bytes(upconvert(memoryview(source)))))
    assert [r.timestamp for r in records] == [7_777, 7_777]
