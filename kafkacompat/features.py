"""Feature flags (KIP-584) the broker advertises in ApiVersions v3+.

One table: each feature's supported range and the level finalized on this cluster. Issues that
add a protocol (transactions, group protocols, share groups) add their row here; UpdateFeatures,
when served, changes the finalized level. Clients read FinalizedFeatures to choose a protocol
(for example a Kafka 4.x producer uses transaction version 2 when `transaction.version` >= 2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_version: int
    max_version: int
    finalized_level: int  # 0 means "not finalized": the feature is advertised as supported only


METADATA_VERSION = "metadata.version"
# Kafka 4.2's metadata.version range: IBP_3_3_IV3 (the oldest a 4.x cluster runs) to IBP_4_2_IV1,
# its latest production level, which a new 4.2 cluster finalizes.
MINIMUM_METADATA_VERSION = 7
LATEST_METADATA_VERSION = 29

# name -> Feature. Kept sorted by name; the ApiVersions answer lists them in this order.
FEATURES: dict[str, Feature] = {
    # KIP-848: level 1 enables the consumer group protocol (ConsumerGroupHeartbeat/Describe).
    "group.version": Feature("group.version", 0, 1, 1),
    # KIP-932 share groups: on by default (Kafka 4.2 needs it finalized to serve them).
    "share.version": Feature("share.version", 0, 1, 1),
    METADATA_VERSION: Feature(METADATA_VERSION, MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION,
                              LATEST_METADATA_VERSION),
    # KIP-890 part 2, finalized at 2 as on a Kafka 4.x cluster: a client that reads it sends
    # Produce v12 (partitions added by the leader's verification), EndTxn v5 (each commit or
    # abort bumps the epoch, which the answer carries) and TxnOffsetCommit v5 without
    # AddOffsetsToTxn. Clients that ignore it keep transaction version 1.
    # KIP-1071 streams groups (StreamsGroupHeartbeat/Describe): finalized at 1 as on a new 4.2 cluster.
    "streams.version": Feature("streams.version", 0, 1, 1),
    "transaction.version": Feature("transaction.version", 0, 2, 2),
}

# Bumped whenever a finalized level changes; -1 while nothing is finalized (Kafka's "unknown").
FINALIZED_FEATURES_EPOCH = 0

# The levels UpdateFeatures finalized, as read back from the metadata store (every finalized
# feature; one absent is not finalized); None until a level has been changed: the table's levels.
_stored_levels: dict[str, int] | None = None


def _level(feature: Feature) -> int:
    return feature.finalized_level if _stored_levels is None else _stored_levels.get(feature.name, 0)


def supported_features() -> list[Feature]:
    return [FEATURES[name] for name in sorted(FEATURES)]


def finalized_features() -> list[Feature]:
    """The finalized features, each with its current level in ``finalized_level``."""
    return [replace(feature, finalized_level=_level(feature)) for feature in supported_features()
            if _level(feature) > 0]


def finalized_levels() -> dict[str, int]:
    return {feature.name: feature.finalized_level for feature in finalized_features()}


def finalized_level(name: str) -> int:
    feature = FEATURES.get(name)
    return _level(feature) if feature is not None else 0


def apply_finalized(levels: dict[str, int] | None, epoch: int) -> None:
    """Take the levels stored in the metadata store (None: nothing stored, the table's levels)."""
    global FINALIZED_FEATURES_EPOCH, _stored_levels
    _stored_levels = None if levels is None else dict(levels)
    FINALIZED_FEATURES_EPOCH = epoch
