"""The share partitions this broker leads (Kafka's SharePartitionManager): ShareFetch acquires
records for a member, ShareAcknowledge (or acknowledgements riding on a ShareFetch) settles
them, and every change that must survive is written through the persister before it is
answered.

A share partition is created on the first fetch of a (group, topic, partition) whose leader is
here, from its persisted state or, for a new one, at ``share.auto.offset.reset`` (latest: the
high watermark; by_duration:<ISO 8601>: the first record stamped that long ago or later, else the
high watermark), and that start is persisted before anything is delivered. It is dropped (and
reloaded from the persisted state) when the partition's leader epoch changes or a write fails,
so memory never disagrees with what is durable for long. Acquisition locks are timed by one task
(``run``) that sleeps until the earliest lock deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence

import trio

from kafkacompat.groups.group_configs import GroupConfigs, share_reset_lookback_ms
from kafkacompat.shares.partition import (
    AcknowledgementBatch,
    AcquiredRange,
    AcquireMode,
    SharePartition,
    SharePartitionConfig,
    StateBatch,
)
from kafkacompat.shares.sessions import ShareSessionCache
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.replication.manager import ReplicaManager
    from kafkacompat.replication.partition import Partition
    from kafkacompat.shares.state_store import PersistedState

log = logging.getLogger("kafkacompat.shares")

ShareKey = tuple[str, uuid.UUID, int]

LOCK_CHECK_S = 0.5
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class SharePersister(Protocol):
    """Where share-partition state is made durable (the share coordinator)."""

    async def read_state(self, key: ShareKey) -> "PersistedState | None": ...

    async def write_state(self, key: ShareKey, leader_epoch: int, start_offset: int,
                          batches: list[StateBatch], state_epoch: int = 0) -> None: ...

    async def initialize_state(self, key: ShareKey, start_offset: int) -> None: ...

    async def delete_state(self, key: ShareKey) -> None: ...


@dataclass(slots=True)
class FetchedPartition:
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    error: int = ErrorCode.NONE
    message: str | None = None


@dataclass(slots=True)
class _Entry:
    share: SharePartition
    leader_epoch: int
    state_epoch: int = 0


@dataclass(frozen=True, slots=True)
class GroupShareConfig:
    """A share group's settings (group configs in Kafka; their defaults here)."""

    auto_offset_reset: str = "latest"
    isolation_level: int = READ_UNCOMMITTED
    lock_duration_s: float = 30.0
    delivery_count_limit: int = 5


class SharePartitionManager:
    def __init__(self, config: "BrokerConfig", replicas: "ReplicaManager", persister: SharePersister) -> None:
        self.config = config
        self.replicas = replicas
        self.persister = persister
        self.partition_config = SharePartitionConfig(
            lock_duration_s=config.group_share_record_lock_duration_ms / 1000,
            delivery_count_limit=config.group_share_delivery_count_limit,
            max_record_locks=config.group_share_partition_max_record_locks,
        )
        self.sessions = ShareSessionCache(config.group_share_max_share_sessions)
        self.entries: dict[ShareKey, _Entry] = {}
        self._initializing: dict[ShareKey, trio.Event] = {}
        self._changed = trio.Event()  # records released, or a new lock to time
        # Per-group configs (the broker replaces these with the ones kept in step with the store).
        self.group_configs = GroupConfigs(config)
        self._dirty: set[ShareKey] = set()  # released in memory, to persist in the next round of run

    def lock_duration_ms(self, group_id: str) -> int:
        """The group's share.record.lock.duration.ms (else the broker's)."""
        return self.group_configs.of(group_id).share_record_lock_duration_ms

    # ---- share partitions -----------------------------------------------------------------------

    def _leader(self, topic: "TopicInfo", index: int) -> "Partition":
        partition = self.replicas.partition(topic.name, index)
        if partition is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if index >= topic.partitions
                             else ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"This broker does not lead {topic.name}-{index}")
        return partition

    async def share_partition(self, group_id: str, topic: "TopicInfo", index: int) -> tuple[SharePartition, "Partition"]:
        partition = self._leader(topic, index)
        key = (group_id, topic.topic_id, index)
        while True:
            entry = self.entries.get(key)
            if entry is not None and entry.leader_epoch == partition.leader_epoch:
                entry.share.config = self._partition_config(group_id)  # the group's configs may have changed
                return entry.share, partition
            waiting = self._initializing.get(key)
            if waiting is None:
                break
            await waiting.wait()
        self.entries.pop(key, None)
        done = self._initializing[key] = trio.Event()
        try:
            share, state_epoch = await self._initialize(key, topic, partition)
            self.entries[key] = _Entry(share, partition.leader_epoch, state_epoch)
            return share, partition
        finally:
            del self._initializing[key]
            done.set()

    async def _initialize(self, key: ShareKey, topic: "TopicInfo",
                          partition: "Partition") -> tuple[SharePartition, int]:
        group_id, _, index = key
        share = SharePartition(group_id, topic.name, index, 0, self._partition_config(group_id))
        persisted = await self.persister.read_state(key)
        if persisted is not None and persisted.start_offset >= 0:
            share.restore(persisted.start_offset, persisted.batches)
            share.move_start_to(partition.log_start_offset)
            log.info("Share group %s resumes %s-%d at offset %d (%d in flight)", group_id, topic.name, index,
                     share.start_offset, share.in_flight())
            return share, persisted.state_epoch
        reset = self.group_config(group_id).auto_offset_reset
        start = _reset_offset(partition, reset)
        share.reset(start)
        await self.persister.write_state(key, partition.leader_epoch, start, [])
        log.info("Share group %s starts %s-%d at offset %d (share.auto.offset.reset=%s)", group_id, topic.name,
                 index, start, reset)
        return share, 0

    def group_config(self, group_id: str) -> GroupShareConfig:
        settings = self.group_configs.of(group_id)
        return GroupShareConfig(settings.share_auto_offset_reset,
                                READ_COMMITTED if settings.share_isolation_level == "read_committed"
                                else READ_UNCOMMITTED, settings.share_record_lock_duration_ms / 1000,
                                settings.share_delivery_count_limit)

    def _partition_config(self, group_id: str) -> SharePartitionConfig:
        """The share partitions' settings with the group's lock duration and delivery count limit."""
        group = self.group_config(group_id)
        base = self.partition_config
        if (group.lock_duration_s, group.delivery_count_limit) == (base.lock_duration_s, base.delivery_count_limit):
            return base
        return dataclasses.replace(base, lock_duration_s=group.lock_duration_s,
                                   delivery_count_limit=group.delivery_count_limit)

    async def _persist(self, key: ShareKey, share: SharePartition, partition: "Partition") -> None:
        entry = self.entries.get(key)
        state_epoch = entry.state_epoch if entry is not None else 0
        try:
            await self.persister.write_state(key, partition.leader_epoch, share.start_offset, share.state_batches(),
                                             state_epoch)
        except BaseException:
            # Memory is ahead of what is durable: reload from the durable state on next use.
            if self.entries.get(key) is not None and self.entries[key].share is share:
                del self.entries[key]
            raise

    # ---- fetch ---------------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, wanted: Sequence[tuple["TopicInfo", int]], *,
                    max_records: int, max_bytes: int, max_wait_ms: int,
                    mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED) -> dict[tuple[uuid.UUID, int], FetchedPartition]:
        """Acquire records of ``wanted`` for the member; waits up to ``max_wait_ms`` for records
        when none could be acquired."""
        results: dict[tuple[uuid.UUID, int], FetchedPartition] = {}
        deadline = trio.current_time() + max(max_wait_ms, 0) / 1000
        while True:
            woken = trio.Event()
            waiting: list["Partition"] = []
            got = await self._fetch_once(group_id, member_id, wanted, max_records, max_bytes, mode, results,
                                         waiting)
            if got or not waiting or trio.current_time() >= deadline:
                return results
            for partition in waiting:
                partition.add_waiter(woken)
            changed = self._changed
            try:
                with trio.move_on_at(deadline):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_wait_then_cancel, woken, nursery.cancel_scope)
                        nursery.start_soon(_wait_then_cancel, changed, nursery.cancel_scope)
            finally:
                for partition in waiting:
                    partition.remove_waiter(woken)

    async def _fetch_once(self, group_id: str, member_id: str, wanted: Sequence[tuple["TopicInfo", int]],
                          max_records: int, max_bytes: int, mode: AcquireMode, results: dict,
                          waiting: list) -> bool:
        got = False
        budget = max(max_bytes, 1)
        for topic, index in wanted:
            result = results[(topic.topic_id, index)] = FetchedPartition()
            try:
                share, partition = await self.share_partition(group_id, topic, index)
            except KafkaError as exc:
                result.error, result.message = exc.code, exc.message
                continue
            if got and budget <= 0:
                continue
            result.records, result.acquired = self._acquire(share, partition, member_id, max_records, budget, mode,
                                                             self.group_config(group_id).isolation_level)
            if result.acquired:
                got = True
                budget -= len(result.records)
                self._changed.set()
                self._changed = trio.Event()
            else:
                waiting.append(partition)
        return got

    def _acquire(self, share: SharePartition, partition: "Partition", member_id: str, max_records: int,
                 max_bytes: int, mode: AcquireMode, isolation_level: int) -> tuple[bytes, list[AcquiredRange]]:
        from kafkacompat.wire.records import iter_batches

        share.move_start_to(partition.log_start_offset)
        upper = partition.last_stable_offset if isolation_level == READ_COMMITTED else partition.high_watermark
        offset = max(share.next_fetch_offset(), partition.log_start_offset)
        if offset >= upper or not share.can_acquire():
            return b"", []
        result = partition.log.read(offset, max_bytes, max_offset=upper)
        try:
            data = result.read_all()
        finally:
            result.close()
        headers = [h for h in iter_batches(data)]
        batches = [(h.base_offset, h.last_offset) for h in headers if not h.is_control]
        acquired = share.acquire(member_id, batches, max_records, trio.current_time(), mode)
        if not acquired:
            return b"", []
        return _batches_covering(data, headers, acquired), acquired

    # ---- acknowledge and release ---------------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str, topic: "TopicInfo", index: int,
                          batches: list[AcknowledgementBatch]) -> tuple[int, str | None]:
        try:
            share, partition = await self.share_partition(group_id, topic, index)
            share.acknowledge(member_id, batches, trio.current_time())
            self._wake()
            await self._persist((group_id, topic.topic_id, index), share, partition)
        except KafkaError as exc:
            return exc.code, exc.message
        return ErrorCode.NONE, None

    async def release_member(self, group_id: str, member_id: str,
                             keys: Sequence[tuple[uuid.UUID, int]] | None = None) -> None:
        """The member closed its share session: its records come back, durably before the answer."""
        for key in self._release_in_memory(group_id, member_id, keys):
            await self._persist_logged(key, f"the release of member {member_id}'s records")

    def _release_in_memory(self, group_id: str, member_id: str,
                           keys: Sequence[tuple[uuid.UUID, int]] | None) -> list[ShareKey]:
        released = []
        for key, entry in self.entries.items():
            if key[0] != group_id or (keys is not None and (key[1], key[2]) not in keys):
                continue
            if entry.share.release_member(member_id):
                released.append(key)
        if released:
            self._wake()
        return released

    async def _persist_logged(self, key: ShareKey, what: str) -> None:
        entry = self.entries.get(key)
        if entry is None:
            return
        partition = self.replicas.partition(entry.share.topic, entry.share.partition)
        if partition is None or not partition.is_leader:
            return
        try:
            await self._persist(key, entry.share, partition)
        except KafkaError as exc:
            log.warning("Could not persist %s of %s-%d for share group %s: %s", what, entry.share.topic,
                        entry.share.partition, key[0], exc)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ---- acquisition lock timeouts ------------------------------------------------------------------

    async def run(self) -> None:
        await self._time_locks()

    def session_connection_closed(self, session) -> None:
        """The connection a share session was opened on closed: the session ends and its
        member's records come back at once (Kafka 4.1's connection-disconnect listener), made
        durable by the next round of ``run`` (a broker stopping makes none: the records keep their
        delivery count, as after a crash)."""
        if self.sessions.get(session.group_id, session.member_id) is not session:
            return  # replaced by a newer session (the member reconnected)
        self.sessions.remove_member(session.group_id, session.member_id)
        self._dirty.update(self._release_in_memory(session.group_id, session.member_id, list(session.partitions)))

    def release_member_soon(self, group_id: str, member_id: str) -> None:
        """A member was removed from its share group (left, or its session timed out)."""
        self.sessions.remove_member(group_id, member_id)
        self._dirty.update(self._release_in_memory(group_id, member_id, None))

    async def _time_locks(self) -> None:
        """Sleep until the earliest lock deadline, at most LOCK_CHECK_S (a lock taken meanwhile is
        at least group.share.record.lock.duration.ms away, >= 1 s), then release what expired."""
        while True:
            deadlines = [d for d in (e.share.next_lock_deadline() for e in self.entries.values()) if d is not None]
            await trio.sleep_until(min(min(deadlines, default=float("inf")), trio.current_time() + LOCK_CHECK_S))
            try:
                await self.expire_locks()
                while self._dirty:
                    await self._persist_logged(self._dirty.pop(), "released records")
            except Exception:
                log.exception("Releasing expired share acquisition locks failed; retrying")

    async def expire_locks(self) -> None:
        now = trio.current_time()
        expired = [key for key, entry in self.entries.items() if entry.share.expire_locks(now)]
        if expired:
            self._wake()
        for key in expired:
            await self._persist_logged(key, "expired acquisition locks")

    def invalidate(self, key: ShareKey) -> None:
        """The durable state was changed from outside (AlterShareGroupOffsets, DeleteShareGroupOffsets):
        the next use reloads it."""
        self.entries.pop(key, None)

    def on_partition_state(self, state, node_id: int) -> None:
        if state.leader != node_id:
            self.forget_partition(state.topic, state.partition)

    def on_partition_removed(self, topic: str, index: int) -> None:
        self.forget_partition(topic, index)

    def forget_partition(self, topic: str, index: int) -> None:
        """Leadership moved away (or the partition was removed): the next leader loads the state."""
        for key in [k for k, e in self.entries.items() if e.share.topic == topic and e.share.partition == index]:
            del self.entries[key]


async def _wait_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _batches_covering(data: bytes, headers: list, acquired: list[AcquiredRange]) -> bytes:
    """The whole batches of ``data`` that hold an acquired record (the client keeps only the
    acquired offsets of them)."""
    ranges = [(r.first_offset, r.last_offset) for r in acquired]
    return b"".join(bytes(data[h.position:h.position + h.size]) for h in headers
                    if any(first <= h.last_offset and h.base_offset <= last for first, last in ranges))


def _reset_offset(partition: "Partition", reset: str) -> int:
    """Where a new share partition starts for ``share.auto.offset.reset``."""
    if reset == "earliest":
        return partition.log_start_offset
    lookback_ms = share_reset_lookback_ms(reset)
    if lookback_ms is not None:
        found = partition.log.offset_for_timestamp(int(time.time() * 1000) - lookback_ms)
        if found is not None:
            return min(max(found[0], partition.log_start_offset), partition.high_watermark)
    return partition.high_watermark
