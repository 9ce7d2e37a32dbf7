"""All partition logs of one data directory: loading, creating, deleting, flushing, checkpoints,
clean shutdown.

The directory is laid out as Kafka's log.dirs entry: ``<topic>-<partition>/`` per partition, the
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` files, and the
``.kafka_cleanshutdown`` marker written by a clean shutdown.

Flushing (Kafka's flush.messages, flush.ms and log.flush.scheduler.interval.ms): by default nothing
is fsynced before a clean shutdown, as in Kafka (durability comes from replication). ``run_flusher``
fsyncs, in a worker thread, a log whose append reached flush.messages unflushed messages at once,
and every log.flush.scheduler.interval.ms the logs whose last flush is flush.ms old; each flush
moves the log's recovery point, which the next checkpoint records.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping

import trio

from kafkacompat.log.checkpoint import TopicPartition, fsync_directory, read_checkpoint, write_checkpoint
from kafkacompat.log.config import LogConfig
from kafkacompat.log.filecache import FileCache
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from kafkacompat.log.segment import now_ms as wall_clock_ms

logger = logging.getLogger("kafkacompat.log")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
_NOTHING_TO_RECOVER = sys.maxsize  # recovery point after a clean shutdown: trust every segment


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) from ``<topic>-<partition>``; topics may contain '-', so split at the last."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    """Owns the PartitionLogs of one data directory and the FileCache they share."""

    def __init__(self, data_dir: Path, *, file_cache: FileCache | None = None,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._files = file_cache if file_cache is not None else FileCache()
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self.had_clean_shutdown: bool | None = None  # known after load_all()
        self.producer_id_expiration_ms = producer_id_expiration_ms  # broker config, for producer state
        self._flush_queue: dict[TopicPartition, PartitionLog] = {}  # flush.messages reached
        self._flush_queued: trio.Event | None = None  # run_flusher's: set when a log is queued

    def load_all(self, config_for: Callable[[str], LogConfig]) -> dict[TopicPartition, PartitionLog]:
        """Open every partition directory; recover after an unclean shutdown; then drop the marker."""
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint_or_nothing(RECOVERY_POINT_CHECKPOINT)
        log_start_offsets = self._read_checkpoint_or_nothing(LOG_START_OFFSET_CHECKPOINT)
        entries = sorted(entry for entry in self.data_dir.iterdir() if entry.is_dir())
        progress = _LoadProgress(self.data_dir, len(entries), clean)
        for entry in entries:
            progress.next(entry.name)
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                logger.info("Finishing the deletion of %s", entry.name)
                shutil.rmtree(entry, ignore_errors=True)
                continue
            key = parse_partition_dir_name(entry.name)
            if key is None or key in self._logs:
                continue
            topic, partition = key
            self._logs[key] = self._managed(PartitionLog.open(
                entry, topic, partition, config_for(topic),
                recovery_point=_NOTHING_TO_RECOVER if clean else recovery_points.get(key, 0),
                file_cache=self._files,
                log_start_offset=log_start_offsets.get(key),
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            ))
        marker.unlink(missing_ok=True)
        self.had_clean_shutdown = clean
        if not self._logs and not clean:
            logger.info("Starting with no partition logs in %s", self.data_dir)
        else:
            logger.info("Loaded %d partition logs from %s after %s shutdown in %.1f s", len(self._logs),
                        self.data_dir, "a clean" if clean else "an unclean", progress.elapsed())
        return dict(self._logs)

    def _read_checkpoint_or_nothing(self, name: str) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(self.data_dir / name)
        except (ValueError, OSError) as error:
            logger.warning("Ignoring unreadable checkpoint %s (logs will be recovered from the start): %s",
                           name, error)
            return {}

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def create(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """The partition's log, created empty if it does not exist yet."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            return existing
        log = PartitionLog.open(self.data_dir / f"{topic}-{partition}", topic, partition, config,
                                file_cache=self._files, producer_id_expiration_ms=self.producer_id_expiration_ms)
        self._logs[(topic, partition)] = self._managed(log)
        return log

    def _managed(self, log: PartitionLog) -> PartitionLog:
        log.on_flush_due = self._queue_flush
        return log

    def delete_partition(self, topic: str, partition: int) -> None:
        """Close the log, rename its directory to ``<name>.<uuid>-delete`` (as Kafka), then remove it."""
        log = self._logs.pop((topic, partition), None)
        directory = log.dir if log is not None else self.data_dir / f"{topic}-{partition}"
        if log is not None:
            log.close(snapshot=False)
        if not directory.exists():
            return
        doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.rename(directory, doomed)
        fsync_directory(self.data_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        logger.info("Deleted the log of %s-%d", topic, partition)

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def apply_retention(self, now_ms: int) -> int:
        """Run retention on every log; returns the number of segments deleted."""
        return sum(log.apply_retention(now_ms) for log in self._logs.values())

    # -- flushing --------------------------------------------------------------------------------

    def _queue_flush(self, log: PartitionLog) -> None:
        """flush.messages reached (called on the event loop by the append): the flusher takes it."""
        self._flush_queue[(log.topic, log.partition)] = log
        if log.pending_flush is None:
            log.pending_flush = trio.Event()
        if self._flush_queued is not None:
            self._flush_queued.set()

    def flush_due(self, now_ms: int) -> list[PartitionLog]:
        """The logs whose flush.ms has passed since their last flush (Kafka's flushDirtyLogs)."""
        return [log for log in self._logs.values() if log.flush_due_by_time(now_ms)]

    async def run_flusher(self, scheduler_interval_ms: int) -> None:
        """The broker's flush task: queued logs at once, ``flush_due`` logs every
        ``scheduler_interval_ms`` (log.flush.scheduler.interval.ms; Long.MAX_VALUE: never)."""
        interval = scheduler_interval_ms / 1000
        next_check = trio.current_time() + interval
        while True:
            if not self._flush_queue:
                self._flush_queued = trio.Event()
                with trio.move_on_at(next_check):
                    await self._flush_queued.wait()
            due = dict(self._flush_queue)
            self._flush_queue.clear()
            if trio.current_time() >= next_check:
                due.update(((log.topic, log.partition), log) for log in self.flush_due(wall_clock_ms()))
                next_check = trio.current_time() + interval
            for key, log in due.items():
                # Appends from here on wait for the next round: this fsync may start before them.
                done, log.pending_flush = log.pending_flush, None
                if self._logs.get(key) is log:
                    await self._flush_in_worker_thread(log)
                if done is not None:
                    done.set()

    @staticmethod
    async def _flush_in_worker_thread(log: PartitionLog) -> None:
        try:
            flushed_to = await trio.to_thread.run_sync(log.fsync_unflushed)
        except OSError as error:
            logger.error("Could not fsync the log of %s (will retry at its next flush): %s", log.name, error)
            return
        log.mark_flushed(flushed_to)

    # -- checkpoints -------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        write_checkpoint(self.data_dir / RECOVERY_POINT_CHECKPOINT,
                         {key: log.recovery_point for key, log in self._logs.items()})
        self.checkpoint_log_start_offsets()

    def checkpoint_log_start_offsets(self, advanced: Mapping[TopicPartition, int] | None = None) -> None:
        """Write log-start-offset-checkpoint now, with the log start offsets in ``advanced``
        instead of the logs' own. DeleteRecords writes the offsets it is about to set before
        setting them: the periodic checkpoint may be stale after a crash, and a segment's base
        offset only bounds the log start from below, so deleted records would come back; and a
        checkpoint that cannot be written (a full disk) leaves the logs untouched."""
        offsets = {key: log.log_start_offset for key, log in self._logs.items()}
        for key, offset in (advanced or {}).items():
            if key in offsets:
                offsets[key] = max(offsets[key], offset)
        write_checkpoint(self.data_dir / LOG_START_OFFSET_CHECKPOINT, offsets)

    def close(self) -> None:
        """Clean shutdown: flush every log, checkpoint, close, then write the clean-shutdown marker."""
        for log in self._logs.values():
            log.flush()
        self.checkpoint()
        for log in self._logs.values():
            log.close()
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        with open(marker, "w", encoding="utf-8") as file:
            file.write('{"version":0,"brokerEpoch":-1}')
            file.flush()
            os.fsync(file.fileno())
        fsync_directory(self.data_dir)
        self._logs.clear()
        self._files.close()


PROGRESS_INTERVAL_S = 2.0


class _LoadProgress:
    """A progress line every PROGRESS_INTERVAL_S while a large data dir loads (recovery after an
    unclean shutdown re-reads every batch after the recovery point), so a long start is not silent."""

    def __init__(self, data_dir: Path, total: int, clean: bool) -> None:
        self.data_dir = data_dir
        self.total = total
        self.action = "loading" if clean else "recovering"
        self.started = self.last = time.monotonic()
        self.done = 0

    def next(self, name: str) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            logger.info("Loading partition logs from %s: %d of %d (%d%%) after %.0f s; %s %s", self.data_dir,
                        self.done, self.total, 100 * self.done // max(self.total, 1), now - self.started,
                        self.action, name)
        self.done += 1

    def elapsed(self) -> float:
        return time.monotonic() - self.started
