"""A share partition on the partition leader (KIP-932, Kafka's SharePartition): which records of
one topic partition a share group has delivered, to whom, and how they were acknowledged.

The share-partition start offset (SPSO) is the first record not yet in a terminal state; the end
offset (SPEO) is one past the last record ever acquired. Every offset in [start, end) has a slot:
AVAILABLE (released, redeliverable), ACQUIRED (locked by one member until its acquisition lock
expires), ACKNOWLEDGED (accepted) or ARCHIVED (rejected, a gap, or out of delivery attempts).
Records at or above the end offset are available and were never delivered. The slots are bounded
by ``max_record_locks`` (``group.share.partition.max.record.locks``): no record beyond the end is
acquired while that many are in flight, so memory stays bounded whatever the consumers do.

Time is passed in (seconds on Trio's clock), so this module does no I/O and tests drive it
directly. The durable form of the state is ``state_batches`` (the share coordinator's
StateBatches: runs of equal state and delivery count) and ``restore``.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from kafkacompat.wire.errors import ErrorCode, KafkaError


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # ShareFetch/ShareAcknowledge v2 (KIP-1222)


class AcquireMode(enum.IntEnum):
    BATCH_OPTIMIZED = 0  # MaxRecords may be exceeded to end on a batch boundary
    RECORD_LIMIT = 1  # never more than MaxRecords


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class Slot:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline: float = 0.0


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """One run of the durable state (ShareSnapshotValue/ShareUpdateValue StateBatches)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


def delivery_complete_count(start_offset: int, batches: Iterable[StateBatch]) -> int:
    """Kafka's SharePartition.deliveryCompleteCount (KIP-1226): the records at or above the start
    offset that are acknowledged or archived, what a share group's lag leaves out."""
    return sum(batch.last_offset - max(batch.first_offset, start_offset) + 1 for batch in batches
               if batch.delivery_state in TERMINAL and batch.last_offset >= start_offset)


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    first_offset: int
    last_offset: int
    types: Sequence[int]  # one type for the whole range, or one per offset


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    lock_duration_s: float = 30.0
    delivery_count_limit: int = 5
    max_record_locks: int = 2000


class SharePartition:
    def __init__(self, group_id: str, topic: str, partition: int, start_offset: int,
                 config: SharePartitionConfig = SharePartitionConfig()) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.config = config
        self.start_offset = start_offset
        self.slots: list[Slot] = []  # slots[i] is offset start_offset + i
        # (deadline, slot) per acquisition or renewal, in deadline order (every lock is now + the
        # same duration): expiry and the next deadline cost O(1) each, never a walk of the slots.
        # An entry whose slot moved on (acknowledged, renewed, released) is dropped when reached.
        self._locks: deque[tuple[float, Slot]] = deque()

    def __repr__(self) -> str:
        return f"SharePartition({self.group_id!r}, {self.topic}-{self.partition}, [{self.start_offset}, {self.end_offset}))"

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.slots)

    def slot(self, offset: int) -> Slot | None:
        index = offset - self.start_offset
        return self.slots[index] if 0 <= index < len(self.slots) else None

    def in_flight(self) -> int:
        return len(self.slots)

    # ---- where the next fetch starts ----------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """The first available record: a released one inside the window, else the end offset."""
        for index, slot in enumerate(self.slots):
            if slot.state is RecordState.AVAILABLE:
                return self.start_offset + index
        return self.end_offset

    def can_acquire(self) -> bool:
        return self.next_fetch_offset() < self.end_offset or len(self.slots) < self.config.max_record_locks

    # ---- acquire ------------------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int]], max_records: int, now: float,
                mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED) -> list[AcquiredRange]:
        """Acquire for ``member_id`` the available records of ``batches`` (the log's batches as
        (base offset, last offset), read from ``next_fetch_offset``), at most ``max_records``
        (in batch-optimized mode the last batch is taken whole). Offsets between batches that
        the log does not have (compacted away) are archived."""
        remaining = max(max_records, 1)
        acquired: list[AcquiredRange] = []
        deadline = now + self.config.lock_duration_s
        for base, last in batches:
            if remaining <= 0:
                break
            first = max(base, self.start_offset)
            if last < first:
                continue
            if first < self.end_offset:
                known_last = min(last, self.end_offset - 1)
                remaining -= self._acquire_range(member_id, first, known_last, remaining, deadline, mode, acquired)
                first = known_last + 1
                if first > last or remaining <= 0:
                    continue
            if len(self.slots) >= self.config.max_record_locks:
                break
            self._extend_to(first)
            batch_end = last if mode is AcquireMode.BATCH_OPTIMIZED else min(last, first + remaining - 1)
            self.slots.extend(Slot() for _ in range(batch_end - first + 1))
            remaining -= self._acquire_range(member_id, first, batch_end, remaining, deadline, mode, acquired)
        return acquired

    def _extend_to(self, offset: int) -> None:
        """Offsets between the end and ``offset`` are not in the log: nothing to deliver."""
        if offset > self.end_offset:
            self.slots.extend(Slot(RecordState.ARCHIVED) for _ in range(offset - self.end_offset))

    def _acquire_range(self, member_id: str, first: int, last: int, remaining: int, deadline: float,
                       mode: AcquireMode, out: list[AcquiredRange]) -> int:
        taken = 0
        for offset in range(first, last + 1):
            if mode is AcquireMode.RECORD_LIMIT and taken >= remaining:
                break
            slot = self.slots[offset - self.start_offset]
            if slot.state is not RecordState.AVAILABLE:
                continue
            if slot.delivery_count >= self.config.delivery_count_limit:
                slot.state = RecordState.ARCHIVED
                continue
            slot.state = RecordState.ACQUIRED
            slot.delivery_count += 1
            slot.member_id = member_id
            slot.lock_deadline = deadline
            self._locks.append((deadline, slot))
            taken += 1
            _append_range(out, offset, slot.delivery_count)
        return taken

    # ---- acknowledge --------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch], now: float) -> None:
        """Apply a member's acknowledgements, all or nothing: every offset must be a record this
        member holds (INVALID_RECORD_STATE otherwise, as Kafka), with known types and one type per
        offset or one for the range (INVALID_REQUEST)."""
        changes: list[tuple[Slot, int]] = []
        for batch in batches:
            self._validate_batch(batch)
            for offset in range(batch.first_offset, batch.last_offset + 1):
                slot = self.slot(offset)
                if slot is None or slot.state is not RecordState.ACQUIRED or slot.member_id != member_id:
                    raise KafkaError(ErrorCode.INVALID_RECORD_STATE,
                                     f"Offset {offset} of {self.topic}-{self.partition} is not acquired by member "
                                     f"{member_id} of share group {self.group_id}")
                kind = batch.types[0] if len(batch.types) == 1 else batch.types[offset - batch.first_offset]
                changes.append((slot, kind))
        deadline = now + self.config.lock_duration_s
        for slot, kind in changes:
            self._apply(slot, kind, deadline)
        self._advance_start()

    @staticmethod
    def _validate_batch(batch: AcknowledgementBatch) -> None:
        count = batch.last_offset - batch.first_offset + 1
        if count <= 0 or not batch.types or len(batch.types) not in (1, count):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Acknowledgement batch {batch.first_offset}-{batch.last_offset} has "
                             f"{len(batch.types)} acknowledge types")
        for kind in batch.types:
            if kind not in AcknowledgeType._value2member_map_:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown acknowledge type {kind}")

    def _apply(self, slot: Slot, kind: int, deadline: float) -> None:
        if kind == AcknowledgeType.ACCEPT:
            self._finish(slot, RecordState.ACKNOWLEDGED)
        elif kind in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
            self._finish(slot, RecordState.ARCHIVED)
        elif kind == AcknowledgeType.RELEASE:
            self._release(slot)
        else:  # RENEW: the member keeps the record for another lock duration
            slot.lock_deadline = deadline
            self._locks.append((deadline, slot))

    @staticmethod
    def _finish(slot: Slot, state: RecordState) -> None:
        slot.state = state
        slot.member_id = None

    def _release(self, slot: Slot) -> None:
        """Back to available, or archived once the delivery count reached the limit (Kafka's
        tryUpdateState)."""
        slot.member_id = None
        if slot.delivery_count >= self.config.delivery_count_limit:
            slot.state = RecordState.ARCHIVED
        else:
            slot.state = RecordState.AVAILABLE

    # ---- releases without an acknowledgement ------------------------------------------------------

    def expire_locks(self, now: float) -> bool:
        """Release the records whose acquisition lock has expired; True when any was."""
        changed = False
        locks = self._locks
        while locks and locks[0][0] <= now:
            deadline, slot = locks.popleft()
            if slot.state is RecordState.ACQUIRED and slot.lock_deadline == deadline:
                self._release(slot)
                changed = True
        if changed:
            self._advance_start()
        return changed

    def next_lock_deadline(self) -> float | None:
        locks = self._locks
        while locks:
            deadline, slot = locks[0]
            if slot.state is RecordState.ACQUIRED and slot.lock_deadline == deadline:
                return deadline
            locks.popleft()
        return None

    def release_member(self, member_id: str) -> bool:
        """A member left (its share session closed): its records come back with the delivery
        count decremented, since that delivery never reached the application's decision (Kafka's
        releaseAcquiredRecords)."""
        changed = False
        for slot in self.slots:
            if slot.state is RecordState.ACQUIRED and slot.member_id == member_id:
                slot.delivery_count = max(slot.delivery_count - 1, 0)
                self._release(slot)
                changed = True
        if changed:
            self._advance_start()
        return changed

    def acquired_by(self, member_id: str) -> int:
        return sum(1 for slot in self.slots if slot.state is RecordState.ACQUIRED and slot.member_id == member_id)

    # ---- the start offset -------------------------------------------------------------------------

    def _advance_start(self) -> None:
        done = 0
        for slot in self.slots:
            if slot.state not in TERMINAL:
                break
            done += 1
        if done:
            del self.slots[:done]
            self.start_offset += done

    def move_start_to(self, offset: int) -> bool:
        """The log start moved past the share-partition start (retention, DeleteRecords) or an
        AlterShareGroupOffsets reset it: what lies below is gone for the group."""
        if offset <= self.start_offset:
            return False
        drop = min(offset - self.start_offset, len(self.slots))
        for slot in self.slots[:drop]:
            slot.state = RecordState.ARCHIVED  # gone for the group; a pending lock entry is dropped
        del self.slots[:drop]
        self.start_offset = offset
        return True

    def reset(self, start_offset: int) -> None:
        self.slots.clear()
        self._locks.clear()
        self.start_offset = start_offset

    # ---- durable form -----------------------------------------------------------------------------

    def state_batches(self) -> list[StateBatch]:
        """The in-flight state as the share coordinator stores it: runs of equal (state, delivery
        count); an acquired record is stored as available with its delivery count, so after a
        restart it is delivered again (at least once) and still counts its deliveries."""
        batches: list[StateBatch] = []
        for index, slot in enumerate(self.slots):
            state = RecordState.AVAILABLE if slot.state is RecordState.ACQUIRED else slot.state
            offset = self.start_offset + index
            if batches and batches[-1].delivery_state == state and batches[-1].delivery_count == slot.delivery_count \
                    and batches[-1].last_offset == offset - 1:
                previous = batches[-1]
                batches[-1] = StateBatch(previous.first_offset, offset, state, slot.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, state, slot.delivery_count))
        return batches

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Load the durable state: a window from ``start_offset`` to the last batch's end;
        offsets inside it that no batch names are available, never delivered."""
        self.reset(start_offset)
        ordered = sorted(batches, key=lambda batch: batch.first_offset)
        # A sound state never spans more than the in-flight bound (plus one fetch's last batch);
        # a state that does (damaged, or written by a hostile WriteShareGroupState) is cut there.
        limit = start_offset + restore_span_limit(self.config)
        for batch in ordered:
            first = max(batch.first_offset, start_offset)
            if batch.last_offset < first or first >= limit:
                continue
            batch = StateBatch(first, min(batch.last_offset, limit - 1), batch.delivery_state, batch.delivery_count)
            if batch.last_offset >= self.end_offset:
                self.slots.extend(Slot() for _ in range(batch.last_offset - self.end_offset + 1))
            for offset in range(first, batch.last_offset + 1):
                slot = self.slots[offset - self.start_offset]
                slot.state = RecordState(batch.delivery_state) if batch.delivery_state in (0, 2, 4) \
                    else RecordState.AVAILABLE
                slot.delivery_count = max(batch.delivery_count, 0)
        self._advance_start()


def restore_span_limit(config: SharePartitionConfig) -> int:
    return 4 * max(config.max_record_locks, 1) + 100_000


def _append_range(out: list[AcquiredRange], offset: int, delivery_count: int) -> None:
    if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == delivery_count:
        out[-1] = AcquiredRange(out[-1].first_offset, offset, delivery_count)
    else:
        out.append(AcquiredRange(offset, offset, delivery_count))
