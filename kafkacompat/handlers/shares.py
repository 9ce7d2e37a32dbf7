"""Share group APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and
ShareAcknowledge. Membership is in kafkacompat.shares.group, the share partitions and sessions
in kafkacompat.shares.manager, durable state in kafkacompat.shares.state_store."""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from typing import TYPE_CHECKING

import trio

from kafkacompat.handlers.cluster import OPERATIONS_OMITTED
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.shares.partition import AcknowledgementBatch, AcknowledgeType, AcquireMode, delivery_complete_count
from kafkacompat.shares.sessions import FINAL_EPOCH, INITIAL_EPOCH, check_epoch
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.shares import ShareServices

log = logging.getLogger("kafkacompat.shares")

SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79

# READ, DESCRIBE, DELETE (AclOperation codes), as for classic groups with no authorizer.
RENEW_ACQUIRE_MODE = 255  # ShareFetch v2: only renew the acknowledged locks, acquire nothing

PartitionKey = tuple[uuid.UUID, int]


def shares(ctx: RequestContext) -> "ShareServices":
    assert ctx.services.shares is not None
    return ctx.services.shares


def _valid_member_id(member_id: str | None) -> bool:
    """Kafka parses a share member id as a Uuid (22 characters of URL-safe base64)."""
    if not member_id:
        return False
    try:
        return len(base64.urlsafe_b64decode(member_id + "==")) == 16
    except (binascii.Error, ValueError):
        return False


# ---- ShareGroupHeartbeat / ShareGroupDescribe ---------------------------------------------------


@handles(SHARE_GROUP_HEARTBEAT, 1, 1)
async def handle_share_group_heartbeat(request, ctx: RequestContext):
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return response_for(SHARE_GROUP_HEARTBEAT, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None,
                            member_id=request.member_id, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    # Kafka: a member may subscribe only to topics it may DESCRIBE (they would leak in the assignment).
    if not ctx.authorize_all(AclOperation.DESCRIBE, ResourceType.TOPIC, request.subscribed_topic_names):
        return response_for(SHARE_GROUP_HEARTBEAT, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None,
                            member_id=request.member_id, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    result = shares(ctx).groups.heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id, request.subscribed_topic_names,
        client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}",
    )
    assignment = None
    if result.assignment is not None:
        cls = response_class(SHARE_GROUP_HEARTBEAT)
        assignment = cls.Assignment(topic_partitions=[
            cls.Assignment.TopicPartitions(topic_id=topic_id, partitions=list(partitions))
            for topic_id, partitions in result.assignment.items()
        ])
    return response_for(SHARE_GROUP_HEARTBEAT, ctx, throttle_time_ms=0, error_code=result.error,
                        error_message=result.message, member_id=result.member_id, member_epoch=result.member_epoch,
                        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


@handles(SHARE_GROUP_DESCRIBE, 1, 1)
async def handle_share_group_describe(request, ctx: RequestContext):
    cls = response_class(SHARE_GROUP_DESCRIBE)
    group_cls = cls.DescribedGroup
    described = []
    for group_id in request.group_ids or []:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(group_cls(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id,
                                       group_state="", authorized_operations=OPERATIONS_OMITTED))
            continue
        operations = (ctx.authorized_operations(ResourceType.GROUP, group_id) if request.include_authorized_operations
                      else OPERATIONS_OMITTED)
        error, message, group = shares(ctx).groups.describe(group_id)
        if group is None:
            described.append(group_cls(error_code=error, error_message=message, group_id=group_id,
                                       group_state="Dead", authorized_operations=operations))
            continue
        members = [
            group_cls.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topics),
                assignment=group_cls.Member.Assignment(topic_partitions=_described_assignment(ctx, m.assignment)),
            )
            for m in group.members.values()
        ]
        described.append(group_cls(error_code=ErrorCode.NONE, group_id=group_id, group_state=group.state,
                                   group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                                   assignor_name="simple", members=members, authorized_operations=operations))
    return response_for(SHARE_GROUP_DESCRIBE, ctx, throttle_time_ms=0, groups=described)


def _described_assignment(ctx: RequestContext, assignment) -> list:
    cls = response_class(SHARE_GROUP_DESCRIBE).DescribedGroup.Member.Assignment.TopicPartitions  # noqa
    out = []
    for topic_id, partitions in assignment.items():
        topic = ctx.metadata.topic_by_id(topic_id)
        out.append(cls(topic_id=topic_id, topic_name=topic.name if topic is not None else "",
                       partitions=list(partitions)))
    return out


# ---- ShareFetch ----------------------------------------------------------------------------------


def _acknowledgements(partition) -> list[AcknowledgementBatch]:
    return [AcknowledgementBatch(b.first_offset, b.last_offset, list(b.acknowledge_types or []))
            for b in partition.acknowledgement_batches or []]


def _top_level_error(api_key: int, ctx: RequestContext, code: int, message: str | None):
    return response_for(api_key, ctx, throttle_time_ms=0, error_code=code, error_message=message,
                        acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])


class _Results:
    """The response's partitions, in request order, by (topic id, partition)."""

    def __init__(self, ctx: RequestContext, api_key: int) -> None:
        self.ctx = ctx
        self.api_key = api_key
        self.cls = response_class(api_key)
        self.topic_cls = self.cls.ShareFetchableTopicResponse if api_key == SHARE_FETCH \
            else self.cls.ShareAcknowledgeTopicResponse
        self.partitions: dict[PartitionKey, object] = {}

    def get(self, key: PartitionKey):
        partition = self.partitions.get(key)
        if partition is None:
            partition = self.partitions[key] = self.topic_cls.PartitionData(partition_index=key[1])
            self._leader(key, partition)
        return partition

    def _leader(self, key: PartitionKey, partition) -> None:
        topic = self.ctx.metadata.topic_by_id(key[0])
        state = self.ctx.metadata.partition_state(topic.name, key[1]) if topic is not None else None
        partition.current_leader.leader_id = state.leader if state is not None else -1
        partition.current_leader.leader_epoch = state.leader_epoch if state is not None else -1

    def topics(self) -> list:
        by_topic: dict[uuid.UUID, list] = {}
        for (topic_id, _), partition in self.partitions.items():
            by_topic.setdefault(topic_id, []).append(partition)
        return [self.topic_cls(topic_id=topic_id, partitions=partitions) for topic_id, partitions in by_topic.items()]

    def node_endpoints(self) -> list:
        leaders = {p.current_leader.leader_id for p in self.partitions.values()
                   if p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.current_leader.leader_id >= 0}
        brokers = self.ctx.metadata.brokers()
        return [self.cls.NodeEndpoint(node_id=b, host=brokers[b].host, port=brokers[b].port, rack=brokers[b].rack)
                for b in sorted(leaders) if b in brokers]


async def _acknowledge_all(ctx: RequestContext, group_id: str, member_id: str,
                           requested: list[tuple[PartitionKey, list[AcknowledgementBatch]]],
                           results: _Results, *, error_field: str) -> None:
    manager = shares(ctx).partitions
    for key, batches in requested:
        if not batches:
            continue
        partition = results.get(key)
        code, message = _partition_error(ctx, key), None
        if code == ErrorCode.NONE:
            topic = ctx.metadata.topic_by_id(key[0])
            code, message = await manager.acknowledge(group_id, member_id, topic, key[1], batches)
        setattr(partition, error_field, code)
        setattr(partition, error_field.replace("_code", "_message"), message)


def _partition_error(ctx: RequestContext, key: PartitionKey) -> int:
    topic = ctx.metadata.topic_by_id(key[0])
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ErrorCode.NONE if 0 <= key[1] < topic.partitions else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _has_renew(requested: list[tuple[PartitionKey, list[AcknowledgementBatch]]]) -> bool:
    return any(AcknowledgeType.RENEW in batch.types for _, batches in requested for batch in batches)


def _fetch_request_partitions(request) -> list[tuple[PartitionKey, list[AcknowledgementBatch]]]:
    return [((topic.topic_id, p.partition_index), _acknowledgements(p))
            for topic in request.topics or [] for p in topic.partitions or []]


def _forgotten(request) -> list[PartitionKey]:
    return [(t.topic_id, index) for t in request.forgotten_topics_data or [] for index in t.partitions or []]


@handles(SHARE_FETCH, 1, 2)
async def handle_share_fetch(request, ctx: RequestContext):
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not group_id:
        return _top_level_error(SHARE_FETCH, ctx, ErrorCode.INVALID_GROUP_ID, "The group id is empty.")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return _top_level_error(SHARE_FETCH, ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not _valid_member_id(member_id):
        return _top_level_error(SHARE_FETCH, ctx, ErrorCode.INVALID_REQUEST, f"Invalid member id {member_id!r}.")
    mode = getattr(request, "share_acquire_mode", AcquireMode.BATCH_OPTIMIZED)
    if mode not in (AcquireMode.BATCH_OPTIMIZED, AcquireMode.RECORD_LIMIT, RENEW_ACQUIRE_MODE):
        return _top_level_error(SHARE_FETCH, ctx, ErrorCode.INVALID_REQUEST, f"Unknown share acquire mode {mode}.")
    requested = _fetch_request_partitions(request)
    has_acks = any(batches for _, batches in requested)
    if ctx.version < 2 and _has_renew(requested):
        return _top_level_error(SHARE_FETCH, ctx, ErrorCode.INVALID_REQUEST,
                                "Acknowledge type RENEW needs ShareFetch v2.")
    # Only partitions that exist join the session (a request cannot grow it with made-up ids).
    errors = {key: _partition_error(ctx, key) for key, _ in requested}
    known = [key for key, error in errors.items() if error == ErrorCode.NONE]
    sessions = shares(ctx).partitions.sessions
    try:
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Acknowledgements are not allowed in the share fetch opening a share session.")
            session = sessions.open(group_id, member_id, known)
            if ctx.connection is not None:
                manager = shares(ctx).partitions
                ctx.connection.close_callbacks[("share-session", group_id, member_id)] = \
                    lambda: manager.session_connection_closed(session)
        elif epoch == FINAL_EPOCH:
            if any(not batches for _, batches in requested):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "The share fetch closing a share session can only carry acknowledgements.")
            session = sessions.existing(group_id, member_id)
        else:
            session = sessions.update(group_id, member_id, epoch, known, _forgotten(request))
    except KafkaError as exc:
        return _top_level_error(SHARE_FETCH, ctx, exc.code, exc.message)
    results = _Results(ctx, SHARE_FETCH)
    for key, error in errors.items():
        if error or epoch == INITIAL_EPOCH:
            results.get(key).error_code = error
    await _acknowledge_all(ctx, group_id, member_id, requested, results, error_field="acknowledge_error_code")
    if epoch == FINAL_EPOCH:
        await _close_session(ctx, group_id, member_id)
    elif not getattr(request, "is_renew_ack", False) and mode != RENEW_ACQUIRE_MODE:
        await _fetch_into(ctx, request, group_id, member_id, list(session.partitions), results)
    return response_for(SHARE_FETCH, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                        acquisition_lock_timeout_ms=shares(ctx).partitions.lock_duration_ms(group_id),
                        responses=results.topics(), node_endpoints=results.node_endpoints())


async def _fetch_into(ctx: RequestContext, request, group_id: str, member_id: str, keys: list[PartitionKey],
                      results: _Results) -> None:
    mode = getattr(request, "share_acquire_mode", AcquireMode.BATCH_OPTIMIZED)
    wanted: list[tuple["TopicInfo", int]] = []
    for key in keys:
        error = _partition_error(ctx, key)  # the session's partitions too: an ACL may have changed since
        if error:
            results.get(key).error_code = error
            continue
        wanted.append((ctx.metadata.topic_by_id(key[0]), key[1]))
    max_records = getattr(request, "max_records", 0) or 500
    fetched = await shares(ctx).partitions.fetch(
        group_id, member_id, wanted, max_records=max_records, max_bytes=request.max_bytes,
        max_wait_ms=request.max_wait_ms, mode=AcquireMode(mode))
    acquired_cls = response_class(SHARE_FETCH).ShareFetchableTopicResponse.PartitionData.AcquiredRecords
    for key, result in fetched.items():
        if not result.acquired and not result.error and key not in results.partitions:
            continue
        partition = results.get(key)
        partition.error_code, partition.error_message = result.error, result.message
        if result.acquired:
            partition.records = result.records
            partition.acquired_records = [acquired_cls(first_offset=r.first_offset, last_offset=r.last_offset,
                                                       delivery_count=r.delivery_count) for r in result.acquired]


async def _close_session(ctx: RequestContext, group_id: str, member_id: str) -> None:
    session = shares(ctx).partitions.sessions.close(group_id, member_id)
    await shares(ctx).partitions.release_member(group_id, member_id, list(session.partitions))


# ---- ShareAcknowledge ------------------------------------------------------------------------------


@handles(SHARE_ACKNOWLEDGE, 1, 2)
async def handle_share_acknowledge(request, ctx: RequestContext):
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not group_id:
        return _top_level_error(SHARE_ACKNOWLEDGE, ctx, ErrorCode.INVALID_GROUP_ID, "The group id is empty.")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return _top_level_error(SHARE_ACKNOWLEDGE, ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not _valid_member_id(member_id):
        return _top_level_error(SHARE_ACKNOWLEDGE, ctx, ErrorCode.INVALID_REQUEST, f"Invalid member id {member_id!r}.")
    requested = [((topic.topic_id, p.partition_index), _acknowledgements(p))
                 for topic in request.topics or [] for p in topic.partitions or []]
    if ctx.version < 2 and _has_renew(requested):
        return _top_level_error(SHARE_ACKNOWLEDGE, ctx, ErrorCode.INVALID_REQUEST,
                                "Acknowledge type RENEW needs ShareAcknowledge v2.")
    sessions = shares(ctx).partitions.sessions
    try:
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             "A share acknowledgement cannot open a share session (epoch 0).")
        session = sessions.existing(group_id, member_id)
        if epoch != FINAL_EPOCH:
            check_epoch(session, epoch)
            session.next_epoch()
    except KafkaError as exc:
        return _top_level_error(SHARE_ACKNOWLEDGE, ctx, exc.code, exc.message)
    results = _Results(ctx, SHARE_ACKNOWLEDGE)
    await _acknowledge_all(ctx, group_id, member_id, requested, results, error_field="error_code")
    if epoch == FINAL_EPOCH:
        await _close_session(ctx, group_id, member_id)
    return response_for(SHARE_ACKNOWLEDGE, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                        acquisition_lock_timeout_ms=shares(ctx).partitions.lock_duration_ms(group_id),
                        responses=results.topics(), node_endpoints=results.node_endpoints())


# ---- the share coordinator's inter-broker APIs ---------------------------------------------------

READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85


def _cluster_action_denied(request, ctx: RequestContext, api_key: int, result_name: str):
    """The share-state APIs are for brokers (CLUSTER_ACTION on the cluster, as Kafka's KafkaApis):
    anyone else gets CLUSTER_AUTHORIZATION_FAILED for every partition asked about, or None."""
    if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return None
    cls = response_class(api_key)
    result_cls = getattr(cls, result_name)
    message = "Share-group state is kept by brokers: CLUSTER_ACTION on the cluster is needed."
    results = [result_cls(topic_id=topic.topic_id, partitions=[
        result_cls.PartitionResult(partition=p.partition, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                   error_message=message) for p in topic.partitions or []])
        for topic in request.topics or []]
    return response_for(api_key, ctx, results=results)


@handles(READ_SHARE_GROUP_STATE, 0, 0)
async def handle_read_share_group_state(request, ctx: RequestContext):
    if (denied := _cluster_action_denied(request, ctx, READ_SHARE_GROUP_STATE, "ReadStateResult")) is not None:
        return denied
    cls = response_class(READ_SHARE_GROUP_STATE)
    result_cls = cls.ReadStateResult.PartitionResult
    store = shares(ctx).state
    results = []
    for topic in request.topics or []:
        partitions = []
        for p in topic.partitions or []:
            try:
                state = store.read((request.group_id, topic.topic_id, p.partition))
            except KafkaError as exc:
                partitions.append(result_cls(partition=p.partition, error_code=exc.code, error_message=exc.message,
                                             state_epoch=-1, start_offset=-1))
                continue
            if state is None:
                partitions.append(result_cls(partition=p.partition, state_epoch=-1, start_offset=-1))
                continue
            partitions.append(result_cls(
                partition=p.partition, state_epoch=state.state_epoch, start_offset=state.start_offset,
                state_batches=[result_cls.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                     delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                               for b in state.batches]))
        results.append(cls.ReadStateResult(topic_id=topic.topic_id, partitions=partitions))
    return response_for(READ_SHARE_GROUP_STATE, ctx, results=results)


MAX_STATE_SPAN = 1_000_000  # offsets a written state may cover past its start


def _unsound_state(start_offset: int, batches) -> str | None:
    if start_offset < -1:
        return f"Start offset {start_offset} is invalid."
    for batch in batches:
        if batch.first_offset > batch.last_offset or batch.first_offset < 0:
            return f"State batch {batch.first_offset}-{batch.last_offset} is invalid."
        if batch.delivery_state not in (0, 2, 4) or batch.delivery_count < 0:
            return f"State batch {batch.first_offset}-{batch.last_offset} has an invalid state or delivery count."
        if batch.last_offset - max(start_offset, 0) > MAX_STATE_SPAN:
            return f"State batch {batch.first_offset}-{batch.last_offset} lies too far past the start offset."
    return None


@handles(WRITE_SHARE_GROUP_STATE, 0, 0)
async def handle_write_share_group_state(request, ctx: RequestContext):
    if (denied := _cluster_action_denied(request, ctx, WRITE_SHARE_GROUP_STATE, "WriteStateResult")) is not None:
        return denied
    from kafkacompat.shares.partition import StateBatch

    cls = response_class(WRITE_SHARE_GROUP_STATE)
    result_cls = cls.WriteStateResult.PartitionResult
    store = shares(ctx).state
    results = []
    for topic in request.topics or []:
        partitions = []
        for p in topic.partitions or []:
            batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in p.state_batches or []]
            problem = _unsound_state(p.start_offset, batches)
            if problem:
                partitions.append(result_cls(partition=p.partition, error_code=ErrorCode.INVALID_REQUEST,
                                             error_message=problem))
                continue
            try:
                await store.write((request.group_id, topic.topic_id, p.partition), p.leader_epoch, p.start_offset,
                                  batches, p.state_epoch)
            except KafkaError as exc:
                partitions.append(result_cls(partition=p.partition, error_code=exc.code, error_message=exc.message))
                continue
            partitions.append(result_cls(partition=p.partition))
        results.append(cls.WriteStateResult(topic_id=topic.topic_id, partitions=partitions))
    return response_for(WRITE_SHARE_GROUP_STATE, ctx, results=results)


# ---- DescribeShareGroupOffsets ---------------------------------------------------------------------

DESCRIBE_SHARE_GROUP_OFFSETS = 90


@handles(DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def handle_describe_share_group_offsets(request, ctx: RequestContext):
    cls = response_class(DESCRIBE_SHARE_GROUP_OFFSETS)
    return response_for(DESCRIBE_SHARE_GROUP_OFFSETS, ctx, throttle_time_ms=0,
                        groups=[await _describe_offsets(ctx, group, cls) for group in request.groups or []])


async def _describe_offsets(ctx: RequestContext, group, cls):
    """A share group's start offset per partition, from the share coordinator (-1 for a
    partition the group has not started consuming), as Kafka's DescribeShareGroupOffsets; from
    v1 with its lag (KIP-1226)."""
    group_cls = cls.DescribeShareGroupOffsetsResponseGroup
    topic_cls = group_cls.DescribeShareGroupOffsetsResponseTopic
    partition_cls = topic_cls.DescribeShareGroupOffsetsResponsePartition
    error, message, share_group = shares(ctx).groups.describe(group.group_id)
    if error and error != ErrorCode.GROUP_ID_NOT_FOUND:
        return group_cls(group_id=group.group_id, error_code=error, error_message=message)
    if group.topics is None:
        names = sorted(share_group.subscribed_topics()) if share_group is not None else []
        wanted = [(name, None) for name in names]
    else:
        wanted = [(t.topic_name, list(t.partitions or [])) for t in group.topics]
    topics = []
    started: list[tuple["TopicInfo", object, int]] = []  # (topic, described partition, delivery-complete count)
    for name, partitions in wanted:
        topic = ctx.metadata.topic(name)
        if topic is None:
            topics.append(topic_cls(topic_name=name, partitions=[
                partition_cls(partition_index=p, start_offset=-1, leader_epoch=-1,
                              error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions or []]))
            continue
        described = []
        for index in range(topic.partitions) if partitions is None else partitions:
            answer, complete = await _described_partition(ctx, group.group_id, topic, index, partition_cls)
            described.append(answer)
            if complete is not None:
                started.append((topic, answer, complete))
        topics.append(topic_cls(topic_name=name, topic_id=topic.topic_id, partitions=described))
    if ctx.version >= 1 and started:
        high_watermarks = await _high_watermarks(ctx, [(topic, answer.partition_index) for topic, answer, _ in started])
        for topic, answer, complete in started:
            found = high_watermarks.get((topic.name, answer.partition_index))
            if isinstance(found, int):
                answer.lag = found - answer.start_offset - complete
            else:  # as Kafka: the partition answers why its latest offset is unknown, and nothing else
                unknown = found or KafkaError(ErrorCode.LEADER_NOT_AVAILABLE,
                                              f"{topic.name}-{answer.partition_index} has no leader")
                answer.start_offset = answer.leader_epoch = 0
                answer.error_code, answer.error_message = unknown.code, unknown.message
    return group_cls(group_id=group.group_id, topics=topics)


async def _described_partition(ctx: RequestContext, group_id: str, topic: "TopicInfo", index: int, partition_cls):
    """The partition's answer (lag -1 for now) and, where the share partition has started, its
    delivery-complete count (else None)."""
    if not 0 <= index < topic.partitions:
        return partition_cls(partition_index=index, start_offset=-1, leader_epoch=-1,
                             error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
    try:
        state = await shares(ctx).partitions.persister.read_state((group_id, topic.topic_id, index))
    except KafkaError as exc:
        return partition_cls(partition_index=index, start_offset=-1, leader_epoch=-1, error_code=exc.code,
                             error_message=exc.message), None
    if state is None or state.start_offset < 0:
        return partition_cls(partition_index=index, start_offset=-1, leader_epoch=-1), None
    answer = partition_cls(partition_index=index, start_offset=state.start_offset, leader_epoch=state.leader_epoch)
    return answer, delivery_complete_count(state.start_offset, state.batches)


async def _high_watermarks(ctx: RequestContext,
                           wanted: list[tuple["TopicInfo", int]]) -> dict[tuple[str, int], "int | KafkaError"]:
    """Each partition's high watermark: read here where this broker leads it, else asked of its
    leader with one ListOffsets per leader broker (Kafka's PartitionMetadataClient); the error
    instead where the leader could not tell, and nothing for a partition without a leader."""
    from kafkacompat.shares.remote import RoutingPersister

    found: dict[tuple[str, int], int | KafkaError] = {}
    remote: dict[int, list[tuple[str, int]]] = {}
    for topic, index in wanted:
        partition = ctx.replicas.partition(topic.name, index)
        if partition is not None and partition.is_leader:
            found[(topic.name, index)] = partition.high_watermark
            continue
        state = ctx.metadata.partition_state(topic.name, index)
        if state is not None and state.leader >= 0 and state.leader != ctx.metadata.node_id:
            remote.setdefault(state.leader, []).append((topic.name, index))
    persister = shares(ctx).partitions.persister
    if remote and isinstance(persister, RoutingPersister):
        async def ask(leader: int, partitions: list[tuple[str, int]]) -> None:
            found.update(await persister.high_watermarks(leader, partitions))

        async with trio.open_nursery() as nursery:
            for leader, partitions in remote.items():
                nursery.start_soon(ask, leader, partitions)
    return found


# ---- FindCoordinator key type share ---------------------------------------------------------------


def _share_partition_key(key: str) -> tuple[str, uuid.UUID, int]:
    """Kafka's SharePartitionKey.getInstance: "group:topicId:partition", topic id in Kafka's base64."""
    try:
        group_id, topic_id, partition = key.rsplit(":", 2)
        raw = base64.urlsafe_b64decode(topic_id + "==")
        if not group_id or len(raw) != 16:
            raise ValueError(key)
        return group_id, uuid.UUID(bytes=raw), int(partition)
    except (ValueError, binascii.Error):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid share coordinator key {key!r}") from None


async def find_share_coordinator(ctx: RequestContext, key: str) -> tuple[int, int, str, int]:
    """The share coordinator of a share partition: the leader of its __share_group_state partition."""
    from kafkacompat.shares.records import SHARE_STATE_TOPIC

    try:
        share_key = _share_partition_key(key)
    except KafkaError as exc:
        return exc.code, -1, "", -1
    store = shares(ctx).state
    if store.topic() is None and await store.ensure_topic() is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    state = ctx.metadata.partition_state(SHARE_STATE_TOPIC, store.partition_for(share_key))
    info = ctx.metadata.brokers().get(state.leader) if state is not None else None
    if info is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, info.broker_id, info.host, info.port


# ---- AlterShareGroupOffsets / DeleteShareGroupOffsets ------------------------------------------------

ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92


@handles(ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_alter_share_group_offsets(request, ctx: RequestContext):
    """Set an empty share group's start offsets (a new state epoch, nothing in flight)."""
    cls = response_class(ALTER_SHARE_GROUP_OFFSETS)
    topic_cls = cls.AlterShareGroupOffsetsResponseTopic
    partition_cls = topic_cls.AlterShareGroupOffsetsResponsePartition
    try:
        shares(ctx).groups.empty_group_for_offsets(request.group_id, create=True)
    except KafkaError as exc:
        return response_for(ALTER_SHARE_GROUP_OFFSETS, ctx, throttle_time_ms=0, error_code=exc.code,
                            error_message=exc.message, responses=[])
    responses = []
    for requested in request.topics or []:
        topic = ctx.metadata.topic(requested.topic_name)
        partitions = []
        for p in requested.partitions or []:
            code, message = ErrorCode.NONE, None
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p.start_offset < 0:
                code, message = ErrorCode.INVALID_REQUEST, f"Start offset {p.start_offset} is negative."
            else:
                code, message = await _change_state(ctx, (request.group_id, topic.topic_id, p.partition_index),
                                                    p.start_offset)
            partitions.append(partition_cls(partition_index=p.partition_index, error_code=code, error_message=message))
        responses.append(topic_cls(topic_name=requested.topic_name,
                                   topic_id=topic.topic_id if topic is not None else uuid.UUID(int=0),
                                   partitions=partitions))
    return response_for(ALTER_SHARE_GROUP_OFFSETS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE,
                        error_message=None, responses=responses)


@handles(DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_delete_share_group_offsets(request, ctx: RequestContext):
    """Forget an empty share group's state of whole topics: it starts afresh at
    share.auto.offset.reset on its next fetch."""
    cls = response_class(DELETE_SHARE_GROUP_OFFSETS)
    topic_cls = cls.DeleteShareGroupOffsetsResponseTopic
    try:
        shares(ctx).groups.empty_group_for_offsets(request.group_id, create=False)
    except KafkaError as exc:
        return response_for(DELETE_SHARE_GROUP_OFFSETS, ctx, throttle_time_ms=0, error_code=exc.code,
                            error_message=exc.message, responses=[])
    responses = []
    for requested in request.topics or []:
        topic = ctx.metadata.topic(requested.topic_name)
        if topic is None:
            responses.append(topic_cls(topic_name=requested.topic_name,
                                       error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        code, message = ErrorCode.NONE, None
        for index in range(topic.partitions):
            code, message = await _change_state(ctx, (request.group_id, topic.topic_id, index), None)
            if code:
                break
        responses.append(topic_cls(topic_name=topic.name, topic_id=topic.topic_id, error_code=code,
                                   error_message=message))
    return response_for(DELETE_SHARE_GROUP_OFFSETS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE,
                        error_message=None, responses=responses)


async def _change_state(ctx: RequestContext, key: tuple[str, uuid.UUID, int],
                        start_offset: int | None) -> tuple[int, str | None]:
    manager = shares(ctx).partitions
    try:
        if start_offset is None:
            await manager.persister.delete_state(key)
        else:
            await manager.persister.initialize_state(key, start_offset)
    except KafkaError as exc:
        return exc.code, exc.message
    finally:
        manager.invalidate(key)
    return ErrorCode.NONE, None


# ---- InitializeShareGroupState / DeleteShareGroupState (between brokers) -----------------------------

INITIALIZE_SHARE_GROUP_STATE = 83
DELETE_SHARE_GROUP_STATE = 86


@handles(INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def handle_initialize_share_group_state(request, ctx: RequestContext):
    if (denied := _cluster_action_denied(request, ctx, INITIALIZE_SHARE_GROUP_STATE, "InitializeStateResult")) is not None:
        return denied
    cls = response_class(INITIALIZE_SHARE_GROUP_STATE)
    result_cls = cls.InitializeStateResult.PartitionResult
    results = []
    for topic in request.topics or []:
        partitions = []
        for p in topic.partitions or []:
            try:
                await shares(ctx).state.initialize((request.group_id, topic.topic_id, p.partition), p.start_offset)
                partitions.append(result_cls(partition=p.partition))
            except KafkaError as exc:
                partitions.append(result_cls(partition=p.partition, error_code=exc.code, error_message=exc.message))
        results.append(cls.InitializeStateResult(topic_id=topic.topic_id, partitions=partitions))
    return response_for(INITIALIZE_SHARE_GROUP_STATE, ctx, results=results)


@handles(DELETE_SHARE_GROUP_STATE, 0, 0)
async def handle_delete_share_group_state(request, ctx: RequestContext):
    if (denied := _cluster_action_denied(request, ctx, DELETE_SHARE_GROUP_STATE, "DeleteStateResult")) is not None:
        return denied
    cls = response_class(DELETE_SHARE_GROUP_STATE)
    result_cls = cls.DeleteStateResult.PartitionResult
    results = []
    for topic in request.topics or []:
        partitions = []
        for p in topic.partitions or []:
            try:
                await shares(ctx).state.delete((request.group_id, topic.topic_id, p.partition))
                partitions.append(result_cls(partition=p.partition))
            except KafkaError as exc:
                partitions.append(result_cls(partition=p.partition, error_code=exc.code, error_message=exc.message))
        results.append(cls.DeleteStateResult(topic_id=topic.topic_id, partitions=partitions))
    return response_for(DELETE_SHARE_GROUP_STATE, ctx, results=results)
