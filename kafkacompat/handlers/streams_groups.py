"""KIP-1071 streams group APIs: StreamsGroupHeartbeat and StreamsGroupDescribe. The work is in
kafkacompat.groups.streams_coordinator; this module converts the wire messages and creates the
internal topics (repartition and changelog) a heartbeat finds missing, as Kafka's coordinator
asks its auto topic creation manager to."""

from __future__ import annotations

import logging

from kafkacompat.groups.streams_coordinator import StreamsHeartbeat, StreamsHeartbeatResult
from kafkacompat.groups.streams_group import (
    CopartitionGroup,
    InternalTopic,
    StreamsGroupState,
    StreamsMember,
    StreamsTopology,
    Subtopology,
)
from kafkacompat.handlers.cluster import OPERATIONS_OMITTED
from kafkacompat.handlers.groups import client_host
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.groups")

STREAMS_GROUP_HEARTBEAT = 88
STREAMS_GROUP_DESCRIBE = 89


def _internal(topic) -> InternalTopic:
    return InternalTopic(topic.name, topic.partitions, topic.replication_factor,
                         tuple((c.key, c.value) for c in topic.topic_configs or []))


def _topology(wire) -> StreamsTopology | None:
    if wire is None:
        return None
    return StreamsTopology(wire.epoch, tuple(
        Subtopology(
            s.subtopology_id, tuple(s.source_topics or []), tuple(s.source_topic_regex or []),
            tuple(s.repartition_sink_topics or []), tuple(_internal(t) for t in s.repartition_source_topics or []),
            tuple(_internal(t) for t in s.state_changelog_topics or []),
            tuple(CopartitionGroup(tuple(g.source_topics or []), tuple(g.source_topic_regex or []),
                                   tuple(g.repartition_source_topics or [])) for g in s.copartition_groups or []),
        )
        for s in wire.subtopologies or []
    ))


def _tasks(wire) -> list[tuple[str, list[int]]] | None:
    return None if wire is None else [(t.subtopology_id, list(t.partitions or [])) for t in wire]


def _heartbeat_request(request, ctx: RequestContext) -> StreamsHeartbeat:
    endpoint = request.user_endpoint
    return StreamsHeartbeat(
        group_id=request.group_id or "", member_id=request.member_id or "", member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        topology=_topology(request.topology), active=_tasks(request.active_tasks),
        standby=_tasks(request.standby_tasks), warmup=_tasks(request.warmup_tasks), process_id=request.process_id,
        user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
        client_tags=None if request.client_tags is None else tuple((t.key, t.value) for t in request.client_tags),
        shutdown_application=bool(request.shutdown_application),
        endpoint_information_epoch=request.endpoint_information_epoch,
        task_offsets=request.task_offsets, task_end_offsets=request.task_end_offsets,
        client_id=ctx.client_id or "", client_host=client_host(ctx),
    )


def _source_topics(topology: StreamsTopology | None) -> list[str]:
    return [] if topology is None else sorted({n for s in topology.subtopologies for n in s.source_topics})


async def _create_internal_topics(ctx: RequestContext, group_id: str, topics: list[InternalTopic]) -> None:
    """Create the missing internal topics (the heartbeat already answered MISSING_INTERNAL_TOPICS;
    the members see them ready at a later heartbeat). Creation needs CREATE on the topic or the
    cluster, as Kafka checks for the member's principal."""
    for topic in topics:
        if not (ctx.authorize_cluster(AclOperation.CREATE, log_denied=False)
                or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, topic.name)):
            log.warning("Streams group %s: internal topic %s not created, the client may not CREATE it",
                        group_id, topic.name)
            continue
        replication = topic.replication_factor if topic.replication_factor > 0 else \
            max(1, min(ctx.config.default_replication_factor, len(ctx.metadata.brokers())))
        try:
            await ctx.admin.create_topic(topic.name, topic.partitions, replication, dict(topic.configs))
            log.info("Streams group %s: created internal topic %s with %d partition(s)", group_id, topic.name,
                     topic.partitions)
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("Streams group %s: could not create internal topic %s: %s", group_id, topic.name,
                            exc.message)


def _task_ids(cls, assignment) -> list:
    return [cls(subtopology_id=sub, partitions=sorted(ps)) for sub, ps in sorted(assignment.items())]


def _heartbeat_response(ctx: RequestContext, result: StreamsHeartbeatResult):
    cls = response_class(STREAMS_GROUP_HEARTBEAT)
    endpoints = None
    if result.endpoints is not None:
        mapping = cls.EndpointToPartitions
        endpoints = [
            mapping(
                user_endpoint=mapping.Endpoint(host=host, port=port),
                active_partitions=[mapping.TopicPartition(topic=t, partitions=ps) for t, ps in active.items()],
                standby_partitions=[mapping.TopicPartition(topic=t, partitions=ps) for t, ps in standby.items()],
            )
            for (host, port), active, standby in result.endpoints
        ]
    return response_for(
        STREAMS_GROUP_HEARTBEAT, ctx, throttle_time_ms=0, error_code=result.error, error_message=result.message,
        # Kafka answers an error with nothing but its code and message.
        member_id="" if result.error else result.member_id, member_epoch=0 if result.error else result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, acceptable_recovery_lag=0, task_offset_interval_ms=0,
        status=[cls.Status(status_code=code, status_detail=detail) for code, detail in result.statuses] or None,
        active_tasks=None if result.active is None else _task_ids(cls.TaskIds, result.active),
        standby_tasks=None if result.standby is None else _task_ids(cls.TaskIds, result.standby),
        warmup_tasks=None if result.active is None else [],
        endpoint_information_epoch=result.endpoint_information_epoch, partitions_by_user_endpoint=endpoints,
    )


@handles(STREAMS_GROUP_HEARTBEAT, 0, 0)
async def handle_streams_group_heartbeat(request, ctx: RequestContext):
    req = _heartbeat_request(request, ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return _heartbeat_response(ctx, StreamsHeartbeatResult(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                               member_id=req.member_id))
    if not ctx.authorize_all(AclOperation.DESCRIBE, ResourceType.TOPIC, _source_topics(req.topology)):
        return _heartbeat_response(ctx, StreamsHeartbeatResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                               member_id=req.member_id))
    result = await ctx.groups.streams.heartbeat(req, ctx.metadata.topics)
    if result.to_create and not result.error:
        await _create_internal_topics(ctx, req.group_id, result.to_create)
    return _heartbeat_response(ctx, result)


def _described_topology(cls, topology: StreamsTopology | None):
    if topology is None:
        return None
    topic_cls = cls.Subtopology.TopicInfo

    def topics(internal: tuple[InternalTopic, ...]) -> list:
        return [topic_cls(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                          topic_configs=[topic_cls.KeyValue(key=k, value=v) for k, v in t.configs])
                for t in internal]

    return cls(epoch=topology.epoch, subtopologies=[
        cls.Subtopology(subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
                        repartition_sink_topics=list(s.repartition_sink_topics),
                        state_changelog_topics=topics(s.state_changelog_topics),
                        repartition_source_topics=topics(s.repartition_source_topics))
        for s in topology.subtopologies
    ])


def _described_member(cls, state: StreamsGroupState, member: StreamsMember):
    assignment_cls = cls.Assignment

    def assignment(active, standby):
        return assignment_cls(active_tasks=_task_ids(assignment_cls.TaskIds, active),
                              standby_tasks=_task_ids(assignment_cls.TaskIds, standby), warmup_tasks=[])

    endpoint = None if member.user_endpoint is None else cls.Endpoint(host=member.user_endpoint[0],
                                                                      port=member.user_endpoint[1])
    return cls(
        member_id=member.member_id, member_epoch=member.member_epoch, instance_id=member.instance_id,
        rack_id=member.rack_id, client_id=member.client_id, client_host=member.client_host,
        topology_epoch=member.topology_epoch, process_id=member.process_id, user_endpoint=endpoint,
        client_tags=[cls.KeyValue(key=k, value=v) for k, v in member.client_tags],
        assignment=assignment(member.assigned, member.standby),
        target_assignment=assignment(state.target.get(member.member_id, {}),
                                     state.standby_target.get(member.member_id, {})),
    )


@handles(STREAMS_GROUP_DESCRIBE, 0, 0)
async def handle_streams_group_describe(request, ctx: RequestContext):
    cls = response_class(STREAMS_GROUP_DESCRIBE)
    group_cls = cls.DescribedGroup
    groups = []
    for group_id in request.group_ids or []:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(group_cls(group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                    topology=None))
            continue
        operations = (ctx.authorized_operations(ResourceType.GROUP, group_id) if request.include_authorized_operations
                      else OPERATIONS_OMITTED)
        error, message, state = ctx.groups.streams.describe(group_id, ctx.metadata.topics)
        if error or state is None:
            groups.append(group_cls(group_id=group_id, error_code=error, error_message=message, topology=None))
            continue
        groups.append(group_cls(
            group_id=group_id, group_state=state.state_name(), group_epoch=state.group_epoch,
            assignment_epoch=state.assignment_epoch, topology=_described_topology(group_cls.Topology, state.topology),
            members=[_described_member(group_cls.Member, state, m) for m in state.members.values()
                     if isinstance(m, StreamsMember)],
            authorized_operations=operations,
        ))
    return response_for(STREAMS_GROUP_DESCRIBE, ctx, throttle_time_ms=0, groups=groups)
