"""Share groups (KIP-932): the share-partition state on partition leaders, share sessions, the
share group membership, and the share coordinator's durable state in __share_group_state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafkacompat.shares.group import ShareGroupCoordinator
    from kafkacompat.shares.manager import SharePartitionManager
    from kafkacompat.shares.state_store import ShareStateStore


@dataclass(frozen=True, slots=True)
class ShareServices:
    """What the share handlers use: membership (on the group's coordinator), the share
    partitions and sessions (on the partition leaders) and the durable state."""

    groups: "ShareGroupCoordinator"
    partitions: "SharePartitionManager"
    state: "ShareStateStore"
