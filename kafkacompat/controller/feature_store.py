"""Finalized feature levels (KIP-584) in the metadata store, in ZooKeeper mode's /feature layout:
``{"version": 2, "status": 1, "features": {name: {"min_version_level": 1, "max_version_level": N}}}``.

The node lists every finalized feature; before the first UpdateFeatures there is none and the
levels are the feature table's (kafkacompat/features.py). Every broker watches the node (as
Kafka's FinalizedFeatureChangeListener) and re-reads it on the next request that needs the levels;
the epoch ApiVersions reports is the node's version + 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkacompat import features
from kafkacompat.controller.store import BadVersionError, NodeExistsError, encode_json

if TYPE_CHECKING:
    from kafkacompat.controller.store import MetadataStore

FEATURE_PATH = "/feature"
FEATURE_ZNODE_VERSION = 2
FEATURE_ZNODE_ENABLED = 1


class FeatureLevelConflict(Exception):
    """Another broker changed the levels between our read and our write: validate again."""


class FinalizedFeatureStore:
    def __init__(self, store: "MetadataStore") -> None:
        self.store = store
        self._watching = False
        self._stale = True
        self._node_version = -1  # -1: no node

    def _changed(self) -> None:
        self._stale = True

    async def refresh(self) -> None:
        """Bring the feature table's finalized levels up to date with the store (a read only
        when the node changed since the last one)."""
        if not self._watching:
            self._watching = True  # before the await: concurrent first requests register one watch
            try:
                await self.store.watch(FEATURE_PATH, self._changed)
            except BaseException:
                self._watching = False
                raise
        if not self._stale:
            return
        self._stale = False  # before the read: a change during it marks the levels stale again
        found = await self.store.get_json(FEATURE_PATH)
        if found is None:
            self._node_version = -1
            features.apply_finalized(None, 0)
            return
        node, self._node_version = found
        levels = {name: int(level.get("max_version_level", 0))
                  for name, level in (node.get("features") or {}).items()}
        features.apply_finalized({name: level for name, level in levels.items() if level > 0},
                                 self._node_version + 1)

    async def write(self, levels: dict[str, int]) -> None:
        """Store these finalized levels (level 0: not finalized), compare-and-set on the node
        read by the last refresh; FeatureLevelConflict when another writer came first."""
        finalized = {name: {"min_version_level": 1, "max_version_level": level}
                     for name, level in sorted(levels.items()) if level > 0}
        data = encode_json({"version": FEATURE_ZNODE_VERSION, "status": FEATURE_ZNODE_ENABLED,
                            "features": finalized})
        try:
            if self._node_version < 0:
                await self.store.create(FEATURE_PATH, data, makepath=True)
            else:
                await self.store.set(FEATURE_PATH, data, self._node_version)
        except (BadVersionError, NodeExistsError):
            self._stale = True
            raise FeatureLevelConflict() from None
        self._stale = True
        await self.refresh()
