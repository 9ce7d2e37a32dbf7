"""ElectLeaders (preferred or unclean leader election, KIP-460).

ElectLeaders goes through the controller's compare-and-set on the partition states (any broker
can take it, as Kafka forwards it to the controller). On a single node the only replica always
leads, so every election is ELECTION_NOT_NEEDED. A null partition list means every partition;
then, as Kafka, partitions that needed no election are left out of the answer.
"""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

ELECT_LEADERS = 43

PREFERRED = 0
UNCLEAN = 1


def _requested_partitions(request) -> list[tuple[str, int]] | None:
    if request.topic_partitions is None:
        return None
    return [(entry.topic, int(p)) for entry in request.topic_partitions for p in entry.partitions]


@handles(ELECT_LEADERS, 0, 2)
async def handle_elect_leaders(request, ctx: RequestContext):
    cls = response_class(ELECT_LEADERS)
    result_cls = cls.ReplicaElectionResult
    partition_cls = result_cls.PartitionResult
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return response_for(ELECT_LEADERS, ctx, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            replica_election_results=[])
    election_type = request.election_type if ctx.version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return response_for(ELECT_LEADERS, ctx, throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                            replica_election_results=[])
    wanted = _requested_partitions(request)
    try:
        results = await ctx.admin.elect_leaders(election_type, wanted)
    except KafkaError as exc:
        return response_for(ELECT_LEADERS, ctx, throttle_time_ms=0, error_code=exc.code, replica_election_results=[])
    by_topic: dict[str, list] = {}
    for (topic, index), (code, message) in results.items():
        if wanted is None and code == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        by_topic.setdefault(topic, []).append(partition_cls(partition_id=index, error_code=code, error_message=message))
    return response_for(
        ELECT_LEADERS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE,
        replica_election_results=[result_cls(topic=t, partition_result=ps) for t, ps in by_topic.items()],
    )
