"""Fetch request decoding and response encoding (versions 0-18), records passed through as chunks.

The response is a list of chunks: small ``bytes`` pieces for the protocol fields, interleaved with
each partition's record chunks exactly as the log handed them over (bytes, memoryviews, or
FileRegions the server sends with sendfile). Records are never copied or joined here.

The follower side (``decode_fetch_response``) keeps records as memoryview slices of the body.

Layouts follow Kafka's FetchRequest.json / FetchResponse.json (flexible from v12, topic ids
instead of names from v13, ReplicaState as a tagged field from v15). Versions 0-3 (old consumers:
no isolation level, no last stable offset or aborted transactions; MaxBytes from v3, throttle
time from v1) have their own small functions, so the v4+ path does not branch for them.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from kafkacompat.wire.chunks import Chunk
from kafkacompat.wire.produce import (
    DECODE_SLIPS,
    INT32,
    LegacyReader,
    LegacyWriter,
    NodeEndpoint,
    WireDecodeError,
    check_version,
    leader_payload,
    make_reader,
    make_writer,
    node_endpoints_payload,
    uvarint_bytes,
)

__all__ = [
    "FETCH_MAX_VERSION",
    "FETCH_MIN_VERSION",
    "FetchForgottenTopic",
    "FetchPartitionRequest",
    "FetchPartitionResult",
    "FetchRequestData",
    "FetchResponseData",
    "FetchTopicRequest",
    "FetchTopicResult",
    "NodeEndpoint",
    "WireDecodeError",
    "decode_fetch_request",
    "decode_fetch_response",
    "encode_fetch_response",
]

FETCH_MIN_VERSION = 0
FETCH_MAX_VERSION = 18
FETCH_FIRST_V4_VERSION = 4  # isolation level, last stable offset, aborted transactions; v0-3 lack them
FETCH_FIRST_FLEXIBLE_VERSION = 12
NO_HIGH_WATERMARK = 0x7FFFFFFFFFFFFFFF  # FetchRequest HighWatermark default: "feature not supported"


# --------------------------------------------------------------------------------------------
# FetchRequest
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchPartitionRequest:
    partition: int
    current_leader_epoch: int = -1  # v9+
    fetch_offset: int = 0
    last_fetched_epoch: int = -1  # v12+
    log_start_offset: int = -1  # v5+
    partition_max_bytes: int = 0
    replica_directory_id: uuid.UUID | None = None  # tagged 0, v17+
    high_watermark: int = NO_HIGH_WATERMARK  # tagged 1, v18+


@dataclass(slots=True)
class FetchTopicRequest:
    name: str  # '' from v13 (topic ids)
    topic_id: uuid.UUID | None  # v13+; None before
    partitions: list[FetchPartitionRequest]


@dataclass(slots=True)
class FetchForgottenTopic:
    name: str  # '' from v13
    topic_id: uuid.UUID | None  # v13+
    partitions: list[int]


@dataclass(slots=True)
class FetchRequestData:
    replica_id: int = -1  # the ReplicaId field before v15, ReplicaState.ReplicaId (tagged 1) from v15
    replica_epoch: int = -1  # ReplicaState.ReplicaEpoch, v15+
    max_wait_ms: int = 0
    min_bytes: int = 0
    max_bytes: int = 0x7FFFFFFF
    isolation_level: int = 0
    session_id: int = 0  # v7+
    session_epoch: int = -1  # v7+
    topics: list[FetchTopicRequest] = field(default_factory=list)
    forgotten_topics_data: list[FetchForgottenTopic] = field(default_factory=list)  # v7+
    rack_id: str = ""  # v11+
    cluster_id: str | None = None  # tagged 0, v12+


_FETCH_LIMITS = struct.Struct(">iiib")  # max_wait_ms, min_bytes, max_bytes, isolation_level
_FETCH_LIMITS_V0 = struct.Struct(">iii")  # replica_id, max_wait_ms, min_bytes (v0-2)
_FETCH_LIMITS_V3 = struct.Struct(">iiii")  # replica_id, max_wait_ms, min_bytes, max_bytes (v3)
_SESSION = struct.Struct(">ii")  # session_id, session_epoch
_REPLICA_STATE = struct.Struct(">iq")  # replica_id, replica_epoch
# FetchPartition fixed fields by version range.
_PARTITION_V4 = struct.Struct(">iqi")  # partition, fetch_offset, partition_max_bytes
_PARTITION_V5 = struct.Struct(">iqqi")  # ... log_start_offset before partition_max_bytes
_PARTITION_V9 = struct.Struct(">iiqqi")  # ... current_leader_epoch after partition
_PARTITION_V12 = struct.Struct(">iiqiqi")  # ... last_fetched_epoch after fetch_offset


def decode_fetch_request(body: memoryview, version: int) -> FetchRequestData:
    """Decode a FetchRequest body (the bytes after the request header).

    Fields a version does not carry get Kafka's defaults. Tagged fields are read when the
    version knows them (ClusterId v12+, ReplicaState v15+, ReplicaDirectoryId v17+,
    HighWatermark v18+) and skipped otherwise. Raises WireDecodeError (a ValueError) for
    anything malformed or truncated.
    """
    check_version("FetchRequest", version, FETCH_MIN_VERSION, FETCH_MAX_VERSION)
    reader = make_reader(body, version >= FETCH_FIRST_FLEXIBLE_VERSION)
    try:
        if version < FETCH_FIRST_V4_VERSION:
            return _read_old_fetch_request(reader, version)
        return _read_fetch_request(reader, version)
    except DECODE_SLIPS as exc:
        raise WireDecodeError(f"malformed FetchRequest v{version}: {exc}") from None


def _read_old_fetch_request(reader: LegacyReader, version: int) -> FetchRequestData:
    """Fetch v0-3: ReplicaId, MaxWaitMs, MinBytes, MaxBytes (v3; Kafka's default before), then
    topics by name with (partition, fetch offset, partition max bytes), the v4 partition layout."""
    if version >= 3:
        replica_id, max_wait_ms, min_bytes, max_bytes = reader.unpack(_FETCH_LIMITS_V3)
    else:
        (replica_id, max_wait_ms, min_bytes), max_bytes = reader.unpack(_FETCH_LIMITS_V0), 0x7FFFFFFF
    topics = _read_fetch_topics(reader, version)
    return FetchRequestData(replica_id, -1, max_wait_ms, min_bytes, max_bytes, 0, 0, -1, topics)


def _read_fetch_request(reader: LegacyReader, version: int) -> FetchRequestData:
    replica_id = reader.int32() if version <= 14 else -1
    replica_epoch = -1
    max_wait_ms, min_bytes, max_bytes, isolation_level = reader.unpack(_FETCH_LIMITS)
    session_id, session_epoch = reader.unpack(_SESSION) if version >= 7 else (0, -1)
    topics = _read_fetch_topics(reader, version)
    forgotten = (
        [_read_forgotten_topic(reader, version) for _ in range(reader.array_length())] if version >= 7 else []
    )
    rack_id = reader.string() if version >= 11 else ""
    cluster_id = None
    for tag, payload in reader.tagged_fields():
        if tag == 0:
            cluster_id = type(reader)(payload).nullable_string()
        elif tag == 1 and version >= 15:
            replica_id, replica_epoch = _REPLICA_STATE.unpack_from(payload)
    return FetchRequestData(
        replica_id, replica_epoch, max_wait_ms, min_bytes, max_bytes, isolation_level,
        session_id, session_epoch, topics, forgotten, rack_id, cluster_id,
    )


def _read_topic_key(reader: LegacyReader, version: int) -> tuple[str, uuid.UUID | None]:
    if version >= 13:
        return "", reader.uuid()
    return reader.string(), None


def _read_fetch_topics(reader: LegacyReader, version: int) -> list[FetchTopicRequest]:
    read_partitions = _read_flexible_partitions if version >= 12 else _read_legacy_partitions
    by_id = version >= 13
    topics = []
    for _ in range(reader.array_length()):
        if by_id:
            name, topic_id = "", reader.uuid()
        else:
            name, topic_id = reader.string(), None
        partitions = read_partitions(reader, version, reader.array_length())
        reader.skip_tagged_fields()
        topics.append(FetchTopicRequest(name, topic_id, partitions))
    return topics


def _read_legacy_partitions(reader: LegacyReader, version: int, count: int) -> list[FetchPartitionRequest]:
    # Written as one loop over local variables: this runs for every partition of every fetch.
    buf = reader.buf
    pos = reader.pos
    partitions = []
    append = partitions.append
    if version >= 9:
        unpack_from, size = _PARTITION_V9.unpack_from, _PARTITION_V9.size
        for _ in range(count):
            index, leader_epoch, fetch_offset, log_start, max_bytes = unpack_from(buf, pos)
            pos += size
            append(FetchPartitionRequest(index, leader_epoch, fetch_offset, -1, log_start, max_bytes))
    elif version >= 5:
        unpack_from, size = _PARTITION_V5.unpack_from, _PARTITION_V5.size
        for _ in range(count):
            index, fetch_offset, log_start, max_bytes = unpack_from(buf, pos)
            pos += size
            append(FetchPartitionRequest(index, -1, fetch_offset, -1, log_start, max_bytes))
    else:
        unpack_from, size = _PARTITION_V4.unpack_from, _PARTITION_V4.size
        for _ in range(count):
            index, fetch_offset, max_bytes = unpack_from(buf, pos)
            pos += size
            append(FetchPartitionRequest(index, -1, fetch_offset, -1, -1, max_bytes))
    reader.pos = pos
    return partitions


def _read_flexible_partitions(reader: LegacyReader, version: int, count: int) -> list[FetchPartitionRequest]:
    buf = reader.buf
    pos = reader.pos
    unpack_from, size = _PARTITION_V12.unpack_from, _PARTITION_V12.size
    partitions = []
    for _ in range(count):
        partition = FetchPartitionRequest(*unpack_from(buf, pos))
        pos += size
        if buf[pos] == 0:  # the usual empty tagged-field section
            pos += 1
        else:
            reader.pos = pos
            _read_partition_tags(reader, version, partition)
            pos = reader.pos
        partitions.append(partition)
    reader.pos = pos
    return partitions


def _read_partition_tags(reader: LegacyReader, version: int, partition: FetchPartitionRequest) -> None:
    for tag, payload in reader.tagged_fields():
        if tag == 0 and version >= 17:
            partition.replica_directory_id = type(reader)(payload).uuid()
        elif tag == 1 and version >= 18:
            partition.high_watermark = type(reader)(payload).int64()


def _read_forgotten_topic(reader: LegacyReader, version: int) -> FetchForgottenTopic:
    name, topic_id = _read_topic_key(reader, version)
    count = reader.array_length()
    partitions = list(struct.unpack(f">{count}i", reader.take(4 * count))) if count else []
    reader.skip_tagged_fields()
    return FetchForgottenTopic(name, topic_id, partitions)


# --------------------------------------------------------------------------------------------
# FetchResponse
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchPartitionResult:
    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1  # v5+
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer_id, first_offset)
    preferred_read_replica: int = -1  # v11+
    records: list[Chunk] = field(default_factory=list)  # sent as they are, never copied
    records_size: int = 0  # sum of the record chunks' lengths; 0 = not given (computed), else checked
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end_offset), tagged 0, v12+
    current_leader: tuple[int, int] | None = None  # (leader_id, leader_epoch), tagged 1, v12+
    snapshot_id: tuple[int, int] | None = None  # (end_offset, epoch), tagged 2, v12+


@dataclass(slots=True)
class FetchTopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[FetchPartitionResult]


_RESPONSE_TOP_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION_HEAD_V4 = struct.Struct(">ihqq")  # index, error_code, high_watermark, last_stable_offset
_PARTITION_HEAD_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_ABORTED_TXN = struct.Struct(">qq")  # producer_id, first_offset
_ABORTED_TXN_FLEXIBLE = struct.Struct(">qqB")  # ... and the element's empty tagged fields
_EPOCH_END_OFFSET = struct.Struct(">iq")  # epoch, end_offset
_LEADER_ID_AND_EPOCH = struct.Struct(">ii")  # leader_id, leader_epoch
_SNAPSHOT_ID = struct.Struct(">qi")  # end_offset, epoch
# The tagged structs as written: their fields and an empty tagged-field section of their own.
_EPOCH_END_OFFSET_TAG = struct.Struct(">iqB")
_SNAPSHOT_ID_TAG = struct.Struct(">qiB")


def encode_fetch_response(
    topics: list[FetchTopicResult],
    *,
    version: int,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> list[Chunk]:
    """Encode a FetchResponse body (no response header) as a list of chunks.

    Protocol fields are coalesced into as few ``bytes`` pieces as possible; every partition's
    record chunks are placed in the list as the same objects, in order. Fields the version does
    not carry are left out. Raises ValueError if a partition's records_size disagrees with its
    chunks (a wrong length would corrupt the whole connection).
    """
    check_version("FetchResponse", version, FETCH_MIN_VERSION, FETCH_MAX_VERSION)
    if version < FETCH_FIRST_V4_VERSION:
        return _encode_old_fetch_response(topics, version, throttle_time_ms)
    chunks: list[Chunk] = []
    out = make_writer(version >= FETCH_FIRST_FLEXIBLE_VERSION)
    if version >= 7:
        out += _RESPONSE_TOP_V7.pack(throttle_time_ms, error_code, session_id)
    else:
        out += INT32.pack(throttle_time_ms)
    flexible = out.flexible
    out.array_length(len(topics))
    for topic in topics:
        if version >= 13:
            out.uuid(topic.topic_id)
        else:
            out.string(topic.name)
        out.array_length(len(topic.partitions))
        for partition in topic.partitions:
            _write_fetch_partition(out, chunks, partition, version, flexible)
        out.empty_tagged_fields()
    if flexible:
        if node_endpoints and version >= 16:
            out.tagged_fields([(0, node_endpoints_payload(node_endpoints))])
        else:
            out.append(0)
    chunks.append(bytes(out))
    return chunks


_PARTITION_HEAD_V0 = struct.Struct(">ihq")  # index, error_code, high_watermark (v0-3)


def _encode_old_fetch_response(topics: list[FetchTopicResult], version: int, throttle_time_ms: int) -> list[Chunk]:
    """Fetch v0-3: (throttle time from v1), topics by name, per partition index, error code, high
    watermark and the records (non-flexible bytes); record chunks pass through as for v4+."""
    chunks: list[Chunk] = []
    out = make_writer(False)
    if version >= 1:
        out += INT32.pack(throttle_time_ms)
    out.array_length(len(topics))
    for topic in topics:
        out.string(topic.name)
        out.array_length(len(topic.partitions))
        for p in topic.partitions:
            out += _PARTITION_HEAD_V0.pack(p.index, p.error_code, p.high_watermark)
            _write_old_records(out, chunks, p)
    chunks.append(bytes(out))
    return chunks


def _write_old_records(out: LegacyWriter, chunks: list[Chunk], p: FetchPartitionResult) -> None:
    """The records field as _write_fetch_partition writes it for non-flexible versions."""
    records = p.records
    if records:
        size = len(records[0]) if len(records) == 1 else sum(map(len, records))
        if p.records_size and p.records_size != size:
            raise ValueError(f"partition {p.index}: records_size {p.records_size} but its chunks hold {size} bytes")
        out += INT32.pack(size)
        chunks.append(bytes(out))
        out.clear()
        chunks.extend(records)
    else:
        out += b"\x00\x00\x00\x00"


def _write_fetch_partition(
    out: LegacyWriter, chunks: list[Chunk], p: FetchPartitionResult, version: int, flexible: bool
) -> None:
    # Runs for every partition of every fetch, so the encodings are spelled out inline.
    if version >= 5:
        out += _PARTITION_HEAD_V5.pack(
            p.index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
        )
    else:
        out += _PARTITION_HEAD_V4.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
    aborted = p.aborted_transactions
    if aborted is None:
        out += b"\x00" if flexible else b"\xff\xff\xff\xff"
    else:
        _write_aborted_transactions(out, aborted, flexible)
    if version >= 11:
        out += INT32.pack(p.preferred_read_replica)
    records = p.records
    if records:
        size = len(records[0]) if len(records) == 1 else sum(map(len, records))
        if p.records_size and p.records_size != size:
            raise ValueError(f"partition {p.index}: records_size {p.records_size} but its chunks hold {size} bytes")
        out += uvarint_bytes(size + 1) if flexible else INT32.pack(size)
        # Flush the protocol bytes so far, then hand over the record chunks themselves.
        chunks.append(bytes(out))
        out.clear()
        chunks.extend(records)
    else:
        out += b"\x01" if flexible else b"\x00\x00\x00\x00"
    if flexible:
        if p.diverging_epoch is None and p.current_leader is None and p.snapshot_id is None:
            out.append(0)
        else:
            _write_fetch_partition_tags(out, p)


def _write_aborted_transactions(out: LegacyWriter, aborted: list[tuple[int, int]], flexible: bool) -> None:
    out.nullable_array_length(len(aborted))
    if flexible:
        for producer_id, first_offset in aborted:
            out += _ABORTED_TXN_FLEXIBLE.pack(producer_id, first_offset, 0)
    else:
        for producer_id, first_offset in aborted:
            out += _ABORTED_TXN.pack(producer_id, first_offset)


def _write_fetch_partition_tags(out: LegacyWriter, p: FetchPartitionResult) -> None:
    tags: list[tuple[int, bytes]] = []
    if p.diverging_epoch is not None:
        tags.append((0, _EPOCH_END_OFFSET_TAG.pack(p.diverging_epoch[0], p.diverging_epoch[1], 0)))
    if p.current_leader is not None:
        tags.append((1, leader_payload(p.current_leader)))
    if p.snapshot_id is not None:
        tags.append((2, _SNAPSHOT_ID_TAG.pack(p.snapshot_id[0], p.snapshot_id[1], 0)))
    out.tagged_fields(tags)


# --------------------------------------------------------------------------------------------
# FetchResponse decoding (the follower side)
# --------------------------------------------------------------------------------------------


class FetchResponseData(NamedTuple):
    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[FetchTopicResult]  # records: [memoryview slice of the body], or [] when empty/null


def decode_fetch_response(body: memoryview, version: int) -> FetchResponseData:
    """Decode a FetchResponse body (no response header); records stay zero-copy slices.

    Each partition's ``records`` is ``[view]`` (a memoryview over ``body``) with records_size
    set, or ``[]`` when the leader sent null or empty records. NodeEndpoints (v16+) are skipped.
    """
    check_version("FetchResponse", version, FETCH_MIN_VERSION, FETCH_MAX_VERSION)
    reader = make_reader(body, version >= FETCH_FIRST_FLEXIBLE_VERSION)
    try:
        return _read_fetch_response(reader, version)
    except DECODE_SLIPS as exc:
        raise WireDecodeError(f"malformed FetchResponse v{version}: {exc}") from None


def _read_fetch_response(reader: LegacyReader, version: int) -> FetchResponseData:
    if version >= 7:
        throttle_time_ms, error_code, session_id = reader.unpack(_RESPONSE_TOP_V7)
    elif version == 0:
        throttle_time_ms, error_code, session_id = 0, 0, 0
    else:
        throttle_time_ms, error_code, session_id = reader.int32(), 0, 0
    topics = []
    for _ in range(reader.array_length()):
        name, topic_id = _read_topic_key(reader, version)
        partitions = [_read_fetch_partition_result(reader, version) for _ in range(reader.array_length())]
        reader.skip_tagged_fields()
        topics.append(FetchTopicResult(name, topic_id, partitions))
    reader.skip_tagged_fields()
    return FetchResponseData(throttle_time_ms, error_code, session_id, topics)


def _read_fetch_partition_result(reader: LegacyReader, version: int) -> FetchPartitionResult:
    if version < FETCH_FIRST_V4_VERSION:
        p = FetchPartitionResult(*reader.unpack(_PARTITION_HEAD_V0))
        records = reader.nullable_bytes()
        if records:
            p.records = [records]
            p.records_size = len(records)
        return p
    if version >= 5:
        p = FetchPartitionResult(*reader.unpack(_PARTITION_HEAD_V5))
    else:
        p = FetchPartitionResult(*reader.unpack(_PARTITION_HEAD_V4))
    count = reader.nullable_array_length()
    if count >= 0:
        p.aborted_transactions = [_read_aborted_transaction(reader) for _ in range(count)]
    if version >= 11:
        p.preferred_read_replica = reader.int32()
    records = reader.nullable_bytes()
    if records:
        p.records = [records]
        p.records_size = len(records)
    for tag, payload in reader.tagged_fields():
        if tag == 0:
            p.diverging_epoch = _EPOCH_END_OFFSET.unpack_from(payload)
        elif tag == 1:
            p.current_leader = _LEADER_ID_AND_EPOCH.unpack_from(payload)
        elif tag == 2:
            p.snapshot_id = _SNAPSHOT_ID.unpack_from(payload)
    return p


def _read_aborted_transaction(reader: LegacyReader) -> tuple[int, int]:
    transaction = reader.unpack(_ABORTED_TXN)
    reader.skip_tagged_fields()
    return transaction
