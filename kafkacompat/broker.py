"""Wires the parts together: config, topic registry, logs, partitions, the listener. Owns the
nursery; start-up and clean shutdown live here."""

from __future__ import annotations

import logging
import signal
import time
import uuid
import base64
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from kafkacompat.controller.producer_ids import FileBlockStore, ProducerIdManager
from kafkacompat.controller.topics import TopicInfo, TopicRegistry, validate_topic_name
from kafkacompat.groups.coordinator import GroupCoordinator
from kafkacompat.log import LogCleaner, LogConfig, LogManager
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
    from kafkacompat.server import Connection

log = logging.getLogger("kafkacompat.broker")

META_PROPERTIES = "meta.properties"


class Broker:
    def __init__(self, config: "BrokerConfig") -> None:
        self.config = config
        self.node_id = config.broker_id
        self.data_dir = Path(config.data_dir)
        self.topics = TopicRegistry(self.data_dir)
        self.logs = LogManager(self.data_dir, producer_id_expiration_ms=config.producer_id_expiration_ms)
        self.producer_ids = ProducerIdManager(self.node_id, FileBlockStore(self.data_dir))
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.cluster_id = ""
        self.port = config.port
        self.groups = GroupCoordinator(self)

    # ---- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_or_create_meta_properties()
        self.topics.load()
        self.logs.load_all(self._log_config_for_topic_name)
        for topic in self.topics.by_name.values():
            self._open_partitions(topic, range(topic.partitions))
        self._warn_about_stray_logs()
        self.groups.load()

    def close(self) -> None:
        self.logs.close()

    def _load_or_create_meta_properties(self) -> str:
        path = self.data_dir / META_PROPERTIES
        props: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
            stored = props.get("node.id", props.get("broker.id"))
            if stored is not None and int(stored) != self.node_id:
                raise RuntimeError(
                    f"the data dir {self.data_dir} belongs to broker {stored}, not {self.node_id}: "
                    f"start with --broker-id {stored} or use another --data-dir"
                )
            if props.get("cluster.id"):
                return props["cluster.id"]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        path.write_text(f"#kafkacompat\nversion=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")
        return cluster_id

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
        config = self.log_config(topic)
        for index in indexes:
            partition_log = self.logs.get(topic.name, index) or self.logs.create(topic.name, index, config)
            self._write_partition_metadata(partition_log.dir, topic.topic_id)
            self.partitions[(topic.name, index)] = Partition(topic.name, index, partition_log, leader_id=self.node_id)

    @staticmethod
    def _write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID) -> None:
        """Kafka's partition.metadata file: the topic id a partition directory belongs to."""
        path = partition_dir / "partition.metadata"
        if not path.exists():
            encoded = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
            path.write_text(f"version: 0\ntopic_id: {encoded}\n")

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

    # ---- cluster view ----------------------------------------------------------------------

    def advertised_endpoint(self) -> tuple[str, int]:
        host, port = self.config.advertised_endpoint()
        return host, self.config.advertised_port or self.port

    @property
    def controller_id(self) -> int:
        return self.node_id

    def live_broker_count(self) -> int:
        return 1

    def live_broker_ids(self) -> list[int]:
        return [self.node_id]

    def alter_topic_configs(self, topic: TopicInfo, configs: dict[str, str]) -> None:
        """Replace a topic's config overrides (validated by the caller), persist them, and apply
        them to its partitions' logs at once."""
        topic.configs = dict(configs)
        self.topics.update(topic)
        config = self.log_config(topic)
        for index in range(topic.partitions):
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                partition.log.config = config

    # ---- requests --------------------------------------------------------------------------

    async def dispatch(
        self, header: RequestHeader, body: memoryview, connection: "Connection | None"
    ) -> list[Chunk] | None:
        """Run one request; return the framed response chunks, or None when none is sent."""
        from kafkacompat.handlers import REGISTRY, RequestContext
        from kafkacompat.handlers.api_versions import unsupported_version_response

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

    broker.open()
    try:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_listener, broker, broker.config.host, broker.config.port)
            broker.port = port
            nursery.start_soon(broker.run_housekeeping)
            nursery.start_soon(broker.groups.run)
            nursery.start_soon(LogCleaner.for_manager(broker.logs, broker.config).run)
            host, advertised_port = broker.advertised_endpoint()
            log.info(
                "kafkacompat broker %d listening on %s:%d (advertised as %s:%d), data in %s",
                broker.node_id, broker.config.host, port, host, advertised_port, broker.data_dir.resolve(),
            )
            task_status.started(port)
    finally:
        broker.close()
        log.info("kafkacompat broker %d stopped; logs flushed and checkpoints written", broker.node_id)


async def _serve_until_signalled(config: "BrokerConfig") -> None:
    broker = Broker(config)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, broker)
            async for signum in signals:
                log.info("Received %s; shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def run_broker(config: "BrokerConfig") -> None:
    trio.run(_serve_until_signalled, config)
