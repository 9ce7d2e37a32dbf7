"""Legacy message sets (magic 0/1) from old producers become one RecordBatch v2."""

from __future__ import annotations

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
