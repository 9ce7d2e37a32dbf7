"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2): the connection's SaslAuthenticator
(security/authenticator.py) does the work. On a listener without SASL, both answer
ILLEGAL_SASL_STATE, as Kafka's KafkaApis does."""

from __future__ import annotations

import trio

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.wire.errors import ErrorCode

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


@handles(SASL_HANDSHAKE, 0, 1)
async def handle_sasl_handshake(request, ctx: RequestContext):
    authenticator = ctx.connection.authenticator if ctx.connection is not None else None
    if authenticator is None:
        return response_for(SASL_HANDSHAKE, ctx, error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    result = authenticator.handshake(request.mechanism, ctx.version)
    error = ErrorCode[result.error] if result.error else ErrorCode.NONE
    return response_for(SASL_HANDSHAKE, ctx, error_code=error, mechanisms=list(result.mechanisms))


@handles(SASL_AUTHENTICATE, 0, 2)
async def handle_sasl_authenticate(request, ctx: RequestContext):
    authenticator = ctx.connection.authenticator if ctx.connection is not None else None
    if authenticator is None:
        return response_for(SASL_AUTHENTICATE, ctx, error_code=ErrorCode.ILLEGAL_SASL_STATE,
                            error_message="Unexpected SASL request: this listener does not use SASL",
                            auth_bytes=b"", session_lifetime_ms=0)
    result = await authenticator.authenticate(bytes(request.auth_bytes), ctx.version)
    if result.error == "SASL_AUTHENTICATION_FAILED":
        # Kafka delays the answer to a failed authentication (connection.failed.authentication.delay.ms)
        await trio.sleep(authenticator.settings.failure_delay_ms / 1000)
    error = ErrorCode[result.error] if result.error else ErrorCode.NONE
    return response_for(SASL_AUTHENTICATE, ctx, error_code=error, error_message=result.message,
                        auth_bytes=result.token, session_lifetime_ms=result.session_lifetime_ms)
