"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe. The work is in
kafkacompat.groups.consumer_coordinator."""

from __future__ import annotations

from kafkacompat.groups.consumer_coordinator import HeartbeatRequest
from kafkacompat.groups.consumer_group import ConsumerGroupState
from kafkacompat.handlers.cluster import OPERATIONS_OMITTED
from kafkacompat.handlers.groups import client_host
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.codec import response_class

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1 MemberType


@handles(CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle_consumer_group_heartbeat(request, ctx: RequestContext):
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return response_for(CONSUMER_GROUP_HEARTBEAT, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None,
                            member_id=request.member_id, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    # Kafka: a member may subscribe only to topics it may DESCRIBE (they would leak in the assignment).
    if not ctx.authorize_all(AclOperation.DESCRIBE, ResourceType.TOPIC, request.subscribed_topic_names):
        return response_for(CONSUMER_GROUP_HEARTBEAT, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None,
                            member_id=request.member_id, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    owned = None if request.topic_partitions is None else [
        (tp.topic_id, list(tp.partitions or [])) for tp in request.topic_partitions
    ]
    result = await ctx.groups.consumer.heartbeat(HeartbeatRequest(
        group_id=request.group_id or "", member_id=request.member_id or "", member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        subscribed_topic_regex=request.subscribed_topic_regex, server_assignor=request.server_assignor,
        owned=owned, client_id=ctx.client_id or "", client_host=client_host(ctx), version=ctx.version,
    ), ctx.metadata.topics)
    cls = response_class(CONSUMER_GROUP_HEARTBEAT)
    assignment = None
    if result.assignment is not None:
        assignment = cls.Assignment(topic_partitions=[
            cls.Assignment.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(result.assignment.items())
        ])
    return response_for(
        CONSUMER_GROUP_HEARTBEAT, ctx, throttle_time_ms=0, error_code=result.error, error_message=result.message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment,
    )


def _described_assignment(cls, assignment, names: dict) -> object:
    assignment_cls = cls.DescribedGroup.Member.Assignment
    return assignment_cls(topic_partitions=[
        assignment_cls.TopicPartitions(topic_id=topic_id, topic_name=names.get(topic_id, ""),
                                       partitions=sorted(partitions))
        for topic_id, partitions in sorted(assignment.items())
    ])


def _described_group(cls, group_id: str, state: ConsumerGroupState, assignor: str, ctx: RequestContext,
                     operations: int):
    names = {topic.topic_id: topic.name for topic in ctx.metadata.topics()}
    members = []
    for member in state.members.values():
        members.append(cls.DescribedGroup.Member(
            member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
            member_epoch=member.member_epoch, client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=list(member.subscribed_topic_names),
            subscribed_topic_regex=member.subscribed_topic_regex,
            assignment=_described_assignment(cls, member.assigned, names),
            target_assignment=_described_assignment(cls, state.target.get(member.member_id, {}), names),
            member_type=CLASSIC_MEMBER if member.classic is not None else CONSUMER_MEMBER,  # v1
        ))
    return cls.DescribedGroup(
        group_id=group_id, group_state=state.state_name(), group_epoch=state.group_epoch,
        assignment_epoch=state.assignment_epoch, assignor_name=assignor, members=members,
        authorized_operations=operations,
    )


@handles(CONSUMER_GROUP_DESCRIBE, 0, 1)
async def handle_consumer_group_describe(request, ctx: RequestContext):
    cls = response_class(CONSUMER_GROUP_DESCRIBE)
    consumer = ctx.groups.consumer
    groups = []
    for group_id in request.group_ids or []:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(cls.DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                             error_message=None))
            continue
        operations = (ctx.authorized_operations(ResourceType.GROUP, group_id) if request.include_authorized_operations
                      else OPERATIONS_OMITTED)
        error, message, state = consumer.describe(group_id)
        if error or state is None:
            groups.append(cls.DescribedGroup(group_id=group_id, error_code=error, error_message=message))
            continue
        groups.append(_described_group(cls, group_id, state, state.preferred_assignor(consumer.default_assignor()),
                                       ctx, operations))
    return response_for(CONSUMER_GROUP_DESCRIBE, ctx, throttle_time_ms=0, groups=groups)
