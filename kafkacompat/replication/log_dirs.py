"""The replicas' side of several log directories: moving a replica to another directory of this
broker (Kafka's ReplicaManager.alterReplicaLogDirs and ReplicaAlterLogDirsThread), and taking the
partitions of a failed directory offline (Kafka's ReplicaManager.handleLogDirFailure).

A move creates ``<topic>-<partition>.<id>-future`` in the destination (LogManager.create_future)
and copies the current log into it batch by batch, byte for byte, while the current log keeps
serving produce and fetch. Once the future log ends where the current one does, it replaces the
current log between two awaits (LogManager.replace_current_with_future), so no append falls in
between: nothing acknowledged is lost and reads stay in order. A future log found at start (a
move a restart interrupted) is resumed when its partition opens.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import trio

from kafkacompat.replication.fetcher import replica_batches
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.log import LogManager, PartitionLog
    from kafkacompat.log.manager import LogDir
    from kafkacompat.replication.partition import Partition

log = logging.getLogger("kafkacompat.replication")

TopicPartition = tuple[str, int]
IDLE_POLL_S = 0.05
THROTTLE_RECHECK_S = 0.2  # a caught-up mover waits this long (or for an append) before looking again


class LogDirMoves:
    """The moves in progress (one task per partition, in the ReplicaManager's nursery)."""

    def __init__(self, logs: "LogManager", partitions: "dict[TopicPartition, Partition]",
                 fetch_max_bytes: Callable[[], int], max_bytes_per_second: Callable[[], int],
                 on_moved: Callable[[TopicPartition], None] | None = None) -> None:
        """``fetch_max_bytes``: bytes copied per step (replica.fetch.max.bytes);
        ``max_bytes_per_second``: the throttle (replica.alter.log.dirs.io.max.bytes.per.second),
        read again while a move waits, so a change applies at once."""
        self.logs = logs
        self.partitions = partitions
        self.fetch_max_bytes = fetch_max_bytes
        self.max_bytes_per_second = max_bytes_per_second
        self.on_moved = on_moved
        self._nursery: trio.Nursery | None = None
        self._moving: dict[TopicPartition, trio.CancelScope | None] = {}  # None: waiting for start()

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        for key, scope in list(self._moving.items()):
            if scope is None:
                self._spawn(key)

    def stop(self) -> None:
        self._nursery = None

    def is_moving(self, key: TopicPartition) -> bool:
        return key in self._moving

    def resume(self, key: TopicPartition) -> None:
        """Start (or restart) copying into the partition's future log, if it has one."""
        if self.logs.future_log(*key) is None or key in self._moving:
            return
        self._moving[key] = None
        if self._nursery is not None:
            self._spawn(key)

    def cancel(self, key: TopicPartition) -> None:
        scope = self._moving.pop(key, None)
        if scope is not None:
            scope.cancel()

    def _spawn(self, key: TopicPartition) -> None:
        assert self._nursery is not None
        scope = trio.CancelScope()
        self._moving[key] = scope
        self._nursery.start_soon(self._run, key, scope)

    async def _run(self, key: TopicPartition, scope: trio.CancelScope) -> None:
        with scope:
            try:
                await self._copy_until_swapped(key)
            except (OSError, KafkaError) as error:
                log.error("Moving %s-%d to another log directory stopped: %s; AlterReplicaLogDirs starts it again",
                          *key, error)
            except Exception:
                log.exception("Moving %s-%d to another log directory failed", *key)
        if self._moving.get(key) is scope:
            del self._moving[key]

    async def _copy_until_swapped(self, key: TopicPartition) -> None:
        last_copied = None  # (base offset, crc) of the last batch copied: a truncated-and-refilled current log differs
        while True:
            partition = self.partitions.get(key)
            future = self.logs.future_log(*key)
            if partition is None or future is None or partition.offline_dir is not None:
                return
            current = partition.log
            if last_copied is None or _diverged(current, last_copied) or future.log_end_offset > current.log_end_offset:
                last_copied = _align(future, current, last_copied is None)
            elif future.log_start_offset < current.log_start_offset:
                future.advance_log_start_offset(current.log_start_offset)
            if future.log_end_offset == current.log_end_offset:
                self._swap(partition, key)
                return
            try:
                read = current.read(future.log_end_offset, self.fetch_max_bytes(), min_one_batch=True)
            except KafkaError as error:
                if error.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                last_copied = None  # retention or DeleteRecords moved the current log's start: align again
                continue
            try:
                data = await trio.to_thread.run_sync(read.read_all)
            finally:
                read.close()
            if partition.log is not current or self.logs.future_log(*key) is not future:
                continue  # the log was replaced or the move cancelled while reading
            view, headers = replica_batches(memoryview(data))
            if not headers:
                await _wait_for_append(partition)
                continue
            if headers[0].base_offset < future.log_end_offset or current.log_end_offset < headers[-1].next_offset:
                last_copied = None  # the current log changed under the read: align again
                continue
            future.append(view, headers, assign_offsets=False)
            last_copied = (headers[-1].base_offset, headers[-1].crc)
            await self._throttle(len(view))

    async def _throttle(self, copied: int) -> None:
        """Wait until ``copied`` bytes fit the throttle (Kafka's quota on the alter-log-dirs
        thread); a raised (or removed) limit ends the wait at its next look."""
        started = trio.current_time()
        while True:
            remaining = started + copied / self.max_bytes_per_second() - trio.current_time()
            if remaining <= 0:
                await trio.sleep(0)
                return
            await trio.sleep(min(remaining, THROTTLE_RECHECK_S))

    def _swap(self, partition: "Partition", key: TopicPartition) -> None:
        old_dir = partition.log.dir.parent
        new_log = self.logs.replace_current_with_future(*key)
        partition.replace_log(new_log)
        log.info("Moved the replica of %s from log directory %s to %s (offsets %d to %d)", partition, old_dir,
                 new_log.dir.parent, new_log.log_start_offset, new_log.log_end_offset)
        if self.on_moved is not None:
            self.on_moved(key)


def _diverged(current: "PartitionLog", last_copied: tuple[int, int]) -> bool:
    base_offset, crc = last_copied
    if base_offset < current.log_start_offset:
        return False  # retention or DeleteRecords moved past it: the log start is aligned instead
    if base_offset >= current.log_end_offset:
        return True
    header = next(iter(current.headers_from_offset(base_offset)), None)
    return header is None or (header.base_offset, header.crc) != (base_offset, crc)


def _align(future: "PartitionLog", current: "PartitionLog", first: bool) -> tuple[int, int] | None:
    """Make ``future`` a prefix of ``current`` again (from scratch when unsure). Returns the last
    batch the future log then holds, or None when it is empty."""
    if not first or future.log_end_offset > current.log_end_offset or not _is_prefix(future, current):
        if future.log_end_offset > future.log_start_offset or future.log_start_offset != current.log_start_offset:
            log.info("Copying %s into its future log %s from offset %d", current.name, future.dir,
                     current.log_start_offset)
        future.truncate_fully_and_start_at(current.log_start_offset)
        return None
    if future.log_end_offset < current.log_start_offset:
        future.truncate_fully_and_start_at(current.log_start_offset)
        return None
    if future.log_start_offset < current.log_start_offset:
        future.advance_log_start_offset(current.log_start_offset)
    last = _last_header(future)
    return None if last is None else (last.base_offset, last.crc)


def _is_prefix(future: "PartitionLog", current: "PartitionLog") -> bool:
    """A future log found at start (a restarted move): its last batch is the current log's too."""
    if future.log_end_offset == future.log_start_offset:
        return True
    last = _last_header(future)
    return last is not None and not _diverged(current, (last.base_offset, last.crc))


def _last_header(log: "PartitionLog"):
    if log.log_end_offset == log.log_start_offset:
        return None
    last = None
    for header in log.headers_from_offset(max(log.log_start_offset, log.log_end_offset - 1)):
        last = header
    return last


async def _wait_for_append(partition: "Partition") -> None:
    event = trio.Event()
    partition.add_waiter(event)
    try:
        with trio.move_on_after(IDLE_POLL_S):
            await event.wait()
    finally:
        partition.remove_waiter(event)


def alter_replica_log_dir(moves: LogDirMoves, key: TopicPartition, path: str, known_partition: bool,
                          topic_id=None, write_metadata: Callable[["PartitionLog"], None] | None = None) -> int:
    """Kafka's ReplicaManager.alterReplicaLogDirs for one partition: its error code. ``path``:
    the destination (an absolute path of log.dirs); ``known_partition``: the partition exists in
    the metadata (REPLICA_NOT_AVAILABLE when it is not hosted here, else UNKNOWN_TOPIC_OR_PARTITION)."""
    logs = moves.logs
    destination = logs.find_dir(path)
    if destination is None:
        raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path} is not found in the config")
    if not destination.online:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log directory {path} is offline")
    partition = moves.partitions.get(key)
    if partition is not None and partition.offline_dir is not None:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"partition {key[0]}-{key[1]} is offline")
    future = logs.future_log(*key)
    if future is not None and future.dir.parent != destination.path:
        moves.cancel(key)  # a move to another directory stops; this one replaces it
        logs.delete_future(*key)
    if partition is None:
        logs.preferred_dirs[key] = destination  # where its log goes once it is created here
        if known_partition:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"the replica of {key[0]}-{key[1]} is not on this broker")
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {key[0]}-{key[1]}")
    if partition.log.dir.parent == destination.path:
        return ErrorCode.NONE  # already there (a move elsewhere was just cancelled)
    if logs.future_log(*key) is None:
        offline = [str(log_dir) for log_dir in logs.log_dirs if not log_dir.online]
        if offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create the future log of {key[0]}-{key[1]}: "
                                                            f"log directories {', '.join(offline)} are offline")
        future = logs.create_future(key[0], key[1], partition.log.config, destination)
        if write_metadata is not None:
            write_metadata(future)
        log.info("Moving the replica of %s-%d from log directory %s to %s", *key, partition.log.dir.parent,
                 destination)
    moves.resume(key)
    return ErrorCode.NONE


def dir_failed(moves: LogDirMoves, log_dir: "LogDir", current: list[TopicPartition],
               futures: list[TopicPartition], stop_fetching: Callable[[TopicPartition], None]) -> None:
    """Kafka's handleLogDirFailure: the partitions whose log was in ``log_dir`` go offline (their
    follower fetchers stop), and moves into or out of it stop."""
    for key in current:
        stop_fetching(key)
        moves.cancel(key)
        partition = moves.partitions.get(key)
        if partition is not None:
            partition.go_offline(str(log_dir))
        if moves.logs.future_log(*key) is not None:
            moves.logs.delete_future(*key)
    for key in futures:
        moves.cancel(key)
    log.info("Stopped the fetchers of partitions %s and the moves of partitions %s: they were in the failed "
             "log directory %s", _names(current), _names(futures), log_dir)


def _names(keys: list[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in keys) or "(none)"


@dataclass(slots=True)
class ReplicaDescription:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(slots=True)
class LogDirDescription:
    """One log directory as DescribeLogDirs reports it (Kafka's ReplicaManager.describeLogDirs)."""

    path: str
    error_code: int
    replicas: list[ReplicaDescription] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1


def describe_log_dirs(logs: "LogManager", partitions: "dict[TopicPartition, Partition]",
                      wanted: set[TopicPartition] | None) -> list[LogDirDescription]:
    """Every log directory with its logs (``wanted``: those partitions only; None: all): size and
    offset lag (current: max(0, high watermark - log end offset), as Kafka; future: the current
    log end offset minus the future's), and the volume's total and usable bytes. An offline
    directory is reported with KAFKA_STORAGE_ERROR."""
    described = []
    for log_dir in logs.log_dirs:
        if not log_dir.online:
            described.append(LogDirDescription(str(log_dir), ErrorCode.KAFKA_STORAGE_ERROR))
            continue
        try:
            stat = os.statvfs(log_dir.path)
        except OSError as error:
            log.warning("Cannot describe log directory %s: %s", log_dir, error)
            described.append(LogDirDescription(str(log_dir), ErrorCode.KAFKA_STORAGE_ERROR))
            continue
        description = LogDirDescription(str(log_dir), ErrorCode.NONE, total_bytes=stat.f_blocks * stat.f_frsize,
                                        usable_bytes=stat.f_bavail * stat.f_frsize)
        current, futures = logs.logs_in(log_dir)
        for is_future, logs_here in ((False, current), (True, futures)):
            for key, partition_log in sorted(logs_here.items()):
                if wanted is None or key in wanted:
                    description.replicas.append(ReplicaDescription(
                        key[0], key[1], partition_log.size_bytes,
                        _offset_lag(partitions.get(key), partition_log, is_future), is_future))
        described.append(description)
    return described


def _offset_lag(partition: "Partition | None", partition_log: "PartitionLog", is_future: bool) -> int:
    if partition is None or partition.offline_dir is not None:
        return -1  # Kafka's INVALID_OFFSET_LAG: no replica of it is served here
    if is_future:
        return partition.log_end_offset - partition_log.log_end_offset
    return max(partition.high_watermark - partition_log.log_end_offset, 0)
