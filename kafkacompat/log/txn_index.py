"""The aborted-transaction index of one segment, ``<base>.txnindex`` in Kafka's byte format
(storage TransactionIndex / AbortedTxn): one 34-byte entry per transaction aborted by a marker in
this segment, big-endian::

    version int16 = 0 | producer_id int64 | first_offset int64 | last_offset int64 |
    last_stable_offset int64

``last_offset`` is the ABORT marker's offset, ``last_stable_offset`` the partition's LSO once the
transaction was complete. A read_committed Fetch lists the aborted transactions overlapping the
range it returns, so the client can drop their records. Aborts are rare: the entries are kept in
memory once read, and the file is created by the first entry (a segment without aborts has none,
as in Kafka where the file is empty)."""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass

logger = logging.getLogger("kafkacompat.log")

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
ENTRY_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(ENTRY_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


class TransactionIndex:
    def __init__(self, path: str, label: str) -> None:
        self.path = path
        self.label = label
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._unwritten = False  # an append's write failed: the file lacks entries memory has

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            return []
        entries = []
        usable = len(data) - len(data) % ENTRY_SIZE
        for position in range(0, usable, ENTRY_SIZE):
            version, producer_id, first, last, stable = _ENTRY.unpack_from(data, position)
            if version != ENTRY_VERSION:
                logger.warning("%s: %s has an entry of unknown version %d at byte %d; the entries after it are "
                               "ignored", self.label, os.path.basename(self.path), version, position)
                usable = position
                break
            entries.append(AbortedTxn(producer_id, first, last, stable))
        if usable != len(data):
            logger.warning("%s: cutting %s back to its %d whole entries (%d bytes after them)", self.label,
                           os.path.basename(self.path), len(entries), len(data) - usable)
            os.truncate(self.path, usable)
        return entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.label}: aborted transaction ending at {txn.last_offset} does not follow the "
                             f"last one in {os.path.basename(self.path)}, ending at {entries[-1].last_offset}")
        entries.append(txn)  # served from memory even when the file cannot take it now
        if self._unwritten:
            self.write_unwritten()
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                if os.write(fd, txn.encode()) != ENTRY_SIZE:
                    raise OSError(f"short write to {self.path}")
            finally:
                os.close(fd)
        except OSError:
            self._unwritten = True
            raise

    def write_unwritten(self) -> None:
        """After a failed append: the whole file again from memory (temporary file, renamed)."""
        if not self._unwritten or self._entries is None:
            return
        partial = self.path + ".tmp"
        try:
            with open(partial, "wb") as file:
                file.write(b"".join(txn.encode() for txn in self._entries))
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, self.path)
        except OSError:
            try:
                os.unlink(partial)
            except OSError:
                pass
            raise
        self._unwritten = False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions whose marker is at ``offset`` or later."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if self._unwritten:
            self.write_unwritten()
        elif keep:
            os.truncate(self.path, keep * ENTRY_SIZE)
        else:
            self.delete()
            self._entries = []

    def reset(self) -> None:
        """Forget every entry (recovery rebuilds them from the segment's markers)."""
        self.delete()
        self._entries = []

    def found_empty(self) -> None:
        """The file is known not to exist (a directory listing): no entries, nothing to delete."""
        self._entries = []
        self._unwritten = False

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._entries = None
        self._unwritten = False

    def fsync(self) -> None:
        self.write_unwritten()
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def collect(self, fetch_offset: int, upper_bound: int, into: list[AbortedTxn]) -> bool:
        """Add the transactions overlapping [fetch_offset, upper_bound) to ``into``; True when no
        later segment can hold more (an entry's LSO reached the upper bound: Kafka's
        TxnIndexSearchResult.isComplete)."""
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                into.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return True
        return False
