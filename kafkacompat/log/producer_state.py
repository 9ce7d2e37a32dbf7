"""Idempotent-producer state of one partition: for each producer id its epoch and its last five
batches, checked on every client append, kept up to date on every append (leader and follower
alike), and persisted in Kafka's producer snapshot files.

The rules are Kafka's (ProducerStateManager, ProducerAppendInfo, ProducerStateEntry, and
UnifiedLog.analyzeAndValidateProducerState):

- A batch whose epoch and sequence range equal one of the producer's last five batches is a
  duplicate (a retry whose response was lost): it is acknowledged with the offsets it was written
  at and is not written again.
- A lower epoch than the last one seen is INVALID_PRODUCER_EPOCH (since Kafka 2.7; it used to be
  PRODUCER_FENCED).
- A higher epoch (an epoch bump) must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
- Within one epoch the first sequence must follow the last one (after 2**31 - 1 comes 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER.
- A producer id with no state here (new, or expired) may start at any sequence: since Kafka 2.5
  (KIP-360) the broker no longer answers UNKNOWN_PRODUCER_ID; the state may simply have expired.
- Producers expire producer.id.expiration.ms after the max timestamp of their last batch (the
  record timestamps, as in Kafka; not the wall-clock time of the append).
- Log retention does not drop producer state (as in Kafka since KIP-360); only expiry does.
- Transactions (ProducerAppendInfo.appendDataBatch / appendEndTxnMarker): the first
  transactional batch of a producer starts its transaction at that batch's base offset; a
  non-transactional batch from a producer with an open transaction is INVALID_TXN_STATE; a
  COMMIT/ABORT marker (control batch) completes it. A marker older than the producer's epoch is
  INVALID_PRODUCER_EPOCH (with transaction version 2, where the coordinator bumps the epoch for
  the marker, one not newer than it, unless it repeats a marker already written), one from a
  coordinator epoch older than the last marker's is TRANSACTION_COORDINATOR_FENCED. Replica
  appends and replay are not checked (Kafka logs them).
- The last stable offset (LSO): the first offset of the earliest open transaction, or of a
  completed one whose marker is not yet below the high watermark, capped by the high watermark.

Persistence (Kafka's layout, so a data dir moves between the two):

- ``<20-digit offset>.snapshot`` in the partition directory holds the state of every producer for
  the log up to (not including) that offset: written when a segment rolls (named after the new
  segment's base offset), on clean shutdown (at the log end offset) and after a load. Unlike
  Kafka, a log that never had an idempotent producer gets no (empty) snapshot files. Snapshots
  go with the segments below the log start offset, and those past the log end on load.
- Format (ProducerStateManager.writeSnapshot, version 1), big-endian::

      version int16 = 1 | crc uint32 (CRC32C of everything after it) | count int32 |
      count x (producer_id int64, epoch int16, last_sequence int32, last_offset int64,
               offset_delta int32, timestamp int64, coordinator_epoch int32,
               current_txn_first_offset int64)

  As in Kafka a snapshot keeps only the last batch of each producer, so after a restart from a
  snapshot only a retry of that batch is recognised as a duplicate.
- Loading takes the latest readable snapshot at or below the log end offset (a corrupt one is
  deleted and the previous one tried) and replays the batch headers after it: per batch, never
  per record. With no snapshot, the headers from the log start offset are replayed.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import crc32c

from kafkacompat.config import broker_default
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import BatchHeader, TxnMarker

logger = logging.getLogger("kafkacompat.log")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (= max.in.flight)
DEFAULT_PRODUCER_ID_EXPIRATION_MS: int = broker_default("producer.id.expiration.ms")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hI")  # version, crc
_SNAPSHOT_COUNT = struct.Struct(">i")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _SNAPSHOT_HEAD.size  # the CRC covers the bytes from here on


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    if not name.endswith(SNAPSHOT_SUFFIX) or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on Kafka's sequence ring (0 .. 2**31 - 1)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker (Kafka's CompletedTxn); ``last_stable_offset`` is the
    partition's LSO once it completed (what its aborted-index entry records)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int


class CorruptSnapshotError(ValueError):
    """A snapshot file that does not parse or whose CRC does not match."""


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer id on one partition: epoch, last batches, and the transaction fields Kafka
    keeps in snapshots (coordinator epoch, first offset of the ongoing transaction)."""

    __slots__ = ("producer_id", "producer_epoch", "batches", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, *,
                 coordinator_epoch: int = -1, last_timestamp: int = -1,
                 current_txn_first_offset: int = -1) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(id={self.producer_id}, epoch={self.producer_epoch}, "
                f"batches={list(self.batches)})")

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class ProducerStateManager:
    """The producer state of one partition log and its snapshot files."""

    def __init__(self, directory: Path, label: str, *,
                 expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS, list_snapshots: bool = True) -> None:
        """``list_snapshots=False``: the caller lists the directory and passes its names to
        ``found_snapshots`` (a log opening shares one listing between all its steps)."""
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.label = label  # "<topic>-<partition>", for messages
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # Open transactions: producer id -> first offset, in offset order (the first is the LSO's).
        self.ongoing: dict[int, int] = {}
        # Completed transactions whose marker is not yet below the high watermark, marker order.
        self.unreplicated: deque[CompletedTxn] = deque()
        # KIP-890: a token per producer whose transactional batch is being verified with the
        # coordinator; a marker in between removes it, so the late batch is refused.
        self.verification_guards: dict[int, object] = {}
        self.map_end_offset = 0  # the state reflects the log below this offset
        self._last_snapshot_offset = 0  # as Kafka: no snapshot is written unless the map moved past it
        self._snapshots: list[int] = self._snapshot_offsets_on_disk() if list_snapshots else []

    # -- the append path --------------------------------------------------------------------

    def check_client_batch(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a client's idempotent batch before it is written.

        Returns the metadata of the batch it duplicates (to be acknowledged, not written), None
        when it is to be appended, or raises KafkaError (INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_RECORD, INVALID_TXN_STATE for a plain batch inside
        the producer's open transaction; checked in Kafka's order).
        """
        producer_id, epoch, first_seq = header.producer_id, header.producer_epoch, header.base_sequence
        if first_seq < 0:
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"invalid sequence number {first_seq} in a record batch with producer id {producer_id} for "
                f"{self.label}: an idempotent producer numbers its batches from 0",
            )
        entry = self.producers.get(producer_id)
        if entry is None:
            return None  # no state (new or expired producer): any sequence is accepted, as in Kafka
        duplicate = entry.find_duplicate(epoch, first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate
        if epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} wrote to {self.label} with epoch {epoch}, older than its current "
                f"epoch {entry.producer_epoch}: a newer instance of this producer has taken over",
            )
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} started epoch {epoch} on {self.label} at sequence {first_seq}; "
                    f"a new epoch must start at sequence 0 (previous epoch {entry.producer_epoch})",
                )
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence number for producer {producer_id} (epoch {epoch}) on {self.label}: "
                f"got {first_seq}, expected {(entry.last_seq + 1) & INT32_MAX} after {entry.last_seq}",
            )
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {producer_id} sent a non-transactional batch to {self.label} while its transaction "
                f"from offset {entry.current_txn_first_offset} is open",
            )
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     transaction_version: int) -> None:
        """Kafka's checks of a coordinator's COMMIT/ABORT marker before it is written
        (ProducerAppendInfo.checkProducerEpoch / checkCoordinatorEpoch)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        current = entry.producer_epoch
        stale = producer_epoch <= current if transaction_version >= 2 else producer_epoch < current
        if stale and not (transaction_version >= 2 and producer_epoch == current
                          and entry.current_txn_first_offset < 0):  # TV2: a retry of a written marker
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"transaction marker for producer {producer_id} on {self.label} has epoch {producer_epoch}, "
                f"{'not newer than' if transaction_version >= 2 else 'older than'} its epoch {current}",
            )
        if entry.coordinator_epoch > coordinator_epoch:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"transaction marker for producer {producer_id} on {self.label} comes from coordinator epoch "
                f"{coordinator_epoch}, older than the last marker's {entry.coordinator_epoch} (a zombie coordinator)",
            )

    def needs_verification(self, producer_id: int, producer_epoch: int) -> bool:
        """A transactional batch that would start a transaction here (Kafka's
        !hasOngoingTransaction): the leader asks the coordinator first (KIP-890)."""
        entry = self.producers.get(producer_id)
        return entry is None or entry.current_txn_first_offset < 0 or entry.producer_epoch != producer_epoch

    def update(self, header: BatchHeader, marker: TxnMarker | None = None) -> CompletedTxn | None:
        """Record a batch written at its final offsets (client and replica appends, and replay);
        ``marker``: a control batch's COMMIT/ABORT record. Returns the transaction a marker
        completed (None for a marker of a producer with no open transaction: it changes no LSO
        and no index). Batches without a producer id and empty control batches change nothing."""
        self.map_end_offset = header.next_offset
        producer_id = header.producer_id
        if producer_id < 0 or (header.is_control and marker is None):
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        elif header.producer_epoch < entry.producer_epoch:
            logger.warning("%s: producer %d wrote epoch %d at offset %d after epoch %d (a replica append is "
                           "not checked)", self.label, producer_id, header.producer_epoch, header.base_offset,
                           entry.producer_epoch)
        if marker is not None:
            return self._end_txn(entry, header, marker)
        entry.add_batch(header.producer_epoch, header.last_sequence, header.last_offset, header.last_offset_delta,
                        header.max_timestamp)
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = header.base_offset
            self.ongoing[producer_id] = header.base_offset
        return None

    def _end_txn(self, entry: ProducerStateEntry, header: BatchHeader, marker: TxnMarker) -> CompletedTxn | None:
        completed = None
        first_offset = entry.current_txn_first_offset
        if first_offset >= 0:
            del self.ongoing[entry.producer_id]
            others = next(iter(self.ongoing.values()), None)
            completed = CompletedTxn(entry.producer_id, first_offset, header.base_offset, not marker.committed,
                                     header.base_offset + 1 if others is None else others)
            self.unreplicated.append(completed)
        if header.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = header.max_timestamp
        self.verification_guards.pop(entry.producer_id, None)
        return completed

    def first_open_txn_offset(self) -> int | None:
        return next(iter(self.ongoing.values()), None)

    def forget_replicated_txns(self, high_watermark: int) -> None:
        """The completed transactions whose marker is below the high watermark are stable
        (Kafka's onHighWatermarkUpdated); called as it moves, so the queue stays short."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of a completed one whose marker the high
        watermark has not passed (Kafka's firstUnstableOffset); None when there is none."""
        self.forget_replicated_txns(high_watermark)
        first = next(iter(self.ongoing.values()), None)
        for txn in self.unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        if first is None:
            return high_watermark
        return min(max(first, log_start_offset), high_watermark)

    # -- expiry and queries -----------------------------------------------------------------

    def is_expired(self, entry: ProducerStateEntry, now_ms: int, expiration_ms: int | None = None) -> bool:
        expiration = self.expiration_ms if expiration_ms is None else expiration_ms
        return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration

    def remove_expired(self, now_ms: int, expiration_ms: int | None = None) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many went."""
        expired = [pid for pid, entry in self.producers.items() if self.is_expired(entry, now_ms, expiration_ms)]
        for pid in expired:
            del self.producers[pid]
        for pid in [pid for pid in self.verification_guards if pid not in self.producers]:
            del self.verification_guards[pid]  # a verification whose batch never came
        return len(expired)

    def active_producers(self) -> list[ProducerStateEntry]:
        return list(self.producers.values())

    # -- snapshots --------------------------------------------------------------------------

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def _snapshot_offsets_on_disk(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return _snapshot_offsets(names)

    def found_snapshots(self, names: Iterable[str]) -> None:
        """The snapshot files among ``names``, the directory's listing."""
        self._snapshots = _snapshot_offsets(names)

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / snapshot_file_name(offset)

    def take_snapshot(self, *, fsync: bool = False) -> Path | None:
        """Write the state at map_end_offset, unless a snapshot there exists already."""
        offset = self.map_end_offset
        if offset <= self._last_snapshot_offset:
            return None
        if not self.producers and not self._snapshots:
            return None  # a log no idempotent producer ever wrote to keeps Kafka's plain layout
        path = self.snapshot_path(offset)
        write_snapshot(path, self.producers.values(), fsync=fsync)
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()
        self._last_snapshot_offset = offset
        logger.debug("Wrote producer snapshot %s of %s with %d producer ids", path.name, self.label,
                     len(self.producers))
        return path

    def delete_snapshot(self, offset: int) -> None:
        if offset in self._snapshots:
            self._snapshots.remove(offset)
        self.snapshot_path(offset).unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: int) -> None:
        for snapshot in [s for s in self._snapshots if s < offset]:
            self.delete_snapshot(snapshot)

    def delete_snapshots_above(self, offset: int) -> None:
        for snapshot in [s for s in self._snapshots if s > offset]:
            self.delete_snapshot(snapshot)

    # -- rebuilding -------------------------------------------------------------------------

    def _clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verification_guards.clear()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._clear()
        for snapshot in list(self._snapshots):
            self.delete_snapshot(snapshot)
        self.map_end_offset = offset
        self._last_snapshot_offset = 0

    def load(self, log_start_offset: int, log_end_offset: int,
             batches_from: Callable[[int], Iterator[tuple[BatchHeader, TxnMarker | None]]], now_ms: int,
             on_completed: Callable[[CompletedTxn], None] | None = None, *, clean_shutdown: bool = False) -> int:
        """Rebuild the state for the log [log_start_offset, log_end_offset): the latest readable
        snapshot in that range, then the batch headers (and markers) after it; ``on_completed``
        hears of every transaction a replayed marker completes (recovery rebuilds the aborted
        index with it). Returns how many batch headers were replayed.

        ``clean_shutdown``: the log was closed cleanly, and a clean close writes a snapshot at the
        log end offset for every log with producer state (a directory whose snapshot could not be
        written gets no clean-shutdown marker). So no snapshot at all means no producers, and
        nothing is replayed (Kafka's rebuildProducerState skips the scan the same way)."""
        self.delete_snapshots_above(log_end_offset)
        self.delete_snapshots_below(log_start_offset)
        self._clear()
        start = log_start_offset
        self._last_snapshot_offset = log_start_offset
        if clean_shutdown and not self._snapshots:
            self.map_end_offset = log_end_offset
            return 0
        while self._snapshots:
            offset = self._snapshots[-1]
            path = self.snapshot_path(offset)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as error:
                logger.warning("Deleting producer snapshot %s of %s: %s", path.name, self.label, error)
                self.delete_snapshot(offset)
                continue
            for entry in entries:
                if not self.is_expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
            open_txns = sorted((e.current_txn_first_offset, e.producer_id) for e in self.producers.values()
                               if e.current_txn_first_offset >= 0)
            self.ongoing = {producer_id: first for first, producer_id in open_txns}
            start = max(offset, log_start_offset)
            self._last_snapshot_offset = offset
            break
        self.map_end_offset = start
        replayed = 0
        if start < log_end_offset:
            for header, marker in batches_from(start):
                if header.base_offset >= log_end_offset:
                    break
                if header.last_offset < start:
                    continue
                completed = self.update(header, marker)
                if completed is not None and on_completed is not None:
                    on_completed(completed)
                replayed += 1
        self.map_end_offset = log_end_offset
        self.remove_expired(now_ms)  # as for the snapshot's entries
        if replayed:
            # INFO only when there is state to speak of: a broker of 10,000 non-idempotent
            # partitions would otherwise log 10,000 lines (a tenth of its load time) at every start.
            logger.log(logging.INFO if self.producers else logging.DEBUG,
                       "Rebuilt the producer state of %s from offset %d: replayed %d batch headers, %d producers",
                       self.label, start, replayed, len(self.producers))
        return replayed


def _snapshot_offsets(names: Iterable[str]) -> list[int]:
    return sorted(offset for offset in map(parse_snapshot_file_name, names) if offset is not None)


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, fsync: bool = False) -> None:
    """Kafka's producer snapshot format, written to a temporary file and renamed into place."""
    body = bytearray()
    count = 0
    for entry in entries:
        body += _SNAPSHOT_ENTRY.pack(
            entry.producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset,
            entry.last_offset_delta, entry.last_timestamp, entry.coordinator_epoch, entry.current_txn_first_offset,
        )
        count += 1
    payload = _SNAPSHOT_COUNT.pack(count) + bytes(body)
    data = _SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, crc32c.crc32c(payload)) + payload
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEAD.size + _SNAPSHOT_COUNT.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a producer snapshot")
    version, crc = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown producer snapshot version {version}")
    if crc32c.crc32c(memoryview(data)[_ENTRIES_OFFSET:]) != crc:
        raise CorruptSnapshotError("the CRC does not match the contents")
    (count,) = _SNAPSHOT_COUNT.unpack_from(data, _ENTRIES_OFFSET)
    position = _ENTRIES_OFFSET + _SNAPSHOT_COUNT.size
    if count < 0 or len(data) != position + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{len(data)} bytes do not hold the {count} entries announced")
    entries = []
    for _ in range(count):
        (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch,
         txn_first_offset) = _SNAPSHOT_ENTRY.unpack_from(data, position)
        position += _SNAPSHOT_ENTRY.size
        entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch=coordinator_epoch,
                                   last_timestamp=timestamp, current_txn_first_offset=txn_first_offset)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        entries.append(entry)
    return entries
