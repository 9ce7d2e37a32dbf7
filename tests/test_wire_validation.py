"""The record-by-record validator of Produce (wire/validation.py), its C accelerator and its
pure-Python fallback, on batches built by kafka-python (the oracle for sound batches) and by hand
(kafkacompat.testing.damaged_batches, every kind of damage a client can send)."""

from __future__ import annotations

import gzip
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.testing import damaged_batches as dmg
from kafkacompat.wire import validation
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import HEADER_SIZE, crc_ok, read_header, validate_batches
from kafkacompat.wire.validation import (
    BAD_VARINT, HEADER_COUNT, HEADER_KEY_SIZE, OFFSET_DELTA, OK, PREMATURE_EOF, RECORD_LEFTOVER, RECORD_SIZE,
    RECORD_TRUNCATED, TRAILING_BYTES, RecordErrors, decompress_bounded, scan_records_py, validate_client_batch,
)

SCANNERS = {"c": validation.scan_records, "python": scan_records_py}
PARTITION = "orders-0"


def test_the_c_accelerator_is_built():
    """scripts/test.sh installs gcc and builds it; without it Produce falls back to Python."""
    assert validation.ACCELERATED
    assert validation.scan_records.__module__ == "kafkacompat.wire._validate"


@pytest.fixture(params=SCANNERS.keys())
def scanner(request, monkeypatch):
    monkeypatch.setattr(validation, "scan_records", SCANNERS[request.param])
    return SCANNERS[request.param]


def kafka_python_batch(codec: int, *, count: int = 50, base_timestamp: int = 1_700_000_000_000) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i in range(count):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else bytes([i % 256]) * (i * 37 % 300)  # lengths over one varint byte
        headers = [("h%d" % j, None if j == 1 else b"x" * j) for j in range(i % 3)]
        builder.append(i, timestamp=base_timestamp + (i * 13 % 50) - 20, key=key, value=value, headers=headers)
    return bytearray(builder.build())


def section_of(buf) -> tuple[bytes | memoryview, int]:
    header = read_header(buf)
    return validation.records_section(memoryview(buf), header, PARTITION), header.records_count


# ---- sound batches ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", range(5))
def test_sound_kafka_python_batches_pass_in_every_codec(scanner, codec):
    buf = kafka_python_batch(codec)
    section, count = section_of(buf)
    kind, keyless, max_delta, min_delta = scanner(section, count)
    assert (kind, keyless) == (OK, 0)
    deltas = [(i * 13 % 50) - 20 - (-20) for i in range(count)]  # relative to the first record's timestamp
    assert (max_delta, min_delta) == (max(deltas), min(deltas))
    header = read_header(buf)
    assert validate_client_batch(memoryview(buf), header, PARTITION, log_append_time_topic=False) == 0


def test_a_lying_max_timestamp_is_set_to_the_records_largest_and_the_crc_redone():
    """LogValidator sets a CreateTime batch's maxTimestamp from its records; Sarama < 1.27 sends -1."""
    buf = bytearray(dmg.batch(dmg.record(0, timestamp_delta=5) + dmg.record(1, timestamp_delta=90)
                              + dmg.record(2, timestamp_delta=-4), 3, base_timestamp=1_000, max_timestamp=-1))
    header = read_header(buf)
    assert validate_client_batch(memoryview(buf), header, PARTITION, log_append_time_topic=False) == -1
    stored = read_header(buf)
    assert stored.max_timestamp == 1_090 and crc_ok(buf, stored)


def test_a_correct_max_timestamp_leaves_the_batch_untouched():
    buf = kafka_python_batch(0)
    before = bytes(buf)
    validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=False)
    assert bytes(buf) == before


@pytest.mark.parametrize("framing", ["xerial", "raw"])
def test_snappy_in_both_of_kafkas_framings(framing):
    from kafka.codec import snappy_encode

    section = dmg.records(40)
    payload = snappy_encode(section, xerial_compatible=framing == "xerial", xerial_blocksize=256)
    assert decompress_bounded(2, payload, 1 << 20) == section


def test_gzip_with_several_members_and_bytes_after_them_as_javas_gzip_stream():
    section = dmg.records(10)
    payload = gzip.compress(section[:100]) + gzip.compress(section[100:]) + b"\x00\x01"
    assert decompress_bounded(1, payload, 1 << 20) == section


# ---- damaged batches --------------------------------------------------------------------------


@pytest.mark.parametrize("name", dmg.DAMAGED.keys())
def test_every_damaged_batch_is_refused_with_kafkas_code(scanner, name):
    damaged = dmg.DAMAGED[name]
    buf = bytearray(damaged.build())
    (header,) = validate_batches(memoryview(buf), 1 << 30)  # framing and CRC are sound: only records are not
    with pytest.raises(KafkaError) as refused:
        validate_client_batch(memoryview(buf), header, PARTITION, log_append_time_topic=False)
    assert refused.value.code == damaged.code, refused.value.message
    assert PARTITION in refused.value.message or isinstance(refused.value, RecordErrors)
    if damaged.per_record:
        assert isinstance(refused.value, RecordErrors) and refused.value.record_errors
        assert all(0 <= index < header.records_count for index, _ in refused.value.record_errors)


SCAN_KINDS = {
    "count-above-the-records": (PREMATURE_EOF, 3),
    "count-below-the-records": (TRAILING_BYTES, 2),
    "huge-count-and-last-offset-delta": (PREMATURE_EOF, 3),
    "record-length-too-long": (RECORD_LEFTOVER, 0),
    "record-length-too-short": (RECORD_TRUNCATED, 0),
    "record-length-negative": (RECORD_SIZE, 0),
    "truncated-record": (RECORD_SIZE, 2),
    "trailing-garbage": (TRAILING_BYTES, 3),
    "key-length-past-the-record": (RECORD_TRUNCATED, 0),
    "value-length-past-the-record": (RECORD_TRUNCATED, 0),
    "negative-header-count": (HEADER_COUNT, 0),
    "header-count-past-the-record": (HEADER_COUNT, 0),
    "negative-header-key-size": (HEADER_KEY_SIZE, 0),
    "header-value-past-the-record": (RECORD_TRUNCATED, 0),
    "offset-deltas-repeat": (OFFSET_DELTA, 2),
    "offset-deltas-skip": (OFFSET_DELTA, 1),
    "varint-too-long": (BAD_VARINT, 0),
    "gzip-trailing-garbage": (TRAILING_BYTES, 3),
    "zstd-count-above-the-records": (PREMATURE_EOF, 3),
}


@pytest.mark.parametrize("name", SCAN_KINDS.keys())
def test_the_walk_names_the_damage_and_the_record(scanner, name):
    buf = dmg.DAMAGED[name].build()
    section, count = section_of(buf)
    kind, index, _, _ = scanner(section, count)
    assert (kind, index) == SCAN_KINDS[name]
    assert validation.describe_scan_error(kind, index, 0, 0)


def test_log_append_time_from_a_producer():
    """Kafka's validateTimestamp: on a LogAppendTime topic every record of such a batch is refused;
    on a CreateTime topic the batch becomes CreateTime, its maxTimestamp kept."""
    buf = bytearray(dmg.batch(dmg.records(2), 2, attributes=dmg.LOG_APPEND_TIME_FLAG, base_timestamp=10,
                              max_timestamp=50))
    with pytest.raises(RecordErrors) as refused:
        validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=True)
    assert refused.value.code == ErrorCode.INVALID_TIMESTAMP
    assert [index for index, _ in refused.value.record_errors] == [0, 1]
    validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=False)
    stored = read_header(buf)
    assert (stored.is_log_append_time, stored.max_timestamp, crc_ok(buf, stored)) == (False, 50, True)


# ---- compression bombs ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_batch_inflating_past_the_limit_is_refused(monkeypatch, codec):
    monkeypatch.setattr(validation, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    buf = bytearray(dmg.bomb(codec, (1 << 20) + 1))
    with pytest.raises(KafkaError) as refused:
        validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=False)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert "decompresses to more than 1048576 bytes" in refused.value.message


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_batch_inflating_to_the_limit_is_walked(monkeypatch, codec):
    monkeypatch.setattr(validation, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    buf = bytearray(dmg.bomb(codec, 1 << 20))
    with pytest.raises(RecordErrors) as refused:  # zero bytes are no record: walked, not cut off
        validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=False)
    assert "decompresses" not in refused.value.message


@pytest.mark.parametrize("codec", [1, 4])
def test_a_real_bomb_never_holds_more_than_twice_the_limit(codec):
    buf = bytearray(dmg.bomb(codec, 400 << 20))  # 400 MiB of zeros in a few hundred KiB
    assert len(buf) < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(KafkaError) as refused:
            validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert peak < validation.MAX_DECOMPRESSED_BYTES * 2  # the output and its last growth step


def test_a_raw_snappy_block_claiming_gigabytes_is_refused_before_allocating():
    header = bytes([0x80, 0x80, 0x80, 0x80, 0x0F])  # uncompressed length 4 GiB - 1 ... and no data
    buf = bytearray(dmg.batch(header + b"\x00" * 16, 1, codec=2, compress=False))
    with pytest.raises(KafkaError) as refused:
        validate_client_batch(memoryview(buf), read_header(buf), PARTITION, log_append_time_topic=False)
    assert refused.value.code == ErrorCode.INVALID_RECORD


# ---- the two walks agree ----------------------------------------------------------------------


def assert_same(section: bytes, count: int) -> None:
    assert validation.scan_records(section, count) == scan_records_py(section, count)


_SOUND_SECTIONS = [section_of(kafka_python_batch(0, count=n))[0] for n in (1, 3, 20)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 2), edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       cut=st.integers(0, 40), count_change=st.integers(-2, 2), extra=st.binary(max_size=8))
def test_c_and_python_agree_on_damaged_sections(which, edits, cut, count_change, extra):
    section = bytearray(_SOUND_SECTIONS[which])
    for position, byte in edits:
        section[position % len(section)] = byte
    if cut:
        del section[-cut:]
    section += extra
    count = (1, 3, 20)[which] + count_change
    assert_same(bytes(section), max(count, 0))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), count=st.integers(0, 30))
def test_c_and_python_agree_on_random_bytes(data, count):
    assert_same(data, count)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=200)), st.one_of(st.none(), st.binary(max_size=300)),
                          st.integers(-(2**40), 2**40)), min_size=1, max_size=12))
def test_c_and_python_agree_with_kafka_python_on_sound_records(entries):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    base = 2**41
    for i, (key, value, delta) in enumerate(entries):
        builder.append(i, timestamp=base + delta, key=key, value=value, headers=[("k", value)])
    section, count = section_of(builder.build())
    result = validation.scan_records(section, count)
    assert result == scan_records_py(section, count)
    deltas = [delta - entries[0][2] for _, _, delta in entries]
    keyless = next((i for i, (key, _, _) in enumerate(entries) if key is None), -1)
    assert result == (OK, keyless, max(deltas), min(deltas))


def test_varints_wrap_as_javas_int_arithmetic():
    """A 5-byte varint whose top bits overflow 32 bits: Kafka's ByteUtils keeps the low 32."""
    length_with_overflow = bytes([0x8A, 0x80, 0x80, 0x80, 0x70])  # zigzag 10 plus bits past 32: length 5
    body = b"\x00\x00\x00\x01\x01\x00"[:5]
    section = length_with_overflow + body
    assert validation.scan_records(section, 1) == scan_records_py(section, 1)
    assert scan_records_py(section, 1)[0] in (OK, RECORD_LEFTOVER, RECORD_TRUNCATED)


def test_headers_of_every_size_from_the_handmade_encoder():
    section = b"".join(dmg.record(i, key=None if i == 2 else b"k", value=None,
                                 headers=((b"a" * 200, b"b" * 70_000), (b"", None))) for i in range(4))
    for scan in SCANNERS.values():
        assert scan(section, 4)[:2] == (OK, 2)


def test_section_view_is_not_copied_for_uncompressed_batches():
    buf = bytearray(dmg.sound(3))
    section = validation.records_section(memoryview(buf), read_header(buf), PARTITION)
    assert isinstance(section, memoryview) and section.obj is buf and len(section) == len(buf) - HEADER_SIZE


def test_struct_layout_of_the_handmade_batches_matches_kafka_python():
    from kafka.record import MemoryRecords

    records = MemoryRecords(dmg.sound(4, codec=1))
    batch = records.next_batch()
    assert batch.validate_crc() and [r.value for r in batch] == [b"value-%d" % i for i in range(4)]
    assert struct.unpack_from(">i", dmg.sound(1), 57)[0] == 1


# ---- legacy magic 0/1 message sets (Produce v0-v2) --------------------------------------------


def legacy_wrapper(inner: bytes, codec: int = 1) -> bytes:
    """A magic-1 message whose value is ``inner`` (a message set) compressed with ``codec``."""
    import zlib

    from kafkacompat.wire.records import compress

    value = compress(codec, inner)
    body = struct.pack(">bbqi", 1, codec, 1_700_000_000_000, -1) + struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body)
    return struct.pack(">qiI", 0, 4 + len(body), crc) + body


def legacy_inner(count: int) -> bytearray:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000, key=b"k", value=b"inner-%d" % i)
    return bytearray(builder.build())


def test_a_sound_compressed_legacy_set_is_upconverted():
    from kafkacompat.wire.legacy import upconvert

    converted = upconvert(memoryview(bytearray(legacy_wrapper(bytes(legacy_inner(3))))))
    (header,) = validate_batches(converted, 1 << 20)
    assert header.records_count == 3
    validate_client_batch(converted, header, PARTITION, log_append_time_topic=False)


def test_an_inner_legacy_message_with_a_bad_crc_is_corrupt_message():
    """Kafka's LogValidator checks the CRC of every message inside a compressed legacy wrapper."""
    from kafkacompat.wire.legacy import upconvert

    inner = legacy_inner(3)
    inner[-1] ^= 0xFF  # the last inner value: its own CRC no longer matches; the wrapper's is recomputed
    with pytest.raises(KafkaError) as refused:
        upconvert(memoryview(bytearray(legacy_wrapper(bytes(inner)))))
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE and "CRC" in refused.value.message


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_a_compressed_legacy_bomb_is_refused_before_kafka_python_inflates_it(monkeypatch, codec):
    from kafkacompat.wire.legacy import upconvert

    monkeypatch.setattr(validation, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    with pytest.raises(KafkaError) as refused:
        upconvert(memoryview(bytearray(legacy_wrapper(bytes(2 << 20), codec))))
    assert refused.value.code == ErrorCode.INVALID_RECORD and "decompresses to more than" in refused.value.message
