"""Metadata: brokers, controller, topics with partition leaders; auto-creates topics where allowed."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from kafkacompat.controller.state import PartitionState
from kafkacompat.controller.topics import TopicInfo, validate_topic_name
from kafkacompat.handlers.cluster import OPERATIONS_OMITTED, cluster_authorized_operations
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

METADATA = 3


def _requested_topics(request, version: int) -> list | None:
    """None means every topic: a null list (v1+) or, in v0, an empty one."""
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return None
    return topics


async def _resolve(
    ctx: RequestContext, name: str | None, topic_id, allow_auto_create: bool
) -> tuple[TopicInfo | None, int, str | None]:
    metadata = ctx.metadata
    if not name and topic_id is not None and topic_id.int != 0:
        topic = metadata.topic_by_id(topic_id)
        return topic, (ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_ID), None
    topic = metadata.topic(name)
    if topic is not None:
        return topic, ErrorCode.NONE, name
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return None, exc.code, name
    if ctx.config.auto_create_topics_enable and allow_auto_create and not metadata.colliding_topic(name):
        if not (ctx.authorize_cluster(AclOperation.CREATE, log_denied=False) or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)):
            return None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, name
        try:
            return await ctx.admin.auto_create_topic(name), ErrorCode.NONE, name
        except KafkaError as exc:
            return None, exc.code, name
    return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name


# Per MetadataView (one per broker): (topic, partition) -> (its state, leader alive, its entry).
_ENTRIES: "WeakKeyDictionary[object, dict[tuple[str, int], tuple[PartitionState | None, bool, object]]]" = (
    WeakKeyDictionary())


def topic_metadata(ctx: RequestContext, topic: TopicInfo, include_operations: bool, error_code: int = 0):
    cls = response_class(METADATA).MetadataResponseTopic
    partition_cls = cls.MetadataResponsePartition
    live = ctx.metadata.brokers()
    entries = _entries_of(ctx.metadata)
    name, partition_state = topic.name, ctx.metadata.partition_state
    partitions = []
    for index in range(topic.partitions):
        # An entry is rebuilt only when its state is another object (every view makes a new one
        # on any change: leader, epochs, replicas, ISR, offline replicas) or its leader's
        # liveness changed; 10,000 partitions are otherwise 10,000 objects per all-topics request.
        state = partition_state(name, index)
        alive = state is not None and state.leader in live
        cached = entries.get((name, index))
        if cached is None or cached[0] is not state or cached[1] != alive:
            cached = entries[(name, index)] = (state, alive, _partition_from_state(partition_cls, index, state, alive))
        partitions.append(cached[2])
    return cls(
        error_code=error_code, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=(ctx.authorized_operations(ResourceType.TOPIC, topic.name) if include_operations
                                     else OPERATIONS_OMITTED),
    )


def _entries_of(metadata: object) -> dict:
    entries = _ENTRIES.get(metadata)
    if entries is None:
        entries = _ENTRIES[metadata] = {}
    return entries


def _forget_deleted_topics(metadata: object, topics: list[TopicInfo]) -> None:
    """Drop the entries of topics gone (or shrunk) once they outnumber the live ones."""
    entries = _entries_of(metadata)
    if len(entries) > 2 * sum(topic.partitions for topic in topics) + 1000:
        live = {(topic.name, index) for topic in topics for index in range(topic.partitions)}
        for key in [key for key in entries if key not in live]:
            del entries[key]


def _partition_from_state(partition_cls, index: int, state: PartitionState | None, leader_alive: bool):
    """A partition as the controller's state says: leader, leader epoch, replicas, ISR and the
    replicas on brokers that are not alive. A partition without a live leader is
    LEADER_NOT_AVAILABLE with leader -1, as Kafka's MetadataCache answers."""
    if state is None:
        return partition_cls(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index, leader_id=-1, leader_epoch=-1,
            replica_nodes=[], isr_nodes=[], offline_replicas=[],
        )
    return partition_cls(
        error_code=ErrorCode.NONE if leader_alive else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
        leader_id=state.leader if leader_alive else -1, leader_epoch=state.leader_epoch,
        replica_nodes=list(state.replicas), isr_nodes=list(state.isr),
        offline_replicas=list(state.offline_replicas),
    )


def broker_list(ctx: RequestContext) -> list:
    cls = response_class(METADATA).MetadataResponseBroker
    listener = ctx.listener_name
    return [cls(node_id=b.broker_id, host=host, port=port, rack=b.rack)
            for b in sorted(ctx.metadata.brokers().values(), key=lambda b: b.broker_id)
            for host, port in [b.address(listener)]]


def _describe_denied(ctx: RequestContext, wanted):
    """A requested topic the client may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED whether it exists
    or not (Kafka does not disclose it), with the name asked for, or only the id when asked by id
    (ids are not secret). An unknown id is UNKNOWN_TOPIC_ID whoever asks."""
    cls = response_class(METADATA).MetadataResponseTopic
    if wanted.name:
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, wanted.name):
            return None
        return cls(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name, is_internal=False, partitions=[])
    known = ctx.metadata.topic_by_id(wanted.topic_id) if wanted.topic_id is not None else None
    if known is None or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, known.name):
        return None
    return cls(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=wanted.topic_id,
               is_internal=False, partitions=[])


@handles(METADATA, 0, 13)
async def handle_metadata(request, ctx: RequestContext):
    topic_cls = response_class(METADATA).MetadataResponseTopic
    requested = _requested_topics(request, ctx.version)
    # allow_auto_topic_creation exists from v4; older clients always allowed it.
    allow_auto_create = ctx.version < 4 or bool(request.allow_auto_topic_creation)
    include_topic_ops = ctx.version >= 8 and bool(request.include_topic_authorized_operations)
    include_cluster_ops = 8 <= ctx.version <= 10 and bool(request.include_cluster_authorized_operations)
    topics = []
    if requested is None:
        # Topics the client may not DESCRIBE are left out (Kafka logs those denials at debug only).
        every_topic = ctx.metadata.topics()
        topics = [topic_metadata(ctx, t, include_topic_ops) for t in every_topic
                  if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name, log_denied=False)]
        _forget_deleted_topics(ctx.metadata, every_topic)
    else:
        for wanted in requested:
            denied = _describe_denied(ctx, wanted)
            if denied is not None:
                topics.append(denied)
                continue
            topic, error, name = await _resolve(ctx, wanted.name, wanted.topic_id, allow_auto_create)
            if topic is not None:
                topics.append(topic_metadata(ctx, topic, include_topic_ops))
            else:
                topics.append(topic_cls(
                    error_code=error, name=name, topic_id=wanted.topic_id, is_internal=False, partitions=[],
                ))
    return response_for(
        METADATA, ctx, throttle_time_ms=0, brokers=broker_list(ctx), cluster_id=ctx.metadata.cluster_id,
        controller_id=ctx.metadata.controller_id, topics=topics,
        cluster_authorized_operations=(cluster_authorized_operations(ctx) if include_cluster_ops
                                       else OPERATIONS_OMITTED),
    )
