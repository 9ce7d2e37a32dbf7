"""The TransactionVerifier a partition leader asks before a transactional append (KIP-890): the
coordinator of the transactional id checks (verify_only, transaction version 1) or adds
(transaction version 2) the partitions. The coordinator is this broker's when it leads the id's
__transaction_state partition; otherwise AddPartitionsToTxn v4+ goes to the broker that leads it,
as Kafka's AddPartitionsToTxnManager sends it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafkacompat.transactions.channel import BrokerChannel, BrokerUnreachable
from kafkacompat.transactions.log import TRANSACTION_STATE_TOPIC
from kafkacompat.wire import codec
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.services import MetadataView
    from kafkacompat.transactions.coordinator import TransactionCoordinator

log = logging.getLogger("kafkacompat.transactions")

ADD_PARTITIONS_TO_TXN = 24


class CoordinatorVerifier:
    def __init__(self, coordinator: "TransactionCoordinator", metadata: "MetadataView",
                 channel: BrokerChannel) -> None:
        self.coordinator = coordinator
        self.metadata = metadata
        self.channel = channel

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], int]:
        index = self.coordinator.partition_for(transactional_id)
        state = self.metadata.partition_state(TRANSACTION_STATE_TOPIC, index)
        if (state is None or state.leader == self.metadata.node_id
                or not self.coordinator.clustered):
            return await self.coordinator.verify_or_add(transactional_id, producer_id, producer_epoch, partitions,
                                                        verify_only)
        if state.leader < 0:
            return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        return await self._remote(state.leader, transactional_id, producer_id, producer_epoch, partitions,
                                  verify_only)

    async def _remote(self, broker_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], int]:
        cls = codec.request_class(ADD_PARTITIONS_TO_TXN)
        txn_cls = cls.AddPartitionsToTxnTransaction
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        request = cls(transactions=[txn_cls(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=verify_only,
            topics=[txn_cls.AddPartitionsToTxnTopic(name=name, partitions=ids) for name, ids in topics.items()])])
        # v5 carries transaction version 2 (partitions added, not only verified).
        version = 4 if verify_only else 5
        try:
            response = await self.channel.request(broker_id, ADD_PARTITIONS_TO_TXN, version, request)
        except BrokerUnreachable as exc:
            log.info("Could not reach the transaction coordinator of %r: %s", transactional_id, exc)
            return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        if response.error_code:
            return {tp: response.error_code for tp in partitions}
        results = {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in partitions}
        for answer in response.results_by_transaction:
            for topic in answer.topic_results:
                for partition in topic.results_by_partition:
                    results[(topic.name, partition.partition_index)] = partition.partition_error_code
        return results
