"""Down-conversion of the log's record batches to legacy message sets for Fetch v0-3.

Kafka 3.x stores only RecordBatch v2 (magic 2). Consumers that fetch with v0/v1 can read only
magic 0 messages, v2/v3 only magic 0 or 1, so Kafka converts what it read for them
(KafkaApis.maybeConvertFetchedData -> LazyDownConversionRecords -> RecordsUtil.downConvert). This
module does the same conversion, batch by batch, with Kafka's rules:

- an uncompressed batch becomes one message per record, each with its absolute offset; records
  below the fetch offset are left out (a legacy uncompressed message set has no batches, so
  there is nothing to hold them together);
- a compressed batch becomes one wrapper message with the same codec holding every record of
  the batch (also those below the fetch offset: clients skip them, as for v2). Inner offsets are
  absolute for magic 0 and relative to the first record for magic 1; the wrapper carries the last
  record's offset and, for magic 1, the batch's timestamp type and its LogAppendTime or the
  largest record timestamp;
- magic 1 messages carry the record timestamp (a LogAppendTime batch's for all its records) and
  the batch's timestamp type; magic 0 has neither;
- headers, producer id/epoch/sequence and the transactional flag have no place in a legacy message
  and are dropped; control batches (transaction markers) are skipped;
- zstd cannot be represented below magic 2 (KIP-110): UNSUPPORTED_COMPRESSION_TYPE when nothing
  was converted before it, else the conversion stops there and the client gets the error when it
  fetches again at that batch (LazyDownConversionRecordsSend).

Per-record work, but only for old consumers: the Fetch v4+ path never comes here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    decompress,
    read_header,
    read_varint,
)

__all__ = ["OVERFLOW_MARKER", "down_convert", "fetch_magic"]

NO_TIMESTAMP = -1
ZSTD = 4
LEGACY_TIMESTAMP_TYPE = 0x08  # attribute bit of magic 1 messages: LogAppendTime
# Kafka's LazyDownConversionRecordsSend.buildOverflowBatch for 12 bytes: offset -1 and a length
# (RECORD_BATCH_OVERHEAD) past the end of the response. Old clients take it for a message larger
# than their fetch size (kafka-python raises RecordTooLargeError, Sarama doubles its fetch size).
OVERFLOW_MARKER = struct.pack(">qi", -1, 61)

_ENTRY = struct.Struct(">qiI")  # offset, message size, crc
_HEAD_V0 = struct.Struct(">bb")  # magic, attributes
_HEAD_V1 = struct.Struct(">bbq")  # magic, attributes, timestamp
_LENGTH = struct.Struct(">i")
_ENTRY_PREFIX = struct.Struct(">qi")  # offset, size: the 12 bytes every format starts with
_NULL = b"\xff\xff\xff\xff"

Record = tuple[int, int, "bytes | None", "bytes | None"]  # offset, timestamp, key, value


def fetch_magic(fetch_version: int) -> int:
    """The newest message format a Fetch version can carry below v4 (0 for v0-1, 1 for v2-3)."""
    return 0 if fetch_version <= 1 else 1


def down_convert(data: bytes | bytearray | memoryview, to_magic: int, first_offset: int, size_limit: int) -> bytes:
    """Legacy messages of magic ``to_magic`` (0 or 1) for the whole batches in ``data``.

    The first batch that converts to anything is returned whole; later messages (wrappers of
    compressed batches, or single messages) only while the total stays within
    max(``size_limit``, that first batch's converted size), the bytes Kafka sends for converted
    records (LazyDownConversionRecords.sizeInBytes; it cuts the last message, this stops before
    it, which the client treats the same). Returns b"" when nothing converts (control batches
    only). Raises KafkaError UNSUPPORTED_COMPRESSION_TYPE when the first batch to convert is zstd,
    CORRUPT_MESSAGE when it does not decode.
    """
    out = bytearray()
    limit = -1  # set once the first batch has converted
    view = memoryview(data)
    pos, end = 0, len(view)
    while end - pos >= LOG_OVERHEAD + 5:
        size = _ENTRY_PREFIX.unpack_from(view, pos)[1] + LOG_OVERHEAD
        if size <= MAGIC_OFFSET or pos + size > end or view[pos + MAGIC_OFFSET] > 2:
            break  # too short to hold its magic byte, a torn tail or garbage: whole batches only
        try:
            entries = _convert_entry(view[pos:pos + size], to_magic, first_offset)
        except _CannotConvert as problem:
            if limit < 0:
                raise KafkaError(problem.code, problem.message) from None
            break
        pos += size
        if not entries:
            continue
        if limit < 0:
            for entry in entries:
                out += entry
            limit = max(size_limit, len(out))
            continue
        for entry in entries:
            if len(out) + len(entry) > limit:
                return bytes(out)
            out += entry
    return bytes(out)


class _CannotConvert(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _convert_entry(batch: memoryview, to_magic: int, first_offset: int) -> list[bytes]:
    """The top-level legacy messages for one stored batch (or legacy message)."""
    magic = batch[MAGIC_OFFSET]
    if magic <= to_magic:
        return [bytes(batch)]  # already readable (a legacy message in an old log)
    if magic < 2:
        return _convert_legacy(batch, to_magic, first_offset)
    if len(batch) < HEADER_SIZE:
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, "truncated record batch header")
    header = read_header(batch)
    if header.attributes & CONTROL_FLAG:
        return []
    codec = header.attributes & COMPRESSION_MASK
    if codec == ZSTD:
        raise _CannotConvert(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                             "Down-conversion of zstandard-compressed batches is not supported")
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    try:
        body = bytes(batch[HEADER_SIZE:])
        if codec:
            body = decompress(codec, body)
        records = _v2_records(body, header.records_count, header.base_offset, header.base_timestamp,
                              log_append_time)
    except Exception as error:  # noqa: BLE001 - the codec libraries raise assorted errors for bad bytes
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, f"record batch at offset {header.base_offset} "
                             f"does not decode: {error}") from None
    return _messages(records, to_magic, codec, log_append_time, first_offset)


def _convert_legacy(batch: memoryview, to_magic: int, first_offset: int) -> list[bytes]:
    """A magic 1 message (or wrapper) for a magic 0 reader, read with kafka-python's legacy reader."""
    from kafka.record.legacy_records import LegacyRecordBatch

    try:
        legacy = LegacyRecordBatch(bytes(batch), batch[MAGIC_OFFSET])
        log_append_time = legacy._timestamp if legacy.timestamp_type == 1 else None  # noqa: SLF001
        records = [(r.offset, r.timestamp, r.key, r.value) for r in legacy]
        codec = legacy.compression_type
    except Exception as error:  # noqa: BLE001 - kafka-python raises assorted errors for bad bytes
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, f"legacy message does not decode: {error}") from None
    return _messages(records, to_magic, codec, log_append_time, first_offset)


def _v2_records(body: bytes, count: int, base_offset: int, base_timestamp: int,
                log_append_time: int | None) -> list[Record]:
    """(offset, timestamp, key, value) of the records in a v2 batch's (decompressed) records section."""
    records = []
    append = records.append
    position = 0
    for _ in range(count):
        length, position = read_varint(body, position)
        end = position + length
        if length < 6 or end > len(body):
            raise ValueError("record runs past the end of its batch")
        timestamp_delta, position = read_varint(body, position + 1)  # after the attributes byte
        offset_delta, position = read_varint(body, position)
        key_length, position = read_varint(body, position)
        key = None
        if key_length >= 0:
            key = body[position:position + key_length]
            position += key_length
        value_length, position = read_varint(body, position)
        value = None
        if value_length >= 0:
            value = body[position:position + value_length]
            position += value_length
        if position > end:
            raise ValueError("record fields run past the record's length")
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        append((base_offset + offset_delta, timestamp, key, value))
        position = end  # headers: not representable below magic 2
    return records


def _messages(records: Iterable[Record], to_magic: int, codec: int, log_append_time: int | None,
              first_offset: int) -> list[bytes]:
    timestamp_type = LEGACY_TIMESTAMP_TYPE if to_magic and log_append_time is not None else 0
    if not codec:
        return [_message(offset, to_magic, timestamp_type, timestamp, key, value)
                for offset, timestamp, key, value in records if offset >= first_offset]
    records = list(records)
    if not records:
        return []
    base = records[0][0] if to_magic else 0  # magic 1 wrappers hold offsets relative to the first
    inner = b"".join(_message(offset - base, to_magic, timestamp_type, timestamp, key, value)
                     for offset, timestamp, key, value in records)
    if log_append_time is not None:
        wrapper_timestamp = log_append_time
    else:
        wrapper_timestamp = max(NO_TIMESTAMP, *(record[1] for record in records))
    return [_message(records[-1][0], to_magic, codec | timestamp_type, wrapper_timestamp, None,
                     _compress(codec, inner, to_magic))]


def _message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
             value: bytes | None) -> bytes:
    """One legacy message with its offset and size: offset, size, crc32(magic..), magic,
    attributes, timestamp (magic 1), key, value."""
    head = _HEAD_V1.pack(1, attributes, timestamp) if magic else _HEAD_V0.pack(0, attributes)
    rest = b"".join((
        head,
        _NULL if key is None else _LENGTH.pack(len(key)),
        b"" if key is None else key,
        _NULL if value is None else _LENGTH.pack(len(value)),
        b"" if value is None else value,
    ))
    return _ENTRY.pack(offset, len(rest) + 4, zlib.crc32(rest)) + rest


def _compress(codec: int, data: bytes, magic: int) -> bytes:
    """The codecs' legacy framings, as Kafka's MemoryRecordsBuilder writes them: gzip, xerial
    snappy, and LZ4 frames with independent blocks (magic 0 with the header checksum Kafka 0.8-0.9
    computed over the magic bytes too, KIP-57)."""
    from kafka import codec as codecs

    try:
        if codec == 1:
            return codecs.gzip_encode(data, compresslevel=6)
        if codec == 2:
            return codecs.snappy_encode(data)
        if codec == 3:
            return codecs.lz4_encode_old_kafka(data) if magic == 0 else codecs.lz4_encode(data)
    except Exception as error:  # noqa: BLE001 - a codec library missing on this machine
        raise _CannotConvert(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot compress with codec {codec}: {error}") from None
    raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, f"unknown compression codec {codec}")
