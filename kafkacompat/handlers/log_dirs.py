"""DescribeLogDirs and AlterReplicaLogDirs: this broker's log directories (log.dirs, JBOD).

DescribeLogDirs: every log directory with the size and offset lag of its logs, the future ones
(a move in progress) flagged isFuture, the volume's total and usable bytes (v4), and
KAFKA_STORAGE_ERROR for an offline directory (replication/log_dirs.py describes them).

AlterReplicaLogDirs: move replicas to another log directory of this broker; the copy runs in the
background and the answer comes at once (Kafka's ReplicaManager.alterReplicaLogDirs). Versions
1-2, as Kafka 4 serves (0 was removed). Both need CLUSTER ALTER / DESCRIBE, as Kafka.
"""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.replication.log_dirs import describe_log_dirs
from kafkacompat.security.acl import AclOperation
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35


@handles(DESCRIBE_LOG_DIRS, 0, 4)
async def handle_describe_log_dirs(request, ctx: RequestContext):
    cls = response_class(DESCRIBE_LOG_DIRS)
    result_cls = cls.DescribeLogDirsResult
    topic_cls = result_cls.DescribeLogDirsTopic
    partition_cls = topic_cls.DescribeLogDirsPartition
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return response_for(DESCRIBE_LOG_DIRS, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted = None
    if request.topics is not None:
        wanted = {(entry.topic, int(p)) for entry in request.topics for p in entry.partitions}
    results = []
    for described in describe_log_dirs(ctx.replicas.logs, ctx.replicas.partitions, wanted):
        by_topic: dict[str, list] = {}
        for replica in described.replicas:
            by_topic.setdefault(replica.topic, []).append(partition_cls(
                partition_index=replica.partition, partition_size=replica.size, offset_lag=replica.offset_lag,
                is_future_key=replica.is_future))
        results.append(result_cls(
            error_code=described.error_code, log_dir=described.path,
            topics=[topic_cls(name=t, partitions=ps) for t, ps in sorted(by_topic.items())],
            total_bytes=described.total_bytes, usable_bytes=described.usable_bytes,
        ))
    return response_for(DESCRIBE_LOG_DIRS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)


def _destinations(request) -> dict[tuple[str, int], str]:
    """Each named partition's destination directory; a partition named twice: the last one wins, as Kafka."""
    destinations: dict[tuple[str, int], str] = {}
    for directory in request.dirs:
        for topic in directory.topics:
            for index in topic.partitions:
                destinations[(topic.name, int(index))] = directory.path
    return destinations


def _alter_response(codes: dict[tuple[str, int], int]):
    cls = response_class(ALTER_REPLICA_LOG_DIRS)
    topic_cls = cls.AlterReplicaLogDirTopicResult
    partition_cls = topic_cls.AlterReplicaLogDirPartitionResult
    by_topic: dict[str, list] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(partition_cls(partition_index=index, error_code=code))
    return cls(throttle_time_ms=0, results=[topic_cls(topic_name=t, partitions=ps) for t, ps in by_topic.items()])


def _alter_error_response(request, code: int):
    """An injected fault's answer (faults.py): ``code`` for every named partition, nothing moved."""
    return _alter_response({key: code for key in _destinations(request)})


@handles(ALTER_REPLICA_LOG_DIRS, 1, 2, error_response=_alter_error_response)
async def handle_alter_replica_log_dirs(request, ctx: RequestContext):
    authorized = ctx.authorize_cluster(AclOperation.ALTER)
    return _alter_response({
        (topic, index): (ctx.replicas.alter_replica_log_dir(topic, index, path) if authorized
                         else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        for (topic, index), path in _destinations(request).items()
    })
