"""A cluster member's metadata and admin operations: the controller's cache, and changes written
to the metadata store through the ClusterMember and awaited until they took effect."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kafkacompat.controller.broker_config_store import BrokerConfigStore, ClientMetricsConfigStore, GroupConfigStore
from kafkacompat.controller.client_quotas import ClientQuotaStore
from kafkacompat.controller.feature_store import FinalizedFeatureStore
from kafkacompat.controller.reassignment import Reassignment
from kafkacompat.controller.state import BrokerInfo, PartitionState
from kafkacompat.controller.store import StoreError
from kafkacompat.controller.topics import TopicInfo, validate_topic_name
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.controller import ClusterMember, MetadataCache
    from kafkacompat.identity import BrokerIdentity


class ClusterMetadata:
    """MetadataView of a cluster member: the MetadataCache the ClusterMember keeps in sync."""

    def __init__(self, identity: "BrokerIdentity", cache: "MetadataCache") -> None:
        self.identity = identity
        self.node_id = identity.node_id
        self.cache = cache

    @property
    def cluster_id(self) -> str:
        return self.identity.cluster_id

    @property
    def controller_id(self) -> int:
        return self.cache.controller_id

    def topic(self, name: str) -> TopicInfo | None:
        return self.cache.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.cache.get_by_id(topic_id)

    def topics(self) -> list[TopicInfo]:
        return list(self.cache.by_name.values())

    def colliding_topic(self, name: str) -> str | None:
        return self.cache.colliding_topic(name)

    def partition_state(self, topic: str, index: int) -> PartitionState | None:
        return self.cache.partition_state(topic, index)

    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self.cache.brokers)


def _seconds(timeout_ms: int | None, default: float) -> float:
    return default if timeout_ms is None else timeout_ms / 1000


def _store_failure(what: str, exc: StoreError) -> KafkaError:
    # Kafka answers a ZooKeeper failure it does not map with UNKNOWN_SERVER_ERROR.
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                      f"{what} failed: the metadata store is not available ({type(exc).__name__}: {exc}); retry")


class ClusterAdmin:
    """AdminOps of a cluster member: through the controller's store, awaited end to end; a store
    failure is the client's error (KafkaError), never the broker's."""

    def __init__(self, config: "BrokerConfig", member: "ClusterMember") -> None:
        self.config = config
        self.member = member
        self._features: FinalizedFeatureStore | None = None

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, list[int]] | None = None, *,
                           timeout_ms: int | None = None) -> TopicInfo:
        validate_topic_name(name)
        try:
            return await self.member.create_topic(
                name, partitions, replication_factor, configs, assignment,
                timeout=_seconds(timeout_ms, self.member.DEFAULT_TIMEOUT_SECONDS))
        except StoreError as exc:
            raise _store_failure(f"Creating topic '{name}'", exc) from None

    async def auto_create_topic(self, name: str) -> TopicInfo:
        rf = max(1, min(self.config.default_replication_factor, len(self.member.cache.brokers)))
        try:
            return await self.create_topic(name, self.config.num_partitions, rf, {})
        except KafkaError as exc:
            existing = self.member.cache.get(name)
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS and existing is not None:
                return existing
            raise

    async def delete_topic(self, topic: TopicInfo, *, timeout_ms: int | None = None) -> None:
        try:
            await self.member.delete_topic(topic.name, timeout=_seconds(timeout_ms, self.member.DEFAULT_TIMEOUT_SECONDS))
        except StoreError as exc:
            raise _store_failure(f"Deleting topic '{topic.name}'", exc) from None

    async def add_partitions(self, topic: TopicInfo, total: int, assignment: list[list[int]] | None = None, *,
                             timeout_ms: int | None = None) -> None:
        try:
            await self.member.add_partitions(topic.name, total, assignment,
                                             timeout=_seconds(timeout_ms, self.member.DEFAULT_TIMEOUT_SECONDS))
        except StoreError as exc:
            raise _store_failure(f"Adding partitions to topic '{topic.name}'", exc) from None

    async def alter_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        try:
            await self.member.alter_topic_configs(topic.name, dict(configs))
        except StoreError as exc:
            raise _store_failure(f"Altering the configs of topic '{topic.name}'", exc) from None

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None
                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        try:
            return await self.member.elect_leaders(election_type, partitions)
        except StoreError as exc:
            raise _store_failure("Electing leaders", exc) from None

    async def alter_partition_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], *,
                                            allow_replication_factor_change: bool = True
                                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        try:
            return await self.member.alter_partition_reassignments(
                wanted, allow_replication_factor_change=allow_replication_factor_change)
        except StoreError as exc:
            raise _store_failure("Reassigning partitions", exc) from None

    def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                     ) -> dict[tuple[str, int], Reassignment]:
        return self.member.list_partition_reassignments(partitions)

    async def refresh(self) -> None:
        try:
            await self.member.refresh()
        except StoreError as exc:
            raise _store_failure("Reading the cluster's metadata", exc) from None

    def quota_store(self) -> ClientQuotaStore:
        return ClientQuotaStore(self.member.store)

    def feature_store(self) -> FinalizedFeatureStore:
        if self._features is None:
            self._features = FinalizedFeatureStore(self.member.store)
        return self._features

    def broker_config_store(self) -> BrokerConfigStore:
        return BrokerConfigStore(self.member.store)

    def client_metrics_store(self) -> ClientMetricsConfigStore:
        return ClientMetricsConfigStore(self.member.store)

    def group_config_store(self) -> GroupConfigStore:
        return GroupConfigStore(self.member.store)
