"""Committed offsets: OffsetCommit v0-10, OffsetFetch v0-10 (topics by id from v10), OffsetDelete v0.

The generated codecs carry every version from v0, so v0 and v1 (Sarama, old clients) go through
the same codec; tests/test_groups_storage.py checks those layouts against hand-built bytes.
"""

from __future__ import annotations

from kafkacompat.groups.coordinator import CommitPartition
from kafkacompat.handlers.groups import coordinator
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47


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
    version = ctx.version
    partitions = []
    shape = []  # (name, topic id, partition indexes, resolved)
    for topic in request.topics or []:
        indexes = [p.partition_index for p in topic.partitions or []]
        name = _topic_name(ctx, topic.name, topic.topic_id)
        shape.append((name or "", topic.topic_id, indexes, name is not None))
        if name is None:
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
    topic_cls = response_class(OFFSET_COMMIT).OffsetCommitResponseTopic
    partition_cls = topic_cls.OffsetCommitResponsePartition
    it = iter(errors)
    topics = [
        topic_cls(**_topic_key(ctx, name, topic_id), partitions=[
            partition_cls(partition_index=i, error_code=next(it) if resolved else ErrorCode.UNKNOWN_TOPIC_ID)
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
            error, fetched = coordinator(ctx).fetch_offsets(
                group.group_id, topics, require_stable,
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
    error, fetched = coordinator(ctx).fetch_offsets(request.group_id, topics, require_stable)
    if error and version < 2:
        # v0/v1 have no group-level error: report it on every requested partition.
        from kafkacompat.groups.coordinator import FetchedOffset

        fetched = [FetchedOffset(name, index, error=error) for name, indexes in topics or [] for index in indexes]
        error = 0
    return response_for(
        OFFSET_FETCH, ctx, throttle_time_ms=0, error_code=error,
        topics=_group_topics(fetched, topic_cls, partition_cls, ctx),
    )


@handles(OFFSET_DELETE, 0, 0)
async def handle_offset_delete(request, ctx: RequestContext):
    shape = [(t.name, [p.partition_index for p in t.partitions or []]) for t in request.topics or []]
    partitions = [(name, index) for name, indexes in shape for index in indexes]
    error, errors = coordinator(ctx).delete_offsets(request.group_id, partitions)
    topic_cls = response_class(OFFSET_DELETE).OffsetDeleteResponseTopic
    partition_cls = topic_cls.OffsetDeleteResponsePartition
    if error:
        return response_for(OFFSET_DELETE, ctx, throttle_time_ms=0, error_code=error, topics=[])
    it = iter(errors)
    topics = [
        topic_cls(name=name, partitions=[partition_cls(partition_index=i, error_code=next(it)) for i in indexes])
        for name, indexes in shape
    ]
    return response_for(OFFSET_DELETE, ctx, throttle_time_ms=0, error_code=0, topics=topics)
