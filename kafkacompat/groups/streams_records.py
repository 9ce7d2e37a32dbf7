"""The records of KIP-1071 streams groups in __consumer_offsets, in Kafka's schemas (its
group-coordinator StreamsGroup*Key/Value JSON, the coordinator-key/-value versions with the
``apiKey`` numbers of CoordinatorRecordType), and their replay when a partition is loaded.

Keys and values are encoded as the consumer-group records are (consumer_records.py): an int16
key version then non-flexible strings; a value is version 0, flexible. A null value is a
tombstone.

    key 17  StreamsGroupMetadata                  value: Epoch, MetadataHash int64; tagged 0 ValidatedTopologyEpoch
                                                         (default -1), 1 AssignmentConfigs [Key, Value] (default null)
    key 18  StreamsGroupPartitionMetadata         (Kafka 4.0 only: skipped on replay)
    key 19  StreamsGroupMemberMetadata(member)    value: InstanceId?, RackId?, ClientId, ClientHost,
                                                         RebalanceTimeoutMs, TopologyEpoch, ProcessId,
                                                         UserEndpoint? {Host, Port uint16}, ClientTags [Key, Value]
    key 20  StreamsGroupTargetAssignmentMetadata  value: AssignmentEpoch
    key 21  StreamsGroupTargetAssignmentMember    value: ActiveTasks, StandbyTasks, WarmupTasks
                                                         (each [SubtopologyId, Partitions []int32])
    key 22  StreamsGroupCurrentMemberAssignment   value: MemberEpoch, PreviousMemberEpoch, State int8, ActiveTasks,
                                                         StandbyTasks, WarmupTasks, ActiveTasksPendingRevocation,
                                                         StandbyTasksPendingRevocation, WarmupTasksPendingRevocation
    key 23  StreamsGroupTopology                  value: Epoch, Subtopologies [...]

The coordinator writes the difference between what a group's records were and what they are
now (``changes``), so every change (a member joining, updating, leaving; an epoch bump; a new
target or current assignment; the topology) is written and a removed key gets its tombstone:
the compacted partition converges to the group's state.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import replace
from typing import TYPE_CHECKING

from kafkacompat.groups.consumer_group import MemberState
from kafkacompat.groups.consumer_records import Record, _array_length, _end_struct, _key, _Reader, _value
from kafkacompat.groups.streams_group import (
    CopartitionGroup,
    InternalTopic,
    StreamsGroupState,
    StreamsMember,
    StreamsTopology,
    Subtopology,
)
from kafkacompat.wire.message_runtime import read_uvarint, skip_tagged_field, write_string, write_uvarint

if TYPE_CHECKING:
    from kafkacompat.groups.assignors import Assignment

GROUP_METADATA_KEY = 17
PARTITION_METADATA_KEY = 18
MEMBER_METADATA_KEY = 19
TARGET_METADATA_KEY = 20
TARGET_MEMBER_KEY = 21
CURRENT_ASSIGNMENT_KEY = 22
TOPOLOGY_KEY = 23
STREAMS_KEY_VERSIONS = frozenset(range(17, 24))
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY)

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def tasks_hash(tasks: dict[str, int]) -> int:
    """MetadataHash: a stable int64 of the task counts the topics gave (Kafka hashes the topics'
    metadata; what matters is that a change of the topics changes it across restarts)."""
    text = ";".join(f"{sub}={count}" for sub, count in sorted(tasks.items()))
    return _I64.unpack(hashlib.blake2b(text.encode(), digest_size=8).digest())[0]


# ---- writing ------------------------------------------------------------------------------------


def _strings(buf: bytearray, values: tuple[str, ...] | list[str]) -> None:
    _array_length(buf, len(values))
    for value in values:
        write_string(buf, value, True)


def _key_values(buf: bytearray, pairs: tuple[tuple[str, str], ...]) -> None:
    _array_length(buf, len(pairs))
    for key, value in pairs:
        write_string(buf, key, True)
        write_string(buf, value, True)
        _end_struct(buf)


def _tasks(buf: bytearray, tasks: "Assignment") -> None:
    _array_length(buf, len(tasks))
    for subtopology_id in sorted(tasks):  # type: ignore[type-var]
        partitions = sorted(tasks[subtopology_id])
        write_string(buf, str(subtopology_id), True)
        _array_length(buf, len(partitions))
        for index in partitions:
            buf += _I32.pack(index)
        _end_struct(buf)


def validated_topology_epoch(state: StreamsGroupState) -> int:
    """The topology epoch whose topics were found in a valid configuration, -1 for none (Kafka
    stores it so a loaded group describes as ready before its next heartbeat)."""
    if state.configured is None:
        return state.validated_topology_epoch
    if state.topology is None or not state.configured.ready:
        return -1
    return state.topology.epoch


def group_metadata(state: StreamsGroupState) -> Record:
    buf = _value()
    buf += _I32.pack(state.group_epoch)
    buf += _I64.pack(state.metadata_hash)
    tagged: list[tuple[int, bytearray]] = []
    validated = validated_topology_epoch(state)
    if validated != -1:
        tagged.append((0, bytearray(_I32.pack(validated))))
    if state.assignment_configs:
        configs = bytearray()
        _key_values(configs, state.assignment_configs)
        tagged.append((1, configs))
    write_uvarint(buf, len(tagged))
    for tag, data in tagged:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(data))
        buf += data
    return _key(GROUP_METADATA_KEY, state.group_id), bytes(buf)


def _topic_infos(buf: bytearray, topics: tuple[InternalTopic, ...]) -> None:
    _array_length(buf, len(topics))
    for topic in topics:
        write_string(buf, topic.name, True)
        buf += _I32.pack(topic.partitions)
        buf += _I16.pack(topic.replication_factor)
        _key_values(buf, topic.configs)
        _end_struct(buf)


def _indexes(buf: bytearray, values: tuple[int, ...]) -> None:
    _array_length(buf, len(values))
    for value in values:
        buf += _I16.pack(value)


def topology(group_id: str, value: StreamsTopology) -> Record:
    buf = _value()
    buf += _I32.pack(value.epoch)
    _array_length(buf, len(value.subtopologies))
    for sub in value.subtopologies:
        write_string(buf, sub.subtopology_id, True)
        _strings(buf, sub.source_topics)
        _strings(buf, sub.source_topic_regex)
        _topic_infos(buf, sub.state_changelog_topics)
        _strings(buf, sub.repartition_sink_topics)
        _topic_infos(buf, sub.repartition_source_topics)
        _array_length(buf, len(sub.copartition_groups))
        for group in sub.copartition_groups:
            _indexes(buf, group.source_topics)
            _indexes(buf, group.source_topic_regex)
            _indexes(buf, group.repartition_source_topics)
            _end_struct(buf)
        _end_struct(buf)
    _end_struct(buf)
    return _key(TOPOLOGY_KEY, group_id), bytes(buf)


def member_metadata(group_id: str, member: StreamsMember) -> Record:
    buf = _value()
    write_string(buf, member.instance_id, True)
    write_string(buf, member.rack_id, True)
    write_string(buf, member.client_id, True)
    write_string(buf, member.client_host, True)
    buf += _I32.pack(member.rebalance_timeout_ms)
    buf += _I32.pack(member.topology_epoch)
    write_string(buf, member.process_id, True)
    if member.user_endpoint is None:
        buf += b"\xff"  # a null struct: -1
    else:
        buf += b"\x01"
        write_string(buf, member.user_endpoint[0], True)
        buf += _U16.pack(member.user_endpoint[1])
        _end_struct(buf)
    _key_values(buf, member.client_tags)
    _end_struct(buf)
    return _key(MEMBER_METADATA_KEY, group_id, member.member_id), bytes(buf)


def target_metadata(group_id: str, assignment_epoch: int) -> Record:
    buf = _value()
    buf += _I32.pack(assignment_epoch)
    _end_struct(buf)
    return _key(TARGET_METADATA_KEY, group_id), bytes(buf)


def target_member(group_id: str, member_id: str, active: "Assignment", standby: "Assignment") -> Record:
    buf = _value()
    _tasks(buf, active)
    _tasks(buf, standby)
    _tasks(buf, {})  # warmup tasks: not supported (Kafka 4.2 neither)
    _end_struct(buf)
    return _key(TARGET_MEMBER_KEY, group_id, member_id), bytes(buf)


def current_assignment(group_id: str, member: StreamsMember) -> Record:
    buf = _value()
    buf += _I32.pack(member.member_epoch)
    buf += _I32.pack(member.previous_member_epoch)
    buf += struct.pack(">b", int(member.state))
    _tasks(buf, member.assigned)
    _tasks(buf, member.standby)
    _tasks(buf, {})
    _tasks(buf, member.pending_revocation)
    _tasks(buf, {})  # standby tasks are not revoked first here: they follow the target
    _tasks(buf, {})
    _end_struct(buf)
    return _key(CURRENT_ASSIGNMENT_KEY, group_id, member.member_id), bytes(buf)


def group_records(state: StreamsGroupState) -> dict[bytes, bytes]:
    """Every record describing ``state`` (what its compacted partition keeps), key -> value, in
    Kafka's order: metadata, topology, members, targets, target metadata, current assignments."""
    group_id = state.group_id
    records = [group_metadata(state)]
    if state.topology is not None:
        records.append(topology(group_id, state.topology))
    members = [m for m in state.members.values() if isinstance(m, StreamsMember)]
    records.extend(member_metadata(group_id, m) for m in members)
    for member_id in sorted(set(state.target) | set(state.standby_target)):
        records.append(target_member(group_id, member_id, state.target.get(member_id, {}),
                                     state.standby_target.get(member_id, {})))
    records.append(target_metadata(group_id, state.assignment_epoch))
    records.extend(current_assignment(group_id, m) for m in members)
    return {key: value for key, value in records if value is not None}


def _tombstone_order(key: bytes) -> int:
    """Members' keys first (current assignment, target, member: Kafka's order), the group's last."""
    order = (CURRENT_ASSIGNMENT_KEY, TARGET_MEMBER_KEY, MEMBER_METADATA_KEY, TARGET_METADATA_KEY, TOPOLOGY_KEY,
             PARTITION_METADATA_KEY, GROUP_METADATA_KEY)
    version = _I16.unpack_from(key, 0)[0]
    return order.index(version) if version in order else -1


def changes(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> list[Record]:
    """The records that take the partition from ``before`` to ``after``: the new or changed
    values, then a tombstone for each key that went."""
    written: list[Record] = [(key, value) for key, value in after.items() if before.get(key) != value]
    gone = sorted((key for key in before if key not in after), key=_tombstone_order)
    written.extend((key, None) for key in gone)
    return written


def group_tombstones(state: StreamsGroupState) -> list[Record]:
    """Tombstones for every record the group has, the metadata's last (a deleted group)."""
    keys = set(state.persisted)
    keys.update(_key(version, state.group_id) for version in (GROUP_METADATA_KEY, TOPOLOGY_KEY, TARGET_METADATA_KEY))
    return [(key, None) for key in sorted(keys, key=_tombstone_order)]


# ---- reading ------------------------------------------------------------------------------------


class _StreamsReader(_Reader):
    def int64(self) -> int:
        (value,) = _I64.unpack_from(self.data, self.pos)
        self.pos += 8
        return value

    def uint16(self) -> int:
        (value,) = _U16.unpack_from(self.data, self.pos)
        self.pos += 2
        return value

    def strings(self) -> tuple[str, ...]:
        return tuple(self.string(True) or "" for _ in range(self.count()))

    def key_values(self) -> tuple[tuple[str, str], ...]:
        pairs = []
        for _ in range(self.count()):
            pairs.append((self.string(True) or "", self.string(True) or ""))
            self.skip_tags()
        return tuple(pairs)

    def metadata_tags(self) -> tuple[int, tuple[tuple[str, str], ...]]:
        """StreamsGroupMetadataValue's tagged fields: 0 ValidatedTopologyEpoch, 1 AssignmentConfigs."""
        validated, configs = -1, ()
        count, self.pos = read_uvarint(self.data, self.pos)
        for _ in range(count):
            tag, self.pos = read_uvarint(self.data, self.pos)
            if tag == 0:
                _, self.pos = read_uvarint(self.data, self.pos)
                validated = self.int32()
            elif tag == 1:
                _, self.pos = read_uvarint(self.data, self.pos)
                configs = self.key_values()
            else:
                self.pos = skip_tagged_field(self.data, self.pos)
        return validated, configs

    def tasks(self) -> "Assignment":
        result: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            subtopology_id = self.string(True) or ""
            result[subtopology_id] = frozenset(self.int32() for _ in range(self.count()))
            self.skip_tags()
        return result  # type: ignore[return-value]

    def topic_infos(self) -> tuple[InternalTopic, ...]:
        topics = []
        for _ in range(self.count()):
            name = self.string(True) or ""
            partitions, replication = self.int32(), self.int16()
            topics.append(InternalTopic(name, partitions, replication, self.key_values()))
            self.skip_tags()
        return tuple(topics)

    def indexes(self) -> tuple[int, ...]:
        return tuple(self.int16() for _ in range(self.count()))

    def topology(self) -> StreamsTopology:
        epoch = self.int32()
        subtopologies = []
        for _ in range(self.count()):
            subtopology_id = self.string(True) or ""
            sources, regexes, changelogs = self.strings(), self.strings(), self.topic_infos()
            sinks, repartition_sources = self.strings(), self.topic_infos()
            groups = []
            for _ in range(self.count()):
                groups.append(CopartitionGroup(self.indexes(), self.indexes(), self.indexes()))
                self.skip_tags()
            self.skip_tags()
            subtopologies.append(Subtopology(subtopology_id, sources, regexes, sinks, repartition_sources,
                                             changelogs, tuple(groups)))
        return StreamsTopology(epoch, tuple(subtopologies))


def replay(groups: dict[str, StreamsGroupState], key: bytes | memoryview, value: bytes | memoryview | None) -> str:
    """Apply one streams-group record to ``groups`` (the groups of the partition being loaded);
    returns its group id. A metadata tombstone removes the group."""
    reader = _StreamsReader(key)
    version = reader.int16()
    group_id = reader.string(False) or ""
    member_id = (reader.string(False) or "") if version in _MEMBER_KEYS else ""
    key = bytes(key)
    if value is None:
        _replay_tombstone(groups, version, group_id, member_id, key)
        return group_id
    if version == PARTITION_METADATA_KEY:  # Kafka 4.0 only: the topics are read again at the next heartbeat
        return group_id
    state = groups.get(group_id)
    if state is None:
        state = groups[group_id] = StreamsGroupState(group_id)
    state.persisted[key] = bytes(value)
    body = _StreamsReader(value)
    body.int16()  # value version 0
    if version == GROUP_METADATA_KEY:
        state.group_epoch = body.int32()
        state.metadata_hash = body.int64()
        state.validated_topology_epoch, state.assignment_configs = body.metadata_tags()
    elif version == TOPOLOGY_KEY:
        state.topology = body.topology()
    elif version == MEMBER_METADATA_KEY:
        instance_id, rack_id = body.string(True, True), body.string(True, True)
        client_id, client_host = body.string(True) or "", body.string(True) or ""
        rebalance_timeout, topology_epoch = body.int32(), body.int32()
        process_id = body.string(True) or ""
        endpoint = None
        if body.int8() >= 0:
            endpoint = (body.string(True) or "", body.uint16())
            body.skip_tags()
        tags = body.key_values()
        existing = _member(state, member_id)
        state.put_member(replace(existing, instance_id=instance_id, rack_id=rack_id, client_id=client_id,
                                 client_host=client_host, rebalance_timeout_ms=rebalance_timeout,
                                 topology_epoch=topology_epoch, process_id=process_id, user_endpoint=endpoint,
                                 client_tags=tags))
    elif version == TARGET_METADATA_KEY:
        state.assignment_epoch = body.int32()
    elif version == TARGET_MEMBER_KEY:
        state.target[member_id] = body.tasks()
        state.standby_target[member_id] = body.tasks()
    elif version == CURRENT_ASSIGNMENT_KEY:
        epoch, previous, code = body.int32(), body.int32(), body.int8()
        active, standby, _warmup, pending = body.tasks(), body.tasks(), body.tasks(), body.tasks()
        try:
            member_state = MemberState(code)
        except ValueError:
            member_state = MemberState.UNKNOWN
        state.put_member(replace(_member(state, member_id), member_epoch=epoch, previous_member_epoch=previous,
                                 state=member_state, assigned=active, standby=standby, pending_revocation=pending))
    return group_id


def _member(state: StreamsGroupState, member_id: str) -> StreamsMember:
    existing = state.members.get(member_id)
    return existing if isinstance(existing, StreamsMember) else StreamsMember(member_id)


def _replay_tombstone(groups: dict[str, StreamsGroupState], version: int, group_id: str, member_id: str,
                      key: bytes) -> None:
    state = groups.get(group_id)
    if state is None:
        return
    state.persisted.pop(key, None)
    if version == GROUP_METADATA_KEY:
        del groups[group_id]
    elif version == MEMBER_METADATA_KEY:
        target, standby = state.target.get(member_id), state.standby_target.get(member_id)
        state.remove_member(member_id)  # (drops its target: put back, its own tombstone removes it)
        if target is not None:
            state.target[member_id] = target
        if standby is not None:
            state.standby_target[member_id] = standby
    elif version == CURRENT_ASSIGNMENT_KEY:
        member = state.members.get(member_id)
        if isinstance(member, StreamsMember):
            state.put_member(replace(member, assigned={}, standby={}, pending_revocation={}))
    elif version == TARGET_MEMBER_KEY:
        state.target.pop(member_id, None)
        state.standby_target.pop(member_id, None)
    elif version == TOPOLOGY_KEY:
        state.topology = None
