"""DescribeAcls, CreateAcls, DeleteAcls (v0-3): the ACLs of the authorizer (security/authorizer.py).

Without an authorizer (``authorizer.class.name`` empty) they get the answers of Kafka's AclApis
for that case: DescribeAcls SECURITY_DISABLED with "No Authorizer is configured on the broker";
CreateAcls and DeleteAcls SECURITY_DISABLED with "No Authorizer is configured." on every creation
/ every filter (Kafka builds those two from a SecurityDisabledException, hence the different
sentence). With one, DescribeAcls needs DESCRIBE on the cluster and the other two ALTER
(CLUSTER_AUTHORIZATION_FAILED otherwise, for the whole request).

Before that, Kafka's request classes refuse, while the request parses, a creation or filter with
an UNKNOWN (0) resource type, pattern type, operation or permission type; the broker then closes
the connection without an answer. The decoders here do the same (a DecodeError closes it).
"""

from __future__ import annotations

from typing import Any

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclBinding, AclOperation, binding_of, filter_of
from kafkacompat.wire import codec
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

UNKNOWN = 0  # the UNKNOWN code of ResourceType, PatternType, AclOperation and AclPermissionType
DESCRIBE_NO_AUTHORIZER = "No Authorizer is configured on the broker"
ALTER_NO_AUTHORIZER = "No Authorizer is configured."


def _has_unknown_element(*codes: int) -> bool:
    return UNKNOWN in codes


def _decode_describe(version: int, body: memoryview) -> Any:
    request = codec.decode_request(DESCRIBE_ACLS, version, body)
    # pattern_type_filter reads as its default (3, LITERAL) at v0, which has no such field.
    if _has_unknown_element(request.resource_type_filter, request.pattern_type_filter, request.operation,
                            request.permission_type):
        raise codec.DecodeError(f"DescribeAclsRequest contains UNKNOWN elements: {request}")
    return request


def _decode_create(version: int, body: memoryview) -> Any:
    request = codec.decode_request(CREATE_ACLS, version, body)
    if any(_has_unknown_element(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
           for c in request.creations or []):
        raise codec.DecodeError(f"CreatableAcls contain unknown elements: {request.creations}")
    return request


def _decode_delete(version: int, body: memoryview) -> Any:
    request = codec.decode_request(DELETE_ACLS, version, body)
    if any(_has_unknown_element(f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type)
           for f in request.filters or []):
        raise codec.DecodeError(f"Filters contain UNKNOWN elements, filters: {request.filters}")
    return request


def _filter(f):
    return filter_of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                     f.host_filter, f.operation, f.permission_type)


def _described(bindings: list[AclBinding]) -> list:
    """Kafka's DescribeAclsResponse.aclsResources: one resource per pattern, with its entries."""
    resource_cls = response_class(DESCRIBE_ACLS).DescribeAclsResource
    acl_cls = resource_cls.AclDescription
    by_pattern: dict = {}
    for binding in bindings:
        e = binding.entry
        by_pattern.setdefault(binding.pattern, []).append(
            acl_cls(principal=e.principal, host=e.host, operation=e.operation, permission_type=e.permission))
    return [resource_cls(resource_type=p.resource_type, resource_name=p.name, pattern_type=p.pattern_type, acls=acls)
            for p, acls in by_pattern.items()]


@handles(DESCRIBE_ACLS, 0, 3, decode=_decode_describe)
async def handle_describe_acls(request, ctx: RequestContext):
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return response_for(DESCRIBE_ACLS, ctx, throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                            error_message=DESCRIBE_NO_AUTHORIZER, resources=[])
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return response_for(DESCRIBE_ACLS, ctx, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            error_message=None, resources=[])
    return response_for(DESCRIBE_ACLS, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                        resources=_described(authorizer.acls(_filter(request))))


@handles(CREATE_ACLS, 0, 3, decode=_decode_create)
async def handle_create_acls(request, ctx: RequestContext):
    result_cls = response_class(CREATE_ACLS).AclCreationResult
    creations = request.creations or []
    authorizer = ctx.services.authorizer
    if authorizer is None or not ctx.authorize_cluster(AclOperation.ALTER):
        code, message = ((ErrorCode.SECURITY_DISABLED, ALTER_NO_AUTHORIZER) if authorizer is None
                         else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
        results = [result_cls(error_code=code, error_message=message) for _ in creations]
        return response_for(CREATE_ACLS, ctx, throttle_time_ms=0, results=results)
    bindings = [binding_of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                           c.operation, c.permission_type) for c in creations]
    errors = await authorizer.create_acls(bindings)
    results = [result_cls(error_code=error.code, error_message=error.message) if error
               else result_cls(error_code=ErrorCode.NONE, error_message=None) for error in errors]
    return response_for(CREATE_ACLS, ctx, throttle_time_ms=0, results=results)


def _filter_result(result_cls, outcome):
    if isinstance(outcome, KafkaError):
        return result_cls(error_code=outcome.code, error_message=outcome.message, matching_acls=[])
    matching_cls = result_cls.DeleteAclsMatchingAcl
    return result_cls(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
        matching_cls(error_code=ErrorCode.NONE, error_message=None, resource_type=b.pattern.resource_type,
                     resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                     host=b.entry.host, operation=b.entry.operation, permission_type=b.entry.permission)
        for b in outcome])


@handles(DELETE_ACLS, 0, 3, decode=_decode_delete)
async def handle_delete_acls(request, ctx: RequestContext):
    result_cls = response_class(DELETE_ACLS).DeleteAclsFilterResult
    filters = request.filters or []
    authorizer = ctx.services.authorizer
    if authorizer is None or not ctx.authorize_cluster(AclOperation.ALTER):
        code, message = ((ErrorCode.SECURITY_DISABLED, ALTER_NO_AUTHORIZER) if authorizer is None
                         else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
        results = [result_cls(error_code=code, error_message=message, matching_acls=[]) for _ in filters]
        return response_for(DELETE_ACLS, ctx, throttle_time_ms=0, filter_results=results)
    outcomes = await authorizer.delete_acls([_filter(f) for f in filters])
    return response_for(DELETE_ACLS, ctx, throttle_time_ms=0,
                        filter_results=[_filter_result(result_cls, outcome) for outcome in outcomes])
