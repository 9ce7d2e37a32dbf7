"""The ReplicaManager (Kafka's of that name): the partitions this broker hosts, their follower
fetchers, ISR checks and proposals, and log housekeeping. It applies the partition states the
controller decides (or the single node's own) and tells its leadership listeners (the group
coordinator) after each change. Its background tasks run in its own nursery; a task that fails
is logged with what it was doing and carries on, it never stops the broker."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import trio

from kafkacompat.controller.topics import TopicInfo, decode_topic_id, encode_topic_id
from kafkacompat.log import LogConfig, LogManager
from kafkacompat.log.checkpoint import read_small_file
from kafkacompat.log.manager import AllLogDirsFailed
from kafkacompat.quotas import ReplicationQuota
from kafkacompat.replication import log_dirs
from kafkacompat.replication.fetcher import ReplicaFetcherManager
from kafkacompat.replication.partition import Partition
from kafkacompat.replication.txn_markers import write_markers
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import TxnMarker

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.state import BrokerInfo, PartitionState
    from kafkacompat.services import IsrClient, LeadershipListener, TopicLookup, TransactionMarkerListener
    from kafkacompat.wire.produce import NodeEndpoint

log = logging.getLogger("kafkacompat.replication")

PARTITION_METADATA = "partition.metadata"


class ReplicaManager:
    def __init__(self, node_id: int, config: "BrokerConfig", logs: LogManager, topics: "TopicLookup",
                 brokers: "Callable[[], dict[int, BrokerInfo]]", isr_client: "IsrClient | None") -> None:
        """``topics`` and ``brokers`` are the metadata this broker reads (the single node's own or
        the controller's cache); ``isr_client`` takes ISR changes (None on a single node, where
        the ISR is this broker alone)."""
        self.node_id = node_id
        self.config = config
        self.logs = logs
        self.topics = topics
        self.brokers = brokers
        self.isr_client = isr_client
        self.partitions: dict[tuple[str, int], Partition] = {}
        samples, window = config.replication_quota_window_num, float(config.replication_quota_window_size_seconds)
        self.leader_quota = ReplicationQuota("LeaderReplication", "leader.replication.throttled.replicas", node_id,
                                             lambda: self.config.leader_replication_throttled_rate, samples, window)
        self.follower_quota = ReplicationQuota(
            "FollowerReplication", "follower.replication.throttled.replicas", node_id,
            lambda: self.config.follower_replication_throttled_rate, samples, window)
        self.fetchers = ReplicaFetcherManager(self)
        self.moves = log_dirs.LogDirMoves(logs, self.partitions, lambda: self.config.replica_fetch_max_bytes,
                                          lambda: self.config.replica_alter_log_dirs_io_max_bytes_per_second)
        logs.failure_listeners.append(self._on_log_dir_failure)
        self._listeners: list[LeadershipListener] = []
        self._marker_listeners: list[TransactionMarkerListener] = []
        self._nursery: trio.Nursery | None = None

    def add_leadership_listener(self, listener: "LeadershipListener") -> None:
        self._listeners.append(listener)

    def add_txn_marker_listener(self, listener: "TransactionMarkerListener") -> None:
        self._marker_listeners.append(listener)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def checkpoint_log_start_offsets(self, advanced: "Mapping[tuple[str, int], int] | None" = None) -> None:
        self.logs.checkpoint_log_start_offsets(advanced)

    def should_leader_throttle(self, partition: Partition, topic: TopicInfo | None, replica_id: int) -> bool:
        """Kafka's ReplicaManager.shouldLeaderThrottle: a follower's fetch of this partition is
        answered without data (replication throttles, quotas.py)."""
        return (replica_id not in partition.isr and self.leader_quota.is_throttled(topic, partition.index)
                and self.leader_quota.exceeded(trio.current_time()))

    # ---- opening partitions --------------------------------------------------------------------

    def log_config(self, topic: TopicInfo | None) -> LogConfig:
        return LogConfig.from_properties(self.config.effective_topic_config(topic.configs if topic else {}))

    def log_config_for_topic_name(self, name: str) -> LogConfig:
        return self.log_config(self.topics.get(name))

    def open_partitions(self, topic: TopicInfo, indexes: range, *, lead: bool = False) -> set[int]:
        """Open the partitions of ``topic`` (which need not be in the metadata yet), all or none:
        when one cannot be created (a full or failing disk: OSError), those opened by this call
        are closed again (``close_opened``) before the error is raised. Returns the indexes whose
        log this call created (the others were on disk already)."""
        created: set[int] = set()
        min_insync_replicas = self._min_insync_replicas(topic)  # the same for all: parsed once
        try:
            for index in indexes:
                if self.logs.get(topic.name, index) is None:
                    created.add(index)
                self.open_partition(topic.name, index, lead=lead, topic=topic, min_insync_replicas=min_insync_replicas)
        except OSError:
            self.close_opened(topic.name, indexes, created)
            raise
        return created

    def close_opened(self, name: str, indexes: range, created: set[int]) -> None:
        """Undo ``open_partitions``: stop serving the partitions and delete the logs it created."""
        for index in indexes:
            partition = self.partitions.pop((name, index), None)
            if partition is not None:
                partition.wake_waiters()
            if index not in created:
                continue
            try:
                self.logs.delete_partition(name, index)
            except OSError as error:
                log.error("Could not delete the half-created log of %s-%d (%s); it stays as a stray directory",
                          name, index, error)

    def open_partition(self, name: str, index: int, *, lead: bool = False, topic: TopicInfo | None = None,
                       min_insync_replicas: int | None = None) -> Partition:
        """The partition's log (created if missing); ``lead``: this broker leads it at once (a
        single node), else it waits for the controller's state. ``topic``: its topic, when not
        the one in the metadata (a single node opens a topic's logs before recording it)."""
        topic = topic if topic is not None else self.topics.get(name)
        partition_log = self.logs.get(name, index)
        on_disk = _topic_id_on_disk(partition_log.dir) if partition_log is not None else None
        if on_disk is not None and topic is not None and topic.topic_id.int != 0 and on_disk != topic.topic_id:
            log.warning("The log of %s-%d on disk belongs to an earlier topic of that name (deleted and "
                        "recreated while this broker was away); deleting it", name, index)
            self.logs.delete_partition(name, index)
            partition_log, on_disk = None, None
        if partition_log is None:
            partition_log = self.logs.create(name, index, self.log_config(topic))
        if topic is not None and on_disk is None:
            _write_partition_metadata(partition_log.dir, topic.topic_id)
        partition = Partition(
            name, index, partition_log, local_id=self.node_id, leader_id=self.node_id if lead else -1,
            lag_time_max_ms=self.config.replica_lag_time_max_ms,
            min_insync_replicas=(self._min_insync_replicas(topic) if min_insync_replicas is None
                                 else min_insync_replicas),
        )
        self.partitions[(name, index)] = partition
        self.moves.resume((name, index))  # a move a restart interrupted
        return partition

    def _min_insync_replicas(self, topic: TopicInfo | None) -> int:
        effective = self.config.effective_topic_config(topic.configs if topic else {})
        return int(effective.get("min.insync.replicas", self.config.min_insync_replicas))

    def warn_about_stray_logs(self) -> None:
        for partition_log in self.logs.all_logs():
            if (partition_log.topic, partition_log.partition) not in self.partitions:
                log.warning(
                    "Partition directory %s belongs to no known topic; it is left untouched and not served",
                    partition_log.dir,
                )

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

    # ---- topic changes (the single node applies its own) ---------------------------------------

    def drop_partitions(self, topic: TopicInfo) -> None:
        for index in range(topic.partitions):
            self.moves.cancel((topic.name, index))
            partition = self.partitions.pop((topic.name, index), None)
            if partition is not None:
                partition.wake_waiters()
            self.logs.delete_partition(topic.name, index)

    def refresh_topic_config(self, topic: TopicInfo) -> None:
        """Apply a topic's (possibly changed) config overrides to the logs hosted here."""
        config = None
        min_isr = self._min_insync_replicas(topic)
        for index in range(topic.partitions):
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                config = config or self.log_config(topic)
                partition.log.config = config
                partition.min_insync_replicas = min_isr

    # ---- partition states ----------------------------------------------------------------------

    async def apply_partition_state(self, state: "PartitionState") -> None:
        """The controller's state of a partition this broker hosts (or stopped hosting) changed:
        create the log if needed, lead or follow (replication/partition.py), start or stop the
        follower fetcher, then tell the leadership listeners. Called in order, once per change;
        returns promptly. States older than the one applied (leader epoch, then partition epoch)
        are ignored."""
        if self._apply(state):
            for listener in self._listeners:
                try:
                    listener.on_partition_state(state, self.node_id)
                except Exception:
                    log.exception("%s-%d: a leadership listener failed on %s; the state stays applied",
                                  state.topic, state.partition, state)

    def _apply(self, state: "PartitionState") -> bool:
        key = (state.topic, state.partition)
        partition = self.partitions.get(key)
        if self.node_id not in state.replicas:
            self.fetchers.remove_partition(key)
            if partition is not None and not partition.is_stale(state):
                partition.become_follower(state)
            return True
        if partition is None:
            if self.topics.get(state.topic) is None:
                log.warning("State for %s-%d of an unknown topic; ignored", state.topic, state.partition)
                return False
            partition = self.open_partition(state.topic, state.partition)
        if partition.is_stale(state):
            log.debug("Ignoring stale state %s", state)
            return False
        if partition.offline_dir is not None:
            log.warning("%s-%d: ignoring %s: its log directory %s failed", state.topic, state.partition, state,
                        partition.offline_dir)
            return False
        if state.leader == self.node_id:
            self.fetchers.remove_partition(key)
            partition.become_leader(state)
        else:
            partition.become_follower(state)
            if state.leader >= 0:
                self.fetchers.add_partition(key, state.leader)
            else:
                self.fetchers.remove_partition(key)
        return True

    async def remove_partition(self, topic: str, index: int) -> None:
        """This broker no longer hosts the partition (topic deleted or replica moved): stop
        serving it and delete its log."""
        self.fetchers.remove_partition((topic, index))
        self.moves.cancel((topic, index))
        partition = self.partitions.pop((topic, index), None)
        if partition is not None:
            partition.stop_serving()
        for listener in self._listeners:
            try:
                listener.on_partition_removed(topic, index)
            except Exception:
                log.exception("%s-%d: a leadership listener failed on its removal", topic, index)
        self.logs.delete_partition(topic, index)

    # ---- log directories (JBOD) ---------------------------------------------------------------

    def alter_replica_log_dir(self, topic: str, index: int, path: str) -> int:
        """AlterReplicaLogDirs for one partition: start moving its replica to the log directory
        ``path`` (replication/log_dirs.py). Returns Kafka's error code."""
        info = self.topics.get(topic)
        known = info is not None and 0 <= index < info.partitions

        def write_metadata(future_log) -> None:
            if info is not None:
                _write_partition_metadata(future_log.dir, info.topic_id)

        try:
            return log_dirs.alter_replica_log_dir(self.moves, (topic, index), path, known, write_metadata=write_metadata)
        except KafkaError as error:
            log.warning("Cannot move the replica of %s-%d to log directory %s: %s", topic, index, path, error.message)
            return error.code
        except OSError as error:
            log.error("Cannot create the future log of %s-%d in %s: %s", topic, index, path, error)
            return ErrorCode.KAFKA_STORAGE_ERROR

    def _on_log_dir_failure(self, log_dir, current: list[tuple[str, int]], futures: list[tuple[str, int]]) -> None:
        log_dirs.dir_failed(self.moves, log_dir, current, futures, self.fetchers.remove_partition)

    async def _stop_when_every_log_dir_failed(self) -> None:
        await self.logs.all_failed.wait()
        raise AllLogDirsFailed("every log directory has failed: " + "; ".join(
            f"{log_dir}: {log_dir.error}" for log_dir in self.logs.log_dirs))

    # ---- transaction markers -------------------------------------------------------------------

    async def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                committed: bool, partitions: list[tuple[str, int]], *,
                                transaction_version: int = 0, timeout_ms: int | None = None
                                ) -> dict[tuple[str, int], int]:
        """Append a COMMIT (``committed``) or ABORT marker of the producer to each partition as its
        leader and wait until it is replicated (acks=-1, up to ``timeout_ms``, by default the
        broker's request.timeout.ms). Returns Kafka's error code per partition: 0,
        UNKNOWN_TOPIC_OR_PARTITION (not hosted here), NOT_LEADER_OR_FOLLOWER,
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
        REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR. The transaction marker listeners then hear of the
        partitions written."""
        timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        marker = TxnMarker(committed, coordinator_epoch)
        results = await write_markers(self.partitions, self.topics, producer_id, producer_epoch, marker,
                                      partitions, transaction_version, timeout)
        done = [key for key, code in results.items() if code == 0]
        if done:
            for listener in self._marker_listeners:
                try:
                    listener.on_txn_markers_written(producer_id, done, committed)
                except Exception:
                    log.exception("A transaction marker listener failed for producer %d on %s", producer_id, done)
        return results

    # ---- ISR -----------------------------------------------------------------------------------

    def propose_isr(self, partition: Partition, new_isr: list[int]) -> None:
        """Send an ISR change to the controller in the background (one in flight per partition)."""
        if self.isr_client is None or self._nursery is None or partition.pending_isr is not None:
            return
        added = set(new_isr) - set(partition.isr)
        if added and not added <= set(self.brokers()):
            # Kafka's isReplicaIsrEligible: a follower that is not a live broker is not added, as
            # the controller would refuse it. Such a fetch is one the dead broker sent before it
            # died, parked here and read again when the partition's state changed.
            return
        partition.pending_isr = list(new_isr)
        self._nursery.start_soon(self._alter_isr, partition, list(new_isr))

    async def _alter_isr(self, partition: Partition, new_isr: list[int]) -> None:
        assert self.isr_client is not None
        try:
            log.info("%s: proposing ISR %s (was %s)", partition, new_isr, partition.isr)
            state = await self.isr_client.alter_partition(
                partition.topic, partition.index, partition.leader_epoch, partition.partition_epoch, new_isr
            )
            await self.apply_partition_state(state)
        except KafkaError as exc:
            log.info("%s: ISR change to %s refused: %s", partition, new_isr, exc)
        except Exception:
            log.exception("%s: ISR change to %s failed; the ISR check proposes it again", partition, new_isr)
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

    async def _run_isr_checks(self) -> None:
        interval = max(self.config.replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await trio.sleep(interval)
            try:
                self.check_isr()
            except Exception:
                log.exception("The ISR check failed; it runs again in %.2fs", interval)

    def node_endpoints(self, ids, listener: str | None = None) -> "list[NodeEndpoint] | None":
        """KIP-951 NodeEndpoints of these brokers (those this broker knows) on ``listener``."""
        from kafkacompat.wire.produce import NodeEndpoint

        infos = self.brokers()
        endpoints = [NodeEndpoint(i, *infos[i].address(listener), infos[i].rack) for i in sorted(ids) if i in infos]
        return endpoints or None

    # ---- background work -----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Fetchers, ISR checks and proposals, retention and checkpoints, until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.fetchers.start(nursery)
                self.moves.start(nursery)
                nursery.start_soon(self._stop_when_every_log_dir_failed)
                nursery.start_soon(self._run_isr_checks)
                nursery.start_soon(self._run_housekeeping)
                task_status.started()
        finally:
            self._nursery = None
            self.fetchers.stop()
            self.moves.stop()

    async def _run_housekeeping(self) -> None:
        config = self.config
        interval = config.log_retention_check_interval_ms / 1000
        checkpoint_interval = config.log_flush_offset_checkpoint_interval_ms / 1000
        next_checkpoint = trio.current_time() + checkpoint_interval
        producer_expiry_interval = config.producer_id_expiration_check_interval_ms / 1000
        next_producer_expiry = trio.current_time() + producer_expiry_interval
        while True:
            await trio.sleep(min(interval, checkpoint_interval, producer_expiry_interval))
            now_ms = int(time.time() * 1000)
            for partition in list(self.partitions.values()):
                if partition.offline_dir is not None:
                    continue
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
                try:
                    self.logs.checkpoint()
                except OSError:
                    log.exception("Writing the log checkpoints failed; will retry")
                next_checkpoint = trio.current_time() + checkpoint_interval

    def _expire_producers(self, now_ms: int) -> None:
        """Forget idempotent producers idle longer than producer.id.expiration.ms."""
        expiration_ms = self.config.producer_id_expiration_ms
        for partition in list(self.partitions.values()):
            if partition.offline_dir is not None:
                continue
            removed = partition.log.producer_state.remove_expired(now_ms, expiration_ms)
            if removed:
                log.info("Expired %d idle producer id(s) of %s (producer.id.expiration.ms=%d)",
                         removed, partition, expiration_ms)


def _topic_id_on_disk(partition_dir: Path) -> uuid.UUID | None:
    """The topic id in a partition directory's partition.metadata, if it has a readable one."""
    try:
        for line in read_small_file(os.path.join(partition_dir, PARTITION_METADATA)).splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return decode_topic_id(value.strip())
    except (OSError, ValueError):
        return None
    return None


def _write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID) -> None:
    """Kafka's partition.metadata file: the topic id a partition directory belongs to."""
    path = partition_dir / PARTITION_METADATA
    if path.exists():
        return
    partial = path.with_name(PARTITION_METADATA + ".tmp")  # never a half-written file under the real name
    try:
        partial.write_text(f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n")
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
