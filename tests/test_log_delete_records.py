"""DeleteRecords below the handler, on real files: the log start offset moving forward
(PartitionLog), its checkpoint surviving clean and unclean restarts (LogManager), and Kafka's
deleteRecordsOnLeader / lowWatermarkIfLeader rules on a Partition."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from kafkacompat.controller.state import PartitionState
from kafkacompat.log import LogConfig, LogManager, PartitionLog
from kafkacompat.replication.partition import Partition
from kafkacompat.wire.errors import ErrorCode, KafkaError

try:
    from test_log_support import batch_offsets, make_batch, read_bytes, records_of
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import batch_offsets, make_batch, read_bytes, records_of

BATCH_SIZE = len(make_batch(3))
SMALL_SEGMENTS = LogConfig(segment_bytes=2 * BATCH_SIZE)  # two 3-record batches per segment


def fill(log: PartitionLog, batches: int) -> None:
    for i in range(batches):
        log.append(*records_of(make_batch(3, base_timestamp=1_000 + 10 * i)))


def log_files(log: PartitionLog) -> list[str]:
    return sorted(name for name in os.listdir(log.dir) if name.endswith(".log"))


def out_of_range(call) -> bool:
    with pytest.raises(KafkaError) as raised:
        call()
    return raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# ---- PartitionLog -------------------------------------------------------------------------------


def test_advancing_the_log_start_hides_earlier_offsets_and_deletes_whole_segments(tmp_path):
    log = PartitionLog.open(tmp_path / "orders-0", "orders", 0, SMALL_SEGMENTS)
    fill(log, 6)  # offsets 0-17 in segments at 0, 6, 12
    assert log.advance_log_start_offset(8) is True
    assert log.log_start_offset == 8
    assert log_files(log) == [f"{6:020d}.log", f"{12:020d}.log"]
    assert out_of_range(lambda: log.read(7, 1 << 20))
    # Reading at the new start returns its whole batch (6-8), as Kafka does; clients skip 6 and 7.
    assert batch_offsets(read_bytes(log, 8, 1 << 20)) == [(6, 8), (9, 11), (12, 14), (15, 17)]
    assert log.offset_for_timestamp(0) == (8, 1_022)  # by-timestamp lookups start there too


def test_the_log_start_never_goes_back_and_stops_at_the_log_end(tmp_path):
    log = PartitionLog.open(tmp_path / "orders-0", "orders", 0, SMALL_SEGMENTS)
    fill(log, 3)
    assert log.advance_log_start_offset(4) is True
    assert log.advance_log_start_offset(4) is False
    assert log.advance_log_start_offset(1) is False
    assert log.log_start_offset == 4
    assert out_of_range(lambda: log.advance_log_start_offset(10))
    assert log.advance_log_start_offset(9) is True  # everything: only the active segment stays
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (9, 9, 1)
    assert log.read(9, 1 << 20).size == 0
    assert log.append(*records_of(make_batch(2))).first_offset == 9


def test_the_log_start_survives_a_crash_only_through_the_checkpoint_written_at_once(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, SMALL_SEGMENTS)
    fill(log, 4)  # segments at 0, 6
    manager.checkpoint()  # the periodic checkpoint, before the deletion
    log.advance_log_start_offset(10)
    # A crash now (no close, no clean-shutdown marker): the segment base alone says 6.
    crashed = LogManager(tmp_path).load_all(lambda topic: SMALL_SEGMENTS)
    assert crashed[("orders", 0)].log_start_offset == 6
    crashed[("orders", 0)].close(snapshot=False)

    manager.checkpoint_log_start_offsets()  # what DeleteRecords does before answering
    after_crash = LogManager(tmp_path)
    reloaded = after_crash.load_all(lambda topic: SMALL_SEGMENTS)[("orders", 0)]
    assert after_crash.had_clean_shutdown is False
    assert reloaded.log_start_offset == 10
    assert out_of_range(lambda: reloaded.read(9, 1 << 20))
    after_crash.close()  # a clean shutdown keeps it as well
    assert LogManager(tmp_path).load_all(lambda topic: SMALL_SEGMENTS)[("orders", 0)].log_start_offset == 10


# ---- Partition as leader ------------------------------------------------------------------------

REPLICAS = (0, 1, 2)


def make_partition(tmp_path: Path, config: LogConfig = SMALL_SEGMENTS, *, replicas=REPLICAS) -> Partition:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config)
    partition = Partition("t", 0, log, leader_id=-1, local_id=0, clock_ms=lambda: 1_000_000)
    assert partition.become_leader(PartitionState("t", 0, replicas, replicas, 0, 1, 0))
    return partition


def append(partition: Partition, records: int = 3) -> None:
    partition.append(*records_of(make_batch(records)))


def replicate(partition: Partition, *, log_starts: dict[int, int] | None = None) -> None:
    """Every follower fetches at the leader's log end, reporting its log start."""
    for replica_id in partition.followers:
        start = (log_starts or {}).get(replica_id, partition.log_start_offset)
        partition.update_follower_fetch(replica_id, partition.log_end_offset, start)


def error_of(call) -> int:
    with pytest.raises(KafkaError) as raised:
        call()
    return raised.value.code


def test_delete_records_is_bounded_by_the_high_watermark(tmp_path):
    partition = make_partition(tmp_path)
    for _ in range(4):
        append(partition)
    replicate(partition)
    append(partition)  # offsets 12-14, not replicated: the high watermark stays 12
    assert (partition.high_watermark, partition.log_end_offset) == (12, 15)
    assert error_of(lambda: partition.delete_records(13)) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert error_of(lambda: partition.delete_records(-2)) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert partition.log_start_offset == 0
    assert partition.delete_records(-1) == 12  # -1: the high watermark
    assert partition.log_start_offset == 12
    assert partition.delete_records(5) == 5  # below the log start: nothing moves
    assert partition.log_start_offset == 12


def test_delete_records_needs_the_delete_policy_and_the_leadership(tmp_path):
    compacted = make_partition(tmp_path / "a", LogConfig(cleanup_policy="compact"), replicas=(0,))
    append(compacted)
    assert error_of(lambda: compacted.delete_records(1)) == ErrorCode.POLICY_VIOLATION
    both = make_partition(tmp_path / "b", LogConfig(cleanup_policy="compact,delete"), replicas=(0,))
    append(both)
    assert both.delete_records(1) == 1 and both.log_start_offset == 1
    assert both.become_follower(PartitionState("t", 0, (0, 1), (0, 1), 1, 2, 1))
    assert error_of(lambda: both.delete_records(2)) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert both.low_watermark_status(1, {0, 1}) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)


def test_the_epoch_cache_starts_at_the_new_log_start(tmp_path):
    partition = make_partition(tmp_path, replicas=(0,))
    append(partition)
    partition.become_leader(PartitionState("t", 0, (0,), (0,), 0, 2, 1))
    append(partition)
    assert partition.epochs.entries() == [(1, 0), (2, 3)]
    partition.delete_records(4)
    assert partition.epochs.entries() == [(2, 4)]


def test_the_low_watermark_is_the_smallest_log_start_of_the_live_replicas(tmp_path):
    partition = make_partition(tmp_path)
    for _ in range(4):
        append(partition)
    replicate(partition)
    live = {0, 1, 2}
    assert partition.delete_records(9) == 9
    assert partition.low_watermark(live) == 0  # the followers still report 0
    assert partition.low_watermark_status(9, live) is None
    replicate(partition, log_starts={1: 9, 2: 6})
    assert partition.low_watermark(live) == 6
    assert partition.low_watermark({0, 1}) == 9  # broker 2 is not alive: it does not count
    replicate(partition, log_starts={1: 9, 2: 9})
    assert partition.low_watermark_status(9, live) == (ErrorCode.NONE, 9)
    # A new leadership forgets the followers: unknown (-1) until they fetch again.
    partition.become_leader(PartitionState("t", 0, REPLICAS, REPLICAS, 0, 2, 1))
    assert partition.low_watermark(live) == -1


def test_a_follower_reporting_a_higher_log_start_wakes_the_waiters(tmp_path):
    partition = make_partition(tmp_path)
    for _ in range(2):
        append(partition)
    replicate(partition)
    partition.delete_records(3)

    async def main() -> None:
        woken = trio.Event()
        partition.add_waiter(woken)
        partition.update_follower_fetch(1, partition.log_end_offset, 0)  # same log start: nothing new
        assert not woken.is_set()
        partition.update_follower_fetch(1, partition.log_end_offset, 3)
        assert woken.is_set()

    trio.run(main)
