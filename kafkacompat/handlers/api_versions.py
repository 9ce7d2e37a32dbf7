"""ApiVersions: the served versions, derived from the handler registry (never hand-listed)."""

from __future__ import annotations

import logging
import struct

from kafkacompat import features
from kafkacompat.controller.store import StoreError
from kafkacompat.handlers.registry import REGISTRY, RequestContext, handles, response_for
from kafkacompat.wire.errors import ErrorCode

API_VERSIONS = 18

log = logging.getLogger("kafkacompat.features")


GET_TELEMETRY_SUBSCRIPTIONS = 71
PUSH_TELEMETRY = 72


def served_versions() -> list[tuple[int, int, int]]:
    return sorted((h.api_key, h.min_version, h.max_version) for h in REGISTRY.values())


def advertised_versions(telemetry_wanted: bool) -> list[tuple[int, int, int]]:
    """What ApiVersions lists: every served API, but the client telemetry pair (KIP-714) only
    while some client-metrics subscription exists. Kafka leaves the pair out unless a telemetry
    receiver is configured, and a client that sees it asks for subscriptions (librdkafka logs a
    line at every start for it) even when there is nothing to push."""
    served = served_versions()
    if telemetry_wanted:
        return served
    return [entry for entry in served if entry[0] not in (GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY)]


@handles(API_VERSIONS, 0, 4)
async def handle_api_versions(request, ctx: RequestContext):
    from kafkacompat.wire.codec import response_class

    response = response_class(API_VERSIONS)
    if ctx.connection is not None and ctx.version >= 3:
        ctx.connection.client_software_name = request.client_software_name or ""
        ctx.connection.client_software_version = request.client_software_version or ""
    try:
        await ctx.admin.feature_store().refresh()  # a store read only after UpdateFeatures changed the levels
    except StoreError as exc:
        log.info("ApiVersions answered with the last known feature levels: metadata store unavailable (%s)", exc)
    finalized = features.finalized_features()
    return response_for(
        API_VERSIONS,
        ctx,
        error_code=0,
        api_keys=[response.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                  for k, lo, hi in advertised_versions(bool(ctx.services.telemetry.subscriptions))],
        throttle_time_ms=0,
        supported_features=[response.SupportedFeatureKey(name=f.name, min_version=f.min_version, max_version=f.max_version)
                            for f in features.supported_features()],
        finalized_features_epoch=features.FINALIZED_FEATURES_EPOCH if finalized else -1,
        finalized_features=[response.FinalizedFeatureKey(name=f.name, min_version_level=f.finalized_level,
                                                         max_version_level=f.finalized_level) for f in finalized],
    )


def unsupported_version_response(telemetry_wanted: bool) -> bytes:
    """UNSUPPORTED_VERSION in the v0 layout (error, api_keys array), which every client can read,
    naming what a request at a version we serve is answered with (advertised_versions).

    Written by hand so it needs no schema class: it is the answer to a client newer than us.
    """
    versions = advertised_versions(telemetry_wanted)
    parts = [struct.pack(">hi", ErrorCode.UNSUPPORTED_VERSION, len(versions))]
    parts.extend(struct.pack(">hhh", k, lo, hi) for k, lo, hi in versions)
    return b"".join(parts)
