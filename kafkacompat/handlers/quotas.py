"""DescribeClientQuotas and AlterClientQuotas (v0-1): client quotas per user / client-id / ip.

The rules and the storage are in controller/client_quotas.py (Kafka's validation and filter
matching; ZooKeeper mode's /config/users, /config/clients, /config/ips in the metadata store, so
quotas survive restarts and every broker of a cluster sees them). Enforcing them is quotas.py's
(told at once when this broker alters them). Describing needs DESCRIBE_CONFIGS on the cluster,
altering ALTER_CONFIGS (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kafkacompat.controller.client_quotas import (
    QuotaAlteration,
    QuotaEntity,
    parse_filter,
)
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49


@handles(DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def handle_describe_client_quotas(request, ctx: RequestContext):
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return response_for(DESCRIBE_CLIENT_QUOTAS, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, entries=None)
    try:
        quota_filter = parse_filter(
            ((c.entity_type, c.match_type, c.match) for c in request.components or []), bool(request.strict))
        found = await ctx.admin.quota_store().describe(quota_filter)
    except KafkaError as error:
        return response_for(DESCRIBE_CLIENT_QUOTAS, ctx, throttle_time_ms=0, error_code=error.code,
                            error_message=error.message, entries=None)
    entry_cls = response_class(DESCRIBE_CLIENT_QUOTAS).EntryData
    entity_cls, value_cls = entry_cls.EntityData, entry_cls.ValueData
    entries = [
        entry_cls(
            entity=[entity_cls(entity_type=kind, entity_name=name) for kind, name in entity.entries.items()],
            values=[value_cls(key=key, value=value) for key, value in sorted(values.items())],
        )
        for entity, values in found.items()
    ]
    return response_for(DESCRIBE_CLIENT_QUOTAS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE,
                        error_message=None, entries=entries)


def _alterations(request) -> list[QuotaAlteration]:
    return [
        QuotaAlteration(
            QuotaEntity((e.entity_type, e.entity_name) for e in entry.entity or []),
            [(op.key, None if op.remove else op.value) for op in entry.ops or []],
        )
        for entry in request.entries or []
    ]


@handles(ALTER_CLIENT_QUOTAS, 0, 1)
async def handle_alter_client_quotas(request, ctx: RequestContext):
    alterations = _alterations(request)
    try:
        if not ctx.authorize_cluster(AclOperation.ALTER_CONFIGS):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        results = await ctx.admin.quota_store().alter(alterations, bool(request.validate_only))
    except KafkaError as error:
        results = list({alteration.entity: error for alteration in alterations}.items())
    if ctx.services.quotas is not None and not request.validate_only:
        ctx.services.quotas.changed()
    entry_cls = response_class(ALTER_CLIENT_QUOTAS).EntryData
    entity_cls = entry_cls.EntityData
    entries = [
        entry_cls(
            error_code=error.code if error else ErrorCode.NONE,
            error_message=error.message if error else None,
            entity=[entity_cls(entity_type=kind, entity_name=name) for kind, name in entity.entries.items()],
        )
        for entity, error in results
    ]
    return response_for(ALTER_CLIENT_QUOTAS, ctx, throttle_time_ms=0, entries=entries)
