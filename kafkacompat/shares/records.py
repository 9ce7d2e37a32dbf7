"""__share_group_state records in the share coordinator's own formats (share-coordinator module):

    key    int16 record type (0 ShareSnapshot, 1 ShareUpdate), then (not flexible)
           GroupId string, TopicId uuid, Partition int32
    value  int16 version 0, then (flexible)
           ShareSnapshotValue: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
                               StartOffset int64, CreateTimestamp int64, WriteTimestamp int64,
                               StateBatches [FirstOffset int64, LastOffset int64,
                                             DeliveryState int8, DeliveryCount int16]
           ShareUpdateValue:   SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64,
                               StateBatches (as above)
           tagged field 0 of both: DeliveryCompleteCount int32 (KIP-1226), skipped when read.

A null value is a tombstone (DeleteShareGroupState). Records travel in RecordBatch v2 batches.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from kafkacompat.shares.partition import StateBatch
from kafkacompat.wire.message_runtime import DecodeError, read_uvarint, skip_tagged_field, write_uvarint

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1

_KEY_HEAD = struct.Struct(">hh")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_SNAPSHOT_HEAD = struct.Struct(">iiiqqq")
_UPDATE_HEAD = struct.Struct(">iiq")
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    record_type: int
    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def share_partition(self) -> tuple[str, uuid.UUID, int]:
        return self.group_id, self.topic_id, self.partition


@dataclass(slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int = -1
    write_timestamp: int = -1
    state_batches: list[StateBatch] = field(default_factory=list)


@dataclass(slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: not updated
    state_batches: list[StateBatch] = field(default_factory=list)


def encode_key(key: ShareStateKey) -> bytes:
    group = key.group_id.encode()
    return (_KEY_HEAD.pack(key.record_type, len(group)) + group + key.topic_id.bytes + _I32.pack(key.partition))


def decode_key(data: bytes | memoryview) -> ShareStateKey:
    data = bytes(data)
    try:
        record_type, length = _KEY_HEAD.unpack_from(data, 0)
        end = 4 + length
        group = data[4:end].decode()
        topic_id = uuid.UUID(bytes=data[end:end + 16])
        (partition,) = _I32.unpack_from(data, end + 16)
    except (struct.error, ValueError) as exc:
        raise DecodeError(f"malformed {SHARE_STATE_TOPIC} key: {exc}") from exc
    return ShareStateKey(record_type, group, topic_id, partition)


def _encode_batches(buf: bytearray, batches: list[StateBatch]) -> None:
    write_uvarint(buf, len(batches) + 1)
    for batch in batches:
        buf += _BATCH.pack(batch.first_offset, batch.last_offset, batch.delivery_state, batch.delivery_count)
        buf.append(0)  # no tagged fields


def _decode_batches(data: bytes, pos: int) -> tuple[list[StateBatch], int]:
    count, pos = read_uvarint(data, pos)
    batches = []
    for _ in range(count - 1):
        first, last, state, deliveries = _BATCH.unpack_from(data, pos)
        pos = _skip_tags(data, pos + _BATCH.size)
        batches.append(StateBatch(first, last, state, deliveries))
    return batches, pos


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _, pos = read_uvarint(data, pos)
        pos = skip_tagged_field(data, pos)
    return pos


def encode_snapshot(value: ShareSnapshot) -> bytes:
    buf = bytearray(_I16.pack(0))
    buf += _SNAPSHOT_HEAD.pack(value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                               value.create_timestamp, value.write_timestamp)
    _encode_batches(buf, value.state_batches)
    buf.append(0)
    return bytes(buf)


def encode_update(value: ShareUpdate) -> bytes:
    buf = bytearray(_I16.pack(0))
    buf += _UPDATE_HEAD.pack(value.snapshot_epoch, value.leader_epoch, value.start_offset)
    _encode_batches(buf, value.state_batches)
    buf.append(0)
    return bytes(buf)


def decode_value(record_type: int, data: bytes | memoryview) -> ShareSnapshot | ShareUpdate:
    data = bytes(data)
    try:
        if record_type == SNAPSHOT_TYPE:
            head = _SNAPSHOT_HEAD.unpack_from(data, 2)
            batches, pos = _decode_batches(data, 2 + _SNAPSHOT_HEAD.size)
            _skip_tags(data, pos)
            return ShareSnapshot(*head, state_batches=batches)
        if record_type == UPDATE_TYPE:
            head = _UPDATE_HEAD.unpack_from(data, 2)
            batches, pos = _decode_batches(data, 2 + _UPDATE_HEAD.size)
            _skip_tags(data, pos)
            return ShareUpdate(*head, state_batches=batches)
    except (struct.error, IndexError) as exc:
        raise DecodeError(f"malformed {SHARE_STATE_TOPIC} value: {exc}") from exc
    raise DecodeError(f"unknown {SHARE_STATE_TOPIC} record type {record_type}")
