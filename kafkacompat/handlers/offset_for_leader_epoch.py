"""OffsetForLeaderEpoch (v0-4): the end offset of a leader epoch, from the partition's leader
epoch cache (replication/leader_epoch.py). Consumers use it to detect log truncation after a
leader change (KIP-320); followers may use it to find where to truncate (KIP-101/279).
"""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

OFFSET_FOR_LEADER_EPOCH = 23
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


@handles(OFFSET_FOR_LEADER_EPOCH, 0, 4)
async def handle_offset_for_leader_epoch(request, ctx: RequestContext):
    topic_cls = response_class(OFFSET_FOR_LEADER_EPOCH).OffsetForLeaderTopicResult
    result_cls = topic_cls.EpochEndOffset
    # Kafka: a broker (CLUSTER_ACTION) may ask about any topic, a client about those it may DESCRIBE.
    replica = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION, log_denied=False)
    topics = [topic_cls(topic=topic.topic, partitions=[
        _end_offset(ctx, request, result_cls, topic.topic, p) for p in topic.partitions]
        if replica or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic) else [
        result_cls(partition=p.partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic.partitions])
        for topic in request.topics]
    return response_for(OFFSET_FOR_LEADER_EPOCH, ctx, throttle_time_ms=0, topics=topics)


def _end_offset(ctx: RequestContext, request, result_cls, topic: str, wanted):
    result = result_cls(partition=wanted.partition)
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
