"""OffsetForLeaderEpoch (v0-4): the end offset of a leader epoch, from the partition's leader
epoch cache (replication/leader_epoch.py). Consumers use it to detect log truncation after a
leader change (KIP-320); followers may use it to find where to truncate (KIP-101/279).

Own codec (small): kafka-python's schema only covers v2-4.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafkacompat.handlers.registry import RequestContext, handles
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.produce import DECODE_SLIPS, INT32, WireDecodeError, make_reader, make_writer

OFFSET_FOR_LEADER_EPOCH = 23
FIRST_FLEXIBLE = 4
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2

_PARTITION_V0 = struct.Struct(">ii")  # partition, leader_epoch
_PARTITION_V2 = struct.Struct(">iii")  # partition, current_leader_epoch, leader_epoch
_RESULT_V0 = struct.Struct(">hiq")  # error_code, partition, end_offset
_RESULT_V1 = struct.Struct(">hiiq")  # error_code, partition, leader_epoch, end_offset


@dataclass(slots=True)
class EpochRequestPartition:
    partition: int
    current_leader_epoch: int
    leader_epoch: int


@dataclass(slots=True)
class EpochRequestTopic:
    topic: str
    partitions: list[EpochRequestPartition]


@dataclass(slots=True)
class OffsetForLeaderEpochRequestData:
    replica_id: int = DEBUGGING_REPLICA_ID
    topics: list[EpochRequestTopic] = field(default_factory=list)


@dataclass(slots=True)
class EpochEndOffset:
    partition: int
    error_code: int = 0
    leader_epoch: int = -1
    end_offset: int = -1


def decode_request(version: int, body: memoryview) -> OffsetForLeaderEpochRequestData:
    reader = make_reader(body, version >= FIRST_FLEXIBLE)
    try:
        replica_id = reader.int32() if version >= 3 else DEBUGGING_REPLICA_ID
        topics = []
        for _ in range(reader.array_length()):
            name = reader.string()
            partitions = []
            for _ in range(reader.array_length()):
                if version >= 2:
                    partitions.append(EpochRequestPartition(*reader.unpack(_PARTITION_V2)))
                else:
                    index, epoch = reader.unpack(_PARTITION_V0)
                    partitions.append(EpochRequestPartition(index, -1, epoch))
                reader.skip_tagged_fields()
            reader.skip_tagged_fields()
            topics.append(EpochRequestTopic(name, partitions))
        reader.skip_tagged_fields()
    except DECODE_SLIPS as exc:
        raise WireDecodeError(f"malformed OffsetForLeaderEpochRequest v{version}: {exc}") from None
    return OffsetForLeaderEpochRequestData(replica_id, topics)


def encode_request(request: OffsetForLeaderEpochRequestData, version: int) -> bytes:
    """The follower/test side."""
    out = make_writer(version >= FIRST_FLEXIBLE)
    if version >= 3:
        out += INT32.pack(request.replica_id)
    out.array_length(len(request.topics))
    for topic in request.topics:
        out.string(topic.topic)
        out.array_length(len(topic.partitions))
        for p in topic.partitions:
            if version >= 2:
                out += _PARTITION_V2.pack(p.partition, p.current_leader_epoch, p.leader_epoch)
            else:
                out += _PARTITION_V0.pack(p.partition, p.leader_epoch)
            out.empty_tagged_fields()
        out.empty_tagged_fields()
    out.empty_tagged_fields()
    return bytes(out)


def encode_response(topics: list[tuple[str, list[EpochEndOffset]]], version: int) -> bytes:
    out = make_writer(version >= FIRST_FLEXIBLE)
    if version >= 2:
        out += INT32.pack(0)  # throttle_time_ms
    out.array_length(len(topics))
    for name, partitions in topics:
        out.string(name)
        out.array_length(len(partitions))
        for p in partitions:
            if version >= 1:
                out += _RESULT_V1.pack(p.error_code, p.partition, p.leader_epoch, p.end_offset)
            else:
                out += _RESULT_V0.pack(p.error_code, p.partition, p.end_offset)
            out.empty_tagged_fields()
        out.empty_tagged_fields()
    out.empty_tagged_fields()
    return bytes(out)


def decode_response(body: memoryview, version: int) -> list[tuple[str, list[EpochEndOffset]]]:
    """The follower/test side."""
    reader = make_reader(body, version >= FIRST_FLEXIBLE)
    if version >= 2:
        reader.int32()
    topics = []
    for _ in range(reader.array_length()):
        name = reader.string()
        partitions = []
        for _ in range(reader.array_length()):
            if version >= 1:
                code, index, epoch, end = reader.unpack(_RESULT_V1)
            else:
                (code, index, end), epoch = reader.unpack(_RESULT_V0), -1
            partitions.append(EpochEndOffset(index, code, epoch, end))
            reader.skip_tagged_fields()
        reader.skip_tagged_fields()
        topics.append((name, partitions))
    return topics


@dataclass(slots=True)
class _Response:
    topics: list[tuple[str, list[EpochEndOffset]]]


def _encode(response: _Response, version: int) -> bytes:
    return encode_response(response.topics, version)


@handles(OFFSET_FOR_LEADER_EPOCH, 0, 4, decode=decode_request, encode=_encode)
async def handle_offset_for_leader_epoch(request: OffsetForLeaderEpochRequestData, ctx: RequestContext) -> _Response:
    topics = []
    for topic in request.topics:
        topics.append((topic.topic, [_end_offset(ctx, request, topic.topic, p) for p in topic.partitions]))
    return _Response(topics)


def _end_offset(ctx: RequestContext, request: OffsetForLeaderEpochRequestData, topic: str,
                wanted: EpochRequestPartition) -> EpochEndOffset:
    result = EpochEndOffset(wanted.partition)
    partition = ctx.replicas.partition(topic, wanted.partition)
    if partition is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return result
    try:
        check_current_leader_epoch(partition, wanted.current_leader_epoch)
        if request.replica_id != DEBUGGING_REPLICA_ID:
            partition.check_leader()  # Kafka: only the debugging replica id may ask a follower
    except KafkaError as exc:
        result.error_code = exc.code
        return result
    result.leader_epoch, result.end_offset = partition.end_offset_for_epoch(wanted.leader_epoch)
    return result


def check_current_leader_epoch(partition, current_leader_epoch: int) -> None:
    """Fetch, ListOffsets and OffsetForLeaderEpoch: the client's view of the leader epoch."""
    if current_leader_epoch < 0:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"leader epoch {current_leader_epoch} of {partition} is older than {partition.leader_epoch}")
    if current_leader_epoch > partition.leader_epoch:
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                         f"leader epoch {current_leader_epoch} of {partition} is newer than {partition.leader_epoch}")
