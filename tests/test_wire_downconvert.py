"""Down-conversion of stored RecordBatch v2 to legacy message sets (Fetch v0-3), checked with
kafka-python's legacy message-set reader and builder (kafka.record), independent of our code; and
the streamed form of it: exactly the promised bytes, a bounded piece at a time."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as codecs
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkacompat.wire.downconvert import (
    OVERFLOW_MARKER,
    down_convert,
    down_converted_size,
    fetch_magic,
    stored_pieces,
    stream_down_converted,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import CONTROL_FLAG, read_header, set_log_append_time

BASE = 1_600_000_000_000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
VALUE = b"value that compresses well " * 8

# (key, value, headers) of the records of one batch: null keys and values, empty ones, headers
RECORDS = [
    (b"k0", VALUE + b"0", [("h", b"dropped")]),
    (None, VALUE + b"1", []),
    (b"k2", None, [("h1", b"a"), ("h2", b"")]),
    (b"", b"", []),
    (b"k4", bytes(range(256)), []),
]


def v2_batch(base_offset: int, codec: int, records=RECORDS, *, timestamps=None, log_append_time: int | None = None,
             control: bool = False, offsets=None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=4711,
                                        producer_epoch=3, base_sequence=17, batch_size=1 << 24)
    for i, (key, value, headers) in enumerate(records):
        delta = offsets[i] if offsets else i
        builder.append(delta, timestamp=(timestamps or [BASE + 1000 * n for n in range(len(records))])[i],
                       key=key, value=value, headers=headers)
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    header = read_header(batch)
    if control:  # a transaction marker's flag (its record is not a real control record: it is skipped)
        struct.pack_into(">h", batch, 21, header.attributes | CONTROL_FLAG)
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    if log_append_time is not None:
        set_log_append_time(batch, header, log_append_time)
    return bytes(batch)


def read_legacy(data: bytes) -> list[tuple]:
    """(magic, offset, timestamp, timestamp type, key, value) per message, via kafka-python."""
    records = MemoryRecords(data)
    found = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            found.append((batch.magic, r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
    return found


def top_level(data: bytes) -> list[tuple[int, int, int, int | None, bytes]]:
    """The top-level entries: (offset, magic, attributes, timestamp or None, value bytes)."""
    entries = []
    pos = 0
    while pos < len(data):
        offset, size, crc, magic, attributes = struct.unpack_from(">qiIbb", data, pos)
        assert zlib.crc32(data[pos + 16:pos + 12 + size]) == crc
        body = pos + 18
        timestamp = None
        if magic == 1:
            (timestamp,) = struct.unpack_from(">q", data, body)
            body += 8
        (key_length,) = struct.unpack_from(">i", data, body)
        body += 4 + max(key_length, 0)
        (value_length,) = struct.unpack_from(">i", data, body)
        value = data[body + 4:body + 4 + value_length] if value_length >= 0 else None
        entries.append((offset, magic, attributes, timestamp, value))
        pos += 12 + size
    return entries


def entry_sizes(data: bytes) -> list[int]:
    """The sizes of the whole top-level entries at the start of ``data``."""
    sizes, pos = [], 0
    while len(data) - pos >= 12 and pos + 12 + struct.unpack_from(">i", data, pos + 8)[0] <= len(data):
        sizes.append(12 + struct.unpack_from(">i", data, pos + 8)[0])
        pos += sizes[-1]
    return sizes


def check_tail(tail: bytes) -> None:
    """After the whole messages: a message cut at the promised size (its length runs past the
    end) or Kafka's overflow batch (offset -1, a length past the end, zeros)."""
    if len(tail) >= 12:
        offset, length = struct.unpack_from(">qi", tail)
        assert 12 + length > len(tail)
        if offset == -1 and length in (len(tail) + 1, 61):
            assert not tail[12:].strip(b"\x00") or len(tail) > 128 * 1024


def convert(data: bytes, magic: int, first: int, limit: int = 1 << 20) -> bytes:
    """The whole messages ``down_convert`` returns; checks what follows them."""
    out = down_convert(data, magic, first, limit)
    whole = sum(entry_sizes(out))
    check_tail(out[whole:])
    return out[:whole]


def legacy_messages(magic: int, items) -> bytes:
    """Uncompressed messages by kafka-python's builder: items of (offset, timestamp, key, value)."""
    out = b""
    for offset, timestamp, key, value in items:
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 24)
        builder.append(offset, timestamp=timestamp if magic else None, key=key, value=value)
        out += bytes(builder.build())
    return out


def decompress(codec: int, data: bytes, magic: int) -> bytes:
    if codec == 1:
        return codecs.gzip_decode(data)
    if codec == 2:
        return codecs.snappy_decode(data)
    return codecs.lz4_decode_old_kafka(data) if magic == 0 else codecs.lz4_decode(data)


def expected(base: int, magic: int, first: int = 0, log_append_time: int | None = None):
    timestamp_type = None if magic == 0 else (1 if log_append_time is not None else 0)
    return [
        (magic, base + i, None if magic == 0 else (log_append_time if log_append_time is not None else BASE + 1000 * i),
         timestamp_type, key, value)
        for i, (key, value, _) in enumerate(RECORDS) if base + i >= first
    ]


def test_fetch_version_to_magic():
    assert [fetch_magic(v) for v in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_records_become_one_message_each_byte_for_byte(magic):
    converted = convert(v2_batch(100, 0), magic, 100)
    assert read_legacy(converted) == expected(100, magic)
    # exactly what kafka-python's legacy builder writes for these messages (CreateTime)
    assert converted == legacy_messages(magic, [(100 + i, BASE + 1000 * i, k, v) for i, (k, v, _) in enumerate(RECORDS)])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_compressed_batch_becomes_one_wrapper_with_the_same_codec(magic, codec):
    code = CODECS[codec]
    converted = convert(v2_batch(100, code), magic, 100)
    assert read_legacy(converted) == expected(100, magic)
    ((offset, wrapper_magic, attributes, timestamp, value),) = top_level(converted)
    assert (offset, wrapper_magic, attributes) == (104, magic, code)  # the last inner offset
    assert timestamp == (None if magic == 0 else BASE + 4000)  # the largest record timestamp
    inner = decompress(code, value, magic)
    # inner offsets: relative to the first record for magic 1, absolute for magic 0
    first_inner = 0 if magic == 1 else 100
    assert inner == legacy_messages(magic, [(first_inner + i, BASE + 1000 * i, k, v)
                                            for i, (k, v, _) in enumerate(RECORDS)])


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_log_append_time_batches_carry_the_append_time_and_type(codec):
    appended = BASE + 99_999
    code = CODECS[codec]
    converted = convert(v2_batch(7, code, log_append_time=appended), 1, 7)
    assert read_legacy(converted) == expected(7, 1, log_append_time=appended)
    entries = top_level(converted)
    assert all(attributes & 0x08 and timestamp == appended for _, _, attributes, timestamp, _ in entries)
    if code:
        inner = top_level(decompress(code, entries[0][4], 1))
        assert all(attributes == 0x08 and timestamp == appended for _, _, attributes, timestamp, _ in inner)
    # magic 0 has no timestamp at all
    assert [m[2:4] for m in read_legacy(convert(v2_batch(7, code, log_append_time=appended), 0, 7))] \
        == [(None, None)] * len(RECORDS)


@pytest.mark.parametrize("magic", [0, 1])
def test_mid_batch_offset_trims_uncompressed_messages_only(magic):
    """Kafka's RecordsUtil.downConvert: records below the fetch offset are dropped from an
    uncompressed batch; a compressed one goes whole (the client skips them)."""
    assert read_legacy(convert(v2_batch(100, 0), magic, 103)) == expected(100, magic, first=103)
    assert read_legacy(convert(v2_batch(100, 1), magic, 103)) == expected(100, magic)


def test_compacted_batch_keeps_record_offsets():
    """Offsets with gaps (a compacted batch): absolute offsets stay, magic 1 inner offsets are
    relative to the first record and the wrapper has the last record's offset."""
    records = RECORDS[:3]
    for code in (0, 1):
        converted = convert(v2_batch(50, code, records, offsets=[1, 4, 6]), 1, 50)
        assert [m[1] for m in read_legacy(converted)] == [51, 54, 56]
    (wrapper,) = top_level(convert(v2_batch(50, 1, records, offsets=[1, 4, 6]), 1, 50))
    assert wrapper[0] == 56
    assert [e[0] for e in top_level(codecs.gzip_decode(wrapper[4]))] == [0, 3, 5]


def test_timestamps_before_the_epoch_and_missing_ones_pass_through():
    converted = convert(v2_batch(0, 0, RECORDS[:2], timestamps=[-1, 5]), 1, 0)
    assert [m[2] for m in read_legacy(converted)] == [-1, 5]
    (wrapper,) = top_level(convert(v2_batch(0, 1, RECORDS[:1], timestamps=[-1]), 1, 0))
    assert wrapper[3] == -1


def test_several_batches_and_control_batches():
    data = (v2_batch(0, 0, RECORDS[:2]) + v2_batch(2, 0, RECORDS[:1], control=True) + v2_batch(3, 2, RECORDS[:2]))
    assert [m[1] for m in read_legacy(convert(data, 1, 0))] == [0, 1, 3, 4]
    # nothing but a transaction marker converts to nothing
    assert convert(v2_batch(2, 0, RECORDS[:1], control=True), 0, 2) == b""
    assert down_convert(b"", 1, 0, 100) == b""


def test_size_is_the_stored_bytes_or_the_first_batch_and_is_filled_exactly():
    """Kafka's LazyDownConversionRecords: the response carries max(stored bytes read, first
    converted batch) bytes per partition; the message crossing it is cut, and when the messages
    end before it Kafka's overflow batch fills the rest."""
    first, second = v2_batch(0, 0), v2_batch(5, 0)
    everything = convert(first + second, 1, 0)
    assert [m[1] for m in read_legacy(everything)] == list(range(10))
    only_first = convert(first, 1, 0, 0)
    assert down_convert(first, 1, 0, 0) == only_first  # a limit below it: the first batch exactly
    # a limit below the first batch's converted size: that batch still goes out whole
    assert down_convert(first + second, 1, 0, 10) == only_first
    # a limit in the middle of the second batch: whole messages up to it, then the cut one
    sizes = [12 + struct.unpack_from(">i", m, 8)[0] for m in [legacy_messages(1, [(5 + i, BASE + 1000 * i, k, v)])
                                                              for i, (k, v, _) in enumerate(RECORDS)]]
    limit = len(only_first) + sizes[0] + sizes[1] + sizes[2] - 1
    out = down_convert(first + second, 1, 0, limit)
    assert len(out) == limit and out == everything[:limit]
    assert [m[1] for m in read_legacy(out)] == list(range(7))
    # fewer converted bytes than stored: Kafka's overflow batch up to the stored size
    stored = first + v2_batch(5, 0, RECORDS[:1], control=True)
    out = down_convert(stored, 1, 0, len(stored) + 500)
    assert len(out) == len(stored) + 500 and out.startswith(only_first)
    tail = out[len(only_first):]
    assert struct.unpack_from(">qi", tail) == (-1, len(tail) + 1) and tail[12:] == bytes(len(tail) - 12)
    assert read_legacy(out) == read_legacy(only_first)
    # nothing converts: nothing is promised
    assert down_convert(v2_batch(2, 0, RECORDS[:1], control=True), 1, 0, 1000) == b""


def pieces_of(data: bytes, piece_size: int):
    view = memoryview(data)
    return stored_pieces(lambda position, length: bytes(view[position:position + length]), len(data), piece_size)


@pytest.mark.parametrize("piece_size", [1, 100, 700, 4096, 1 << 20])
def test_streamed_in_pieces_is_the_same_bytes_in_bounded_pieces(piece_size):
    """Whatever the read size, the stream carries the same bytes as one conversion of
    everything (kafka-python reads the messages), each piece at most one batch's conversion or
    64 KiB (128 KiB of overflow batch), and exactly the promised size."""
    many = b"".join(v2_batch(5 * n, n % 4, RECORDS) for n in range(400))
    room = 4 * len(many)  # room for every converted message
    for magic in (0, 1):
        expected_messages = read_legacy(convert(many, magic, 3, room))
        assert [m[1] for m in expected_messages] == list(range(3, 2000))
        size = down_converted_size(pieces_of(many, piece_size), magic, 3, room)
        pieces = list(stream_down_converted(pieces_of(many, piece_size), magic, 3, size))
        assert sum(len(p) for p in pieces) == size == len(down_convert(many, magic, 3, room)) == room
        assert b"".join(pieces) == down_convert(many, magic, 3, room)
        assert max(len(p) for p in pieces) <= 128 * 1024  # Kafka's overflow batches are up to 128 KiB
        assert read_legacy(b"".join(pieces)) == expected_messages


def test_a_large_uncompressed_batch_streams_a_record_at_a_time():
    """One 3 MB uncompressed batch is never converted whole in memory: pieces of about 64 KiB."""
    big = v2_batch(0, 0, [(b"k%d" % i, b"v" * 1000, []) for i in range(3000)])
    size = down_converted_size(pieces_of(big, 64 * 1024), 1, 0, len(big))
    pieces = list(stream_down_converted(pieces_of(big, 64 * 1024), 1, 0, size))
    assert len(pieces) > 40 and max(len(p) for p in pieces) < 66 * 1024
    assert [m[1] for m in read_legacy(b"".join(pieces))] == list(range(3000))


def test_overflow_fill_larger_than_a_piece():
    """Kafka fills a long remainder with overflow batches of at most 128 KiB each."""
    out = list(stream_down_converted(iter(()), 1, 0, 300_000))
    assert [len(p) for p in out] == [128 * 1024, 128 * 1024, 300_000 - 256 * 1024]
    assert struct.unpack_from(">qi", out[0]) == (-1, 300_001)
    assert struct.unpack_from(">qi", out[1]) == (-1, 300_000 - 128 * 1024 + 1)
    assert list(stream_down_converted(iter(()), 1, 0, 5)) == [bytes(OVERFLOW_MARKER[:5])]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_magic_1_messages_in_the_log_convert_to_magic_0(codec, log_append_time):
    """A magic 1 message set written by kafka-python's builder (a log of an old Kafka) read by
    our legacy reader, for a magic 0 consumer: the same records, absolute offsets."""
    code = CODECS[codec]
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=code, batch_size=1 << 24)
    for i, (key, value, _) in enumerate(RECORDS):
        builder.append(i, timestamp=BASE + i, key=key, value=value)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, 40 + len(RECORDS) - 1 if code else 40)  # the wrapper's last offset
    if not code:
        data = bytearray(legacy_messages(1, [(40 + i, BASE + i, k, v) for i, (k, v, _) in enumerate(RECORDS)]))
    if log_append_time:  # magic 1 attributes bit 3 on the wrapper (CRC recomputed)
        data[17] |= 0x08
        struct.pack_into(">I", data, 12, zlib.crc32(bytes(data[16:])))
        data = bytes(data)
        if not code:
            data = data[:12 + struct.unpack_from(">i", data, 8)[0]]  # just the first message
    converted = convert(bytes(data), 0, 40)
    got = [(o, k, v) for _, o, _, _, k, v in read_legacy(converted)]
    count = 1 if log_append_time and not code else len(RECORDS)
    assert got == [(40 + i, k, v) for i, (k, v, _) in enumerate(RECORDS)][:count]
    assert all(magic == 0 for magic, *_ in read_legacy(converted))
    if code:
        ((offset, magic, attributes, _, value),) = top_level(converted)
        assert (offset, magic, attributes) == (44, 0, code)
        assert [e[0] for e in top_level(decompress(code, value, 0))] == list(range(40, 45))


def test_zstd_first_is_an_error_later_stops_the_conversion():
    with pytest.raises(KafkaError) as refused:
        convert(v2_batch(0, 4), 1, 0)
    assert refused.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(KafkaError):
        convert(v2_batch(0, 0, RECORDS[:1], control=True) + v2_batch(1, 4), 0, 0)
    converted = convert(v2_batch(0, 0) + v2_batch(5, 4) + v2_batch(10, 0), 1, 0)
    assert [m[1] for m in read_legacy(converted)] == list(range(5))


def test_corrupt_batches_get_corrupt_message_or_end_the_conversion():
    bad = bytearray(v2_batch(0, 1))
    bad[70:80] = b"\x00" * 10  # inside the gzip stream
    with pytest.raises(KafkaError) as caught:
        convert(bytes(bad), 1, 0)
    assert caught.value.code == ErrorCode.CORRUPT_MESSAGE
    good = v2_batch(0, 0)
    assert convert(good + bytes(bad), 1, 0) == convert(good, 1, 0)
    # a torn tail or garbage after whole batches is not read
    assert convert(good + good[:30], 1, 0) == convert(good, 1, 0)
    assert convert(good + b"\x00" * 20, 1, 0) == convert(good, 1, 0)


def test_legacy_messages_in_the_log_are_copied_or_converted():
    old = legacy_messages(1, [(3, BASE, b"k", b"v")])
    assert convert(old, 1, 3) == old
    assert convert(old, 0, 3) == legacy_messages(0, [(3, None, b"k", b"v")])


def test_overflow_marker_reads_as_a_partial_message():
    """Kafka's overflow batch: offset -1 and a length past the end, so the client sees no whole
    message and takes it for one larger than its fetch size."""
    assert len(OVERFLOW_MARKER) == 12
    records = MemoryRecords(OVERFLOW_MARKER)
    assert records.size_in_bytes() == 12 and not records.has_next()


VALID_INPUTS = [v2_batch(0, 0), v2_batch(3, 1, RECORDS[:3]), v2_batch(9, 0, RECORDS[:2], control=True),
                legacy_messages(1, [(3, BASE, b"k", b"v")])]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400), magic=st.sampled_from([0, 1]), first=st.integers(-5, 20),
       limit=st.integers(-1, 5000))
def test_random_bytes_convert_or_raise_kafka_errors(data, magic, first, limit):
    try:
        down_convert(data, magic, first, limit)
    except KafkaError:
        pass


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=st.sampled_from(VALID_INPUTS), edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                                             min_size=1, max_size=6),
       cut=st.integers(0, 10_000), magic=st.sampled_from([0, 1]))
def test_mutated_batches_convert_or_raise_kafka_errors(source, edits, cut, magic):
    """Stored batches are CRC-checked when written; a damaged log must still never raise anything
    but KafkaError here (uncompressed and gzip inputs: other decoders trust their size fields)."""
    data = bytearray(source)
    for position, value in edits:
        data[position % len(data)] = value
    try:
        down_convert(bytes(data[:cut % (len(data) + 1)]), magic, 0, 1 << 20)
    except KafkaError:
        pass
