"""All partition logs of the broker's log directories (log.dirs, JBOD): loading, creating,
deleting, flushing, checkpoints, clean shutdown, moving a replica to another directory, and
taking a failed directory offline.

Each directory is laid out as Kafka's log.dirs entry: ``<topic>-<partition>/`` per partition,
``<topic>-<partition>.<id>-future/`` for a replica being moved there (AlterReplicaLogDirs), the
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` files of its own logs,
and the ``.kafka_cleanshutdown`` marker written by a clean shutdown. A new partition goes to the
online directory holding the fewest logs (Kafka's LogManager.nextLogDirs).

An I/O error in a directory (an append, a read, a flush or a checkpoint failing) takes it offline
with its logs (Kafka's LogDirFailureChannel): ``fail_dir`` closes them and tells the failure
listeners (the ReplicaManager), and the other directories keep serving. When none is left,
``all_failed`` is set and the broker stops, as Kafka halts.

Flushing (Kafka's flush.messages, flush.ms and log.flush.scheduler.interval.ms): by default nothing
is fsynced before a clean shutdown, as in Kafka (durability comes from replication). ``run_flusher``
fsyncs, in a worker thread, a log whose append reached flush.messages unflushed messages at once,
and every log.flush.scheduler.interval.ms the logs whose last flush is flush.ms old; each flush
moves the log's recovery point, which the next checkpoint records.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

import trio

from kafkacompat.config import StartupError
from kafkacompat.log.checkpoint import TopicPartition, fsync_directory, read_checkpoint, write_checkpoint
from kafkacompat.log.config import LogConfig
from kafkacompat.log.filecache import FileCache
from kafkacompat.log.partition_log import PartitionLog
from kafkacompat.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from kafkacompat.log.segment import LogSegment
from kafkacompat.log.segment import now_ms as wall_clock_ms
from kafkacompat.wire.errors import ErrorCode, KafkaError

logger = logging.getLogger("kafkacompat.log")
T = TypeVar("T")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
_NOTHING_TO_RECOVER = sys.maxsize  # recovery point after a clean shutdown: trust every segment


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) from ``<topic>-<partition>``; topics may contain '-', so split at the last."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def parse_future_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) from ``<topic>-<partition>.<unique id>-future`` (Kafka's future log)."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    base, dot, unique_id = name[:-len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or not unique_id.isalnum():
        return None
    return parse_partition_dir_name(base)


class DuplicateLogError(StartupError):
    """The same partition's log (current or future) in two directories at start."""


class AllLogDirsFailed(Exception):
    """Every log directory has failed: the broker stops (Kafka halts)."""


@dataclass
class LogDir:
    """One entry of log.dirs: its absolute path (as Kafka reports it), and whether it is online."""

    path: Path
    online: bool = True
    error: str = ""

    def __str__(self) -> str:
        return str(self.path)


# A failure listener: (the failed dir, partitions whose current log was there, partitions whose
# future log was there).
FailureListener = Callable[[LogDir, list[TopicPartition], list[TopicPartition]], None]


class LogManager:
    """Owns the PartitionLogs of the log directories and the FileCache they share."""

    def __init__(self, data_dirs: Path | str | Sequence[Path | str], *, file_cache: FileCache | None = None,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        paths = [data_dirs] if isinstance(data_dirs, (str, os.PathLike)) else list(data_dirs)
        self.log_dirs = [LogDir(Path(os.path.abspath(path))) for path in paths]
        self.data_dir = Path(paths[0])  # the first: the broker's own files live there too
        for log_dir in self.log_dirs:
            try:
                log_dir.path.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                self._mark_offline_at_start(log_dir, error)
        self._files = file_cache if file_cache is not None else FileCache()
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._futures: dict[TopicPartition, PartitionLog] = {}  # replicas being moved (AlterReplicaLogDirs)
        self.preferred_dirs: dict[TopicPartition, LogDir] = {}  # where a partition not created yet goes
        self.failure_listeners: list[FailureListener] = []
        self.all_failed = trio.Event()
        self.had_clean_shutdown: bool | None = None  # known after load_all()
        self.producer_id_expiration_ms = producer_id_expiration_ms  # broker config, for producer state
        self._flush_queue: dict[TopicPartition, PartitionLog] = {}  # flush.messages reached
        self._flush_queued: trio.Event | None = None  # run_flusher's: set when a log is queued
        # Logs per directory, for placing new ones: counted once, then kept up to date by create()
        # and recounted after any other change (counting every time made creating N logs O(N^2)).
        self._log_counts: dict[Path, int] | None = None

    def load_all(self, config_for: Callable[[str], LogConfig]) -> dict[TopicPartition, PartitionLog]:
        """Load every online directory (``_load_dir``); one that cannot be read goes offline, as
        Kafka starts without it; a partition found in two directories refuses the start."""
        self._log_counts = None
        clean = True
        for log_dir in self.log_dirs:
            if not log_dir.online:
                continue
            try:
                clean &= self._load_dir(log_dir, config_for)
            except OSError as error:
                self._mark_offline_at_start(log_dir, error)
        self._check_some_dir_online()
        self.had_clean_shutdown = clean
        return dict(self._logs)

    def _load_dir(self, log_dir: LogDir, config_for: Callable[[str], LogConfig]) -> bool:
        """Open every partition directory of ``log_dir``; recover after an unclean shutdown; then
        drop the marker. Returns whether the directory had a clean shutdown."""
        data_dir = log_dir.path
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint_or_nothing(data_dir, RECOVERY_POINT_CHECKPOINT)
        log_start_offsets = self._read_checkpoint_or_nothing(data_dir, LOG_START_OFFSET_CHECKPOINT)
        with os.scandir(data_dir) as listing:
            names = sorted(entry.name for entry in listing if entry.is_dir())
        progress = _LoadProgress(data_dir, len(names), clean)
        configs: dict[str, LogConfig] = {}  # per topic: parsing one is costly, 10,000 partitions share 100
        loaded = recovered = segments = 0
        with WorkerFsyncs() as fsyncs:
            for name in names:
                progress.next(name)
                entry = data_dir / name
                if name.endswith(DELETE_DIR_SUFFIX):
                    logger.info("Finishing the deletion of %s", name)
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                key = parse_partition_dir_name(name)
                logs = self._logs
                if key is None:
                    key, logs = parse_future_dir_name(name), self._futures
                    if key is None:
                        continue
                if key in logs:
                    raise _duplicate(key, logs[key].dir, entry)
                topic, partition = key
                config = configs.get(topic)
                if config is None:
                    config = configs[topic] = config_for(topic)
                logs[key] = self._managed(PartitionLog.open(
                    entry, topic, partition, config,
                    recovery_point=_NOTHING_TO_RECOVER if clean else recovery_points.get(key, 0),
                    file_cache=self._files,
                    log_start_offset=log_start_offsets.get(key),
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                    clean_shutdown=clean,
                    defer_fsync=fsyncs.submit_segment,
                ))
                loaded += 1
                if logs[key].recovered_segments:
                    recovered, segments = recovered + 1, segments + logs[key].recovered_segments
            fsyncs.wait()  # the recovered segments are on disk before any checkpoint says so
        if clean:
            # Durably gone before anything is appended: a crash from here on must be recovered.
            marker.unlink(missing_ok=True)
            fsync_directory(data_dir)
        if not loaded and not clean:
            logger.info("Starting with no partition logs in %s", data_dir)
        else:
            logger.info("Loaded %d partition logs from %s after %s shutdown in %.1f s%s", loaded,
                        data_dir, "a clean" if clean else "an unclean", progress.elapsed(),
                        f"; recovered {recovered} of them (validated {segments} segments past their recovery "
                        f"points)" if recovered else "")
        return clean

    def _mark_offline_at_start(self, log_dir: LogDir, error: OSError) -> None:
        log_dir.online, log_dir.error = False, str(error)
        logger.error("Log directory %s is offline: it cannot be used (%s). The broker serves from its other "
                     "log directories; fix or replace the disk and restart the broker to bring it back",
                     log_dir, error)

    def _check_some_dir_online(self) -> None:
        if not self.online_dirs():
            raise StartupError("no log directory can be used: " + "; ".join(
                f"{log_dir}: {log_dir.error}" for log_dir in self.log_dirs))

    @staticmethod
    def _read_checkpoint_or_nothing(data_dir: Path, name: str) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(data_dir / name)
        except (ValueError, OSError) as error:
            logger.warning("Ignoring unreadable checkpoint %s (logs will be recovered from the start): %s",
                           data_dir / name, error)
            return {}

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def create(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """The partition's log, created empty if it does not exist yet: in the directory an
        AlterReplicaLogDirs chose for it, else the online one holding the fewest logs."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            return existing
        log_dir = self._dir_for_new_log((topic, partition))
        log = self._open_new(log_dir.path / f"{topic}-{partition}", topic, partition, config)
        self._logs[(topic, partition)] = log
        if self._log_counts is not None:
            self._log_counts[log_dir.path] = self._log_counts.get(log_dir.path, 0) + 1
        return log

    def _open_new(self, directory: Path, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        return self._managed(PartitionLog.open(directory, topic, partition, config, file_cache=self._files,
                                               producer_id_expiration_ms=self.producer_id_expiration_ms))

    def _dir_for_new_log(self, key: TopicPartition) -> LogDir:
        preferred = self.preferred_dirs.pop(key, None)
        if preferred is not None and preferred.online:
            return preferred
        online = self.online_dirs()
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log directory of this broker is offline")
        if len(online) == 1:
            return online[0]
        counts = self._log_counts
        if counts is None:
            counts = self._log_counts = {}
            for log in self._all_logs():
                counts[log.dir.parent] = counts.get(log.dir.parent, 0) + 1
        return min(online, key=lambda log_dir: counts.get(log_dir.path, 0))  # ties: the first in log.dirs

    # -- directories ---------------------------------------------------------------------------

    def online_dirs(self) -> list[LogDir]:
        return [log_dir for log_dir in self.log_dirs if log_dir.online]

    def find_dir(self, path: str) -> LogDir | None:
        """The log.dirs entry at ``path`` (an absolute path, as Kafka compares them)."""
        for log_dir in self.log_dirs:
            if str(log_dir.path) == path:
                return log_dir
        return None

    def dir_of(self, log: PartitionLog) -> LogDir | None:
        for log_dir in self.log_dirs:
            if log_dir.path == log.dir.parent:
                return log_dir
        return None

    def logs_in(self, log_dir: LogDir) -> tuple[dict[TopicPartition, PartitionLog], dict[TopicPartition, PartitionLog]]:
        """The current and the future logs in ``log_dir``."""
        def inside(logs: dict[TopicPartition, PartitionLog]) -> dict[TopicPartition, PartitionLog]:
            return {key: log for key, log in logs.items() if log.dir.parent == log_dir.path}
        return inside(self._logs), inside(self._futures)

    def _all_logs(self) -> Iterable[PartitionLog]:
        yield from self._logs.values()
        yield from self._futures.values()

    def fail_dir(self, log_dir: LogDir, reason: str, error: BaseException | None = None) -> None:
        """Take ``log_dir`` offline after an I/O error there (Kafka's LogDirFailureChannel and
        handleLogDirFailure): close its logs, tell the failure listeners; once no directory is
        left, set ``all_failed``."""
        if not log_dir.online:
            return
        self._log_counts = None
        log_dir.online, log_dir.error = False, f"{reason}: {error}" if error is not None else reason
        current, futures = self.logs_in(log_dir)
        for key in current:
            self._flush_queue.pop(key, None)
            del self._logs[key]
        for key in futures:
            del self._futures[key]
        for log in [*current.values(), *futures.values()]:
            _close_quietly(log)
            _settle_pending_flush(log)  # their acknowledgements answer KAFKA_STORAGE_ERROR
        logger.error(
            "Log directory %s is offline after an I/O error (%s); its partitions %s are offline here and answer "
            "KAFKA_STORAGE_ERROR, the broker keeps serving from its other log directories. Check the disk, fix "
            "or replace it, then restart the broker: the partitions are recovered or replicated again",
            log_dir, log_dir.error, ", ".join(f"{t}-{p}" for t, p in sorted(current)) or "(none)")
        for listener in self.failure_listeners:
            try:
                listener(log_dir, sorted(current), sorted(futures))
            except Exception:
                logger.exception("A log directory failure listener failed for %s", log_dir)
        if not self.online_dirs():
            logger.critical("Every log directory has failed (%s): stopping the broker, as Kafka does",
                            ", ".join(map(str, self.log_dirs)))
            self.all_failed.set()

    def _io_error(self, log: PartitionLog, reason: str, error: OSError) -> None:
        """A log's I/O failed (PartitionLog.on_io_error): its directory goes offline, unless the
        disk is only full (see ``disk_full``)."""
        log_dir = self.dir_of(log)
        if log_dir is not None and self._owns(log) and not disk_full(error):
            self.fail_dir(log_dir, f"{reason} {log.name} in {log_dir}", error)

    def _owns(self, log: PartitionLog) -> bool:
        key = (log.topic, log.partition)
        return self._logs.get(key) is log or self._futures.get(key) is log

    # -- moving a replica between directories (AlterReplicaLogDirs) -----------------------------

    def future_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.get((topic, partition))

    def future_logs(self) -> dict[TopicPartition, PartitionLog]:
        return dict(self._futures)

    def create_future(self, topic: str, partition: int, config: LogConfig, log_dir: LogDir) -> PartitionLog:
        """An empty ``<topic>-<partition>.<id>-future`` log in ``log_dir``, to copy the current one into."""
        self._log_counts = None
        name = f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
        log = self._open_new(log_dir.path / name, topic, partition, config)
        self._futures[(topic, partition)] = log
        return log

    def delete_future(self, topic: str, partition: int) -> None:
        self._log_counts = None
        log = self._futures.pop((topic, partition), None)
        if log is not None:
            self._remove_log_dir(log)

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        """The future log becomes the current one (Kafka's replaceCurrentWithFutureLog): renamed
        to ``<topic>-<partition>`` in its directory, then the old current log renamed
        ``-delete`` and removed. Call when both end at the same offset, between two awaits."""
        self._log_counts = None
        key = (topic, partition)
        future, current = self._futures.pop(key), self._logs.pop(key)
        future.close()
        final = future.dir.with_name(f"{topic}-{partition}")
        os.rename(future.dir, final)
        fsync_directory(final.parent)
        log = self._managed(PartitionLog.open(
            final, topic, partition, future.config, recovery_point=future.recovery_point, file_cache=self._files,
            log_start_offset=future.log_start_offset, producer_id_expiration_ms=self.producer_id_expiration_ms))
        self._logs[key] = log
        self._flush_queue.pop(key, None)
        if current.pending_flush is not None:
            current.flush()  # those appends' acknowledgements wait for the current log's recovery point
        _settle_pending_flush(current)
        self._remove_log_dir(current)
        return log

    def _remove_log_dir(self, log: PartitionLog) -> None:
        log.close(snapshot=False)
        if log.dir.exists():
            self._remove_stray(log.dir)

    def _managed(self, log: PartitionLog) -> PartitionLog:
        log.on_flush_due = self._queue_flush
        log.on_io_error = self._io_error
        return log

    def delete_partition(self, topic: str, partition: int) -> None:
        """Close the log, rename its directory to ``<name>.<uuid>-delete`` (as Kafka), then remove
        it; a future log of the partition goes too."""
        self._log_counts = None
        self.delete_future(topic, partition)
        self.preferred_dirs.pop((topic, partition), None)
        log = self._logs.pop((topic, partition), None)
        if log is None:
            for log_dir in self.online_dirs():
                stray = log_dir.path / f"{topic}-{partition}"
                if stray.exists():
                    self._remove_stray(stray)
            return
        self._remove_log_dir(log)
        logger.info("Deleted the log of %s-%d", topic, partition)

    @staticmethod
    def _remove_stray(directory: Path) -> None:
        """Rename to ``<name>.<uuid>-delete`` (a crash leaves it for the next start), then remove."""
        doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.rename(directory, doomed)
        fsync_directory(directory.parent)
        shutil.rmtree(doomed, ignore_errors=True)

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def logs_to_clean(self) -> list[PartitionLog]:
        """The current logs the cleaner may compact: not those being moved to another directory
        (Kafka pauses their cleaning until the move is done)."""
        return [log for key, log in self._logs.items() if key not in self._futures]

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
        return [log for log in self._all_logs() if log.flush_due_by_time(now_ms)]

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
                if self._owns(log):
                    await self._flush_in_worker_thread(log)
                if done is not None:
                    done.set()

    async def _flush_in_worker_thread(self, log: PartitionLog) -> None:
        try:
            flushed_to = await trio.to_thread.run_sync(log.fsync_unflushed)
        except OSError as error:
            logger.error("Could not fsync the log of %s in %s: %s", log.name, log.dir.parent, error)
            self._io_error(log, "fsyncing the log of", error)  # Kafka: an offline log dir
            return
        log.mark_flushed(flushed_to)

    # -- checkpoints -------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write each online directory's checkpoints; one that cannot be written goes offline
        (Kafka: "Disk error while writing recovery offsets checkpoint")."""
        for log_dir in self.online_dirs():
            current, futures = self.logs_in(log_dir)
            logs = {**current, **futures}  # in different directories: a key is in one of them
            try:
                write_checkpoint(log_dir.path / RECOVERY_POINT_CHECKPOINT,
                                 {key: log.recovery_point for key, log in logs.items()})
                write_checkpoint(log_dir.path / LOG_START_OFFSET_CHECKPOINT,
                                 {key: log.log_start_offset for key, log in logs.items()})
            except OSError as error:
                if disk_full(error):
                    logger.error("Could not write the offset checkpoints in %s (will retry): %s", log_dir, error)
                    continue
                self.fail_dir(log_dir, f"writing the offset checkpoints in {log_dir}", error)

    def checkpoint_log_start_offsets(self, advanced: Mapping[TopicPartition, int] | None = None) -> None:
        """Write log-start-offset-checkpoint now, with the log start offsets in ``advanced``
        instead of the logs' own. DeleteRecords writes the offsets it is about to set before
        setting them: the periodic checkpoint may be stale after a crash, and a segment's base
        offset only bounds the log start from below, so deleted records would come back; and a
        checkpoint that cannot be written (a full disk) leaves the logs untouched."""
        for log_dir in self.online_dirs():
            current, futures = self.logs_in(log_dir)
            offsets = {key: log.log_start_offset for key, log in {**current, **futures}.items()}
            for key, offset in (advanced or {}).items():
                if key in current:
                    offsets[key] = max(offsets[key], offset)
            write_checkpoint(log_dir.path / LOG_START_OFFSET_CHECKPOINT, offsets)

    def close(self) -> None:
        """Clean shutdown: flush every log (the fsyncs in worker threads), checkpoint, close,
        then write the clean-shutdown marker of each online directory whose logs all closed with
        their producer state written (a start after the marker trusts those snapshots)."""
        logs = list(self._all_logs())
        with WorkerFsyncs() as fsyncs:
            flushed = [(log, fsyncs.submit(log.fsync_unflushed)) for log in logs]
            fsyncs.wait()
        for log, done in flushed:
            log.mark_flushed(done.result())
        self.checkpoint()
        unclean_dirs = {log.dir.parent for log in logs if not log.close()}
        for log_dir in self.online_dirs():
            if log_dir.path in unclean_dirs:
                logger.error("No clean-shutdown marker in %s: a producer snapshot could not be written there (see "
                             "above), so the next start recovers its logs and replays their producer state",
                             log_dir)
                continue
            marker = log_dir.path / CLEAN_SHUTDOWN_FILE
            with open(marker, "w", encoding="utf-8") as file:
                file.write('{"version":0,"brokerEpoch":-1}')
                file.flush()
                os.fsync(file.fileno())
            fsync_directory(log_dir.path)
        self._logs.clear()
        self._futures.clear()
        self._log_counts = None
        self._files.close()


def disk_full(error: OSError) -> bool:
    """A full disk (or quota) is not a failed one: unlike Kafka, which takes the directory offline,
    writes are refused with KAFKA_STORAGE_ERROR until space returns, without a restart."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


def _duplicate(key: TopicPartition, first: Path, second: Path) -> DuplicateLogError:
    topic, partition = key
    return DuplicateLogError(
        f"the log of {topic}-{partition} is in two log directories: {first} and {second}. A log directory "
        f"probably failed while the broker was moving this replica between directories; delete one of the two "
        f"(preferably the one in the directory that failed recently) and start the broker again")


def _settle_pending_flush(log: PartitionLog) -> None:
    done, log.pending_flush = log.pending_flush, None
    if done is not None:
        done.set()


def _close_quietly(log: PartitionLog) -> None:
    try:
        log.close(snapshot=False)
    except OSError as error:
        logger.debug("Closing %s in a failed log directory: %s", log.name, error)


FSYNC_THREADS = 8  # fsyncs in flight at once at load and shutdown: a disk serves several together


class WorkerFsyncs:
    """fsyncs run in worker threads (fsync releases the GIL) while the caller carries on; used
    as a context manager that waits for its threads. ``wait`` raises the first failure once all
    have finished."""

    def __init__(self, threads: int = FSYNC_THREADS) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kafkacompat-fsync")
        self._pending: list[Future] = []

    def submit(self, function: Callable[[], T]) -> "Future[T]":
        future = self._pool.submit(function)
        self._pending.append(future)
        return future

    def submit_segment(self, segment: LogSegment) -> None:
        self.submit(segment.fsync)

    def wait(self) -> None:
        pending, self._pending = self._pending, []
        wait_for_futures(pending)
        for future in pending:
            future.result()

    def __enter__(self) -> "WorkerFsyncs":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._pool.shutdown(wait=True)


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
