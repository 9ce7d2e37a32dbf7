"""RecordBatch v2 validation with Kafka's error codes, and the in-place patches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    crc_ok,
    patch_base_offset,
    patch_leader_epoch,
    read_header,
    set_log_append_time,
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
