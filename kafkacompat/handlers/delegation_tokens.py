"""CreateDelegationToken (v1-3), RenewDelegationToken (v1-2), ExpireDelegationToken (v1-2),
DescribeDelegationToken (v1-3) with Kafka's checks (KafkaApis): token requests only on a SASL or
mutually authenticated SSL connection that did not itself log in with a token
(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), renewers of type User (INVALID_PRINCIPAL_TYPE); the
tokens themselves in security/tokens.py. Creating a token for another owner needs CREATE_TOKENS on
that user; a client sees its own tokens (as owner or renewer) and those it may DESCRIBE (DESCRIBE
on the token, or DESCRIBE_TOKENS on its owner). Without an authorizer everything is allowed, so
every token is visible, as in Kafka."""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.security.principal import ANONYMOUS, KafkaPrincipal
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

CREATE_DELEGATION_TOKEN = 38
RENEW_DELEGATION_TOKEN = 39
EXPIRE_DELEGATION_TOKEN = 40
DESCRIBE_DELEGATION_TOKEN = 41


def _requester(ctx: RequestContext) -> KafkaPrincipal:
    return ctx.connection.principal if ctx.connection is not None else ANONYMOUS


def _token_requests_allowed(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests."""
    connection = ctx.connection
    if connection is None or connection.security_protocol == "PLAINTEXT":
        return False
    if connection.authenticator is not None and connection.authenticator.token_authenticated:
        return False
    return not (connection.security_protocol == "SSL" and connection.principal == ANONYMOUS)


def _requester_fields(requester: KafkaPrincipal, version: int) -> dict:
    """The token requester, a field of v3+ only."""
    if version < 3:
        return {}
    return dict(token_requester_principal_type=requester.principal_type, token_requester_principal_name=requester.name)


def _disabled_or_refused(ctx: RequestContext) -> int | None:
    if not _token_requests_allowed(ctx):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    if ctx.services.tokens is None or not ctx.services.tokens.enabled:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    return None


@handles(CREATE_DELEGATION_TOKEN, 1, 3)
async def handle_create_delegation_token(request, ctx: RequestContext):
    requester = _requester(ctx)
    owner_name = request.owner_principal_name if ctx.version >= 3 else None
    owner = KafkaPrincipal(request.owner_principal_type or "User", owner_name) if owner_name else requester
    renewers = [KafkaPrincipal(r.principal_type, r.principal_name) for r in request.renewers or []]
    error = _disabled_or_refused(ctx)
    if error is None and any(r.principal_type != "User" for r in renewers):
        error = ErrorCode.INVALID_PRINCIPAL_TYPE
    if error is None and owner != requester and not ctx.authorize(AclOperation.CREATE_TOKENS, ResourceType.USER,
                                                                  str(owner)):
        error = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    fields = dict(principal_type=owner.principal_type, principal_name=owner.name, throttle_time_ms=0,
                  **_requester_fields(requester, ctx.version))
    if error is None:
        result = await ctx.services.tokens.create(owner, requester, renewers, request.max_lifetime_ms)
        token = result.token
        if token is not None:
            return response_for(CREATE_DELEGATION_TOKEN, ctx, error_code=result.error, **fields,
                                issue_timestamp_ms=token.issue_timestamp, expiry_timestamp_ms=token.expiry_timestamp,
                                max_timestamp_ms=token.max_timestamp, token_id=token.token_id, hmac=token.hmac)
        error = result.error
    return response_for(CREATE_DELEGATION_TOKEN, ctx, error_code=error, **fields, issue_timestamp_ms=-1,
                        expiry_timestamp_ms=-1, max_timestamp_ms=-1, token_id="", hmac=b"")


@handles(RENEW_DELEGATION_TOKEN, 1, 2)
async def handle_renew_delegation_token(request, ctx: RequestContext):
    error = _disabled_or_refused(ctx)
    if error is not None:
        return response_for(RENEW_DELEGATION_TOKEN, ctx, error_code=error, expiry_timestamp_ms=-1, throttle_time_ms=0)
    result = await ctx.services.tokens.renew(_requester(ctx), bytes(request.hmac), request.renew_period_ms)
    return response_for(RENEW_DELEGATION_TOKEN, ctx, error_code=result.error,
                        expiry_timestamp_ms=result.expiry_timestamp, throttle_time_ms=0)


@handles(EXPIRE_DELEGATION_TOKEN, 1, 2)
async def handle_expire_delegation_token(request, ctx: RequestContext):
    error = _disabled_or_refused(ctx)
    if error is not None:
        return response_for(EXPIRE_DELEGATION_TOKEN, ctx, error_code=error, expiry_timestamp_ms=-1, throttle_time_ms=0)
    result = await ctx.services.tokens.expire(_requester(ctx), bytes(request.hmac), request.expiry_time_period_ms)
    return response_for(EXPIRE_DELEGATION_TOKEN, ctx, error_code=result.error,
                        expiry_timestamp_ms=result.expiry_timestamp, throttle_time_ms=0)


def _may_describe(ctx: RequestContext, requester: KafkaPrincipal, token) -> bool:
    """Kafka's DelegationTokenManager.filterToken for the requester."""
    return (token.owner_or_renewer(requester)
            or ctx.authorize(AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id, log_denied=False)
            or ctx.authorize(AclOperation.DESCRIBE_TOKENS, ResourceType.USER, str(token.owner), log_denied=False))


@handles(DESCRIBE_DELEGATION_TOKEN, 1, 3)
async def handle_describe_delegation_token(request, ctx: RequestContext):
    token_cls = response_class(DESCRIBE_DELEGATION_TOKEN).DescribedDelegationToken
    renewer_cls = token_cls.DescribedDelegationTokenRenewer
    error = _disabled_or_refused(ctx)
    if error is not None:
        return response_for(DESCRIBE_DELEGATION_TOKEN, ctx, error_code=error, tokens=[], throttle_time_ms=0)
    owners = None if request.owners is None else [KafkaPrincipal(o.principal_type, o.principal_name)
                                                   for o in request.owners]
    requester = _requester(ctx)
    tokens = [t for t in await ctx.services.tokens.describe(owners) if _may_describe(ctx, requester, t)]
    return response_for(DESCRIBE_DELEGATION_TOKEN, ctx, error_code=ErrorCode.NONE, throttle_time_ms=0, tokens=[
        token_cls(principal_type=t.owner.principal_type, principal_name=t.owner.name,
                  **_requester_fields(t.requester, ctx.version),
                  issue_timestamp=t.issue_timestamp,
                  expiry_timestamp=t.expiry_timestamp, max_timestamp=t.max_timestamp, token_id=t.token_id,
                  hmac=t.hmac, renewers=[renewer_cls(principal_type=r.principal_type, principal_name=r.name)
                                         for r in t.renewers])
        for t in tokens])
