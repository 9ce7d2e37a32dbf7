"""Produce request decoding and response encoding (versions 0-13), without copying records.

The request's records stay memoryview slices of the request body, so the broker can validate
the batches and patch baseOffset/partitionLeaderEpoch in place before appending them.

This module also holds the protocol primitives (readers, writers, varints, tagged fields) shared
with fetch.py: the two hot-path codecs are the only users, and keeping them here avoids another
module on the import path of every connection.

Layouts follow Kafka's ProduceRequest.json / ProduceResponse.json (flexible from v9: compact
strings, arrays and bytes with unsigned-varint lengths, and a tagged-field section at the end of
every struct).
"""

from __future__ import annotations

import functools
import struct
import uuid
from dataclasses import dataclass, field

PRODUCE_MIN_VERSION = 0
PRODUCE_MAX_VERSION = 13
PRODUCE_FIRST_FLEXIBLE_VERSION = 9


class WireDecodeError(ValueError):
    """The bytes are not a valid encoding of the message (malformed or truncated)."""


# --------------------------------------------------------------------------------------------
# Primitives shared with fetch.py
# --------------------------------------------------------------------------------------------

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
_LEADER_ID_AND_EPOCH = struct.Struct(">iiB")  # LeaderIdAndEpoch + its empty tagged-field section
_ZERO_UUID = bytes(16)
_EMPTY_TAGS: tuple[tuple[int, memoryview], ...] = ()
# A decoding slip that runs off the end of the buffer surfaces as one of these; the public
# decoders turn them into WireDecodeError so callers only ever see ValueError.
DECODE_SLIPS = (struct.error, IndexError, UnicodeDecodeError)


class LegacyReader:
    """Cursor over a message in the non-flexible encoding (int16/int32 length prefixes).

    Fixed-size reads rely on struct raising at the end of the buffer; every length read from
    the wire is checked against the bytes left before anything is sliced or allocated.
    """

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def unpack(self, fmt: struct.Struct) -> tuple:
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def int32(self) -> int:
        value = INT32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return value

    def int64(self) -> int:
        value = INT64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return value

    def take(self, length: int) -> memoryview:
        """The next ``length`` bytes as a zero-copy slice, checked against what is left."""
        pos = self.pos
        end = pos + length
        if length < 0 or end > len(self.buf):
            raise _overrun(length, pos, self.buf)
        self.pos = end
        return self.buf[pos:end]

    def uuid(self) -> uuid.UUID:
        return _uuid_from_bytes(bytes(self.take(16)))

    def uvarint(self) -> int:
        buf = self.buf
        pos = self.pos
        byte = buf[pos]
        if byte < 0x80:
            self.pos = pos + 1
            return byte
        value = byte & 0x7F
        shift = 7
        while True:
            pos += 1
            byte = buf[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos + 1
                return value
            shift += 7
            if shift > 28:
                raise WireDecodeError(f"unsigned varint at offset {self.pos} is longer than 5 bytes")

    # The length-prefixed reads below are written out in full, per encoding, because they run
    # for every topic and partition: each saved method call is measurable.

    def string(self) -> str:
        length = INT16.unpack_from(self.buf, self.pos)[0]
        if length < 0:
            raise _bad_length("string", length, self.pos + 2, self.buf)
        return self.nullable_string()  # type: ignore[return-value]  # not null: checked above

    def nullable_string(self) -> str | None:
        buf = self.buf
        start = self.pos + 2
        length = INT16.unpack_from(buf, start - 2)[0]
        if length < 0:
            self.pos = start
            return None
        end = start + length
        if end > len(buf):
            raise _bad_length("string", length, start, buf)
        self.pos = end
        return str(buf[start:end], "utf-8")

    def nullable_bytes(self) -> memoryview | None:
        buf = self.buf
        start = self.pos + 4
        length = INT32.unpack_from(buf, start - 4)[0]
        if length < 0:
            self.pos = start
            return None
        end = start + length
        if end > len(buf):
            raise _bad_length("bytes", length, start, buf)
        self.pos = end
        return buf[start:end]

    def nullable_array_length(self) -> int:
        """Element count, or -1 for null; a count that cannot fit in what is left is an error
        (every element takes at least one byte)."""
        buf = self.buf
        start = self.pos + 4
        count = INT32.unpack_from(buf, start - 4)[0]
        if count > len(buf) - start:
            raise _bad_length("array", count, start, buf)
        self.pos = start
        return count if count >= 0 else -1

    def array_length(self) -> int:
        buf = self.buf
        start = self.pos + 4
        count = INT32.unpack_from(buf, start - 4)[0]
        if count < 0 or count > len(buf) - start:
            raise _bad_length("array", count, start, buf)
        self.pos = start
        return count

    def tagged_fields(self) -> tuple[tuple[int, memoryview], ...] | list[tuple[int, memoryview]]:
        return _EMPTY_TAGS

    def skip_tagged_fields(self) -> None:
        pass


class FlexibleReader(LegacyReader):
    """Cursor over the flexible encoding: compact lengths (uvarint N+1) and tagged fields."""

    __slots__ = ()

    def _compact_length(self) -> int:
        """A compact length (uvarint N+1) as N: -1 means null."""
        byte = self.buf[self.pos]
        if byte < 0x80:
            self.pos += 1
            return byte - 1
        return self.uvarint() - 1

    def string(self) -> str:
        length = self._compact_length()
        buf = self.buf
        start = self.pos
        end = start + length
        if length < 0 or end > len(buf):
            raise _bad_length("string", length, start, buf)
        self.pos = end
        return str(buf[start:end], "utf-8")

    def nullable_string(self) -> str | None:
        length = self._compact_length()
        if length < 0:
            return None
        buf = self.buf
        start = self.pos
        end = start + length
        if end > len(buf):
            raise _bad_length("string", length, start, buf)
        self.pos = end
        return str(buf[start:end], "utf-8")

    def nullable_bytes(self) -> memoryview | None:
        length = self._compact_length()
        if length < 0:
            return None
        buf = self.buf
        start = self.pos
        end = start + length
        if end > len(buf):
            raise _bad_length("bytes", length, start, buf)
        self.pos = end
        return buf[start:end]

    def nullable_array_length(self) -> int:
        count = self._compact_length()
        if count > len(self.buf) - self.pos:
            raise _bad_length("array", count, self.pos, self.buf)
        return count

    def array_length(self) -> int:
        count = self._compact_length()
        if count < 0 or count > len(self.buf) - self.pos:
            raise _bad_length("array", count, self.pos, self.buf)
        return count

    def tagged_fields(self) -> tuple[tuple[int, memoryview], ...] | list[tuple[int, memoryview]]:
        """(tag, payload) pairs of a tagged-field section; the caller picks the ones it knows."""
        count = self.uvarint()
        if count == 0:
            return _EMPTY_TAGS
        if count > len(self.buf) - self.pos:
            raise WireDecodeError(f"{count} tagged fields cannot fit in {self.remaining()} bytes")
        fields = []
        for _ in range(count):
            tag = self.uvarint()
            fields.append((tag, self.take(self.uvarint())))
        return fields

    def skip_tagged_fields(self) -> None:
        # Fast path: almost every section is the single byte 0.
        if self.buf[self.pos] == 0:
            self.pos += 1
        else:
            self.tagged_fields()


def _overrun(length: int, pos: int, buf: memoryview) -> WireDecodeError:
    return WireDecodeError(f"length {length} at offset {pos} runs past the end ({len(buf)} bytes)")


def _bad_length(kind: str, length: int, pos: int, buf: memoryview) -> WireDecodeError:
    if length < 0:
        return WireDecodeError(f"non-nullable {kind} at offset {pos} is null")
    if kind == "array":
        return WireDecodeError(f"array of {length} elements cannot fit in the {len(buf) - pos} bytes left")
    return _overrun(length, pos, buf)


@functools.lru_cache(maxsize=4096)
def _uuid_from_bytes(raw: bytes) -> uuid.UUID:
    # Topic ids repeat across requests and UUID() is slow; the cache is bounded.
    return uuid.UUID(bytes=raw)


def make_reader(body: memoryview | bytes | bytearray, flexible: bool) -> LegacyReader:
    if not isinstance(body, memoryview):
        body = memoryview(body)
    elif body.format != "B" or body.ndim != 1:
        body = body.cast("B")
    return FlexibleReader(body) if flexible else LegacyReader(body)


def uvarint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    if value < 0x4000:
        return _TWO_BYTES.pack((value & 0x7F) | 0x80, value >> 7)
    if value < 0x200000:
        return _THREE_BYTES.pack((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TWO_BYTES = struct.Struct(">BB")
_THREE_BYTES = struct.Struct(">BBB")
_SMALL_UVARINTS = [bytes((i,)) for i in range(0x80)]


class LegacyWriter(bytearray):
    """Growing output in the non-flexible encoding; ``bytes(writer)`` is the result."""

    flexible = False

    def string(self, value: str) -> None:
        data = value.encode()
        self += INT16.pack(len(data))
        self += data

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self += b"\xff\xff"
        else:
            self.string(value)

    def array_length(self, count: int) -> None:
        self += INT32.pack(count)

    def nullable_array_length(self, count: int | None) -> None:
        self += INT32.pack(-1 if count is None else count)

    def uuid(self, value: uuid.UUID | None) -> None:
        self += _ZERO_UUID if value is None else value.bytes

    def empty_tagged_fields(self) -> None:
        pass  # no tagged fields before the flexible versions


class FlexibleWriter(LegacyWriter):
    """Growing output in the flexible encoding: compact lengths and tagged-field sections."""

    flexible = True

    def uvarint(self, value: int) -> None:
        if value < 0x80:
            self.append(value)
        else:
            self += uvarint_bytes(value)

    def string(self, value: str) -> None:
        data = value.encode()
        self.uvarint(len(data) + 1)
        self += data

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self.append(0)
        else:
            self.string(value)

    def array_length(self, count: int) -> None:
        self.uvarint(count + 1)

    def nullable_array_length(self, count: int | None) -> None:
        self.uvarint(0 if count is None else count + 1)

    def empty_tagged_fields(self) -> None:
        self.append(0)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """Write a tagged-field section; ``fields`` must be in ascending tag order."""
        self.uvarint(len(fields))
        for tag, payload in fields:
            self.uvarint(tag)
            self.uvarint(len(payload))
            self += payload


def make_writer(flexible: bool) -> LegacyWriter:
    return FlexibleWriter() if flexible else LegacyWriter()


def check_version(api: str, version: int, lowest: int, highest: int) -> None:
    if not lowest <= version <= highest:
        raise ValueError(f"{api} version {version} is not supported (versions {lowest}-{highest})")


@dataclass(slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


def node_endpoints_payload(endpoints: list[NodeEndpoint]) -> bytes:
    """The NodeEndpoints tagged field of Produce (v10+) and Fetch (v16+) responses."""
    out = FlexibleWriter()
    out.array_length(len(endpoints))
    for endpoint in endpoints:
        out += INT32.pack(endpoint.node_id)
        out.string(endpoint.host)
        out += INT32.pack(endpoint.port)
        out.nullable_string(endpoint.rack)
        out.append(0)
    return bytes(out)


def leader_payload(leader: tuple[int, int]) -> bytes:
    """A LeaderIdAndEpoch tagged field: (leader_id, leader_epoch)."""
    return _LEADER_ID_AND_EPOCH.pack(leader[0], leader[1], 0)


# --------------------------------------------------------------------------------------------
# ProduceRequest
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ProducePartitionData:
    index: int
    # Zero-copy slice of the request body; writable when the body is (the broker patches
    # baseOffset and partitionLeaderEpoch in place). None when the client sent null records.
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopicData:
    name: str  # '' when the version carries topic_id only (v13)
    topic_id: uuid.UUID | None  # v13+; None before
    partitions: list[ProducePartitionData]


@dataclass(slots=True)
class ProduceRequestData:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopicData]


_ACKS_TIMEOUT = struct.Struct(">hi")


def decode_produce_request(body: memoryview, version: int) -> ProduceRequestData:
    """Decode a ProduceRequest body (the bytes after the request header).

    Raises WireDecodeError (a ValueError) for anything malformed or truncated. Unknown tagged
    fields are skipped; bytes after the message are ignored, as Kafka does.
    """
    check_version("ProduceRequest", version, PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)
    reader = make_reader(body, version >= PRODUCE_FIRST_FLEXIBLE_VERSION)
    try:
        return _read_produce_request(reader, version)
    except DECODE_SLIPS as exc:
        raise WireDecodeError(f"malformed ProduceRequest v{version}: {exc}") from None


def _read_produce_request(reader: LegacyReader, version: int) -> ProduceRequestData:
    transactional_id = reader.nullable_string() if version >= 3 else None
    acks, timeout_ms = reader.unpack(_ACKS_TIMEOUT)
    topics = [_read_produce_topic(reader, version) for _ in range(reader.array_length())]
    reader.skip_tagged_fields()
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics)


def _read_produce_topic(reader: LegacyReader, version: int) -> ProduceTopicData:
    if version >= 13:
        name, topic_id = "", reader.uuid()
    else:
        name, topic_id = reader.string(), None
    partitions = []
    for _ in range(reader.array_length()):
        index = reader.int32()
        records = reader.nullable_bytes()
        reader.skip_tagged_fields()
        partitions.append(ProducePartitionData(index, records))
    reader.skip_tagged_fields()
    return ProduceTopicData(name, topic_id, partitions)


# --------------------------------------------------------------------------------------------
# ProduceResponse
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ProducePartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1  # v5+
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)  # (batch_index, message), v8+
    error_message: str | None = None  # v8+
    # (leader_id, leader_epoch): tagged field 0 from v10 (KIP-951), only written when not None.
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class ProduceTopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[ProducePartitionResult]


_PARTITION_RESULT_V0 = struct.Struct(">ihq")  # index, error_code, base_offset
_PARTITION_RESULT_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PARTITION_RESULT_V5 = struct.Struct(">ihqqq")  # ... log_start_offset


def encode_produce_response(
    topics: list[ProduceTopicResult],
    throttle_time_ms: int,
    version: int,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> bytes:
    """Encode a ProduceResponse body (no response header).

    Fields the version does not carry are left out (log_start_offset before v5, record errors
    before v8, current_leader and node_endpoints before v10).
    """
    check_version("ProduceResponse", version, PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)
    out = make_writer(version >= PRODUCE_FIRST_FLEXIBLE_VERSION)
    out.array_length(len(topics))
    for topic in topics:
        if version >= 13:
            out.uuid(topic.topic_id)
        else:
            out.string(topic.name)
        out.array_length(len(topic.partitions))
        for partition in topic.partitions:
            _write_produce_partition(out, partition, version)
        out.empty_tagged_fields()
    if version >= 1:
        out += INT32.pack(throttle_time_ms)
    if out.flexible:
        if node_endpoints and version >= 10:
            out.tagged_fields([(0, node_endpoints_payload(node_endpoints))])
        else:
            out.append(0)
    return bytes(out)


def _write_produce_partition(out: LegacyWriter, p: ProducePartitionResult, version: int) -> None:
    if version >= 5:
        out += _PARTITION_RESULT_V5.pack(
            p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
        )
    elif version >= 2:
        out += _PARTITION_RESULT_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
    else:
        out += _PARTITION_RESULT_V0.pack(p.index, p.error_code, p.base_offset)
    if version >= 8:
        out.array_length(len(p.record_errors))
        for batch_index, message in p.record_errors:
            out += INT32.pack(batch_index)
            out.nullable_string(message)
            out.empty_tagged_fields()
        out.nullable_string(p.error_message)
    if out.flexible:
        if p.current_leader is not None and version >= 10:
            out.tagged_fields([(0, leader_payload(p.current_leader))])
        else:
            out.append(0)
