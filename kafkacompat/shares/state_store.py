"""The share coordinator's durable state (Kafka's ShareCoordinatorShard): the latest state of
every share partition, kept in the compacted ``__share_group_state`` topic.

A share partition (group, topic id, partition) lives on partition
``abs(javaHash("group:topicId:partition")) % partitions`` of the topic (Kafka's
SharePartitionKey.asCoordinatorKey, the topic id in Kafka's base64 form). Every write is a
ShareSnapshot record of the whole in-flight state (start offset and state batches), appended to
that partition and waited on until the ISR has it (up to ``share.coordinator.write.timeout.ms``)
before the write returns, so an acknowledgement is answered only once it is durable. Kafka
writes ShareUpdate deltas between snapshots and prunes the topic with DeleteRecords; writing
whole snapshots lets compaction keep the topic bounded instead. Replay (at start-up on a single
node, on becoming a partition's leader in a cluster) reads snapshots and applies any
ShareUpdate after them, so a data dir written by Kafka loads too.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable

from kafkacompat.groups.storage import build_batch, iter_batch_records, java_abs, java_string_hash
from kafkacompat.shares import records
from kafkacompat.shares.partition import StateBatch
from kafkacompat.shares.records import SHARE_STATE_TOPIC
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.message_runtime import DecodeError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.replication.manager import ReplicaManager

log = logging.getLogger("kafkacompat.shares")

MAX_MERGED_OFFSETS = 1_000_000
ShareKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group_id}:{kafka_uuid_string(topic_id)}:{partition}"


@dataclass(slots=True)
class PersistedState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)
    snapshot_epoch: int = 0
    create_timestamp: int = -1


class ShareStateStore:
    def __init__(self, config: "BrokerConfig", replicas: "ReplicaManager", *,
                 ensure_topic: Callable[[], Awaitable["TopicInfo | None"]], clustered: bool,
                 wall_clock: Callable[[], int] | None = None) -> None:
        self.config = config
        self.replicas = replicas
        self.ensure_topic = ensure_topic
        self.states: dict[ShareKey, PersistedState] = {}
        # The __share_group_state partitions loaded here; None on a single node (all of them).
        self.owned: set[int] | None = set() if clustered else None
        self.wall_clock = wall_clock or (lambda: int(time.time() * 1000))

    def topic(self) -> "TopicInfo | None":
        return self.replicas.topics.get(SHARE_STATE_TOPIC)

    def topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "compression.type": "producer",
                "segment.bytes": str(self.config.share_coordinator_state_topic_segment_bytes)}

    def partition_for(self, key: ShareKey) -> int:
        topic = self.topic()
        count = topic.partitions if topic is not None else self.config.share_coordinator_state_topic_num_partitions
        return java_abs(java_string_hash(coordinator_key(*key))) % count

    def is_coordinator_for(self, key: ShareKey) -> bool:
        if self.owned is None:
            return True
        return self.partition_for(key) in self.owned

    # ---- read / write -------------------------------------------------------------------------

    def read(self, key: ShareKey) -> PersistedState | None:
        if not self.is_coordinator_for(key):
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker is not the share coordinator of {coordinator_key(*key)}")
        return self.states.get(key)

    async def read_state(self, key: ShareKey) -> PersistedState | None:
        return self.read(key)

    async def write_state(self, key: ShareKey, leader_epoch: int, start_offset: int,
                          batches: list[StateBatch], state_epoch: int = 0) -> None:
        await self.write(key, leader_epoch, start_offset, batches, state_epoch)

    async def initialize_state(self, key: ShareKey, start_offset: int) -> None:
        await self.initialize(key, start_offset)

    async def delete_state(self, key: ShareKey) -> None:
        await self.delete(key)

    async def write(self, key: ShareKey, leader_epoch: int, start_offset: int, batches: list[StateBatch],
                    state_epoch: int = 0) -> None:
        """Store the share partition's whole state; returns once the ISR has it. A writer whose
        state epoch is older than the stored one (the offsets were altered since it loaded) is
        refused with FENCED_STATE_EPOCH, as Kafka's share coordinator does."""
        previous = self.states.get(key)
        if previous is not None and state_epoch < previous.state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH,
                             f"The state of {coordinator_key(*key)} is at state epoch {previous.state_epoch}, "
                             f"the write is from epoch {state_epoch}")
        await self._write_snapshot(key, previous, leader_epoch, start_offset, batches,
                                   previous.state_epoch if previous is not None else 0)

    async def initialize(self, key: ShareKey, start_offset: int) -> None:
        """InitializeShareGroupState (AlterShareGroupOffsets): a new start with nothing in flight,
        at a new state epoch, so the share partition's leader reloads it."""
        if not self.is_coordinator_for(key):
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker is not the share coordinator of {coordinator_key(*key)}")
        previous = self.states.get(key)
        state_epoch = previous.state_epoch + 1 if previous is not None else 0
        leader_epoch = previous.leader_epoch if previous is not None else -1
        await self._write_snapshot(key, previous, leader_epoch, start_offset, [], state_epoch)

    async def _write_snapshot(self, key: ShareKey, previous: PersistedState | None, leader_epoch: int,
                              start_offset: int, batches: list[StateBatch], state_epoch: int) -> None:
        created = previous.create_timestamp if previous is not None else self.wall_clock()
        snapshot_epoch = previous.snapshot_epoch + 1 if previous is not None else 0
        value = records.ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start_offset, created,
                                      self.wall_clock(), batches)
        record_key = records.ShareStateKey(records.SNAPSHOT_TYPE, *key)
        state = PersistedState(state_epoch, leader_epoch, start_offset, list(batches), snapshot_epoch, created)
        await self._append(key, records.encode_key(record_key), records.encode_snapshot(value), state)

    async def delete(self, key: ShareKey) -> None:
        """DeleteShareGroupState: a tombstone, so compaction removes the share partition."""
        if not self.is_coordinator_for(key):
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker is not the share coordinator of {coordinator_key(*key)}")
        if key not in self.states:
            return
        record_key = records.ShareStateKey(records.SNAPSHOT_TYPE, *key)
        await self._append(key, records.encode_key(record_key), None, None)

    async def _append(self, key: ShareKey, record_key: bytes, value: bytes | None,
                      state: PersistedState | None) -> None:
        """Append the record and take its state at once (the log's order is the states' order),
        then wait for the ISR."""
        from kafkacompat.wire.records import validate_batches

        if self.topic() is None and await self.ensure_topic() is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC} does not exist yet")
        index = self.partition_for(key)
        partition = self.replicas.partition(SHARE_STATE_TOPIC, index)
        if partition is None or not partition.is_leader or not self.is_coordinator_for(key):
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker does not lead {SHARE_STATE_TOPIC}-{index}")
        partition.check_enough_replicas()
        view = memoryview(build_batch([(record_key, value)], self.wall_clock()))
        info = partition.append(view, validate_batches(view, partition.log.config.max_message_bytes))
        if state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = state
        error = await partition.wait_replicated(info.last_offset + 1, partition.leader_epoch,
                                                self.config.share_coordinator_write_timeout_ms)
        if error:
            raise KafkaError(error, f"Writing the state of {coordinator_key(*key)} to {SHARE_STATE_TOPIC}-{index} "
                                    f"failed: {ErrorCode(error).name}")

    # ---- leadership of __share_group_state (a cluster) -------------------------------------------

    def on_partition_state(self, state, node_id: int) -> None:
        if state.topic != SHARE_STATE_TOPIC or self.owned is None:
            return
        if state.leader == node_id and state.partition not in self.owned:
            self._load_partition(state.partition)
            self.owned.add(state.partition)
            log.info("Coordinating the share state of %s-%d", SHARE_STATE_TOPIC, state.partition)
        elif state.leader != node_id and state.partition in self.owned:
            self.on_partition_removed(SHARE_STATE_TOPIC, state.partition)

    def on_partition_removed(self, topic: str, index: int) -> None:
        if topic != SHARE_STATE_TOPIC or self.owned is None or index not in self.owned:
            return
        self.owned.discard(index)
        for key in [k for k in self.states if self.partition_for(k) == index]:
            del self.states[key]
        log.info("No longer coordinating the share state of %s-%d", SHARE_STATE_TOPIC, index)

    # ---- replay ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Single node start-up: every partition of the topic."""
        topic = self.topic()
        if topic is None:
            return
        for index in range(topic.partitions):
            self._load_partition(index)
        log.info("Loaded the state of %d share partition(s) from %s", len(self.states), SHARE_STATE_TOPIC)

    def _load_partition(self, index: int) -> None:
        partition = self.replicas.partition(SHARE_STATE_TOPIC, index)
        if partition is None:
            return
        position, end = partition.log_start_offset, partition.log_end_offset
        loaded: dict[ShareKey, PersistedState | None] = {}
        while position < end:
            result = partition.log.read(position, 1 << 20, max_offset=end)
            try:
                data = result.read_all()
            finally:
                result.close()
            if not data:
                break
            from kafkacompat.wire.records import iter_batches

            for _, key, value in iter_batch_records(data):
                self._replay(loaded, key, value, index)
            position = max(max((h.next_offset for h in iter_batches(data)), default=position + 1), position + 1)
        for key, state in loaded.items():
            if state is None:
                self.states.pop(key, None)
            else:
                self.states[key] = state

    @staticmethod
    def _replay(loaded: dict[ShareKey, PersistedState | None], key: bytes | None, value: bytes | None,
                index: int) -> None:
        if key is None:
            return
        try:
            decoded = records.decode_key(key)
            if value is None:
                loaded[decoded.share_partition] = None
                return
            record = records.decode_value(decoded.record_type, value)
        except DecodeError as exc:
            log.warning("Skipping an unreadable record in %s-%d: %s", SHARE_STATE_TOPIC, index, exc)
            return
        share_key = decoded.share_partition
        if isinstance(record, records.ShareSnapshot):
            loaded[share_key] = PersistedState(record.state_epoch, record.leader_epoch, record.start_offset,
                                               record.state_batches, record.snapshot_epoch, record.create_timestamp)
            return
        current = loaded.get(share_key)
        if current is None:
            return  # an update without its snapshot (pruned): nothing to apply it to
        _apply_update(current, record)


def _apply_update(state: PersistedState, update: records.ShareUpdate) -> None:
    """A ShareUpdate over a snapshot: a new start offset (if set) and batches that replace the
    offsets they cover (Kafka's ShareCoordinatorShard merge, simplified to whole offsets)."""
    if update.start_offset >= 0:
        state.start_offset = update.start_offset
    span = sum(b.last_offset - b.first_offset + 1 for b in state.batches + update.state_batches)
    if span > MAX_MERGED_OFFSETS:
        log.warning("A ShareUpdate spans %d offsets; keeping its snapshot's batches", span)
        return
    covered: dict[int, StateBatch] = {}
    for batch in state.batches + update.state_batches:
        for offset in range(max(batch.first_offset, state.start_offset), batch.last_offset + 1):
            covered[offset] = batch
    merged: list[StateBatch] = []
    for offset in sorted(covered):
        batch = covered[offset]
        last = merged[-1] if merged else None
        if last is not None and last.last_offset == offset - 1 and (last.delivery_state, last.delivery_count) == \
                (batch.delivery_state, batch.delivery_count):
            merged[-1] = StateBatch(last.first_offset, offset, last.delivery_state, last.delivery_count)
        else:
            merged.append(StateBatch(offset, offset, batch.delivery_state, batch.delivery_count))
    state.batches = merged
    state.leader_epoch = update.leader_epoch
