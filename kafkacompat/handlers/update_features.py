"""UpdateFeatures (KIP-584): change the cluster's finalized feature levels.

The checks and messages are Kafka's KRaft controller's (FeatureControlManager.updateFeatures):
the upgrade type, a level below 0, the supported range, upgrade versus downgrade, and for
metadata.version a downgrade across a level that changed the metadata format. The first failing
update fails them all (INVALID_UPDATE_VERSION, "The update failed for all features since ...").
v0's AllowDowngrade is a safe downgrade. Levels are written to the metadata store
(controller/feature_store.py), so every broker of a cluster advertises them in ApiVersions.
"""

from __future__ import annotations

import logging

from kafkacompat import features
from kafkacompat.controller.feature_store import FeatureLevelConflict
from kafkacompat.controller.store import StoreError
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.features")

UPDATE_FEATURES = 57
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3

# The metadata.version levels (IBP_3_3_IV3 .. IBP_4_2_IV1) whose records changed the metadata format:
# a downgrade below one of them could lose metadata (MetadataVersion.didMetadataChange).
METADATA_CHANGED_AT = frozenset({7, 8, 11, 13, 14, 15, 17, 23})


def _invalid(name: str, level: int, reason: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid update version {level} for feature {name}. {reason}")


def _invalid_metadata_version(level: int, reason: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. {reason}")


def _range_text(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def _check_supported(node_id: int, name: str, level: int) -> None:
    feature = features.FEATURES.get(name)
    low, high = (feature.min_version, feature.max_version) if feature else (0, 0)
    if not low <= level <= high:
        what = f"Local controller {node_id}"
        raise _invalid(name, level, f"{what} does not support this feature." if high == 0
                       else f"{what} only supports versions {_range_text(low, high)}")
    if feature is None:
        raise _invalid(name, level, f"Feature {name} not found.")


def _check_metadata_version(current: int, level: int, upgrade_type: int) -> None:
    if level >= current:
        return
    if any(current >= changed > level for changed in METADATA_CHANGED_AT):
        if upgrade_type == UNSAFE_DOWNGRADE:
            raise _invalid_metadata_version(level, "Unsafe metadata downgrade is not supported in this version.")
        raise _invalid_metadata_version(
            level, "Refusing to perform the requested downgrade because it might delete metadata information.")


def _check_update(node_id: int, current_levels: dict[str, int], name: str, level: int, upgrade_type: int) -> None:
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    _check_supported(node_id, name, level)
    current = current_levels.get(name, 0)
    if level < current and upgrade_type == UPGRADE:
        raise _invalid(name, level, "Can't downgrade the version of this feature without setting the upgrade type "
                                    "to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == features.METADATA_VERSION:
        _check_metadata_version(current, level, upgrade_type)


def _updates(request, version: int) -> dict[str, tuple[int, int]]:
    """feature -> (level, upgrade type); a feature named twice: the last one, as Kafka's map."""
    if version == 0:
        return {u.feature: (u.max_version_level, SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE)
                for u in request.feature_updates}
    return {u.feature: (u.max_version_level, u.upgrade_type) for u in request.feature_updates}


async def _apply(ctx: RequestContext, updates: dict[str, tuple[int, int]], validate_only: bool) -> None:
    store = ctx.admin.feature_store()
    while True:
        await store.refresh()
        levels = features.finalized_levels()
        for name, (level, upgrade_type) in updates.items():
            _check_update(ctx.metadata.node_id, levels, name, level, upgrade_type)
        if validate_only:
            return
        levels.update({name: level for name, (level, _) in updates.items()})
        try:
            await store.write(levels)
        except FeatureLevelConflict:
            continue  # another broker changed them meanwhile: check against its levels
        log.warning("Finalized feature levels changed by %s: %s", ctx.client_id,
                    ", ".join(f"{name}={level}" for name, (level, _) in sorted(updates.items())))
        return


@handles(UPDATE_FEATURES, 0, 2)
async def handle_update_features(request, ctx: RequestContext):
    if not ctx.authorize_cluster(AclOperation.ALTER):  # Kafka: ALTER on the cluster
        return response_for(UPDATE_FEATURES, ctx, throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            error_message=None, results=[])
    updates = _updates(request, ctx.version)
    try:
        await _apply(ctx, updates, ctx.version >= 1 and bool(request.validate_only))
    except KafkaError as error:
        log.warning("UpdateFeatures from %s refused: %s", ctx.client_id, error.message)
        return response_for(
            UPDATE_FEATURES, ctx, throttle_time_ms=0, error_code=error.code, results=[],
            error_message=f"The update failed for all features since the following feature had an error: "
                          f"{error.message}")
    except StoreError as exc:
        log.warning("UpdateFeatures from %s failed: the metadata store is not available (%s)", ctx.client_id, exc)
        return response_for(UPDATE_FEATURES, ctx, throttle_time_ms=0, error_code=ErrorCode.REQUEST_TIMED_OUT,
                            error_message="The metadata store is not available; retry", results=[])
    result_cls = response_class(UPDATE_FEATURES).UpdatableFeatureResult
    results = ([result_cls(feature=u.feature, error_code=ErrorCode.NONE, error_message=None)
                for u in request.feature_updates] if ctx.version <= 1 else [])
    return response_for(UPDATE_FEATURES, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                        results=results)
