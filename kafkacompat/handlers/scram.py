"""DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0): the credentials SCRAM
logins check, in the metadata store (security/credentials.py). Describing needs DESCRIBE on the
cluster, altering ALTER (CLUSTER_AUTHORIZATION_FAILED), as Kafka."""

from __future__ import annotations

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51


@handles(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle_describe_user_scram_credentials(request, ctx: RequestContext):
    cls = response_class(DESCRIBE_USER_SCRAM_CREDENTIALS).DescribeUserScramCredentialsResult
    info_cls = cls.CredentialInfo
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return response_for(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[])
    users = None if request.users is None else [user.name for user in request.users]
    results = await ctx.services.credentials.describe(users)
    return response_for(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx, throttle_time_ms=0, error_code=0, error_message=None,
                        results=[cls(user=r.user, error_code=r.error_code, error_message=r.error_message,
                                     credential_infos=[info_cls(mechanism=m, iterations=i) for m, i in r.credentials])
                                 for r in results])


@handles(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle_alter_user_scram_credentials(request, ctx: RequestContext):
    cls = response_class(ALTER_USER_SCRAM_CREDENTIALS).AlterUserScramCredentialsResult
    if not ctx.authorize_cluster(AclOperation.ALTER):
        users = dict.fromkeys(c.name for c in [*(request.upsertions or []), *(request.deletions or [])])
        return response_for(ALTER_USER_SCRAM_CREDENTIALS, ctx, throttle_time_ms=0, results=[
            cls(user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None) for user in users])
    results = await ctx.services.credentials.alter(list(request.upsertions or []), list(request.deletions or []))
    return response_for(ALTER_USER_SCRAM_CREDENTIALS, ctx, throttle_time_ms=0,
                        results=[cls(user=r.user, error_code=r.error_code, error_message=r.error_message)
                                 for r in results])
