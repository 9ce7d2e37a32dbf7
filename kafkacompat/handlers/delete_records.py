"""DeleteRecords v0-2: move partitions' log start offsets forward (Kafka's
KafkaApis.handleDeleteRecordsRequest, ReplicaManager.deleteRecords, Partition.
deleteRecordsOnLeader and DelayedDeleteRecords).

Per partition, in Kafka's order: a partition the metadata does not know is
UNKNOWN_TOPIC_OR_PARTITION; an internal topic INVALID_TOPIC_EXCEPTION; one this broker does not
host or lead NOT_LEADER_OR_FOLLOWER; a cleanup.policy without "delete" POLICY_VIOLATION; an
offset that is negative (other than -1, the high watermark) or above the high watermark
OFFSET_OUT_OF_RANGE. A partition named twice is answered once, for the last offset (Kafka keys
the request by partition). The new log start offsets are checkpointed before the answer, so a
crash cannot resurrect deleted records. The answer then waits, up to timeout_ms, until the low
watermark (the smallest log start offset of the leader and its live followers) reaches the
requested offset; a partition still behind then gets REQUEST_TIMED_OUT with the low watermark
it had when its deletion was done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from kafkacompat.controller.topics import INTERNAL_TOPICS
from kafkacompat.handlers.registry import RequestContext, handles, response_for
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
    moved: bool = False  # the log start offset went up

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


def _delete_locally(ctx: RequestContext, deletion: Deletion, live_brokers: set[int]) -> None:
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
    deletion.partition = partition
    start_before = partition.log_start_offset
    try:
        deletion.required_offset = partition.delete_records(deletion.offset)
        deletion.low_watermark = partition.low_watermark(live_brokers)
        deletion.pending = deletion.low_watermark < deletion.required_offset
    except KafkaError as exc:
        log.debug("DeleteRecords of %s to %d for %s failed: %s", partition, deletion.offset, ctx.client_id, exc)
        deletion.fail(exc.code)
    except OSError as exc:  # removing a segment's files failed (the log start has moved all the same)
        log.error("DeleteRecords of %s to %d failed: %s", partition, deletion.offset, exc)
        deletion.fail(ErrorCode.KAFKA_STORAGE_ERROR)
    deletion.moved = partition.log_start_offset > start_before


def _checkpoint(ctx: RequestContext, moved: list[Deletion]) -> None:
    """Kafka checkpoints log start offsets only periodically; after a crash a stale checkpoint
    would bring deleted records back, so the answer waits for the file."""
    try:
        ctx.replicas.checkpoint_log_start_offsets()
    except OSError as exc:
        log.error("Could not checkpoint log start offsets after DeleteRecords: %s", exc)
        for deletion in moved:
            deletion.fail(ErrorCode.KAFKA_STORAGE_ERROR)  # deleted, but not durably so


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
        _delete_locally(ctx, deletion, live_brokers)
    moved = [d for d in deletions if d.moved]
    if moved:
        _checkpoint(ctx, moved)
    if any(d.pending for d in deletions):
        await _wait_for_low_watermarks(ctx, deletions, request.timeout_ms)
    return _response(ctx, deletions)
