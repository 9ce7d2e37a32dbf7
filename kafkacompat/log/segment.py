"""One log segment: ``<base>.log`` of RecordBatch v2 bytes plus its ``.index`` and ``.timeindex``.

Everything here is per batch: batch headers are read from the file (a block at a time) to find
positions; records are decoded only to answer a timestamp query inside one batch.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kafkacompat.log.filecache import FileCache
from kafkacompat.log.index import NO_TIMESTAMP, IndexCorruptError, OffsetIndex, TimeIndex
from kafkacompat.log.txn_index import TransactionIndex
from kafkacompat.wire.chunks import FileRegion
from kafkacompat.wire.records import (
    CURRENT_MAGIC, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_ok, read_header, record_spans,
)

logger = logging.getLogger("kafkacompat.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"  # written by Kafka for transactions; removed with its segment

MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
INT32_MAX = 2**31 - 1
_SCAN_BLOCK = 8192  # bytes read at a time while walking batch headers
# Headers of the last appended batches kept for reads at the log end: a consumer waiting there
# reads the last one or two. Each costs ~340 bytes (a BatchHeader and its ints) per partition.
_TAIL_BATCHES = 16


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str, suffix: str) -> int | None:
    """The base offset of ``00000000000000000042<suffix>``, or None for any other name."""
    stem = name[: -len(suffix)]
    if not name.endswith(suffix) or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_FILE_READ_BLOCK = 1 << 20  # batches_in_file reads this much at a time


def batches_in_file(path: str, size: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each whole batch in the first ``size`` bytes of a .log, read with a
    descriptor of its own (usable from any thread; FileNotFoundError if the file is gone). Each
    header's position is 0: relative to its bytes. Stops quietly at anything that does not frame."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        position = 0
        block, block_start = b"", 0
        while size - position >= HEADER_SIZE:
            in_block = position - block_start
            if in_block + HEADER_SIZE > len(block):
                block = os.pread(fd, min(_FILE_READ_BLOCK, size - position), position)
                block_start, in_block = position, 0
                if len(block) < HEADER_SIZE:
                    return
            header = read_header(block, in_block)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > size:
                return
            if in_block + header.size <= len(block):
                data = block[in_block:in_block + header.size]
            else:
                data = os.pread(fd, header.size, position)
                if len(data) < header.size:
                    return
            header.position = 0
            yield header, data
            position += header.size
    finally:
        os.close(fd)


@dataclass
class ScanOutcome:
    """What a recovery or rebuild scan found: the valid prefix and why it stopped early."""

    valid_bytes: int
    invalid_bytes: int
    problem: str | None  # e.g. "a torn batch"; None when the whole file is valid
    problem_offset: int  # the offset the invalid batch would have had


class LogSegment:
    """A segment's files, its sparse indexes, and the per-segment state Kafka keeps in memory."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        files: FileCache,
        *,
        label: str,
        index_interval_bytes: int,
        segment_index_bytes: int,
        size: int,
        created_ms: int,
    ) -> None:
        self.base_offset = base_offset
        self.label = label  # "<topic>-<partition>", for messages
        stem = os.path.join(directory, f"{base_offset:020d}")  # no pathlib: 10,000 partitions load these
        self.log_path = stem + LOG_SUFFIX
        self.index_path = stem + INDEX_SUFFIX
        self.time_index_path = stem + TIME_INDEX_SUFFIX
        self.txn_index = TransactionIndex(stem + TXN_INDEX_SUFFIX, label)
        self.size = size
        # Offset after the last batch; None until somebody needs it for a loaded segment.
        self.next_offset: int | None = None
        self.created_ms = created_ms
        self._files = files
        self._index_interval_bytes = index_interval_bytes
        self._offset_index = OffsetIndex(self.index_path, base_offset, segment_index_bytes, files)
        self._time_index = TimeIndex(self.time_index_path, base_offset, segment_index_bytes, files)
        self._bytes_since_index_entry = 0
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self._max_timestamp_known = False
        self._first_batch_timestamp: int | None = None
        self._first_batch_timestamp_known = False
        # The tail: headers (file positions) of the batches appended last, so that a read at or
        # near the log end needs no header scan from the last sparse index entry. Invariant:
        # every batch of the segment before _tail_headers[0] has a last offset below _tail_floor,
        # and _tail_headers holds every batch after those, in order. None: no tail is known.
        self._tail_floor: int | None = None
        self._tail_last_offsets: list[int] = []
        self._tail_headers: list[BatchHeader] = []

    # -- life cycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, files: FileCache, *, label: str,
               index_interval_bytes: int, segment_index_bytes: int) -> "LogSegment":
        segment = cls(directory, base_offset, files, label=label, index_interval_bytes=index_interval_bytes,
                      segment_index_bytes=segment_index_bytes, size=0, created_ms=now_ms())
        for path in (segment.log_path, segment.index_path, segment.time_index_path):
            files.create(path)
        segment._offset_index.loaded = segment._time_index.loaded = True
        segment.next_offset = base_offset
        segment._max_timestamp_known = segment._first_batch_timestamp_known = True
        return segment

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int, files: FileCache, *, label: str,
                      index_interval_bytes: int, segment_index_bytes: int) -> "LogSegment":
        """Attach to existing files; indexes load lazily (and are rebuilt if they do not load)."""
        segment = cls(directory, base_offset, files, label=label, index_interval_bytes=index_interval_bytes,
                      segment_index_bytes=segment_index_bytes, size=0, created_ms=now_ms())
        segment.size = os.stat(segment.log_path).st_size
        return segment

    @property
    def indexes_missing(self) -> bool:
        return not (os.path.exists(self.index_path) and os.path.exists(self.time_index_path))

    @property
    def name(self) -> str:
        return os.path.basename(self.log_path)

    def become_inactive(self) -> None:
        """On roll: record the segment's max timestamp in the time index (as Kafka does) and
        write out the indexes."""
        self._append_final_time_index_entry()
        self._write_pending_index_entries()

    def close(self) -> None:
        if self._time_index.loaded and self._max_timestamp_known:
            self._append_final_time_index_entry()
        self._write_pending_index_entries()
        try:
            self.txn_index.write_unwritten()
        except OSError as error:
            logger.error("%s: the transaction index %s lacks entries that could not be written (%s); a restart "
                         "without recovery of this segment would miss them", self.label, self.name, error)
        for path in (self.log_path, self.index_path, self.time_index_path):
            self._files.forget(path)

    def _write_pending_index_entries(self) -> None:
        self._offset_index.write_pending()
        self._time_index.write_pending()

    def delete_files(self) -> None:
        self._offset_index.discard()
        self._time_index.discard()
        self.txn_index.delete()
        for path in (self.log_path, self.index_path, self.time_index_path):
            self._files.forget(path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def fsync(self) -> None:
        """Write out pending index entries and flush the files to disk.

        Safe from a worker thread: it opens its own descriptors rather than use the FileCache.
        """
        for path, index in ((self.log_path, None), (self.index_path, self._offset_index),
                            (self.time_index_path, self._time_index)):
            try:
                fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                continue  # deleted meanwhile (retention, truncation): nothing left to flush
            try:
                if index is not None:
                    index.write_pending(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
        self.txn_index.fsync()

    # -- indexes ----------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        if self._offset_index.loaded and self._time_index.loaded:
            return
        try:
            self._offset_index.load(self.size)
            self._time_index.load(self.size)
        except (IndexCorruptError, OSError) as error:
            logger.warning("Rebuilding the indexes of %s %s: %s", self.label, self.name, error)
            self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        """Re-derive both indexes from the batch headers in the .log (the log itself is trusted)."""
        outcome = self._scan(verify_crc=False)
        if outcome.problem is not None:
            logger.warning("%s %s: %s at byte %d (offset %d) ends the readable batches; %d bytes after it are ignored",
                           self.label, self.name, outcome.problem, outcome.valid_bytes, outcome.problem_offset,
                           outcome.invalid_bytes)

    def recover(self) -> ScanOutcome:
        """Validate every batch (framing, CRC, offsets), rebuild the indexes, cut an invalid tail."""
        outcome = self._scan(verify_crc=True)
        if outcome.invalid_bytes:
            os.ftruncate(self._files.fd(self.log_path), outcome.valid_bytes)
            self.size = outcome.valid_bytes
            self._first_batch_timestamp_known = False
        return outcome

    def last_indexed_position(self) -> int:
        self.ensure_indexes()
        return self._offset_index.last_entry()[1]

    def tail_scan_start(self) -> int:
        """A batch boundary from which to walk the headers to the end, as cheaply as it can be
        had: the last offset index entry, read without loading the indexes when they are not yet
        (position 0 for a segment too small to have one, by the index.interval.bytes rule)."""
        if not self._offset_index.loaded:
            if self.size <= self._index_interval_bytes:
                return 0
            position = self._offset_index.peek_last_position(self.size)
            if position is not None:
                return position
        return self.last_indexed_position()

    def offset_index_entries(self) -> list[tuple[int, int]]:
        self.ensure_indexes()
        return self._offset_index.entries()

    def time_index_entries(self) -> list[tuple[int, int]]:
        self.ensure_indexes()
        return self._time_index.entries()

    @property
    def offset_index_full(self) -> bool:
        self.ensure_indexes()
        return self._offset_index.is_full

    @property
    def time_index_full(self) -> bool:
        self.ensure_indexes()
        return self._time_index.is_full

    def _scan(self, *, verify_crc: bool) -> ScanOutcome:
        self._forget_tail()
        self._offset_index.reset()
        self._time_index.reset()
        self._bytes_since_index_entry = 0
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, -1
        position, next_offset, problem = 0, self.base_offset, None
        if self.size > 0:
            with mmap.mmap(self._files.fd(self.log_path), self.size, access=mmap.ACCESS_READ) as data:
                while position < self.size:
                    header, problem = self._check_batch(data, position, next_offset, verify_crc)
                    if header is None:
                        break
                    self._index_batch(header, position)
                    next_offset = header.next_offset
                    position += header.size
        self.next_offset = next_offset
        self._max_timestamp_known = True
        self._append_final_time_index_entry()
        self._write_pending_index_entries()
        return ScanOutcome(position, self.size - position, problem, next_offset)

    def _check_batch(self, data: mmap.mmap, position: int, min_offset: int,
                     verify_crc: bool) -> tuple[BatchHeader | None, str | None]:
        remaining = self.size - position
        if remaining < HEADER_SIZE:
            return None, "a zero-filled tail" if not data[position:self.size].strip(b"\0") else "a torn batch"
        header = read_header(data, position)
        if header.batch_length < MIN_BATCH_LENGTH or header.magic != CURRENT_MAGIC:
            if not data[position:position + HEADER_SIZE].strip(b"\0"):
                return None, "a zero-filled tail"
            return None, "an invalid batch header"
        if header.size > remaining:
            return None, "a torn batch"
        if verify_crc and not crc_ok(data, header):
            return None, "a corrupt batch (CRC mismatch)"
        if (header.last_offset_delta < 0 or header.base_offset < min_offset
                or header.last_offset - self.base_offset > INT32_MAX):
            return None, "a batch with out-of-order offsets"
        return header, None

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        """Kafka's indexing rule, applied per batch on append and on rebuild alike."""
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index_entry > self._index_interval_bytes:
            if not self._offset_index.is_full:
                self._offset_index.append(header.last_offset, position)
            self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size

    def _append_final_time_index_entry(self) -> None:
        self._ensure_max_timestamp()
        if self._max_timestamp > NO_TIMESTAMP:
            self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)

    # -- append -----------------------------------------------------------------------------

    def append(self, records: memoryview, headers: list[BatchHeader]) -> None:
        """Write validated batches (header positions relative to ``records``) at the end."""
        self.ensure_indexes()
        self._ensure_max_timestamp()
        position = self.size
        self._write_at(records, position)
        for header in headers:
            self._index_batch(header, position + header.position)
        if position == 0:
            self._first_batch_timestamp = max(header.max_timestamp for header in headers)
            self._first_batch_timestamp_known = True
        self._remember_tail(records, headers, position)
        self.size = position + len(records)
        self.next_offset = headers[-1].next_offset

    def _remember_tail(self, records: memoryview, headers: list[BatchHeader], position: int) -> None:
        if self._tail_floor is None:
            if self.next_offset is None:
                return
            self._tail_floor = self.next_offset  # every batch so far ends below it
        last_offsets, tail = self._tail_last_offsets, self._tail_headers
        for header in headers:
            # A copy read from the written bytes: the caller's header objects stay its own.
            copy = read_header(records, header.position)
            copy.position += position
            last_offsets.append(copy.last_offset)
            tail.append(copy)
        if len(tail) > _TAIL_BATCHES:
            drop = len(tail) - _TAIL_BATCHES // 2
            self._tail_floor = last_offsets[drop - 1] + 1
            del last_offsets[:drop], tail[:drop]

    def _forget_tail(self) -> None:
        self._tail_floor = None
        self._tail_last_offsets.clear()
        self._tail_headers.clear()

    def _write_at(self, data: memoryview, position: int) -> None:
        fd = self._files.fd(self.log_path)
        view = memoryview(data).cast("B")
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], position + written)
        except OSError:
            os.ftruncate(fd, position)  # leave no partial batch behind
            raise

    # -- timestamps -------------------------------------------------------------------------

    def _ensure_max_timestamp(self) -> None:
        if not self._max_timestamp_known:
            self.ensure_indexes()
            self._max_timestamp, self._offset_of_max_timestamp = self._time_index.last_entry()
            self._max_timestamp_known = True

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(largest batch max timestamp, last offset of the first batch that has it)."""
        self._ensure_max_timestamp()
        return self._max_timestamp, self._offset_of_max_timestamp

    def largest_timestamp(self) -> int:
        """What retention compares: the max timestamp, or the file's mtime if there is none."""
        max_timestamp, _ = self.max_timestamp_and_offset
        if max_timestamp >= 0:
            return max_timestamp
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def time_waited_for_roll(self, now: int, incoming_max_timestamp: int) -> int:
        """Kafka's segment.ms clock: from the first batch's timestamp, else from creation time."""
        first = self._first_timestamp()
        if first is not None and first >= 0:
            return incoming_max_timestamp - first
        return now - self.created_ms

    def _first_timestamp(self) -> int | None:
        if not self._first_batch_timestamp_known:
            first = next(self.headers_from(0), None)
            self._first_batch_timestamp = first.max_timestamp if first else None
            self._first_batch_timestamp_known = True
        return self._first_batch_timestamp

    # -- reading ----------------------------------------------------------------------------

    def headers_from(self, position: int, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the whole batches from ``position`` (a batch boundary) up to ``end``.

        Each header's ``position`` is its file position. Stops quietly at anything that does not
        frame as a batch.
        """
        end = self.size if end is None else end
        block, block_start = b"", position
        while end - position >= HEADER_SIZE:
            in_block = position - block_start
            if in_block + HEADER_SIZE > len(block):
                block = os.pread(self._files.fd(self.log_path), min(_SCAN_BLOCK, end - position), position)
                block_start, in_block = position, 0
                if len(block) < HEADER_SIZE:
                    return
            header = read_header(block, in_block)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end:
                return
            header.position = position
            yield header
            position += header.size

    def find_batch(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset``: from the remembered tail when
        ``offset`` is that recent, else via the offset index. Treat the header as read-only."""
        floor = self._tail_floor
        if floor is not None and offset >= floor:
            found = bisect_left(self._tail_last_offsets, offset)
            return self._tail_headers[found] if found < len(self._tail_headers) else None
        self.ensure_indexes()
        try:
            return self._find_batch_from_index(offset)
        except IndexCorruptError as error:
            logger.warning("Rebuilding the indexes of %s %s: %s", self.label, self.name, error)
            self.rebuild_indexes()
            return self._find_batch_from_index(offset)

    def _find_batch_from_index(self, offset: int) -> BatchHeader | None:
        """As find_batch; IndexCorruptError when the indexed position does not hold the indexed batch."""
        indexed_offset, position = self._offset_index.lookup(offset)
        headers = self.headers_from(position)
        if position > 0:
            first = next(headers, None)
            if (first is None or first.magic != CURRENT_MAGIC
                    or not self.base_offset <= first.base_offset <= indexed_offset):
                raise IndexCorruptError(
                    f"{os.path.basename(self.index_path)} maps offset {indexed_offset} to position {position}, "
                    "which does not hold that batch"
                )
            if first.last_offset >= offset:
                return first
        for header in headers:
            if header.last_offset >= offset:
                return header
        return None

    def end_of_whole_batches(self, start: int, limit: int) -> int:
        """The last batch boundary at or before ``limit``, walking from boundary ``start``."""
        if limit >= self.size:
            return self.size
        _, indexed_position = self._offset_index.lookup_position(limit)
        end = max(indexed_position, start)
        for header in self.headers_from(end, limit):
            end = header.position + header.size
        return end

    def region(self, start: int, end: int) -> FileRegion:
        """Bytes [start, end) of the .log as a FileRegion that owns its own descriptor."""
        return FileRegion(self._files.dup(self.log_path), start, end - start)

    def read_batch(self, header: BatchHeader) -> bytes:
        return os.pread(self._files.fd(self.log_path), header.size, header.position)

    def search_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp`` and offset >= ``min_offset``."""
        self.ensure_indexes()
        _, indexed_offset = self._time_index.lookup(timestamp)
        _, position = self._offset_index.lookup(max(indexed_offset, min_offset))
        for header in self.headers_from(position):
            if header.max_timestamp >= timestamp and header.last_offset >= min_offset:
                for offset, record_timestamp in record_offsets_and_timestamps(self.read_batch(header)):
                    if record_timestamp >= timestamp and offset >= min_offset:
                        return offset, record_timestamp
        return None

    def offset_of_timestamp(self, timestamp: int, near_offset: int) -> int | None:
        """Offset of the first record stamped ``timestamp`` in the first batch whose max timestamp
        it is, searching from the indexed position of ``near_offset`` (ListOffsets MAX_TIMESTAMP)."""
        self.ensure_indexes()
        _, position = self._offset_index.lookup(near_offset)
        for header in self.headers_from(position):
            if header.max_timestamp == timestamp:
                for offset, record_timestamp in record_offsets_and_timestamps(self.read_batch(header)):
                    if record_timestamp == timestamp:
                        return offset
                return header.base_offset
        return None

    # -- truncation -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> tuple[int, int]:
        """Drop every batch that holds an offset >= ``offset``.

        Returns (bytes dropped, this segment's next offset afterwards). A batch that straddles
        ``offset`` goes entirely, so the next offset can end up below ``offset``.
        """
        self.ensure_indexes()
        self.txn_index.truncate_to(offset)
        cut = self.find_batch(offset)
        self._forget_tail()
        if cut is None:
            self.next_offset = offset
            return 0, offset
        dropped = self.size - cut.position
        next_offset = min(offset, cut.base_offset)
        self._offset_index.truncate_to_position(cut.position)
        self._time_index.truncate_to_offset(next_offset)
        os.ftruncate(self._files.fd(self.log_path), cut.position)
        self.size = cut.position
        self.next_offset = next_offset
        self._bytes_since_index_entry = 0
        if self.size == 0:
            self.created_ms = now_ms()
            self._first_batch_timestamp, self._first_batch_timestamp_known = None, True
        self._recompute_max_timestamp()
        return dropped, next_offset

    def _recompute_max_timestamp(self) -> None:
        """The last time index entry, then whatever the batches after it add (Kafka does the same)."""
        self._max_timestamp, self._offset_of_max_timestamp = self._time_index.last_entry()
        if self._max_timestamp == NO_TIMESTAMP:
            self._offset_of_max_timestamp = -1
        _, position = self._offset_index.lookup(max(self._offset_of_max_timestamp, self.base_offset))
        for header in self.headers_from(position):
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = header.max_timestamp, header.last_offset
        self._max_timestamp_known = True

    def info(self) -> dict[str, object]:
        return {"base_offset": self.base_offset, "size": self.size, "path": self.log_path}


def record_offsets_and_timestamps(batch: bytes) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record in one batch, decompressing it if needed.

    Used only by timestamp lookups, never by append or fetch. In a LogAppendTime batch every
    record reports the batch's max timestamp, as Kafka does.
    """
    header = read_header(batch)
    _, spans = record_spans(batch, header)
    for offset_delta, timestamp_delta, *_ in spans:
        if header.is_log_append_time:
            yield header.base_offset + offset_delta, header.max_timestamp
        else:
            yield header.base_offset + offset_delta, header.base_timestamp + timestamp_delta
