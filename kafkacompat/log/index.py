"""Sparse segment indexes in Kafka's on-disk formats.

``<base>.index``: 8-byte entries (int32 offset - base, int32 position in the .log), big-endian.
``<base>.timeindex``: 12-byte entries (int64 timestamp, int32 offset - base), big-endian.

Entries live in memory (arrays, binary-searched) and are written through to the file as they are
appended, so our files always hold exactly the valid entries: there is no preallocation and so
nothing to trim on close. Kafka preallocates its index files, so a zero-filled tail is cut off
when a file is loaded. An index that does not load cleanly raises IndexCorruptError, and its
segment rebuilds it from the .log.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_right

from kafkacompat.log.filecache import FileCache

NO_TIMESTAMP = -1
_BIG_ENDIAN = sys.byteorder == "big"
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """An index file that cannot be trusted; the segment rebuilds it from its log."""


def _strictly_increasing(values: array) -> bool:
    return all(map(operator.lt, values, values[1:]))


def _non_decreasing(values: array) -> bool:
    return all(map(operator.le, values, values[1:]))


class _IndexFile:
    """File plumbing shared by both indexes: load, write-through append, truncate."""

    ENTRY_SIZE = 0

    def __init__(self, path: str, base_offset: int, files: FileCache) -> None:
        self.path = path
        self.base_offset = base_offset
        self._files = files
        self.loaded = False
        # False while a rebuild appends many entries; persist() then writes them in one go.
        self.write_through = True

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

    def _write_entry(self, index: int, entry: bytes) -> None:
        if self.write_through:
            os.pwrite(self._files.fd(self.path), entry, index * self.ENTRY_SIZE)

    def _truncate_file(self, entries: int) -> None:
        os.ftruncate(self._files.fd(self.path), entries * self.ENTRY_SIZE)

    def _rewrite_file(self, content: bytes) -> None:
        fd = self._files.fd(self.path)
        os.ftruncate(fd, 0)
        if content:
            os.pwrite(fd, content, 0)

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
        self._relative_offsets, self._positions = relative_offsets, positions
        self.loaded = True

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
        relative = self.relative(offset)
        self._write_entry(len(self._positions), struct.pack(">ii", relative, position))
        self._relative_offsets.append(relative)
        self._positions.append(position)

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

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries that point at ``position`` or beyond."""
        keep = bisect_right(self._positions, position - 1)
        if keep < len(self._positions):
            del self._relative_offsets[keep:]
            del self._positions[keep:]
            self._truncate_file(keep)

    def reset(self) -> None:
        self._relative_offsets = array("i")
        self._positions = array("i")
        self._truncate_file(0)
        self.loaded = True

    def persist(self) -> None:
        """Write every in-memory entry to the file (after appends with write_through off)."""
        both = array("i", bytes(8 * len(self._positions)))
        both[0::2] = self._relative_offsets
        both[1::2] = self._positions
        if not _BIG_ENDIAN:
            both.byteswap()
        self._rewrite_file(both.tobytes())
        self.write_through = True

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
        self._timestamps, self._relative_offsets = timestamps, relative_offsets
        self.loaded = True

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
        relative = self.relative(offset)
        self._write_entry(len(self._timestamps), _TIME_ENTRY.pack(timestamp, relative))
        self._timestamps.append(timestamp)
        self._relative_offsets.append(relative)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``; (NO_TIMESTAMP, base) if none."""
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[slot], self.base_offset + self._relative_offsets[slot]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries whose offset is ``offset`` or larger."""
        keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
        if keep < len(self._timestamps):
            del self._timestamps[keep:]
            del self._relative_offsets[keep:]
            self._truncate_file(keep)

    def reset(self) -> None:
        self._timestamps = array("q")
        self._relative_offsets = array("i")
        self._truncate_file(0)
        self.loaded = True

    def persist(self) -> None:
        content = b"".join(_TIME_ENTRY.pack(t, r) for t, r in zip(self._timestamps, self._relative_offsets))
        self._rewrite_file(content)
        self.write_through = True

    def entries(self) -> list[tuple[int, int]]:
        """All (timestamp, offset) entries, absolute offsets (tools and tests)."""
        return [(t, self.base_offset + r) for t, r in zip(self._timestamps, self._relative_offsets)]
