"""Committed offsets: OffsetCommit v0-10, OffsetFetch v0-10 (topics by id from v10), OffsetDelete v0.

The generated codecs carry every version from v0, so v0 and v1 (Sarama, old clients) go through
the same codec; tests/test_groups_storage.py checks those layouts against hand-built bytes.
"""

from __future__ import annotations

from kafkacompat.groups.coordinator import CommitPartition, FetchedOffset
from kafkacompat.handlers.groups import coordinator, may_read_group
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47


def _may(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return ctx.authorize(operation, ResourceType.TOPIC, topic)


def _all_failed(shape, topic_cls, partition_cls, code: int) -> list:
    return [topic_cls(name=name, partitions=[partition_cls(partition_index=i, error_code=code) for i in indexes])
            for name, indexes in shape]


def _topic_key(ctx: RequestContext, name: str, topic_id) -> dict:
    """How a response names a topic: by name before v10, by id from v10."""
    return {"topic_id": topic_id} if ctx.version >= 10 else {"name": name}


def _topic_name(ctx: RequestContext, name: str, topic_id) -> str | None:
    """The topic a request names: by id from v10 of OffsetCommit/OffsetFetch (None: unknown id)."""
    if ctx.version < 10:
        return name
    topic = ctx.metadata.topic_by_id(topic_id)
    return topic.name if topic is not None else None


@handles(OFFSET_COMMIT, 0, 10)
async def handle_offset_commit(request, ctx: RequestContext):
    """Kafka's checks: READ on the group (GROUP_AUTHORIZATION_FAILED everywhere), READ on each
    topic (TOPIC_AUTHORIZATION_FAILED for its partitions, which are not committed)."""
    version = ctx.version
    topic_cls = response_class(OFFSET_COMMIT).OffsetCommitResponseTopic
    partition_cls = topic_cls.OffsetCommitResponsePartition
    shape = [(topic.name, [p.partition_index for p in topic.partitions or []]) for topic in request.topics or []]
    if not may_read_group(ctx, request.group_id):
        return response_for(OFFSET_COMMIT, ctx, throttle_time_ms=0,
                            topics=_all_failed(shape, topic_cls, partition_cls, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    denied = {topic.name for topic in request.topics or [] if not _may(ctx, AclOperation.READ, topic.name)}
    partitions = []
    shape = []  # (name, topic id, partition indexes, resolved)
    for topic in request.topics or []:
        indexes = [p.partition_index for p in topic.partitions or []]
        name = _topic_name(ctx, topic.name, topic.topic_id)
        shape.append((name or "", topic.topic_id, indexes, name is not None))
        if name is None or name in denied:
            continue
        for p in topic.partitions or []:
            partitions.append(CommitPartition(
                name, p.partition_index, p.committed_offset,
                p.committed_leader_epoch if version >= 6 else -1,
                p.committed_metadata,
                p.commit_timestamp if version == 1 else -1,
            ))
    errors = await coordinator(ctx).commit_offsets_replicated(
        request.group_id,
        request.generation_id_or_member_epoch if version >= 1 else -1,
        (request.member_id or "") if version >= 1 else "",
        request.group_instance_id if version >= 7 else None,
        partitions,
        retention_ms=request.retention_time_ms if 2 <= version <= 4 else -1,
        version=version,
    )
    it = iter(errors)
    topics = [
        topic_cls(**_topic_key(ctx, name, topic_id), partitions=[
            partition_cls(partition_index=i, error_code=(ErrorCode.UNKNOWN_TOPIC_ID if not resolved
                                                         else ErrorCode.TOPIC_AUTHORIZATION_FAILED if name in denied
                                                         else next(it)))
            for i in indexes])
        for name, topic_id, indexes, resolved in shape
    ]
    return response_for(OFFSET_COMMIT, ctx, throttle_time_ms=0, topics=topics)


def _group_topics(fetched, cls_topic, cls_partition, ctx: RequestContext):
    by_topic: dict[str, list] = {}
    for f in fetched:
        by_topic.setdefault(f.topic, []).append(cls_partition(
            partition_index=f.partition, committed_offset=f.offset, committed_leader_epoch=f.leader_epoch,
            metadata=f.metadata, error_code=f.error,
        ))
    if ctx.version < 10:
        return [cls_topic(name=name, partitions=parts) for name, parts in by_topic.items()]
    topics = []
    for name, parts in by_topic.items():
        topic = ctx.metadata.topic(name)
        if topic is not None:  # from v10 topics are named by id: offsets of deleted topics are left out
            topics.append(cls_topic(topic_id=topic.topic_id, partitions=parts))
    return topics


def _fetch_authorized(ctx: RequestContext, group_id: str, topics, require_stable: bool, **member):
    """A group's offsets, only for the topics the client may DESCRIBE: a requested partition of
    another is answered TOPIC_AUTHORIZATION_FAILED, and a fetch of every committed partition
    leaves those topics out (Kafka's OffsetFetch)."""
    if ctx.services.authorizer is None:
        return coordinator(ctx).fetch_offsets(group_id, topics, require_stable, **member)
    if topics is None:
        error, fetched = coordinator(ctx).fetch_offsets(group_id, None, require_stable, **member)
        allowed = {f.topic for f in fetched if _may(ctx, AclOperation.DESCRIBE, f.topic)}
        return error, [f for f in fetched if f.topic in allowed]
    allowed = [(name, indexes) for name, indexes in topics if _may(ctx, AclOperation.DESCRIBE, name)]
    error, fetched = coordinator(ctx).fetch_offsets(group_id, allowed, require_stable, **member)
    if error:
        return error, fetched
    by_key = {(f.topic, f.partition): f for f in fetched}
    allowed_names = {name for name, _ in allowed}
    return error, [by_key.get((name, index), FetchedOffset(name, index)) if name in allowed_names
                   else FetchedOffset(name, index, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                   for name, indexes in topics for index in indexes]


@handles(OFFSET_FETCH, 0, 10)
async def handle_offset_fetch(request, ctx: RequestContext):
    version = ctx.version
    cls = response_class(OFFSET_FETCH)
    require_stable = bool(request.require_stable) if version >= 7 else False
    if version >= 8:
        group_cls = cls.OffsetFetchResponseGroup
        topic_cls = group_cls.OffsetFetchResponseTopics
        partition_cls = topic_cls.OffsetFetchResponsePartitions
        groups = []
        for group in request.groups or []:
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
                groups.append(group_cls(group_id=group.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                        topics=[]))
                continue
            topics, unknown = None, []
            if group.topics is not None:
                topics = []
                for t in group.topics:
                    name = _topic_name(ctx, t.name, t.topic_id)
                    if name is None:
                        unknown.append(topic_cls(topic_id=t.topic_id, partitions=[
                            partition_cls(partition_index=i, committed_offset=-1, metadata="",
                                          error_code=ErrorCode.UNKNOWN_TOPIC_ID) for i in t.partition_indexes]))
                    else:
                        topics.append((name, list(t.partition_indexes)))
            error, fetched = _fetch_authorized(
                ctx, group.group_id, topics, require_stable,
                member_id=group.member_id if version >= 9 else None,
                member_epoch=group.member_epoch if version >= 9 else -1)
            groups.append(group_cls(
                group_id=group.group_id, error_code=error,
                topics=_group_topics(fetched, topic_cls, partition_cls, ctx) + unknown if not error else [],
            ))
        return response_for(OFFSET_FETCH, ctx, throttle_time_ms=0, groups=groups)
    topic_cls = cls.OffsetFetchResponseTopic
    partition_cls = topic_cls.OffsetFetchResponsePartition
    topics = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        error, fetched = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    else:
        error, fetched = _fetch_authorized(ctx, request.group_id, topics, require_stable)
    if error and version < 2:
        # v0/v1 have no group-level error: report it on every requested partition.
        fetched = [FetchedOffset(name, index, error=error) for name, indexes in topics or [] for index in indexes]
        error = 0
    return response_for(
        OFFSET_FETCH, ctx, throttle_time_ms=0, error_code=error,
        topics=_group_topics(fetched, topic_cls, partition_cls, ctx),
    )


@handles(OFFSET_DELETE, 0, 0)
async def handle_offset_delete(request, ctx: RequestContext):
    shape = [(t.name, [p.partition_index for p in t.partitions or []]) for t in request.topics or []]
    topic_cls = response_class(OFFSET_DELETE).OffsetDeleteResponseTopic
    partition_cls = topic_cls.OffsetDeleteResponsePartition
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return response_for(OFFSET_DELETE, ctx, throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                            topics=[])
    denied = {name for name, _ in shape if not _may(ctx, AclOperation.READ, name)}
    partitions = [(name, index) for name, indexes in shape if name not in denied for index in indexes]
    error, errors = coordinator(ctx).delete_offsets(request.group_id, partitions)
    if error:
        return response_for(OFFSET_DELETE, ctx, throttle_time_ms=0, error_code=error, topics=[])
    it = iter(errors)
    topics = [
        topic_cls(name=name, partitions=[
            partition_cls(partition_index=i, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if name in denied
                          else next(it)) for i in indexes])
        for name, indexes in shape
    ]
    return response_for(OFFSET_DELETE, ctx, throttle_time_ms=0, error_code=0, topics=topics)
