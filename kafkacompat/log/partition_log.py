"""The log of one partition: its segments, offsets (log start, end, recovery point), roll,
read, truncation, retention and recovery on open."""

from __future__ import annotations

import logging
import os
import shutil
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from kafkacompat.log.checkpoint import fsync_directory
from kafkacompat.log.config import LogConfig
from kafkacompat.log.filecache import FileCache
from kafkacompat.log.index import NO_TIMESTAMP
from kafkacompat.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, CompletedTxn, ProducerStateManager
from kafkacompat.log.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)
from kafkacompat.log.segment import now_ms as wall_clock_ms
from kafkacompat.log.swap import complete_interrupted_swaps
from kafkacompat.log.txn_index import AbortedTxn
from kafkacompat.wire.chunks import FileRegion, close_chunks
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import (
    BatchHeader,
    TxnMarker,
    patch_base_offset,
    patch_leader_epoch,
    read_txn_marker,
    set_log_append_time,
)

logger = logging.getLogger("kafkacompat.log")

_PRIVATE_CACHE_SIZE = 16  # open files for a log opened without a shared FileCache
_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".tmp")  # half-done deletes/cleanings: safe to drop
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _log_base(name: str) -> int | None:
    return parse_segment_file_name(name, LOG_SUFFIX)


def _index_base(name: str) -> int | None:
    for suffix in _INDEX_SUFFIXES:
        if name.endswith(suffix):
            return parse_segment_file_name(name, suffix)
    return None


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass
class ReadResult:
    """Whole batches, as FileRegions to sendfile; the first batch holds the offset asked for."""

    chunks: list[FileRegion] = field(default_factory=list)
    size: int = 0
    # No batch returned holds an offset at or past this (the end of the last segment read from,
    # capped by the read's limit): the bound of a read_committed fetch's aborted transactions.
    upper_bound: int = 0

    def read_all(self) -> bytes:
        """The bytes themselves (tests and tools; the server sends the regions instead)."""
        return b"".join(chunk.read_all() for chunk in self.chunks)

    def close(self) -> None:
        """Close the regions' descriptors when they will not be sent after all."""
        close_chunks(self.chunks)


class UnexpectedAppendOffsetError(KafkaError):
    """A replica append whose offsets do not follow the log end offset."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)


def _ignore_io_error(log: "PartitionLog", reason: str, error: OSError) -> None:
    return None


class PartitionLog:
    """Segments ``<base>.log/.index/.timeindex`` in ``<data_dir>/<topic>-<partition>``.

    Not thread-safe, except that ``fsync_unflushed()`` may run in a worker thread while the event
    loop keeps appending and reading.

    ``flush.messages``: an append that brings the unflushed messages (log end offset minus recovery
    point) to flush.messages calls ``on_flush_due(log)``: by default ``flush`` right there; a
    LogManager queues the log for its flusher instead, which fsyncs in a worker thread.
    """

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig,
                 files: FileCache, *, owns_files: bool,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self._recovery_point = 0
        self.config = config  # after the recovery point: the setter derives the flush threshold
        self.on_flush_due: Callable[[PartitionLog], None] = PartitionLog.flush
        # An append or read failed with an OSError (what, the error): a LogManager takes the
        # log's directory offline (Kafka's LogDirFailureChannel); by default nothing more.
        self.on_io_error: Callable[[PartitionLog, str, OSError], None] = _ignore_io_error
        # Set by a LogManager while a flush.messages fsync is queued: what an acknowledgement of
        # the appends before it waits for (an object with ``async wait()``, a trio.Event).
        self.pending_flush: Any = None
        self._files = files
        self._owns_files = owns_files
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []  # base offsets of _segments, for bisect
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._last_flush_ms = wall_clock_ms()
        self.recovered_segments = 0  # how many segments open() had to validate batch by batch
        self._indexes_missing: set[int] = set()  # while loading: base offsets whose index files are not there
        self.flushes = 0  # flushes completed (flush.messages, flush.ms, shutdown)
        # Idempotent producers: updated by every append, snapshotted at roll and close.
        self.producer_state = ProducerStateManager(directory, f"{topic}-{partition}",
                                                   expiration_ms=producer_id_expiration_ms, list_snapshots=False)

    # -- opening and recovery ---------------------------------------------------------------

    @classmethod
    def open(cls, dir: Path, topic: str, partition: int, config: LogConfig, *, recovery_point: int = 0,
             file_cache: FileCache | None = None, log_start_offset: int | None = None,
             producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS, clean_shutdown: bool = False,
             defer_fsync: Callable[[LogSegment], None] | None = None) -> "PartitionLog":
        """Load the segments in ``dir`` (created if missing).

        Segments holding offsets at or after ``recovery_point`` are validated batch by batch
        (framing, CRC32C, offsets); an invalid tail is cut off and any later segment removed.
        Missing or unreadable indexes are rebuilt from the log. A ``recovery_point`` at the log end
        offset (a clean shutdown) means nothing is rescanned. ``clean_shutdown``: the log was
        closed cleanly (its directory's marker), so a log without a producer snapshot had no
        producers and nothing is replayed for its producer state, as Kafka's rebuildProducerState.
        ``defer_fsync``: takes each recovered segment's fsync instead of doing it here (a
        LogManager runs them in worker threads, and waits for them before any checkpoint).
        """
        directory = dir if isinstance(dir, Path) else Path(dir)
        files = file_cache if file_cache is not None else FileCache(_PRIVATE_CACHE_SIZE)
        log = cls(directory, topic, partition, config, files, owns_files=file_cache is None,
                  producer_id_expiration_ms=producer_id_expiration_ms)
        log._load(recovery_point, log_start_offset, clean_shutdown, defer_fsync or LogSegment.fsync)
        return log

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic's config is replaced whole (AlterConfigs); the flush threshold follows it."""
        self._config = config
        self._flush_at_offset = self._recovery_point + config.flush_messages

    def _set_recovery_point(self, offset: int) -> None:
        self._recovery_point = offset
        self._flush_at_offset = offset + self._config.flush_messages

    def _load(self, recovery_point: int, log_start_offset: int | None, clean_shutdown: bool,
              fsync: Callable[[LogSegment], None]) -> None:
        names = self._file_names()
        if complete_interrupted_swaps(self.dir, self.name, names):
            names = self._file_names()
        if self._remove_leftovers(names):
            names = self._file_names()
        bases = sorted(base for base in map(_log_base, names) if base is not None)
        present = set(names)
        self._indexes_missing = {base for base in bases
                                 if segment_file_name(base, INDEX_SUFFIX) not in present
                                 or segment_file_name(base, TIME_INDEX_SUFFIX) not in present}
        self.producer_state.found_snapshots(names)
        for base in bases:
            self._add_segment(LogSegment.open_existing(self.dir, base, self._files, **self._segment_options()))
        recovered = self._recover(recovery_point)
        self._indexes_missing.clear()  # rebuilt by now: later checks look at the files
        if recovered:
            # As Kafka's recoverSegment: the producer state is rebuilt from no later than the first
            # recovered segment, and the aborted indexes of the recovered segments from their markers.
            for segment in recovered:
                if segment_file_name(segment.base_offset, TXN_INDEX_SUFFIX) in present:
                    segment.txn_index.reset()
                else:
                    segment.txn_index.found_empty()
            self.producer_state.delete_snapshots_above(recovered[0].base_offset)
        if not self._segments:
            self._add_segment(self._new_segment(log_start_offset or 0))
        active = self._segments[-1]
        if active.next_offset is None:
            active.next_offset = self._scan_next_offset(active)[0]
        self._log_end_offset = active.next_offset
        self._log_start_offset = self._initial_log_start_offset(log_start_offset)
        self._set_recovery_point(self._log_end_offset)
        # A tail recovered despite a clean shutdown may have lost batches a snapshot knew of.
        self._rebuild_producer_state(index_from=recovered[0].base_offset if recovered else None,
                                     clean_shutdown=clean_shutdown and not recovered)
        for segment in recovered:  # last: the rebuild above re-adds their aborted-index entries
            fsync(segment)
        logger.debug("Loaded %s: %d segments, offsets %d to %d, %d recovered",
                     self.name, len(self._segments), self._log_start_offset, self._log_end_offset, len(recovered))

    def _rebuild_producer_state(self, index_from: int | None = None, clean_shutdown: bool = False) -> None:
        """Producer state from the latest snapshot plus the batch headers after it, then a
        snapshot at the log end offset (so the next start has nothing to replay). ``index_from``:
        the aborted transactions whose marker is at that offset or later are written to their
        segment's .txnindex again (recovery emptied those). ``clean_shutdown``: see ``open``."""
        on_completed = None
        if index_from is not None:
            def on_completed(completed: CompletedTxn) -> None:
                if completed.aborted and completed.last_offset >= index_from:
                    self._index_aborted(self._segments[self._segment_position(completed.last_offset)], completed)
        self.producer_state.load(self._log_start_offset, self._log_end_offset, self._batches_with_markers,
                                 wall_clock_ms(), on_completed, clean_shutdown=clean_shutdown)
        try:
            self.producer_state.take_snapshot()
        except OSError as error:
            logger.warning("Could not write the producer snapshot of %s: %s", self.name, error)

    def _batches_with_markers(self, offset: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        """Batch headers from the batch holding ``offset``, each with its COMMIT/ABORT marker when
        it is a control batch (only those are read beyond their header)."""
        for segment, header in self._segment_headers_from(offset):
            marker = None
            if header.is_control:
                marker = read_txn_marker(segment.read_batch(header), replace(header, position=0))
            yield header, marker

    def _index_aborted(self, segment: LogSegment, completed: CompletedTxn) -> None:
        segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                            completed.last_stable_offset))

    def headers_from_offset(self, offset: int) -> Iterator[BatchHeader]:
        """Batch headers from the batch holding ``offset`` to the log end, across segments (per
        batch, never per record: idempotent-producer state is rebuilt from these)."""
        for _, header in self._segment_headers_from(offset):
            yield header

    def _segment_headers_from(self, offset: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        for segment in self._segments[self._segment_position(offset):]:
            position = 0
            if segment.base_offset < offset:
                start = segment.find_batch(offset)
                if start is None:
                    continue
                position = start.position
            for header in segment.headers_from(position):
                yield segment, header

    def _segment_options(self) -> dict[str, object]:
        return {
            "label": self.name,
            "index_interval_bytes": self._config.index_interval_bytes,
            "segment_index_bytes": self._config.segment_index_bytes,
        }

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.create(self.dir, base_offset, self._files, **self._segment_options())

    def _add_segment(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def _file_names(self) -> list[str]:
        """The names in the log's directory (created if missing): one scandir, which every
        loading step shares."""
        try:
            with os.scandir(self.dir) as entries:
                return [entry.name for entry in entries]
        except FileNotFoundError:
            self.dir.mkdir(parents=True, exist_ok=True)
            return []

    def _remove_leftovers(self, names: list[str]) -> bool:
        """Files of half-finished deletions, and indexes whose .log is gone (Kafka does the same).
        Returns whether it removed any."""
        logs = {base for base in map(_log_base, names) if base is not None}
        removed = False
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                logger.info("Removing leftover file %s of %s", name, self.name)
            elif (base := _index_base(name)) is not None and base not in logs:
                logger.info("Removing %s of %s: its segment's .log is missing", name, self.name)
            else:
                continue
            (self.dir / name).unlink(missing_ok=True)
            removed = True
        return removed

    def _recover(self, recovery_point: int) -> list[LogSegment]:
        """Validate the segments that may hold offsets >= recovery_point; returns those it scanned."""
        first = max(0, bisect_right(self._bases, recovery_point) - 1)
        for segment in self._segments[:first]:
            if segment.base_offset in self._indexes_missing:
                logger.info("Rebuilding missing indexes of %s %s", self.name, segment.name)
                segment.rebuild_indexes()
        recovered: list[LogSegment] = []
        for position in range(first, len(self._segments)):
            segment = self._segments[position]
            is_last = position == len(self._segments) - 1
            if is_last and segment.base_offset <= recovery_point and not self._tail_needs_recovery(segment, recovery_point):
                break
            outcome = segment.recover()
            recovered.append(segment)
            if outcome.problem is not None:
                logger.warning("Recovered %s: truncated %d bytes of %s at offset %d in %s",
                               self.name, outcome.invalid_bytes, outcome.problem, outcome.problem_offset, segment.name)
                self._drop_segments_after(position, reason="it follows an invalid batch", level=logging.WARNING)
                break
        self.recovered_segments = len(recovered)
        if recovered:
            logger.info("Recovered %s from offset %d: validated %d segments from %s on",
                        self.name, recovery_point, len(recovered), recovered[0].name)
        return recovered

    def _tail_needs_recovery(self, segment: LogSegment, recovery_point: int) -> bool:
        """Whether the last segment holds anything past the recovery point (or does not frame cleanly)."""
        if segment.base_offset in self._indexes_missing:
            return True
        next_offset, framed_to = self._scan_next_offset(segment)
        if framed_to != segment.size:
            return True
        segment.next_offset = next_offset
        return next_offset > recovery_point

    @staticmethod
    def _scan_next_offset(segment: LogSegment) -> tuple[int, int]:
        """(next offset, end of the last whole batch), walking headers from the last index entry."""
        position = segment.tail_scan_start()
        next_offset, end = segment.base_offset, position
        for header in segment.headers_from(position):
            next_offset, end = header.next_offset, header.position + header.size
        return next_offset, end

    def _drop_segments_after(self, position: int, *, reason: str, level: int = logging.INFO) -> None:
        for segment in self._segments[position + 1:]:
            logger.log(level, "Deleting %s %s: %s", self.name, segment.name, reason)
            segment.delete_files()
        del self._segments[position + 1:]
        del self._bases[position + 1:]

    def _initial_log_start_offset(self, checkpointed: int | None) -> int:
        start = max(checkpointed if checkpointed is not None else 0, self._segments[0].base_offset)
        if start > self._log_end_offset:
            logger.warning("%s: log start offset %d is past the log end offset %d; using %d",
                           self.name, start, self._log_end_offset, self._log_end_offset)
            start = self._log_end_offset
        return start

    # -- offsets ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign (LEO)."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is on disk (fsynced); restarts rescan only from here."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segments_info(self) -> list[dict[str, object]]:
        return [segment.info() for segment in self._segments]

    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list; the last one is the active segment)."""
        return list(self._segments)

    def replace_segments(self, old: list[LogSegment], base_offset: int) -> LogSegment:
        """The cleaner's swap: the consecutive inactive segments ``old`` (their files already
        deleted) make way for the segment whose files now sit at ``base_offset``."""
        first = next((i for i, segment in enumerate(self._segments) if segment is old[0]), None)
        if (first is None or first + len(old) >= len(self._segments)
                or any(a is not b for a, b in zip(self._segments[first:first + len(old)], old))):
            raise ValueError(f"segments of {self.name} to replace are not consecutive inactive segments")
        new = LogSegment.open_existing(self.dir, base_offset, self._files, **self._segment_options())
        self._segments[first:first + len(old)] = [new]
        self._bases[first:first + len(old)] = [base_offset]
        return new

    # -- append -----------------------------------------------------------------------------

    def append(self, records: memoryview, headers: list[BatchHeader], *, assign_offsets: bool = True,
               leader_epoch: int = 0, now_ms: int | None = None) -> AppendInfo:
        """Append validated batches (``headers`` from validate_batches over ``records``).

        Leader appends (``assign_offsets``) get consecutive offsets from the log end offset and
        the leader epoch patched in place, and LogAppendTime when the topic uses it. Replica
        appends keep their offsets, which must not go back below the log end offset.
        """
        if not headers:
            raise ValueError(f"append to {self.name} carried no record batch")
        now = now_ms if now_ms is not None else wall_clock_ms()
        if len(records) > self._config.segment_bytes:
            raise KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"{len(records)} bytes of batches for {self.name} exceed its segment.bytes "
                f"{self._config.segment_bytes}",
            )
        log_append_time = -1
        if assign_offsets:
            self._assign_offsets(records, headers, leader_epoch)
            if self._config.uses_log_append_time:
                log_append_time = now
                for header in headers:
                    set_log_append_time(records, header, now)
        else:
            self._check_replica_offsets(headers)
        first_offset, last_offset = headers[0].base_offset, headers[-1].last_offset
        try:
            segment = self._segment_for_append(len(records), first_offset, last_offset, headers, now)
            segment.append(records, headers)
        except OSError as error:
            self.on_io_error(self, "appending to", error)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"could not write to {self.name} in {self.dir.parent}: {error}") from error
        self._log_end_offset = headers[-1].next_offset
        self._update_producer_state(records, headers, segment)
        if self._log_end_offset >= self._flush_at_offset:  # the only flush cost of an append
            self.on_flush_due(self)
        return AppendInfo(first_offset, last_offset, log_append_time, self._log_start_offset)

    def _update_producer_state(self, records: memoryview, headers: list[BatchHeader], segment: LogSegment) -> None:
        producer_state = self.producer_state
        for header in headers:
            if not header.is_control:
                producer_state.update(header)
                continue
            completed = producer_state.update(header, read_txn_marker(records, header))
            if completed is not None and completed.aborted:
                try:
                    self._index_aborted(segment, completed)
                except OSError as error:  # the batch is written; reads use the entry, kept in memory
                    logger.error("Could not add the aborted transaction of producer %d (offsets %d to %d) to %s's "
                                 "transaction index file: %s; it is written again at the next flush",
                                 completed.producer_id, completed.first_offset, completed.last_offset, self.name,
                                 error)

    def _assign_offsets(self, records: memoryview, headers: list[BatchHeader], leader_epoch: int) -> None:
        next_offset = self._log_end_offset
        for header in headers:
            patch_base_offset(records, header, next_offset)
            patch_leader_epoch(records, header, leader_epoch)
            next_offset = header.next_offset

    def _check_replica_offsets(self, headers: list[BatchHeader]) -> None:
        expected = self._log_end_offset
        for header in headers:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"replica append to {self.name} starts a batch at offset {header.base_offset}, "
                    f"below the next offset {expected}"
                )
            expected = header.next_offset

    def _segment_for_append(self, size: int, first_offset: int, last_offset: int,
                            headers: list[BatchHeader], now: int) -> LogSegment:
        active = self._segments[-1]
        reason = self._roll_reason(active, size, last_offset, headers, now)
        if reason is not None:
            self._roll(max(self._log_end_offset, first_offset), reason)
        return self._segments[-1]

    def _roll_reason(self, active: LogSegment, size: int, last_offset: int,
                     headers: list[BatchHeader], now: int) -> str | None:
        if last_offset - active.base_offset > INT32_MAX:
            return "offsets would overflow the segment's relative offsets"
        if active.size == 0:
            return None
        if active.size > self._config.segment_bytes - size:
            return f"segment.bytes {self._config.segment_bytes} reached"
        incoming_max_timestamp = max(header.max_timestamp for header in headers)
        if active.time_waited_for_roll(now, incoming_max_timestamp) > self._config.segment_ms:
            return f"segment.ms {self._config.segment_ms} elapsed"
        if active.offset_index_full or active.time_index_full:
            return f"segment.index.bytes {self._config.segment_index_bytes} filled an index"
        return None

    def _roll(self, base_offset: int, reason: str) -> None:
        active = self._segments[-1]
        if active.size == 0:
            # An empty segment only rolls when its base cannot hold the new offsets: replace it.
            active.delete_files()
            self._segments.pop()
            self._bases.pop()
        else:
            active.become_inactive()
        self._add_segment(self._new_segment(base_offset))
        self._snapshot_producer_state_at(base_offset)
        logger.info("Rolled %s to a new segment at offset %d: %s", self.name, base_offset, reason)

    def _snapshot_producer_state_at(self, offset: int) -> None:
        """Kafka's snapshot at roll, named after the new segment's base offset."""
        self.producer_state.map_end_offset = max(self.producer_state.map_end_offset, offset)
        try:
            self.producer_state.take_snapshot()
        except OSError as error:
            logger.warning("Could not write the producer snapshot of %s at offset %d: %s", self.name, offset, error)

    def roll(self) -> None:
        """Start a new segment at the log end offset now (tools and tests)."""
        if self._segments[-1].size > 0:
            self._roll(self._log_end_offset, "requested")

    # -- read -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them.

        With ``min_one_batch`` the first batch comes back even when larger than ``max_bytes``
        (KIP-74). With ``max_offset`` (the high watermark) only batches whose last offset is below
        it are returned. Reading at the log end offset returns nothing; outside
        [log start offset, log end offset] raises OFFSET_OUT_OF_RANGE.
        """
        self._check_readable(offset)
        try:
            return self._read(offset, max_bytes, max_offset, min_one_batch)
        except OSError as error:
            self.on_io_error(self, "reading", error)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"could not read {self.name} in {self.dir.parent}: {error}") from error

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> ReadResult:
        end_offset = self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
        result = ReadResult()
        take_first = min_one_batch
        position = self._segment_position(offset)
        while position < len(self._segments) and offset < end_offset:
            segment = self._segments[position]
            if segment.base_offset >= end_offset:
                break
            start = segment.find_batch(offset)
            if start is None:  # offset is past this segment's batches (a gap): next segment
                position += 1
                continue
            if start.last_offset >= end_offset:
                break
            end = self._span_end(position, start, max(0, max_bytes) - result.size, end_offset, take_first)
            if end > start.position:
                result.chunks.append(segment.region(start.position, end))
                result.size += end - start.position
                result.upper_bound = min(end_offset, self._segment_end_offset(position))
            if end < segment.size:
                break
            take_first = False
            position += 1
        return result

    def _check_readable(self, offset: int) -> None:
        if not self._log_start_offset <= offset <= self._log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is out of range for {self.name}, which holds offsets "
                f"{self._log_start_offset} to {self._log_end_offset - 1}",
            )

    def _segment_position(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def _segment_end_offset(self, position: int) -> int:
        if position + 1 < len(self._segments):
            return self._bases[position + 1]
        return self._log_end_offset

    def _span_end(self, position: int, start: BatchHeader, budget: int, end_offset: int,
                  take_first: bool) -> int:
        """End of the whole batches from ``start`` that fit ``budget`` and stay below ``end_offset``."""
        segment = self._segments[position]
        limit_by_offset = segment.size
        if end_offset < self._segment_end_offset(position):
            first_excluded = segment.find_batch(end_offset)
            if first_excluded is not None:
                limit_by_offset = first_excluded.position
        limit_by_bytes = segment.end_of_whole_batches(start.position, start.position + budget)
        end = min(limit_by_offset, limit_by_bytes)
        if end == start.position and take_first:
            end = start.position + start.size
        return end

    # -- transactions -----------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: below it every transaction is decided (read_committed reads up to it)."""
        return self.producer_state.last_stable_offset(high_watermark, self._log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [fetch_offset, upper_bound), from the
        .txnindex of the segment holding ``fetch_offset`` on (Kafka's collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_position(fetch_offset):]:
            if segment.base_offset >= upper_bound or segment.txn_index.collect(fetch_offset, upper_bound, found):
                break
        return found

    # -- timestamps -------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped ``timestamp`` or later; None if none is.

        ListOffsets semantics: the first segment whose max timestamp reaches ``timestamp`` is
        searched from its time index entry on; only that one batch's records are decoded.
        """
        for segment in self._segments:
            max_timestamp, _ = segment.max_timestamp_and_offset
            if max_timestamp >= timestamp:
                found = segment.search_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record with it) over the log; (-1, -1) if none.

        ListOffsets MAX_TIMESTAMP semantics (KIP-734).
        """
        best: LogSegment | None = None
        for segment in self._segments:
            if best is None or segment.max_timestamp_and_offset[0] > best.max_timestamp_and_offset[0]:
                best = segment
        if best is None or best.max_timestamp_and_offset[0] <= NO_TIMESTAMP:
            return -1, -1
        timestamp, batch_last_offset = best.max_timestamp_and_offset
        offset = best.offset_of_timestamp(timestamp, batch_last_offset)
        return timestamp, batch_last_offset if offset is None else offset

    # -- truncation and deletion ------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= ``offset`` (a batch straddling it goes entirely)."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to negative offset {offset}")
        if offset >= self._log_end_offset:
            return
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return
        keep = bisect_right(self._bases, offset - 1) if offset > self._bases[0] else 1
        dropped_segments = len(self._segments) - keep
        self._drop_segments_after(keep - 1, reason=f"truncated to offset {offset}")
        dropped_bytes, next_offset = self._segments[-1].truncate_to(offset)
        self._log_end_offset = next_offset
        self._log_start_offset = min(self._log_start_offset, next_offset)
        self._set_recovery_point(min(self._recovery_point, next_offset))
        self._rebuild_producer_state()
        logger.info("Truncated %s to offset %d: dropped %d bytes and %d whole segments; log end offset is %d",
                    self.name, offset, dropped_bytes, dropped_segments, next_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        for segment in self._segments:
            segment.delete_files()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(self._new_segment(offset))
        self._log_start_offset = self._log_end_offset = offset
        self._set_recovery_point(offset)
        self.producer_state.truncate_fully_and_start_at(offset)
        logger.info("Truncated %s fully; it now starts at offset %d", self.name, offset)

    def advance_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords (and a follower taking its leader's log start): offsets below ``offset``
        become unreadable and whole segments below it go at once. Returns whether the log start
        offset moved (it never goes back)."""
        if offset > self._log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot move the log start offset of {self.name} to {offset}, past its log end offset "
                f"{self._log_end_offset}",
            )
        if offset <= self._log_start_offset:
            return False
        logger.info("Incremented the log start offset of %s from %d to %d", self.name, self._log_start_offset, offset)
        self._log_start_offset = offset
        self._delete_segments_below_log_start()
        return True

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms and retention.bytes; returns how many went.

        Acts only when cleanup.policy includes "delete" and never deletes the active segment.
        Segments entirely below the log start offset go whatever the policy.
        """
        deleted = self._delete_segments_below_log_start()
        if self._config.deletes_old_segments:
            deleted += self._delete_by_time(now_ms) + self._delete_by_size()
        return deleted

    def _delete_segments_below_log_start(self) -> int:
        deleted = 0
        while len(self._segments) > 1 and self._bases[1] <= self._log_start_offset:
            self._delete_oldest_segment(f"it is below the log start offset {self._log_start_offset}")
            deleted += 1
        return deleted

    def _delete_by_time(self, now: int) -> int:
        retention_ms = self._config.retention_ms
        if retention_ms < 0:
            return 0
        deleted = 0
        while len(self._segments) > 1:
            largest = self._segments[0].largest_timestamp()
            if now - largest <= retention_ms:
                break
            self._delete_oldest_segment(f"retention.ms {retention_ms}: its largest timestamp {largest} is older")
            deleted += 1
        return deleted

    def _delete_by_size(self) -> int:
        retention_bytes = self._config.retention_bytes
        if retention_bytes < 0:
            return 0
        excess = self.size_bytes - retention_bytes
        deleted = 0
        while len(self._segments) > 1 and excess >= self._segments[0].size:
            excess -= self._segments[0].size
            self._delete_oldest_segment(f"retention.bytes {retention_bytes} exceeded")
            deleted += 1
        return deleted

    def _delete_oldest_segment(self, reason: str) -> None:
        oldest = self._segments.pop(0)
        self._bases.pop(0)
        oldest.delete_files()
        self.producer_state.delete_snapshots_below(self._bases[0])
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        logger.info("Deleted segment %s of %s: %s", oldest.name, self.name, reason)

    # -- durability and shutdown ------------------------------------------------------------

    def flush(self) -> None:
        """fsync what is not yet on disk and move the recovery point to the log end offset."""
        self.mark_flushed(self.fsync_unflushed())

    def fsync_unflushed(self) -> int:
        """fsync the segments holding offsets from the recovery point on; returns the log end
        offset they were taken at (for ``mark_flushed``).

        Safe to call from a worker thread while the event loop appends (it uses its own file
        descriptors and a snapshot of the segment list).
        """
        end_offset = self._log_end_offset
        segments, bases = list(self._segments), list(self._bases)
        first = max(0, bisect_right(bases, self._recovery_point) - 1)
        for segment in segments[first:]:
            segment.fsync()
        fsync_directory(self.dir)
        return end_offset

    def mark_flushed(self, offset: int) -> None:
        """Everything below ``offset`` is on disk: the recovery point moves there (never back, never
        past a truncated log end)."""
        self._set_recovery_point(max(self._recovery_point, min(offset, self._log_end_offset)))
        self._last_flush_ms = wall_clock_ms()
        self.flushes += 1

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self._recovery_point

    def flush_due_by_time(self, now_ms: int) -> bool:
        """flush.ms: unflushed messages, and the last flush is at least flush.ms old."""
        return self._log_end_offset > self._recovery_point and now_ms - self._last_flush_ms >= self._config.flush_ms

    def close(self, *, snapshot: bool = True) -> bool:
        """Close the files; with ``snapshot`` (a clean shutdown) first write the producer state at
        the log end offset, so the next start replays nothing. Returns False when that snapshot
        could not be written (the next start must not take the close for a clean one)."""
        written = True
        if snapshot:
            self.producer_state.map_end_offset = self._log_end_offset
            try:
                self.producer_state.take_snapshot(fsync=True)
            except OSError as error:
                logger.warning("Could not write the producer snapshot of %s: %s", self.name, error)
                written = False
        for segment in self._segments:
            segment.close()
        if self._owns_files:
            self._files.close()
        return written

    def delete(self) -> None:
        """Close the log and remove its directory."""
        self.close(snapshot=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.name}, offsets {self._log_start_offset}..{self._log_end_offset}, "
                f"{len(self._segments)} segments)")

