"""The partition side of transactions: markers complete a producer's transaction, the last
stable offset, the aborted-transaction index (.txnindex, Kafka's byte format), snapshots carrying
open transactions, recovery rebuilding the index, truncation, and the marker checks."""

from __future__ import annotations

import os
import struct

import pytest

from kafkacompat.log import LogConfig, PartitionLog
from kafkacompat.log.txn_index import ENTRY_SIZE, AbortedTxn
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import TxnMarker, new_marker_batch, read_header, read_txn_marker

try:
    from test_producer_state import NOW, OTHER, PID, idem_batch, produce
except ImportError:  # tests/ imported as a package
    from tests.test_producer_state import NOW, OTHER, PID, idem_batch, produce

TXN = 0x10


def txn_batch(producer_id: int, sequence: int, epoch: int = 0, count: int = 3) -> bytearray:
    return idem_batch(producer_id, epoch, sequence, count, attributes=TXN)


def marker(log: PartitionLog, producer_id: int, committed: bool, *, epoch: int = 0, coordinator_epoch: int = 0,
           transaction_version: int = 0) -> int:
    """What WriteTxnMarkers does on the leader: check, then append the control batch."""
    log.producer_state.check_marker(producer_id, epoch, coordinator_epoch, transaction_version)
    batch = memoryview(new_marker_batch(producer_id, epoch, TxnMarker(committed, coordinator_epoch), NOW))
    return log.append(batch, [read_header(batch)]).first_offset


def lso(log: PartitionLog) -> int:
    return log.last_stable_offset(log.log_end_offset)


@pytest.fixture
def log(tmp_path):
    opened = PartitionLog.open(tmp_path / "orders-0", "orders", 0, LogConfig())
    yield opened
    opened.close()


def txnindex_bytes(log: PartitionLog) -> bytes:
    names = sorted(n for n in os.listdir(log.dir) if n.endswith(".txnindex"))
    return b"".join((log.dir / n).read_bytes() for n in names)


def test_the_marker_batch_has_kafkas_control_layout():
    batch = new_marker_batch(PID, 3, TxnMarker(False, 7), NOW)
    header = read_header(batch)
    assert header.is_control and header.is_transactional and header.compression == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.records_count) == (PID, 3, -1, 1)
    # the record: key = version 0, type 0 (ABORT); value = version 0, coordinator epoch 7
    assert bytes(batch[-13:]) == bytes([0x08]) + struct.pack(">hh", 0, 0) + bytes([0x0c]) + struct.pack(">hi", 0, 7) + b"\x00"
    assert read_txn_marker(batch, header) == TxnMarker(False, 7)
    assert read_txn_marker(new_marker_batch(PID, 3, TxnMarker(True, 2), NOW), header) == TxnMarker(True, 2)


def test_the_lso_stops_at_the_first_open_transaction_and_moves_on_markers(log):
    produce(log, idem_batch(OTHER, 0, 0))  # 0-2: idempotent, not transactional
    produce(log, txn_batch(PID, 0))  # 3-5
    produce(log, txn_batch(OTHER + 1, 0))  # 6-8
    assert lso(log) == 3
    assert log.last_stable_offset(2) == 2  # never above the high watermark
    marker(log, PID, True)  # 9
    assert log.last_stable_offset(9) == 3, "a marker the high watermark has not passed keeps its transaction unstable"
    assert lso(log) == 6
    marker(log, OTHER + 1, False)  # 10
    assert lso(log) == log.log_end_offset == 11
    assert log.aborted_transactions(0, 11) == [AbortedTxn(OTHER + 1, 6, 10, 11)]
    assert txnindex_bytes(log) == struct.pack(">hqqqq", 0, OTHER + 1, 6, 10, 11)


def test_an_abort_records_the_lso_of_the_other_open_transactions(log):
    produce(log, txn_batch(PID, 0))  # 0-2
    produce(log, txn_batch(OTHER, 0))  # 3-5
    marker(log, OTHER, False)  # 6: PID's transaction from 0 is still open
    assert log.aborted_transactions(0, 7) == [AbortedTxn(OTHER, 3, 6, 0)]
    assert log.aborted_transactions(7, 7) == []
    assert log.aborted_transactions(0, 3) == []  # fetched range ends before the aborted data


def test_marker_checks_follow_kafkas_producer_append_info(log):
    produce(log, txn_batch(PID, 0, epoch=2))
    with pytest.raises(KafkaError) as caught:
        marker(log, PID, True, epoch=1)
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as caught:
        marker(log, PID, True, epoch=2, transaction_version=2)  # TV2 markers carry the bumped epoch
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(log, PID, True, epoch=3, coordinator_epoch=5, transaction_version=2)
    marker(log, PID, True, epoch=3, coordinator_epoch=5, transaction_version=2)  # a retried TV2 marker
    with pytest.raises(KafkaError) as caught:
        marker(log, PID, False, epoch=3, coordinator_epoch=4)
    assert caught.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    entry = log.producer_state.producers[PID]
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (3, 5, -1)


def test_a_clean_restart_keeps_open_transactions_and_the_index(tmp_path):
    directory = tmp_path / "orders-0"
    log = PartitionLog.open(directory, "orders", 0, LogConfig())
    produce(log, txn_batch(PID, 0))  # 0-2
    marker(log, PID, False)  # 3
    produce(log, txn_batch(OTHER, 0))  # 4-6, stays open
    end = log.log_end_offset
    log.close()
    reopened = PartitionLog.open(directory, "orders", 0, LogConfig(), recovery_point=end)
    try:
        assert reopened.recovered_segments == 0
        assert reopened.producer_state.ongoing == {OTHER: 4}
        assert lso(reopened) == 4
        assert reopened.aborted_transactions(0, end) == [AbortedTxn(PID, 0, 3, 4)]
        marker(reopened, OTHER, True)
        assert lso(reopened) == reopened.log_end_offset
    finally:
        reopened.close()


def test_recovery_rebuilds_the_index_and_the_open_transactions(tmp_path):
    """An unclean stop (no snapshot at the end, recovery point 0, .txnindex lost)."""
    directory = tmp_path / "orders-0"
    log = PartitionLog.open(directory, "orders", 0, LogConfig(segment_bytes=400))
    produce(log, txn_batch(PID, 0))
    marker(log, PID, False)
    produce(log, txn_batch(OTHER, 0))
    produce(log, txn_batch(PID, 3))
    marker(log, PID, False)
    produce(log, txn_batch(PID + 5, 0))
    expected = log.aborted_transactions(0, log.log_end_offset)
    index = txnindex_bytes(log)
    assert len(expected) == 2 and len(index) == 2 * ENTRY_SIZE and log.segment_count > 1
    ongoing = dict(log.producer_state.ongoing)
    for segment in log.segments():
        segment.close()  # a crash: no snapshot at the log end, nothing flushed
    for name in os.listdir(directory):
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(directory / name)
    recovered = PartitionLog.open(directory, "orders", 0, LogConfig(segment_bytes=400), recovery_point=0)
    try:
        assert recovered.recovered_segments == recovered.segment_count
        assert recovered.aborted_transactions(0, recovered.log_end_offset) == expected
        assert txnindex_bytes(recovered) == index
        assert recovered.producer_state.ongoing == ongoing
        assert lso(recovered) == min(ongoing.values())
    finally:
        recovered.close()


def test_truncation_drops_index_entries_and_reopens_transactions(log):
    produce(log, txn_batch(PID, 0))  # 0-2
    marker(log, PID, False)  # 3
    log.truncate_to(3)
    assert log.aborted_transactions(0, 10) == []
    assert txnindex_bytes(log) == b""
    assert log.producer_state.ongoing == {PID: 0}
    assert lso(log) == 0


def test_a_follower_append_maintains_the_same_state(tmp_path, log):
    produce(log, txn_batch(PID, 0))
    marker(log, PID, False)
    follower = PartitionLog.open(tmp_path / "replica" / "orders-0", "orders", 0, LogConfig())
    try:
        data = bytearray(log.read(0, 1 << 20).read_all())
        view = memoryview(data)
        from kafkacompat.wire.records import iter_batches
        follower.append(view, list(iter_batches(view)), assign_offsets=False)
        assert follower.aborted_transactions(0, 10) == log.aborted_transactions(0, 10)
        assert txnindex_bytes(follower) == txnindex_bytes(log)
        assert lso(follower) == lso(log) == 4
    finally:
        follower.close()


# ---- compaction ------------------------------------------------------------------------------------

HOUR = 3_600_000


def keyed_txn_batch(producer_id: int, sequence: int, key: bytes, value: bytes) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
                                        producer_epoch=0, base_sequence=sequence, batch_size=1 << 20)
    builder.append(0, timestamp=NOW, key=key, value=value, headers=[])
    return bytearray(builder.build())


def plain(log: PartitionLog, key: bytes, value: bytes) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=NOW, key=key, value=value, headers=[])
    view = memoryview(bytearray(builder.build()))
    log.append(view, [read_header(view)])


def batches(log: PartitionLog) -> list[tuple[int, int, bool]]:
    """(base offset, record count, has a delete horizon) of every batch."""
    from kafkacompat.wire.records import DELETE_HORIZON_FLAG, iter_batches

    data = log.read(log.log_start_offset, 1 << 20).read_all()
    return [(h.base_offset, h.records_count, bool(h.attributes & DELETE_HORIZON_FLAG)) for h in iter_batches(data)]


def test_compaction_drops_aborted_records_and_markers_by_kafkas_rules(tmp_path):
    from kafkacompat.log.cleaner import LogCleaner, log_to_clean

    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                                                                 delete_retention_ms=HOUR))
    cleaner = LogCleaner(tmp_path, lambda: [log])

    def clean_round(now: int, n: int) -> None:
        plain(log, b"q", b"%d" % n)  # something dirty for this round
        log.roll()
        cleaner.clean_sync(log_to_clean(log, cleaner.checkpoints.get(("t", 0)), now), now)

    produce(log, keyed_txn_batch(PID, 0, b"k", b"aborted"))  # 0
    marker(log, PID, False)  # 1
    produce(log, keyed_txn_batch(PID, 1, b"k", b"committed"))  # 2
    marker(log, PID, True)  # 3
    plain(log, b"j", b"x")  # 4
    assert log.aborted_transactions(0, 5) == [AbortedTxn(PID, 0, 1, 2)]
    clean_round(NOW, 1)  # 5
    # the aborted record went (it never entered the map: "committed" is k's value, not a duplicate);
    # its marker stays while this pass saw its data, with its index entry in the cleaned segment
    assert batches(log)[:4] == [(1, 1, False), (2, 1, False), (3, 1, False), (4, 1, False)]
    assert log.aborted_transactions(0, 6) == [AbortedTxn(PID, 0, 1, 2)]
    assert txnindex_bytes(log) == AbortedTxn(PID, 0, 1, 2).encode()
    clean_round(NOW, 2)  # 6: no data of the aborted transaction is left: its marker gets a horizon
    assert batches(log)[:3] == [(1, 1, True), (2, 1, False), (3, 1, False)]
    assert txnindex_bytes(log) == b""
    clean_round(NOW + HOUR // 2, 3)  # 7: before the horizon it stays
    assert batches(log)[0] == (1, 1, True)
    clean_round(NOW + 2 * HOUR, 4)  # 8: after it, it goes; the committed transaction stays whole
    assert batches(log)[:3] == [(2, 1, False), (3, 1, False), (4, 1, False)]
    log.close()


def test_deleted_segments_take_their_index_and_the_lso_stays_in_the_log(log):
    produce(log, txn_batch(PID, 0))  # 0-2
    marker(log, PID, False)  # 3
    log.roll()
    produce(log, txn_batch(OTHER, 0))  # 4-6, open
    log.roll()
    plain(log, b"k", b"v")  # 7
    assert txnindex_bytes(log) and lso(log) == 4
    log.advance_log_start_offset(5)  # DeleteRecords into the open transaction
    assert txnindex_bytes(log) == b"" and log.aborted_transactions(5, 8) == []
    assert lso(log) == 5  # Kafka: the first unstable offset, but never below the log start
    marker(log, OTHER, True)
    assert lso(log) == log.log_end_offset


def test_a_read_committed_read_lists_only_the_aborts_of_the_segments_it_read(tmp_path):
    log = PartitionLog.open(tmp_path / "orders-0", "orders", 0, LogConfig())
    produce(log, txn_batch(PID, 0))  # 0-2
    marker(log, PID, False)  # 3
    log.roll()
    produce(log, txn_batch(OTHER, 0))  # 4-6
    marker(log, OTHER, False)  # 7
    first = log.read(0, 1, max_offset=lso(log))  # the first batch only
    assert first.upper_bound == 4
    assert log.aborted_transactions(0, first.upper_bound) == [AbortedTxn(PID, 0, 3, 4)]
    everything = log.read(0, 1 << 20, max_offset=lso(log))
    assert [t.producer_id for t in log.aborted_transactions(0, everything.upper_bound)] == [PID, OTHER]
    log.close()


def test_an_index_entry_the_disk_refused_is_served_and_written_at_the_next_flush(log):
    produce(log, txn_batch(PID, 0))  # 0-2
    assert log.aborted_transactions(0, 3) == []  # the (missing) index was read: no entry yet
    blocked = log.dir / "00000000000000000000.txnindex"
    blocked.mkdir()  # a real failure: the index cannot be opened for writing (EISDIR)
    marker(log, PID, False)  # 3: written, its index entry not
    assert log.aborted_transactions(0, 4) == [AbortedTxn(PID, 0, 3, 4)]
    blocked.rmdir()
    log.flush()
    assert txnindex_bytes(log) == AbortedTxn(PID, 0, 3, 4).encode()
