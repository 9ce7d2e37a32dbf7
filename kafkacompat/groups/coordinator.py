"""The group coordinator: Kafka's classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup),
committed offsets, and their durable form in __consumer_offsets.

Everything that changes a group runs synchronously between two awaits (one Trio thread), so no
locks are needed. Writes to __consumer_offsets go to the partition synchronously too. The group
metadata a completed rebalance (or a static member's rejoin) depends on is stored as Kafka's
storeGroup does, with acks=-1: the transition it completes happens once the ISR of the group's
partition has the record (``_store_group_replicated``), at once when nothing is left to wait
for (a single node), else from a task in ``run``'s nursery. Parked JoinGroup and SyncGroup
requests wait on Trio events (``Waiter``); every timeout (session, rebalance, initial rebalance
delay, pending sync) is an entry in one timer heap served by one task, ``run``. Time comes from
Trio's clock (``trio.current_time``), so tests drive it with ``trio.testing.MockClock``; wall
clock timestamps (commit times, retention) come from ``wall_clock``, which tests can replace.

Behaviour, error codes and their order follow Kafka's ClassicGroupMetadataManager,
GroupMetadataManager and OffsetMetadataManager (group-coordinator module).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import trio

from kafkacompat.groups.group_configs import GroupConfigs
from kafkacompat.groups import consumer_records, storage, streams_records
from kafkacompat.groups.streams_coordinator import StreamsGroupCoordinator
from kafkacompat.groups.consumer_coordinator import ConsumerGroupCoordinator
from kafkacompat.groups.consumer_group import ConsumerGroupState
from kafkacompat.groups.streams_group import StreamsGroupState
from kafkacompat.groups.state import (
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
    Waiter,
)
from kafkacompat.groups.storage import OFFSETS_TOPIC, OffsetCommitValue
from kafkacompat.groups.txn_offsets import PendingTxnOffsets
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.services import OffsetsLog
    from kafkacompat.replication.partition import Partition

log = logging.getLogger("kafkacompat.groups")

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE,
    GroupState.DEAD,
)
# Kafka's group.classic.new.member.join.timeout: a new member parked in JoinGroup cannot
# heartbeat, so its join is timed out after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str = ""
    client_host: str = ""
    version: int = 9
    reason: str | None = None
    # The topics that exist (MetadataView.topics): a consumer group's classic members need them.
    topics: "Callable[[], Iterable[TopicInfo]] | None" = None


@dataclass(slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error: int = 0


@dataclass(slots=True)
class PendingCommit:
    """An OffsetCommit appended to __consumer_offsets, waiting for the ISR."""

    group: Group
    values: list[tuple[tuple[str, int], OffsetCommitValue]]
    partition: "Partition"
    required_offset: int
    leader_epoch: int


def _append_error_code(exc: Exception) -> int:
    """The error code of a failed append; an OSError is Kafka's KafkaStorageException."""
    return exc.code if isinstance(exc, KafkaError) else ErrorCode.KAFKA_STORAGE_ERROR


def _store_error_code(code: int) -> int:
    """Kafka's appendGroupMetadataErrorToResponseError (group-coordinator module): what a client
    is told when an append to __consumer_offsets failed with ``code``. NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (only an acks=-1 wait produces it) maps as in the 3.x GroupMetadataManager.storeGroup, whose
    REBALANCE_IN_PROGRESS for REQUEST_TIMED_OUT the group-coordinator module replaced."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def _store_error(exc: Exception) -> int:
    return _store_error_code(_append_error_code(exc))


def _commit_error(exc: Exception) -> int:
    """Kafka's mapping of append errors for offset commits."""
    if _append_error_code(exc) in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                                   ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return _store_error(exc)


def _consumer_tombstones(group: Group) -> list[tuple[bytes, bytes | None]]:
    """The tombstones of a consumer or streams group's records (a deleted group)."""
    if isinstance(group.consumer, StreamsGroupState):
        return streams_records.group_tombstones(group.consumer)
    return consumer_records.group_tombstones(group.group_id)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass(slots=True)
class _StaticRejoin:
    """What a static member's rejoin in Stable changed, to answer it or undo it once the group
    metadata is stored (Kafka's updateStaticMemberAndRebalance)."""

    instance_id: str
    old_member_id: str
    new_member_id: str
    old_leader_id: str | None
    old_protocols: list[tuple[str, bytes]]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    version: int


class _Timers:
    """Keyed one-shot timers in a heap; rescheduling a key replaces its previous entry."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, object, Callable[[], None]]] = []
        self._live: dict[object, int] = {}
        self._seq = itertools.count()
        self.wakeup = trio.Event()
        self.sleeping_until = float("inf")

    def schedule(self, key: object, deadline_ms: float, callback: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._live[key] = seq
        heapq.heappush(self._heap, (deadline_ms, seq, key, callback))
        if len(self._heap) > 2 * len(self._live) + 1024:
            self._heap = [entry for entry in self._heap if self._live.get(entry[2]) == entry[1]]
            heapq.heapify(self._heap)
        if deadline_ms < self.sleeping_until:
            self.wakeup.set()

    def cancel(self, key: object) -> None:
        self._live.pop(key, None)

    def scheduled(self, key: object) -> bool:
        return key in self._live

    def next_deadline(self) -> float | None:
        while self._heap and self._live.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: float) -> list[Callable[[], None]]:
        due = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, seq, key, callback = heapq.heappop(self._heap)
            if self._live.get(key) == seq:
                del self._live[key]
                due.append(callback)
        return due


class GroupCoordinator:
    def __init__(self, config: "BrokerConfig", offsets: "OffsetsLog", *, clustered: bool,
                 wall_clock: Callable[[], int] | None = None) -> None:
        self.offsets = offsets
        self.config = config
        self.groups: dict[str, Group] = {}
        self.loading = False
        self.wall_clock = wall_clock or (lambda: int(time.time() * 1000))
        self._timers = _Timers()
        self.txn_offsets = PendingTxnOffsets()
        # In a cluster: the __consumer_offsets partitions this broker leads (their groups are
        # loaded here); None on a single node, which coordinates every group.
        # A cluster member owns none until the controller makes it a leader (NOT_COORDINATOR until
        # then, which clients answer by looking the coordinator up again).
        self.owned_partitions: set[int] | None = set() if clustered else None
        # run()'s nursery: group metadata stores waiting for their ISR finish in it.
        self._background: trio.Nursery | None = None
        # Whether a group id belongs to another protocol's groups (share groups): a classic
        # JoinGroup for it is INCONSISTENT_GROUP_PROTOCOL, as Kafka answers.
        self.foreign_group: Callable[[str], bool] = lambda group_id: False
        # Per-group configs (the broker replaces these with the ones kept in step with the store).
        self.group_configs = GroupConfigs(config)

        # KIP-848 consumer groups: ConsumerGroupHeartbeat / ConsumerGroupDescribe.
        self.consumer = ConsumerGroupCoordinator(self)
        # KIP-1071 streams groups: StreamsGroupHeartbeat / StreamsGroupDescribe.
        self.streams = StreamsGroupCoordinator(self)

    # ---- what the consumer protocol uses (consumer_coordinator.GroupsHost) ----------------------

    def check_group_id(self, group_id: str | None) -> int:
        return self._check_group_id(group_id)

    def schedule_timer(self, key: object, delay_ms: float, callback: Callable[[], None]) -> None:
        self._schedule(key, delay_ms, callback)

    def cancel_timer(self, key: object) -> None:
        self._timers.cancel(key)

    def append_records(self, group_id: str, records: list[tuple[bytes, bytes | None]]):
        """Append a group's records as Kafka's coordinator runtime does (acks=-1); a failure
        raises KafkaError with the code its client is told (Kafka's
        appendGroupMetadataErrorToResponseError). Returns what ``when_replicated`` waits for."""
        try:
            return self._append(group_id, records, acks_all=True)
        except (KafkaError, OSError) as exc:
            raise KafkaError(_store_error(exc), str(getattr(exc, "message", exc))) from None

    def when_replicated(self, group_id: str, appended, on_done: Callable[[int], None]) -> None:
        """``on_done(error code)`` once the ISR of the group's partition has an append (at once
        on a single node), as ``_store_group_replicated`` waits."""
        partition, required_offset, leader_epoch = appended
        status = partition.replication_status(required_offset, leader_epoch)
        if status is not None:
            on_done(_store_error_code(status))
        elif self._background is None:
            on_done(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            self._background.start_soon(self._finish_store_when_replicated, group_id, partition,
                                        required_offset, leader_epoch, on_done)

    def release_classic_members(self, group: Group) -> None:
        """A classic group becomes a consumer group: its parked JoinGroup/SyncGroup requests are
        answered REBALANCE_IN_PROGRESS (their members rejoin) and its classic timers stop."""
        for member in group.members.values():
            self._answer_parked_requests(member, ErrorCode.REBALANCE_IN_PROGRESS)
        for member_id in [*group.members, *group.pending_members]:
            self._timers.cancel(self._heartbeat_key(group, member_id))
        self._timers.cancel(("join", group.group_id))
        self._timers.cancel(("sync", group.group_id))
        group.members.clear()
        group.pending_members.clear()
        group.static_members.clear()
        group.supported_protocols.clear()
        group.pending_sync.clear()
        group.leader_id = None
        group.state, group.previous_state = EMPTY, None  # no classic state machine while it is a consumer group

    def adopt_classic_group(self, group: Group, reason: str) -> None:
        """A consumer group downgraded to ``group`` (Stable, with its members): they must
        heartbeat within their session timeouts, and a rebalance starts."""
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)
        self._prepare_rebalance(group, reason)

    def classic_group_record(self, group: Group) -> tuple[bytes, bytes | None]:
        return self._group_metadata_record(group)

    # ---- time and timers ----------------------------------------------------------------------

    @staticmethod
    def now_ms() -> float:
        return trio.current_time() * 1000

    def _schedule(self, key: object, delay_ms: float, callback: Callable[[], None]) -> None:
        self._timers.schedule(key, self.now_ms() + delay_ms, callback)

    def fire_due_timers(self) -> None:
        for callback in self._timers.pop_due(self.now_ms()):
            try:
                callback()
            except Exception:
                log.exception("A group coordinator timer failed; the coordinator carries on")

    async def run(self) -> None:
        """The coordinator's background work: its timers and the offset retention check."""
        # Loaded members must heartbeat within their session timeout from now (Kafka's onLoaded).
        # Scheduled here, not in load(), so that load() needs no running Trio clock.
        for group in self.groups.values():
            for member in group.members.values():
                if not self._timers.scheduled(self._heartbeat_key(group, member.member_id)):
                    self._reschedule_heartbeat(group, member)
            self.consumer.on_loaded(group)
            self.streams.on_loaded(group)
        try:
            async with trio.open_nursery() as nursery:
                self._background = nursery
                nursery.start_soon(self._run_timers)
                nursery.start_soon(self._run_retention)
        finally:
            self._background = None

    async def _run_timers(self) -> None:
        timers = self._timers
        while True:
            self.fire_due_timers()
            deadline = timers.next_deadline()
            timers.wakeup = trio.Event()
            if deadline is None:
                timers.sleeping_until = float("inf")
                await timers.wakeup.wait()
            else:
                timers.sleeping_until = deadline
                with trio.move_on_at(deadline / 1000):
                    await timers.wakeup.wait()
            timers.sleeping_until = float("inf")

    async def _run_retention(self) -> None:
        while True:
            await trio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            try:
                self.cleanup_expired_offsets()
            except Exception:
                log.exception("Offset retention check failed; will retry")

    # ---- __consumer_offsets -------------------------------------------------------------------

    def offsets_topic(self):
        return self.offsets.topic()

    def offsets_topic_configs(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config.offsets_topic_segment_bytes),
        }

    def ensure_offsets_topic(self):
        return self.offsets.ensure_topic()

    def partition_for(self, group_id: str) -> int:
        topic = self.offsets_topic()
        count = topic.partitions if topic is not None else self.config.offsets_topic_num_partitions
        return storage.partition_for(group_id, count)

    def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]], *, acks_all: bool = False,
                transactional_producer: tuple[int, int] | None = None):
        """Write records for a group to its __consumer_offsets partition; raises on failure.
        Returns (partition, offset after the batch, leader epoch) for `Partition.wait_replicated`.
        ``acks_all``: the caller waits for the ISR, so min.insync.replicas is checked first (as
        Kafka's acks=-1 appends)."""
        from kafkacompat.wire.records import validate_batches

        if not records:
            return None
        self.ensure_offsets_topic()
        partition = self.offsets.partition(self.partition_for(group_id))
        if partition is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the offsets partition is not available")
        partition.check_leader()
        if acks_all:
            partition.check_enough_replicas()
        batch = storage.build_batch(records, self.wall_clock(), self.config.offsets_topic_compression_codec,
                                    transactional_producer=transactional_producer)
        view = memoryview(batch)
        headers = validate_batches(view, partition.log.config.max_message_bytes)
        info = partition.append(view, headers)
        return partition, info.last_offset + 1, partition.leader_epoch

    def _group_metadata_record(self, group: Group, assignment: dict[str, bytes] | None = None):
        members = [
            storage.MemberMetadataRecord(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(group.protocol_name),
                assignment.get(m.member_id, b"") if assignment is not None else m.assignment,
            )
            for m in group.members.values()
        ]
        value = storage.GroupMetadataValue(
            group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
            group.state_timestamp if group.state_timestamp is not None else -1, members,
        )
        return storage.group_metadata_key(group.group_id), storage.group_metadata_value(value)

    def _store_group(self, group: Group, assignment: dict[str, bytes] | None = None) -> int:
        """Append the group's metadata without waiting for the ISR (writes nobody waits on in
        Kafka: a new group, a group left empty)."""
        try:
            self._append(group.group_id, [self._group_metadata_record(group, assignment)])
        except (KafkaError, OSError) as exc:
            log.warning("Could not store the metadata of group %s: %s", group.group_id, exc)
            return _store_error(exc)
        return ErrorCode.NONE

    def _store_group_replicated(self, group: Group, assignment: dict[str, bytes] | None,
                                on_stored: Callable[[int], None]) -> None:
        """Kafka's GroupMetadataManager.storeGroup: append the group's metadata with acks=-1 and
        call ``on_stored`` with the client's error code (0: stored) once the ISR of the group's
        partition has it, or the append failed, leadership moved or offsets.commit.timeout.ms
        passed. When nothing is left to wait for (a single node) ``on_stored`` runs before this
        returns, so the group changes in the same step as the request that stored it."""
        try:
            appended = self._append(group.group_id, [self._group_metadata_record(group, assignment)], acks_all=True)
        except (KafkaError, OSError) as exc:
            log.warning("Could not store the metadata of group %s: %s", group.group_id, exc)
            on_stored(_store_error(exc))
            return
        partition, required_offset, leader_epoch = appended
        status = partition.replication_status(required_offset, leader_epoch)
        if status is not None:
            on_stored(_store_error_code(status))
        elif self._background is None:
            log.error("Group %s: nothing can wait for the replication of its metadata (the coordinator "
                      "is not running)", group.group_id)
            on_stored(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            self._background.start_soon(self._finish_store_when_replicated, group.group_id, partition,
                                        required_offset, leader_epoch, on_stored)

    async def _finish_store_when_replicated(self, group_id: str, partition: "Partition", required_offset: int,
                                            leader_epoch: int, on_stored: Callable[[int], None]) -> None:
        status = await partition.wait_replicated(required_offset, leader_epoch, self.config.offsets_commit_timeout_ms)
        if status:
            log.warning("The metadata of group %s was not replicated: %s", group_id, _error_name(status))
        try:
            on_stored(_store_error_code(status))
        except Exception:
            log.exception("Completing the metadata store of group %s failed; the coordinator carries on", group_id)

    # ---- loading ------------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild groups and offsets from __consumer_offsets (start-up)."""
        topic = self.offsets_topic()
        if topic is None:
            return
        self.loading = True
        try:
            for index in range(topic.partitions):
                partition = self.offsets.partition(index)
                if partition is not None:
                    self._load_partition(partition)
        finally:
            self.loading = False
        log.info("Loaded %d group(s) from %s", len(self.groups), OFFSETS_TOPIC)

    def _load_partition(self, partition) -> None:
        metadata: dict[str, storage.GroupMetadataValue | None] = {}
        offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = {}
        consumer_groups: dict[str, ConsumerGroupState] = {}
        consumer_seen: set[str] = set()
        streams_groups: dict[str, StreamsGroupState] = {}
        streams_seen: set[str] = set()
        # Offsets of transactions without a marker yet: producer id -> group -> partition -> value.
        pending_txn: dict[int, dict[str, dict[tuple[str, int], OffsetCommitValue]]] = {}
        position = partition.log_start_offset
        end = partition.log_end_offset  # as Kafka: a new leader loads to its log end
        chunk = max(self.config.offsets_load_buffer_size, 1)
        while position < end:
            result = partition.log.read(position, chunk, max_offset=end, min_one_batch=True)
            try:
                data = result.read_all()
            finally:
                result.close()
            if not data:
                break
            last = position
            for record in storage.iter_loaded_records(data):
                offset, key, value = record.offset, record.key, record.value
                last = offset
                if record.marker is not None:
                    self._load_txn_marker(pending_txn, offsets, record.txn_producer_id, record.marker)
                    continue
                if key is None:
                    continue
                if consumer_records.key_version(key) in consumer_records.CONSUMER_KEY_VERSIONS:
                    consumer_seen.add(consumer_records.replay(consumer_groups, key, value))
                    continue
                if consumer_records.key_version(key) in streams_records.STREAMS_KEY_VERSIONS:
                    streams_seen.add(streams_records.replay(streams_groups, key, value))
                    continue
                decoded = storage.decode_key(key)
                if isinstance(decoded, storage.OffsetKey) and record.txn_producer_id >= 0:
                    if value is not None:
                        pending_txn.setdefault(record.txn_producer_id, {}).setdefault(decoded.group, {})[
                            (decoded.topic, decoded.partition)] = storage.decode_offset_value(value)
                elif isinstance(decoded, storage.OffsetKey):
                    group_offsets = offsets.setdefault(decoded.group, {})
                    tp = (decoded.topic, decoded.partition)
                    if value is None:
                        group_offsets.pop(tp, None)
                    else:
                        group_offsets[tp] = storage.decode_offset_value(value)
                elif isinstance(decoded, storage.GroupKey):
                    metadata[decoded.group] = None if value is None else storage.decode_group_value(value)
            from kafkacompat.wire.records import iter_batches

            next_position = max((h.next_offset for h in iter_batches(data)), default=last + 1)
            position = max(next_position, position + 1)
        for group_id, value in metadata.items():
            if value is None:
                self.groups.pop(group_id, None)
                continue
            self.groups[group_id] = self._group_from_record(group_id, value)
        for group_id in sorted(consumer_seen | streams_seen):
            consumer_state = streams_groups.get(group_id) or consumer_groups.get(group_id)
            if consumer_state is None:
                if group_id not in metadata:
                    self.groups.pop(group_id, None)
                continue
            group = self.groups.get(group_id)
            if group is None or group.members:
                group = self.groups[group_id] = Group(group_id, self.wall_clock())
            group.consumer = consumer_state
        for group_id, group_offsets in offsets.items():
            if not group_offsets:
                continue
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = Group(group_id, self.wall_clock())
                group.state_timestamp = None
            group.offsets.update(group_offsets)
        end_position = partition.log_end_offset
        for producer_id, groups in pending_txn.items():
            for group_id, values in groups.items():
                self.txn_offsets.add(producer_id, group_id, list(values.items()), end_position)

    @staticmethod
    def _load_txn_marker(pending_txn, offsets, producer_id: int, committed: bool) -> None:
        for group_id, values in pending_txn.pop(producer_id, {}).items():
            if committed:
                offsets.setdefault(group_id, {}).update(values)

    def _group_from_record(self, group_id: str, value: storage.GroupMetadataValue) -> Group:
        group = Group(group_id, value.current_state_timestamp, STABLE if value.members else EMPTY)
        group.state_timestamp = value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        for record in value.members:
            member = Member(
                record.member_id, record.group_instance_id, record.client_id, record.client_host,
                record.rebalance_timeout if record.rebalance_timeout != -1 else record.session_timeout,
                record.session_timeout, value.protocol_type, [(value.protocol or "", record.subscription)],
                assignment=record.assignment,
            )
            group.add(member, None)
        group.leader_id = value.leader
        return group

    # ---- helpers --------------------------------------------------------------------------

    def _check_group_id(self, group_id: str | None) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.is_coordinator_for(group_id):
            return ErrorCode.NOT_COORDINATOR
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    # ---- leadership of __consumer_offsets (cluster mode) ----------------------------------------

    def is_coordinator_for(self, group_id: str) -> bool:
        return self.owned_partitions is None or self.partition_for(group_id) in self.owned_partitions

    def on_partition_state(self, state, node_id: int) -> None:
        """The broker applied a controller state: load a __consumer_offsets partition's groups when
        this broker becomes its leader, drop them when it stops being the leader."""
        if state.topic != OFFSETS_TOPIC:
            return
        if self.owned_partitions is None:
            self.owned_partitions = set()
        index = state.partition
        if state.leader == node_id and index not in self.owned_partitions:
            partition = self.offsets.partition(index)
            if partition is None:
                return
            self.loading = True
            try:
                before = set(self.groups)
                self._load_partition(partition)
            finally:
                self.loading = False
            self.owned_partitions.add(index)
            for group_id in set(self.groups) - before:
                group = self.groups[group_id]
                for member in group.members.values():
                    self._reschedule_heartbeat(group, member)
                self.consumer.on_loaded(group)
                self.streams.on_loaded(group)
            log.info("Coordinating the groups of %s-%d", OFFSETS_TOPIC, index)
        elif state.leader != node_id and index in self.owned_partitions:
            self.on_partition_removed(OFFSETS_TOPIC, index)

    def on_partition_removed(self, topic: str, index: int) -> None:
        if topic != OFFSETS_TOPIC or self.owned_partitions is None or index not in self.owned_partitions:
            return
        self.owned_partitions.discard(index)
        moved = [g for g in self.groups if self.partition_for(g) == index]
        for group_id in moved:
            self._unload(self.groups.pop(group_id))
        self.txn_offsets.drop_groups(set(moved))
        log.info("No longer coordinating the groups of %s-%d", OFFSETS_TOPIC, index)

    def _unload(self, group: Group) -> None:
        """Kafka's onGroupUnloaded: the group is Dead here, and its parked JoinGroup and SyncGroup
        requests are answered NOT_COORDINATOR so their clients find the new coordinator."""
        for member in group.members.values():
            self._answer_parked_requests(member, ErrorCode.NOT_COORDINATOR)
        for member_id in [*group.members, *group.pending_members]:
            self._timers.cancel(self._heartbeat_key(group, member_id))
        self._timers.cancel(("join", group.group_id))
        self._timers.cancel(("sync", group.group_id))
        self.consumer.on_unloaded(group)
        self.streams.on_unloaded(group)
        group.transition_to(DEAD, self.wall_clock())

    @staticmethod
    def _answer_parked_requests(member: Member, error: int) -> None:
        """``member``'s parked JoinGroup and SyncGroup, if any, are answered with ``error``."""
        if member.join_waiter is not None:
            member.join_waiter.complete(JoinResult(error, member.member_id))
            member.join_waiter = None
        if member.sync_waiter is not None:
            member.sync_waiter.complete(SyncResult(error))
            member.sync_waiter = None

    @staticmethod
    def _validate_member(group: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = group.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                log.info("Member %s with instance id %s of group %s is fenced by %s",
                         member_id, instance_id, group.group_id, existing)
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _heartbeat_key(self, group: Group, member_id: str):
        return ("heartbeat", group.group_id, member_id)

    def _reschedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        self._schedule(
            ("heartbeat", group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(group_id, member_id),
        )

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return
        if member_id in group.pending_members:
            log.info("Pending member %s of group %s did not rejoin in time", member_id, group_id)
            group.remove(member_id)
            self._maybe_complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            log.info("Member %s of group %s is removed: its session timed out", member_id, group_id)
            self._remove_member_and_update_group(group, member, "session timeout expired")

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._timers.cancel(self._heartbeat_key(group, member.member_id))
        self._answer_parked_requests(member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        if group.is_in(STABLE, COMPLETING):
            self._prepare_rebalance(group, f"removing member {member.member_id}: {reason}")
        elif group.is_in(PREPARING):
            self._maybe_complete_join_phase(group)

    def _maybe_prepare_rebalance_or_complete_join(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: Group) -> None:
        if group.is_in(PREPARING) and group.has_all_members_joined() and group.previous_state != EMPTY:
            self._complete_join(group)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_in(COMPLETING):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._timers.cancel(("sync", group.group_id))
        is_initial = group.is_in(EMPTY)
        group.transition_to(PREPARING, self.wall_clock())
        log.info("Preparing to rebalance group %s (old generation %d): %s",
                 group.group_id, group.generation_id, reason)
        group_id = group.group_id
        if is_initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            self._schedule(("join", group_id), delay, lambda: self._initial_delay_expired(group_id, delay, remaining))
        elif group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._schedule(("join", group_id), group.rebalance_timeout_ms(), lambda: self._join_timeout(group_id))

    def _initial_delay_expired(self, group_id: str, delay: int, remaining: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(PREPARING):
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            initial = self.config.group_initial_rebalance_delay_ms
            new_delay = min(initial, remaining)
            new_remaining = max(remaining - initial, 0)
            self._schedule(("join", group_id), new_delay,
                           lambda: self._initial_delay_expired(group_id, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _join_timeout(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.is_in(PREPARING):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        self._timers.cancel(("join", group.group_id))
        if not group.is_in(PREPARING):
            return
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("Member %s of group %s did not rejoin within the rebalance timeout; removed",
                     member.member_id, group.group_id)
            self._timers.cancel(self._heartbeat_key(group, member.member_id))
            self._answer_parked_requests(member, ErrorCode.UNKNOWN_MEMBER_ID)
            group.remove(member.member_id)
        now = self.wall_clock()
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition_to(COMPLETING, now)
        else:
            group.protocol_name = None
            group.transition_to(EMPTY, now)
        log.info("Group %s generation %d: %s with %d member(s), protocol %s", group.group_id, group.generation_id,
                 group.state.value, len(group.members), group.protocol_name)
        if group.is_in(EMPTY):
            self._store_group(group, {})
            return
        members = group.current_members()
        for member in group.members.values():
            is_leader = group.is_leader(member.member_id)
            result = JoinResult(
                ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                group.leader_id or "", False, members if is_leader else [],
            )
            if member.join_waiter is not None:
                member.join_waiter.complete(result)
                member.join_waiter = None
            member.is_new = False
            self._reschedule_heartbeat(group, member)
        group.pending_sync = set(group.members)
        group_id, generation = group.group_id, group.generation_id
        self._schedule(("sync", group_id), group.rebalance_timeout_ms(),
                       lambda: self._expire_pending_sync(group_id, generation))

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(COMPLETING, STABLE) or group.generation_id != generation:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info("Member %s of group %s did not send SyncGroup in time; removed", member_id, group_id)
                self._timers.cancel(self._heartbeat_key(group, member_id))
                self._answer_parked_requests(member, ErrorCode.UNKNOWN_MEMBER_ID)
                group.remove(member_id)
        group.pending_sync.clear()
        self._prepare_rebalance(group, "members did not send SyncGroup within the rebalance timeout")

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: int) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                member.sync_waiter.complete(SyncResult(
                    error, member.assignment if error == ErrorCode.NONE else b"",
                    group.protocol_type, group.protocol_name,
                ))
                member.sync_waiter = None
                self._reschedule_heartbeat(group, member)

    # ---- JoinGroup ----------------------------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        outcome = self._join(request)
        if isinstance(outcome, Waiter):
            return await outcome.wait()
        return outcome

    def _join(self, req: JoinRequest) -> JoinResult | Waiter:
        error = self._check_group_id(req.group_id)
        if error:
            return JoinResult(error, req.member_id)
        config = self.config
        if not config.group_min_session_timeout_ms <= req.session_timeout_ms <= config.group_max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        if req.rebalance_timeout_ms < 0:
            req.rebalance_timeout_ms = req.session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        if self.foreign_group(req.group_id):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        is_unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is not None and group.consumer is not None:
            if group.has_consumer_members():
                return self.consumer.classic_join(
                    group, req.member_id, req.group_instance_id, req.protocol_type, req.protocols,
                    req.session_timeout_ms, req.rebalance_timeout_ms, req.client_id, req.client_host, req.version,
                    req.topics or (lambda: []))
            error = self._drop_empty_consumer_group(group)
            if error:
                return JoinResult(error, req.member_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
            group = self.groups[req.group_id] = Group(req.group_id, self.wall_clock())
        if not self._accept_joining_member(group, req.member_id):
            removed = group.remove(req.member_id)
            if removed is not None:
                self._timers.cancel(self._heartbeat_key(group, removed.member_id))
            outcome: JoinResult | Waiter = JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
        elif is_unknown:
            outcome = self._join_new_member(group, req)
        else:
            outcome = self._join_existing_member(group, req)
        if is_new_group and isinstance(outcome, JoinResult):
            error = self._store_group(group)
            if error and outcome.error == ErrorCode.NONE:
                outcome = JoinResult(error, req.member_id)
        return outcome

    def _drop_empty_consumer_group(self, group: Group) -> int:
        """An empty consumer group joined with the classic protocol becomes a classic group
        (its offsets stay), as Kafka's classicGroupJoin does."""
        try:
            self._append(group.group_id, _consumer_tombstones(group))
        except (KafkaError, OSError) as exc:
            return _store_error(exc)
        group.consumer = None
        return ErrorCode.NONE

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.is_in(EMPTY, DEAD):
            return True
        if group.is_in(PREPARING):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join() < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group: Group, req: JoinRequest) -> JoinResult | Waiter:
        if group.is_in(DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                log.info("Static member %s of group %s rejoins; replacing member id %s with %s",
                         req.group_instance_id, group.group_id, existing, new_member_id)
                return self._update_static_member(group, req, existing, new_member_id)
            return self._add_member_and_rebalance(group, req, new_member_id)
        if req.version >= 4:
            group.pending_members.add(new_member_id)
            group_id = group.group_id
            self._schedule(("heartbeat", group_id, new_member_id), req.session_timeout_ms,
                           lambda: self._expire_heartbeat(group_id, new_member_id))
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
        return self._add_member_and_rebalance(group, req, new_member_id)

    def _join_existing_member(self, group: Group, req: JoinRequest) -> JoinResult | Waiter:
        member_id = req.member_id
        if group.is_in(DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, req, member_id)
        error = self._validate_member(group, member_id, req.group_instance_id)
        if error:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        current = JoinResult(
            ErrorCode.NONE, member_id, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "",
        )
        if group.is_in(PREPARING):
            return self._update_member_and_rebalance(group, member, req)
        if group.is_in(COMPLETING):
            if member.matches(req.protocols):
                if group.is_leader(member_id):
                    current.members = group.current_members()
                return current
            return self._update_member_and_rebalance(group, member, req)
        if group.is_in(STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                return self._update_member_and_rebalance(group, member, req)
            return current
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    def _add_member_and_rebalance(self, group: Group, req: JoinRequest, member_id: str) -> Waiter:
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
            req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True,
        )
        if group.is_in(PREPARING) and group.previous_state == EMPTY:
            group.new_member_added = True
        waiter = Waiter()
        group.add(member, waiter)
        self._reschedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"adding new member {member_id} with group instance id {req.group_instance_id}")
        return waiter

    def _update_member_and_rebalance(self, group: Group, member: Member, req: JoinRequest) -> Waiter:
        waiter = Waiter()
        group.update_member(member, list(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, waiter)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"member {member.member_id} joins during {group.state.value}")
        return waiter

    def _update_static_member(self, group: Group, req: JoinRequest, old_id: str, new_id: str) -> JoinResult | Waiter:
        current_leader = group.leader_id
        self._timers.cancel(self._heartbeat_key(group, old_id))
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        waiter = Waiter()
        group.update_member(member, list(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, waiter)
        if group.is_in(STABLE):
            if group.protocol_name == group.select_protocol():
                # No rebalance: the new member id is answered once the group metadata with it is
                # stored (until then the member awaits its join, as in Kafka).
                rejoin = _StaticRejoin(req.group_instance_id, old_id, new_id, current_leader, old_protocols,
                                       old_rebalance, old_session, req.version)
                self._store_group_replicated(
                    group, None, lambda error: self._complete_static_rejoin(group, rejoin, waiter, error))
                return waiter
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"static member {new_id} rejoined with a change of protocol")
        elif group.is_in(COMPLETING):
            self._prepare_rebalance(group, f"static member {new_id} rejoined during CompletingRebalance")
        else:
            self._maybe_complete_join_phase(group)
        return waiter

    def _complete_static_rejoin(self, group: Group, rejoin: _StaticRejoin, waiter: Waiter, error: int) -> None:
        """The callback of the static rejoin's store: answer the new member id, or on failure undo
        the replacement (when nothing else answered the rejoin meanwhile) and answer the error."""
        member = group.members.get(rejoin.new_member_id)
        unanswered = (self.groups.get(group.group_id) is group and member is not None
                      and member.join_waiter is waiter
                      and group.static_members.get(rejoin.instance_id) == rejoin.new_member_id)
        if error:
            log.warning("Static member %s of group %s keeps member id %s: storing %s failed with %s",
                        rejoin.instance_id, group.group_id, rejoin.old_member_id, rejoin.new_member_id,
                        _error_name(error))
            if unanswered:
                assert member is not None
                member.join_waiter = None  # answered below, not by update_member
                group.update_member(member, rejoin.old_protocols, rejoin.old_rebalance_timeout_ms,
                                    rejoin.old_session_timeout_ms, None)
                group.replace_static_member(rejoin.instance_id, rejoin.new_member_id, rejoin.old_member_id)
                self._timers.cancel(self._heartbeat_key(group, rejoin.new_member_id))
                self._reschedule_heartbeat(group, member)
            waiter.complete(JoinResult(error, "", group.generation_id, group.protocol_type, group.protocol_name,
                                       rejoin.old_leader_id or ""))
            return
        if not unanswered:
            return  # a rebalance, a fencing rejoin or an unload answered it meanwhile
        assert member is not None
        member.join_waiter = None
        new_id = rejoin.new_member_id
        if rejoin.version >= 9:
            is_leader = group.is_leader(new_id)
            waiter.complete(JoinResult(
                ErrorCode.NONE, new_id, group.generation_id, group.protocol_type, group.protocol_name,
                group.leader_id or "", is_leader, group.current_members() if is_leader else [],
            ))
        else:
            waiter.complete(JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                       group.protocol_name, rejoin.old_leader_id or ""))

    # ---- SyncGroup ----------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        outcome = self._sync(group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
                             assignments)
        if isinstance(outcome, Waiter):
            return await outcome.wait()
        return outcome

    def _sync(self, group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
              assignments) -> SyncResult | Waiter:
        error = self._check_group_id(group_id)
        if error:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is not None and group.has_consumer_members():
            return self.consumer.classic_sync(group, member_id, instance_id, generation_id, protocol_type,
                                              protocol_name)
        if group is None or group.is_in(EMPTY):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(DEAD):
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and group.protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and group.protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(PREPARING):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        if group.is_in(STABLE):
            self._remove_pending_sync(group, member_id)
            return SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name)
        # CompletingRebalance
        waiter = Waiter()
        if member.sync_waiter is not None:
            member.sync_waiter.complete(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_waiter = waiter
        self._remove_pending_sync(group, member_id)
        if group.is_leader(member_id):
            self._store_assignment(group, member_id, assignments)
        return waiter

    def _store_assignment(self, group: Group, leader_id: str, assignments: dict[str, bytes]) -> None:
        """Kafka's doSyncGroup for the leader in CompletingRebalance: store the group with the
        assignments (acks=-1); only then hand them out and go Stable. A failure resets the
        assignments, answers every parked SyncGroup with the error and prepares a rebalance. If
        the group moved on meanwhile (a member joined or left), the outcome is discarded."""
        group_id, generation_id = group.group_id, group.generation_id
        assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
        missing = [mid for mid in group.members if mid not in assignments]
        if missing:
            log.warning("Group %s generation %d: no assignment for members %s; giving them empty ones",
                        group_id, generation_id, missing)

        def on_stored(error: int) -> None:
            if self.groups.get(group_id) is not group or not group.is_in(COMPLETING) or (
                    group.generation_id != generation_id):
                log.info("Group %s moved on while the assignment of generation %d was stored; outcome "
                         "(%s) discarded", group_id, generation_id, _error_name(error))
                return
            if error:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"error {_error_name(error)} storing the assignment (leader {leader_id})")
                return
            for member in group.members.values():
                member.assignment = assignment.get(member.member_id, b"")
            self._propagate_assignment(group, ErrorCode.NONE)
            group.transition_to(STABLE, self.wall_clock())
            log.info("Group %s is Stable at generation %d with %d member(s)", group_id, generation_id,
                     len(group.members))

        self._store_group_replicated(group, assignment, on_stored)

    def _remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._timers.cancel(("sync", group.group_id))

    # ---- Heartbeat / LeaveGroup -------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        error = self._check_group_id(group_id)
        if error:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.has_consumer_members():
            return self.consumer.classic_heartbeat(group, member_id, instance_id, generation_id)
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(PREPARING):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(top-level error, per-member errors) for (member id, group instance id) pairs."""
        error = self._check_group_id(group_id)
        if error:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if group.has_consumer_members():
            return ErrorCode.NONE, self.consumer.classic_leave(group, members)
        errors = []
        for member_id, instance_id in members:
            if member_id == "":
                if instance_id is not None and instance_id in group.static_members:
                    member = group.members[group.static_members[instance_id]]
                    self._remove_member_and_update_group(group, member, "left by group instance id")
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            elif member_id in group.pending_members:
                group.remove(member_id)
                self._timers.cancel(self._heartbeat_key(group, member_id))
                errors.append(ErrorCode.NONE)
            else:
                error = self._validate_member(group, member_id, instance_id)
                if error == ErrorCode.NONE:
                    log.info("Member %s leaves group %s", member_id, group_id)
                    self._remove_member_and_update_group(group, group.members[member_id], "left the group")
                errors.append(error)
        return ErrorCode.NONE, errors

    # ---- offsets ------------------------------------------------------------------------------

    def _validate_offset_commit(self, group: Group, member_id: str, instance_id: str | None,
                                generation_id: int, version: int) -> int:
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return group.consumer.validate_offset_commit(member_id, generation_id, version)
        if generation_id < 0 and group.is_in(EMPTY):
            return ErrorCode.NONE
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not group.is_in(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(COMPLETING):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                       partitions: list[CommitPartition], *, retention_ms: int = -1,
                       version: int = 8, replication: list | None = None) -> list[int]:
        """Per-partition error codes, in the order of ``partitions``; acknowledged after the append.
        With a ``replication`` list, the append's (partition, offset, epoch) is added to it: the
        caller answers only once the ISR has it (Kafka appends commits with acks=-1)."""
        error = self._check_group_id(group_id)
        group = self.groups.get(group_id) if not error else None
        created = False
        if not error:
            if group is None:
                if generation_id < 0:
                    group = Group(group_id, self.wall_clock())
                    created = True
                else:
                    error = ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.ILLEGAL_GENERATION
            else:
                error = self._validate_offset_commit(group, member_id, instance_id, generation_id, version)
        if error:
            return [error] * len(partitions)
        assert group is not None
        now = self.wall_clock()
        errors: list[int] = []
        records: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[tuple[str, int], OffsetCommitValue]] = []
        max_metadata = self.config.offset_metadata_max_bytes
        for p in partitions:
            if not self.offsets.hosts(p.topic, p.partition):
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if p.metadata is not None and len(p.metadata.encode("utf-8")) > max_metadata:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            commit_ts = p.commit_timestamp if p.commit_timestamp >= 0 else now
            value = OffsetCommitValue(
                p.offset, p.leader_epoch, p.metadata or "", commit_ts,
                commit_ts + retention_ms if retention_ms >= 0 else -1,
            )
            records.append((storage.offset_commit_key(group_id, p.topic, p.partition),
                            storage.offset_commit_value(value)))
            values.append(((p.topic, p.partition), value))
            errors.append(ErrorCode.NONE)
        member = group.members.get(member_id)
        if member is not None and generation_id == group.generation_id:
            self._reschedule_heartbeat(group, member)
        appended = None
        if records:
            try:
                appended = self._append(group_id, records, acks_all=replication is not None)
            except (KafkaError, OSError) as exc:
                log.warning("Could not store offsets of group %s: %s", group_id, exc)
                code = _commit_error(exc)
                return [code if e == ErrorCode.NONE else e for e in errors]
        if created:
            self.groups[group_id] = group
        if appended is None:
            return errors
        if replication is not None:
            # Kafka's pendingOffsetCommits: cached (visible to OffsetFetch) once the ISR has them.
            group.begin_pending_commits([tp for tp, _ in values])
            replication.append(PendingCommit(group, values, *appended))
        else:
            group.apply_commits(values, appended[1])
        return errors

    async def commit_offsets_replicated(self, group_id: str, generation_id: int, member_id: str,
                                        instance_id: str | None, partitions: list[CommitPartition], *,
                                        retention_ms: int = -1, version: int = 8) -> list[int]:
        """OffsetCommit as Kafka appends it, with acks=-1: answered, and visible to OffsetFetch,
        once the ISR of the group's partition has the commit (up to offsets.commit.timeout.ms)."""
        pending: list[PendingCommit] = []
        errors = self.commit_offsets(group_id, generation_id, member_id, instance_id, partitions,
                                     retention_ms=retention_ms, version=version, replication=pending)
        for commit in pending:
            tps = [tp for tp, _ in commit.values]
            try:
                code = await commit.partition.wait_replicated(
                    commit.required_offset, commit.leader_epoch, self.config.offsets_commit_timeout_ms)
            finally:
                commit.group.end_pending_commits(tps)
            if code:
                log.warning("Offsets of group %s were not replicated: %s", group_id, _error_name(code))
                failed = _store_error_code(code)
                errors = [failed if e == ErrorCode.NONE else e for e in errors]
            else:
                commit.group.apply_commits(commit.values, commit.required_offset)
        return errors

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[int, list[FetchedOffset]]:
        """(group error, offsets); ``topics`` None means every committed partition of the group.
        ``member_id``/``member_epoch`` (OffsetFetch v9+) are checked against a consumer group's
        member (Kafka's validateOffsetFetch)."""
        if group_id and not self.is_coordinator_for(group_id):
            return ErrorCode.NOT_COORDINATOR, []
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        if not group_id and topics is None:
            return ErrorCode.NONE, []
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            error = group.consumer.validate_offset_fetch(member_id, member_epoch)
            if error:
                return error, []
        offsets = group.offsets if group is not None and not group.is_in(DEAD) else {}
        if topics is None:
            return ErrorCode.NONE, [
                FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata)
                for (t, p), v in sorted(offsets.items())
            ]
        result = []
        for topic, indexes in topics:
            for index in indexes:
                value = offsets.get((topic, index))
                if require_stable and ((group is not None and group.has_pending_commit((topic, index)))
                                       or self.txn_offsets.has_pending(group_id, (topic, index))):
                    result.append(FetchedOffset(topic, index, error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
                elif value is None:
                    result.append(FetchedOffset(topic, index))
                else:
                    result.append(FetchedOffset(topic, index, value.offset, value.leader_epoch, value.metadata))
        return ErrorCode.NONE, result

    # ---- offsets inside transactions (TxnOffsetCommit) --------------------------------------------

    def _validate_txn_offset_commit(self, group: Group, member_id: str, instance_id: str | None,
                                    generation_id: int) -> int:
        """Kafka's doTxnCommitOffsets: a Dead group, a fenced static member, an unknown member or
        (with a generation given) a stale generation are refused."""
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return group.consumer.validate_offset_commit(member_id, generation_id, 5, transactional=True,
                                                         instance_id=instance_id)
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id and member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                                 member_id: str, instance_id: str | None,
                                 partitions: list[CommitPartition]) -> list[int]:
        """TxnOffsetCommit: the offsets are written to __consumer_offsets as a transactional batch of
        the producer (acks=-1) and become the group's when the transaction's COMMIT marker is
        written there (``on_txn_markers_written``)."""
        error = self._check_group_id(group_id)
        group = self.groups.get(group_id) if not error else None
        if not error and group is not None:
            error = self._validate_txn_offset_commit(group, member_id, instance_id, generation_id)
        if error:
            return [error] * len(partitions)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self.wall_clock())
        now = self.wall_clock()
        errors: list[int] = []
        records: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[tuple[str, int], OffsetCommitValue]] = []
        for p in partitions:
            if not self.offsets.hosts(p.topic, p.partition):
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if p.metadata is not None and len(p.metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetCommitValue(p.offset, p.leader_epoch, p.metadata or "", now)
            records.append((storage.offset_commit_key(group_id, p.topic, p.partition),
                            storage.offset_commit_value(value)))
            values.append(((p.topic, p.partition), value))
            errors.append(ErrorCode.NONE)
        if not records:
            return errors
        try:
            partition, required_offset, leader_epoch = self._append(
                group_id, records, acks_all=True, transactional_producer=(producer_id, producer_epoch))
        except (KafkaError, OSError) as exc:
            log.warning("Could not store the transactional offsets of group %s (producer %d): %s", group_id,
                        producer_id, exc)
            code = _commit_error(exc)
            return [code if e == ErrorCode.NONE else e for e in errors]
        # Pending from the append on: the marker may only come after this answer, but a read
        # with require_stable must not see the older offsets as stable meanwhile.
        self.txn_offsets.add(producer_id, group_id, values, required_offset)
        code = await partition.wait_replicated(required_offset, leader_epoch, self.config.offsets_commit_timeout_ms)
        if code:
            log.warning("Transactional offsets of group %s were not replicated: %s", group_id, _error_name(code))
            failed = _store_error_code(code)
            return [failed if e == ErrorCode.NONE else e for e in errors]
        return errors

    def on_txn_markers_written(self, producer_id: int, partitions: list[tuple[str, int]], committed: bool) -> None:
        """The replica manager wrote the producer's COMMIT/ABORT markers (Kafka's
        onTransactionCompleted): its pending offsets of the groups on those __consumer_offsets
        partitions are applied or dropped."""
        indexes = {index for topic, index in partitions if topic == OFFSETS_TOPIC}
        if not indexes:
            return
        for group_id in self.txn_offsets.groups_of(producer_id):
            if self.partition_for(group_id) not in indexes:
                continue
            pending = self.txn_offsets.take(producer_id, group_id)
            if not committed or not pending:
                continue
            group = self.groups.get(group_id)
            if group is None:  # known only by its pending offsets (loaded so)
                group = self.groups[group_id] = Group(group_id, self.wall_clock())
                group.state_timestamp = None
            for tp, (value, position) in pending.items():
                group.apply_commits([(tp, value)], position)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, list[int]]:
        error = self._check_group_id(group_id)
        if error:
            return error, []
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        consumer_members = group.has_consumer_members()
        if not group.is_in(EMPTY) and not group.uses_consumer_protocol():
            return ErrorCode.NON_EMPTY_GROUP, []
        errors = []
        records = []
        to_delete = []
        for topic, index in partitions:
            if (consumer_members or not group.is_in(EMPTY)) and group.is_subscribed_to(topic):
                errors.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            errors.append(ErrorCode.NONE)
            if (topic, index) in group.offsets:
                records.append((storage.offset_commit_key(group_id, topic, index), None))
                to_delete.append((topic, index))
        if records:
            try:
                self._append(group_id, records)
            except (KafkaError, OSError) as exc:
                return _store_error(exc), []
        for tp in to_delete:
            group.offsets.pop(tp, None)
        return ErrorCode.NONE, errors

    # ---- admin --------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[int, Group | None]:
        error = self._check_group_id(group_id)
        if error:
            return error, None
        group = self.groups.get(group_id)
        return ErrorCode.NONE, group

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[Group]:
        wanted_states = {s.lower() for s in states} if states else None
        wanted_types = {t.lower() for t in types} if types else None
        return [
            g for g in self.groups.values()
            if not g.is_in(DEAD) and (wanted_states is None or g.state_name().lower() in wanted_states)
            and (wanted_types is None or g.type_name() in wanted_types)
        ]

    def delete_groups(self, group_ids: list[str]) -> list[int]:
        results = []
        for group_id in group_ids:
            error = self._check_group_id(group_id)
            if error:
                results.append(error)
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_in(DEAD):
                results.append(ErrorCode.GROUP_ID_NOT_FOUND)
                continue
            if not group.is_in(EMPTY) or group.has_consumer_members():
                results.append(ErrorCode.NON_EMPTY_GROUP)
                continue
            records = [(storage.offset_commit_key(group_id, t, p), None) for (t, p) in group.offsets]
            if group.consumer is not None:
                records.extend(_consumer_tombstones(group))
            else:
                records.append((storage.group_metadata_key(group_id), None))
            try:
                self._append(group_id, records)
            except (KafkaError, OSError) as exc:
                results.append(_store_error(exc))
                continue
            group.transition_to(DEAD, self.wall_clock())
            del self.groups[group_id]
            log.info("Deleted group %s and its %d committed offset(s)", group_id, len(group.offsets))
            results.append(ErrorCode.NONE)
        return results

    # ---- retention ----------------------------------------------------------------------------

    def cleanup_expired_offsets(self) -> int:
        """Kafka 2.1+ retention (KIP-211); returns how many offsets were removed."""
        now = self.wall_clock()
        retention = self.config.offsets_retention_minutes * 60 * 1000
        removed = 0
        for group in list(self.groups.values()):
            if group.is_in(DEAD):
                continue
            base: Callable[[OffsetCommitValue], int] | None = None
            subscribed: set[str] | None = None
            if group.has_consumer_members():
                assert group.consumer is not None
                subscribed = group.consumer.subscribed_topic_names()
                base = lambda v: v.commit_timestamp  # noqa: E731
            elif group.protocol_type:
                if group.is_in(EMPTY):
                    state_ts = group.state_timestamp
                    base = (lambda v, ts=state_ts: ts if ts is not None else v.commit_timestamp)
                elif group.uses_consumer_protocol() and group.is_in(STABLE):
                    subscribed = group.subscribed_topics()
                    if subscribed is not None:
                        base = lambda v: v.commit_timestamp  # noqa: E731
            else:
                base = lambda v: v.commit_timestamp  # noqa: E731
            expired = []
            if base is not None:
                for tp, value in group.offsets.items():
                    if subscribed is not None and tp[0] in subscribed:
                        continue
                    if value.expire_timestamp >= 0:
                        if now >= value.expire_timestamp:
                            expired.append(tp)
                    elif now - base(value) >= retention:
                        expired.append(tp)
            records = [(storage.offset_commit_key(group.group_id, t, p), None) for (t, p) in expired]
            becomes_dead = (group.is_in(EMPTY) and len(expired) == len(group.offsets) and not group.members
                            and not group.has_consumer_members())
            if becomes_dead:
                if group.consumer is not None:
                    records.extend(_consumer_tombstones(group))
                else:
                    records.append((storage.group_metadata_key(group.group_id), None))
            if not records:
                continue
            try:
                self._append(group.group_id, records)
            except (KafkaError, OSError) as exc:
                log.warning("Could not expire offsets of group %s: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            if becomes_dead:
                group.transition_to(DEAD, now)
                del self.groups[group.group_id]
            if expired:
                log.info("Removed %d expired offset(s) of group %s", len(expired), group.group_id)
        return removed
