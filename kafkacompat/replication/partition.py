"""A partition as the request handlers see it: its log, leader epoch, replicas/ISR, high
watermark, leader epoch cache, and the waiters woken by changes (long-poll fetches, acks=all).

A Partition is leader or follower as the controller's PartitionState says
(``become_leader`` / ``become_follower``; controller/state.py). As leader it tracks each
follower's log end offset from the offsets of its fetches (Kafka's Replica state:
log end offset, last caught-up time), moves the high watermark to the smallest log end offset
in the ISR, and proposes ISR changes (``isr_shrink_candidate`` after replica.lag.time.max.ms,
``isr_expand_candidate`` when a follower reaches the high watermark); the broker sends them to
the controller with compare-and-set (AlterPartition) and applies the state that comes back.
As follower it appends the leader's batches byte for byte (``append_as_follower``) and takes
the high watermark from the leader's fetch responses.

DeleteRecords (``delete_records``) moves the leader's log start offset; followers take it from
the fetch responses and report theirs in their fetch requests, so the leader knows the low
watermark (Kafka's lowWatermarkIfLeader) the request waits for.

On a single node the partition is leader with ISR [self], so the high watermark follows the log
end offset as soon as a batch is written and acks=all returns at once.

Every state change happens between two awaits (no locks); waiters are trio.Events set on any
change that could complete them (append, high watermark, leadership, ISR), and re-check.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection

import trio

from kafkacompat.replication.leader_epoch import LeaderEpochCache
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import BatchHeader

if TYPE_CHECKING:
    from kafkacompat.controller.state import PartitionState
    from kafkacompat.log import AppendInfo, PartitionLog, ReadResult

log = logging.getLogger("kafkacompat.replication")

UNKNOWN_OFFSET = -1
DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "everything below the high watermark"


def _trio_clock_ms() -> int:
    try:
        return int(trio.current_time() * 1000)
    except RuntimeError:  # outside Trio (tests building partitions synchronously)
        return int(time.monotonic() * 1000)


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0


class Partition:
    def __init__(self, topic: str, index: int, log: "PartitionLog", *, leader_id: int, leader_epoch: int = 0,
                 local_id: int | None = None, clock_ms: Callable[[], int] = _trio_clock_ms,
                 lag_time_max_ms: int = 30000, min_insync_replicas: int = 1) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_id = leader_id if local_id is None else local_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = 0
        self.replicas: list[int] = [leader_id] if leader_id >= 0 else []
        self.isr: list[int] = list(self.replicas)
        self.pending_isr: list[int] | None = None  # an AlterPartition in flight
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = log.log_end_offset
        self.clock_ms = clock_ms
        self.lag_time_max_ms = lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.high_watermark = log.log_end_offset
        self.epochs = self._load_epoch_cache()
        self._waiters: set[trio.Event] = set()
        self.offline_dir: str | None = None  # its log directory failed (Kafka's HostedPartition.Offline)
        # LocalMetadata's PartitionState of this partition, reused while what it copies is unchanged.
        self.metadata_state: "PartitionState | None" = None
        self.metadata_lists: tuple[list[int] | None, list[int] | None] = (None, None)  # the lists it copied

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

    def _load_epoch_cache(self) -> LeaderEpochCache:
        directory = getattr(self.log, "dir", None)
        cache = LeaderEpochCache.load(directory, repr(self)) if directory is not None else LeaderEpochCache(None)
        if directory is not None and not cache.file_exists and self.log.log_end_offset > self.log.log_start_offset:
            # A log written before the cache existed: rebuild it from the batch headers.
            changed = False
            for header in self.log.headers_from_offset(self.log.log_start_offset):
                if header.partition_leader_epoch > cache.latest_epoch:
                    changed |= cache.assign(header.partition_leader_epoch, header.base_offset, flush=False)
            if changed:
                cache.flush()
        cache.truncate_from_end(self.log.log_end_offset)  # the log may have lost a torn tail
        return cache

    # ---- offsets ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, or the first offset of an undecided transaction below it."""
        return self.log.last_stable_offset(self.high_watermark)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark must respect: with an AlterPartition in flight, the union
        of the committed and the proposed ISR (Kafka's maximalIsr)."""
        if self.pending_isr is None:
            return set(self.isr)
        return set(self.isr) | set(self.pending_isr)

    # ---- leadership ------------------------------------------------------------------------

    def is_stale(self, state: "PartitionState") -> bool:
        if state.leader_epoch != self.leader_epoch:
            return state.leader_epoch < self.leader_epoch
        return state.partition_epoch < self.partition_epoch

    def become_leader(self, state: "PartitionState") -> bool:
        """Lead from ``state`` (whose leader is this broker). Returns False when the state is
        older than the one applied already (ignored)."""
        if self.is_stale(state):
            log.info("%s: ignoring stale state %s (have leader epoch %d, partition epoch %d)",
                     self, state, self.leader_epoch, self.partition_epoch)
            return False
        new_epoch = state.leader_epoch != self.leader_epoch or not self.is_leader
        now = self.clock_ms()
        self.leader_id = self.local_id
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.pending_isr = None
        if new_epoch:
            self.leader_epoch_start_offset = self.log_end_offset
            self.epochs.assign(self.leader_epoch, self.log_end_offset)
            # Followers start unknown; those in the ISR get the lag time from now (Kafka's
            # resetReplicaState), so a dead one leaves the ISR after replica.lag.time.max.ms.
            self.followers = {
                r: FollowerState(r, last_caught_up_ms=now if r in self.isr else 0)
                for r in self.replicas if r != self.local_id
            }
            log.info("%s: leader at epoch %d from offset %d, ISR %s, high watermark %d", self, self.leader_epoch,
                     self.log_end_offset, self.isr, self.high_watermark)
        else:
            for r in self.replicas:
                if r != self.local_id and r not in self.followers:
                    self.followers[r] = FollowerState(r)
            for r in list(self.followers):
                if r not in self.replicas:
                    del self.followers[r]
        self._maybe_advance_high_watermark()
        self.wake_waiters()
        return True

    def become_follower(self, state: "PartitionState") -> bool:
        """Follow ``state.leader`` (-1: no leader). Returns False for a stale state."""
        if self.is_stale(state):
            log.info("%s: ignoring stale state %s (have leader epoch %d, partition epoch %d)",
                     self, state, self.leader_epoch, self.partition_epoch)
            return False
        was_leader = self.is_leader
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.pending_isr = None
        self.followers = {}
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        if was_leader:
            log.info("%s: follower of %d at epoch %d", self, self.leader_id, self.leader_epoch)
        self.wake_waiters()
        return True

    def stop_serving(self) -> None:
        """The partition left this broker (moved away or deleted): it leads nothing any more, and
        requests waiting on it (acks=all produces, long polls) are answered now, not at their
        timeout."""
        self.leader_id = -1
        self.followers = {}
        self.wake_waiters()

    def go_offline(self, log_dir: str) -> None:
        """Its log directory failed: every request answers KAFKA_STORAGE_ERROR from now on."""
        self.offline_dir = log_dir
        self.followers = {}
        self.wake_waiters()

    def replace_log(self, new_log: "PartitionLog") -> None:
        """A move to another log directory is done: serve ``new_log`` (the same records), its
        leader epoch cache a copy of the current one."""
        entries = self.epochs.entries()
        self.log = new_log
        self.epochs = LeaderEpochCache(new_log.dir, repr(self))
        for epoch, start_offset in entries:
            self.epochs.assign(epoch, start_offset, flush=False)
        self.epochs.flush()
        self.wake_waiters()

    def check_online(self) -> None:
        if self.offline_dir is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{self} is offline: its log directory {self.offline_dir} failed")

    def check_leader(self) -> None:
        self.check_online()
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"this broker is not the leader of {self} (leader {self.leader_id})")

    # ---- appends ---------------------------------------------------------------------------

    def append(self, records: memoryview, headers: list[BatchHeader]) -> "AppendInfo":
        """Leader append: offsets and the leader epoch are assigned in place."""
        if self.epochs.latest_epoch != self.leader_epoch:
            self.epochs.assign(self.leader_epoch, self.log_end_offset)
        info = self.log.append(records, headers, leader_epoch=self.leader_epoch, now_ms=int(time.time() * 1000))
        if not self._maybe_advance_high_watermark():
            self.wake_waiters()  # replica fetches wait for new data at the log end
        return info

    def append_as_follower(self, records: memoryview, headers: list[BatchHeader]) -> "AppendInfo":
        """Follower append: the leader's batches byte for byte, offsets and epochs as they are."""
        info = self.log.append(records, headers, assign_offsets=False)
        latest = self.epochs.latest_epoch
        for header in headers:
            if header.partition_leader_epoch > latest:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
                latest = header.partition_leader_epoch
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        self.high_watermark = min(leader_high_watermark, self.log_end_offset)
        self.log.producer_state.forget_replicated_txns(self.high_watermark)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self.high_watermark = offset

    # ---- the leader's view of its followers -------------------------------------------------

    def update_follower_fetch(self, replica_id: int, fetch_offset: int,
                              log_start_offset: int = UNKNOWN_OFFSET) -> list[int] | None:
        """A follower fetched from ``fetch_offset``: it has everything below it, and its log
        starts at ``log_start_offset``. Updates its caught-up time (Kafka's rules), advances the
        high watermark, wakes DeleteRecords waiters when its log start moved up, and returns the
        ISR to propose when the follower has caught up and is not in the ISR (else None)."""
        follower = self.followers.get(replica_id)
        if follower is None:
            # The leader is no follower of itself (Kafka's followerReplicaOrThrow knows only remote
            # replicas): a fetch claiming its id would count in the low watermark forever.
            if replica_id not in self.replicas or replica_id == self.local_id:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {replica_id} is not a follower of {self} (replicas {self.replicas})")
            follower = self.followers[replica_id] = FollowerState(replica_id)
        now = self.clock_ms()
        leader_end = self.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.last_fetch_leader_end_offset >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_end_offset = leader_end
        follower.last_fetch_ms = now
        start_moved_up = log_start_offset > follower.log_start_offset
        follower.log_start_offset = log_start_offset
        if not self._maybe_advance_high_watermark() and start_moved_up:
            self.wake_waiters()
        return self.isr_expand_candidate(replica_id)

    def isr_expand_candidate(self, replica_id: int) -> list[int] | None:
        if not self.is_leader or self.pending_isr is not None or replica_id in self.isr:
            return None
        follower = self.followers.get(replica_id)
        if follower is None:
            return None
        end = follower.log_end_offset
        if end >= self.high_watermark and end >= self.leader_epoch_start_offset:
            return self.isr + [replica_id]
        return None

    def out_of_sync_replicas(self) -> list[int]:
        now = self.clock_ms()
        out = []
        for replica_id in self.isr:
            if replica_id == self.local_id:
                continue
            follower = self.followers.get(replica_id)
            if follower is None or now - follower.last_caught_up_ms > self.lag_time_max_ms:
                out.append(replica_id)
        return out

    def isr_shrink_candidate(self) -> list[int] | None:
        """The ISR without the followers that have not caught up for replica.lag.time.max.ms."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = self.out_of_sync_replicas()
        if not out:
            return None
        return [r for r in self.isr if r not in out]

    def _maybe_advance_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        new = self.log_end_offset
        for replica_id in self.maximal_isr():
            if replica_id == self.local_id:
                continue
            follower = self.followers.get(replica_id)
            end = follower.log_end_offset if follower is not None else UNKNOWN_OFFSET
            if end < new:
                new = end
        if new > self.high_watermark:
            self.high_watermark = new
            self.log.producer_state.forget_replicated_txns(new)
            self.wake_waiters()
            return True
        return False

    def apply_isr(self, state: "PartitionState") -> None:
        """A newer state with the same leader and epoch (an ISR change)."""
        self.become_leader(state) if state.leader == self.local_id else self.become_follower(state)

    # ---- acks=all --------------------------------------------------------------------------

    def check_enough_replicas(self) -> None:
        """Before an acks=all append (Kafka: NotEnoughReplicasException)."""
        if len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{self} has {len(self.isr)} in-sync replica(s) {self.isr}, min.insync.replicas is "
                f"{self.min_insync_replicas}",
            )

    def replication_status(self, required_offset: int, leader_epoch: int) -> int | None:
        """For an acks=all write ending before ``required_offset`` at ``leader_epoch``: None while
        waiting, else the error code to answer (0 when the high watermark covers it)."""
        if self.offline_dir is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if not self.is_leader or self.leader_epoch != leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if len(self.isr) < self.min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return 0
        return None

    async def wait_replicated(self, required_offset: int, leader_epoch: int, timeout_ms: int) -> int:
        """Kafka's DelayedProduce for one internal acks=-1 append (offset commits): 0 once the
        high watermark passes ``required_offset``, else the error code (REQUEST_TIMED_OUT at the
        timeout)."""
        with trio.move_on_after(max(timeout_ms, 0) / 1000):
            while True:
                status = self.replication_status(required_offset, leader_epoch)
                if status is not None:
                    return status
                event = trio.Event()
                self.add_waiter(event)
                try:
                    await event.wait()
                finally:
                    self.remove_waiter(event)
        return ErrorCode.REQUEST_TIMED_OUT

    # ---- DeleteRecords ---------------------------------------------------------------------

    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (never back); the leader epoch cache then
        starts there too, as Kafka's maybeIncrementLogStartOffset. Returns whether it moved."""
        moved = self.log.advance_log_start_offset(offset)
        if moved:
            self.epochs.truncate_from_start(self.log_start_offset)
        return moved

    def delete_records(self, offset: int) -> int:
        """Kafka's deleteRecordsOnLeader: records below ``offset`` (DELETE_TO_HIGH_WATERMARK: the
        high watermark) become unreadable. Returns the offset the low watermark must reach."""
        requested = self.records_deletion_offset(offset)
        self.advance_log_start_offset(requested)
        return requested

    def records_deletion_offset(self, offset: int) -> int:
        """The checks of ``delete_records``, changing nothing: the log start offset it would set."""
        self.check_leader()
        if not self.log.config.deletes_old_segments:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"Records of partition {self} can not be deleted due to the configured policy")
        requested = self.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if requested < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"The offset {requested} for partition {self} is not valid")
        if requested > self.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"Cannot increment the log start offset to {requested} of partition {self} since it "
                             f"is larger than the high watermark {self.high_watermark}")
        return requested

    def low_watermark(self, live_brokers: Collection[int]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset of this leader and of its
        followers on live brokers (-1 for one not heard from since this leadership began)."""
        self.check_leader()
        low = self.log_start_offset
        for follower in self.followers.values():
            if follower.replica_id in live_brokers and follower.log_start_offset < low:
                low = follower.log_start_offset
        return low

    def low_watermark_status(self, required_offset: int, live_brokers: Collection[int]) -> tuple[int, int] | None:
        """For a DeleteRecords waiting until the low watermark reaches ``required_offset`` (Kafka's
        DelayedDeleteRecords): None while waiting, else (error code, low watermark to answer)."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, UNKNOWN_OFFSET
        low = self.low_watermark(live_brokers)
        return (ErrorCode.NONE, low) if low >= required_offset else None

    # ---- reads -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> "ReadResult":
        """Whole batches from ``offset``, only below the high watermark (what is committed)."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark, min_one_batch=min_one_batch)

    def read_committed(self, offset: int, max_bytes: int, *,
                       min_one_batch: bool) -> "tuple[ReadResult, list[tuple[int, int]]]":
        """read_committed (isolation level 1): whole batches below the LSO, and the (producer id,
        first offset) of the aborted transactions with records in the range read (a superset:
        up to the end of the last segment read from)."""
        read = self.log.read(offset, max_bytes, max_offset=self.last_stable_offset, min_one_batch=min_one_batch)
        if not read.chunks:
            return read, []
        aborted = self.log.aborted_transactions(offset, read.upper_bound)
        return read, [(txn.producer_id, txn.first_offset) for txn in aborted]

    def read_for_replica(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> "ReadResult":
        """Whole batches from ``offset`` up to the log end (followers are not bound by the HW)."""
        return self.log.read(offset, max_bytes, min_one_batch=min_one_batch)

    def check_fetch_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside {self.log_start_offset}..{self.log_end_offset} for {self}",
            )

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch and the diverging-epoch check."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    # ---- waiters ---------------------------------------------------------------------------

    def add_waiter(self, event: trio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def wake_waiters(self) -> None:
        for event in self._waiters:
            event.set()
        self._waiters.clear()
