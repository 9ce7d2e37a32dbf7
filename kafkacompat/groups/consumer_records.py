"""The records of KIP-848 consumer groups in __consumer_offsets, in Kafka's schemas (its
group-coordinator JSON), and their replay when a partition's groups are loaded.

Keys are an int16 version followed by non-flexible strings; values are version 0, flexible
(compact strings and arrays, tagged fields). A null value is a tombstone.

    key 3  ConsumerGroupMetadata                 value: Epoch int32
    key 4  ConsumerGroupPartitionMetadata        value: Topics [TopicId uuid, TopicName, NumPartitions, PartitionMetadata []]
    key 5  ConsumerGroupMemberMetadata(member)   value: InstanceId?, RackId?, ClientId, ClientHost,
                                                        SubscribedTopicNames [], SubscribedTopicRegex?,
                                                        RebalanceTimeoutMs, ServerAssignor?
    key 6  ConsumerGroupTargetAssignmentMetadata value: AssignmentEpoch int32
    key 7  ConsumerGroupTargetAssignmentMember   value: TopicPartitions [TopicId, Partitions []int32]
    key 8  ConsumerGroupCurrentMemberAssignment  value: MemberEpoch, PreviousMemberEpoch, State int8,
                                                        AssignedPartitions [], PartitionsPendingRevocation []
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from kafkacompat.groups.consumer_group import (
    ClassicMembership,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    TopicMetadata,
)
from kafkacompat.wire.message_runtime import (
    read_array_length,
    read_string,
    read_uuid,
    read_uvarint,
    skip_tagged_field,
    write_string,
    write_uvarint,
)

if TYPE_CHECKING:
    from kafkacompat.groups.assignors import Assignment

GROUP_METADATA_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_METADATA_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
CONSUMER_KEY_VERSIONS = frozenset(range(3, 9))

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
Record = tuple[bytes, bytes | None]


# ---- writing ------------------------------------------------------------------------------------


def _key(version: int, *strings: str) -> bytes:
    buf = bytearray(_I16.pack(version))
    for value in strings:
        write_string(buf, value, False)
    return bytes(buf)


def _value() -> bytearray:
    return bytearray(_I16.pack(0))


def _array_length(buf: bytearray, count: int) -> None:
    write_uvarint(buf, count + 1)


def _end_struct(buf: bytearray) -> None:
    buf.append(0)  # no tagged fields


def _topic_partitions(buf: bytearray, assignment: "Assignment") -> None:
    _array_length(buf, len(assignment))
    for topic_id in sorted(assignment):
        partitions = sorted(assignment[topic_id])
        buf += topic_id.bytes
        _array_length(buf, len(partitions))
        for index in partitions:
            buf += _I32.pack(index)
        _end_struct(buf)


def group_epoch(group_id: str, epoch: int) -> Record:
    buf = _value()
    buf += _I32.pack(epoch)
    _end_struct(buf)
    return _key(GROUP_METADATA_KEY, group_id), bytes(buf)


def partition_metadata(group_id: str, metadata: dict[str, TopicMetadata]) -> Record:
    buf = _value()
    _array_length(buf, len(metadata))
    for name in sorted(metadata):
        topic = metadata[name]
        buf += topic.topic_id.bytes
        write_string(buf, topic.name, True)
        buf += _I32.pack(topic.partitions)
        _array_length(buf, 0)  # PartitionMetadata (racks): no rack-aware placement here
        _end_struct(buf)
    _end_struct(buf)
    return _key(PARTITION_METADATA_KEY, group_id), bytes(buf)


def member_metadata(group_id: str, member: ConsumerMember) -> Record:
    buf = _value()
    write_string(buf, member.instance_id, True)
    write_string(buf, member.rack_id, True)
    write_string(buf, member.client_id, True)
    write_string(buf, member.client_host, True)
    _array_length(buf, len(member.subscribed_topic_names))
    for name in member.subscribed_topic_names:
        write_string(buf, name, True)
    write_string(buf, member.subscribed_topic_regex, True)
    buf += _I32.pack(member.rebalance_timeout_ms)
    write_string(buf, member.server_assignor, True)
    if member.classic is None:
        _end_struct(buf)
    else:  # tagged field 0: ClassicMemberMetadata
        tagged = bytearray(_I32.pack(member.classic.session_timeout_ms))
        _array_length(tagged, len(member.classic.protocols))
        for name, metadata in member.classic.protocols:
            write_string(tagged, name, True)
            write_uvarint(tagged, len(metadata) + 1)
            tagged += metadata
            _end_struct(tagged)
        _end_struct(tagged)
        buf.append(1)
        write_uvarint(buf, 0)
        write_uvarint(buf, len(tagged))
        buf += tagged
    return _key(MEMBER_METADATA_KEY, group_id, member.member_id), bytes(buf)


def target_metadata(group_id: str, assignment_epoch: int) -> Record:
    buf = _value()
    buf += _I32.pack(assignment_epoch)
    _end_struct(buf)
    return _key(TARGET_METADATA_KEY, group_id), bytes(buf)


def target_member(group_id: str, member_id: str, assignment: "Assignment") -> Record:
    buf = _value()
    _topic_partitions(buf, assignment)
    _end_struct(buf)
    return _key(TARGET_MEMBER_KEY, group_id, member_id), bytes(buf)


def current_assignment(group_id: str, member: ConsumerMember) -> Record:
    buf = _value()
    buf += _I32.pack(member.member_epoch)
    buf += _I32.pack(member.previous_member_epoch)
    buf += _I8.pack(int(member.state))
    _topic_partitions(buf, member.assigned)
    _topic_partitions(buf, member.pending_revocation)
    _end_struct(buf)
    return _key(CURRENT_ASSIGNMENT_KEY, group_id, member.member_id), bytes(buf)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order when a member goes: its current assignment, its target, then the member."""
    return [(_key(CURRENT_ASSIGNMENT_KEY, group_id, member_id), None),
            (_key(TARGET_MEMBER_KEY, group_id, member_id), None),
            (_key(MEMBER_METADATA_KEY, group_id, member_id), None)]


def group_tombstones(group_id: str) -> list[Record]:
    return [(_key(TARGET_METADATA_KEY, group_id), None), (_key(PARTITION_METADATA_KEY, group_id), None),
            (_key(GROUP_METADATA_KEY, group_id), None)]


def group_records(state: ConsumerGroupState) -> list[Record]:
    """Every record that describes ``state`` (what a compacted partition keeps of it)."""
    group_id = state.group_id
    records = [group_epoch(group_id, state.group_epoch),
               partition_metadata(group_id, state.subscription_metadata)]
    for member in state.members.values():
        records.append(member_metadata(group_id, member))
    for member_id, assignment in state.target.items():
        records.append(target_member(group_id, member_id, assignment))
    records.append(target_metadata(group_id, state.assignment_epoch))
    for member in state.members.values():
        records.append(current_assignment(group_id, member))
    return records


# ---- reading ------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.pos = 0

    def int8(self) -> int:
        (value,) = _I8.unpack_from(self.data, self.pos)
        self.pos += 1
        return value

    def int16(self) -> int:
        (value,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return value

    def int32(self) -> int:
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def string(self, compact: bool, nullable: bool = False) -> str | None:
        value, self.pos = read_string(self.data, self.pos, compact, nullable, "string")
        return value

    def uuid(self) -> uuid.UUID:
        value, self.pos = read_uuid(self.data, self.pos)
        return value

    def count(self) -> int:
        value, self.pos = read_array_length(self.data, self.pos, True, False, "array")
        return value

    def skip_tags(self) -> None:
        count, self.pos = read_uvarint(self.data, self.pos)
        for _ in range(count):
            _, self.pos = read_uvarint(self.data, self.pos)
            self.pos = skip_tagged_field(self.data, self.pos)

    def bytes_(self) -> bytes:
        size, self.pos = read_uvarint(self.data, self.pos)
        value = bytes(self.data[self.pos:self.pos + size - 1]) if size else b""
        self.pos += max(size - 1, 0)
        return value

    def classic_member_tags(self) -> ClassicMembership | None:
        """The tagged fields ending ConsumerGroupMemberMetadataValue: tag 0 is ClassicMemberMetadata."""
        classic = None
        count, self.pos = read_uvarint(self.data, self.pos)
        for _ in range(count):
            tag, self.pos = read_uvarint(self.data, self.pos)
            if tag != 0:
                self.pos = skip_tagged_field(self.data, self.pos)
                continue
            _, self.pos = read_uvarint(self.data, self.pos)  # the field's size
            session_timeout = self.int32()
            protocols = []
            for _ in range(self.count()):
                name = self.string(True) or ""
                protocols.append((name, self.bytes_()))
                self.skip_tags()
            self.skip_tags()
            classic = ClassicMembership(session_timeout, tuple(protocols))
        return classic

    def topic_partitions(self) -> "Assignment":
        result: dict[uuid.UUID, frozenset[int]] = {}
        for _ in range(self.count()):
            topic_id = self.uuid()
            result[topic_id] = frozenset(self.int32() for _ in range(self.count()))
            self.skip_tags()
        return result


def key_version(key: bytes | memoryview) -> int:
    return _I16.unpack_from(key, 0)[0]


def replay(groups: dict[str, ConsumerGroupState], key: bytes | memoryview, value: bytes | memoryview | None) -> str:
    """Apply one consumer-group record to ``groups`` (group id -> state, the groups being
    loaded); returns the record's group id. A group whose metadata record is a tombstone is
    left with no state; its group id maps to None in the caller's bookkeeping."""
    reader = _Reader(key)
    version = reader.int16()
    group_id = reader.string(False) or ""
    member_id = reader.string(False) or "" if version in (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY,
                                                          CURRENT_ASSIGNMENT_KEY) else ""
    if value is None:
        _replay_tombstone(groups, version, group_id, member_id)
        return group_id
    state = groups.get(group_id)
    if state is None:
        state = groups[group_id] = ConsumerGroupState(group_id)
    body = _Reader(value)
    body.int16()  # value version 0
    if version == GROUP_METADATA_KEY:
        state.group_epoch = body.int32()
    elif version == PARTITION_METADATA_KEY:
        metadata = {}
        for _ in range(body.count()):
            topic_id = body.uuid()
            name = body.string(True) or ""
            partitions = body.int32()
            for _ in range(body.count()):  # PartitionMetadata: partition, racks
                body.int32()
                for _ in range(body.count()):
                    body.string(True)
                body.skip_tags()
            body.skip_tags()
            metadata[name] = TopicMetadata(topic_id, name, partitions)
        state.subscription_metadata = metadata
    elif version == MEMBER_METADATA_KEY:
        instance_id = body.string(True, True)
        rack_id = body.string(True, True)
        client_id = body.string(True) or ""
        client_host = body.string(True) or ""
        names = tuple(body.string(True) or "" for _ in range(body.count()))
        regex = body.string(True, True)
        rebalance_timeout = body.int32()
        assignor = body.string(True, True)
        classic = body.classic_member_tags()
        existing = state.members.get(member_id) or ConsumerMember(member_id)
        state.put_member(replace(existing, instance_id=instance_id, rack_id=rack_id, client_id=client_id,
                                 client_host=client_host, subscribed_topic_names=names,
                                 subscribed_topic_regex=regex, rebalance_timeout_ms=rebalance_timeout,
                                 server_assignor=assignor, classic=classic))
    elif version == TARGET_METADATA_KEY:
        state.assignment_epoch = body.int32()
    elif version == TARGET_MEMBER_KEY:
        state.target[member_id] = body.topic_partitions()
    elif version == CURRENT_ASSIGNMENT_KEY:
        epoch, previous, code = body.int32(), body.int32(), body.int8()
        assigned = body.topic_partitions()
        pending = body.topic_partitions()
        existing = state.members.get(member_id) or ConsumerMember(member_id)
        try:
            member_state = MemberState(code)
        except ValueError:
            member_state = MemberState.UNKNOWN
        state.put_member(replace(existing, member_epoch=epoch, previous_member_epoch=previous,
                                 state=member_state, assigned=assigned, pending_revocation=pending))
    return group_id


def _replay_tombstone(groups: dict[str, ConsumerGroupState], version: int, group_id: str, member_id: str) -> None:
    state = groups.get(group_id)
    if state is None:
        return
    if version == GROUP_METADATA_KEY:
        del groups[group_id]
    elif version == MEMBER_METADATA_KEY or version == CURRENT_ASSIGNMENT_KEY:
        member = state.members.get(member_id)
        if member is not None and version == MEMBER_METADATA_KEY:
            state.remove_member(member_id)
        elif member is not None:
            state.put_member(replace(member, assigned={}, pending_revocation={}))
    elif version == TARGET_MEMBER_KEY:
        state.target.pop(member_id, None)
    elif version == PARTITION_METADATA_KEY:
        state.subscription_metadata = {}
