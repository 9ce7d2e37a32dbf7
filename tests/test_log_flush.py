"""flush.messages, flush.ms and log.flush.scheduler.interval.ms on real files: a flush fsyncs in a
worker thread and moves the recovery point, which the checkpoint records and a restart trusts."""

from __future__ import annotations

from pathlib import Path

import trio

from kafkacompat.config import BrokerConfig
from kafkacompat.log import LogConfig, LogManager, PartitionLog, read_checkpoint
from kafkacompat.log.manager import RECOVERY_POINT_CHECKPOINT
from kafkacompat.log.segment import now_ms

try:
    from test_log_support import make_batch, records_of
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import make_batch, records_of

NEVER = 2**63 - 1


def append_batches(log: PartitionLog, count: int, *, records: int = 1) -> None:
    for _ in range(count):
        log.append(*records_of(make_batch(records)))


def test_by_default_appends_never_flush(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
    append_batches(log, 50)
    assert (log.flushes, log.recovery_point, log.unflushed_messages) == (0, 0, 50)
    assert not log.flush_due_by_time(now_ms() + 10**9)


def test_an_append_reaching_flush_messages_flushes_a_standalone_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(flush_messages=5))
    append_batches(log, 2, records=2)
    assert (log.flushes, log.recovery_point) == (0, 0)
    append_batches(log, 1, records=2)  # 6 unflushed messages >= 5
    assert (log.flushes, log.recovery_point, log.unflushed_messages) == (1, 6, 0)
    append_batches(log, 4)
    assert (log.flushes, log.recovery_point) == (1, 6)
    append_batches(log, 1)
    assert (log.flushes, log.recovery_point) == (2, 11)


def test_a_new_config_moves_the_flush_threshold(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
    append_batches(log, 3)
    log.config = LogConfig(flush_messages=4)  # AlterConfigs replaces the config whole
    append_batches(log, 1)
    assert (log.flushes, log.recovery_point) == (1, 4)


def test_the_broker_keys_reach_the_topic_configs() -> None:
    broker = BrokerConfig.load(None, {"log.flush.interval.messages": "7", "log.flush.scheduler.interval.ms": "250"})
    config = LogConfig.from_properties(broker.effective_topic_config({}))
    assert (config.flush_messages, config.flush_ms) == (7, 250)  # flush.ms falls back to the scheduler's
    assert LogConfig.from_properties(broker.effective_topic_config({"flush.ms": "9"})).flush_ms == 9


async def wait_for(condition) -> None:
    with trio.fail_after(30):
        while not condition():
            await trio.sleep(0.01)


def test_the_manager_flushes_in_a_worker_thread_and_the_checkpoint_records_it(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create("t", 0, LogConfig(flush_messages=3))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run_flusher, NEVER)
            append_batches(log, 2)
            append_batches(log, 1)  # queued: the append itself does not fsync on the event loop
            assert (log.flushes, log.recovery_point) == (0, 0)
            await wait_for(lambda: log.flushes == 1)
            assert log.recovery_point == 3
            nursery.cancel_scope.cancel()

    trio.run(main)
    manager.checkpoint()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 3}
    # Restarted after a crash (no clean-shutdown marker): the flushed batches are not rescanned.
    log.close()
    reopened = LogManager(tmp_path).load_all(lambda topic: LogConfig())[("t", 0)]
    assert (reopened.recovered_segments, reopened.log_end_offset) == (0, 3)


def test_without_a_flush_a_crash_rescans_the_log(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create("t", 0, LogConfig())
    append_batches(log, 3)
    manager.checkpoint()
    log.close()
    reopened = LogManager(tmp_path).load_all(lambda topic: LogConfig())[("t", 0)]
    assert (reopened.recovered_segments, reopened.log_end_offset) == (1, 3)


def test_flush_due_picks_the_logs_whose_flush_ms_has_passed(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    hourly = manager.create("hourly", 0, LogConfig(flush_ms=3_600_000))
    always = manager.create("always", 0, LogConfig(flush_ms=0))
    idle = manager.create("idle", 0, LogConfig(flush_ms=0))
    append_batches(hourly, 1)
    append_batches(always, 1)
    now = now_ms()
    assert manager.flush_due(now) == [always]  # idle has nothing unflushed
    assert manager.flush_due(now + 3_600_000) == [hourly, always]


def test_the_scheduler_flushes_logs_by_flush_ms(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create("t", 0, LogConfig(flush_ms=0))
    untouched = manager.create("u", 0, LogConfig())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run_flusher, 20)
            append_batches(log, 4)
            append_batches(untouched, 4)
            await wait_for(lambda: log.recovery_point == 4)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert (untouched.flushes, untouched.recovery_point) == (0, 0)
