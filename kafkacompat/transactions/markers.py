"""Transaction markers to partition leaders (Kafka's TransactionMarkerChannelManager): a leader
here gets them through the replica manager's ``write_txn_markers``, a leader elsewhere through a
WriteTxnMarkers request. Whatever is not written is answered with its error; the coordinator
retries it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from kafkacompat.transactions.channel import BrokerChannel, BrokerUnreachable
from kafkacompat.wire.codec import request_class
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.services import MetadataView

log = logging.getLogger("kafkacompat.transactions")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 2  # v2 (KIP-890) carries the marker's transaction version


class LocalMarkerWriter(Protocol):
    """The replica manager's side: markers appended to partitions this broker leads."""

    async def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                committed: bool, partitions: list[tuple[str, int]], *,
                                transaction_version: int = 0, timeout_ms: int | None = None
                                ) -> dict[tuple[str, int], int]: ...


class TxnMarkerWriter:
    def __init__(self, metadata: "MetadataView", local: LocalMarkerWriter, channel: BrokerChannel) -> None:
        self.metadata = metadata
        self.local = local
        self.channel = channel

    async def write(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                    partitions: set[tuple[str, int]], transaction_version: int) -> dict[tuple[str, int], int]:
        """An error per partition; UNKNOWN_TOPIC_OR_PARTITION only for a partition that no longer
        exists (nothing left to mark)."""
        results = await self._write(producer_id, producer_epoch, committed, coordinator_epoch, partitions,
                                    transaction_version)
        for (topic, index), error in results.items():
            if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and self._exists(topic, index):
                results[(topic, index)] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # not (yet) hosted by its leader
        return results

    def _exists(self, topic: str, index: int) -> bool:
        info = self.metadata.topic(topic)
        return info is not None and 0 <= index < info.partitions

    async def _write(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                     partitions: set[tuple[str, int]], transaction_version: int) -> dict[tuple[str, int], int]:
        results: dict[tuple[str, int], int] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, index in sorted(partitions):
            state = self.metadata.partition_state(topic, index)
            if state is None:
                results[(topic, index)] = (ErrorCode.LEADER_NOT_AVAILABLE if self._exists(topic, index)
                                           else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif state.leader < 0:
                results[(topic, index)] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(state.leader, []).append((topic, index))
        for leader, owned in by_leader.items():
            if leader == self.metadata.node_id:
                results.update(await self.local.write_txn_markers(
                    producer_id, producer_epoch, coordinator_epoch, committed, owned,
                    transaction_version=transaction_version))
            else:
                results.update(await self._remote(leader, producer_id, producer_epoch, committed,
                                                  coordinator_epoch, owned, transaction_version))
        return results

    async def _remote(self, leader: int, producer_id: int, producer_epoch: int, committed: bool,
                      coordinator_epoch: int, partitions: list[tuple[str, int]],
                      transaction_version: int) -> dict[tuple[str, int], int]:
        cls = request_class(WRITE_TXN_MARKERS)
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        marker = cls.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=committed,
            topics=[cls.WritableTxnMarker.WritableTxnMarkerTopic(name=name, partition_indexes=ids)
                    for name, ids in topics.items()],
            coordinator_epoch=coordinator_epoch, transaction_version=transaction_version)
        try:
            response = await self.channel.request(leader, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                                                  cls(markers=[marker]))
        except BrokerUnreachable as exc:
            log.debug("Transaction markers for producer %d not sent to broker %d: %s", producer_id, leader, exc)
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
        results = {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in partitions}
        for answer in response.markers:
            for topic in answer.topics:
                for partition in topic.partitions:
                    results[(topic.name, partition.partition_index)] = partition.error_code
        return results
