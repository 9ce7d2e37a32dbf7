"""Leader epoch cache (Kafka's LeaderEpochFileCache and leader-epoch-checkpoint format) and the
leader's bookkeeping in Partition: follower log end offsets, high watermark, ISR shrink after
replica.lag.time.max.ms (controllable clock), ISR expansion, acks=all status."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkacompat.controller.state import PartitionState
from kafkacompat.log import LogConfig, PartitionLog
from kafkacompat.replication.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache, read_checkpoint
from kafkacompat.replication.partition import Partition
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import validate_batches
from tests.support import make_batch


def test_checkpoint_file_is_kafkas_format(tmp_path: Path):
    cache = LeaderEpochCache.load(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 1200)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n3 1200\n"
    again = LeaderEpochCache.load(tmp_path)
    assert again.entries() == [(0, 0), (3, 1200)]
    assert not list(tmp_path.glob("*.tmp"))


def test_end_offset_for_follows_kafka():
    cache = LeaderEpochCache(None)
    for epoch, offset in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, offset)
    leo = 30
    assert cache.end_offset_for(5, leo) == (5, 30)  # latest epoch: the log end
    assert cache.end_offset_for(3, leo) == (3, 20)
    assert cache.end_offset_for(4, leo) == (3, 20)  # unknown epoch: the largest below it
    assert cache.end_offset_for(0, leo) == (0, 0)  # before every epoch: where the first starts
    assert cache.end_offset_for(6, leo) == (-1, -1)
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert LeaderEpochCache(None).end_offset_for(1, 5) == (-1, -1)


def test_assign_drops_non_monotonic_entries_and_truncation():
    cache = LeaderEpochCache(None)
    cache.assign(1, 0)
    cache.assign(2, 10)
    assert not cache.assign(2, 15)  # same epoch later: nothing new
    cache.assign(3, 10)  # epoch 2 never wrote anything: replaced
    assert cache.entries() == [(1, 0), (3, 10)]
    cache.assign(4, 20)
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (3, 10)]
    cache.truncate_from_end(5)
    assert cache.entries() == [(1, 0)]
    cache.assign(2, 8)
    cache.assign(6, 12)
    cache.truncate_from_start(9)
    assert cache.entries() == [(2, 9), (6, 12)]
    cache.clear()
    assert cache.latest_epoch == -1


def test_corrupt_checkpoint_is_ignored(tmp_path: Path):
    (tmp_path / CHECKPOINT_FILE).write_text("0\n3\n0 0\n")
    assert LeaderEpochCache.load(tmp_path).entries() == []
    with pytest.raises(ValueError):
        read_checkpoint(tmp_path / CHECKPOINT_FILE)


# ---- Partition as leader -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make_partition(tmp_path: Path, clock: Clock, *, local_id: int = 0, min_isr: int = 1) -> Partition:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
    return Partition("t", 0, log, leader_id=-1, local_id=local_id, clock_ms=clock, lag_time_max_ms=10_000,
                     min_insync_replicas=min_isr)


def append(partition: Partition, count: int = 1) -> int:
    blob = memoryview(bytearray(make_batch([(b"k", b"v%d" % i) for i in range(count)])))
    return partition.append(blob, validate_batches(blob, 1 << 20)).last_offset + 1


def state(leader: int, epoch: int, isr=(0, 1, 2), partition_epoch: int = 0) -> PartitionState:
    return PartitionState("t", 0, (0, 1, 2), tuple(isr), leader, epoch, partition_epoch)


def test_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path):
    clock = Clock()
    p = make_partition(tmp_path, clock)
    assert p.become_leader(state(0, 1))
    assert p.epochs.entries() == [(1, 0)]
    end = append(p, 3)
    assert end == 3 and p.high_watermark == 0  # followers unknown yet
    assert p.replication_status(3, 1) is None
    p.update_follower_fetch(1, 3)
    assert p.high_watermark == 0
    p.update_follower_fetch(2, 2)
    assert p.high_watermark == 2
    p.update_follower_fetch(2, 3)
    assert p.high_watermark == 3
    assert p.replication_status(3, 1) == 0
    assert p.read(0, 1 << 20, min_one_batch=True).size > 0
    # An older state is ignored; a follower state ends the leadership.
    assert not p.become_follower(state(1, 0))
    assert p.become_follower(state(1, 2, isr=(1, 2)))
    assert p.replication_status(3, 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError) as error:
        p.check_leader()
    assert error.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_isr_shrinks_after_the_lag_time_and_expands_on_catch_up(tmp_path):
    clock = Clock()
    p = make_partition(tmp_path, clock, min_isr=2)
    p.become_leader(state(0, 1))
    append(p, 2)
    p.update_follower_fetch(1, 2)
    p.update_follower_fetch(2, 2)
    assert p.high_watermark == 2
    clock.now += 5_000
    append(p, 1)
    p.update_follower_fetch(1, 3)  # follower 1 keeps up, follower 2 has stopped
    assert p.isr_shrink_candidate() is None
    clock.now += 6_000
    p.update_follower_fetch(1, 3)
    assert p.out_of_sync_replicas() == [2]
    assert p.isr_shrink_candidate() == [0, 1]
    p.become_leader(state(0, 1, isr=(0, 1), partition_epoch=1))
    assert p.high_watermark == 3  # the ISR is now 0 and 1
    p.check_enough_replicas()
    # Follower 2 comes back, fetches from behind: not in sync until it reaches the HW.
    assert p.update_follower_fetch(2, 1) is None
    assert p.update_follower_fetch(2, 3) == [0, 1, 2]
    # ISR below min.insync.replicas.
    p.become_leader(state(0, 1, isr=(0,), partition_epoch=2))
    with pytest.raises(KafkaError) as error:
        p.check_enough_replicas()
    assert error.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    end = append(p)
    assert p.replication_status(end, 1) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_slow_follower_that_reaches_the_previous_log_end_stays_caught_up(tmp_path):
    clock = Clock()
    p = make_partition(tmp_path, clock)
    p.become_leader(state(0, 1, isr=(0, 1)))
    append(p, 1)
    p.update_follower_fetch(1, 0)  # leader's end is 1 at this fetch
    clock.now += 8_000
    append(p, 1)
    p.update_follower_fetch(1, 1)  # reached the end as of its previous fetch: caught up then
    clock.now += 1_000
    assert p.out_of_sync_replicas() == []
    clock.now += 2_000  # 11 s after the previous fetch
    assert p.out_of_sync_replicas() == [1]


def test_epoch_cache_survives_restart_and_follows_truncation(tmp_path):
    clock = Clock()
    p = make_partition(tmp_path, clock)
    p.become_leader(state(0, 1))
    append(p, 2)
    p.become_leader(state(0, 4))
    append(p, 2)
    assert p.epochs.entries() == [(1, 0), (4, 2)]
    assert p.end_offset_for_epoch(1) == (1, 2)
    assert p.end_offset_for_epoch(3) == (1, 2)
    assert p.end_offset_for_epoch(4) == (4, 4)
    p.truncate_to(2)
    assert p.epochs.entries() == [(1, 0)]
    p.log.close()
    reopened = make_partition(tmp_path, clock)
    assert reopened.epochs.entries() == [(1, 0)]


def test_epoch_cache_is_rebuilt_from_batches_when_the_file_is_missing(tmp_path):
    clock = Clock()
    p = make_partition(tmp_path, clock)
    p.become_leader(state(0, 2))
    append(p, 1)
    p.become_leader(state(0, 5))
    append(p, 1)
    p.log.close()
    (tmp_path / "t-0" / CHECKPOINT_FILE).unlink()
    assert make_partition(tmp_path, clock).epochs.entries() == [(2, 0), (5, 1)]
