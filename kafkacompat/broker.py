"""The composition root: builds the broker's services (replication/manager.py's ReplicaManager,
the metadata view and admin operations of a single node or a cluster member, the group and
transaction coordinators, producer ids), opens the data dir, joins the cluster before the listener accepts,
and closes everything in order."""

from __future__ import annotations

import logging
import os
import signal
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from kafkacompat.controller.producer_ids import FileBlockStore, MetadataStoreBlocks, ProducerIdManager
from kafkacompat.controller.topics import TopicRegistry
from kafkacompat.fetch_sessions import FetchSessionCache
from kafkacompat.groups.coordinator import GroupCoordinator
from kafkacompat.groups.offsets_log import OffsetsTopicLog
from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.identity import BrokerIdentity
from kafkacompat.log import LogCleaner, LogManager
from kafkacompat.quotas import ClientQuotaManager
from kafkacompat.metrics import BrokerMetrics
from kafkacompat.replication.manager import ReplicaManager
from kafkacompat.controller.store import EmbeddedStore
from kafkacompat.security.credentials import ScramCredentialStore
from kafkacompat.security.tokens import DelegationTokens
from kafkacompat.transactions.channel import BrokerChannel
from kafkacompat.transactions.coordinator import TransactionCoordinator
from kafkacompat.transactions.log import TRANSACTION_STATE_TOPIC
from kafkacompat.transactions.markers import TxnMarkerWriter
from kafkacompat.transactions.verifier import CoordinatorVerifier
from kafkacompat.shares import ShareServices
from kafkacompat.shares.group import ShareGroupCoordinator
from kafkacompat.shares.manager import SharePartitionManager
from kafkacompat.shares.records import SHARE_STATE_TOPIC
from kafkacompat.shares.remote import RoutingPersister
from kafkacompat.shares.state_store import ShareStateStore
from kafkacompat.telemetry import ClientMetricsManager
from kafkacompat.groups.group_configs import GroupConfigs
from kafkacompat.wire.errors import KafkaError
from kafkacompat.dispatch import dispatch
from kafkacompat.wire.chunks import Chunk
from kafkacompat.wire.frame import RequestHeader

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.controller import ClusterMember
    from kafkacompat.controller.store import MetadataStore
    from kafkacompat.handlers.registry import Services
    from kafkacompat.security.authorizer import Authorizer
    from kafkacompat.http import HttpSettings
    from kafkacompat.http.routing import ClusterControl
    from kafkacompat.server import Connection

log = logging.getLogger("kafkacompat.broker")

class Broker:
    def __init__(self, config: "BrokerConfig", store: "MetadataStore | None" = None, *,
                 http: "HttpSettings | None" = None, control: "ClusterControl | None" = None) -> None:
        """A single node (topics in the data dir) unless ``config.zookeeper_connect`` is set or a
        metadata ``store`` is given (in-process clusters): then it is a cluster member, and topics,
        brokers and partition states come from the store through the controller. ``http``: serve
        the console, /metrics and the JSON API (and count metrics); ``control``: dev-cluster's
        broker stop/start for that API."""
        self.config = config
        self.http = http
        self.control = control
        self.http_port: int | None = None
        self.http_ready = trio.Event()  # set once the HTTP port is bound (or found in use)
        self.node_id = config.broker_id
        self.data_dir = Path(config.data_dir)
        self.port = config.port
        self.clustered = store is not None or bool(config.zookeeper_connect)
        self.identity = BrokerIdentity(self.node_id, self.data_dir, clustered=self.clustered, log_dirs=config.data_dirs)
        self.logs = LogManager(config.data_dirs, producer_id_expiration_ms=config.producer_id_expiration_ms)
        self.cluster: "ClusterMember | None" = None
        if self.clustered:
            self.store: "MetadataStore | None" = store if store is not None else _zookeeper_store(config)
            self._build_cluster_member(self.store)
        else:
            self.store = None
            self._build_single_node()
        self.groups = GroupCoordinator(config, self._offsets_log(), clustered=self.clustered)
        self.replicas.add_leadership_listener(self.groups)
        self._embedded_store: "MetadataStore | None" = None
        self.tokens = DelegationTokens(self._metadata_store,
                                       config.delegation_token_secret_key or config.delegation_token_master_key,
                                       config.delegation_token_max_lifetime_ms, config.delegation_token_expiry_time_ms)
        self.credentials = ScramCredentialStore(self._metadata_store, self.tokens)
        self.bound_ports: dict[str, int] = {}
        self.authorizer = self._authorizer()
        self.quotas = ClientQuotaManager(config, self.admin.quota_store)
        self.replicas.add_txn_marker_listener(self.groups)
        self._build_transaction_coordinator()
        self.group_configs = GroupConfigs(config, self.admin.group_config_store)
        self.groups.group_configs = self.group_configs
        self.shares = self._build_shares()
        self.shares.partitions.group_configs = self.group_configs
        self.telemetry = ClientMetricsManager(config.telemetry_max_bytes, self.admin.client_metrics_store)
        self._services = None

    def _authorizer(self) -> "Authorizer | None":
        """Kafka's authorizer.class.name selects it; the ACLs are in the metadata store (the data
        dir's embedded store on a single node, the cluster's otherwise)."""
        if not self.config.authorizer_class_name:
            return None
        from kafkacompat.security.authorizer import Authorizer

        super_users = [user.strip() for user in (self.config.super_users or "").split(";") if user.strip()]
        return Authorizer(self._metadata_store, super_users, self.config.allow_everyone_if_no_acl_found)

    def _build_single_node(self) -> None:
        from kafkacompat.single_node import LocalAdmin, LocalMetadata

        self.registry = TopicRegistry(self.data_dir, broker_id=self.node_id)
        self.replicas = ReplicaManager(self.node_id, self.config, self.logs, self.registry,
                                       lambda: self.metadata.brokers(), isr_client=None)
        self.metadata = LocalMetadata(self.identity, self.config, self.registry, self.replicas,
                                      self.advertised_endpoint, self.advertised_endpoints)
        self.admin = LocalAdmin(self.config, self.registry, self.replicas)
        self.producer_ids = ProducerIdManager(self.node_id, FileBlockStore(self.data_dir))

    def _build_cluster_member(self, store: "MetadataStore") -> None:
        from kafkacompat.controller.controller import AlterPartitionClient, ClusterMember, MetadataCache
        from kafkacompat.controller.services import ClusterAdmin, ClusterMetadata

        cache = MetadataCache()
        self.replicas = ReplicaManager(self.node_id, self.config, self.logs, cache, lambda: dict(cache.brokers),
                                       isr_client=AlterPartitionClient(store, cache, self.node_id))
        self.cluster = ClusterMember(self.identity, self.config, store, cache, self.replicas,
                                     self.advertised_endpoint, self.advertised_endpoints)
        self.metadata = ClusterMetadata(self.identity, cache)
        self.admin = ClusterAdmin(self.config, self.cluster)
        # Producer ids are unique across the cluster: blocks come from the store's
        # /latest_producer_id_block (compare-and-set), never from this broker's data dir.
        self.producer_ids = ProducerIdManager(self.node_id, MetadataStoreBlocks(store))

    def _offsets_log(self) -> OffsetsTopicLog:
        if self.clustered:
            return OffsetsTopicLog(self.replicas.topics, self.replicas, create=None)
        config = self.config

        def create():
            return self.admin.create_topic_now(
                OFFSETS_TOPIC, config.offsets_topic_num_partitions, min(config.offsets_topic_replication_factor, 1),
                self.groups.offsets_topic_configs())

        return OffsetsTopicLog(self.replicas.topics, self.replicas, create=create)

    def _metadata_store(self) -> "MetadataStore":
        """ZooKeeper in a cluster; the single node's embedded store (its tree exists once open)."""
        if self.store is not None:
            return self.store
        if self._embedded_store is None:
            self._embedded_store = EmbeddedStore(self.registry.tree)
        return self._embedded_store

    def _build_transaction_coordinator(self) -> None:
        config = self.config
        channel = BrokerChannel(self.node_id, self.metadata.brokers, config.request_timeout_ms, config)
        create = None
        if not self.clustered:
            def create():
                return self.admin.create_topic_now(
                    TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
                    min(config.transaction_state_log_replication_factor, 1), self.transactions.topic_configs(1))

        state_log = OffsetsTopicLog(self.replicas.topics, self.replicas, create=create, name=TRANSACTION_STATE_TOPIC)
        self.transactions = TransactionCoordinator(config, state_log, self.producer_ids,
                                                   TxnMarkerWriter(self.metadata, self.replicas, channel),
                                                   clustered=self.clustered)
        self.replicas.add_leadership_listener(self.transactions)
        self.txn_verifier = CoordinatorVerifier(self.transactions, self.metadata, channel)
    def _build_shares(self) -> ShareServices:
        """Share groups: membership beside the group coordinator, share partitions on the
        partition leaders, their state in __share_group_state (created on first use)."""
        config = self.config

        async def ensure_state_topic():
            topic = self.replicas.topics.get(SHARE_STATE_TOPIC)
            if topic is not None:
                return topic
            partitions = config.share_coordinator_state_topic_num_partitions
            replication = max(1, min(config.share_coordinator_state_topic_replication_factor,
                                     len(self.metadata.brokers())))
            if not self.clustered:
                return self.admin.create_topic_now(SHARE_STATE_TOPIC, partitions, 1, state.topic_configs())
            try:
                await self.admin.create_topic(SHARE_STATE_TOPIC, partitions, replication, state.topic_configs())
            except KafkaError as exc:  # created concurrently: the caller retries
                log.info("Could not create %s yet: %s", SHARE_STATE_TOPIC, exc)
            return self.replicas.topics.get(SHARE_STATE_TOPIC)

        state = ShareStateStore(config, self.replicas, ensure_topic=ensure_state_topic, clustered=self.clustered)
        persister = RoutingPersister(state, self.metadata) if self.clustered else state
        partitions = SharePartitionManager(config, self.replicas, persister)
        groups = ShareGroupCoordinator(config, self.groups, self.metadata)
        groups.member_removed_listeners.append(partitions.release_member_soon)
        self.groups.foreign_group = groups.is_share_group
        self.replicas.add_leadership_listener(state)
        self.replicas.add_leadership_listener(partitions)
        return ShareServices(groups, partitions, state)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.identity.cluster_id

    def open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.identity.load()
        if self.clustered:
            # Partitions open as the controller's states arrive (apply_partition_state).
            self.logs.load_all(self.replicas.log_config_for_topic_name)
            return
        self.registry.load()
        self.logs.load_all(self.replicas.log_config_for_topic_name)
        for topic in self.registry.by_name.values():
            self.replicas.open_partitions(topic, range(topic.partitions), lead=True)
        self.replicas.warn_about_stray_logs()
        self.groups.load()
        self.transactions.load()
        self.shares.state.load()

    def close(self) -> None:
        self.logs.close()

    async def join(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Connect to the metadata store (ZooKeeper when configured), register, take part in the
        controller election and keep the metadata cache in sync (ClusterMember.run)."""
        assert self.cluster is not None and self.store is not None
        await self.store.start()
        await self.cluster.run(task_status=task_status)

    def advertised_endpoint(self) -> tuple[str, int]:
        host, port = self.config.advertised_endpoint()
        return host, self.config.advertised_port or self.port

    def advertised_endpoints(self) -> tuple[tuple[str, str, int], ...]:
        """(listener, host, port) of every served listener, as Metadata advertises them."""
        endpoints = []
        for listener in self.config.served_listeners:
            bound = self.bound_ports.get(listener.name, listener.port)
            endpoints.append((listener.name, *listener.advertised(bound)))
        return tuple(endpoints)

    def partition(self, topic: str, index: int):
        return self.replicas.partition(topic, index)

    def services(self) -> "Services":
        """What every request's handler gets (RequestContext.services)."""
        if self._services is None:
            from kafkacompat.handlers.registry import Services

            self._services = Services(self.config, self.metadata, self.admin, self.replicas, self.groups,
                                      self.producer_ids, self.data_dir, _fetch_sessions(self.config),
                                      credentials=self.credentials, tokens=self.tokens, authorizer=self.authorizer,
                                      quotas=self.quotas, txn_verifier=self.txn_verifier, transactions=self.transactions,
                                      shares=self.shares, metrics=BrokerMetrics(enabled=self.http is not None),
                                      telemetry=self.telemetry, group_configs=self.group_configs)
        return self._services

    async def dispatch(
        self, header: RequestHeader, body: memoryview, connection: "Connection | None"
    ) -> list[Chunk] | None:
        return await dispatch(self._services or self.services(), header, body, connection)


def _fetch_sessions(config: "BrokerConfig") -> FetchSessionCache:
    return FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                             config.min_incremental_fetch_session_eviction_ms)


def _zookeeper_store(config: "BrokerConfig") -> "MetadataStore":
    from kafkacompat.controller.zookeeper import ZooKeeperStore

    return ZooKeeperStore(config.zookeeper_connect, session_timeout_ms=config.zookeeper_session_timeout_ms,
                          connection_timeout_ms=config.zookeeper_connection_timeout_ms)


async def serve(broker: Broker, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Open the broker, serve until cancelled, then close it cleanly. The port is bound first (a
    cluster member registers its address), but nothing is accepted before the broker has joined
    its cluster: no request sees a broker that is half there."""
    from kafkacompat.dynamic_config import DynamicBrokerConfigs
    from kafkacompat.security.listeners import inter_broker_credentials, listener_security
    from kafkacompat.server import serve_listener

    broker.config.warn_about_settings_without_effect()
    securities = [listener_security(broker.config, listener, broker.credentials.lookup)
                  for listener in broker.config.served_listeners]
    if broker.clustered:
        inter_broker_credentials(broker.config)  # a missing broker login fails the start, not each fetch
    broker.open()
    try:
        async with trio.open_nursery() as nursery:
            accepting = trio.Event()
            for security in securities:
                listener = security.listener
                bound = await nursery.start(partial(serve_listener, accepting=accepting, security=security,
                                                    rates=broker.quotas.connections), broker,
                                            listener.host, listener.port)
                broker.bound_ports[listener.name] = bound
            port = broker.bound_ports[broker.config.served_listeners[0].name]
            broker.port = port
            if broker.clustered:
                await nursery.start(broker.join)
            if broker.authorizer is not None:
                await nursery.start(broker.authorizer.run)
            nursery.start_soon(broker.quotas.run)
            dynamic_configs = DynamicBrokerConfigs(broker.config, broker.admin.broker_config_store(), broker.replicas,
                                                   broker.metadata)
            await nursery.start(dynamic_configs.run)
            await nursery.start(broker.telemetry.run)
            await nursery.start(broker.group_configs.run)
            await nursery.start(broker.replicas.run)
            nursery.start_soon(broker.logs.run_flusher, broker.config.log_flush_scheduler_interval_ms)
            nursery.start_soon(broker.groups.run)
            nursery.start_soon(broker.transactions.run)
            nursery.start_soon(broker.shares.partitions.run)
            nursery.start_soon(broker.shares.groups.run)
            nursery.start_soon(LogCleaner.for_manager(broker.logs, broker.config).run)
            accepting.set()
            host, advertised_port = broker.advertised_endpoint()
            others = "".join(f", {name} ({security.listener.protocol}) on {security.listener.host}:{bound}"
                             for security in securities[1:]
                             for name, bound in [(security.listener.name, broker.bound_ports[security.listener.name])])
            log.info(
                "kafkacompat broker %d listening on %s:%d (advertised as %s:%d)%s, data in %s",
                broker.node_id, broker.config.host, port, host, advertised_port, others, broker.data_dir.resolve(),
            )
            task_status.started(port)
            if broker.http is not None:
                nursery.start_soon(_serve_http, broker)  # after the Kafka listener: it never waits for HTTP
            else:
                broker.http_ready.set()
    finally:
        if broker.cluster is not None:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(5):
                    await broker.cluster.close()  # ends the session: our ephemeral nodes go now
        broker.close()
        log.info("kafkacompat broker %d stopped; logs flushed and checkpoints written", broker.node_id)


async def _serve_http(broker: Broker) -> None:
    from kafkacompat import http

    assert broker.http is not None
    async with trio.open_nursery() as nursery:
        broker.http_port = await nursery.start(
            partial(http.serve, broker.services(), broker.http, control=broker.control))
        broker.http_ready.set()


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


async def _serve_until_signalled(config: "BrokerConfig", http: "HttpSettings | None") -> None:
    broker = Broker(config, http=http)
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


def run_broker(config: "BrokerConfig", http: "HttpSettings | None" = None) -> None:
    """Serve as this process's main work until SIGTERM/SIGINT, then end the process at once."""
    trio.run(_serve_until_signalled, config, http)
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
