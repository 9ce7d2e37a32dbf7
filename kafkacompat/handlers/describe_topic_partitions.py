"""DescribeTopicPartitions (KIP-966): topics' partitions page by page, from a cursor.

As Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache: the topics asked for (all
topics when none is named) from the cursor's topic on, in name order, at most
min(max.request.partition.size.limit, ResponsePartitionLimit) partitions (at least 1); the next
cursor names the first partition left out. A named topic that does not exist is
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name); a cursor whose topic is
not among the named ones, or whose partition is negative, makes every named topic INVALID_REQUEST.
Unlike Metadata, a partition whose leader is not alive has leader -1 and no error.
"""

from __future__ import annotations

import logging

from kafkacompat.controller.topics import validate_topic_name
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.metadata")

DESCRIBE_TOPIC_PARTITIONS = 75
NO_NEXT_PARTITION = -1


def _topics_from_cursor(ctx: RequestContext, request) -> list[str]:
    cursor_topic = request.cursor.topic_name if request.cursor is not None else ""
    if request.topics:
        names = {topic.name for topic in request.topics if topic.name >= cursor_topic}
        if request.cursor is not None and request.cursor.topic_name not in names:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: {cursor_topic}",
            )
    else:
        # a listing of every topic leaves out those the client may not DESCRIBE (Kafka's Metadata rule)
        names = {topic.name for topic in ctx.metadata.topics() if topic.name >= cursor_topic
                 and ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name, log_denied=False)}
    if request.cursor is not None and request.cursor.partition_index < 0:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"DescribeTopicPartitionsRequest cursor partition must be valid: {request.cursor}",
        )
    return sorted(names)


def _partitions(ctx: RequestContext, topic, start: int, limit: int) -> tuple[list, int]:
    """Partitions start..start+limit of the topic, and the index of the next one (-1: none left)."""
    topic_cls = response_class(DESCRIBE_TOPIC_PARTITIONS).DescribeTopicPartitionsResponseTopic
    partition_cls = topic_cls.DescribeTopicPartitionsResponsePartition
    live = ctx.metadata.brokers()
    upper = min(topic.partitions, start + limit)
    partitions = []
    for index in range(start, upper):
        state = ctx.metadata.partition_state(topic.name, index)
        if state is None:  # being created: Kafka's image has no registration for it yet
            continue
        partitions.append(partition_cls(
            error_code=ErrorCode.NONE, partition_index=index,
            leader_id=state.leader if state.leader in live else -1, leader_epoch=state.leader_epoch,
            replica_nodes=list(state.replicas), isr_nodes=list(state.isr),
            eligible_leader_replicas=[], last_known_elr=[], offline_replicas=list(state.offline_replicas),
        ))
    return partitions, (upper if upper < topic.partitions else NO_NEXT_PARTITION)


def _missing_topic(ctx: RequestContext, topic_cls, name: str, code: int | None = None):
    if code is None:
        try:
            validate_topic_name(name)
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except KafkaError:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return topic_cls(error_code=code, name=name, is_internal=False, partitions=[],
                     topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, name))


def _describe(ctx: RequestContext, request, names: list[str]) -> tuple[list, object | None]:
    response_cls = response_class(DESCRIBE_TOPIC_PARTITIONS)
    topic_cls = response_cls.DescribeTopicPartitionsResponseTopic
    remaining = max(min(ctx.config.max_request_partition_size_limit, request.response_partition_limit), 1)
    cursor = request.cursor
    results = []
    for name in names:
        if remaining == 0:
            return results, response_cls.Cursor(topic_name=name, partition_index=0)
        if request.topics and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            results.append(_missing_topic(ctx, topic_cls, name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        topic = ctx.metadata.topic(name)
        if topic is None:
            if request.topics:  # a listing of all topics leaves out those deleted meanwhile
                results.append(_missing_topic(ctx, topic_cls, name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions, next_index = _partitions(ctx, topic, start, remaining)
        results.append(topic_cls(
            error_code=ErrorCode.NONE, name=name, topic_id=topic.topic_id, is_internal=topic.is_internal,
            partitions=partitions, topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, name),
        ))
        if next_index != NO_NEXT_PARTITION:
            return results, response_cls.Cursor(topic_name=name, partition_index=next_index)
        remaining -= len(partitions)
    return results, None


@handles(DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle_describe_topic_partitions(request, ctx: RequestContext):
    try:
        names = _topics_from_cursor(ctx, request)
    except KafkaError as exc:
        log.info("DescribeTopicPartitions from %s refused: %s", ctx.client_id, exc.message)
        topic_cls = response_class(DESCRIBE_TOPIC_PARTITIONS).DescribeTopicPartitionsResponseTopic
        topics = [topic_cls(error_code=exc.code, name=topic.name, is_internal=False, partitions=[])
                  for topic in request.topics]
        return response_for(DESCRIBE_TOPIC_PARTITIONS, ctx, throttle_time_ms=0, topics=topics, next_cursor=None)
    topics, next_cursor = _describe(ctx, request, names)
    return response_for(DESCRIBE_TOPIC_PARTITIONS, ctx, throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
