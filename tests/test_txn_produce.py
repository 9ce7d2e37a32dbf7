"""The produce path's KIP-890 verification through the real handler and replica manager: what a
transaction verifier answers reaches the producer as Kafka translates it, and a marker written
while the question is out refuses the late batch (Kafka's verification guard). The verifiers
here are small implementations of the TransactionVerifier interface standing in for the
coordinator's answers (compat-tests/test_transactions_end_to_end.py runs the real one)."""

from __future__ import annotations

import dataclasses
import itertools

import trio

from kafkacompat.handlers.produce import handle_produce
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.frame import RequestHeader
from kafkacompat.wire.produce import ProducePartitionData, ProduceRequestData, ProduceTopicData
from tests.support import TOPIC, Cluster
from tests.test_producer_state import PID, idem_batch

_correlation = itertools.count(1)


class Answering:
    """Answers every partition with one code, and remembers what it was asked."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.asked: list[tuple[str, int, int, list[tuple[str, int]], bool]] = []

    async def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions, verify_only):
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions), verify_only))
        return {partition: self.code for partition in partitions}


class EndingMeanwhile:
    """The coordinator aborts the producer's transaction while the leader asks (a timeout)."""

    def __init__(self, node) -> None:
        self.node = node

    async def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions, verify_only):
        await self.node.replicas.write_txn_markers(producer_id, producer_epoch, 0, False, partitions)
        return {partition: ErrorCode.NONE for partition in partitions}


async def produce(node, verifier, batch: bytearray, *, version: int = 9, transactional_id: str | None = "t"):
    services = dataclasses.replace(node.services(), txn_verifier=verifier)
    request = ProduceRequestData(transactional_id, -1, 5000, [
        ProduceTopicData(TOPIC, None, [ProducePartitionData(0, memoryview(bytearray(batch)))])])
    ctx = RequestContext(services, RequestHeader(0, version, next(_correlation), "test", version >= 9), None)
    response = await handle_produce(request, ctx)
    result = response.topics[0].partitions[0]
    return result.error_code, result.base_offset


def with_node(test):
    def wrapper(tmp_path):
        async def main():
            async with trio.open_nursery() as nursery:
                cluster = Cluster(tmp_path, nursery, size=1)
                await cluster.start_all()
                await cluster.create_topic()
                await test(cluster.broker(0))
                nursery.cancel_scope.cancel()

        trio.run(main)

    wrapper.__name__ = test.__name__
    return wrapper


TXN = 0x10


@with_node
async def test_the_first_batch_of_a_transaction_is_verified_the_next_ones_are_not(node):
    verifier = Answering(ErrorCode.NONE)
    assert await produce(node, verifier, idem_batch(PID, 0, 0, attributes=TXN)) == (0, 0)
    assert await produce(node, verifier, idem_batch(PID, 0, 3, attributes=TXN)) == (0, 3)
    assert verifier.asked == [("t", PID, 0, [(TOPIC, 0)], True)]  # Produce < v12: verify only
    await node.replicas.write_txn_markers(PID, 0, 0, True, [(TOPIC, 0)])
    assert await produce(node, verifier, idem_batch(PID, 1, 0, attributes=TXN), version=12) == (0, 7)
    assert verifier.asked[-1] == ("t", PID, 1, [(TOPIC, 0)], False)  # v12+: transaction version 2 adds it


@with_node
async def test_the_coordinators_answers_reach_the_producer_as_kafka_translates_them(node):
    batch = idem_batch(PID, 0, 0, attributes=TXN)
    assert (await produce(node, Answering(ErrorCode.INVALID_TXN_STATE), batch))[0] == ErrorCode.INVALID_TXN_STATE
    assert (await produce(node, Answering(ErrorCode.TRANSACTION_ABORTABLE), batch))[0] == ErrorCode.INVALID_TXN_STATE
    assert (await produce(node, Answering(ErrorCode.TRANSACTION_ABORTABLE), batch, version=11))[0] \
        == ErrorCode.TRANSACTION_ABORTABLE
    assert (await produce(node, Answering(ErrorCode.PRODUCER_FENCED), batch))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    for retriable in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_COORDINATOR,
                      ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        assert (await produce(node, Answering(retriable), batch))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await produce(node, Answering(ErrorCode.NONE), batch, transactional_id=None))[0] \
        == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert node.partition(TOPIC, 0).log_end_offset == 0  # nothing refused was written


@with_node
async def test_a_marker_written_while_the_coordinator_is_asked_refuses_the_batch(node):
    assert (await produce(node, EndingMeanwhile(node), idem_batch(PID, 0, 0, attributes=TXN)))[0] \
        == ErrorCode.INVALID_TXN_STATE
    partition = node.partition(TOPIC, 0)
    assert partition.log_end_offset == 1  # the marker alone
    assert partition.last_stable_offset == 1
    assert await produce(node, Answering(ErrorCode.NONE), idem_batch(PID, 0, 0, attributes=TXN)) == (0, 1)


class Silent:
    """A coordinator that never answers."""

    async def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions, verify_only):
        await trio.sleep_forever()


class Broken:
    async def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions, verify_only):
        raise RuntimeError("the verifier has a bug")


@with_node
async def test_a_verifier_that_hangs_or_fails_gets_a_retriable_answer_and_writes_nothing(node):
    batch = idem_batch(PID, 0, 0, attributes=TXN)
    services = dataclasses.replace(node.services(), txn_verifier=Silent())
    request = ProduceRequestData("t", -1, 50, [
        ProduceTopicData(TOPIC, None, [ProducePartitionData(0, memoryview(bytearray(batch)))])])
    response = await handle_produce(request, RequestContext(services, RequestHeader(0, 9, 1, "test", True), None))
    assert response.topics[0].partitions[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert (await produce(node, Broken(), batch))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert node.partition(TOPIC, 0).log_end_offset == 0
