"""KIP-714 client telemetry: GetTelemetrySubscriptions, PushTelemetry and ListConfigResources.

The state (subscriptions, client instances, their latest metrics) is the ClientMetricsManager's
(kafkacompat/telemetry.py); these handlers only turn requests into its calls and its answers and
KafkaErrors into responses. As Kafka, the two telemetry APIs need no ACL; ListConfigResources
needs DESCRIBE_CONFIGS on the cluster.
"""

from __future__ import annotations

import logging

from kafkacompat.controller.store import StoreError
from kafkacompat.handlers.configs import BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP, TOPIC
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation
from kafkacompat.telemetry import ClientMetadata, Push
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.telemetry")

GET_TELEMETRY_SUBSCRIPTIONS = 71
PUSH_TELEMETRY = 72
LIST_CONFIG_RESOURCES = 74
V1_RESOURCE_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


def client_metadata(ctx: RequestContext, instance_id) -> ClientMetadata:
    connection = ctx.connection
    return ClientMetadata(
        instance_id, ctx.client_id or "",
        connection.client_software_name if connection is not None else "",
        connection.client_software_version if connection is not None else "",
        ctx.client_host, str(connection.client_port) if connection is not None else "",
    )


@handles(GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def handle_get_telemetry_subscriptions(request, ctx: RequestContext):
    manager = ctx.services.telemetry
    try:
        subscribed = manager.get_subscriptions(client_metadata(ctx, request.client_instance_id))
    except KafkaError as exc:
        return response_for(GET_TELEMETRY_SUBSCRIPTIONS, ctx, error_code=exc.code)
    return response_for(
        GET_TELEMETRY_SUBSCRIPTIONS, ctx, error_code=ErrorCode.NONE,
        client_instance_id=subscribed.client_instance_id, subscription_id=subscribed.subscription_id,
        accepted_compression_types=subscribed.accepted_compression_types,
        push_interval_ms=subscribed.push_interval_ms, telemetry_max_bytes=subscribed.telemetry_max_bytes,
        delta_temporality=True, requested_metrics=subscribed.requested_metrics,
    )


@handles(PUSH_TELEMETRY, 0, 0)
async def handle_push_telemetry(request, ctx: RequestContext):
    push = Push(request.client_instance_id, request.subscription_id, bool(request.terminating),
                request.compression_type, bytes(request.metrics or b""))
    try:
        await ctx.services.telemetry.push(client_metadata(ctx, request.client_instance_id), push)
    except KafkaError as exc:
        log.debug("PushTelemetry from %s: %s (%s)", ctx.client_id, exc.code.name, exc.message)
        return response_for(PUSH_TELEMETRY, ctx, error_code=exc.code)
    return response_for(PUSH_TELEMETRY, ctx, error_code=ErrorCode.NONE)


async def _resource_names(ctx: RequestContext, resource_type: int) -> list[str]:
    """The resources of a type that have configs to list (Kafka's handleListConfigResources)."""
    if resource_type == CLIENT_METRICS:
        return sorted(ctx.services.telemetry.subscriptions)
    if resource_type in (BROKER, BROKER_LOGGER):
        return [str(node_id) for node_id in sorted(ctx.metadata.brokers())]
    if resource_type == TOPIC:
        return sorted(topic.name for topic in ctx.metadata.topics())
    # GROUP: the groups that set a config, and those coordinated here (Kafka's listGroups)
    assert ctx.services.group_configs is not None
    try:
        await ctx.services.group_configs.refresh()
    except StoreError as exc:
        log.info("ListConfigResources answered from the last known group configs: %s", exc)
    known = set(ctx.services.group_configs.overrides) | set(ctx.groups.groups)
    if ctx.services.shares is not None:
        known |= set(ctx.services.shares.groups.groups)
    return sorted(known)


@handles(LIST_CONFIG_RESOURCES, 0, 1)
async def handle_list_config_resources(request, ctx: RequestContext):
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return response_for(LIST_CONFIG_RESOURCES, ctx, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    supported = V1_RESOURCE_TYPES if ctx.version >= 1 else (CLIENT_METRICS,)
    wanted = list(request.resource_types or ()) or list(supported)
    if any(resource_type not in supported for resource_type in wanted):
        return response_for(LIST_CONFIG_RESOURCES, ctx, error_code=ErrorCode.UNSUPPORTED_VERSION)
    try:
        await ctx.services.telemetry.refresh()  # another broker may have changed them a moment ago
    except StoreError as exc:
        log.info("ListConfigResources answered from the last known subscriptions: %s", exc)
    resource_cls = response_class(LIST_CONFIG_RESOURCES).ConfigResource
    resources = [resource_cls(resource_name=name, resource_type=resource_type)
                 for resource_type in supported if resource_type in wanted
                 for name in await _resource_names(ctx, resource_type)]
    return response_for(LIST_CONFIG_RESOURCES, ctx, error_code=ErrorCode.NONE, config_resources=resources)
