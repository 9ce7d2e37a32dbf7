"""The transaction coordinator of a real single-node broker (in-process: its logs, replica manager
and __transaction_state) stopped after EndTxn's PrepareCommit was written but before any marker
went out: reopened on the same data dir, it loads the transaction in PrepareCommit, writes the
markers and completes it, and the partition's last stable offset moves past the transaction."""

from __future__ import annotations

import trio

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.transactions.metadata import TxnState
from kafkacompat.wire.records import new_batch, validate_batches

TOPIC = "orders"


def _append_transactional(broker: Broker, producer_id: int, epoch: int, index: int) -> None:
    partition = broker.replicas.partition(TOPIC, index)
    batch = memoryview(new_batch([(1_700_000_000_000, None, b"in-txn")], transactional_producer=(producer_id, epoch)))
    partition.append(batch, validate_batches(batch, partition.log.config.max_message_bytes))


def test_a_commit_whose_markers_never_went_out_completes_after_a_restart(tmp_path):
    config = BrokerConfig(data_dir=tmp_path / "data")

    async def until_prepare_commit() -> tuple[int, int]:
        broker = Broker(config)
        broker.open()
        try:
            broker.admin.create_topic_now(TOPIC, 2, 1, {})
            coordinator = broker.transactions
            coordinator.state_log.ensure_topic()
            coordinator.on_topic_created()
            init = await coordinator.init_producer_id("tx", 60000, None)
            assert init.error == 0
            assert await coordinator.add_partitions("tx", init.producer_id, init.producer_epoch,
                                                    {(TOPIC, 0), (TOPIC, 1)}) == 0
            for index in (0, 1):
                _append_transactional(broker, init.producer_id, init.producer_epoch, index)
            # coordinator.run() never started: the marker task stays queued, as if the broker
            # died right after answering EndTxn
            assert await coordinator.end_transaction("tx", init.producer_id, init.producer_epoch, True, 0) == (
                0, init.producer_id, init.producer_epoch)
            assert coordinator.transactions["tx"].state == TxnState.PREPARE_COMMIT
            assert [broker.replicas.partition(TOPIC, i).last_stable_offset for i in (0, 1)] == [0, 0]
            return init.producer_id, init.producer_epoch
        finally:
            broker.close()

    async def after_restart() -> None:
        broker = Broker(config)
        broker.open()
        try:
            coordinator = broker.transactions
            assert coordinator.transactions["tx"].state == TxnState.PREPARE_COMMIT  # loaded so
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.replicas.run)
                nursery.start_soon(coordinator.run)
                with trio.fail_after(10):
                    while coordinator.transactions["tx"].state != TxnState.COMPLETE_COMMIT:
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            for index in (0, 1):
                partition = broker.replicas.partition(TOPIC, index)
                assert partition.last_stable_offset == partition.log_end_offset == 2  # record + COMMIT marker
        finally:
            broker.close()

    trio.run(until_prepare_commit)
    trio.run(after_restart)


def test_add_partitions_right_after_a_commit_waits_for_its_markers(tmp_path, monkeypatch):
    """A producer begins its next transaction as soon as EndTxn is answered, while the previous
    one's markers are still being written: AddPartitionsToTxn then waits for them (at most
    SETTLE_WAIT_S) instead of answering CONCURRENT_TRANSACTIONS at once, which librdkafka would
    retry only after retry.backoff.ms."""
    from kafkacompat.transactions import coordinator as coordinator_module
    from kafkacompat.wire.errors import ErrorCode

    async def main() -> None:
        broker = Broker(BrokerConfig(data_dir=tmp_path / "data"))
        broker.open()
        try:
            broker.admin.create_topic_now(TOPIC, 2, 1, {})
            coordinator = broker.transactions
            coordinator.state_log.ensure_topic()
            coordinator.on_topic_created()
            init = await coordinator.init_producer_id("tx", 60000, None)
            pid, epoch = init.producer_id, init.producer_epoch
            assert await coordinator.add_partitions("tx", pid, epoch, {(TOPIC, 0)}) == 0
            _append_transactional(broker, pid, epoch, 0)
            assert (await coordinator.end_transaction("tx", pid, epoch, True, 0))[0] == 0
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.replicas.run)
                # coordinator.run() not started: the markers stay queued, so the wait ends at its bound
                started = trio.current_time()
                assert await coordinator.add_partitions("tx", pid, epoch, {(TOPIC, 1)}) == \
                    ErrorCode.CONCURRENT_TRANSACTIONS
                assert trio.current_time() - started >= coordinator_module.SETTLE_WAIT_S * 0.9
                # a request waiting when the markers go out is answered once they are written
                monkeypatch.setattr(coordinator_module, "SETTLE_WAIT_S", 60.0)
                answers: list[int] = []

                async def add_next() -> None:
                    answers.append(await coordinator.add_partitions("tx", pid, epoch, {(TOPIC, 1)}))

                nursery.start_soon(add_next)
                await trio.sleep(0.05)
                assert answers == [] and coordinator.transactions["tx"].state == TxnState.PREPARE_COMMIT
                nursery.start_soon(coordinator.run)
                with trio.fail_after(30):
                    while not answers:
                        await trio.sleep(0.01)
                assert answers == [0]
                assert coordinator.transactions["tx"].state == TxnState.ONGOING
                assert coordinator.transactions["tx"].partitions == {(TOPIC, 1)}
                nursery.cancel_scope.cancel()
        finally:
            broker.close()

    trio.run(main)
