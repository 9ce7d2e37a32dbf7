"""Group membership APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, ListGroups, DeleteGroups. The work is in kafkacompat.groups.coordinator."""

from __future__ import annotations

import logging

from kafkacompat.groups.coordinator import OFFSETS_TOPIC, JoinRequest
from kafkacompat.groups.state import GroupState
from kafkacompat.handlers.cluster import OPERATIONS_OMITTED
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.handlers.transactions import find_transaction_coordinator
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import DEFAULT_MESSAGES, ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.groups")

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def may_read_group(ctx: RequestContext, group_id: str) -> bool:
    """Kafka's check for every request of a group's members: READ on the group."""
    return ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id)


SHARE_KEY_TYPE = 2


def coordinator(ctx: RequestContext):
    return ctx.groups


def client_host(ctx: RequestContext) -> str:
    # Kafka reports InetAddress.toString(): "/127.0.0.1".
    return f"/{ctx.client_host}"


def _message(error: int) -> str | None:
    return DEFAULT_MESSAGES.get(int(error), ErrorCode(error).name) if error else None


# ---- FindCoordinator -----------------------------------------------------------------------


async def _create_offsets_topic(ctx: RequestContext) -> None:
    """__consumer_offsets, created on the first FindCoordinator with
    offsets.topic.replication.factor capped by the live brokers (Kafka's auto-creation)."""
    config = ctx.config
    groups = ctx.groups
    try:
        await ctx.admin.create_topic(
            OFFSETS_TOPIC, config.offsets_topic_num_partitions,
            max(1, min(config.offsets_topic_replication_factor, len(ctx.metadata.brokers()))),
            groups.offsets_topic_configs(),
        )
    except KafkaError as exc:  # created concurrently, or not possible yet: the client retries
        log.info("Could not create %s yet: %s (%s); FindCoordinator answers COORDINATOR_NOT_AVAILABLE",
                 OFFSETS_TOPIC, exc.code.name, exc.message)
    except Exception:
        log.exception("Creating %s failed; FindCoordinator answers COORDINATOR_NOT_AVAILABLE", OFFSETS_TOPIC)


async def _find_group_coordinator(ctx: RequestContext, key: str) -> tuple[int, int, str, int]:
    """The coordinator of a group is the leader of its __consumer_offsets partition."""
    groups = ctx.groups
    if groups.offsets_topic() is None:
        await _create_offsets_topic(ctx)
        if groups.offsets_topic() is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    state = ctx.metadata.partition_state(OFFSETS_TOPIC, groups.partition_for(key))
    info = ctx.metadata.brokers().get(state.leader) if state is not None else None
    if info is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    if state.leader == ctx.metadata.node_id and groups.loading:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, "", -1
    return ErrorCode.NONE, info.broker_id, *info.address(ctx.listener_name)


async def _find(ctx: RequestContext, key: str, key_type: int) -> tuple[int, int, str, int]:
    if key_type == GROUP_KEY_TYPE:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return GROUP_DENIED, -1, "", -1
        return await _find_group_coordinator(ctx, key)
    if key_type == SHARE_KEY_TYPE and ctx.version >= 6 and ctx.services.shares is not None:
        from kafkacompat.handlers.shares import find_share_coordinator

        return await find_share_coordinator(ctx, key)
    if key_type != TRANSACTION_KEY_TYPE:
        return ErrorCode.INVALID_REQUEST, -1, "", -1
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1
    return await find_transaction_coordinator(ctx, key)


@handles(FIND_COORDINATOR, 0, 6)
async def handle_find_coordinator(request, ctx: RequestContext):
    key_type = request.key_type if ctx.version >= 1 else GROUP_KEY_TYPE
    if ctx.version >= 4:
        entry = response_class(FIND_COORDINATOR).Coordinator
        coordinators = []
        for key in request.coordinator_keys or []:
            error, node_id, host, port = await _find(ctx, key, key_type)
            coordinators.append(entry(key=key, node_id=node_id, host=host, port=port, error_code=error,
                                      error_message=_message(error)))
        return response_for(FIND_COORDINATOR, ctx, throttle_time_ms=0, coordinators=coordinators)
    error, node_id, host, port = await _find(ctx, request.key, key_type)
    return response_for(FIND_COORDINATOR, ctx, throttle_time_ms=0, error_code=error,
                        error_message=_message(error), node_id=node_id, host=host, port=port)


# ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------


@handles(JOIN_GROUP, 0, 9)
async def handle_join_group(request, ctx: RequestContext):
    if not may_read_group(ctx, request.group_id):
        return response_for(JOIN_GROUP, ctx, throttle_time_ms=0, error_code=GROUP_DENIED, generation_id=-1,
                            protocol_type=None, protocol_name=None if ctx.version >= 7 else "", leader="",
                            skip_assignment=False, member_id="", members=[])
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if ctx.version >= 5 else None,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if ctx.version >= 1 else -1,
        protocol_type=request.protocol_type or "",
        protocols=[(p.name, bytes(p.metadata or b"")) for p in request.protocols or []],
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        version=ctx.version,
        reason=request.reason,
        topics=ctx.metadata.topics,
    )
    result = await coordinator(ctx).join_group(join)
    member_cls = response_class(JOIN_GROUP).JoinGroupResponseMember
    protocol_name = result.protocol_name
    if ctx.version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    return response_for(
        JOIN_GROUP, ctx, throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name, leader=result.leader_id,
        skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[member_cls(member_id=m, group_instance_id=i, metadata=md) for m, i, md in result.members],
    )


@handles(SYNC_GROUP, 0, 5)
async def handle_sync_group(request, ctx: RequestContext):
    if not may_read_group(ctx, request.group_id):
        return response_for(SYNC_GROUP, ctx, throttle_time_ms=0, error_code=GROUP_DENIED, protocol_type=None,
                            protocol_name=None, assignment=b"")
    assignments = {a.member_id: bytes(a.assignment or b"") for a in request.assignments or []}
    result = await coordinator(ctx).sync_group(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
        request.protocol_type if ctx.version >= 5 else None,
        request.protocol_name if ctx.version >= 5 else None,
        assignments,
    )
    return response_for(
        SYNC_GROUP, ctx, throttle_time_ms=0, error_code=result.error,
        protocol_type=result.protocol_type if not result.error else None,
        protocol_name=result.protocol_name if not result.error else None, assignment=result.assignment,
    )


@handles(HEARTBEAT, 0, 4)
async def handle_heartbeat(request, ctx: RequestContext):
    if not may_read_group(ctx, request.group_id):
        return response_for(HEARTBEAT, ctx, throttle_time_ms=0, error_code=GROUP_DENIED)
    error = coordinator(ctx).heartbeat(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
    )
    return response_for(HEARTBEAT, ctx, throttle_time_ms=0, error_code=error)


@handles(LEAVE_GROUP, 0, 5)
async def handle_leave_group(request, ctx: RequestContext):
    if not may_read_group(ctx, request.group_id):
        return response_for(LEAVE_GROUP, ctx, throttle_time_ms=0, error_code=GROUP_DENIED, members=[])
    if ctx.version >= 3:
        identities = [(m.member_id or "", m.group_instance_id) for m in request.members or []]
    else:
        identities = [(request.member_id or "", None)]
    error, member_errors = coordinator(ctx).leave_group(request.group_id, identities)
    if ctx.version < 3:
        if not error and member_errors:
            error = member_errors[0]
        return response_for(LEAVE_GROUP, ctx, throttle_time_ms=0, error_code=error)
    member_cls = response_class(LEAVE_GROUP).MemberResponse
    return response_for(
        LEAVE_GROUP, ctx, throttle_time_ms=0, error_code=error,
        members=[member_cls(member_id=m, group_instance_id=i, error_code=e)
                 for (m, i), e in zip(identities, member_errors)],
    )


# ---- DescribeGroups / ListGroups / DeleteGroups -----------------------------------------------


@handles(DESCRIBE_GROUPS, 0, 6)
async def handle_describe_groups(request, ctx: RequestContext):
    group_cls = response_class(DESCRIBE_GROUPS).DescribedGroup
    member_cls = group_cls.DescribedGroupMember
    include_ops = ctx.version >= 3 and bool(request.include_authorized_operations)
    groups = []
    for group_id in request.groups or []:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(group_cls(error_code=GROUP_DENIED, group_id=group_id, group_state="", protocol_type="",
                                    protocol_data="", members=[]))
            continue
        error, group = coordinator(ctx).describe_group(group_id)
        operations = ctx.authorized_operations(ResourceType.GROUP, group_id) if include_ops else OPERATIONS_OMITTED
        message = None
        if not error and (group is None or group.consumer is not None or group.is_in(GroupState.DEAD)):
            # Kafka describes classic groups only: another group, or none, is Dead before v6 and
            # GROUP_ID_NOT_FOUND from v6 (consumer groups are for ConsumerGroupDescribe).
            if ctx.version >= 6:
                error = ErrorCode.GROUP_ID_NOT_FOUND
                message = (f"Group {group_id} is not a classic group." if group is not None and group.consumer
                           else f"Group {group_id} not found.")
            group = None
        if error or group is None:
            groups.append(group_cls(
                error_code=error, error_message=message if error == ErrorCode.GROUP_ID_NOT_FOUND else _message(error),
                group_id=group_id, group_state=GroupState.DEAD.value, protocol_type="", protocol_data="",
                members=[], authorized_operations=operations,
            ))
            continue
        stable = group.state == GroupState.STABLE
        members = [
            member_cls(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        groups.append(group_cls(
            error_code=ErrorCode.NONE, group_id=group_id, group_state=group.state.value,
            protocol_type=group.protocol_type or "", protocol_data=(group.protocol_name or "") if stable else "",
            members=members, authorized_operations=operations,
        ))
    return response_for(DESCRIBE_GROUPS, ctx, throttle_time_ms=0, groups=groups)


@handles(LIST_GROUPS, 0, 5)
async def handle_list_groups(request, ctx: RequestContext):
    listed_cls = response_class(LIST_GROUPS).ListedGroup
    states = list(request.states_filter or []) if ctx.version >= 4 else None
    types = list(request.types_filter or []) if ctx.version >= 5 else None
    if coordinator(ctx).loading:
        return response_for(LIST_GROUPS, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, groups=[])
    # Without DESCRIBE on the cluster, only the groups the client may DESCRIBE are listed.
    everything = ctx.authorize_cluster(AclOperation.DESCRIBE, log_denied=False)
    groups = [
        listed_cls(group_id=g.group_id,
                   protocol_type=g.type_name() if g.consumer is not None else g.protocol_type or "",
                   group_state=g.state_name(), group_type=g.type_name())
        for g in coordinator(ctx).list_groups(states, types)
        if everything or ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denied=False)
    ]
    if ctx.services.shares is not None:
        groups += [listed_cls(group_id=g.group_id, protocol_type="share", group_state=g.state, group_type="share")
                   for g in ctx.services.shares.groups.list_groups(states, types)]
    return response_for(LIST_GROUPS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, groups=groups)


@handles(DELETE_GROUPS, 0, 2)
async def handle_delete_groups(request, ctx: RequestContext):
    result_cls = response_class(DELETE_GROUPS).DeletableGroupResult
    names = list(request.groups_names or [])
    allowed = [name for name in names if ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, name)]
    outcome = dict(zip(allowed, coordinator(ctx).delete_groups(allowed)))
    return response_for(
        DELETE_GROUPS, ctx, throttle_time_ms=0,
        results=[result_cls(group_id=name, error_code=outcome.get(name, GROUP_DENIED)) for name in names],
    )
