"""Idempotent producers: the sequence/epoch state machine (Kafka's ProducerAppendInfo rules),
duplicate acknowledgement, snapshot files (Kafka's byte format), rebuilding the state after clean
and unclean restarts, truncation, expiry, and producer id blocks."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import crc32c
import pytest
import trio

from kafkacompat.controller.producer_ids import (
    BLOCK_FILE,
    FileBlockStore,
    ProducerIdManager,
    decode_block,
    encode_block,
)
from kafkacompat.log import LogConfig, LogManager, PartitionLog
from kafkacompat.log.producer_state import (
    INT32_MAX,
    CorruptSnapshotError,
    ProducerStateEntry,
    decrement_sequence,
    read_snapshot,
    snapshot_file_name,
    write_snapshot,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import validate_produce_records

try:
    from test_log_support import make_batch
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import make_batch

NOW = int(time.time() * 1000)
PID = 4000
OTHER = 4001


def idem_batch(producer_id: int, epoch: int, sequence: int, count: int = 3, *, timestamp: int = NOW,
               attributes: int = 0) -> bytearray:
    """One batch of ``count`` records from an idempotent producer, CRC recomputed."""
    batch = make_batch(count, base_timestamp=timestamp, attributes=attributes)
    struct.pack_into(">qhi", batch, 43, producer_id, epoch, sequence)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def produce(log: PartitionLog, batch: bytearray) -> int:
    """What the Produce handler does for one partition; returns the acknowledged base offset."""
    view = memoryview(bytearray(batch))
    headers = validate_produce_records(view, 9, 1 << 30)
    if headers[0].producer_id >= 0:
        duplicate = log.producer_state.check_client_batch(headers[0])
        if duplicate is not None:
            return duplicate.first_offset
    return log.append(view, headers).first_offset


def produce_error(log: PartitionLog, batch: bytearray) -> ErrorCode:
    end = log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        produce(log, batch)
    assert log.log_end_offset == end, "a rejected batch must not be written"
    return caught.value.code


BATCH_SIZE = len(idem_batch(PID, 0, 0))
SMALL_SEGMENTS = LogConfig(segment_bytes=4 * BATCH_SIZE)


@pytest.fixture
def log(tmp_path):
    opened = PartitionLog.open(tmp_path / "orders-0", "orders", 0, LogConfig())
    yield opened
    opened.close(snapshot=False)


def reopen(directory: Path, config: LogConfig = LogConfig(), **options) -> PartitionLog:
    return PartitionLog.open(directory, "orders", 0, config, **options)


# -- the sequence state machine ----------------------------------------------------------------


def test_in_order_batches_are_appended(log):
    assert [produce(log, idem_batch(PID, 0, seq)) for seq in (0, 3, 6)] == [0, 3, 6]
    entry = log.producer_state.producers[PID]
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (0, 0, 8)


@pytest.mark.parametrize("which", range(5))
def test_a_retry_of_each_of_the_last_five_batches_gets_its_original_offset(log, which):
    for seq in range(0, 21, 3):  # 7 batches: sequences 0..20, offsets 0..20
        produce(log, idem_batch(PID, 0, seq))
    retained = [6, 9, 12, 15, 18]  # the last five batches
    assert produce(log, idem_batch(PID, 0, retained[which])) == retained[which]
    assert log.log_end_offset == 21  # nothing written


def test_a_retry_older_than_the_last_five_batches_is_out_of_order(log):
    for seq in range(0, 21, 3):
        produce(log, idem_batch(PID, 0, seq))
    assert produce_error(log, idem_batch(PID, 0, 3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_retry_with_a_different_record_count_is_not_a_duplicate(log):
    produce(log, idem_batch(PID, 0, 0, 3))
    produce(log, idem_batch(PID, 0, 3, 3))
    assert produce_error(log, idem_batch(PID, 0, 3, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_gap_is_out_of_order(log):
    produce(log, idem_batch(PID, 0, 0))
    assert produce_error(log, idem_batch(PID, 0, 4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(log, idem_batch(PID, 0, 3)) == 3  # the producer carries on once in order


def test_producers_are_independent(log):
    produce(log, idem_batch(PID, 0, 0))
    produce(log, idem_batch(OTHER, 0, 0))
    assert produce(log, idem_batch(PID, 0, 3)) == 6
    assert produce(log, idem_batch(OTHER, 0, 0)) == 3  # OTHER's duplicate


def test_an_unknown_producer_may_start_at_any_sequence(log):
    """Kafka 2.5+ (KIP-360): no UNKNOWN_PRODUCER_ID; the state may have expired or been lost."""
    assert produce(log, idem_batch(PID, 3, 1234)) == 0
    assert produce(log, idem_batch(PID, 3, 1237)) == 3


def test_a_negative_sequence_with_a_producer_id_is_an_invalid_record(log):
    assert produce_error(log, idem_batch(PID, 0, -1)) == ErrorCode.INVALID_RECORD


def test_an_epoch_bump_resets_sequences(log):
    produce(log, idem_batch(PID, 0, 0))
    produce(log, idem_batch(PID, 0, 3))
    assert produce_error(log, idem_batch(PID, 1, 6)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(log, idem_batch(PID, 1, 0)) == 6
    entry = log.producer_state.producers[PID]
    assert (entry.producer_epoch, len(entry.batches)) == (1, 1)
    # the old epoch's batches are forgotten: a retry of them is fenced, not a duplicate
    assert produce_error(log, idem_batch(PID, 0, 3)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_lower_epoch_is_invalid_producer_epoch(log):
    produce(log, idem_batch(PID, 5, 0))
    assert produce_error(log, idem_batch(PID, 4, 3)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert produce_error(log, idem_batch(PID, 4, 0)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequences_wrap_after_int32_max(log):
    produce(log, idem_batch(PID, 0, INT32_MAX - 2, 3))  # INT32_MAX-2 .. INT32_MAX
    assert produce(log, idem_batch(PID, 0, 0, 3)) == 3  # after INT32_MAX comes 0
    assert produce(log, idem_batch(PID, 0, 3, 2)) == 6


def test_a_batch_spanning_the_wrap_and_its_retry(log):
    produce(log, idem_batch(PID, 0, INT32_MAX - 4, 3))  # .. INT32_MAX-2
    produce(log, idem_batch(PID, 0, INT32_MAX - 1, 4))  # INT32_MAX-1, INT32_MAX, 0, 1
    entry = log.producer_state.producers[PID]
    assert entry.last_seq == 1 and entry.batches[-1].first_seq == INT32_MAX - 1
    assert produce(log, idem_batch(PID, 0, INT32_MAX - 1, 4)) == 3  # duplicate
    assert produce(log, idem_batch(PID, 0, 2, 1)) == 7
    assert decrement_sequence(1, 3) == INT32_MAX - 1


def test_a_plain_batch_inside_an_open_transaction_is_refused(log):
    produce(log, idem_batch(PID, 0, 0, attributes=0x10))
    assert log.producer_state.ongoing == {PID: 0}
    assert produce_error(log, idem_batch(PID, 0, 3)) == ErrorCode.INVALID_TXN_STATE


def test_non_idempotent_batches_leave_no_state(log):
    view = memoryview(make_batch(3))
    log.append(view, validate_produce_records(view, 9, 1 << 30))
    assert log.producer_state.producers == {}


def test_replica_appends_update_the_state_too(tmp_path):
    """A follower's log (assign_offsets=False) must know the producers when it becomes leader."""
    follower = PartitionLog.open(tmp_path / "orders-0", "orders", 0, LogConfig())
    for base, seq in ((0, 0), (3, 3)):
        batch = idem_batch(PID, 2, seq)
        struct.pack_into(">q", batch, 0, base)
        view = memoryview(batch)
        follower.append(view, validate_produce_records(view, 9, 1 << 30), assign_offsets=False)
    assert produce(follower, idem_batch(PID, 2, 3)) == 3
    assert produce(follower, idem_batch(PID, 2, 6)) == 6
    follower.close()


def test_describe_fields_and_expiry(log):
    produce(log, idem_batch(PID, 1, 0, timestamp=NOW - 10_000))
    produce(log, idem_batch(OTHER, 0, 0, timestamp=NOW))
    state = log.producer_state
    assert state.producers[PID].last_timestamp == NOW - 10_000 + 2  # max timestamp of the batch
    assert state.remove_expired(NOW + 1000, expiration_ms=5_000) == 1
    assert set(state.producers) == {OTHER}
    # an expired producer is unknown: any sequence is accepted again
    assert produce(log, idem_batch(PID, 1, 99)) == 6


# -- snapshot files ------------------------------------------------------------------------------


def test_snapshot_byte_format(tmp_path):
    entry = ProducerStateEntry(0x0102030405060708, 7)
    entry.add_batch(7, 41, 1000, 9, 1_600_000_000_000)
    empty = ProducerStateEntry(5, 2, coordinator_epoch=3, last_timestamp=77)
    path = tmp_path / snapshot_file_name(1001)
    write_snapshot(path, [entry, empty])
    data = path.read_bytes()
    assert path.name == "00000000000000001001.snapshot"
    body = struct.pack(">i", 2)
    body += struct.pack(">qhiqiqiq", 0x0102030405060708, 7, 41, 1000, 9, 1_600_000_000_000, -1, -1)
    body += struct.pack(">qhiqiqiq", 5, 2, -1, -1, 0, 77, 3, -1)
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    first, second = read_snapshot(path)
    assert (first.producer_id, first.producer_epoch, first.last_seq, first.first_seq, first.last_data_offset,
            first.batches[0].first_offset, first.last_timestamp) == (0x0102030405060708, 7, 41, 32, 1000, 991,
                                                                     1_600_000_000_000)
    assert (second.producer_epoch, second.last_seq, list(second.batches), second.coordinator_epoch,
            second.last_timestamp) == (2, -1, [], 3, 77)


def test_an_empty_snapshot_is_six_bytes_plus_the_count(tmp_path):
    path = tmp_path / snapshot_file_name(0)
    write_snapshot(path, [])
    assert path.read_bytes() == struct.pack(">hIi", 1, crc32c.crc32c(struct.pack(">i", 0)), 0)
    assert read_snapshot(path) == []


@pytest.mark.parametrize("damage", ["crc", "version", "truncated"])
def test_damaged_snapshots_are_rejected(tmp_path, damage):
    entry = ProducerStateEntry(1, 0)
    entry.add_batch(0, 2, 2, 2, NOW)
    path = tmp_path / snapshot_file_name(3)
    write_snapshot(path, [entry])
    data = bytearray(path.read_bytes())
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "version":
        data[1] = 9
    else:
        del data[-4:]
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


# -- rebuilding after restarts -----------------------------------------------------------------------


def fill_two_producers(log: PartitionLog, batches: int) -> None:
    for i in range(batches):
        produce(log, idem_batch(PID, 0, 3 * i))
        produce(log, idem_batch(OTHER, 1, 3 * i))


def state_of(log: PartitionLog) -> dict[int, tuple[int, int, int, int]]:
    return {pid: (e.producer_epoch, e.last_seq, e.last_data_offset, e.last_timestamp)
            for pid, e in log.producer_state.producers.items()}


def snapshots(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".snapshot"))


def test_snapshots_are_written_at_roll_and_clean_close(tmp_path):
    log = reopen(tmp_path / "orders-0", SMALL_SEGMENTS)
    fill_two_producers(log, 5)  # 10 batches of 3: segments at 0, 12, 24
    assert [info["base_offset"] for info in log.segments_info()] == [0, 12, 24]
    assert snapshots(log.dir) == [snapshot_file_name(12), snapshot_file_name(24)]
    [at_12] = [read_snapshot(log.dir / snapshot_file_name(12))]
    assert {(e.producer_id, e.last_seq, e.last_data_offset) for e in at_12} == {(PID, 5, 8), (OTHER, 5, 11)}
    before = state_of(log)
    log.close()
    assert snapshots(log.dir)[-1] == snapshot_file_name(30)
    again = reopen(log.dir, SMALL_SEGMENTS)
    assert state_of(again) == before
    # Kafka's snapshot keeps the last batch of each producer: its retry is still a duplicate...
    assert produce(again, idem_batch(PID, 0, 12)) == 24
    # ... and the producer continues in sequence
    assert produce(again, idem_batch(PID, 0, 15)) == 30
    again.close()


def test_a_log_without_idempotent_producers_gets_no_snapshot_files(tmp_path):
    log = reopen(tmp_path / "orders-0", SMALL_SEGMENTS)
    for _ in range(10):
        view = memoryview(make_batch(3))
        log.append(view, validate_produce_records(view, 9, 1 << 30))
    log.close()
    assert snapshots(tmp_path / "orders-0") == []


def test_unclean_restart_replays_headers_after_the_latest_snapshot(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory, SMALL_SEGMENTS)
    fill_two_producers(log, 7)  # 14 batches, offsets 0..41; rolls at 12, 24, 36
    before = state_of(log)
    # no close(): a crash after the last roll. The latest snapshot is at 36; the two batches after
    # it are replayed.
    crashed = reopen(directory, SMALL_SEGMENTS, recovery_point=36)
    assert state_of(crashed) == before
    # every batch written after the snapshot is known again, so the in-flight retries of both
    # producers are duplicates
    assert produce(crashed, idem_batch(PID, 0, 18)) == 36
    assert produce(crashed, idem_batch(OTHER, 1, 18)) == 39
    assert produce(crashed, idem_batch(PID, 0, 21)) == 42
    crashed.close()


def test_rebuild_without_any_snapshot_replays_the_whole_log(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory, SMALL_SEGMENTS)
    fill_two_producers(log, 7)
    before = state_of(log)
    for name in snapshots(directory):
        os.unlink(directory / name)
    rebuilt = reopen(directory, SMALL_SEGMENTS, recovery_point=0)
    assert state_of(rebuilt) == before
    assert len(rebuilt.producer_state.producers[PID].batches) == 5
    assert produce(rebuilt, idem_batch(PID, 0, 9)) == 18  # one of the last five: a duplicate
    rebuilt.close()


def test_a_torn_tail_drops_the_lost_batches_from_the_state(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory)
    fill_two_producers(log, 3)  # offsets 0..17, one segment, no roll snapshot
    log.close()
    os.unlink(directory / snapshot_file_name(18))  # as if the crash came before the clean close
    segment = directory / f"{0:020d}.log"
    os.truncate(segment, os.path.getsize(segment) - 10)  # OTHER's last batch (offsets 15-17) is torn
    recovered = reopen(directory, recovery_point=0)
    assert recovered.log_end_offset == 15
    assert recovered.producer_state.producers[OTHER].last_seq == 5
    assert recovered.producer_state.producers[PID].last_seq == 8
    # OTHER's retry of the lost batch is new data, written at the new end
    assert produce(recovered, idem_batch(OTHER, 1, 6)) == 15
    recovered.close()


def test_a_corrupt_snapshot_falls_back_to_an_older_one(tmp_path, caplog):
    directory = tmp_path / "orders-0"
    log = reopen(directory, SMALL_SEGMENTS)
    fill_two_producers(log, 7)
    before = state_of(log)
    latest = directory / snapshots(directory)[-1]
    latest.write_bytes(latest.read_bytes()[:-1] + b"\x00")
    # a crash after the last roll (recovery from 36 on; recovery from 0 would rebuild the state
    # from the start of the log without reading any snapshot, as Kafka's recoverSegment)
    rebuilt = reopen(directory, SMALL_SEGMENTS, recovery_point=36)
    assert state_of(rebuilt) == before
    assert latest.name in caplog.text
    rebuilt.close()


def test_snapshots_past_the_log_end_are_deleted_on_load(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory, SMALL_SEGMENTS)
    fill_two_producers(log, 7)
    log.close()
    stale = ProducerStateEntry(PID, 9)
    stale.add_batch(9, 100, 900, 0, NOW)
    write_snapshot(directory / snapshot_file_name(900), [stale])
    reopened = reopen(directory, SMALL_SEGMENTS)
    assert snapshot_file_name(900) not in snapshots(directory)
    assert reopened.producer_state.producers[PID].producer_epoch == 0
    reopened.close()


def test_truncation_rebuilds_the_state(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory, SMALL_SEGMENTS)
    fill_two_producers(log, 7)  # PID's batches at 0, 6, 12, ..., 36; OTHER's at 3, 9, ..., 39
    log.truncate_to(27)  # a follower's truncation: offsets 27.. go, snapshot at 36 too
    assert snapshot_file_name(36) not in snapshots(directory)
    assert log.producer_state.producers[PID].last_seq == 14  # its batch at 24 (sequences 12-14)
    assert log.producer_state.producers[OTHER].last_seq == 11  # its batch at 21
    assert produce(log, idem_batch(OTHER, 1, 12)) == 27
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.producers == {} and snapshots(directory) == []
    log.close()


def test_expired_producers_are_not_loaded(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory)
    now = int(time.time() * 1000)
    produce(log, idem_batch(PID, 0, 0, timestamp=now - 200_000))
    produce(log, idem_batch(OTHER, 0, 0, timestamp=now))
    log.close()
    reopened = reopen(directory, producer_id_expiration_ms=100_000)
    assert set(reopened.producer_state.producers) == {OTHER}
    reopened.close()


def test_retention_keeps_producer_state_and_drops_old_snapshots(tmp_path):
    directory = tmp_path / "orders-0"
    log = reopen(directory, SMALL_SEGMENTS)
    fill_two_producers(log, 7)
    log.advance_log_start_offset(30)  # segments at 0, 12 go (DeleteRecords)
    assert snapshots(directory) == [snapshot_file_name(24), snapshot_file_name(36)]
    assert set(log.producer_state.producers) == {PID, OTHER}
    log.close()


def test_manager_passes_the_expiration_and_snapshots_on_close(tmp_path):
    manager = LogManager(tmp_path, producer_id_expiration_ms=1234)
    log = manager.create("orders", 0, LogConfig())
    assert log.producer_state.expiration_ms == 1234
    produce(log, idem_batch(PID, 0, 0))
    manager.close()
    assert snapshots(tmp_path / "orders-0") == [snapshot_file_name(3)]
    manager = LogManager(tmp_path)
    manager.load_all(lambda topic: LogConfig())
    assert manager.get("orders", 0).producer_state.producers[PID].last_seq == 2
    manager.close()


# -- producer id blocks ----------------------------------------------------------------------


def test_producer_ids_are_unique_across_restarts(tmp_path):
    first = ProducerIdManager(0, FileBlockStore(tmp_path), block_size=10)
    ids = [trio.run(first.generate) for _ in range(15)]
    assert ids == list(range(15))
    assert decode_block((tmp_path / BLOCK_FILE).read_bytes()) == (0, 10, 19)
    restarted = ProducerIdManager(0, FileBlockStore(tmp_path), block_size=10)
    assert trio.run(restarted.generate) == 20  # the rest of the old block is skipped, never reused


def test_concurrent_requests_share_one_claim(tmp_path):
    manager = ProducerIdManager(0, FileBlockStore(tmp_path), block_size=100)
    ids: list[int] = []

    async def main():
        async def one():
            ids.append(await manager.generate())

        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(one)

    trio.run(main)
    assert sorted(ids) == list(range(50))
    assert decode_block((tmp_path / BLOCK_FILE).read_bytes()) == (0, 0, 99)


def test_a_lost_compare_and_set_claims_the_next_block():
    class RacingStore:
        def __init__(self):
            self.data, self.version, self.raced = None, 0, False

        async def get(self):
            return self.data, self.version

        async def compare_and_set(self, data, expected_version):
            if not self.raced:  # another broker claims 0..9 first
                self.raced = True
                self.data, self.version = encode_block(1, 0, 9), self.version + 1
                return False
            if expected_version != self.version:
                return False
            self.data, self.version = data, self.version + 1
            return True

    manager = ProducerIdManager(0, RacingStore(), block_size=10)
    assert trio.run(manager.generate) == 10


def test_an_unreadable_block_refuses_to_hand_out_ids(tmp_path):
    (tmp_path / BLOCK_FILE).write_text("{not json")
    with pytest.raises(OSError):
        trio.run(ProducerIdManager(0, FileBlockStore(tmp_path)).generate)
