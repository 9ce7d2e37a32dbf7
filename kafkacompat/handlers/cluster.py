"""DescribeCluster: the live brokers, the controller id, the cluster id (KIP-700).

As in Kafka's broker (AuthHelper.computeDescribeClusterResponse): a request for the controller
endpoints (endpoint_type 2, KIP-919) sent to a broker gets MISMATCHED_ENDPOINT_TYPE, an unknown
endpoint type UNSUPPORTED_ENDPOINT_TYPE, and v0 gets INVALID_REQUEST for either. The cluster's
authorized operations are the principal's (all of them without an authorizer), or none without
DESCRIBE on the cluster, as Kafka's.
"""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

DESCRIBE_CLUSTER = 60

ENDPOINT_TYPE_NAMES = {1: "BROKER", 2: "CONTROLLER"}
BROKER_ENDPOINT = 1

# The int32 authorized-operations fields: Kafka's "not asked for" value, or a bit per AclOperation code.
OPERATIONS_OMITTED = -2147483648


def cluster_authorized_operations(ctx: RequestContext) -> int:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


def _endpoint_type_error(endpoint_type: int, version: int) -> tuple[int, str] | None:
    if endpoint_type == BROKER_ENDPOINT:
        return None
    if endpoint_type not in ENDPOINT_TYPE_NAMES:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return code, f"Unsupported endpoint type {endpoint_type}"
    code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
    return code, (
        f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
        f"{ENDPOINT_TYPE_NAMES[endpoint_type]}"
    )


def _brokers(ctx: RequestContext) -> list:
    broker_cls = response_class(DESCRIBE_CLUSTER).DescribeClusterBroker
    listener = ctx.listener_name
    return [broker_cls(broker_id=b.broker_id, host=host, port=port, rack=b.rack, is_fenced=False)
            for b in sorted(ctx.metadata.brokers().values(), key=lambda b: b.broker_id)
            for host, port in [b.address(listener)]]


@handles(DESCRIBE_CLUSTER, 0, 2)
async def handle_describe_cluster(request, ctx: RequestContext):
    error = _endpoint_type_error(request.endpoint_type, ctx.version)
    if error is not None:
        code, message = error
        return response_for(
            DESCRIBE_CLUSTER, ctx, throttle_time_ms=0, error_code=code, error_message=message,
            endpoint_type=BROKER_ENDPOINT, cluster_id="", controller_id=-1, brokers=[],
        )
    operations = (cluster_authorized_operations(ctx) if request.include_cluster_authorized_operations
                  else OPERATIONS_OMITTED)
    return response_for(
        DESCRIBE_CLUSTER, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        endpoint_type=BROKER_ENDPOINT, cluster_id=ctx.metadata.cluster_id, controller_id=ctx.metadata.controller_id,
        brokers=_brokers(ctx), cluster_authorized_operations=operations,
    )
