"""DescribeAcls, CreateAcls, DeleteAcls (v0-3) answered as a Kafka broker without an authorizer.

kafkacompat has no authorizer (as Kafka without ``authorizer.class.name``: every client may do
everything), so these get the answers of Kafka's AclApis for that case: DescribeAcls
SECURITY_DISABLED with "No Authorizer is configured on the broker"; CreateAcls and DeleteAcls
SECURITY_DISABLED with "No Authorizer is configured." on every creation / every filter (Kafka
builds those two from a SecurityDisabledException, hence the different sentence).

Before that, Kafka's request classes refuse, while the request parses, a creation or filter with
an UNKNOWN (0) resource type, pattern type, operation or permission type; the broker then closes
the connection without an answer. The decoders here do the same (a DecodeError closes it).
"""

from __future__ import annotations

from typing import Any

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.wire import codec
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

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


@handles(DESCRIBE_ACLS, 0, 3, decode=_decode_describe)
async def handle_describe_acls(request, ctx: RequestContext):
    return response_for(
        DESCRIBE_ACLS, ctx, throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
        error_message=DESCRIBE_NO_AUTHORIZER, resources=[],
    )


@handles(CREATE_ACLS, 0, 3, decode=_decode_create)
async def handle_create_acls(request, ctx: RequestContext):
    result_cls = response_class(CREATE_ACLS).AclCreationResult
    results = [
        result_cls(error_code=ErrorCode.SECURITY_DISABLED, error_message=ALTER_NO_AUTHORIZER)
        for _ in request.creations or []
    ]
    return response_for(CREATE_ACLS, ctx, throttle_time_ms=0, results=results)


@handles(DELETE_ACLS, 0, 3, decode=_decode_delete)
async def handle_delete_acls(request, ctx: RequestContext):
    result_cls = response_class(DELETE_ACLS).DeleteAclsFilterResult
    results = [
        result_cls(error_code=ErrorCode.SECURITY_DISABLED, error_message=ALTER_NO_AUTHORIZER, matching_acls=[])
        for _ in request.filters or []
    ]
    return response_for(DELETE_ACLS, ctx, throttle_time_ms=0, filter_results=results)
