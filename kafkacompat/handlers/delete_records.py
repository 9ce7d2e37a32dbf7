"""DeleteRecords v0-2: move partitions' log start offsets forward (Kafka's
KafkaApis.handleDeleteRecordsRequest, ReplicaManager.deleteRecords, Partition.
deleteRecordsOnLeader and DelayedDeleteRecords).

Per partition, in Kafka's order: a partition the metadata does not know is
UNKNOWN_TOPIC_OR_PARTITION; an internal topic INVALID_TOPIC_EXCEPTION; one this broker does not
host or lead NOT_LEADER_OR_FOLLOWER; a cleanup.policy without "delete" POLICY_VIOLATION; an
offset that is negative (other than -1, the high watermark) or above the high watermark
OFFSET_OUT_OF_RANGE. A partition named twice is answered once, for the last offset (Kafka keys
the request by partition). The new log start offsets are checkpointed before they are set, so
a crash cannot resurrect deleted records, and a checkpoint that cannot be written (a full disk)
fails those partitions with KAFKA_STORAGE_ERROR and moves nothing. The answer then waits, up to
timeout_ms, until the low watermark (the smallest log start offset of the leader and its live
followers) reaches the requested offset; a partition still behind then gets REQUEST_TIMED_OUT
with the low watermark it had when its deletion was done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from kafkacompat.controller.topics import INTERNAL_TOPICS
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.replication.partition import Partition
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.delete_records")

DELETE_RECORDS = 21
INVALID_LOW_WATERMARK = -1


@dataclass(slots=True)
class Deletion:
    """One partition of the request and what becomes of it (Kafka's DeleteRecordsPartitionStatus)."""

    topic: str
    index: int
    offset: int
    partition: Partition | None = None
    required_offset: int = -1  # the low watermark to wait for, once the deletion is done
    error_code: int = ErrorCode.NONE
    low_watermark: int = INVALID_LOW_WATERMARK
    pending: bool = False

    def fail(self, code: int) -> None:
        self.error_code, self.low_watermark, self.pending = code, INVALID_LOW_WATERMARK, False


def _requested(request) -> list[Deletion]:
    """One Deletion per partition, in the order first named; the last offset named wins."""
    by_key: dict[tuple[str, int], Deletion] = {}
    for topic in request.topics or []:
        for wanted in topic.partitions or []:
            key = (topic.name, wanted.partition_index)
            if key in by_key:
                by_key[key].offset = wanted.offset
            else:
                by_key[key] = Deletion(topic.name, wanted.partition_index, wanted.offset)
    return list(by_key.values())


def _known_to_metadata(ctx: RequestContext, topic: str, index: int) -> bool:
    info = ctx.metadata.topic(topic)
    return info is not None and 0 <= index < info.partitions


def _check_locally(ctx: RequestContext, deletion: Deletion) -> None:
    """Kafka's checks, in its order; a deletion that passes them has its partition and the
    offset its log start is to reach."""
    if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, deletion.topic):
        deletion.fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return
    if not _known_to_metadata(ctx, deletion.topic, deletion.index):
        deletion.fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return
    if deletion.topic in INTERNAL_TOPICS:
        deletion.fail(ErrorCode.INVALID_TOPIC_EXCEPTION)
        return
    partition = ctx.replicas.partition(deletion.topic, deletion.index)
    if partition is None:
        deletion.fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # the topic exists; this broker has no replica
        return
    try:
        deletion.required_offset = partition.records_deletion_offset(deletion.offset)
    except KafkaError as exc:
        log.debug("DeleteRecords of %s to %d for %s failed: %s", partition, deletion.offset, ctx.client_id, exc)
        deletion.fail(exc.code)
        return
    deletion.partition = partition


def _checkpoint_first(ctx: RequestContext, accepted: list[Deletion]) -> list[Deletion]:
    """Kafka checkpoints log start offsets only periodically; after a crash a stale checkpoint
    would bring deleted records back, so the new offsets are written before they are set. When
    the file cannot be written (a full or failing disk) those deletions fail with
    KAFKA_STORAGE_ERROR and nothing moves. Returns the deletions to carry out."""
    moving = {(d.topic, d.index): d.required_offset for d in accepted
              if d.partition is not None and d.required_offset > d.partition.log_start_offset}
    if not moving:
        return accepted
    try:
        ctx.replicas.checkpoint_log_start_offsets(moving)
    except OSError as exc:
        log.error("DeleteRecords of %s not done: the log start offsets could not be checkpointed (%s); "
                  "retry once the data dir can be written", ", ".join(f"{t}-{i}" for t, i in moving), exc)
        for deletion in accepted:
            if (deletion.topic, deletion.index) in moving:
                deletion.fail(ErrorCode.KAFKA_STORAGE_ERROR)
        return [d for d in accepted if (d.topic, d.index) not in moving]
    return accepted


def _delete_locally(deletion: Deletion, live_brokers: set[int]) -> None:
    partition = deletion.partition
    assert partition is not None
    try:
        partition.advance_log_start_offset(deletion.required_offset)
        deletion.low_watermark = partition.low_watermark(live_brokers)
        deletion.pending = deletion.low_watermark < deletion.required_offset
    except KafkaError as exc:
        deletion.fail(exc.code)
    except OSError as exc:  # removing a segment's files failed (the log start has moved all the same)
        log.error("DeleteRecords of %s to %d failed: %s", partition, deletion.offset, exc)
        deletion.fail(ErrorCode.KAFKA_STORAGE_ERROR)


def _check_pending(ctx: RequestContext, pending: list[Deletion], live_brokers: set[int]) -> list[Deletion]:
    """DelayedDeleteRecords.tryComplete: settle the deletions whose low watermark caught up or
    whose partition went away; returns those still waiting."""
    waiting = []
    for deletion in pending:
        partition = deletion.partition
        if ctx.replicas.partition(deletion.topic, deletion.index) is not partition:
            deletion.fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        status = partition.low_watermark_status(deletion.required_offset, live_brokers)
        if status is None:
            waiting.append(deletion)
        else:
            deletion.error_code, deletion.low_watermark = status
            deletion.pending = False
    return waiting


async def _wait_for_low_watermarks(ctx: RequestContext, deletions: list[Deletion], timeout_ms: int) -> None:
    """Until every pending deletion settles or the timeout passes; partitions wake the wait on
    every change that can move a low watermark (a follower's fetch, leadership, ISR)."""
    waiting = [d for d in deletions if d.pending]
    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        while True:
            waiting = _check_pending(ctx, waiting, set(ctx.metadata.brokers()))
            if not waiting:
                return
            changed = trio.Event()
            for deletion in waiting:
                deletion.partition.add_waiter(changed)
            try:
                await changed.wait()
            finally:
                for deletion in waiting:
                    deletion.partition.remove_waiter(changed)
    for deletion in waiting:
        deletion.error_code = ErrorCode.REQUEST_TIMED_OUT  # the low watermark stays the one it had


def _response(ctx: RequestContext, deletions: list[Deletion]):
    topic_cls = response_class(DELETE_RECORDS).DeleteRecordsTopicResult
    partition_cls = topic_cls.DeleteRecordsPartitionResult
    by_topic: dict[str, list] = {}
    for d in deletions:
        by_topic.setdefault(d.topic, []).append(
            partition_cls(partition_index=d.index, low_watermark=d.low_watermark, error_code=d.error_code))
    topics = [topic_cls(name=name, partitions=partitions) for name, partitions in by_topic.items()]
    return response_for(DELETE_RECORDS, ctx, throttle_time_ms=0, topics=topics)


@handles(DELETE_RECORDS, 0, 2)
async def handle_delete_records(request, ctx: RequestContext):
    deletions = _requested(request)
    live_brokers = set(ctx.metadata.brokers())
    for deletion in deletions:
        _check_locally(ctx, deletion)
    for deletion in _checkpoint_first(ctx, [d for d in deletions if d.partition is not None]):
        _delete_locally(deletion, live_brokers)
    if any(d.pending for d in deletions):
        await _wait_for_low_watermarks(ctx, deletions, request.timeout_ms)
    return _response(ctx, deletions)
