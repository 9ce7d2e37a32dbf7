"""ListOffsets: the offset for a timestamp, or for one of Kafka's special timestamps.

Follows ReplicaManager.fetchOffset / Partition.fetchOffsetForTimestamp / UnifiedLog.
fetchOffsetByTimestamp: a consumer (replica_id -1) sees offsets up to the high watermark, or up
to the last stable offset with read_committed; a by-timestamp or max-timestamp answer at or past
that bound is "not found" (offset -1, timestamp -1). Special timestamps newer than the request
version, and negative timestamps Kafka does not define, get UNSUPPORTED_VERSION. There is no
tiered storage here, so LATEST_TIERED and EARLIEST_PENDING_UPLOAD find nothing (-1) and
EARLIEST_LOCAL is the log start offset.

v0 (Sarama before 0.10.1, kafka-python at api_version 0.10.0 and older) answers the legacy way,
UnifiedLog.legacyFetchOffsetsBefore: up to max_num_offsets segment base offsets (and the log end)
whose segment was last modified at or before the timestamp, newest first.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.replication.partition import Partition
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

LIST_OFFSETS = 2

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6

# The first request version that may carry each special timestamp (KIP-734, KIP-405, KIP-1005, KIP-1023).
SPECIAL_TIMESTAMP_MIN_VERSION = {
    LATEST_TIMESTAMP: 1,
    EARLIEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}

CONSUMER_REPLICA_ID = -1
READ_COMMITTED = 1
UNKNOWN = -1  # offset, timestamp and leader epoch when there is nothing to report


@dataclass(frozen=True)
class Found:
    offset: int = UNKNOWN
    timestamp: int = UNKNOWN
    leader_epoch: int = UNKNOWN


NOT_FOUND = Found()


def _timestamp_unsupported(timestamp: int, version: int) -> bool:
    return timestamp < 0 and version < SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15)


DEBUGGING_REPLICA_ID = -2


def _check_leader_epoch(partition: Partition, current_leader_epoch: int) -> None:
    """Kafka's localLogWithEpochOrThrow: the client's view of the leader epoch must match ours."""
    if current_leader_epoch < 0:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise KafkaError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{partition}: the request's leader epoch {current_leader_epoch} is older than {partition.leader_epoch}",
        )
    if current_leader_epoch > partition.leader_epoch:
        raise KafkaError(
            ErrorCode.UNKNOWN_LEADER_EPOCH,
            f"{partition}: the request's leader epoch {current_leader_epoch} is newer than {partition.leader_epoch}",
        )


def _last_fetchable_offset(partition: Partition, replica_id: int, isolation_level: int) -> int:
    if replica_id != CONSUMER_REPLICA_ID:
        return partition.log_end_offset
    if isolation_level == READ_COMMITTED:
        return partition.last_stable_offset
    return partition.high_watermark


def _earliest(partition: Partition) -> Found:
    # Kafka reports the epoch of the first leader-epoch-cache entry, which exists once anything was
    # written; on this single-leader broker that is the partition's epoch.
    has_data = partition.log_end_offset > 0
    return Found(partition.log_start_offset, UNKNOWN, partition.leader_epoch if has_data else UNKNOWN)


def _max_timestamp(partition: Partition) -> Found:
    found = partition.log.max_timestamp_and_offset()
    if found is None:
        return NOT_FOUND
    timestamp, offset = found
    if timestamp < 0 or offset < 0:
        return NOT_FOUND
    return Found(offset, timestamp, partition.leader_epoch)


def _by_timestamp(partition: Partition, timestamp: int) -> Found:
    found = partition.log.offset_for_timestamp(timestamp)
    if found is None:
        return NOT_FOUND
    offset, found_timestamp = found
    return Found(offset, found_timestamp, partition.leader_epoch)


def find_offset(partition: Partition, timestamp: int, last_fetchable: int) -> Found:
    if timestamp == LATEST_TIMESTAMP:
        return Found(last_fetchable, UNKNOWN, partition.leader_epoch)
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return _earliest(partition)
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return NOT_FOUND
    found = _max_timestamp(partition) if timestamp == MAX_TIMESTAMP else _by_timestamp(partition, timestamp)
    if found.offset >= last_fetchable:
        return NOT_FOUND  # not yet visible to this reader: Kafka answers "none" without an error
    return found


def _partition_result(partition_cls, index: int, code: int, found: Found = NOT_FOUND):
    return partition_cls(
        partition_index=index, error_code=code, timestamp=found.timestamp, offset=found.offset,
        leader_epoch=found.leader_epoch,
    )


def _list_partition(ctx: RequestContext, request, topic_name: str, wanted, partition_cls):
    index = wanted.partition_index
    if _timestamp_unsupported(wanted.timestamp, ctx.version):
        return _partition_result(partition_cls, index, ErrorCode.UNSUPPORTED_VERSION)
    partition = ctx.replicas.partition(topic_name, index)
    if partition is None:
        return _partition_result(partition_cls, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        _check_leader_epoch(partition, wanted.current_leader_epoch)
        if request.replica_id != DEBUGGING_REPLICA_ID:
            partition.check_leader()
    except KafkaError as exc:
        return _partition_result(partition_cls, index, exc.code)
    last_fetchable = _last_fetchable_offset(partition, request.replica_id, request.isolation_level)
    found = find_offset(partition, wanted.timestamp, last_fetchable)
    if ctx.version < 4:  # no leader epoch before v4 (and the field is not ignorable)
        found = Found(found.offset, found.timestamp)
    return _partition_result(partition_cls, index, ErrorCode.NONE, found)


def _duplicate_partitions(request) -> set[tuple[str, int]]:
    seen: set[tuple[str, int]] = set()
    duplicates: set[tuple[str, int]] = set()
    for topic in request.topics:
        for wanted in topic.partitions:
            key = (topic.name, wanted.partition_index)
            (duplicates if key in seen else seen).add(key)
    return duplicates


def legacy_offsets_before(partition: Partition, timestamp: int, max_num_offsets: int, *, from_consumer: bool) -> list[int]:
    """Kafka's legacyFetchOffsetsBefore (ListOffsets v0): (offset, last modified ms) for each segment
    and, when the active segment holds data, the log end offset "now"; the offsets from the newest
    entry modified at or before ``timestamp`` backwards, at most ``max_num_offsets``, descending.
    A consumer never sees an offset above the high watermark."""
    log = partition.log
    segments = log.segments()
    entries = [(max(segment.base_offset, log.log_start_offset), int(os.stat(segment.log_path).st_mtime * 1000))
               for segment in segments]
    if segments[-1].size > 0:
        entries.append((log.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST_TIMESTAMP:
        start = len(entries) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = next((i for i in range(len(entries) - 1, -1, -1) if entries[i][1] <= timestamp), -1)
    offsets = sorted((entries[i][0] for i in range(start, start - min(max_num_offsets, start + 1), -1)), reverse=True)
    if from_consumer:
        high_watermark = partition.high_watermark
        if any(offset > high_watermark for offset in offsets):
            offsets = [high_watermark] + [offset for offset in offsets if offset <= high_watermark]
    return offsets


def _list_partition_v0(ctx: RequestContext, request, topic_name: str, wanted, partition_cls):
    index = wanted.partition_index
    partition = ctx.replicas.partition(topic_name, index)
    if partition is None:
        return partition_cls(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, old_style_offsets=[])
    try:
        if request.replica_id != DEBUGGING_REPLICA_ID:
            partition.check_leader()
    except KafkaError as exc:
        return partition_cls(partition_index=index, error_code=exc.code, old_style_offsets=[])
    offsets = legacy_offsets_before(partition, wanted.timestamp, wanted.max_num_offsets,
                                    from_consumer=request.replica_id == CONSUMER_REPLICA_ID)
    return partition_cls(partition_index=index, error_code=ErrorCode.NONE, old_style_offsets=offsets)


@handles(LIST_OFFSETS, 0, 11)
async def handle_list_offsets(request, ctx: RequestContext):
    topic_cls = response_class(LIST_OFFSETS).ListOffsetsTopicResponse
    partition_cls = topic_cls.ListOffsetsPartitionResponse
    duplicates = _duplicate_partitions(request)
    answered: set[tuple[str, int]] = set()
    topics = []
    for topic in request.topics:
        partitions = []
        described = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for wanted in topic.partitions:
            key = (topic.name, wanted.partition_index)
            if key in answered:
                continue  # Kafka answers a partition named twice once, with INVALID_REQUEST
            answered.add(key)
            if not described:
                partitions.append(_partition_result(partition_cls, wanted.partition_index,
                                                    ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif key in duplicates:
                partitions.append(_partition_result(partition_cls, wanted.partition_index, ErrorCode.INVALID_REQUEST))
            elif ctx.version == 0:
                partitions.append(_list_partition_v0(ctx, request, topic.name, wanted, partition_cls))
            else:
                partitions.append(_list_partition(ctx, request, topic.name, wanted, partition_cls))
        if partitions:
            topics.append(topic_cls(name=topic.name, partitions=partitions))
    return response_for(LIST_OFFSETS, ctx, throttle_time_ms=0, topics=topics)
