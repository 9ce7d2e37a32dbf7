"""Reopening logs: clean and unclean shutdowns, torn and corrupt tails, lost or damaged indexes,
the LogManager's checkpoints and markers, and the shared FileCache."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from kafkacompat.log import FileCache, LogConfig, LogManager, PartitionLog, read_checkpoint
from kafkacompat.log.manager import CLEAN_SHUTDOWN_FILE, parse_partition_dir_name

try:
    from test_log_support import batch_offsets, make_batch, read_bytes, records_of
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import batch_offsets, make_batch, read_bytes, records_of

BATCH_SIZE = len(make_batch(3))
CONFIG = LogConfig(segment_bytes=10 * BATCH_SIZE, index_interval_bytes=2 * BATCH_SIZE)


def fill(log: PartitionLog, count: int, *, first_timestamp: int = 1_000) -> None:
    for i in range(count):
        log.append(*records_of(make_batch(3, base_timestamp=first_timestamp + 10 * i)))


def reopen(directory: Path, *, recovery_point: int = 0, config: LogConfig = CONFIG) -> PartitionLog:
    return PartitionLog.open(directory, "orders", 0, config, recovery_point=recovery_point)


def all_batches(log: PartitionLog) -> list[tuple[int, int]]:
    return batch_offsets(read_bytes(log, log.log_start_offset, 1 << 30))


def assert_every_offset_reads_its_batch(log: PartitionLog) -> None:
    for offset in range(log.log_start_offset, log.log_end_offset):
        [(base, last)] = batch_offsets(read_bytes(log, offset, 1))
        assert base <= offset <= last


@pytest.fixture
def closed_log(tmp_path) -> Path:
    """25 batches of 3 records (offsets 0-74) in segments at 0, 30 and 60, closed cleanly."""
    log = PartitionLog.open(tmp_path / "orders-0", "orders", 0, CONFIG)
    fill(log, 25)
    assert [info["base_offset"] for info in log.segments_info()] == [0, 30, 60]
    log.close()
    return tmp_path / "orders-0"


def raw(directory: Path, base: int, suffix: str) -> bytes:
    return (directory / f"{base:020d}{suffix}").read_bytes()


# -- PartitionLog.open ------------------------------------------------------------------------


def test_clean_reopen_rescans_nothing(closed_log):
    # A corrupt byte inside an old batch stays unnoticed: proof that nothing was rescanned.
    with open(closed_log / "00000000000000000000.log", "r+b") as file:
        file.seek(BATCH_SIZE + 70)
        file.write(b"\xff")
    log = reopen(closed_log, recovery_point=75)
    assert log.recovered_segments == 0
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 75, 75)
    assert all_batches(log) == [(3 * i, 3 * i + 2) for i in range(25)]
    assert log.append(*records_of(make_batch(1))).first_offset == 75


def test_unclean_reopen_rescans_from_the_recovery_point(closed_log):
    log = reopen(closed_log, recovery_point=40)
    assert log.recovered_segments == 2  # the segment holding offset 40, and the next
    assert log.log_end_offset == 75
    assert all_batches(log) == [(3 * i, 3 * i + 2) for i in range(25)]


def test_recovery_rebuilds_identical_indexes(closed_log):
    before = {(base, suffix): raw(closed_log, base, suffix) for base in (0, 30, 60) for suffix in (".index", ".timeindex")}
    log = reopen(closed_log, recovery_point=0)
    assert log.recovered_segments == 3
    log.close()
    assert {key: raw(closed_log, *key) for key in before} == before


def test_torn_tail_is_truncated_and_logged(closed_log, caplog):
    last = closed_log / "00000000000000000060.log"
    os.truncate(last, os.path.getsize(last) - 5)  # the crash cut the last batch short
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        log = reopen(closed_log, recovery_point=60)
    assert log.log_end_offset == 72
    assert os.path.getsize(last) == 4 * BATCH_SIZE
    assert f"Recovered orders-0: truncated {BATCH_SIZE - 5} bytes of a torn batch at offset 72 in " \
           "00000000000000000060.log" in caplog.text
    assert all_batches(log)[-1] == (69, 71)
    assert log.append(*records_of(make_batch(2))).first_offset == 72
    assert_every_offset_reads_its_batch(log)


def test_corrupt_byte_in_the_last_batch_fails_its_crc(closed_log, caplog):
    last = closed_log / "00000000000000000060.log"
    with open(last, "r+b") as file:
        file.seek(4 * BATCH_SIZE + 80)  # inside the records of the last batch
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x01]))
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        log = reopen(closed_log, recovery_point=60)
    assert "a corrupt batch (CRC mismatch) at offset 72" in caplog.text
    assert log.log_end_offset == 72


def test_corruption_in_an_older_segment_drops_the_segments_after_it(closed_log, caplog):
    with open(closed_log / "00000000000000000030.log", "r+b") as file:
        file.seek(5 * BATCH_SIZE + 80)
        file.write(b"\x00\x00")
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        log = reopen(closed_log, recovery_point=0)
    assert log.log_end_offset == 45
    assert [info["base_offset"] for info in log.segments_info()] == [0, 30]
    assert not (closed_log / "00000000000000000060.log").exists()
    assert "Deleting orders-0 00000000000000000060.log" in caplog.text


def test_zero_filled_tail_of_a_preallocated_log_is_dropped(closed_log, caplog):
    with open(closed_log / "00000000000000000060.log", "ab") as file:
        file.write(bytes(4096))
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        log = reopen(closed_log, recovery_point=75)  # even a "clean" recovery point: the tail does not frame
    assert "truncated 4096 bytes of a zero-filled tail" in caplog.text
    assert log.log_end_offset == 75


def test_deleted_index_files_are_rebuilt(closed_log):
    original = {suffix: raw(closed_log, 30, suffix) for suffix in (".index", ".timeindex")}
    for suffix in original:
        os.unlink(closed_log / f"00000000000000000030{suffix}")
    log = reopen(closed_log, recovery_point=75)
    assert {suffix: raw(closed_log, 30, suffix) for suffix in original} == original
    assert_every_offset_reads_its_batch(log)
    assert log.offset_for_timestamp(1_101) == (31, 1_101)


@pytest.mark.parametrize("damage", ["garbage", "partial entry", "shifted positions", "empty"])
def test_damaged_offset_index_is_detected_and_rebuilt(closed_log, damage, caplog):
    index = closed_log / "00000000000000000030.index"
    original = index.read_bytes()
    entries = list(struct.iter_unpack(">ii", original))
    assert len(entries) >= 2
    if damage == "garbage":
        index.write_bytes(os.urandom(len(original)))
    elif damage == "partial entry":
        index.write_bytes(original + b"\x01\x02\x03")
    elif damage == "shifted positions":  # still ordered and in range, but not batch boundaries
        index.write_bytes(b"".join(struct.pack(">ii", r, p + 7) for r, p in entries))
    else:
        index.write_bytes(b"")
    log = reopen(closed_log, recovery_point=75)
    with caplog.at_level(logging.WARNING, logger="kafkacompat.log"):
        assert_every_offset_reads_its_batch(log)
    if damage != "empty":  # an empty index is merely slower
        assert "Rebuilding the indexes of orders-0 00000000000000000030.log" in caplog.text
        assert index.read_bytes() == original


def test_damaged_time_index_is_rebuilt(closed_log):
    time_index = closed_log / "00000000000000000030.timeindex"
    original = time_index.read_bytes()
    time_index.write_bytes(struct.pack(">qi", 5_000, 3) + struct.pack(">qi", 10, 1))  # out of order
    log = reopen(closed_log, recovery_point=75)
    assert log.offset_for_timestamp(1_101) == (31, 1_101)
    assert time_index.read_bytes() == original


def test_zero_filled_preallocated_index_tails_are_ignored_and_trimmed(closed_log):
    originals = {}
    for suffix in (".index", ".timeindex"):
        path = closed_log / f"00000000000000000060{suffix}"
        originals[suffix] = path.read_bytes()
        path.write_bytes(originals[suffix] + bytes(1024))  # as Kafka preallocates index files
    log = reopen(closed_log, recovery_point=75)
    assert log.recovered_segments == 0
    assert_every_offset_reads_its_batch(log)
    log.append(*records_of(make_batch(3)))
    log.close()
    index_entries = list(struct.iter_unpack(">ii", raw(closed_log, 60, ".index")))
    assert index_entries[: len(originals[".index"]) // 8] == list(struct.iter_unpack(">ii", originals[".index"]))
    assert all(position > 0 for _, position in index_entries)


def test_leftover_files_are_removed(closed_log):
    (closed_log / "00000000000000000099.index").write_bytes(b"")  # no .log for it
    (closed_log / "00000000000000000000.log.deleted").write_bytes(b"x")
    (closed_log / "partition.metadata").write_text("version: 0\n")
    reopen(closed_log, recovery_point=75)
    assert not (closed_log / "00000000000000000099.index").exists()
    assert not (closed_log / "00000000000000000000.log.deleted").exists()
    assert (closed_log / "partition.metadata").exists()


def test_log_start_offset_is_restored_and_bounded(closed_log):
    log = PartitionLog.open(closed_log, "orders", 0, CONFIG, recovery_point=75, log_start_offset=40)
    assert log.log_start_offset == 40
    log.close()
    log = PartitionLog.open(closed_log, "orders", 0, CONFIG, recovery_point=75, log_start_offset=500)
    assert log.log_start_offset == 75


# -- LogManager -------------------------------------------------------------------------------


def test_partition_dir_names_split_on_the_last_dash():
    assert parse_partition_dir_name("my.topic-with_dashes-12") == ("my.topic-with_dashes", 12)
    assert parse_partition_dir_name("orders-0") == ("orders", 0)
    for name in ("orders", "orders-", "-3", "orders-x", "orders-0.abc-delete", "orders-0.abc-future"):
        assert parse_partition_dir_name(name) is None


def test_manager_clean_shutdown_and_reload(tmp_path):
    manager = LogManager(tmp_path)
    orders = manager.create("orders", 0, CONFIG)
    dotted = manager.create("my.topic-name_x", 3, CONFIG)
    fill(orders, 12)
    fill(dotted, 2)
    orders.advance_log_start_offset(31)
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == (
        "0\n2\nmy.topic-name_x 3 6\norders 0 36\n")
    assert read_checkpoint(tmp_path / "log-start-offset-checkpoint") == {("orders", 0): 31,
                                                                        ("my.topic-name_x", 3): 0}

    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "meta.properties").write_text("version=1\n")
    (tmp_path / "orders-7.0123456789abcdef-delete").mkdir()
    reloaded = LogManager(tmp_path)
    logs = reloaded.load_all(lambda topic: CONFIG)
    assert sorted(logs) == [("my.topic-name_x", 3), ("orders", 0)]
    assert reloaded.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert not (tmp_path / "orders-7.0123456789abcdef-delete").exists()
    orders = reloaded.get("orders", 0)
    assert (orders.log_start_offset, orders.log_end_offset, orders.recovered_segments) == (31, 36, 0)
    assert reloaded.get("my.topic-name_x", 3).log_end_offset == 6
    assert reloaded.get("orders", 1) is None
    reloaded.close()


def test_manager_recovers_after_an_unclean_shutdown(tmp_path):
    manager = LogManager(tmp_path)
    log = manager.create("orders", 0, CONFIG)
    fill(log, 12)  # offsets 0-35 in segments 0 and 30
    log.flush()
    manager.checkpoint()  # recovery point 36
    fill(log, 12, first_timestamp=5_000)  # offsets 36-71: never flushed
    tail = log.dir / "00000000000000000060.log"
    os.truncate(tail, os.path.getsize(tail) - 1)  # and the crash tore the last batch
    # crash: no close(), no clean-shutdown marker
    reloaded = LogManager(tmp_path)
    reloaded.load_all(lambda topic: CONFIG)
    recovered = reloaded.get("orders", 0)
    assert not reloaded.had_clean_shutdown
    assert recovered.recovered_segments == 2  # segments 30 and 60; segment 0 is below the recovery point
    assert recovered.log_end_offset == 69
    assert_every_offset_reads_its_batch(recovered)
    reloaded.close()


def test_manager_delete_partition(tmp_path):
    manager = LogManager(tmp_path)
    fill(manager.create("orders", 0, CONFIG), 3)
    manager.delete_partition("orders", 0)
    assert manager.get("orders", 0) is None
    assert os.listdir(tmp_path) == []
    assert manager.create("orders", 0, CONFIG).log_end_offset == 0


def test_file_cache_with_two_open_files_serves_ten_partitions(tmp_path):
    cache = FileCache(max_open=2)
    manager = LogManager(tmp_path, file_cache=cache)
    config = LogConfig(segment_bytes=3 * BATCH_SIZE, index_interval_bytes=0)
    logs = [manager.create(f"t-{i}", i, config) for i in range(10)]
    for round_number in range(5):
        for i, log in enumerate(logs):
            log.append(*records_of(make_batch(1 + i % 3, base_timestamp=100 * round_number + i)))
            assert cache.open_count <= 2
    pending = [log.read(0, 1 << 20) for log in logs]  # regions held while the cache churns
    for i, log in enumerate(logs):
        count = 1 + i % 3
        expected = [(count * r, count * r + count - 1) for r in range(5)]
        assert all_batches(log) == expected
        assert_every_offset_reads_its_batch(log)
        assert log.offset_for_timestamp(300) == (3 * count, 300 + i)
    for i, result in enumerate(pending):
        count = 1 + i % 3
        assert batch_offsets(result.read_all()) == [(count * r, count * r + count - 1) for r in range(5)]
        result.close()
    assert cache.open_count <= 2
    manager.close()
    reloaded = LogManager(tmp_path, file_cache=FileCache(max_open=2))
    assert len(reloaded.load_all(lambda topic: config)) == 10
    assert all(log.log_end_offset == 5 * (1 + i % 3) for i, log in
               enumerate(sorted(reloaded.all_logs(), key=lambda log: log.partition)))


def test_loading_a_large_data_dir_reports_progress(tmp_path, monkeypatch, caplog):
    from kafkacompat.log import manager

    data_dir = tmp_path / "data"
    logs = LogManager(data_dir)
    for index in range(3):
        fill(logs.create("orders", index, CONFIG), 2)
    logs.close()
    (data_dir / CLEAN_SHUTDOWN_FILE).unlink()  # as after a crash: every log is recovered
    monkeypatch.setattr(manager, "PROGRESS_INTERVAL_S", 0.0)  # a line per partition, not per 2 s
    with caplog.at_level(logging.INFO, logger="kafkacompat.log"):
        LogManager(data_dir).load_all(lambda topic: CONFIG)
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Loading partition logs")]
    assert [line.split(": ", 1)[1].split(" (")[0] for line in progress] == ["0 of 3", "1 of 3", "2 of 3"]
    assert progress[-1].endswith("recovering orders-2")
    assert "Loaded 3 partition logs" in caplog.text and "after an unclean shutdown in" in caplog.text
