"""Sparse segment indexes in Kafka's on-disk formats.

``<base>.index``: 8-byte entries (int32 offset - base, int32 position in the .log), big-endian.
``<base>.timeindex``: 12-byte entries (int64 timestamp, int32 offset - base), big-endian.

Entries live in memory (arrays, binary-searched). New ones reach the file in small groups and
all of them on roll, close and flush, so a closed or flushed index file holds exactly its valid
entries: there is no preallocation and nothing to trim. An unflushed tail of entries lost in a
crash only makes the index sparser, and segments past the recovery point are rebuilt anyway.
Kafka preallocates its index files, so a zero-filled tail is cut off when a file is loaded. An index that does not load cleanly raises IndexCorruptError, and its
segment rebuilds it from the .log.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
import threading
from array import array
from bisect import bisect_right

from kafkacompat.log.filecache import FileCache

NO_TIMESTAMP = -1
_BIG_ENDIAN = sys.byteorder == "big"
_TIME_ENTRY = struct.Struct(">qi")
_WRITE_BATCH = 64  # new entries kept in memory before they are written to the file together


class IndexCorruptError(Exception):
    """An index file that cannot be trusted; the segment rebuilds it from its log."""


def _strictly_increasing(values: array) -> bool:
    return all(map(operator.lt, values, values[1:]))


def _non_decreasing(values: array) -> bool:
    return all(map(operator.le, values, values[1:]))


class _IndexFile:
    """File plumbing shared by both indexes: load, buffered append, truncate.

    New entries are written to the file in groups of _WRITE_BATCH, and all of them on roll, close
    and flush, which saves a syscall per entry. ``write_pending`` may run in flush's worker thread,
    so every change to the entries happens under ``_lock``.
    """

    ENTRY_SIZE = 0

    def __init__(self, path: str, base_offset: int, files: FileCache) -> None:
        self.path = path
        self.base_offset = base_offset
        self._files = files
        self.loaded = False
        self._on_disk = 0  # entries [0, _on_disk) are in the file
        self._discarded = False  # the files are being deleted: write nothing more
        self._lock = threading.Lock()

    def __len__(self) -> int:
        raise NotImplementedError

    def _encode(self, start: int, end: int) -> bytes:
        """Entries [start, end) in the file format."""
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    def _read_entries_bytes(self) -> bytes:
        """The file's whole entries, without a zero-filled (preallocated) tail."""
        try:
            fd = self._files.fd(self.path)
        except FileNotFoundError:
            raise IndexCorruptError(f"{os.path.basename(self.path)} is missing") from None
        length = os.fstat(fd).st_size
        data = os.pread(fd, length, 0)
        used = len(data.rstrip(b"\0"))
        valid = -(-used // self.ENTRY_SIZE) * self.ENTRY_SIZE
        if valid > length:
            raise IndexCorruptError(
                f"{os.path.basename(self.path)} holds {length} bytes, not a whole number of {self.ENTRY_SIZE}-byte entries"
            )
        if valid != length:
            os.ftruncate(fd, valid)
        return data[:valid]

    def _appended(self) -> None:
        """Called under the lock after each new entry."""
        if len(self) - self._on_disk >= _WRITE_BATCH:
            self._write_pending_locked(self._files.fd(self.path))

    def write_pending(self, fd: int | None = None) -> None:
        """Write the entries not yet in the file. A worker thread passes its own ``fd``: the
        FileCache belongs to the event loop thread."""
        with self._lock:
            if not self._discarded and len(self) > self._on_disk:
                self._write_pending_locked(self._files.fd(self.path) if fd is None else fd)

    def _write_pending_locked(self, fd: int) -> None:
        end = len(self)
        if end > self._on_disk:
            os.pwrite(fd, self._encode(self._on_disk, end), self._on_disk * self.ENTRY_SIZE)
            self._on_disk = end

    def _truncated_to(self, entries: int) -> None:
        """Called under the lock once the in-memory entries were cut to ``entries``."""
        if self._on_disk > entries:
            os.ftruncate(self._files.fd(self.path), entries * self.ENTRY_SIZE)
            self._on_disk = entries

    def _loaded(self, entries: int) -> None:
        self._on_disk = entries
        self.loaded = True

    def reset(self) -> None:
        """Empty the index, in memory and on disk (the file is created if it was deleted)."""
        with self._lock:
            self._clear()
            self._files.create(self.path)
            self._on_disk = 0
            self._discarded = False
            self.loaded = True

    def discard(self) -> None:
        """The segment's files are about to be deleted: never write to them again."""
        with self._lock:
            self._discarded = True

    def relative(self, offset: int) -> int:
        return offset - self.base_offset


class OffsetIndex(_IndexFile):
    """Maps the last offset of an indexed batch to the file position where that batch starts."""

    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, files: FileCache) -> None:
        super().__init__(path, base_offset, files)
        self.max_entries = max_index_bytes // self.ENTRY_SIZE
        self._relative_offsets = array("i")
        self._positions = array("i")

    def __len__(self) -> int:
        return len(self._positions)

    @property
    def is_full(self) -> bool:
        return len(self._positions) >= self.max_entries

    def load(self, log_size: int) -> None:
        data = self._read_entries_bytes()
        both = array("i")
        both.frombytes(data)
        if not _BIG_ENDIAN:
            both.byteswap()
        relative_offsets, positions = both[0::2], both[1::2]
        self._check(relative_offsets, positions, log_size)
        with self._lock:
            self._relative_offsets, self._positions = relative_offsets, positions
            self._loaded(len(positions))

    def _check(self, relative_offsets: array, positions: array, log_size: int) -> None:
        name = os.path.basename(self.path)
        if not positions:
            return
        if relative_offsets[0] < 0 or positions[0] < 0:
            raise IndexCorruptError(f"{name} has a negative first entry")
        if positions[-1] >= log_size:
            raise IndexCorruptError(f"{name} points at position {positions[-1]}, past the log's {log_size} bytes")
        if not (_strictly_increasing(relative_offsets) and _strictly_increasing(positions)):
            raise IndexCorruptError(f"{name} has entries out of order")

    def append(self, offset: int, position: int) -> None:
        with self._lock:
            self._relative_offsets.append(offset - self.base_offset)
            self._positions.append(position)
            self._appended()

    def _encode(self, start: int, end: int) -> bytes:
        both = array("i", bytes(8 * (end - start)))
        both[0::2] = self._relative_offsets[start:end]
        both[1::2] = self._positions[start:end]
        if not _BIG_ENDIAN:
            both.byteswap()
        return both.tobytes()

    def _clear(self) -> None:
        self._relative_offsets = array("i")
        self._positions = array("i")

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= ``offset``; (base, 0) if none."""
        slot = bisect_right(self._relative_offsets, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[slot], self._positions[slot]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry with position <= ``position``; (base, 0) if none."""
        slot = bisect_right(self._positions, position) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[slot], self._positions[slot]

    def last_entry(self) -> tuple[int, int]:
        if not self._positions:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[-1], self._positions[-1]

    def peek_last_position(self, log_size: int) -> int | None:
        """The last entry's position read from the file without loading the index (a start
        after a clean shutdown only needs the tail); None when the file is missing, not whole
        entries, or its last entry is not plausible (the caller loads the index instead)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        try:
            length = os.fstat(fd).st_size
            if length % self.ENTRY_SIZE:
                return None
            if not length:
                return 0
            relative, position = struct.unpack(">ii", os.pread(fd, self.ENTRY_SIZE, length - self.ENTRY_SIZE))
        finally:
            os.close(fd)
        if relative < 0 or not 0 <= position < log_size or (relative == 0 and position == 0 and length > 8):
            return None  # a zero-filled (preallocated) tail, or garbage
        return position

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries that point at ``position`` or beyond."""
        with self._lock:
            keep = bisect_right(self._positions, position - 1)
            del self._relative_offsets[keep:]
            del self._positions[keep:]
            self._truncated_to(keep)

    def entries(self) -> list[tuple[int, int]]:
        """All (offset, position) entries, absolute offsets (tools and tests)."""
        return [(self.base_offset + r, p) for r, p in zip(self._relative_offsets, self._positions)]


class TimeIndex(_IndexFile):
    """Entry (T, O): every record with a timestamp above T sits after offset O.

    O is the last offset of the batch that first reached the segment's running max timestamp T.
    """

    ENTRY_SIZE = 12

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, files: FileCache) -> None:
        super().__init__(path, base_offset, files)
        self.max_entries = max_index_bytes // self.ENTRY_SIZE
        self._timestamps = array("q")
        self._relative_offsets = array("i")

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        # Kafka keeps the last slot for the entry written when the segment is rolled or closed.
        return len(self._timestamps) >= self.max_entries - 1

    def load(self, log_size: int) -> None:  # noqa: ARG002 - same signature as OffsetIndex.load
        data = self._read_entries_bytes()
        timestamps, relative_offsets = array("q"), array("i")
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            timestamps.append(timestamp)
            relative_offsets.append(relative)
        name = os.path.basename(self.path)
        if relative_offsets and min(relative_offsets) < 0:
            raise IndexCorruptError(f"{name} has a negative offset")
        if not (_strictly_increasing(timestamps) and _non_decreasing(relative_offsets)):
            raise IndexCorruptError(f"{name} has entries out of order")
        with self._lock:
            self._timestamps, self._relative_offsets = timestamps, relative_offsets
            self._loaded(len(timestamps))

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (NO_TIMESTAMP, base) if empty."""
        if not self._timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[-1], self.base_offset + self._relative_offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp grew; a full index silently stays as it is."""
        last_timestamp, last_offset = self.last_entry()
        if timestamp <= last_timestamp or (self._timestamps and offset < last_offset):
            return
        if self.is_full and not skip_full_check:
            return
        with self._lock:
            self._timestamps.append(timestamp)
            self._relative_offsets.append(offset - self.base_offset)
            self._appended()

    def _encode(self, start: int, end: int) -> bytes:
        return b"".join(_TIME_ENTRY.pack(t, r) for t, r in
                        zip(self._timestamps[start:end], self._relative_offsets[start:end]))

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._relative_offsets = array("i")

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``; (NO_TIMESTAMP, base) if none."""
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[slot], self.base_offset + self._relative_offsets[slot]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries whose offset is ``offset`` or larger."""
        with self._lock:
            keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
            del self._timestamps[keep:]
            del self._relative_offsets[keep:]
            self._truncated_to(keep)

    def entries(self) -> list[tuple[int, int]]:
        """All (timestamp, offset) entries, absolute offsets (tools and tests)."""
        return [(t, self.base_offset + r) for t, r in zip(self._timestamps, self._relative_offsets)]
