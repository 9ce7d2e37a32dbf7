"""A single node's metadata and admin operations: topics in the data dir's embedded store
(controller/topics.py's TopicRegistry), this broker the leader and whole ISR of every partition."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from kafkacompat.controller.broker_config_store import BrokerConfigStore, ClientMetricsConfigStore, GroupConfigStore
from kafkacompat.controller.client_quotas import ClientQuotaStore
from kafkacompat.controller.feature_store import FinalizedFeatureStore
from kafkacompat.controller.reassignment import Reassignment, invalid_target
from kafkacompat.controller.state import BrokerInfo, PartitionState
from kafkacompat.controller.store import StoreWriteError
from kafkacompat.controller.topics import TopicInfo, TopicRegistry, validate_topic_name
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.identity import BrokerIdentity
    from kafkacompat.replication.manager import ReplicaManager

log = logging.getLogger("kafkacompat.broker")

ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


class LocalMetadata:
    """MetadataView of a single node."""

    def __init__(self, identity: "BrokerIdentity", config: "BrokerConfig", registry: TopicRegistry,
                 replicas: "ReplicaManager", endpoint: Callable[[], tuple[str, int]],
                 endpoints: Callable[[], tuple[tuple[str, str, int], ...]] = tuple) -> None:
        self.identity = identity
        self.endpoints = endpoints
        self.node_id = identity.node_id
        self.config = config
        self.registry = registry
        self.replicas = replicas
        self.endpoint = endpoint

    @property
    def cluster_id(self) -> str:
        return self.identity.cluster_id

    @property
    def controller_id(self) -> int:
        return self.node_id

    def topic(self, name: str) -> TopicInfo | None:
        return self.registry.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.registry.get_by_id(topic_id)

    def topics(self) -> list[TopicInfo]:
        return list(self.registry.by_name.values())

    def colliding_topic(self, name: str) -> str | None:
        return self.registry.colliding_topic(name)

    def partition_state(self, topic: str, index: int) -> PartitionState | None:
        """The partition's state, the same object while it is unchanged (Metadata reuses what it
        built from it). The Partition replaces its replica and ISR lists on every change, never
        edits them in place, so comparing them by identity (and length) suffices."""
        partition = self.replicas.partition(topic, index)
        if partition is None:
            return None
        state = partition.metadata_state
        if (state is None or state.leader != partition.leader_id or state.leader_epoch != partition.leader_epoch
                or state.partition_epoch != partition.partition_epoch
                or partition.replicas is not partition.metadata_lists[0]
                or partition.isr is not partition.metadata_lists[1]
                or len(state.replicas) != len(partition.replicas) or len(state.isr) != len(partition.isr)):
            state = PartitionState(topic, index, tuple(partition.replicas), tuple(partition.isr),
                                   partition.leader_id, partition.leader_epoch, partition.partition_epoch)
            partition.metadata_state, partition.metadata_lists = state, (partition.replicas, partition.isr)
        return state

    def brokers(self) -> dict[int, BrokerInfo]:
        host, port = self.endpoint()
        return {self.node_id: BrokerInfo(self.node_id, host, port, self.config.broker_rack, self.endpoints())}


@contextmanager
def _storage_errors(what: str) -> Iterator[None]:
    """A data dir that cannot be written (full or failing disk) is the client's error, as Kafka
    answers a failing log dir: KAFKA_STORAGE_ERROR, and the operation left undone."""
    try:
        yield
    except (OSError, StoreWriteError) as error:
        log.error("%s failed: the data dir cannot be written (%s); nothing was changed. Free space on "
                  "the disk (or fix it) and retry", what, error)
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} failed: the broker's data dir cannot be "
                         f"written ({error}); retry once it has room") from None


class LocalAdmin:
    """AdminOps of a single node: each change is made and persisted before it returns."""

    def __init__(self, config: "BrokerConfig", registry: TopicRegistry, replicas: "ReplicaManager") -> None:
        self.config = config
        self.registry = registry
        self.replicas = replicas
        self._features: FinalizedFeatureStore | None = None

    def create_topic_now(self, name: str, partitions: int, replication_factor: int,
                         configs: dict[str, str]) -> TopicInfo:
        """The partition logs first, then the topic's record in the store: a disk that fails at
        either step (KAFKA_STORAGE_ERROR) leaves neither, so a retry starts afresh."""
        validate_topic_name(name)
        topic = TopicInfo(name, uuid.uuid4(), partitions, replication_factor, dict(configs))
        with _storage_errors(f"Creating topic '{name}'"):
            created = self.replicas.open_partitions(topic, range(partitions), lead=True)
            try:
                self.registry.add(topic)
            except BaseException:
                self.replicas.close_opened(name, range(partitions), created)
                raise
        log.info("Created topic %s with %d partition(s) and id %s", name, partitions, topic.topic_id)
        return topic

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, list[int]] | None = None, *,
                           timeout_ms: int | None = None) -> TopicInfo:
        return self.create_topic_now(name, partitions, replication_factor, configs)

    async def auto_create_topic(self, name: str) -> TopicInfo:
        return self.create_topic_now(name, self.config.num_partitions,
                                     min(self.config.default_replication_factor, 1), {})

    async def delete_topic(self, topic: TopicInfo, *, timeout_ms: int | None = None) -> None:
        with _storage_errors(f"Deleting topic '{topic.name}'"):
            self.registry.remove(topic.name)
        log.info("Deleted topic %s (id %s)", topic.name, topic.topic_id)
        try:
            self.replicas.drop_partitions(topic)
        except OSError as error:  # the topic is gone all the same: its leftovers are stray logs
            log.error("Topic %s is deleted, but deleting its partition logs failed (%s); what is left of them "
                      "stays on disk, unserved, until removed by hand", topic.name, error)

    async def add_partitions(self, topic: TopicInfo, total: int, assignment: list[list[int]] | None = None, *,
                             timeout_ms: int | None = None) -> None:
        """As create_topic_now: the new partitions' logs, then the new count in the store."""
        grown = dataclasses.replace(topic, partitions=total)
        new = range(topic.partitions, total)
        with _storage_errors(f"Adding partitions to topic '{topic.name}'"):
            created = self.replicas.open_partitions(grown, new, lead=True)
            try:
                self.registry.update(grown)
            except BaseException:
                self.replicas.close_opened(topic.name, new, created)
                raise
        topic.partitions = total  # the caller's copy says what the registry now holds
        log.info("Topic %s now has %d partitions", topic.name, total)

    async def alter_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        """Replace a topic's config overrides (validated by the caller), persist them, and apply
        them to its partitions' logs at once."""
        altered = dataclasses.replace(topic, configs=dict(configs))
        with _storage_errors(f"Altering the configs of topic '{topic.name}'"):
            self.registry.update(altered)
        topic.configs = dict(configs)
        self.replicas.refresh_topic_config(altered)

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None
                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """This broker leads every partition already: no election is ever needed."""
        wanted = list(self.replicas.partitions) if partitions is None else partitions
        return {key: ((ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
                      if self.replicas.partition(*key) is not None else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
                for key in wanted}

    async def alter_partition_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], *,
                                            allow_replication_factor_change: bool = True
                                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """One broker: a partition can only be "moved" to where it is; nothing is ever moving."""
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        for key, target in wanted.items():
            if self.replicas.partition(*key) is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif target is None:
                results[key] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment is in progress for this partition.")
            else:
                why = invalid_target(list(target), {self.replicas.node_id}, 1, allow_replication_factor_change)
                results[key] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, why) if why else (ErrorCode.NONE, None)
        return results

    def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                     ) -> dict[tuple[str, int], Reassignment]:
        return {}

    async def refresh(self) -> None:
        pass

    def quota_store(self) -> ClientQuotaStore:
        from kafkacompat.controller.store import EmbeddedStore

        return ClientQuotaStore(EmbeddedStore(self.registry.tree))

    def feature_store(self) -> FinalizedFeatureStore:
        if self._features is None:
            from kafkacompat.controller.store import EmbeddedStore

            self._features = FinalizedFeatureStore(EmbeddedStore(self.registry.tree))
        return self._features

    def broker_config_store(self) -> BrokerConfigStore:
        from kafkacompat.controller.store import EmbeddedStore

        return BrokerConfigStore(EmbeddedStore(self.registry.tree))

    def client_metrics_store(self) -> ClientMetricsConfigStore:
        from kafkacompat.controller.store import EmbeddedStore

        return ClientMetricsConfigStore(EmbeddedStore(self.registry.tree))

    def group_config_store(self) -> GroupConfigStore:
        from kafkacompat.controller.store import EmbeddedStore

        return GroupConfigStore(EmbeddedStore(self.registry.tree))
