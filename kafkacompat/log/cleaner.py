"""Log compaction: keep the last record of every key in topics whose cleanup.policy has "compact".

Kafka's LogCleaner, Cleaner and LogCleanerManager, rule for rule:

- Which log: every compacted log with bytes in it; its dirty section runs from the cleaner checkpoint
  (``cleaner-offset-checkpoint`` in the data dir; the log start offset when missing, below the log
  start or past the log end) to the first uncleanable offset: the active segment's base, the high
  watermark if given, and the first segment whose largest timestamp is within
  min.compaction.lag.ms of now, rounded down to a segment base. A log is cleaned when its dirty
  ratio (dirty bytes / total bytes) is above min.cleanable.dirty.ratio, or when it has dirty bytes
  and its oldest dirty segment's first batch is older than max.compaction.lag.ms; the dirtiest
  first.
- Offset map: key -> last offset over the dirty section, at most
  log.cleaner.dedupe.buffer.size / log.cleaner.threads / 24 * log.cleaner.io.buffer.load.factor keys
  (Kafka's 16-byte hash + 8-byte offset slots); a full map ends this round early, the rest is
  cleaned next round.
- Cleaning rewrites every segment from the start of the log up to the map's end, grouped by size
  (groupSegmentsBySize: at most segment.bytes of log and segment.index.bytes of each index per
  group), each group into one new segment. A record stays if its offset is past the map's end or
  it is the latest for its key; a record without key goes. Tombstones (null values) stay until
  the batch's delete horizon: the first clean that keeps a tombstone stamps its batch with
  now + delete.retention.ms (KIP-534: attributes bit 6, horizon in baseTimestamp), a later clean
  after the horizon drops it. Batches keep their base offset, last offset delta, producer
  id/epoch/base sequence, leader epoch, timestamp type and codec; an unchanged batch is copied
  byte for byte. An emptied batch stays (header only) when it is an active producer's last batch
  (idempotent producer state) or the last batch of the round, and goes otherwise.
- Swap: the group is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``,
  ``.timeindex.cleaned``) in a worker thread and fsynced; then, on the event loop thread, renamed
  to ``.swap`` (the commit point), the old segments are deleted and the ``.swap`` files renamed to
  their final names (log/swap.py). ``complete_interrupted_swaps`` (run by PartitionLog.open) finishes a
  swap cut short by a crash: ``.cleaned`` files are dropped (the old segments are intact); a ``.log.swap``
  replaces every segment whose base offset lies in its offset range, indexes are rebuilt.

- Transactions (log/cleaner_txn.py): the cleaner never passes the first open transaction; the
  records of aborted transactions are discarded and never enter the map (committed transactional
  records are compacted like any other); a COMMIT/ABORT marker stays while its transaction has
  data in the pass, an ABORT one then going into the cleaned segment's ``.txnindex`` (swapped in
  with the other files); a marker whose transaction has no data left gets a delete horizon
  (now + delete.retention.ms) on the first clean and goes on a clean after it, except the last
  batch of an active producer, which is emptied instead.

Deviations, on purpose or for now: the map holds the keys themselves, not MD5 hashes. Retention for "compact,delete"
logs stays with the broker's housekeeping; a clean that finds its segments changed underneath it
(retention, truncation, deletion) is abandoned and retried later.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Generator, Iterable, Iterator

import trio

from kafkacompat.config import BrokerConfig, broker_default
from kafkacompat.log.checkpoint import read_checkpoint, write_checkpoint
from kafkacompat.log.cleaner_txn import CleanedTransactions
from kafkacompat.log.filecache import FileCache
from kafkacompat.log.index import NO_TIMESTAMP, OffsetIndex, TimeIndex
from kafkacompat.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    batches_in_file,
)
from kafkacompat.log.swap import CLEANED_SUFFIX, CleanedSegment, swap_in
from kafkacompat.log.txn_index import AbortedTxn
from kafkacompat.wire.records import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    DELETE_HORIZON_FLAG,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    build_batch,
    crc_ok,
    read_header,
    iter_records,
    record_spans,
    span_record,
)

if TYPE_CHECKING:
    from kafkacompat.log.manager import LogManager
    from kafkacompat.log.partition_log import PartitionLog

logger = logging.getLogger("kafkacompat.log.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
INT32_MAX = 2**31 - 1
_BYTES_PER_MAP_ENTRY = 24  # Kafka's SkimpyOffsetMap: MD5 (16) + offset (8)
_WRITE_BLOCK = 1 << 20  # cleaned batches are written this much at a time

TopicPartition = tuple[str, int]


class CleaningAborted(Exception):
    """The log changed under the cleaner (retention, truncation, deletion): try again later."""


class CorruptSegment(Exception):
    """A segment the cleaner reads does not hold whole, intact batches up to its size (Kafka's
    CorruptRecordException): the partition is left as it is, never compacted over the damage."""


# -- configuration ---------------------------------------------------------------------------


@dataclass
class CleanerConfig:
    """The broker-level settings the cleaner acts on; the defaults are the config table's."""

    enable: bool = broker_default("log.cleaner.enable")
    threads: int = broker_default("log.cleaner.threads")
    backoff_ms: int = broker_default("log.cleaner.backoff.ms")
    dedupe_buffer_size: int = broker_default("log.cleaner.dedupe.buffer.size")
    dedupe_buffer_load_factor: float = broker_default("log.cleaner.io.buffer.load.factor")

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> "CleanerConfig":
        return cls(
            enable=config.log_cleaner_enable,
            threads=config.log_cleaner_threads,
            backoff_ms=config.log_cleaner_backoff_ms,
            dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            dedupe_buffer_load_factor=config.log_cleaner_io_buffer_load_factor,
        )

    @property
    def max_map_entries(self) -> int:
        per_thread = self.dedupe_buffer_size // max(1, self.threads)
        return max(1, int(per_thread // _BYTES_PER_MAP_ENTRY * self.dedupe_buffer_load_factor))


# -- what to clean ---------------------------------------------------------------------------


@dataclass
class LogToClean:
    log: "PartitionLog"
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    force_checkpoint: bool = False  # the checkpoint was invalid: reset it to first_dirty_offset

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def should_clean(self) -> bool:
        """Kafka's test: dirty ratio strictly above min.cleanable.dirty.ratio, or overdue by max lag."""
        return ((self.need_compaction_now and self.cleanable_bytes > 0)
                or self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio)


def log_to_clean(log: "PartitionLog", checkpoint: int | None, now_ms: int, *,
                 high_watermark: int | None = None) -> LogToClean:
    """The cleanable section of ``log`` (LogCleanerManager.cleanableOffsets and LogToClean)."""
    start = log.log_start_offset
    checkpointed = start if checkpoint is None else checkpoint
    force = False
    if checkpointed < start:
        if not log.config.deletes_old_segments:
            logger.warning("Resetting first dirty offset of %s to log start offset %d since the checkpointed offset "
                           "%d is invalid", log.name, start, checkpointed)
        first_dirty, force = start, True
    elif checkpointed > log.log_end_offset:
        logger.warning("The cleaner checkpoint of %s is %d, past its log end offset %d; resetting it to the log "
                       "start offset %d", log.name, checkpointed, log.log_end_offset, start)
        first_dirty, force = start, True
    else:
        first_dirty = checkpointed
    segments = log.segments()
    active = segments[-1]
    limits = [active.base_offset]
    if high_watermark is not None:
        limits.append(high_watermark)
    first_open_txn = log.producer_state.first_open_txn_offset()
    if first_open_txn is not None:  # Kafka cleans below the last stable offset only
        limits.append(first_open_txn)
    dirty_inactive = [s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset > first_dirty]
    lag = max(0, log.config.min_compaction_lag_ms)
    if lag > 0:
        for segment in dirty_inactive:
            if segment.largest_timestamp() > now_ms - lag:
                limits.append(segment.base_offset)
                break
    uncleanable = max(first_dirty, min(limits))
    # Round down to the base of the segment holding it (calculateCleanableBytes).
    first_uncleanable = active.base_offset
    for segment, following in zip(segments, segments[1:]):
        if following.base_offset > uncleanable:
            first_uncleanable = segment.base_offset
            break
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    lower = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(s.size for i, s in enumerate(segments)
                          if s.base_offset < first_uncleanable
                          and (i + 1 == len(segments) or segments[i + 1].base_offset > lower))
    return LogToClean(log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes,
                      _max_compaction_delay(log, dirty_inactive, now_ms) > 0, force)


def _max_compaction_delay(log: "PartitionLog", dirty_inactive: list[LogSegment], now_ms: int) -> int:
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    if clean_until <= 0:  # the default (Long.MAX_VALUE): no batch is ever overdue, read nothing
        return 0
    timestamps = []
    for segment in dirty_inactive:
        first = next(segment.headers_from(0), None)
        if first is not None and first.max_timestamp > 0:
            timestamps.append(first.max_timestamp)
    if not timestamps:
        return 0
    earliest = min(timestamps)
    return clean_until - earliest if earliest < clean_until else 0


# -- reading segments from a worker thread ---------------------------------------------------


@dataclass(frozen=True)
class SegmentSnapshot:
    """What a worker thread needs of a segment: taken on the event loop thread, read-only after."""

    segment: LogSegment  # identity, to check on the event loop that the segment is still there
    base_offset: int
    log_path: str
    size: int
    index_bytes: int
    time_index_bytes: int
    mtime_ns: int

    @classmethod
    def of(cls, segment: LogSegment, *, with_indexes: bool = True) -> "SegmentSnapshot":
        index_bytes = len(segment.offset_index_entries()) * 8 if with_indexes else 0
        time_index_bytes = len(segment.time_index_entries()) * 12 if with_indexes else 0
        try:
            mtime_ns = os.stat(segment.log_path).st_mtime_ns
        except FileNotFoundError:
            mtime_ns = time.time_ns()
        return cls(segment, segment.base_offset, segment.log_path, segment.size, index_bytes, time_index_bytes,
                   mtime_ns)


def read_batches(path: str, size: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """batches_in_file, for the cleaner, checked as Kafka's cleaner checks them: every batch's CRC,
    and batches all the way to ``size`` (the segment's length when the clean started). Damage
    raises CorruptSegment; a segment deleted or cut shorter meanwhile abandons the clean."""
    name = os.path.basename(path)
    consumed = 0
    try:
        for header, data in batches_in_file(path, size):
            if not crc_ok(data, header):
                raise CorruptSegment(f"the batch at offset {header.base_offset} (byte {consumed} of {name}) "
                                     "fails its CRC check")
            consumed += header.size
            yield header, data
        if consumed < size:
            if os.path.getsize(path) < size:
                raise CleaningAborted(f"{name} was truncated meanwhile")
            raise CorruptSegment(f"bytes {consumed} to {size} of {name} are not a record batch")
    except FileNotFoundError:
        raise CleaningAborted(f"{name} was deleted meanwhile") from None


# -- the offset map --------------------------------------------------------------------------


@dataclass
class OffsetMap:
    """key -> last offset over the dirty section; ``latest_offset`` is the last offset it covers."""

    max_entries: int
    entries: dict[bytes, int] = field(default_factory=dict)
    latest_offset: int = -1

    def put(self, key: bytes, offset: int) -> bool:
        """False when the map is full (and the key is new)."""
        if len(self.entries) >= self.max_entries and key not in self.entries:
            return False
        self.entries[key] = offset
        return True

    def get(self, key: bytes) -> int:
        return self.entries.get(key, -1)

    def __len__(self) -> int:
        return len(self.entries)


def build_offset_map(dirty: list[SegmentSnapshot], start: int, end: int, max_entries: int,
                     aborted: Iterable[AbortedTxn] = ()) -> OffsetMap:
    """Cleaner.buildOffsetMap: the keys of the dirty segments from ``start``, segment by segment,
    until the map fills (then ``latest_offset`` says how far it got); the records of ``aborted``
    transactions are left out."""
    offset_map = OffsetMap(max_entries)
    txns = CleanedTransactions(aborted)
    for position, segment in enumerate(dirty):
        next_start = dirty[position + 1].base_offset if position + 1 < len(dirty) else end
        for header, data in read_batches(segment.log_path, segment.size):
            if header.last_offset < start:
                continue
            if header.is_control:
                txns.on_control_batch(header, data)
            elif not txns.on_data_batch(header):
                base = header.base_offset
                for offset_delta, _, _, key, _, _, _ in record_spans(data, header)[1]:
                    if key is not None and base + offset_delta >= start:
                        if not offset_map.put(key, base + offset_delta):
                            return offset_map
            offset_map.latest_offset = max(offset_map.latest_offset, header.last_offset)
        offset_map.latest_offset = max(offset_map.latest_offset, next_start - 1)
    return offset_map


def _active_producers_of(log: "PartitionLog") -> dict[int, tuple[int, int]]:
    """Producer id -> (last offset of its last data batch or -1, epoch) (Kafka's
    lastRecordsOfActiveProducers): that batch, or with no data batch a marker of that epoch, keeps
    the producer's state, so it is emptied at most, never removed."""
    return {entry.producer_id: (entry.last_data_offset, entry.producer_epoch)
            for entry in log.producer_state.active_producers()}


# -- cleaning one group of segments into one -------------------------------------------------


@dataclass
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_emptied: int = 0
    segments_before: int = 0
    segments_after: int = 0


@dataclass
class BatchFilter:
    """MemoryRecords.filterTo with the cleaner's RecordFilter, for one round; ``txns`` is the
    transaction state of the group being cleaned (a new one per group, as Kafka's cleanSegments)."""

    offset_map: OffsetMap
    producers: dict[int, tuple[int, int]]  # active producer id -> (last data offset, epoch)
    upper_bound: int  # the round's first uncleanable offset
    now_ms: int
    delete_retention_ms: int
    stats: CleanStats
    txns: CleanedTransactions = field(default_factory=lambda: CleanedTransactions(()))

    def filter(self, header: BatchHeader, data: bytes) -> bytes | None:
        """The batch to write instead of ``data`` (maybe ``data`` itself), or None to drop it."""
        if header.is_control:
            return self._filter_marker(header, data)
        if self.txns.on_data_batch(header):  # an aborted transaction's records all go
            self.stats.records_read += header.records_count
            return self._emptied(header) if self._retains_empty(header) else None
        horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None
        body, spans = record_spans(data, header)
        base = header.base_offset
        kept_spans = [span for span in spans if self._keep(base + span[0], span[3], span[4], horizon)]
        self.stats.records_read += len(spans)
        self.stats.records_kept += len(kept_spans)
        if kept_spans:
            set_horizon = horizon is None and not all(span[4] for span in kept_spans)
            if len(kept_spans) == len(spans) and not set_horizon:
                return data
            retained = [span_record(body, header, span) for span in kept_spans]
            if set_horizon:
                horizon = self.now_ms + self.delete_retention_ms
            attributes = header.attributes & ~DELETE_HORIZON_FLAG
            if horizon is not None:
                attributes |= DELETE_HORIZON_FLAG
            if header.is_log_append_time:
                max_timestamp = header.max_timestamp
            else:
                max_timestamp = max(record.timestamp for record in retained)
            base_timestamp = horizon if horizon is not None else retained[0].timestamp
            return build_batch(header, retained, attributes=attributes, base_timestamp=base_timestamp,
                               max_timestamp=max_timestamp)
        return self._emptied(header) if self._retains_empty(header) else None

    def _filter_marker(self, header: BatchHeader, data: bytes) -> bytes | None:
        """Kafka's checkBatchRetention for a control batch: it may go once its transaction has no
        data left and its delete horizon passed; the first clean that finds it so stamps it."""
        removable = self.txns.on_control_batch(header, data)
        horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None
        if removable and horizon is not None and horizon <= self.now_ms:
            return self._emptied(header) if self._retains_empty(header) else None
        if not removable or horizon is not None or header.records_count == 0:
            return data
        retained = list(iter_records(data, header))
        return build_batch(header, retained, attributes=header.attributes | DELETE_HORIZON_FLAG,
                           base_timestamp=self.now_ms + self.delete_retention_ms, max_timestamp=header.max_timestamp)

    def _retains_empty(self, header: BatchHeader) -> bool:
        """An active producer's last batch (its sequence and epoch state), or the round's last."""
        if header.next_offset == self.upper_bound:
            return True
        last = self.producers.get(header.producer_id) if header.producer_id >= 0 else None
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset >= 0:
            return header.last_offset == last_data_offset
        return header.is_control and header.producer_epoch == epoch

    def _emptied(self, header: BatchHeader) -> bytes:
        self.stats.batches_emptied += 1
        attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG | CONTROL_FLAG)
        return build_batch(header, [], attributes=attributes & ~COMPRESSION_MASK,
                           base_timestamp=header.max_timestamp, max_timestamp=header.max_timestamp)

    def _keep(self, offset: int, key: bytes | None, has_value: bool, horizon: int | None) -> bool:
        if offset > self.offset_map.latest_offset:
            return True
        if key is None:
            return False
        if offset < self.offset_map.get(key):
            return False
        return has_value or horizon is None or self.now_ms < horizon


class _IndexWriter:
    """LogSegment's indexing rule (one entry per index.interval.bytes, time index on the running max
    timestamp, a final time index entry), into the cleaned segment's index files."""

    def __init__(self, cleaned: CleanedSegment, interval: int, max_index_bytes: int, files: FileCache) -> None:
        base = cleaned.base_offset
        self.offsets = OffsetIndex(str(cleaned.path(INDEX_SUFFIX, CLEANED_SUFFIX)), base, max_index_bytes, files)
        self.times = TimeIndex(str(cleaned.path(TIME_INDEX_SUFFIX, CLEANED_SUFFIX)), base, max_index_bytes, files)
        self.offsets.reset()
        self.times.reset()
        self.interval = interval
        self.bytes_since_entry = 0
        self.max_timestamp, self.offset_of_max = NO_TIMESTAMP, -1

    def add(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max = header.max_timestamp, header.last_offset
        if self.bytes_since_entry > self.interval:
            if not self.offsets.is_full:
                self.offsets.append(header.last_offset, position)
            self.times.maybe_append(self.max_timestamp, self.offset_of_max)
            self.bytes_since_entry = 0
        self.bytes_since_entry += header.size

    def finish(self) -> None:
        if self.max_timestamp > NO_TIMESTAMP:
            self.times.maybe_append(self.max_timestamp, self.offset_of_max, skip_full_check=True)
        self.offsets.write_pending()
        self.times.write_pending()


def write_cleaned_segment(directory: Path, group: list[SegmentSnapshot], batch_filter: BatchFilter, *,
                          index_interval_bytes: int, segment_index_bytes: int) -> CleanedSegment:
    """Clean ``group`` into ``<base>.log.cleaned`` and its indexes, fsynced (runs in a worker thread)."""
    cleaned = CleanedSegment(group[0].base_offset, 0, directory)
    files = FileCache(4)
    log_path = cleaned.path(LOG_SUFFIX, CLEANED_SUFFIX)
    fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        indexes = _IndexWriter(cleaned, index_interval_bytes, segment_index_bytes, files)
        pending: list[bytes] = []
        pending_bytes = 0
        position = 0
        for segment in group:
            for header, data in read_batches(segment.log_path, segment.size):
                batch_filter.stats.bytes_read += header.size
                kept = batch_filter.filter(header, data)
                if kept is None:
                    continue
                kept_header = read_header(kept)
                if kept_header.last_offset - cleaned.base_offset > INT32_MAX:
                    raise CleaningAborted(f"offset {kept_header.last_offset} overflows segment {cleaned.base_offset}")
                indexes.add(kept_header, position)
                pending.append(kept)
                pending_bytes += len(kept)
                position += len(kept)
                if pending_bytes >= _WRITE_BLOCK:
                    os.write(fd, b"".join(pending))
                    pending, pending_bytes = [], 0
        if pending:
            os.write(fd, b"".join(pending))
        indexes.finish()
        os.fsync(fd)
        for path in (cleaned.path(INDEX_SUFFIX, CLEANED_SUFFIX), cleaned.path(TIME_INDEX_SUFFIX, CLEANED_SUFFIX)):
            os.fsync(files.fd(str(path)))
        _write_cleaned_txn_index(cleaned, batch_filter.txns.cleaned_index)
    except BaseException:
        files.close()
        os.close(fd)
        cleaned.delete()
        raise
    files.close()
    os.close(fd)
    # Keep the last original segment's modification time (retention falls back to it).
    os.utime(log_path, ns=(group[-1].mtime_ns, group[-1].mtime_ns))
    cleaned.size = position
    batch_filter.stats.bytes_written += position
    return cleaned


def _write_cleaned_txn_index(cleaned: CleanedSegment, entries: list[AbortedTxn]) -> None:
    """The aborted transactions whose ABORT marker the cleaned segment keeps (none: no file)."""
    if not entries:
        return
    with open(cleaned.path(TXN_INDEX_SUFFIX, CLEANED_SUFFIX), "wb") as file:
        file.write(b"".join(txn.encode() for txn in entries))
        file.flush()
        os.fsync(file.fileno())


def group_segments_by_size(segments: list[SegmentSnapshot], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[SegmentSnapshot]]:
    """Cleaner.groupSegmentsBySize: consecutive segments whose logs fit segment.bytes and whose
    indexes fit segment.index.bytes, without relative offsets overflowing."""
    groups: list[list[SegmentSnapshot]] = []
    position = 0
    while position < len(segments):
        group = [segments[position]]
        log_size, index_size, time_index_size = group[0].size, group[0].index_bytes, group[0].time_index_bytes
        position += 1
        while position < len(segments):
            candidate = segments[position]
            last_offset = (segments[position + 1].base_offset - 1 if position + 1 < len(segments)
                           else first_uncleanable - 1)
            if not (log_size + candidate.size <= max_size
                    and index_size + candidate.index_bytes <= max_index_size
                    and time_index_size + candidate.time_index_bytes <= max_index_size
                    and (candidate.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += candidate.index_bytes
            time_index_size += candidate.time_index_bytes
            position += 1
        groups.append(group)
    return groups


# -- the cleaner -----------------------------------------------------------------------------


CleanStep = Generator[Callable[[], object], object, CleanStats]


class LogCleaner:
    """Cleans the compacted logs of one data dir, one log at a time, dirtiest first.

    ``run()`` is the broker's task. The reading, filtering and writing happen in a worker thread;
    choosing a log, checking nothing moved, swapping files and updating the in-memory segment list
    happen on the event loop thread, so appends, reads and retention never see a half-done swap.
    """

    def __init__(self, data_dir: Path, logs: Callable[[], Iterable["PartitionLog"]],
                 config: CleanerConfig | None = None, *,
                 data_dirs: Callable[[], Iterable[Path]] | None = None) -> None:
        """``data_dirs``: the (online) log directories, each with a cleaner-offset-checkpoint of
        its own logs, as Kafka's; by default ``data_dir`` alone."""
        self.data_dir = Path(data_dir)
        self._logs = logs
        self._data_dirs = data_dirs if data_dirs is not None else lambda: [self.data_dir]
        self.config = config if config is not None else CleanerConfig()
        self.checkpoints: dict[TopicPartition, int] = self._read_checkpoints()
        self.uncleanable: set[TopicPartition] = set()
        self.last_stats: CleanStats | None = None

    @classmethod
    def for_manager(cls, manager: "LogManager", broker_config: BrokerConfig | None = None) -> "LogCleaner":
        config = CleanerConfig() if broker_config is None else CleanerConfig.from_broker_config(broker_config)
        return cls(manager.data_dir, manager.logs_to_clean, config,
                   data_dirs=lambda: [log_dir.path for log_dir in manager.online_dirs()])

    def _read_checkpoints(self) -> dict[TopicPartition, int]:
        checkpoints: dict[TopicPartition, int] = {}
        for data_dir in self._data_dirs():
            try:
                checkpoints.update(read_checkpoint(data_dir / CLEANER_CHECKPOINT))
            except (ValueError, OSError) as error:
                logger.warning("Ignoring unreadable %s (logs will be cleaned from their start): %s",
                               data_dir / CLEANER_CHECKPOINT, error)
        return checkpoints

    def _write_checkpoints(self) -> None:
        dir_of = {(log.topic, log.partition): log.dir.parent for log in self._logs()}
        self.checkpoints = {key: offset for key, offset in self.checkpoints.items() if key in dir_of}
        if self._data_dirs() == [self.data_dir]:
            write_checkpoint(self.data_dir / CLEANER_CHECKPOINT, self.checkpoints)
            return
        for data_dir in self._data_dirs():
            write_checkpoint(data_dir / CLEANER_CHECKPOINT, {
                key: offset for key, offset in self.checkpoints.items() if dir_of[key] == Path(data_dir)})

    # -- choosing ---------------------------------------------------------------------------

    def cleanable_logs(self, now_ms: int) -> list[LogToClean]:
        """Every compacted log that has bytes, with its dirty section."""
        found = []
        for log in self._logs():
            key = (log.topic, log.partition)
            if not log.config.compacts or key in self.uncleanable:
                continue
            candidate = log_to_clean(log, self.checkpoints.get(key), now_ms)
            if candidate.force_checkpoint:
                self.checkpoints[key] = candidate.first_dirty_offset
                self._write_checkpoints()
            if candidate.total_bytes > 0:
                found.append(candidate)
        return found

    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        candidates = [c for c in self.cleanable_logs(now_ms) if c.should_clean]
        return max(candidates, key=lambda c: c.cleanable_ratio, default=None)

    # -- cleaning ---------------------------------------------------------------------------

    def clean_sync(self, candidate: LogToClean, now_ms: int) -> CleanStats:
        """Clean one log here and now (tools and tests); the broker uses ``clean``."""
        steps = self._clean_steps(candidate, now_ms)
        try:
            work = next(steps)
            while True:
                try:
                    result = work()
                except BaseException as error:  # noqa: BLE001 - handed to the generator to clean up
                    work = steps.throw(error)
                else:
                    work = steps.send(result)
        except StopIteration as done:
            return done.value

    async def clean(self, candidate: LogToClean, now_ms: int) -> CleanStats:
        """Clean one log, the heavy parts in a worker thread."""
        steps = self._clean_steps(candidate, now_ms)
        try:
            work = next(steps)
            while True:
                try:
                    result = await trio.to_thread.run_sync(work)
                except BaseException as error:  # noqa: BLE001
                    work = steps.throw(error)
                else:
                    work = steps.send(result)
        except StopIteration as done:
            return done.value

    def clean_until_done(self, now_ms: int, *, max_rounds: int = 100) -> int:
        """Clean every log that qualifies, dirtiest first, until none does; returns the rounds run."""
        rounds = 0
        while rounds < max_rounds:
            candidate = self.grab_filthiest(now_ms)
            if candidate is None:
                break
            self.clean_sync(candidate, now_ms)
            rounds += 1
        return rounds

    def _clean_steps(self, candidate: LogToClean, now_ms: int) -> CleanStep:
        """Cleaner.doClean as a generator: it yields the functions to run in a worker thread and
        does everything else (deciding, checking, swapping) itself, on the caller's thread."""
        log = candidate.log
        config = log.config
        stats = CleanStats()
        segments = log.segments()
        start, upper = candidate.first_dirty_offset, candidate.first_uncleanable_offset
        dirty = [SegmentSnapshot.of(s, with_indexes=False)
                 for i, s in enumerate(segments)
                 if s.base_offset < upper and (i + 1 == len(segments) or segments[i + 1].base_offset > start)]
        everything = [SegmentSnapshot.of(s, with_indexes=False) for s in segments]
        max_entries = self.config.max_map_entries
        producers = _active_producers_of(log)
        logger.info("Cleaning %s: offsets %d to %d are dirty (%.0f%% of %d bytes)", log.name, start, upper,
                    100 * candidate.cleanable_ratio, candidate.total_bytes)

        aborted_in_dirty = log.aborted_transactions(start, upper)

        def build() -> OffsetMap:
            return build_offset_map(dirty, start, upper, max_entries, aborted_in_dirty)

        offset_map = yield build
        end_offset = offset_map.latest_offset + 1
        self._check_still_there(log, [s for s in everything if s.segment is not segments[-1]])
        to_clean = [SegmentSnapshot.of(s) for s in log.segments()[:-1] if s.base_offset < end_offset]
        groups = group_segments_by_size(to_clean, config.segment_bytes, config.segment_index_bytes, upper)
        batch_filter = BatchFilter(offset_map, producers, upper, now_ms, config.delete_retention_ms, stats)
        stats.segments_before = len(to_clean)
        group_ends = [later[0].base_offset for later in groups[1:]] + [end_offset]
        aborted_by_group = [log.aborted_transactions(group[0].base_offset, group_end)
                            for group, group_end in zip(groups, group_ends)]
        for group, aborted in zip(groups, aborted_by_group):
            batch_filter.txns = CleanedTransactions(aborted)

            def write(group: list[SegmentSnapshot] = group) -> CleanedSegment:
                return write_cleaned_segment(log.dir, group, batch_filter,
                                             index_interval_bytes=config.index_interval_bytes,
                                             segment_index_bytes=config.segment_index_bytes)

            cleaned = yield write
            try:
                self._check_still_there(log, group)
                self._swap_in(log, group, cleaned)
            except CleaningAborted:
                cleaned.delete()
                raise
            stats.segments_after += 1
        self.checkpoints[(log.topic, log.partition)] = end_offset
        self._write_checkpoints()
        self.last_stats = stats
        logger.info("Cleaned %s up to offset %d: %d segments into %d, %d of %d records kept, %d -> %d bytes",
                    log.name, end_offset, stats.segments_before, stats.segments_after, stats.records_kept,
                    stats.records_read, stats.bytes_read, stats.bytes_written)
        return stats

    def _check_still_there(self, log: "PartitionLog", snapshots: list[SegmentSnapshot]) -> None:
        if not any(current is log for current in self._logs()):
            raise CleaningAborted(f"{log.name} is no longer open")
        current = {id(segment): segment for segment in log.segments()}
        for snapshot in snapshots:
            segment = current.get(id(snapshot.segment))
            if segment is None or segment.size != snapshot.size:
                raise CleaningAborted(f"segment {snapshot.base_offset} of {log.name} changed during cleaning")

    @staticmethod
    def _swap_in(log: "PartitionLog", group: list[SegmentSnapshot], cleaned: CleanedSegment) -> None:
        old = [snapshot.segment for snapshot in group]
        swap_in(old, cleaned)
        log.replace_segments(old, cleaned.base_offset)

    # -- the broker's task ------------------------------------------------------------------

    async def run_once(self, now_ms: int | None = None) -> bool:
        """Clean the dirtiest log that qualifies; False when none did."""
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        candidate = self.grab_filthiest(now)
        if candidate is None:
            return False
        key = (candidate.log.topic, candidate.log.partition)
        try:
            await self.clean(candidate, now)
        except CleaningAborted as aborted:
            logger.info("Cleaning of %s abandoned, will retry: %s", candidate.log.name, aborted)
        except CorruptSegment as damage:
            logger.error("The log cleaner found damaged data in %s: %s. The partition is marked uncleanable "
                         "and left as it is (nothing is compacted away) until the broker restarts; check the "
                         "disk, and restore the partition from a replica if it has one.", candidate.log.name, damage)
            self.uncleanable.add(key)
        except Exception:
            # Kafka marks the partition uncleanable and carries on with the others.
            logger.exception("Unexpected error cleaning %s; marking it uncleanable", candidate.log.name)
            self.uncleanable.add(key)
        return True

    async def run(self) -> None:
        """log.cleaner.enable: clean while there is work, else sleep log.cleaner.backoff.ms."""
        if not self.config.enable:
            logger.info("The log cleaner is disabled (log.cleaner.enable=false); compacted topics will grow")
            return
        while True:
            if not await self.run_once():
                await trio.sleep(self.config.backoff_ms / 1000)
            else:
                await trio.sleep(0)
