"""__transaction_state records (Kafka's TransactionLogKey/Value bytes) and the transaction state
machine (TransactionMetadata's transitions)."""

from __future__ import annotations

import struct

import pytest

from kafkacompat.transactions import log as txnlog
from kafkacompat.transactions.metadata import NO_PRODUCER_EPOCH, TransactionMetadata, TxnState
from kafkacompat.wire.errors import ErrorCode


def test_key_is_version_0_and_a_string():
    assert txnlog.key_bytes("orders") == b"\x00\x00\x00\x06orders"
    assert txnlog.decode_key(txnlog.key_bytes("orders")) == "orders"
    assert txnlog.decode_key(b"\x00\x01\x00\x01x") is None  # a key version this broker does not know


def test_value_v1_bytes_follow_the_schema():
    value = txnlog.TransactionLogValue(producer_id=7, producer_epoch=3, timeout_ms=60000,
                                       status=int(TxnState.ONGOING), partitions={"t": [1, 0]},
                                       last_update_ms=1000, start_ms=900, client_transaction_version=2)
    expected = (struct.pack(">hqhib", 1, 7, 3, 60000, 1)
                + b"\x02" + b"\x02t" + b"\x03" + struct.pack(">ii", 0, 1) + b"\x00"  # [{topic "t", ids [0, 1]}]
                + struct.pack(">qq", 1000, 900)
                + b"\x01" + b"\x02\x02" + struct.pack(">h", 2))  # tagged ClientTransactionVersion
    assert txnlog.value_bytes(value) == expected
    assert txnlog.decode_value(expected) == txnlog.TransactionLogValue(
        7, 3, 60000, 1, {"t": [0, 1]}, 1000, 900, client_transaction_version=2)


def test_value_v0_written_by_older_kafka_is_read():
    data = (struct.pack(">hqhib", 0, 9, 1, 30000, 4) + struct.pack(">i", -1) + struct.pack(">qq", 5, 4))
    assert txnlog.decode_value(data) == txnlog.TransactionLogValue(9, 1, 30000, 4, {}, 5, 4)
    data = (struct.pack(">hqhib", 0, 9, 1, 30000, 2) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"a"
            + struct.pack(">iii", 2, 0, 3) + struct.pack(">qq", 5, 4))
    assert txnlog.decode_value(data).partitions == {"a": [0, 3]}


def test_an_empty_transaction_is_written_with_null_partitions():
    metadata = TransactionMetadata("t", producer_id=1)
    transit = metadata.prepare_increment_epoch(60000, None, now_ms=10)
    value = transit.log_value()
    assert value.partitions is None and value.producer_epoch == 0
    assert txnlog.value_bytes(value)[17] == 0  # the compact array's null length


def test_transaction_ids_map_to_partitions_as_kafka_hashes_them():
    # Utils.abs("tx1".hashCode()) % 50 == 45 (Java String.hashCode of "tx1" is 116*31*31 + 120*31 + 49 = 115245)
    assert txnlog.partition_for("tx1", 50) == 115245 % 50 == 45


def _ongoing(epoch: int = 0, version: int = 0) -> TransactionMetadata:
    metadata = TransactionMetadata("t", producer_id=5)
    metadata.complete(metadata.prepare_increment_epoch(60000, None, now_ms=1))
    metadata.producer_epoch = epoch
    metadata.complete(metadata.prepare_add_partitions({("a", 0)}, now_ms=2, client_transaction_version=version))
    return metadata


def test_init_bumps_the_epoch_and_kip360_retries_keep_it():
    metadata = TransactionMetadata("t", producer_id=5)
    metadata.complete(metadata.prepare_increment_epoch(60000, None, now_ms=1))
    assert (metadata.producer_epoch, metadata.state) == (0, TxnState.EMPTY)
    metadata.complete(metadata.prepare_increment_epoch(60000, 0, now_ms=2))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (1, 0)
    metadata.complete(metadata.prepare_increment_epoch(60000, 0, now_ms=3))  # a retry: epoch 0 was the last
    assert metadata.producer_epoch == 1
    assert metadata.prepare_increment_epoch(60000, 7, now_ms=4) == ErrorCode.PRODUCER_FENCED


def test_pending_changes_are_exclusive_and_abandon_restores_nothing_else():
    metadata = _ongoing()
    metadata.prepare_end(TxnState.PREPARE_COMMIT, 0, -1, now_ms=3)
    with pytest.raises(RuntimeError):
        metadata.prepare_add_partitions({("b", 0)}, now_ms=4, client_transaction_version=0)
    metadata.abandon()
    assert metadata.state == TxnState.ONGOING and metadata.pending_state is None


def test_commit_then_complete_tv1_keeps_the_epoch():
    metadata = _ongoing(epoch=4)
    metadata.complete(metadata.prepare_end(TxnState.PREPARE_COMMIT, 0, -1, now_ms=3))
    assert (metadata.state, metadata.producer_epoch, metadata.partitions) == (TxnState.PREPARE_COMMIT, 4, {("a", 0)})
    metadata.complete(metadata.prepare_complete(now_ms=4))
    assert (metadata.state, metadata.producer_epoch, metadata.partitions) == (TxnState.COMPLETE_COMMIT, 4, set())
    assert metadata.start_ms == 2


def test_tv2_bumps_the_epoch_on_every_end():
    metadata = _ongoing(epoch=4, version=2)
    metadata.complete(metadata.prepare_end(TxnState.PREPARE_ABORT, 2, -1, now_ms=3))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (5, 4)
    metadata.complete(metadata.prepare_complete(now_ms=4))
    assert (metadata.state, metadata.producer_id, metadata.producer_epoch) == (TxnState.COMPLETE_ABORT, 5, 5)


def test_tv2_epoch_overflow_moves_to_the_next_producer_id_on_completion():
    metadata = _ongoing(epoch=32766, version=2)
    metadata.complete(metadata.prepare_end(TxnState.PREPARE_COMMIT, 2, 99, now_ms=3))
    assert (metadata.producer_id, metadata.producer_epoch, metadata.next_producer_id) == (5, 32767, 99)
    metadata.complete(metadata.prepare_complete(now_ms=4))
    assert (metadata.producer_id, metadata.producer_epoch, metadata.previous_producer_id) == (99, 0, 5)


def test_invalid_transitions_are_refused():
    metadata = TransactionMetadata("t", producer_id=5, producer_epoch=NO_PRODUCER_EPOCH)
    with pytest.raises(RuntimeError):
        metadata.prepare_end(TxnState.PREPARE_COMMIT, 0, -1, now_ms=1)  # Empty cannot commit
    ongoing = _ongoing()
    with pytest.raises(RuntimeError):
        ongoing.prepare_dead()  # an open transaction never expires


def test_the_fence_bumps_once_even_after_a_failed_write():
    metadata = _ongoing(epoch=2)
    assert metadata.prepare_fence_epoch().producer_epoch == 3
    metadata.abandon()
    metadata.failed_epoch_fence = True
    assert metadata.prepare_fence_epoch().producer_epoch == 2


def test_state_names_are_kafkas():
    assert [s.kafka_name for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                                "CompleteAbort", "Dead", "PrepareEpochFence"]


def test_metadata_round_trips_through_the_log():
    metadata = _ongoing(epoch=3, version=2)
    value = txnlog.decode_value(txnlog.value_bytes(metadata.prepare_add_partitions({("b", 2)}, 5, 2).log_value()))
    loaded = TransactionMetadata.from_log("t", value)
    assert (loaded.state, loaded.producer_id, loaded.producer_epoch, loaded.partitions, loaded.start_ms,
            loaded.client_transaction_version) == (TxnState.ONGOING, 5, 3, {("a", 0), ("b", 2)}, 2, 2)
