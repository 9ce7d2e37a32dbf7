"""The narrow interfaces the broker's services are wired with (no hub): what a handler, the group
coordinator and the replica manager may ask of the rest. Kafka's split is the model: handlers
read a MetadataCache, write through an admin manager, and the GroupCoordinator hears leadership
changes from the ReplicaManager (onLeadershipChange)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kafkacompat.controller.broker_config_store import BrokerConfigStore, ClientMetricsConfigStore, GroupConfigStore
    from kafkacompat.controller.client_quotas import ClientQuotaStore
    from kafkacompat.controller.feature_store import FinalizedFeatureStore
    from kafkacompat.controller.reassignment import Reassignment
    from kafkacompat.controller.state import BrokerInfo, PartitionState
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.replication.partition import Partition


class TopicLookup(Protocol):
    def get(self, name: str) -> "TopicInfo | None": ...


class MetadataView(Protocol):
    """Read-only: topics, live brokers, the controller and partition states (this node alone on
    a single node, the controller's view in a cluster)."""

    node_id: int

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def topic(self, name: str) -> "TopicInfo | None": ...

    def topic_by_id(self, topic_id: uuid.UUID) -> "TopicInfo | None": ...

    def topics(self) -> "list[TopicInfo]": ...

    def colliding_topic(self, name: str) -> str | None: ...

    def partition_state(self, topic: str, index: int) -> "PartitionState | None": ...

    def brokers(self) -> "dict[int, BrokerInfo]": ...


class AdminOps(Protocol):
    """Topic and cluster changes, each awaited until it has taken effect (or raising KafkaError:
    the handler answers the client with its code)."""

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, list[int]] | None = None) -> "TopicInfo": ...

    async def auto_create_topic(self, name: str) -> "TopicInfo": ...

    async def delete_topic(self, topic: "TopicInfo") -> None: ...

    async def add_partitions(self, topic: "TopicInfo", total: int,
                             assignment: list[list[int]] | None = None) -> None: ...

    async def alter_topic_configs(self, topic: "TopicInfo", configs: dict[str, str]) -> None: ...

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None
                            ) -> dict[tuple[str, int], tuple[int, str | None]]: ...

    async def alter_partition_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], *,
                                            allow_replication_factor_change: bool = True
                                            ) -> dict[tuple[str, int], tuple[int, str | None]]: ...

    def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                     ) -> dict[tuple[str, int], "Reassignment"]: ...

    async def refresh(self) -> None: ...

    def quota_store(self) -> "ClientQuotaStore": ...

    def feature_store(self) -> "FinalizedFeatureStore": ...

    def broker_config_store(self) -> "BrokerConfigStore": ...

    def client_metrics_store(self) -> "ClientMetricsConfigStore": ...

    def group_config_store(self) -> "GroupConfigStore": ...


class IsrClient(Protocol):
    """AlterPartition: a leader's ISR change, compare-and-set on the partition epoch."""

    async def alter_partition(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> "PartitionState": ...


class PartitionStateSink(Protocol):
    """Where the controller's ClusterMember delivers the partition states of this broker."""

    async def apply_partition_state(self, state: "PartitionState") -> None: ...

    async def remove_partition(self, topic: str, index: int) -> None: ...

    def refresh_topic_config(self, topic: "TopicInfo") -> None: ...

    def delete_stray_logs(self, hosted: set[tuple[str, int]]) -> None: ...


class LeadershipListener(Protocol):
    """Told by the replica manager after it applied a partition state (Kafka's
    onLeadershipChange) or stopped hosting a partition."""

    def on_partition_state(self, state: "PartitionState", node_id: int) -> None: ...

    def on_partition_removed(self, topic: str, index: int) -> None: ...


class OffsetsLog(Protocol):
    """__consumer_offsets as the group coordinator needs it."""

    def topic(self) -> "TopicInfo | None": ...

    def partition(self, index: int) -> "Partition | None": ...

    def ensure_topic(self) -> "TopicInfo": ...

    def hosts(self, topic: str, index: int) -> bool: ...



class TransactionVerifier(Protocol):
    """KIP-890 verification: the partition leader asks the transaction coordinator before it
    appends a transactional batch that would start a transaction on a partition (Kafka's
    AddPartitionsToTxn v4+ from a broker). ``verify_only``: only check the partitions are in the
    producer's ongoing transaction (transaction version 0/1); False: add them (version 2).
    Returns an error code per partition (0: go ahead; else Kafka's AddPartitionsToTxn error,
    e.g. INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, NOT_COORDINATOR)."""

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], int]: ...


class AcceptingTransactionVerifier:
    """The verifier until a transaction coordinator is wired in: every partition is accepted."""

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], int]:
        return {partition: 0 for partition in partitions}


class TransactionMarkerListener(Protocol):
    """Told by the replica manager after COMMIT/ABORT markers of a producer were written and
    replicated on these partitions (Kafka's groupCoordinator.onTransactionCompleted for
    __consumer_offsets partitions: pending transactional offsets become visible or go)."""

    def on_txn_markers_written(self, producer_id: int, partitions: list[tuple[str, int]], committed: bool) -> None: ...
