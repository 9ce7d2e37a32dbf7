"""Feature flags (KIP-584) the broker advertises in ApiVersions v3+.

One table: each feature's supported range and the level finalized on this cluster. Issues that
add a protocol (transactions, group protocols, share groups) add their row here; UpdateFeatures,
when served, changes the finalized level. Clients read FinalizedFeatures to choose a protocol
(for example a Kafka 4.x producer uses transaction version 2 when `transaction.version` >= 2).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_version: int
    max_version: int
    finalized_level: int  # 0 means "not finalized": the feature is advertised as supported only


# name -> Feature. Kept sorted by name; the ApiVersions answer lists them in this order.
FEATURES: dict[str, Feature] = {
    # KIP-848: level 1 enables the consumer group protocol (ConsumerGroupHeartbeat/Describe).
    "group.version": Feature("group.version", 0, 1, 1),
    # KIP-932 share groups: on by default (Kafka 4.2 needs it finalized to serve them).
    "share.version": Feature("share.version", 0, 1, 1),
    # KIP-890 part 2, finalized at 2 as on a Kafka 4.x cluster: a client that reads it sends
    # Produce v12 (partitions added by the leader's verification), EndTxn v5 (each commit or
    # abort bumps the epoch, which the answer carries) and TxnOffsetCommit v5 without
    # AddOffsetsToTxn. Clients that ignore it keep transaction version 1.
    "transaction.version": Feature("transaction.version", 0, 2, 2),
}

# Bumped whenever a finalized level changes; -1 while nothing is finalized (Kafka's "unknown").
FINALIZED_FEATURES_EPOCH = 0


def supported_features() -> list[Feature]:
    return [FEATURES[name] for name in sorted(FEATURES)]


def finalized_features() -> list[Feature]:
    return [feature for feature in supported_features() if feature.finalized_level > 0]


def finalized_level(name: str) -> int:
    feature = FEATURES.get(name)
    return feature.finalized_level if feature is not None else 0
