"""Kafka's LogValidator for a client's record batches, record by record.

The batch-level checks of validate_batches (framing, size, CRC) say nothing about the records
inside; a batch whose record count lies, or whose records do not parse, would take offsets the
next batch reuses or stop every consumer at that offset. Here, per batch (LogValidator's
validateBatch): offset range and record count agree, no control batch from a client, a producer
id for the transactional bit and a sequence for a producer id, a known codec, no LogAppendTime
from a producer. Then every record (DefaultRecord.readFrom): its varint lengths (record, key,
value, header count, header key and value) stay inside it, its offset delta is its index, no
byte is left over in it or after the last record. Compressed batches are decompressed, at most
MAX_DECOMPRESSED_BYTES, and their records walked the same way.

The walk is one pass over the bytes with no per-record object: the C accelerator
(kafkacompat/wire/_validate.c, built at install time) when it is there, else the pure-Python
``scan_records_py`` below; both return the same tuple, tested against each other.
"""

from __future__ import annotations

import io
import struct
import zlib

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    set_max_timestamp,
)

# A compressed batch may expand to at most this many bytes of records. Kafka streams the records
# out of the decompressor and stops after the declared count, so a bomb of padding after the
# records or in place of them is refused (INVALID_RECORD) having read little; this broker needs
# the records section in memory, so the same refusal comes once this much has been inflated.
MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024

# Kinds scan_records reports: (kind, record index, a, b).
OK = 0
PREMATURE_EOF = 1       # the section ends inside record ``index`` (its length varint)
BAD_VARINT = 2          # a varint longer than 5 bytes (varlong: 10)
RECORD_SIZE = 3         # the record claims a bytes (a < 0 or more than the b left)
RECORD_TRUNCATED = 4    # a field runs past the record's declared length a
OFFSET_DELTA = 5        # offset delta a where the record's index was expected
HEADER_COUNT = 6        # header count a is negative or more than the b bytes left
HEADER_KEY_SIZE = 7     # header key size a is negative
RECORD_LEFTOVER = 8     # the record's fields end b bytes before its declared length a
TRAILING_BYTES = 9      # a bytes follow the last declared record
# On success: (OK, index of the first record without a key or -1, max timestamp delta, min delta).


class _Stop(Exception):
    def __init__(self, kind: int, a: int = 0, b: int = 0) -> None:
        self.kind, self.a, self.b = kind, a, b


def _varint(data, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    """A zigzag varint (5 bytes, 32 bits) or varlong (10, 64) at ``pos``, not reading at ``end``
    or past: (value, position after it). Wraps as Kafka's ByteUtils (Java int/long arithmetic)."""
    result = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise _Stop(RECORD_TRUNCATED)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            result &= (1 << bits) - 1
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise _Stop(BAD_VARINT)


def scan_records_py(data, count: int) -> tuple[int, int, int, int]:
    """Walk ``count`` records filling ``data`` (a records section, decompressed), as
    DefaultRecord.readFrom reads them. See the kinds above for the result."""
    end_all = len(data)
    position = 0
    keyless = -1
    max_delta = min_delta = 0
    index = 0
    try:
        for index in range(count):
            if position >= end_all:
                return PREMATURE_EOF, index, 0, 0
            byte = data[position]
            if byte < 0x80:
                length, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                try:
                    length, position = _varint(data, position, end_all, 5, 32)
                except _Stop as stop:
                    if stop.kind == RECORD_TRUNCATED:
                        return PREMATURE_EOF, index, 0, 0
                    raise
            if length < 0 or length > end_all - position:
                return RECORD_SIZE, index, length, end_all - position
            end = position + length
            try:
                if position >= end:
                    raise _Stop(RECORD_TRUNCATED)
                position += 1  # attributes: unused in magic 2
                delta, position = _varint(data, position, end, 10, 64)
                if index == 0:
                    max_delta = min_delta = delta
                elif delta > max_delta:
                    max_delta = delta
                elif delta < min_delta:
                    min_delta = delta
                if position < end and data[position] < 0x80:
                    byte = data[position]
                    offset_delta, position = (byte >> 1) ^ -(byte & 1), position + 1
                else:
                    offset_delta, position = _varint(data, position, end, 5, 32)
                if offset_delta != index:
                    raise _Stop(OFFSET_DELTA, offset_delta)
                for field in (0, 1):  # key, value
                    if position < end and data[position] < 0x80:
                        byte = data[position]
                        size, position = (byte >> 1) ^ -(byte & 1), position + 1
                    else:
                        size, position = _varint(data, position, end, 5, 32)
                    if size >= 0:
                        if size > end - position:
                            raise _Stop(RECORD_TRUNCATED)
                        position += size
                    elif field == 0 and keyless < 0:
                        keyless = index
                headers, position = _varint(data, position, end, 5, 32)
                if headers < 0 or headers > end - position:
                    raise _Stop(HEADER_COUNT, headers, end - position)
                for _ in range(headers):
                    size, position = _varint(data, position, end, 5, 32)
                    if size < 0:
                        raise _Stop(HEADER_KEY_SIZE, size)
                    if size > end - position:
                        raise _Stop(RECORD_TRUNCATED)
                    position += size
                    size, position = _varint(data, position, end, 5, 32)
                    if size >= 0:
                        if size > end - position:
                            raise _Stop(RECORD_TRUNCATED)
                        position += size
                if position != end:
                    raise _Stop(RECORD_LEFTOVER, length, end - position)
            except _Stop as stop:
                if stop.kind == RECORD_TRUNCATED:
                    return RECORD_TRUNCATED, index, length, 0
                raise
    except _Stop as stop:
        return stop.kind, index, stop.a, stop.b
    if position != end_all:
        return TRAILING_BYTES, count, end_all - position, 0
    return OK, keyless, max_delta, min_delta


try:
    from kafkacompat.wire._validate import scan_records  # the C accelerator, when it was built
except ImportError:  # pragma: no cover - depends on the install
    scan_records = scan_records_py

ACCELERATED = scan_records is not scan_records_py


class RecordErrors(KafkaError):
    """A batch refused for some of its records (Kafka's RecordValidationException): the answer
    carries ``record_errors`` (index in the batch, message) from Produce v8."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str | None]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def describe_scan_error(kind: int, index: int, a: int, b: int) -> str:
    """What a non-OK scan result means, in the words of Kafka's exceptions where it has some."""
    if kind == PREMATURE_EOF:
        return f"Incorrect declared batch size, premature EOF reached at record {index}"
    if kind == BAD_VARINT:
        return f"Found invalid record structure: a varint of record {index} is too long"
    if kind == RECORD_SIZE:
        return (f"Invalid record size: expected {a} bytes in record payload of record {index}, but instead the "
                f"buffer has only {b} remaining bytes.")
    if kind == RECORD_TRUNCATED:
        return f"Found invalid record structure: a field of record {index} runs past its length of {a} bytes"
    if kind == OFFSET_DELTA:
        return f"Invalid offset delta {a} of record {index} in the batch: record offset deltas must be 0, 1, 2, ..."
    if kind == HEADER_COUNT:
        return f"Found invalid number of record headers {a} in record {index}"
    if kind == HEADER_KEY_SIZE:
        return f"Invalid negative header key size {a} in record {index}"
    if kind == RECORD_LEFTOVER:
        return (f"Invalid record size: expected to read {a} bytes in record payload of record {index}, but instead "
                f"read {a - b}")
    if kind == TRAILING_BYTES:
        return f"Incorrect declared batch size, records still remaining in file ({a} bytes after record {index - 1})"
    return f"record {index} does not parse (kind {kind})"


def _invalid(message: str, partition: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, f"{message} in topic partition {partition}")


def check_batch_header(header: BatchHeader, partition: str) -> None:
    """LogValidator.validateBatch for a client's batch, and the attribute checks Kafka makes
    before reading records: INVALID_RECORD for a lying offset range or count, a control batch,
    a producer id without sequence, the transactional bit without producer id; Kafka's
    UNKNOWN_SERVER_ERROR (its CompressionType.forId throws) for codec ids 5-7."""
    base, last, count = header.base_offset, header.last_offset, header.records_count
    if header.last_offset_delta + 1 <= 0:
        raise _invalid(f"Batch has an invalid offset range: [{base}, {last}]", partition)
    if count <= 0:
        raise _invalid(f"Invalid reported count for record batch: {count}", partition)
    if header.last_offset_delta + 1 != count:
        raise _invalid(f"Inconsistent batch offset range [{base}, {last}] and count of records {count}", partition)
    if header.is_control:
        raise _invalid("Clients are not allowed to write control records", partition)
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise _invalid(f"Invalid sequence number {header.base_sequence} in record batch with producerId "
                       f"{header.producer_id}", partition)
    if header.is_transactional and header.producer_id < 0:
        raise _invalid("Transactional batch without a producer id (the producer must call InitProducerId)",
                       partition)
    if header.compression > 4:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"Unknown compression type id: {header.compression} in a record batch for topic partition "
                         f"{partition}; known ids are 0 (none), 1 (gzip), 2 (snappy), 3 (lz4), 4 (zstd)")


def validate_client_batch(records: memoryview, header: BatchHeader, partition: str, *,
                          log_append_time_topic: bool) -> int:
    """Every check above for one batch of a Produce request whose framing and CRC passed, then,
    as LogValidator does in place, the batch's maxTimestamp set to its records' largest
    timestamp (CreateTime; the CRC is redone only if it changes). Returns the index of the first
    record without a key, or -1 (for compacted topics). Raises KafkaError / RecordErrors."""
    check_batch_header(header, partition)
    section = records_section(records, header, partition)
    kind, index, a, b = scan_records(section, header.records_count)
    if kind != OK:
        message = describe_scan_error(kind, index, a, b)
        raise RecordErrors(ErrorCode.INVALID_RECORD, f"{message} in topic partition {partition}",
                           [(min(index, header.records_count - 1), message)])
    if header.is_log_append_time:
        _producer_log_append_time(records, header, partition, log_append_time_topic)
    elif not log_append_time_topic:
        real_max = max(NO_TIMESTAMP, header.base_timestamp + a)  # Kafka's maxBatchTimestamp starts at -1
        if real_max != header.max_timestamp:
            set_max_timestamp(records, header, real_max)
    return index


def _producer_log_append_time(records: memoryview, header: BatchHeader, partition: str,
                              log_append_time_topic: bool) -> None:
    """A producer that set the LogAppendTime bit. Kafka's validateTimestamp: on a LogAppendTime
    topic, or with no maxTimestamp (which such records report as theirs), every record is
    INVALID_TIMESTAMP; on a CreateTime topic the batch becomes CreateTime, keeping maxTimestamp."""
    if log_append_time_topic or header.max_timestamp == NO_TIMESTAMP:
        message = "Invalid timestamp type in message: producer should not set timestamp type to LogAppendTime."
        raise RecordErrors(ErrorCode.INVALID_TIMESTAMP,
                           "One or more records have been rejected due to invalid timestamp",
                           [(i, message) for i in range(header.records_count)])
    attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", records, header.position + ATTRIBUTES_OFFSET, attributes)
    header.attributes = attributes
    set_max_timestamp(records, header, header.max_timestamp)  # recomputes the CRC over the new attributes


def records_section(records: memoryview, header: BatchHeader, partition: str) -> memoryview | bytes | bytearray:
    """The batch's records section: a view into ``records`` when uncompressed, else the bounded
    decompression of it. Kafka answers a payload its codec cannot read with UNKNOWN_SERVER_ERROR
    (the codec's IOException surfaces as a KafkaException); one inflating past
    MAX_DECOMPRESSED_BYTES is refused as INVALID_RECORD."""
    start = header.position + HEADER_SIZE
    payload = records[start:header.position + header.size]
    codec = header.compression
    if not codec:
        return payload
    try:
        return decompress_bounded(codec, payload, MAX_DECOMPRESSED_BYTES)
    except DecompressedTooLarge:
        raise _invalid(f"Record batch decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes of records",
                       partition) from None
    except Exception as error:  # noqa: BLE001 - each codec library raises its own errors
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"Failed to decompress the {CODEC_NAMES[codec]} record batch for topic partition "
                         f"{partition}: {str(error) or type(error).__name__}") from None


CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


class DecompressedTooLarge(Exception):
    pass


def decompress_bounded(codec: int, payload, limit: int) -> bytes | bytearray:
    """``payload`` decompressed in Kafka's framings (gzip; snappy raw or xerial-framed; lz4
    frame; zstd frames), never holding more than ``limit`` bytes of output: DecompressedTooLarge
    past it; the codec's error, or ValueError, for data it cannot read or a truncated stream."""
    if codec == 1:
        return _gunzip(payload, limit)
    if codec == 2:
        return _unsnappy(payload, limit)
    if codec == 3:
        return _unlz4(payload, limit)
    if codec == 4:
        return _unzstd(payload, limit)
    raise ValueError(f"unknown compression codec {codec}")


def _first_chunk(payload) -> int:
    """How much output to ask a decompressor for first: some codecs' libraries allocate all of
    what they are allowed up front, so the allowance starts near the likely size and doubles."""
    return max(64 * 1024, 4 * len(payload))


def _gunzip(payload, limit: int) -> bytes | bytearray:
    """Like Java's GZIPInputStream: concatenated members are read, anything else after the first
    member is ignored."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = bytes(payload)
    out: bytes | bytearray = b""
    chunk = _first_chunk(payload)
    while True:
        piece = inflater.decompress(data, min(chunk, limit + 1 - len(out)))
        data = inflater.unconsumed_tail
        out = _joined(out, piece)
        if len(out) > limit:
            raise DecompressedTooLarge
        if inflater.eof:
            data = inflater.unused_data
            if data[:2] != b"\x1f\x8b":
                return out
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif not piece and not data:
            raise ValueError("truncated gzip stream")
        chunk *= 2


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _unsnappy(payload, limit: int) -> bytes | bytearray:
    import snappy

    data = bytes(payload)
    if data[:8] != _XERIAL_MAGIC:
        _check_snappy_length(data, limit)
        return snappy.decompress(data)
    out = bytearray()
    position = 16  # magic, version, compatible version
    while position < len(data):
        if position + 4 > len(data):
            raise ValueError("truncated xerial snappy block header")
        (size,) = struct.unpack_from(">i", data, position)
        position += 4
        if size < 0 or position + size > len(data):
            raise ValueError(f"xerial snappy block of {size} bytes runs past the payload")
        block = data[position:position + size]
        _check_snappy_length(block, limit - len(out))
        out += snappy.decompress(block)
        position += size
    return out


def _check_snappy_length(block: bytes, limit: int) -> None:
    """A raw snappy block starts with its uncompressed length (an unsigned varint): refuse it
    before the library allocates that much."""
    length = shift = 0
    for position in range(min(len(block), 5)):
        byte = block[position]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if length > limit:
                raise DecompressedTooLarge
            return
        shift += 7
    raise ValueError("invalid snappy block length")


def _unlz4(payload, limit: int) -> bytes | bytearray:
    import lz4.frame

    decompressor = lz4.frame.LZ4FrameDecompressor()
    data = bytes(payload)
    out: bytes | bytearray = b""
    chunk = _first_chunk(payload)
    while True:
        piece = decompressor.decompress(data, max_length=min(chunk, limit + 1 - len(out)))
        data = b""
        out = _joined(out, piece)
        if len(out) > limit:
            raise DecompressedTooLarge
        if decompressor.eof:
            return out
        if decompressor.needs_input:
            raise ValueError("truncated lz4 frame")
        chunk *= 2


def _unzstd(payload, limit: int) -> bytes | bytearray:
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(payload)), read_across_frames=True) as reader:
        out: bytes | bytearray = b""
        chunk = _first_chunk(payload)
        while True:
            piece = reader.read(min(chunk, limit + 1 - len(out)))
            if not piece:
                return out
            out = _joined(out, piece)
            if len(out) > limit:
                raise DecompressedTooLarge
            chunk *= 2


def _joined(out: bytes | bytearray, piece: bytes) -> bytes | bytearray:
    """``out`` followed by ``piece``: the first piece as it came (most batches have one), then a
    bytearray grown in place."""
    if not out:
        return piece
    if isinstance(out, bytes):
        out = bytearray(out)
    out += piece
    return out
