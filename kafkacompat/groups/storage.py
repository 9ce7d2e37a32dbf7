"""__consumer_offsets records in Kafka's own formats, so a data dir written here reads in Kafka.

A record's key and value are each an int16 schema version followed by the struct of that version
(Kafka's group-coordinator JSON: OffsetCommitKey/Value, GroupMetadataKey/Value):

    OffsetCommitKey v0/v1     group string, topic string, partition int32
    OffsetCommitValue v1      offset int64, metadata string, commitTimestamp int64, expireTimestamp int64
    OffsetCommitValue v3      offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
    GroupMetadataKey v2       group string
    GroupMetadataValue v3     protocolType string, generation int32, protocol nullable string,
                              leader nullable string, currentStateTimestamp int64,
                              members [memberId string, groupInstanceId nullable string, clientId string,
                                       clientHost string, rebalanceTimeout int32, sessionTimeout int32,
                                       subscription bytes, assignment bytes]

Versions 4 (flexible, tagged fields) are decoded too, for logs written by a newer Kafka. A null
value is a tombstone. Records travel in RecordBatch v2 batches (wire/records.py's new_batch).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator

from kafkacompat.wire.records import iter_batches, iter_records, new_batch, read_txn_marker, record_value

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def java_abs(value: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 (not to itself, as Math.abs would)."""
    return 0 if value == -(1 << 31) else abs(value)


def partition_for(group_id: str, partitions: int) -> int:
    return java_abs(java_string_hash(group_id)) % partitions


# ---- primitive writers / readers -----------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else _string(value)


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I32.pack(-1)
    return _I32.pack(len(value)) + bytes(value)


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = bytes(data)
        self.pos = 0

    def _take(self, st: struct.Struct) -> int:
        value = st.unpack_from(self.data, self.pos)[0]
        self.pos += st.size
        return value

    def int16(self) -> int:
        return self._take(_I16)

    def int32(self) -> int:
        return self._take(_I32)

    def int64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def string(self, flexible: bool = False) -> str | None:
        length = self.uvarint() - 1 if flexible else self.int16()
        if length < 0:
            return None
        value = self.data[self.pos:self.pos + length].decode("utf-8")
        self.pos += length
        return value

    def bytes_(self, flexible: bool = False) -> bytes | None:
        length = self.uvarint() - 1 if flexible else self.int32()
        if length < 0:
            return None
        value = self.data[self.pos:self.pos + length]
        self.pos += length
        return value

    def array_length(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            self.pos += size


# ---- records -------------------------------------------------------------------------------


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadataRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataRecord] = field(default_factory=list)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic) + _I32.pack(partition)


def group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Version 1 when an expire timestamp is set (only v1 has the field), else version 3."""
    if value.expire_timestamp >= 0:
        return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY) + _I64.pack(value.offset)
                + _string(value.metadata or "") + _I64.pack(value.commit_timestamp)
                + _I64.pack(value.expire_timestamp))
    return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
            + _string(value.metadata or "") + _I64.pack(value.commit_timestamp))


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    parts = [
        _I16.pack(GROUP_METADATA_VALUE_VERSION), _string(value.protocol_type or ""), _I32.pack(value.generation),
        _nullable_string(value.protocol), _nullable_string(value.leader), _I64.pack(value.current_state_timestamp),
        _I32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id), _nullable_string(m.group_instance_id), _string(m.client_id),
            _string(m.client_host), _I32.pack(m.rebalance_timeout), _I32.pack(m.session_timeout),
            _bytes(m.subscription), _bytes(m.assignment),
        ]
    return b"".join(parts)


@dataclass(slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(slots=True)
class GroupKey:
    group: str


def decode_key(data: bytes | memoryview) -> OffsetKey | GroupKey | None:
    """None for key versions this coordinator does not handle (e.g. KIP-848 consumer groups)."""
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.int32())
    if version == 2:
        return GroupKey(r.string() or "")
    return None


def decode_offset_value(data: bytes | memoryview) -> OffsetCommitValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise ValueError(f"unknown OffsetCommitValue version {version}")
    flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string(flexible) or ""
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    if flexible:
        r.skip_tags()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_value(data: bytes | memoryview) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise ValueError(f"unknown GroupMetadataValue version {version}")
    flexible = version >= 4
    protocol_type = r.string(flexible) or ""
    generation = r.int32()
    protocol = r.string(flexible)
    leader = r.string(flexible)
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(max(0, r.array_length(flexible))):
        member_id = r.string(flexible) or ""
        instance_id = r.string(flexible) if version >= 3 else None
        client_id = r.string(flexible) or ""
        client_host = r.string(flexible) or ""
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_(flexible) or b""
        assignment = r.bytes_(flexible) or b""
        if flexible:
            r.skip_tags()
        members.append(MemberMetadataRecord(member_id, instance_id, client_id, client_host,
                                            rebalance_timeout, session_timeout, subscription, assignment))
    if flexible:
        r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, members)


# ---- batches -------------------------------------------------------------------------------


def build_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int, compression: int = 0, *,
                transactional_producer: tuple[int, int] | None = None) -> bytearray:
    """One RecordBatch v2 (offsets from 0; the log assigns the real ones); a transactional batch
    of ``transactional_producer`` (id, epoch) for TxnOffsetCommit."""
    return new_batch([(timestamp_ms, key, value) for key, value in records], compression,
                     transactional_producer=transactional_producer)


@dataclass(slots=True)
class LoadedRecord:
    """A record of __consumer_offsets as loading sees it: ``txn_producer_id`` >= 0 for a record
    committed inside a transaction; ``marker`` set (and key/value None) for a COMMIT (True) or
    ABORT (False) marker of that producer."""

    offset: int
    key: bytes | None
    value: bytes | None
    txn_producer_id: int = -1
    marker: bool | None = None


def iter_loaded_records(data: bytes) -> Iterator[LoadedRecord]:
    """Every record of whole batches, transactional ones and markers told apart."""
    for header in iter_batches(data):
        producer_id = header.producer_id if header.is_transactional else -1
        if header.is_control:
            marker = read_txn_marker(data, header)
            if marker is not None and producer_id >= 0:
                yield LoadedRecord(header.last_offset, None, None, producer_id, marker.committed)
            continue
        for record in iter_records(data, header):
            yield LoadedRecord(record.offset, None if record.key is None else bytes(record.key),
                               record_value(record), producer_id)


def iter_batch_records(data: bytes) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record in whole batches (control batches skipped)."""
    for header in iter_batches(data):
        if header.is_control:
            continue
        for record in iter_records(data, header):
            yield record.offset, None if record.key is None else bytes(record.key), record_value(record)
