"""RecordBatch v2 views: header fields, validation, in-place patches.

Layout (Kafka implementation docs, "Record Batch"):

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordsCount int32 | records...

The CRC32C covers attributes..end, so baseOffset and partitionLeaderEpoch can be patched in
place without recomputing it. Everything here is per batch; records are only decoded for the
features that need them (compaction, and the produce path's rare repairs: a batch whose
maxTimestamp is impossible, a batch to recompress for the topic's compression.type, a batch whose
timestamps break the topic's limits).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import crc32c

from kafkacompat.wire import compression
from kafkacompat.wire.errors import ErrorCode, KafkaError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
CURRENT_MAGIC = 2
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


@dataclass(slots=True)
class BatchHeader:
    """The fixed header of one RecordBatch v2, plus where it sits in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes this batch takes on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: memoryview | bytes | bytearray, pos: int = 0) -> BatchHeader:
    """Read the batch header at ``pos``; the caller has checked HEADER_SIZE bytes are there."""
    return BatchHeader(pos, *_HEADER.unpack_from(buf, pos))


def peek_batch_size(buf: memoryview | bytes | bytearray, pos: int = 0) -> int:
    """Total size of the batch at ``pos`` from its length field (needs 12 bytes)."""
    return struct.unpack_from(">i", buf, pos + 8)[0] + LOG_OVERHEAD


def crc_ok(buf: memoryview | bytes | bytearray, header: BatchHeader) -> bool:
    start = header.position + ATTRIBUTES_OFFSET
    end = header.position + header.size
    return crc32c.crc32c(memoryview(buf)[start:end]) == header.crc


def validate_batches(records: memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Check a produce request's records blob batch by batch.

    Raises KafkaError with the code Kafka's broker returns: CORRUPT_MESSAGE for bad framing or
    CRC, UNSUPPORTED_FOR_MESSAGE_FORMAT for magic other than 2, MESSAGE_TOO_LARGE for a batch
    over the partition's max.message.bytes, INVALID_RECORD for an empty batch.
    """
    total = len(records)
    if total == 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request carried no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        if total - pos < MAGIC_OFFSET + 1:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "truncated record batch header")
        magic = records[pos + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"record batch magic {magic} is not supported; only magic 2 (Kafka 0.11+) is",
            )
        if total - pos < HEADER_SIZE:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "truncated record batch header")
        header = read_header(records, pos)
        size = header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch length {header.batch_length} is too small")
        if size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}",
            )
        if pos + size > total:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch runs past the end of the request")
        if not crc_ok(records, header):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC32C does not match its contents")
        if header.records_count <= 0 or header.last_offset_delta < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "record batch holds no records")
        headers.append(header)
        pos += size
    return headers


ZSTD = 4
ZSTD_SINCE_PRODUCE_VERSION = 7


def validate_produce_records(records: memoryview, produce_version: int, max_batch_bytes: int) -> list[BatchHeader]:
    """Kafka's rules for the records of one partition in a Produce request (v3+).

    Exactly one magic-2 batch (INVALID_RECORD otherwise, as ProduceRequest.validateRecords),
    no zstd before Produce v7 (UNSUPPORTED_COMPRESSION_TYPE), then the per-batch checks of
    validate_batches (size, CRC).
    """
    if len(records) <= MAGIC_OFFSET:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {produce_version} must have at least one record batch per partition",
        )
    if records[MAGIC_OFFSET] != CURRENT_MAGIC:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {produce_version} are only allowed to contain record batches "
            "with magic version 2",
        )
    headers = validate_batches(records, max_batch_bytes)
    if produce_version < ZSTD_SINCE_PRODUCE_VERSION and headers[0].compression == ZSTD:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {produce_version} are not allowed to use ZStandard compression",
        )
    if len(headers) > 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {produce_version} are only allowed to contain exactly one record "
            "batch per partition",
        )
    return headers


def iter_batches(buf: memoryview | bytes | bytearray, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
    """Yield headers of the complete batches in buf[start:end]; stop at a torn tail."""
    if end is None:
        end = len(buf)
    pos = start
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield header
        pos += header.size


def patch_base_offset(buf: memoryview | bytearray, header: BatchHeader, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, header.position, base_offset)
    header.base_offset = base_offset


def patch_leader_epoch(buf: memoryview | bytearray, header: BatchHeader, leader_epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buf, header.position + 12, leader_epoch)
    header.partition_leader_epoch = leader_epoch


def set_log_append_time(buf: memoryview | bytearray, header: BatchHeader, timestamp_ms: int) -> None:
    """Stamp LogAppendTime: maxTimestamp and the timestamp-type bit change, so the CRC is redone."""
    pos = header.position
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, attributes)
    header.attributes = attributes
    set_max_timestamp(buf, header, timestamp_ms)


def set_max_timestamp(buf: memoryview | bytearray, header: BatchHeader, timestamp_ms: int) -> None:
    pos = header.position
    _MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + header.size])
    _CRC.pack_into(buf, pos + CRC_OFFSET, crc)
    header.max_timestamp = timestamp_ms
    header.crc = crc


def has_impossible_max_timestamp(header: BatchHeader) -> bool:
    """A CreateTime batch whose maxTimestamp is below its baseTimestamp (the first record's):
    no correct producer writes that; Sarama before 1.27 leaves it at -1."""
    return header.max_timestamp < header.base_timestamp and not header.attributes & TIMESTAMP_TYPE_MASK


def recompute_max_timestamp(buf: memoryview | bytearray, header: BatchHeader) -> int:
    """Kafka's LogValidator for a CreateTime batch: maxTimestamp is the largest record timestamp.
    Reads the records' timestamp deltas (decompressing if needed), patches the header in place
    and recomputes the CRC; returns the new max timestamp. Raises ValueError (or the codec's
    error) if the records do not decode. Only for batches that need it: it is per record."""
    timestamp = header.base_timestamp + max_timestamp_delta(batch_body(buf, header), header.records_count)
    set_max_timestamp(buf, header, timestamp)
    return timestamp


def max_timestamp_delta(body: bytes, records_count: int) -> int:
    """The largest timestampDelta among the first ``records_count`` records of a (decompressed)
    records section; only each record's length, attributes and delta are read."""
    best = None
    position = 0
    try:
        for _ in range(records_count):
            length, position = read_varint(body, position)
            end = position + length
            delta, after = read_varint(body, position + 1)  # after the record's attributes byte
            if length <= 0 or after > end:
                raise ValueError("record runs past its length")
            if best is None or delta > best:
                best = delta
            position = end
    except IndexError:
        raise ValueError("truncated record in a record batch") from None
    if best is None or position > len(body):
        raise ValueError("truncated record in a record batch")
    return best


def recompress_batch(buf: bytes | memoryview | bytearray, header: BatchHeader, codec: int,
                     level: int | None = None) -> bytearray:
    """The batch at ``header`` rewritten with ``codec`` (0: uncompressed), as Kafka's LogValidator
    rebuilds a batch for the topic's compression.type: the records section is decompressed and
    compressed again, so every record keeps its offset delta, timestamp delta, key, value and
    headers byte for byte; the header keeps base offset, last offset delta, leader epoch, base
    timestamp, producer id/epoch, base sequence, record count and every attribute but the codec;
    length and CRC are new. An impossible CreateTime maxTimestamp (see
    has_impossible_max_timestamp) is recomputed from the records on the way. Raises ValueError or
    the codec's error when the batch does not decompress."""
    body = batch_body(buf, header)
    max_timestamp = header.max_timestamp
    if has_impossible_max_timestamp(header):
        max_timestamp = header.base_timestamp + max_timestamp_delta(body, header.records_count)
    payload = compress(codec, body, level) if codec else body
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    return _sealed_batch(header, attributes, header.base_timestamp, max_timestamp, header.records_count, payload)


def timestamp_errors(buf: bytes | memoryview | bytearray, header: BatchHeader, low: int,
                     high: int) -> list[tuple[int, str]]:
    """Kafka's CreateTime rule (message.timestamp.before.max.ms / after.max.ms): every record
    timestamp must lie in [low, high] (-1, no timestamp, always passes). Per batch: the header's
    base and max timestamps decide; only a batch where one of them is outside has its records
    decoded, to name each record outside as Kafka does: (index in the batch, message). A record
    below its batch's base timestamp (a negative delta, which no known client writes) is not
    checked on its own."""
    base, top = header.base_timestamp, header.max_timestamp
    if (base == NO_TIMESTAMP or low <= base <= high) and (top == NO_TIMESTAMP or low <= top <= high):
        return []
    errors = []
    for index, span in enumerate(record_spans(buf, header)[1]):
        timestamp = base + span[1]
        if timestamp != NO_TIMESTAMP and not low <= timestamp <= high:
            errors.append((index, f"Timestamp {timestamp} of message with offset {header.base_offset + span[0]} "
                                  f"is out of range. The timestamp should be within [{low}, {high}]"))
    return errors


# ---- records inside a batch (compaction and compacted-topic validation only) -----------------

DELETE_HORIZON_FLAG = 0x40  # KIP-534: baseTimestamp holds the delete horizon of the batch's tombstones


@dataclass(slots=True)
class Record:
    """One record of a RecordBatch v2, enough to filter it and write it again unchanged.

    ``timestamp`` is baseTimestamp + timestampDelta (for a LogAppendTime batch, clients report the
    batch's maxTimestamp instead). ``tail`` is the encoded key, value and headers, copied verbatim
    when the record is written again.
    """

    offset: int
    timestamp: int
    attributes: int
    key: bytes | None
    has_value: bool
    tail: bytes


def decompress(codec: int, data: bytes) -> bytes:
    return compression.decompress(codec, data)


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` in Kafka's framings (wire/compression.py)."""
    return compression.compress(codec, data, level)


def read_varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """A zigzag varint/varlong at ``position``: (value, position after it)."""
    byte = data[position]
    if byte < 0x80:  # one byte: most lengths and deltas
        return (byte >> 1) ^ -(byte & 1), position + 1
    shift = result = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def write_varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def batch_body(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The records section of one batch (``header.position`` within ``batch``), decompressed."""
    start = header.position + HEADER_SIZE
    body = bytes(memoryview(batch)[start:header.position + header.size])
    if header.compression:
        return decompress(header.compression, body)
    return body


RecordSpan = tuple[int, int, int, "bytes | None", bool, int, int]


def record_spans(batch: bytes | memoryview, header: BatchHeader) -> tuple[bytes, list[RecordSpan]]:
    """The batch's records section (decompressed) and, per record, (offset delta, timestamp delta,
    attributes, key, has value, start of the key, end of the record): the cheap way to look at every
    key. Raises ValueError if the records do not parse."""
    body = batch_body(batch, header)
    spans: list[RecordSpan] = []
    append = spans.append
    position = 0
    try:
        for _ in range(header.records_count):
            byte = body[position]
            if byte < 0x80:
                length, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                length, position = read_varint(body, position)
            end = position + length
            attributes = body[position]
            timestamp_delta, position = read_varint(body, position + 1)
            byte = body[position]
            if byte < 0x80:
                offset_delta, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                offset_delta, position = read_varint(body, position)
            tail_start = position
            byte = body[position]
            if byte < 0x80:
                key_length, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                key_length, position = read_varint(body, position)
            key = None
            if key_length >= 0:
                key = body[position:position + key_length]
                position += key_length
            byte = body[position]
            has_value = byte != 1  # zigzag(-1) is 1: a null value
            if position >= end or end > len(body):
                raise ValueError("record runs past its length")
            append((offset_delta, timestamp_delta, attributes, key, has_value, tail_start, end))
            position = end
    except IndexError:
        raise ValueError("truncated record in a record batch") from None
    return body, spans


def span_record(body: bytes, header: BatchHeader, span: RecordSpan) -> Record:
    offset_delta, timestamp_delta, attributes, key, has_value, tail_start, end = span
    return Record(header.base_offset + offset_delta, header.base_timestamp + timestamp_delta, attributes, key,
                  has_value, body[tail_start:end])


def iter_records(batch: bytes | memoryview, header: BatchHeader) -> Iterator[Record]:
    """Decode the records of one batch. Raises ValueError if they do not parse."""
    body, spans = record_spans(batch, header)
    for span in spans:
        yield span_record(body, header, span)


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    body = (bytes((record.attributes,)) + write_varint(record.timestamp - base_timestamp)
            + write_varint(record.offset - base_offset) + record.tail)
    return write_varint(len(body)) + body


def build_batch(template: BatchHeader, records: list[Record], *, attributes: int, base_timestamp: int,
                max_timestamp: int) -> bytes:
    """A batch with ``template``'s base offset, last offset delta, leader epoch and producer fields
    holding ``records`` (compressed with the codec in ``attributes``), CRC computed."""
    body = b"".join(encode_record(record, template.base_offset, base_timestamp) for record in records)
    codec = attributes & COMPRESSION_MASK
    if codec and records:
        body = compress(codec, body)
    return bytes(_sealed_batch(template, attributes, base_timestamp, max_timestamp, len(records), body))


def _sealed_batch(template: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int,
                  records_count: int, payload: bytes) -> bytearray:
    """A batch header from ``template`` (base offset, last offset delta, leader epoch, producer
    fields) and the given fields, followed by ``payload``, with its length and CRC."""
    batch = bytearray(HEADER_SIZE) + payload
    _HEADER.pack_into(batch, 0, template.base_offset, len(batch) - LOG_OVERHEAD, template.partition_leader_epoch,
                      CURRENT_MAGIC, 0, attributes, template.last_offset_delta, base_timestamp, max_timestamp,
                      template.producer_id, template.producer_epoch, template.base_sequence, records_count)
    _CRC.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return batch


def require_record_keys(records: memoryview, headers: list[BatchHeader], partition: str) -> None:
    """Kafka's rule for compacted topics: every record needs a key, else INVALID_RECORD."""
    for header in headers:
        if header.is_control:
            continue
        try:
            keyless = any(span[3] is None for span in record_spans(records, header)[1])
        except Exception as error:  # noqa: BLE001 - a malformed or undecompressable batch
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch does not decode: {error}") from None
        if keyless:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"Compacted topic cannot accept message without key in topic partition {partition}.")


# ---- building a new batch -------------------------------------------------------------------


def _length_prefixed(data: bytes | None) -> bytes:
    return write_varint(-1) if data is None else write_varint(len(data)) + data


def new_batch(entries: list[tuple[int, bytes | None, bytes | None]], codec: int = 0, *,
              transactional_producer: tuple[int, int] | None = None) -> bytearray:
    """One RecordBatch v2 of (timestamp, key, value) records without headers at offsets
    0..n-1 (the log assigns the real ones and the leader epoch), no producer id (or, with
    ``transactional_producer`` (id, epoch), a transactional batch of that producer without a
    sequence, as a coordinator writes it), the records compressed with ``codec``, CRC computed.
    ``entries`` must not be empty."""
    base_timestamp = entries[0][0]
    body = b"".join(
        encode_record(Record(offset, timestamp, 0, key, value is not None,
                             _length_prefixed(key) + _length_prefixed(value) + b"\x00"), 0, base_timestamp)
        for offset, (timestamp, key, value) in enumerate(entries)
    )
    if codec:
        body = compress(codec, body)
    producer_id, producer_epoch = transactional_producer or (-1, -1)
    template = BatchHeader(0, 0, 0, 0, CURRENT_MAGIC, 0, 0, len(entries) - 1, base_timestamp, base_timestamp,
                           producer_id, producer_epoch, -1, len(entries))
    attributes = codec | (TRANSACTIONAL_FLAG if transactional_producer is not None else 0)
    return _sealed_batch(template, attributes, base_timestamp, max(e[0] for e in entries), len(entries), body)


def record_value(record: Record) -> bytes | None:
    """A record's value, read from its tail (key, value, headers)."""
    key_length, position = read_varint(record.tail, 0)
    value_length, position = read_varint(record.tail, position + max(key_length, 0))
    return None if value_length < 0 else bytes(record.tail[position:position + value_length])


# ---- transaction markers (control batches) ---------------------------------------------------

CONTROL_ABORT = 0  # Kafka's ControlRecordType
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # EndTransactionMarker: version 0, coordinator epoch


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The one record of a COMMIT/ABORT control batch."""

    committed: bool
    coordinator_epoch: int


def new_marker_batch(producer_id: int, producer_epoch: int, marker: TxnMarker, timestamp_ms: int) -> bytearray:
    """A control batch holding one end-transaction marker, as Kafka's
    MemoryRecords.withEndTransactionMarker builds it: uncompressed, transactional and control
    attributes, the producer's id and epoch, no sequence; the log assigns offset and leader epoch."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if marker.committed else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, marker.coordinator_epoch)
    record = Record(0, timestamp_ms, 0, key, True, _length_prefixed(key) + _length_prefixed(value) + b"\x00")
    template = BatchHeader(0, 0, 0, 0, CURRENT_MAGIC, 0, 0, 0, timestamp_ms, timestamp_ms,
                           producer_id, producer_epoch, -1, 1)
    return _sealed_batch(template, TRANSACTIONAL_FLAG | CONTROL_FLAG, timestamp_ms, timestamp_ms, 1,
                         encode_record(record, 0, timestamp_ms))


def read_txn_marker(batch: bytes | memoryview | bytearray, header: BatchHeader) -> TxnMarker | None:
    """The marker of a control batch (``header.position`` within ``batch``); None for an empty
    control batch (the cleaner emptied it), a control type other than COMMIT/ABORT, or bytes that
    do not parse (Kafka skips unknown control types too)."""
    try:
        for record in iter_records(batch, header):
            if record.key is None or len(record.key) < _CONTROL_KEY.size:
                return None
            _, control_type = _CONTROL_KEY.unpack_from(record.key, 0)
            if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
                return None
            value = record_value(record)
            if value is None or len(value) < _MARKER_VALUE.size:
                return None
            return TxnMarker(control_type == CONTROL_COMMIT, _MARKER_VALUE.unpack_from(value, 0)[1])
    except ValueError:
        return None
    return None
