"""A start after a clean shutdown trusts the clean-shutdown marker: no tail recovery and no
producer-state replay for a log without a snapshot (Kafka's LogLoader and rebuildProducerState).
These prove that idempotent and transactional state survives that path exactly, that a close
which could not write a producer snapshot leaves no marker, and that a crash after a clean start
(the marker removed at load) is recovered."""

from __future__ import annotations

import os
from pathlib import Path

from kafkacompat.log import LogConfig, LogManager
from kafkacompat.log.manager import CLEAN_SHUTDOWN_FILE
from kafkacompat.log.producer_state import snapshot_file_name

try:
    from test_log_support import make_batch
    from test_producer_state import OTHER, PID, idem_batch, produce
    from test_txn_log import marker, txn_batch
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import make_batch
    from tests.test_producer_state import OTHER, PID, idem_batch, produce
    from tests.test_txn_log import marker, txn_batch

CONFIG = LogConfig()


def load(data_dir: Path) -> LogManager:
    manager = LogManager(data_dir)
    manager.load_all(lambda topic: CONFIG)
    return manager


def plain(log, count: int = 3) -> int:
    return produce(log, make_batch(count))


def snapshot_names(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".snapshot"))


def test_an_idempotent_producer_is_deduplicated_after_a_clean_restart(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    plain(log)  # offsets 0-2 from a plain producer
    assert produce(log, idem_batch(PID, 0, 0)) == 3
    assert produce(log, idem_batch(PID, 0, 3)) == 6
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert snapshot_names(tmp_path / "orders-0") == [snapshot_file_name(9)]

    restarted = load(tmp_path)
    assert restarted.had_clean_shutdown
    log = restarted.get("orders", 0)
    assert log.log_end_offset == 9 and log.recovered_segments == 0
    assert log.producer_state.producers[PID].last_seq == 5
    assert produce(log, idem_batch(PID, 0, 3)) == 6  # the retry of the last batch: a duplicate
    assert produce(log, idem_batch(PID, 0, 6)) == 9  # and the producer goes on in sequence
    restarted.close()


def test_an_open_transaction_keeps_the_lso_after_a_clean_restart(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    plain(log)  # 0-2
    assert produce(log, txn_batch(PID, 0)) == 3  # PID's transaction opens at 3
    assert produce(log, txn_batch(OTHER, 0)) == 6
    marker(log, OTHER, committed=True)  # OTHER's ends at 9; PID's stays open
    plain(log)  # 10-12
    manager.close()

    restarted = load(tmp_path)
    assert restarted.had_clean_shutdown
    log = restarted.get("orders", 0)
    assert log.log_end_offset == 13
    assert log.producer_state.ongoing == {PID: 3}
    assert log.last_stable_offset(13) == 3
    marker(log, PID, committed=False)
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset
    restarted.close()


def test_a_log_without_producers_starts_with_none_and_still_gets_no_snapshot(tmp_path):
    manager = LogManager(tmp_path)
    plain(manager.create("orders", 0, CONFIG))
    manager.close()
    restarted = load(tmp_path)
    log = restarted.get("orders", 0)
    assert log.producer_state.producers == {} and log.log_end_offset == 3
    assert produce(log, idem_batch(PID, 0, 0)) == 3  # a new producer after the restart
    restarted.close()
    assert snapshot_names(tmp_path / "orders-0") == [snapshot_file_name(6)]
    assert load(tmp_path).get("orders", 0).producer_state.producers[PID].last_seq == 2


def test_no_marker_where_a_producer_snapshot_could_not_be_written(tmp_path, caplog):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    assert produce(log, idem_batch(PID, 0, 0)) == 0
    # the snapshot's temporary file cannot be created: a directory has its name
    (tmp_path / "orders-0" / (snapshot_file_name(3) + ".tmp")).mkdir()
    manager.close()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert "No clean-shutdown marker" in caplog.text
    os.rmdir(tmp_path / "orders-0" / (snapshot_file_name(3) + ".tmp"))

    restarted = load(tmp_path)
    assert not restarted.had_clean_shutdown
    log = restarted.get("orders", 0)
    assert log.producer_state.producers[PID].last_seq == 2  # replayed from the log
    assert produce(log, idem_batch(PID, 0, 0)) == 0
    restarted.close()


def test_a_crash_after_a_clean_start_recovers_the_torn_tail(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    assert produce(log, idem_batch(PID, 0, 0)) == 0
    manager.close()

    started = load(tmp_path)  # a clean start: the marker goes, durably, before any append
    assert started.had_clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    log = started.get("orders", 0)
    assert produce(log, idem_batch(PID, 0, 3)) == 3
    assert produce(log, idem_batch(PID, 0, 6)) == 6
    segment = log.dir / "00000000000000000000.log"
    # SIGKILL: no close, and the last batch (offsets 6-8) was torn
    os.truncate(segment, os.path.getsize(segment) - 5)

    recovered = load(tmp_path)
    assert not recovered.had_clean_shutdown
    log = recovered.get("orders", 0)
    assert log.recovered_segments == 1 and log.log_end_offset == 6
    assert log.producer_state.producers[PID].last_seq == 5  # the snapshot at 3, then the batch at 3
    assert produce(log, idem_batch(PID, 0, 6)) == 6  # the lost batch's retry is new data
    recovered.close()


def test_a_tail_that_does_not_frame_despite_the_marker_is_recovered_and_replayed(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    assert produce(log, idem_batch(PID, 0, 0)) == 0
    assert produce(log, idem_batch(PID, 0, 3)) == 3
    manager.close()
    directory = tmp_path / "orders-0"
    os.unlink(directory / snapshot_file_name(6))  # the state must come from the log itself
    segment = directory / "00000000000000000000.log"
    os.truncate(segment, os.path.getsize(segment) - 5)  # the marker is there, the tail is torn

    restarted = load(tmp_path)
    assert restarted.had_clean_shutdown
    log = restarted.get("orders", 0)
    assert log.recovered_segments == 1 and log.log_end_offset == 3
    assert log.producer_state.producers[PID].last_seq == 2
    assert produce(log, idem_batch(PID, 0, 3)) == 3
    restarted.close()


def test_a_clean_start_reads_a_large_tail_from_its_last_index_entry(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    for _ in range(200):  # well past index.interval.bytes: the offset index has entries
        plain(log, 10)
    manager.close()
    restarted = load(tmp_path)
    log = restarted.get("orders", 0)
    assert log.log_end_offset == 2000 and log.recovered_segments == 0
    assert log.segments()[0].offset_index_entries()  # loaded on demand, and it has entries
    assert plain(log) == 2000
    restarted.close()


def test_after_a_clean_shutdown_a_log_without_a_snapshot_is_not_replayed(tmp_path):
    """The marker is trusted as Kafka trusts it: a clean close writes a snapshot for every log
    with producers, so one without a snapshot is taken to have none and its batches are not read."""
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    assert produce(log, idem_batch(PID, 0, 0)) == 0
    manager.close()
    os.unlink(tmp_path / "orders-0" / snapshot_file_name(3))  # by hand: the only way to lose it
    restarted = load(tmp_path)
    assert restarted.get("orders", 0).producer_state.producers == {}
    restarted.close()
    os.unlink(tmp_path / CLEAN_SHUTDOWN_FILE)
    crashed = load(tmp_path)  # without the marker the same log is replayed from its start
    assert crashed.get("orders", 0).producer_state.producers[PID].last_seq == 2
    crashed.close()
