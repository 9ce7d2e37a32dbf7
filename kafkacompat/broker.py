"""Wires the parts together: config, topic registry, logs, partitions, the listener. Owns the
nursery; start-up and clean shutdown live here."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from kafkacompat.config import StartupError
from kafkacompat.controller.producer_ids import FileBlockStore, ProducerIdManager
from kafkacompat.controller.topics import (
    TopicInfo, TopicRegistry, decode_topic_id, encode_topic_id, new_cluster_id, validate_topic_name,
)
from kafkacompat.groups.coordinator import GroupCoordinator
from kafkacompat.log import LogCleaner, LogConfig, LogManager
from kafkacompat.replication.fetcher import ReplicaFetcherManager
from kafkacompat.replication.partition import Partition
from kafkacompat.wire.chunks import Chunk
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.frame import (
    API_VERSIONS_KEY,
    HeaderError,
    ProtocolViolation,
    RequestHeader,
    api_name,
    frame_prefix,
    response_header,
)

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.controller import ClusterMember
    from kafkacompat.controller.state import BrokerInfo, PartitionState
    from kafkacompat.controller.store import MetadataStore
    from kafkacompat.server import Connection

log = logging.getLogger("kafkacompat.broker")

META_PROPERTIES = "meta.properties"

_HANDLERS: tuple | None = None  # (REGISTRY, RequestContext, unsupported_version_response)


def _import_handlers() -> tuple:
    """The handler registry, imported at the first request (the handlers and their codecs stay off
    the start-up path) and kept: an import statement costs ~1.5 us on every request."""
    global _HANDLERS
    from kafkacompat.handlers import REGISTRY, RequestContext
    from kafkacompat.handlers.api_versions import unsupported_version_response

    _HANDLERS = (REGISTRY, RequestContext, unsupported_version_response)
    return _HANDLERS


class Broker:
    def __init__(self, config: "BrokerConfig", store: "MetadataStore | None" = None) -> None:
        """A single node (topics in the data dir) unless ``config.zookeeper_connect`` is set or a
        metadata ``store`` is given (in-process clusters): then it is a cluster member, and topics,
        brokers and partition states come from the store through the controller."""
        self.config = config
        self.node_id = config.broker_id
        self.data_dir = Path(config.data_dir)
        self.store = store
        self.clustered = store is not None or bool(config.zookeeper_connect)
        self.cluster: "ClusterMember | None" = None
        if self.clustered:
            from kafkacompat.controller.controller import MetadataCache

            self.topics: TopicRegistry = MetadataCache()
        else:
            self.topics = TopicRegistry(self.data_dir, broker_id=self.node_id)
        self._nursery: trio.Nursery | None = None
        self.logs = LogManager(self.data_dir, producer_id_expiration_ms=config.producer_id_expiration_ms)
        self.producer_ids = ProducerIdManager(self.node_id, FileBlockStore(self.data_dir))
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.cluster_id = ""
        self.port = config.port
        self.groups = GroupCoordinator(self)
        # Replication (replication/): follower fetchers; ISR changes go to controller_client.
        self.fetchers = ReplicaFetcherManager(self)
        self._replication_nursery: trio.Nursery | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_or_create_meta_properties()
        if self.clustered:
            # Partitions open as the controller's states arrive (apply_partition_state).
            self.logs.load_all(self._log_config_for_topic_name)
            return
        self.topics.load()
        self.logs.load_all(self._log_config_for_topic_name)
        for topic in self.topics.by_name.values():
            self._open_partitions(topic, range(topic.partitions))
        self._warn_about_stray_logs()
        self.groups.load()

    def close(self) -> None:
        self.logs.close()

    def _load_or_create_meta_properties(self) -> str:
        """The cluster id from meta.properties. A single node makes one up on first start; a
        clustered broker leaves it empty until it has joined (adopt_cluster_id), as Kafka takes it
        from ZooKeeper."""
        path = self.data_dir / META_PROPERTIES
        props: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
            stored = props.get("node.id", props.get("broker.id"))
            if stored is not None and int(stored) != self.node_id:
                raise StartupError(
                    f"the data dir {self.data_dir} belongs to broker {stored}, not {self.node_id}: "
                    f"start with --broker-id {stored} or use another --data-dir"
                )
            if props.get("cluster.id"):
                return props["cluster.id"]
        if self.clustered:
            return ""
        cluster_id = new_cluster_id()
        self._write_meta_properties(cluster_id)
        return cluster_id

    def _write_meta_properties(self, cluster_id: str) -> None:
        (self.data_dir / META_PROPERTIES).write_text(
            f"#kafkacompat\nversion=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """The metadata store's cluster id, on joining. A data dir that already belongs to another
        cluster is refused (Kafka's InconsistentClusterIdException): joining would serve, and then
        delete as strays, logs of a different cluster."""
        if self.cluster_id and self.cluster_id != cluster_id:
            raise StartupError(
                f"the cluster id {cluster_id} in the metadata store does not match {self.cluster_id} in "
                f"{self.data_dir / META_PROPERTIES}: this broker is trying to join the wrong cluster; "
                f"check zookeeper.connect (and its chroot) or use another --data-dir"
            )
        if not self.cluster_id:
            self._write_meta_properties(cluster_id)
        self.cluster_id = cluster_id

    def _warn_about_stray_logs(self) -> None:
        for partition_log in self.logs.all_logs():
            if (partition_log.topic, partition_log.partition) not in self.partitions:
                log.warning(
                    "Partition directory %s belongs to no known topic; it is left untouched and not served",
                    partition_log.dir,
                )

    # ---- topics ----------------------------------------------------------------------------

    def log_config(self, topic: TopicInfo) -> LogConfig:
        return LogConfig.from_properties(self.config.effective_topic_config(topic.configs))

    def _log_config_for_topic_name(self, name: str) -> LogConfig:
        topic = self.topics.get(name)
        return LogConfig.from_properties(self.config.effective_topic_config(topic.configs if topic else {}))

    def _open_partitions(self, topic: TopicInfo, indexes: range) -> None:
        for index in indexes:
            self._open_partition(topic.name, index)

    def _open_partition(self, name: str, index: int) -> Partition:
        topic = self.topics.get(name)
        config = self._log_config_for_topic_name(name)
        partition_log = self.logs.get(name, index)
        if partition_log is not None and topic is not None and self._belongs_to_other_topic(partition_log.dir, topic):
            log.warning("The log of %s-%d on disk belongs to an earlier topic of that name (deleted and "
                        "recreated while this broker was away); deleting it", name, index)
            self.logs.delete_partition(name, index)
            partition_log = None
        if partition_log is None:
            partition_log = self.logs.create(name, index, config)
        if topic is not None:
            self._write_partition_metadata(partition_log.dir, topic.topic_id)
        partition = Partition(
            name, index, partition_log, local_id=self.node_id,
            leader_id=-1 if getattr(self, "clustered", False) else self.node_id,
            lag_time_max_ms=self.config.replica_lag_time_max_ms,
            min_insync_replicas=self._min_insync_replicas(topic),
        )
        self.partitions[(name, index)] = partition
        return partition

    @staticmethod
    def _topic_id_on_disk(partition_dir: Path) -> uuid.UUID | None:
        """The topic id in a partition directory's partition.metadata, if it has a readable one."""
        try:
            for line in (partition_dir / "partition.metadata").read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    return decode_topic_id(value.strip())
        except (OSError, ValueError):
            return None
        return None

    def _belongs_to_other_topic(self, partition_dir: Path, topic: TopicInfo) -> bool:
        on_disk = self._topic_id_on_disk(partition_dir)
        return on_disk is not None and topic.topic_id.int != 0 and on_disk != topic.topic_id

    def delete_stray_logs(self, hosted: set[tuple[str, int]]) -> None:
        """Once the first cluster view is in (cluster mode): logs on disk for partitions this broker
        no longer hosts (topic deleted or replica moved while it was down) are deleted, as Kafka's
        controller does with StopReplica when such a broker returns."""
        for partition_log in self.logs.all_logs():
            key = (partition_log.topic, partition_log.partition)
            if key not in hosted and key not in self.partitions:
                log.warning("Deleting the log of %s-%d: this broker hosts no such partition any more "
                            "(its topic was deleted or the replica moved while the broker was away)", *key)
                self.logs.delete_partition(*key)

    def _min_insync_replicas(self, topic: TopicInfo | None) -> int:
        effective = self.config.effective_topic_config(topic.configs if topic else {})
        return int(effective.get("min.insync.replicas", self.config.min_insync_replicas))

    @staticmethod
    def _write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID) -> None:
        """Kafka's partition.metadata file: the topic id a partition directory belongs to."""
        path = partition_dir / "partition.metadata"
        if not path.exists():
            path.write_text(f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n")

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        validate_topic_name(name)
        topic = TopicInfo(name, uuid.uuid4(), partitions, replication_factor, dict(configs))
        self.topics.add(topic)
        self._open_partitions(topic, range(partitions))
        log.info("Created topic %s with %d partition(s) and id %s", name, partitions, topic.topic_id)
        return topic

    def auto_create_topic(self, name: str) -> TopicInfo:
        return self.create_topic(
            name, self.config.num_partitions, min(self.config.default_replication_factor, 1), {}
        )

    def delete_topic(self, topic: TopicInfo) -> None:
        self.topics.remove(topic.name)
        for index in range(topic.partitions):
            partition = self.partitions.pop((topic.name, index), None)
            if partition is not None:
                partition.wake_waiters()
            self.logs.delete_partition(topic.name, index)
        log.info("Deleted topic %s (id %s)", topic.name, topic.topic_id)

    def add_partitions(self, topic: TopicInfo, total: int) -> None:
        first_new = topic.partitions
        topic.partitions = total
        self.topics.update(topic)
        self._open_partitions(topic, range(first_new, total))
        log.info("Topic %s now has %d partitions", topic.name, total)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # ---- admin operations: local on a single node, through the controller in a cluster ------

    async def admin_create_topic(self, name: str, partitions: int, replication_factor: int,
                                 configs: dict[str, str], assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        if self.cluster is None:
            return self.create_topic(name, partitions, replication_factor, configs)
        validate_topic_name(name)
        return await self.cluster.create_topic(name, partitions, replication_factor, configs, assignment)

    async def admin_delete_topic(self, topic: TopicInfo) -> None:
        if self.cluster is None:
            self.delete_topic(topic)
        else:
            await self.cluster.delete_topic(topic.name)

    async def admin_add_partitions(self, topic: TopicInfo, total: int,
                                   assignment: list[list[int]] | None = None) -> None:
        if self.cluster is None:
            self.add_partitions(topic, total)
        else:
            await self.cluster.add_partitions(topic.name, total, assignment)

    async def admin_auto_create_topic(self, name: str) -> TopicInfo:
        if self.cluster is None:
            return self.auto_create_topic(name)
        rf = max(1, min(self.config.default_replication_factor, self.live_broker_count()))
        try:
            return await self.admin_create_topic(name, self.config.num_partitions, rf, {})
        except KafkaError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS and self.topics.get(name) is not None:
                return self.topics.get(name)  # type: ignore[return-value]
            raise

    # ---- partition states from the controller (cluster mode) --------------------------------

    async def remove_partition(self, topic: str, index: int) -> None:
        """This broker no longer hosts the partition (topic deleted or replica moved): stop
        serving it and delete its log."""
        self.fetchers.remove_partition((topic, index))
        partition = self.partitions.pop((topic, index), None)
        if partition is not None:
            partition.wake_waiters()
        self.groups.on_partition_removed(topic, index)
        self.logs.delete_partition(topic, index)

    def refresh_topic_config(self, topic: TopicInfo) -> None:
        """Apply a topic's (possibly changed) config overrides to the logs hosted here."""
        config = None
        for index in range(topic.partitions):
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                config = config or self.log_config(topic)
                partition.log.config = config

    # ---- cluster view ----------------------------------------------------------------------

    def advertised_endpoint(self) -> tuple[str, int]:
        host, port = self.config.advertised_endpoint()
        return host, self.config.advertised_port or self.port

    @property
    def controller_client(self) -> "ClusterMember | None":
        """alter_partition(topic, partition, leader_epoch, partition_epoch, new_isr), ... (cluster mode)."""
        return self.cluster

    @property
    def controller_id(self) -> int:
        if self.cluster is not None:
            return self.cluster.cache.controller_id
        return self.node_id

    def brokers(self) -> "dict[int, BrokerInfo]":
        """Live brokers by id (this one alone on a single node)."""
        if self.cluster is not None:
            return self.cluster.brokers()
        from kafkacompat.controller.state import BrokerInfo

        host, port = self.advertised_endpoint()
        return {self.node_id: BrokerInfo(self.node_id, host, port, self.config.broker_rack)}

    def live_broker_count(self) -> int:
        if self.cluster is not None:
            return len(self.cluster.cache.brokers)
        return 1

    def live_broker_ids(self) -> list[int]:
        if self.cluster is not None:
            return sorted(self.cluster.cache.brokers)
        return [self.node_id]

    async def alter_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        """Replace a topic's config overrides (validated by the caller), persist them, and apply
        them to its partitions' logs at once. In a cluster the store is written first: when that
        fails the caller gets the KafkaError and nothing changes."""
        if self.cluster is not None:
            await self.cluster.alter_topic_configs(topic.name, dict(configs))
        topic.configs = dict(configs)
        self.topics.update(topic)
        config = self.log_config(topic)
        min_isr = self._min_insync_replicas(topic)
        for index in range(topic.partitions):
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                partition.log.config = config
                partition.min_insync_replicas = min_isr

    # ---- replication -----------------------------------------------------------------------

    async def apply_partition_state(self, state: "PartitionState") -> None:
        """The controller's state of a partition this broker hosts (or stopped hosting) changed:
        create the log if needed, lead or follow (replication/partition.py), start or stop the
        follower fetcher. Called in order, once per change; returns promptly. States older than
        the one applied (leader epoch, then partition epoch) are ignored."""
        self._apply_replication_state(state)
        self.groups.on_partition_state(state, self.node_id)

    def _apply_replication_state(self, state: "PartitionState") -> None:
        key = (state.topic, state.partition)
        partition = self.partitions.get(key)
        if self.node_id not in state.replicas:
            self.fetchers.remove_partition(key)
            if partition is not None and not partition.is_stale(state):
                partition.become_follower(state)
            return
        if partition is None:
            if self.topics.get(state.topic) is None:
                log.warning("State for %s-%d of an unknown topic; ignored", state.topic, state.partition)
                return
            partition = self._open_partition(state.topic, state.partition)
        if partition.is_stale(state):
            log.debug("Ignoring stale state %s", state)
            return
        if state.leader == self.node_id:
            self.fetchers.remove_partition(key)
            partition.become_leader(state)
        else:
            partition.become_follower(state)
            if state.leader >= 0:
                self.fetchers.add_partition(key, state.leader)
            else:
                self.fetchers.remove_partition(key)

    def propose_isr(self, partition: Partition, new_isr: list[int]) -> None:
        """Send an ISR change to the controller in the background (one in flight per partition)."""
        if self.controller_client is None or self._replication_nursery is None or partition.pending_isr is not None:
            return
        partition.pending_isr = list(new_isr)
        self._replication_nursery.start_soon(self._alter_isr, partition, list(new_isr))

    async def _alter_isr(self, partition: Partition, new_isr: list[int]) -> None:
        state = None
        try:
            log.info("%s: proposing ISR %s (was %s)", partition, new_isr, partition.isr)
            state = await self.controller_client.alter_partition(
                partition.topic, partition.index, partition.leader_epoch, partition.partition_epoch, new_isr
            )
            if state is not None:
                await self.apply_partition_state(state)
        except KafkaError as exc:
            log.info("%s: ISR change to %s refused: %s", partition, new_isr, exc)
        except Exception:
            log.exception("%s: ISR change to %s failed", partition, new_isr)
        finally:
            if partition.pending_isr == new_isr:
                partition.pending_isr = None

    def check_isr(self) -> None:
        """Propose dropping followers that have not caught up for replica.lag.time.max.ms."""
        for partition in list(self.partitions.values()):
            if partition.is_leader and partition.followers:
                shrunk = partition.isr_shrink_candidate()
                if shrunk is not None:
                    self.propose_isr(partition, shrunk)

    async def run_isr_checks(self) -> None:
        interval = max(self.config.replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await trio.sleep(interval)
            self.check_isr()

    def start_replication(self, nursery: trio.Nursery) -> None:
        self._replication_nursery = nursery
        self.fetchers.start(nursery)
        nursery.start_soon(self.run_isr_checks)

    def node_endpoints(self, ids) -> "list[NodeEndpoint] | None":
        """KIP-951 NodeEndpoints of these brokers (those this broker knows)."""
        from kafkacompat.wire.produce import NodeEndpoint

        brokers = getattr(self, "brokers", None)
        infos = brokers() if brokers is not None else {}
        endpoints = [NodeEndpoint(i, infos[i].host, infos[i].port, infos[i].rack) for i in sorted(ids) if i in infos]
        return endpoints or None

    # ---- requests --------------------------------------------------------------------------

    async def dispatch(
        self, header: RequestHeader, body: memoryview, connection: "Connection | None"
    ) -> list[Chunk] | None:
        """Run one request; return the framed response chunks, or None when none is sent."""
        REGISTRY, RequestContext, unsupported_version_response = _HANDLERS or _import_handlers()
        handler = REGISTRY.get(header.api_key)
        version = header.api_version
        if handler is None or not handler.supports(version):
            if header.api_key == API_VERSIONS_KEY:
                return self._frame(header.correlation_id, response_header(header.correlation_id, API_VERSIONS_KEY, 0),
                                   unsupported_version_response())
            if handler is None:
                raise HeaderError(f"unknown API key {header.api_key} (correlation id {header.correlation_id})")
            raise HeaderError(
                f"{api_name(header.api_key)} v{version} is not supported (this broker serves "
                f"v{handler.min_version}-v{handler.max_version}); upgrade or configure the client's api version"
            )
        try:
            request = handler.decode(version, body)
        except ProtocolViolation:
            raise
        except ValueError as exc:
            raise ProtocolViolation(f"malformed {api_name(header.api_key)} v{version} request: {exc}") from exc
        response = await handler.fn(request, RequestContext(self, header, connection))
        if response is None:
            return None
        encoded = handler.encode(response, version)
        return self._frame(header.correlation_id, response_header(header.correlation_id, header.api_key, version), encoded)

    @staticmethod
    def _frame(correlation_id: int, header: bytes, encoded: "bytes | list[Chunk]") -> list[Chunk]:
        if isinstance(encoded, (bytes, bytearray)):
            return [frame_prefix(len(header) + len(encoded)) + header + encoded]
        size = len(header) + sum(len(chunk) for chunk in encoded)
        return [frame_prefix(size) + header, *encoded]

    # ---- background work -------------------------------------------------------------------

    async def run_housekeeping(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        checkpoint_interval = self.config.log_flush_offset_checkpoint_interval_ms / 1000
        next_checkpoint = trio.current_time() + checkpoint_interval
        producer_expiry_interval = self.config.producer_id_expiration_check_interval_ms / 1000
        next_producer_expiry = trio.current_time() + producer_expiry_interval
        while True:
            await trio.sleep(min(interval, checkpoint_interval, producer_expiry_interval))
            now_ms = int(time.time() * 1000)
            for partition in list(self.partitions.values()):
                try:
                    removed = partition.log.apply_retention(now_ms)
                except OSError:
                    log.exception("Retention failed for %s; will retry", partition)
                    continue
                if removed:
                    log.info("Retention removed %d segment(s) of %s", removed, partition)
            if trio.current_time() >= next_producer_expiry:
                self._expire_producers(now_ms)
                next_producer_expiry = trio.current_time() + producer_expiry_interval
            if trio.current_time() >= next_checkpoint:
                self.logs.checkpoint()
                next_checkpoint = trio.current_time() + checkpoint_interval

    def _expire_producers(self, now_ms: int) -> None:
        """Forget idempotent producers idle longer than producer.id.expiration.ms."""
        expiration_ms = self.config.producer_id_expiration_ms
        for partition in list(self.partitions.values()):
            removed = partition.log.producer_state.remove_expired(now_ms, expiration_ms)
            if removed:
                log.info("Expired %d idle producer id(s) of %s (producer.id.expiration.ms=%d)",
                         removed, partition, expiration_ms)


async def serve(broker: Broker, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Open the broker, serve until cancelled, then close it cleanly."""
    from kafkacompat.server import serve_listener

    broker.config.warn_about_settings_without_effect()
    broker.open()
    try:
        async with trio.open_nursery() as nursery:
            broker._nursery = nursery
            port = await nursery.start(serve_listener, broker, broker.config.host, broker.config.port)
            broker.port = port
            if broker.clustered:
                await nursery.start(_join_cluster, broker)
            nursery.start_soon(broker.run_housekeeping)
            nursery.start_soon(broker.logs.run_flusher, broker.config.log_flush_scheduler_interval_ms)
            nursery.start_soon(broker.groups.run)
            broker.start_replication(nursery)
            nursery.start_soon(LogCleaner.for_manager(broker.logs, broker.config).run)
            host, advertised_port = broker.advertised_endpoint()
            log.info(
                "kafkacompat broker %d listening on %s:%d (advertised as %s:%d), data in %s",
                broker.node_id, broker.config.host, port, host, advertised_port, broker.data_dir.resolve(),
            )
            task_status.started(port)
    finally:
        if broker.cluster is not None:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(5):
                    await broker.cluster.close()  # ends the session: our ephemeral nodes go now
        broker.close()
        log.info("kafkacompat broker %d stopped; logs flushed and checkpoints written", broker.node_id)


async def _join_cluster(broker: Broker, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Connect to the metadata store (ZooKeeper when configured), register, take part in the
    controller election and keep the metadata cache in sync (ClusterMember.run)."""
    from kafkacompat.controller.controller import ClusterMember

    store = broker.store
    if store is None:
        from kafkacompat.controller.zookeeper import ZooKeeperStore

        config = broker.config
        store = await ZooKeeperStore(
            config.zookeeper_connect, session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        ).start()
        broker.store = store
    broker.cluster = ClusterMember(broker, store)
    # Producer ids must be unique across the cluster: blocks come from the store's
    # /latest_producer_id_block (compare-and-set), not from this broker's data dir.
    from kafkacompat.controller.producer_ids import MetadataStoreBlocks

    broker.producer_ids = ProducerIdManager(broker.node_id, MetadataStoreBlocks(store))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.cluster.run)
        task_status.started()


async def shutdown_broker(broker: Broker, cancel_scope: trio.CancelScope) -> None:
    """Controlled shutdown first (leaders move away) when in a cluster, with Kafka's bounded
    retries (controlled.shutdown.max.retries, .retry.backoff.ms; each attempt at most
    controller.socket.timeout.ms), then stop: logs are flushed and checkpointed either way."""
    config = broker.config
    if broker.cluster is not None and config.controlled_shutdown_enable:
        try:
            await broker.cluster.controlled_shutdown(
                max_retries=config.controlled_shutdown_max_retries,
                retry_backoff=max(config.controlled_shutdown_retry_backoff_ms, 0) / 1000,
                timeout=max(config.controller_socket_timeout_ms, 0) / 1000,
            )
        except Exception:
            log.exception("Controlled shutdown of broker %d failed; stopping anyway", broker.node_id)
    cancel_scope.cancel()


async def _serve_until_signalled(config: "BrokerConfig") -> None:
    broker = Broker(config)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, broker)
            async for signum in signals:
                log.info("Received %s; shutting down", signal.Signals(signum).name)
                nursery.start_soon(shutdown_broker, broker, nursery.cancel_scope)
                break
            async for signum in signals:  # a second signal: stop at once
                log.info("Received %s again; stopping now, without waiting for the controlled shutdown",
                         signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def run_broker(config: "BrokerConfig") -> None:
    """Serve as this process's main work until SIGTERM/SIGINT, then end the process at once."""
    trio.run(_serve_until_signalled, config)
    _exit_now()


def _exit_now() -> None:
    """Once the broker has logged "stopped", its logs are flushed and checkpointed and its
    session closed: nothing is left to save. Python's own teardown would still take 0.1-0.3 s
    (unloading modules, collecting the broker's objects) plus whatever library atexit hooks wait
    for, so the process ends here, with its log output flushed."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
