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

Lazily, as Kafka's LazyDownConversionRecords / LazyDownConversionRecordsSend: the response
promises ``down_converted_size`` bytes per partition (the stored bytes read, or the first batch's
converted size when larger), then ``stream_down_converted`` converts a piece of the stored bytes
at a time while the connection sends, cutting the converted messages at that size (the client
treats the cut message as partial) or filling up with Kafka's overflow batch when they end
before it. A response is never held converted in memory as a whole.

Per-record work, but only for old consumers: the Fetch v4+ path never comes here. Sans-IO: the
stored bytes come from a ``read(position, length)`` callable.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator

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

__all__ = [
    "OVERFLOW_MARKER", "READ_SIZE", "down_convert", "down_converted_size", "fetch_magic", "stored_pieces",
    "stream_down_converted",
]

NO_TIMESTAMP = -1
ZSTD = 4
LEGACY_TIMESTAMP_TYPE = 0x08  # attribute bit of magic 1 messages: LogAppendTime
RECORD_BATCH_OVERHEAD = 61
# Kafka's LazyDownConversionRecordsSend.buildOverflowBatch for 12 bytes: offset -1 and a length
# (RECORD_BATCH_OVERHEAD) past the end of the response. Old clients take it for a message larger
# than their fetch size (kafka-python raises RecordTooLargeError, Sarama doubles its fetch size).
OVERFLOW_MARKER = struct.pack(">qi", -1, RECORD_BATCH_OVERHEAD)
# Stored bytes converted per piece (whole batches; a larger batch is a piece alone), and the
# converted bytes a piece holds before it is handed over. Kafka converts 128 KiB at a time; half
# of it keeps each step of the event loop short (conversion is per record, in Python).
READ_SIZE = 64 * 1024
_PIECE_BYTES = 64 * 1024
_OVERFLOW_PIECE = 128 * 1024  # Kafka's MAX_READ_SIZE: the overflow batch's largest buffer

_ENTRY = struct.Struct(">qiI")  # offset, message size, crc
_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, message size, crc, magic, attributes
_HEAD_V0 = struct.Struct(">bb")  # magic, attributes
_HEAD_V1 = struct.Struct(">bbq")  # magic, attributes, timestamp
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_ENTRY_PREFIX = struct.Struct(">qi")  # offset, size: the 12 bytes every format starts with
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)  # magic, version 1, compatible version 1
_XERIAL_BLOCK = 32 * 1024
_NULL = b"\xff\xff\xff\xff"

Record = tuple[int, int, "bytes | None", "bytes | None"]  # offset, timestamp, key, value
Reader = Callable[[int, int], bytes]  # (position, length) -> the stored bytes there (fewer at the end)
Buffer = bytes | bytearray | memoryview


def fetch_magic(fetch_version: int) -> int:
    """The newest message format a Fetch version can carry below v4 (0 for v0-1, 1 for v2-3)."""
    return 0 if fetch_version <= 1 else 1


def stored_pieces(read: Reader, length: int, piece_size: int = READ_SIZE) -> Iterator[memoryview]:
    """The stored bytes [0, ``length``) in pieces of whole batches: as many as fit in
    ``piece_size``, or one larger batch alone. Ends at a torn tail or garbage."""
    position = 0
    while length - position > MAGIC_OFFSET:
        data = memoryview(read(position, min(max(piece_size, MAGIC_OFFSET + 1), length - position)))
        whole = _whole_entries(data)
        if not whole:
            size = _entry_size(data, 0)
            if size is None or position + size > length:
                return
            data = memoryview(read(position, size))
            if len(data) < size:
                return  # the file was cut under us: what is left converts to nothing
            whole = size
        yield data[:whole]
        position += whole


def down_converted_size(pieces: Iterable[Buffer], to_magic: int, first_offset: int, stored_size: int) -> int:
    """The bytes a partition's converted records take in the response (Kafka's
    LazyDownConversionRecords.sizeInBytes): the stored bytes read, or the first batch that converts
    to anything when its messages are larger (it goes out whole); 0 when nothing converts (control
    batches only). Raises KafkaError UNSUPPORTED_COMPRESSION_TYPE when that first batch is zstd,
    CORRUPT_MESSAGE when it does not decode. Keeps nothing: the messages are only counted."""
    try:
        for messages in _converted_entries(pieces, to_magic, first_offset):
            converted = sum(len(message) for message in messages)
            if converted:
                return max(stored_size, converted)
    except _CannotConvert as problem:
        raise KafkaError(problem.code, problem.message) from None
    return 0


def stream_down_converted(pieces: Iterable[Buffer], to_magic: int, first_offset: int, size: int) -> Iterator[bytes | bytearray]:
    """Exactly ``size`` bytes (from ``down_converted_size``), a piece at a time: the converted
    messages, the one crossing ``size`` cut there, then overflow batches up to ``size`` when they
    end before it (also at a batch that cannot be converted, zstd or damaged: the client fetches
    again from there and gets the error)."""
    remaining = size
    out = bytearray()
    try:
        for messages in _converted_entries(pieces, to_magic, first_offset):
            for message in messages:
                if len(out) + len(message) >= remaining:
                    out += memoryview(message)[:remaining - len(out)]
                    yield out
                    return
                out += message
                if len(out) >= _PIECE_BYTES:
                    remaining -= len(out)
                    yield out
                    out = bytearray()
    except _CannotConvert:
        pass
    if out:
        remaining -= len(out)
        yield out
    yield from _overflow_batches(remaining)


def down_convert(data: Buffer, to_magic: int, first_offset: int, size_limit: int) -> bytes:
    """The whole converted records for the stored bytes ``data`` at once (what the streamed
    response carries for them): ``down_converted_size`` bytes of ``stream_down_converted``."""
    view = memoryview(data)

    def read(position: int, length: int) -> memoryview:
        return view[position:position + length]

    size = down_converted_size(stored_pieces(read, len(view)), to_magic, first_offset, size_limit)
    return b"".join(stream_down_converted(stored_pieces(read, len(view)), to_magic, first_offset, size))


def _overflow_batches(remaining: int) -> Iterator[bytes | bytearray]:
    """Kafka's buildOverflowBatch, written until ``remaining`` is filled: offset -1 and a length
    past the end, so the client reads no message in it."""
    while remaining > 0:
        batch = bytearray(max(LOG_OVERHEAD, min(remaining + 1, _OVERFLOW_PIECE)))
        _ENTRY_PREFIX.pack_into(batch, 0, -1, max(remaining + 1, RECORD_BATCH_OVERHEAD))
        piece = batch[:remaining] if len(batch) > remaining else batch
        remaining -= len(piece)
        yield piece


def _entry_size(view: memoryview, position: int) -> int | None:
    """The size of the stored batch (or legacy message) at ``position``, None for garbage."""
    if len(view) - position <= MAGIC_OFFSET:
        return None
    size = _ENTRY_PREFIX.unpack_from(view, position)[1] + LOG_OVERHEAD
    if size <= LOG_OVERHEAD or view[position + MAGIC_OFFSET] > 2:
        return None
    return size


def _whole_entries(view: memoryview) -> int:
    """How many leading bytes of ``view`` are whole batches."""
    position = 0
    while (size := _entry_size(view, position)) is not None and position + size <= len(view):
        position += size
    return position


def _converted_entries(pieces: Iterable[Buffer], to_magic: int, first_offset: int) -> Iterator[Iterable[bytes]]:
    """The legacy messages of each stored batch, in order (none for a control batch)."""
    for piece in pieces:
        view = memoryview(piece)
        position = 0
        while (size := _entry_size(view, position)) is not None and position + size <= len(view):
            yield _convert_entry(view[position:position + size], to_magic, first_offset)
            position += size


class _CannotConvert(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _convert_entry(batch: memoryview, to_magic: int, first_offset: int) -> Iterable[bytes]:
    """The top-level legacy messages for one stored batch (or legacy message). An uncompressed
    batch's come one record at a time (a large batch is never converted whole in memory)."""
    magic = batch[MAGIC_OFFSET]
    if magic <= to_magic:
        return (bytes(batch),)  # already readable (a legacy message in an old log)
    if magic < 2:
        return _convert_legacy(batch, to_magic, first_offset)
    if len(batch) < HEADER_SIZE:
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, "truncated record batch header")
    header = read_header(batch)
    if header.attributes & CONTROL_FLAG:
        return ()
    codec = header.attributes & COMPRESSION_MASK
    if codec == ZSTD:
        raise _CannotConvert(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                             "Down-conversion of zstandard-compressed batches is not supported")
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    timestamp_type = LEGACY_TIMESTAMP_TYPE if to_magic and log_append_time is not None else 0
    body = batch[HEADER_SIZE:]
    if not codec:  # read in place: keys and values are views of the stored batch until written out
        records = _v2_records(body, header.records_count, header.base_offset, header.base_timestamp, log_append_time)
        return _single_messages(records, to_magic, timestamp_type, first_offset, header.base_offset)
    try:
        records = list(_v2_records(decompress(codec, bytes(body)), header.records_count, header.base_offset,
                                   header.base_timestamp, log_append_time))
    except Exception as error:  # noqa: BLE001 - the codec libraries raise assorted errors for bad bytes
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, f"record batch at offset {header.base_offset} "
                             f"does not decode: {error}") from None
    return _wrapped(records, to_magic, codec, timestamp_type, log_append_time)


def _single_messages(records: Iterator[Record], to_magic: int, timestamp_type: int, first_offset: int,
                     base_offset: int) -> Iterator[bytes]:
    try:
        for offset, timestamp, key, value in records:
            if offset >= first_offset:
                yield _message(offset, to_magic, timestamp_type, timestamp, key, value)
    except ValueError as error:
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE,
                             f"record batch at offset {base_offset} does not decode: {error}") from None


def _convert_legacy(entry: memoryview, to_magic: int, first_offset: int) -> Iterable[bytes]:
    """A magic 1 message (or wrapper) for a magic 0 reader."""
    try:
        codec, log_append_time, records = _legacy_records(entry)
    except Exception as error:  # noqa: BLE001 - bad lengths, bad compressed bytes
        raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, f"legacy message does not decode: {error}") from None
    timestamp_type = LEGACY_TIMESTAMP_TYPE if to_magic and log_append_time is not None else 0
    if not codec:
        return [_message(offset, to_magic, timestamp_type, timestamp, key, value)
                for offset, timestamp, key, value in records if offset >= first_offset]
    return _wrapped(records, to_magic, codec, timestamp_type, log_append_time)


def _legacy_records(entry: memoryview) -> tuple[int, int | None, list[Record]]:
    """(codec, LogAppendTime or None, records) of a legacy message: itself, or a wrapper's inner
    messages with absolute offsets (magic 1 inner offsets count from the wrapper's last)."""
    offset, _, _, magic, attributes = _LEGACY_HEAD.unpack_from(entry)
    timestamp, key, value = _legacy_fields(entry, magic)
    codec = attributes & COMPRESSION_MASK
    log_append_time = timestamp if magic and attributes & LEGACY_TIMESTAMP_TYPE else None
    if not codec:
        return 0, log_append_time, [(offset, timestamp, key, value)]
    inner = memoryview(decompress(codec, value or b""))
    records = []
    position = 0
    while position < len(inner):
        inner_offset, size, _, inner_magic, _ = _LEGACY_HEAD.unpack_from(inner, position)
        end = position + LOG_OVERHEAD + size
        if size < 0 or end > len(inner):
            raise ValueError("an inner message runs past its wrapper")
        inner_timestamp, inner_key, inner_value = _legacy_fields(inner[position:end], inner_magic)
        records.append((inner_offset, inner_timestamp if log_append_time is None else log_append_time,
                        inner_key, inner_value))
        position = end
    if magic and records:
        base = offset - records[-1][0]
        records = [(base + inner_offset, *rest) for inner_offset, *rest in records]
    return codec, log_append_time, records


def _legacy_fields(message: memoryview, magic: int) -> tuple[int, bytes | None, bytes | None]:
    """(timestamp, key, value) of one legacy message (magic 0 has no timestamp)."""
    position = _LEGACY_HEAD.size
    timestamp = NO_TIMESTAMP
    if magic:
        timestamp = _TIMESTAMP.unpack_from(message, position)[0]
        position += _TIMESTAMP.size
    key, position = _legacy_bytes(message, position)
    value, position = _legacy_bytes(message, position)
    return timestamp, key, value


def _legacy_bytes(message: memoryview, position: int) -> tuple[bytes | None, int]:
    (length,) = _LENGTH.unpack_from(message, position)
    position += _LENGTH.size
    if length < 0:
        return None, position
    if position + length > len(message):
        raise ValueError("a key or value runs past the end of its message")
    return bytes(message[position:position + length]), position + length


def _v2_records(body: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
                log_append_time: int | None) -> Iterator[Record]:
    """(offset, timestamp, key, value) of the records in a v2 batch's (decompressed) records
    section, one at a time. Raises ValueError where they do not decode."""
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
        yield base_offset + offset_delta, timestamp, key, value
        position = end  # headers: not representable below magic 2


def _wrapped(records: list[Record], to_magic: int, codec: int, timestamp_type: int,
             log_append_time: int | None) -> list[bytes]:
    """One wrapper message with ``codec`` holding every record (a compressed batch converts whole)."""
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


def _message(offset: int, magic: int, attributes: int, timestamp: int, key: Buffer | None,
             value: Buffer | None) -> bytes:
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
    snappy, and LZ4 frames with independent 64 KiB blocks (magic 0 with the header checksum Kafka
    0.8-0.9 computed over the magic bytes too, KIP-57). Deterministic: a response's size is
    computed by converting its first batch once before it is converted again to be sent."""
    try:
        if codec == 1:
            return gzip.compress(data, compresslevel=6, mtime=0)
        if codec == 2:
            return _xerial_snappy(data)
        if codec == 3:
            return _lz4_frame(data, broken_header_checksum=magic == 0)
    except ImportError as error:  # a codec library missing on this machine
        raise _CannotConvert(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot compress with codec {codec}: {error}") from None
    raise _CannotConvert(ErrorCode.CORRUPT_MESSAGE, f"unknown compression codec {codec}")


def _xerial_snappy(data: bytes) -> bytes:
    """Snappy in xerial's SnappyOutputStream framing: a header, then (length, block) per 32 KiB."""
    import snappy

    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = snappy.compress(bytes(view[start:start + _XERIAL_BLOCK]))
        out += (_LENGTH.pack(len(block)), block)
    return b"".join(out)


def _lz4_frame(data: bytes, *, broken_header_checksum: bool) -> bytes:
    import lz4.frame

    frame = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                               content_checksum=False, store_size=False)
    if not broken_header_checksum:
        return frame
    import xxhash

    # Magic (4 bytes), FLG, BD, then the header checksum: byte 2 of xxh32 over magic, FLG and BD.
    fixed = bytearray(frame)
    fixed[6] = (xxhash.xxh32(bytes(frame[:6])).intdigest() >> 8) & 0xFF
    return bytes(fixed)
