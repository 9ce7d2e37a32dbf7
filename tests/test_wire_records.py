"""RecordBatch v2 validation with Kafka's error codes, the in-place patches, and the produce path's
rare repairs (max timestamp, recompression, timestamp limits) checked with kafka-python's and kio's
record readers."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    crc_ok,
    has_impossible_max_timestamp,
    max_timestamp_delta,
    patch_base_offset,
    patch_leader_epoch,
    read_header,
    recompress_batch,
    recompute_max_timestamp,
    set_log_append_time,
    timestamp_errors,
    validate_batches,
    validate_produce_records,
)
from tests.test_log_support import make_batch, make_compressed_batch


def error_of(records: bytes | bytearray, version: int = 9, max_bytes: int = 1 << 20) -> ErrorCode:
    with pytest.raises(KafkaError) as caught:
        validate_produce_records(memoryview(bytearray(records)), version, max_bytes)
    return caught.value.code


def test_a_valid_batch_passes_and_reports_its_header():
    batch = make_batch(3, base_timestamp=5000)
    (header,) = validate_produce_records(memoryview(batch), 9, 1 << 20)
    assert header.records_count == 3 and header.last_offset_delta == 2 and header.size == len(batch)
    assert header.max_timestamp == 5002


def test_corrupt_crc_is_corrupt_message():
    batch = make_batch(3)
    batch[-1] ^= 0xFF
    assert error_of(batch) == ErrorCode.CORRUPT_MESSAGE


def test_magic_other_than_2_is_invalid_record_as_kafka_answers_produce_v3_and_later():
    batch = make_batch(1)
    batch[16] = 1
    assert error_of(batch) == ErrorCode.INVALID_RECORD


def test_two_batches_for_one_partition_are_invalid_record():
    assert error_of(make_batch(1) + make_batch(1)) == ErrorCode.INVALID_RECORD


def test_no_batch_is_invalid_record():
    assert error_of(b"") == ErrorCode.INVALID_RECORD


def test_batch_over_max_message_bytes_is_message_too_large():
    assert error_of(make_batch(10, value_size=100), max_bytes=500) == ErrorCode.MESSAGE_TOO_LARGE


def test_zstd_needs_produce_v7():
    batch = make_compressed_batch([1, 2, 3], codec=4)
    assert error_of(batch, version=6) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert validate_produce_records(memoryview(bytearray(batch)), 7, 1 << 20)


def test_truncated_batch_is_corrupt_message():
    assert error_of(make_batch(3)[:-5]) == ErrorCode.CORRUPT_MESSAGE


def test_patches_keep_the_crc_valid():
    buf = bytearray(make_batch(4))
    header = read_header(buf)
    patch_base_offset(buf, header, 1234)
    patch_leader_epoch(buf, header, 7)
    again = read_header(buf)
    assert (again.base_offset, again.partition_leader_epoch) == (1234, 7)
    assert crc_ok(buf, again)


def test_log_append_time_restamps_and_recomputes_the_crc():
    buf = bytearray(make_batch(2, base_timestamp=10))
    header = read_header(buf)
    set_log_append_time(buf, header, 99_999)
    again = read_header(buf)
    assert again.max_timestamp == 99_999 and again.is_log_append_time and crc_ok(buf, again)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_kafka_errors(data):
    try:
        validate_batches(memoryview(bytearray(data)), 1 << 20)
    except KafkaError:
        pass


# ---- the produce path's rare repairs: max timestamp, recompression, timestamp limits ------------

T0 = 1_600_000_000_000
CODEC_IDS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd
SHAPES = [  # (key, value, headers): every record shape a client can send
    (b"k-plain", b"v-plain", []),
    (b"k-headers", b"v-headers", [("h1", b"one"), ("h2", b"two"), ("h1", b"again")]),
    (b"k-tombstone", None, []),
    (b"k-empty-value", b"", []),
    (None, b"v-no-key", []),
    (b"", b"v-empty-key", [("empty", b"")]),
    (b"\x00\xff binary", bytes(range(256)) * 4, []),
    (b"k-repetitive", b"compressible " * 300, []),
]


def client_batch(codec: int = 0, timestamps=None, *, producer=(4321, 5, 42), transactional=False,
                 shapes=SHAPES, max_timestamp: int | None = None) -> bytearray:
    """A batch as kafka-python's producer writes it; ``max_timestamp`` overwrites the header's
    maxTimestamp (CRC redone), as Sarama < 1.27 sends -1."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    if timestamps is None:
        timestamps = [T0 + 1000 * (i % 3) for i in range(len(shapes))]
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                        batch_size=1 << 22)
    for offset, ((key, value, headers), timestamp) in enumerate(zip(shapes, timestamps)):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    batch = bytearray(builder.build())
    if max_timestamp is not None:
        struct.pack_into(">q", batch, 35, max_timestamp)
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def kafka_python_view(batch: bytes | bytearray):
    """(CRC valid, header fields, records) through kafka-python's reader, an independent decoder."""
    from kafka.record import MemoryRecords

    records = MemoryRecords(bytes(batch))
    read = records.next_batch()
    assert read is not None and records.next_batch() is None
    crc_valid = read.validate_crc()  # before iterating, as kafka-python requires
    fields = (read.base_offset, read.last_offset, read.first_timestamp, read.max_timestamp, read.producer_id,
              read.producer_epoch, read.base_sequence, read.is_transactional, read.timestamp_type)
    records = [(r.offset, r.timestamp, r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in read]
    return crc_valid, read.compression_type, fields, records


def kio_view(batch: bytes | bytearray):
    """An uncompressed batch through kio's reader (checks CRC, lengths and record framing)."""
    from kio.records.readers import read_batch

    read, size = read_batch(bytes(batch), 0)
    assert size == len(batch)
    return read


def test_an_impossible_max_timestamp_is_recognised_and_a_correct_one_is_not():
    assert has_impossible_max_timestamp(read_header(client_batch(max_timestamp=-1)))
    assert has_impossible_max_timestamp(read_header(client_batch(max_timestamp=T0 - 1)))
    assert not has_impossible_max_timestamp(read_header(client_batch()))
    assert not has_impossible_max_timestamp(read_header(client_batch(timestamps=[-1] * len(SHAPES))))
    log_append_time = client_batch(max_timestamp=-1)
    struct.pack_into(">h", log_append_time, 21, 0x08)
    assert not has_impossible_max_timestamp(read_header(log_append_time))


@pytest.mark.parametrize("codec", CODEC_IDS)
def test_recompute_max_timestamp_patches_the_header_and_the_crc(codec):
    timestamps = [T0, T0 + 2000, T0 + 1000, T0 - 500, T0 + 1500, T0, T0 + 3, T0 + 1]
    correct = client_batch(codec, timestamps)
    broken = client_batch(codec, timestamps, max_timestamp=-1)
    header = read_header(broken)
    assert recompute_max_timestamp(broken, header) == T0 + 2000
    assert header.max_timestamp == T0 + 2000 and crc_ok(broken, header)
    assert broken == correct  # exactly what a correct producer sends
    crc_valid, _, fields, records = kafka_python_view(broken)
    assert crc_valid and fields[3] == T0 + 2000
    assert [r[1] for r in records] == timestamps
    if codec == 0:
        assert kio_view(broken).max_timestamp == T0 + 2000


def test_max_timestamp_delta_reads_only_deltas_and_refuses_truncated_records():
    body = bytes(client_batch(timestamps=[T0 + d for d in (5, -7, 300_000, 0, 1, 2, 3, 4)])[61:])
    assert max_timestamp_delta(body, 8) == 300_000 - 5
    for cut in (0, 1, 3, len(body) // 2, len(body) - 1):
        with pytest.raises(ValueError):
            max_timestamp_delta(body[:cut], 8)


@pytest.mark.parametrize("source", CODEC_IDS)
@pytest.mark.parametrize("target", CODEC_IDS)
def test_recompress_keeps_every_record_and_header_field(source, target):
    original = client_batch(source, transactional=True)
    patch_base_offset(original, read_header(original), 0)
    patch_leader_epoch(original, read_header(original), 9)
    rebuilt = recompress_batch(original, read_header(original), target)
    header = read_header(rebuilt)
    assert header.compression == target and header.size == len(rebuilt) and crc_ok(rebuilt, header)
    assert header.partition_leader_epoch == 9
    assert validate_batches(memoryview(rebuilt), 1 << 22)[0].records_count == len(SHAPES)
    before, after = kafka_python_view(original), kafka_python_view(rebuilt)
    assert after[0] and after[1] == target
    assert after[2] == before[2]  # offsets, timestamps, producer id/epoch/sequence, transactional
    assert after[3] == before[3]  # every record: offset, timestamp, key, value, headers
    if target == 0:
        assert [(r.key, r.value) for r in kio_view(rebuilt).records] == [(k, v) for k, v, _ in SHAPES]


def test_recompress_repairs_an_impossible_max_timestamp_on_the_way():
    broken = client_batch(0, max_timestamp=-1)
    rebuilt = recompress_batch(broken, read_header(broken), 1)
    crc_valid, codec, fields, records = kafka_python_view(rebuilt)
    assert crc_valid and codec == 1 and fields[3] == max(r[1] for r in records) == T0 + 2000


def test_recompressed_uncompressed_batch_is_the_original_byte_for_byte():
    original = client_batch(0)
    gzipped = recompress_batch(original, read_header(original), 1)
    assert recompress_batch(gzipped, read_header(gzipped), 0) == original


@pytest.mark.parametrize("codec, low, high", [(1, 1, 9), (3, 1, 17), (4, -5, 19)])
def test_compression_levels_change_the_output_not_the_records(codec, low, high):
    shapes = [(b"k%d" % i, (b"level test %d " % (i % 7)) * 400 + bytes(range(i % 200)), []) for i in range(50)]
    original = client_batch(0, [T0 + i for i in range(50)], shapes=shapes)
    fast = recompress_batch(original, read_header(original), codec, low)
    small = recompress_batch(original, read_header(original), codec, high)
    assert len(small) < len(fast)
    assert kafka_python_view(fast)[3] == kafka_python_view(small)[3] == kafka_python_view(original)[3]
    default = {1: -1, 3: 9, 4: 3}[codec]  # Kafka's defaults: zlib's 6, lz4's fast compressor, zstd 3
    assert kafka_python_view(recompress_batch(original, read_header(original), codec, default))[3] \
        == kafka_python_view(original)[3]


def test_recompressing_a_batch_that_does_not_decompress_raises():
    broken = client_batch(1)
    broken[70:90] = bytes(20)
    struct.pack_into(">I", broken, 17, crc32c.crc32c(bytes(broken[21:])))
    with pytest.raises(Exception):
        recompress_batch(broken, read_header(broken), 0)


def test_timestamp_errors_decide_by_the_header_and_name_each_record_outside():
    timestamps = [T0, T0 + 2000, T0 + 1000, T0 - 1, T0 + 1500, -1, T0 + 3, T0 + 1]
    batch = client_batch(0, timestamps)
    header = read_header(batch)
    assert timestamp_errors(batch, header, T0 - 1, T0 + 2000) == []
    errors = timestamp_errors(batch, header, T0, T0 + 1500)
    assert [index for index, _ in errors] == [1, 3]
    assert errors[0][1] == (f"Timestamp {T0 + 2000} of message with offset 1 is out of range. "
                            f"The timestamp should be within [{T0}, {T0 + 1500}]")
    # In range by its header, a batch is not decoded at all (its records here would not decode).
    garbage = bytearray(batch)
    garbage[61:] = b"\xff" * (len(batch) - 61)
    assert timestamp_errors(garbage, read_header(garbage), T0 - 1, T0 + 2000) == []
