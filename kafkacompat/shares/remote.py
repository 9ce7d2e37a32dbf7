"""The share partitions' persister in a cluster (Kafka's DefaultStatePersister): a share
partition's state goes to the share coordinator that leads its __share_group_state partition,
in this broker's own ShareStateStore when that is here, else over ReadShareGroupState /
WriteShareGroupState to the leader. NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE (a leader
moving, the topic being created) are retried, re-reading where the leader is, until
``share.coordinator.write.timeout.ms``; a write that never lands raises, and the share partition
answers the acknowledgement with that error (nothing is reported done that is not durable).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from kafkacompat.shares.partition import StateBatch
from kafkacompat.shares.records import SHARE_STATE_TOPIC
from kafkacompat.shares.state_store import PersistedState, ShareKey, ShareStateStore, coordinator_key
from kafkacompat.wire import codec
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.frame import is_flexible

if TYPE_CHECKING:
    from kafkacompat.services import MetadataView

log = logging.getLogger("kafkacompat.shares")

INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
LIST_OFFSETS, LIST_OFFSETS_VERSION, LATEST_TIMESTAMP = 2, 7, -1
RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE)
RETRY_BACKOFF_S = 0.1


class RoutingPersister:
    def __init__(self, store: ShareStateStore, metadata: "MetadataView") -> None:
        self.store = store
        self.metadata = metadata
        self._connections: dict[int, tuple[object, trio.Lock]] = {}

    @property
    def timeout_s(self) -> float:
        return max(self.store.config.share_coordinator_write_timeout_ms, 1) / 1000

    async def read_state(self, key: ShareKey) -> PersistedState | None:
        async def once(target: int):
            return await self._read_once(target, key)

        return await self._retrying(key, once)

    async def write_state(self, key: ShareKey, leader_epoch: int, start_offset: int,
                          batches: list[StateBatch], state_epoch: int = 0) -> None:
        async def once(target: int):
            return await self._write_once(target, key, leader_epoch, start_offset, batches, state_epoch)

        await self._retrying(key, once)

    async def initialize_state(self, key: ShareKey, start_offset: int) -> None:
        async def once(target: int):
            if target == self.metadata.node_id:
                return await self.store.initialize(key, start_offset)
            cls = codec.request_class(INITIALIZE_SHARE_GROUP_STATE)
            data = cls.InitializeStateData
            request = cls(group_id=key[0], topics=[data(topic_id=key[1], partitions=[
                data.PartitionData(partition=key[2], state_epoch=0, start_offset=start_offset)])])
            _raise_partition_error(await self._call(target, INITIALIZE_SHARE_GROUP_STATE, 0, request))

        await self._retrying(key, once)

    async def delete_state(self, key: ShareKey) -> None:
        async def once(target: int):
            if target == self.metadata.node_id:
                return await self.store.delete(key)
            cls = codec.request_class(DELETE_SHARE_GROUP_STATE)
            data = cls.DeleteStateData
            request = cls(group_id=key[0], topics=[data(topic_id=key[1], partitions=[
                data.PartitionData(partition=key[2])])])
            _raise_partition_error(await self._call(target, DELETE_SHARE_GROUP_STATE, 0, request))

        await self._retrying(key, once)

    async def high_watermarks(self, leader: int,
                              partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | KafkaError]:
        """The high watermarks of partitions that ``leader`` leads, asked with one ListOffsets
        (latest, read_uncommitted); the error instead for a partition it answers with one, and
        for all when it does not answer within ``share.coordinator.write.timeout.ms``."""
        cls = codec.request_class(LIST_OFFSETS)
        by_topic: dict[str, list[int]] = {}
        for name, index in partitions:
            by_topic.setdefault(name, []).append(index)
        request = cls(replica_id=-1, isolation_level=0, timeout_ms=int(self.timeout_s * 1000), topics=[
            cls.ListOffsetsTopic(name=name, partitions=[cls.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=index, timestamp=LATEST_TIMESTAMP) for index in indexes])
            for name, indexes in by_topic.items()])
        failure = KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Broker {leader} did not give the latest offsets within "
                                                          f"share.coordinator.write.timeout.ms")
        answer = None
        with trio.move_on_after(self.timeout_s):
            try:
                answer = await self._call(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
            except KafkaError as exc:
                failure = exc
            except (OSError, trio.BrokenResourceError, ConnectionError) as exc:
                failure = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"Broker {leader} is unreachable: {exc}")
        if answer is None:
            log.info("No latest offsets of %s from broker %d for a share group's lag: %s", partitions, leader,
                     failure.message)
            return {key: failure for key in partitions}
        return {(topic.name, p.partition_index): p.offset if p.error_code == ErrorCode.NONE
                else KafkaError(ErrorCode(p.error_code), f"Broker {leader} has no latest offset of "
                                                         f"{topic.name}-{p.partition_index}")
                for topic in answer.topics for p in topic.partitions}

    async def _retrying(self, key: ShareKey, attempt):
        last: KafkaError | None = None
        with trio.move_on_after(self.timeout_s):
            while True:
                try:
                    if self.store.topic() is None and await self.store.ensure_topic() is None:
                        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC} is being created")
                    return await attempt(self._coordinator(key))
                except KafkaError as exc:
                    if exc.code not in RETRIABLE:
                        raise
                    last = exc
                except (OSError, trio.BrokenResourceError, ConnectionError) as exc:
                    last = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share coordinator unreachable: {exc}")
                await trio.sleep(RETRY_BACKOFF_S)
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT if last is None else last.code,
                         f"The share coordinator of {coordinator_key(*key)} did not answer within "
                         f"share.coordinator.write.timeout.ms ({last.message if last else 'no answer'})")

    def _coordinator(self, key: ShareKey) -> int:
        state = self.metadata.partition_state(SHARE_STATE_TOPIC, self.store.partition_for(key))
        if state is None or state.leader < 0:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC} has no leader yet")
        return state.leader

    # ---- one attempt ---------------------------------------------------------------------------

    async def _read_once(self, target: int, key: ShareKey) -> PersistedState | None:
        if target == self.metadata.node_id:
            return self.store.read(key)
        group_id, topic_id, partition = key
        cls = codec.request_class(READ_SHARE_GROUP_STATE)
        request = cls(group_id=group_id, topics=[cls.ReadStateData(
            topic_id=topic_id, partitions=[cls.ReadStateData.PartitionData(partition=partition, leader_epoch=-1)])])
        answer = await self._call(target, READ_SHARE_GROUP_STATE, 0, request)
        result = answer.results[0].partitions[0]
        if result.error_code:
            raise KafkaError(result.error_code, result.error_message)
        if result.start_offset < 0:
            return None
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in result.state_batches]
        return PersistedState(result.state_epoch, -1, result.start_offset, batches)

    async def _write_once(self, target: int, key: ShareKey, leader_epoch: int, start_offset: int,
                          batches: list[StateBatch], state_epoch: int) -> None:
        if target == self.metadata.node_id:
            await self.store.write(key, leader_epoch, start_offset, batches, state_epoch)
            return
        group_id, topic_id, partition = key
        cls = codec.request_class(WRITE_SHARE_GROUP_STATE)
        data = cls.WriteStateData.PartitionData
        request = cls(group_id=group_id, topics=[cls.WriteStateData(topic_id=topic_id, partitions=[data(
            partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            state_batches=[data.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                           delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                           for b in batches])])])
        _raise_partition_error(await self._call(target, WRITE_SHARE_GROUP_STATE, 0, request))

    async def _call(self, target: int, api_key: int, version: int, request):
        from kafkacompat.replication.fetcher import _Connection

        entry = self._connections.get(target)
        if entry is None:
            info = self.metadata.brokers().get(target)
            if info is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {target} is not alive")
            stream = await trio.open_tcp_stream(info.host, info.port)
            entry = self._connections[target] = (_Connection(stream, f"share-persister-{self.metadata.node_id}"),
                                                 trio.Lock())
        connection, lock = entry
        try:
            async with lock:
                body = await connection.request(  # type: ignore[attr-defined]
                    api_key, version, codec.encode_request(request, version),
                    flexible_header=is_flexible(api_key, version), flexible_response=is_flexible(api_key, version))
            return codec.decode_response(api_key, version, body)
        except BaseException:
            self._connections.pop(target, None)
            with trio.CancelScope(shield=True):
                await connection.stream.aclose()  # type: ignore[attr-defined]
            raise


def _raise_partition_error(answer) -> None:
    result = answer.results[0].partitions[0]
    if result.error_code:
        raise KafkaError(result.error_code, result.error_message)
