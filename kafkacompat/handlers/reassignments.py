"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving partitions to other
brokers, through the controller's store (kafkacompat/controller/reassignment.py). A null replica
list cancels a move; v1's allow_replication_factor_change=false refuses a target of another size.
On a single node a partition can only be "moved" to where it is. Altering needs ALTER on the cluster,
listing DESCRIBE (CLUSTER_AUTHORIZATION_FAILED), as Kafka."""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46


@handles(ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def handle_alter_partition_reassignments(request, ctx: RequestContext):
    wanted = {(topic.name, p.partition_index): (list(p.replicas) if p.replicas is not None else None)
              for topic in request.topics for p in topic.partitions}
    allow = request.allow_replication_factor_change if ctx.version >= 1 else True
    try:
        if not ctx.authorize_cluster(AclOperation.ALTER):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        results = await ctx.admin.alter_partition_reassignments(wanted, allow_replication_factor_change=allow)
    except KafkaError as exc:
        return response_for(ALTER_PARTITION_REASSIGNMENTS, ctx, throttle_time_ms=0, error_code=exc.code,
                            error_message=exc.message, allow_replication_factor_change=allow, responses=[])
    cls = response_class(ALTER_PARTITION_REASSIGNMENTS)
    by_topic: dict[str, list] = {}
    for (topic, index), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(cls.ReassignableTopicResponse.ReassignablePartitionResponse(
            partition_index=index, error_code=code, error_message=message))
    return response_for(
        ALTER_PARTITION_REASSIGNMENTS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        allow_replication_factor_change=allow,
        responses=[cls.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in by_topic.items()])


@handles(LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def handle_list_partition_reassignments(request, ctx: RequestContext):
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return response_for(LIST_PARTITION_REASSIGNMENTS, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, topics=[])
    wanted = (None if request.topics is None
              else [(topic.name, p) for topic in request.topics for p in topic.partition_indexes])
    moving = ctx.admin.list_partition_reassignments(wanted)
    cls = response_class(LIST_PARTITION_REASSIGNMENTS)
    by_topic: dict[str, list] = {}
    for (topic, index), move in sorted(moving.items()):
        by_topic.setdefault(topic, []).append(cls.OngoingTopicReassignment.OngoingPartitionReassignment(
            partition_index=index, replicas=list(move.replicas), adding_replicas=list(move.adding),
            removing_replicas=list(move.removing)))
    return response_for(
        LIST_PARTITION_REASSIGNMENTS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        topics=[cls.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()])
