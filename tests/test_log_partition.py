"""PartitionLog on real files: append, read, roll, on-disk formats, timestamps, truncation, retention."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from kafkacompat.log import FileCache, LogConfig, PartitionLog, UnexpectedAppendOffsetError
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import validate_batches

try:
    from test_log_support import batch_offsets, make_batch, make_compressed_batch, read_bytes, records_of
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import batch_offsets, make_batch, make_compressed_batch, read_bytes, records_of

BATCH_SIZE = len(make_batch(3))  # every batch of make_batch(3) has this size


def open_log(tmp_path: Path, name: str = "orders-0", **config) -> PartitionLog:
    topic, _, partition = name.rpartition("-")
    return PartitionLog.open(tmp_path / name, topic, int(partition), LogConfig(**config))


def append_batches(log: PartitionLog, count: int, records: int = 3, *, first_timestamp: int = 1_000,
                   step: int = 10) -> None:
    for i in range(count):
        log.append(*records_of(make_batch(records, base_timestamp=first_timestamp + i * step)))


def segment_files(log: PartitionLog) -> list[str]:
    return sorted(name for name in os.listdir(log.dir))


# -- append and read --------------------------------------------------------------------------


def test_append_assigns_consecutive_offsets_and_patches_leader_epoch(tmp_path):
    log = open_log(tmp_path)
    first = log.append(*records_of(make_batch(3), make_batch(2)), leader_epoch=7)
    second = log.append(*records_of(make_batch(4)), leader_epoch=8)
    assert (first.first_offset, first.last_offset, first.log_append_time, first.log_start_offset) == (0, 4, -1, 0)
    assert (second.first_offset, second.last_offset) == (5, 8)
    assert log.log_end_offset == 9
    data = read_bytes(log, 0, 1 << 20)
    assert batch_offsets(data) == [(0, 2), (3, 4), (5, 8)]
    headers = validate_batches(memoryview(bytearray(data)), 1 << 20)  # CRCs still valid
    assert [h.partition_leader_epoch for h in headers] == [7, 7, 8]


def test_read_round_trips_the_exact_bytes(tmp_path):
    log = open_log(tmp_path)
    appended = bytearray()
    for i in range(10):
        records, headers = records_of(make_batch(i + 1, value_size=5 * i + 1))
        log.append(records, headers)
        appended += records  # as patched in place by the append
    result = log.read(0, 1 << 20)
    data = result.read_all()
    assert result.size == len(data) == len(appended)
    assert data == bytes(appended)
    result.close()


def test_read_whole_batches_within_max_bytes(tmp_path):
    log = open_log(tmp_path)
    append_batches(log, 10)
    assert batch_offsets(read_bytes(log, 0, 3 * BATCH_SIZE)) == [(0, 2), (3, 5), (6, 8)]
    assert batch_offsets(read_bytes(log, 0, 3 * BATCH_SIZE - 1)) == [(0, 2), (3, 5)]
    assert batch_offsets(read_bytes(log, 4, 2 * BATCH_SIZE)) == [(3, 5), (6, 8)]  # offset inside a batch


def test_min_one_batch_returns_an_oversized_first_batch(tmp_path):
    log = open_log(tmp_path)
    append_batches(log, 3)
    assert batch_offsets(read_bytes(log, 3, 10)) == [(3, 5)]
    assert batch_offsets(read_bytes(log, 3, 0)) == [(3, 5)]
    empty = log.read(3, 10, min_one_batch=False)
    assert (empty.size, empty.chunks) == (0, [])


def test_max_offset_stops_before_batches_reaching_the_high_watermark(tmp_path):
    log = open_log(tmp_path)
    append_batches(log, 5)
    assert batch_offsets(read_bytes(log, 0, 1 << 20, max_offset=9)) == [(0, 2), (3, 5), (6, 8)]
    assert batch_offsets(read_bytes(log, 0, 1 << 20, max_offset=8)) == [(0, 2), (3, 5)]
    assert log.read(6, 1 << 20, max_offset=7).size == 0  # batch 6-8 is not all below the watermark
    assert log.read(9, 1 << 20, max_offset=9).size == 0


def test_read_outside_the_log_is_offset_out_of_range_and_the_end_is_empty(tmp_path):
    log = open_log(tmp_path)
    append_batches(log, 2)
    assert log.read(6, 100).size == 0
    with pytest.raises(KafkaError) as raised:
        log.read(7, 100)
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert "orders-0" in raised.value.message
    log.advance_log_start_offset(3)
    with pytest.raises(KafkaError) as raised:
        log.read(2, 100)
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert batch_offsets(read_bytes(log, 3, 1 << 20)) == [(3, 5)]


def test_log_append_time_restamps_batches(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append(*records_of(make_batch(3, base_timestamp=5)), now_ms=1_700_000_000_000)
    assert info.log_append_time == 1_700_000_000_000
    data = bytearray(read_bytes(log, 0, 1 << 20))
    header = validate_batches(memoryview(data), 1 << 20)[0]  # CRC was recomputed
    assert header.is_log_append_time and header.max_timestamp == 1_700_000_000_000
    assert log.offset_for_timestamp(1_600_000_000_000) == (0, 1_700_000_000_000)


def test_replica_append_keeps_offsets_and_rejects_going_backwards(tmp_path):
    log = open_log(tmp_path)
    log.append(*records_of(make_batch(3, base_offset=10), make_batch(2, base_offset=13)), assign_offsets=False)
    assert log.log_end_offset == 15
    log.append(*records_of(make_batch(1, base_offset=20)), assign_offsets=False)  # a gap is allowed
    assert log.log_end_offset == 21
    assert batch_offsets(read_bytes(log, 15, 1 << 20)) == [(20, 20)]
    with pytest.raises(UnexpectedAppendOffsetError, match="orders-0"):
        log.append(*records_of(make_batch(1, base_offset=20)), assign_offsets=False)


def test_append_larger_than_a_segment_is_record_list_too_large(tmp_path):
    log = open_log(tmp_path, segment_bytes=BATCH_SIZE * 2)
    with pytest.raises(KafkaError) as raised:
        log.append(*records_of(make_batch(3), make_batch(3), make_batch(3)))
    assert raised.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


# -- segments and index files -----------------------------------------------------------------


def test_roll_by_segment_bytes_names_files_by_base_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=BATCH_SIZE * 4)
    append_batches(log, 10)
    assert log.segment_count == 3
    assert [info["base_offset"] for info in log.segments_info()] == [0, 12, 24]
    assert segment_files(log) == [
        f"{base:020d}{suffix}" for base in (0, 12, 24) for suffix in (".index", ".log", ".timeindex")
    ]
    assert os.path.getsize(log.dir / "00000000000000000000.log") == 4 * BATCH_SIZE
    assert log.size_bytes == 10 * BATCH_SIZE
    assert batch_offsets(read_bytes(log, 0, 1 << 20)) == [(3 * i, 3 * i + 2) for i in range(10)]


def test_roll_by_segment_ms_uses_the_first_batch_timestamp(tmp_path):
    log = open_log(tmp_path, segment_ms=1_000)
    log.append(*records_of(make_batch(1, base_timestamp=10_000)))
    log.append(*records_of(make_batch(1, base_timestamp=11_000)))  # exactly segment.ms later: no roll
    assert log.segment_count == 1
    log.append(*records_of(make_batch(1, base_timestamp=11_001)))
    assert [info["base_offset"] for info in log.segments_info()] == [0, 2]


def test_roll_when_the_offset_index_is_full(tmp_path):
    # 36 bytes: 4 offset index entries, 3 time index entries (one kept back for the roll)
    log = open_log(tmp_path, segment_index_bytes=36, index_interval_bytes=0)
    append_batches(log, 10, step=0)  # one max timestamp: the time index gets a single entry
    # interval 0 indexes every batch but the first, so 5 batches fill 4 entries
    assert [info["base_offset"] for info in log.segments_info()] == [0, 15]
    assert os.path.getsize(log.dir / "00000000000000000000.index") == 32


def test_roll_when_the_time_index_is_full(tmp_path):
    log = open_log(tmp_path, segment_index_bytes=36, index_interval_bytes=0)
    append_batches(log, 4, step=10)  # every indexed batch raises the max timestamp
    assert [info["base_offset"] for info in log.segments_info()] == [0, 9]


def test_roll_when_relative_offsets_would_overflow(tmp_path):
    log = open_log(tmp_path)
    log.append(*records_of(make_batch(1)), assign_offsets=False)
    far = 2**31 + 5
    log.append(*records_of(make_batch(2, base_offset=far)), assign_offsets=False)
    assert [info["base_offset"] for info in log.segments_info()] == [0, far]
    assert (log.dir / f"{far:020d}.log").exists()
    assert batch_offsets(read_bytes(log, far + 1, 1000)) == [(far, far + 1)]


def expected_index_entries(sizes: list[int], last_offsets: list[int], interval: int) -> list[tuple[int, int]]:
    """Kafka's rule: index a batch when more than index.interval.bytes were written since the last entry."""
    entries, since, position = [], 0, 0
    for size, last_offset in zip(sizes, last_offsets):
        if since > interval:
            entries.append((last_offset, position))
            since = 0
        since += size
        position += size
    return entries


def test_index_and_timeindex_files_hold_kafka_format_entries(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=2 * BATCH_SIZE)
    append_batches(log, 10, first_timestamp=1_000, step=10)
    log.close()
    raw_index = (log.dir / "00000000000000000000.index").read_bytes()
    raw_time_index = (log.dir / "00000000000000000000.timeindex").read_bytes()
    # batches of BATCH_SIZE bytes: entries at batches 3, 6 and 9 (offsets 11, 20, 29)
    assert list(struct.iter_unpack(">ii", raw_index)) == [(11, 3 * BATCH_SIZE), (20, 6 * BATCH_SIZE),
                                                          (29, 9 * BATCH_SIZE)]
    assert list(struct.iter_unpack(">ii", raw_index)) == expected_index_entries(
        [BATCH_SIZE] * 10, [3 * i + 2 for i in range(10)], 2 * BATCH_SIZE)
    # (max timestamp so far, last offset of the batch that reached it); the close adds the final max
    assert list(struct.iter_unpack(">qi", raw_time_index)) == [(1_032, 11), (1_062, 20), (1_092, 29)]


def test_timeindex_follows_the_max_timestamp_and_the_close_adds_the_final_entry(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=0)
    for timestamp in (500, 100, 200, 700, 600):
        log.append(*records_of(make_batch(1, base_timestamp=timestamp)))
    log.close()
    raw = (log.dir / "00000000000000000000.timeindex").read_bytes()
    assert list(struct.iter_unpack(">qi", raw)) == [(500, 0), (700, 3)]
    raw_index = (log.dir / "00000000000000000000.index").read_bytes()
    assert [offset for offset, _ in struct.iter_unpack(">ii", raw_index)] == [1, 2, 3, 4]


def test_roll_finalizes_the_timeindex_of_the_old_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=3 * BATCH_SIZE)
    append_batches(log, 4, first_timestamp=2_000, step=1)
    raw = (log.dir / "00000000000000000000.timeindex").read_bytes()
    assert list(struct.iter_unpack(">qi", raw)) == [(2_004, 8)]


def test_index_lookups_land_on_the_right_batch_for_every_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=40 * BATCH_SIZE, index_interval_bytes=3 * BATCH_SIZE)
    for i in range(120):
        log.append(*records_of(make_batch(1 + i % 4, base_timestamp=1_000 + i)))
    assert log.segment_count >= 3
    spans = batch_offsets(read_bytes(log, 0, 1 << 30))
    containing = {offset: span for span in spans for offset in range(span[0], span[1] + 1)}
    for offset in range(log.log_end_offset):
        first = batch_offsets(read_bytes(log, offset, 1))
        assert first == [containing[offset]], offset


def test_read_spans_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    append_batches(log, 6)
    result = log.read(4, 3 * BATCH_SIZE)
    assert batch_offsets(result.read_all()) == [(3, 5), (6, 8), (9, 11)]
    assert len(result.chunks) == 2
    result.close()
    assert batch_offsets(read_bytes(log, 0, 1 << 20, max_offset=14)) == [(0, 2), (3, 5), (6, 8), (9, 11)]


# -- timestamps -------------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_record_inside_a_batch(tmp_path):
    log = open_log(tmp_path, segment_bytes=3 * 200, index_interval_bytes=0)
    for i in range(10):
        base = 10_000 + 100 * i
        log.append(*records_of(make_batch(4, timestamps=[base, base + 5, base + 10, base + 15])))
    assert log.segment_count > 1
    assert log.offset_for_timestamp(0) == (0, 10_000)
    assert log.offset_for_timestamp(10_007) == (2, 10_010)
    assert log.offset_for_timestamp(10_515) == (23, 10_515)
    assert log.offset_for_timestamp(10_516) == (24, 10_600)
    assert log.offset_for_timestamp(10_915) == (39, 10_915)
    assert log.offset_for_timestamp(10_916) is None


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_offset_for_timestamp_with_unordered_timestamps_and_compression(tmp_path, codec):
    from kafka import codec as codecs

    available = {1: codecs.has_gzip, 2: codecs.has_snappy, 3: codecs.has_lz4, 4: codecs.has_zstd}[codec]
    if not available():
        pytest.fail("compression library not installed: the test extras (pip install -e .[test]) bring it")
    log = open_log(tmp_path)
    log.append(*records_of(make_batch(3, timestamps=[100, 130, 110])))
    compressed = make_compressed_batch([200, 250, 220, 260], codec)
    assert compressed[21 + 1] & 0x07 == codec  # the builder did compress
    log.append(*records_of(compressed))
    assert log.offset_for_timestamp(105) == (1, 130)
    assert log.offset_for_timestamp(131) == (3, 200)
    assert log.offset_for_timestamp(255) == (6, 260)
    assert log.max_timestamp_and_offset() == (260, 6)


def test_offset_for_timestamp_skips_offsets_below_the_log_start(tmp_path):
    log = open_log(tmp_path)
    log.append(*records_of(make_batch(4, timestamps=[100, 110, 120, 130])))
    log.advance_log_start_offset(2)
    assert log.offset_for_timestamp(0) == (2, 120)


def test_max_timestamp_and_offset_names_the_first_record_with_the_max(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * 200)
    assert log.max_timestamp_and_offset() == (-1, -1)
    log.append(*records_of(make_batch(3, timestamps=[100, 500, 200])))
    log.append(*records_of(make_batch(1, timestamps=[300])))
    log.append(*records_of(make_batch(2, timestamps=[400, 500])))
    assert log.max_timestamp_and_offset() == (500, 1)
    log.append(*records_of(make_batch(2, timestamps=[100, 900])))
    assert log.max_timestamp_and_offset() == (900, 7)


# -- truncation, log start, retention ---------------------------------------------------------


def test_truncate_to_drops_batches_and_later_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=3 * BATCH_SIZE, index_interval_bytes=0)
    append_batches(log, 9)
    assert log.segment_count == 3
    log.truncate_to(12)
    assert log.log_end_offset == 12
    assert [info["base_offset"] for info in log.segments_info()] == [0, 9]
    assert not (log.dir / "00000000000000000018.log").exists()
    assert os.path.getsize(log.dir / "00000000000000000009.log") == BATCH_SIZE
    raw_index = (log.dir / "00000000000000000009.index").read_bytes()
    assert all(position < BATCH_SIZE for _, position in struct.iter_unpack(">ii", raw_index))
    assert log.append(*records_of(make_batch(2))).first_offset == 12
    assert batch_offsets(read_bytes(log, 6, 1 << 20)) == [(6, 8), (9, 11), (12, 13)]


def test_truncate_inside_a_batch_drops_the_whole_batch(tmp_path):
    log = open_log(tmp_path)
    append_batches(log, 3)
    log.truncate_to(4)
    assert log.log_end_offset == 3
    assert batch_offsets(read_bytes(log, 0, 1 << 20)) == [(0, 2)]


def test_truncate_to_a_segment_base_and_below_the_first_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    append_batches(log, 4)
    log.truncate_to(6)
    assert (log.log_end_offset, log.segment_count) == (6, 1)
    log.truncate_fully_and_start_at(1_000)
    assert (log.log_start_offset, log.log_end_offset) == (1_000, 1_000)
    assert segment_files(log) == [f"{1000:020d}{suffix}" for suffix in (".index", ".log", ".timeindex")]
    assert log.append(*records_of(make_batch(1))).first_offset == 1_000


def test_advance_log_start_offset_deletes_whole_segments_below_it(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE)
    append_batches(log, 6)
    log.advance_log_start_offset(7)
    assert log.log_start_offset == 7
    assert [info["base_offset"] for info in log.segments_info()] == [6, 12]
    assert batch_offsets(read_bytes(log, 7, 1 << 20)) == [(6, 8), (9, 11), (12, 14), (15, 17)]
    with pytest.raises(KafkaError) as raised:
        log.advance_log_start_offset(19)
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_retention_by_time_never_deletes_the_active_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE, retention_ms=1_000)
    append_batches(log, 6, first_timestamp=10_000, step=1_000)  # segments' max: 11_002, 13_002, 15_002
    assert log.apply_retention(now_ms=12_500) == 1
    assert (log.log_start_offset, log.segment_count) == (6, 2)
    assert not (log.dir / "00000000000000000000.log").exists()
    assert log.apply_retention(now_ms=10**9) == 1
    assert (log.log_start_offset, log.segment_count) == (12, 1)
    assert batch_offsets(read_bytes(log, 12, 1 << 20)) == [(12, 14), (15, 17)]


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE, retention_bytes=3 * BATCH_SIZE, retention_ms=-1)
    append_batches(log, 7)  # segments of 2, 2, 2, 1 batches
    assert log.apply_retention(now_ms=0) == 2
    assert log.size_bytes == 3 * BATCH_SIZE
    assert log.log_start_offset == 12


def test_retention_does_nothing_for_compacted_topics(tmp_path):
    log = open_log(tmp_path, segment_bytes=2 * BATCH_SIZE, retention_ms=0, cleanup_policy="compact")
    append_batches(log, 6)
    assert log.apply_retention(now_ms=10**12) == 0
    assert log.segment_count == 3


def test_regions_outlive_segment_deletion_and_cache_eviction(tmp_path):
    cache = FileCache(max_open=2)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=2 * BATCH_SIZE, retention_ms=0),
                            file_cache=cache)
    append_batches(log, 4)
    result = log.read(0, 2 * BATCH_SIZE)
    log.apply_retention(now_ms=10**12)
    assert not (log.dir / "00000000000000000000.log").exists()
    assert batch_offsets(result.read_all()) == [(0, 2), (3, 5)]
    result.close()


def test_flush_moves_the_recovery_point(tmp_path):
    log = open_log(tmp_path)
    append_batches(log, 2)
    assert (log.recovery_point, log.unflushed_messages, log.flushes) == (0, 6, 0)
    log.flush()
    assert (log.recovery_point, log.unflushed_messages, log.flushes) == (6, 0, 1)


def test_flush_writes_out_every_index_entry(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=0)
    append_batches(log, 100)  # 99 offset index entries: more than are written eagerly
    log.flush()
    raw_index = (log.dir / "00000000000000000000.index").read_bytes()
    assert list(struct.iter_unpack(">ii", raw_index)) == [(3 * i + 2, i * BATCH_SIZE) for i in range(1, 100)]
    assert len((log.dir / "00000000000000000000.timeindex").read_bytes()) == 99 * 12


def test_flush_in_a_worker_thread_while_appending(tmp_path):
    log = open_log(tmp_path, segment_bytes=20 * BATCH_SIZE, index_interval_bytes=0)
    stop = threading.Event()
    recovery_points = []

    def flush_repeatedly() -> None:
        while not stop.is_set():
            log.flush()
            recovery_points.append(log.recovery_point)

    worker = threading.Thread(target=flush_repeatedly)
    worker.start()
    try:
        append_batches(log, 300)
    finally:
        stop.set()
        worker.join()
    log.flush()
    assert recovery_points == sorted(recovery_points)
    assert log.recovery_point == log.log_end_offset == 900
    log.close()
    index_files = sorted(log.dir.glob("*index"))
    written = [path.read_bytes() for path in index_files]
    PartitionLog.open(log.dir, "orders", 0, log.config, recovery_point=0).close()  # rebuilds every index
    assert [path.read_bytes() for path in index_files] == written


def test_a_flush_is_due_by_time_after_flush_ms(tmp_path):
    log = open_log(tmp_path, flush_ms=60_000)
    log.flush()
    now = time.time_ns() // 1_000_000
    assert not log.flush_due_by_time(now + 60_000)  # nothing unflushed
    append_batches(log, 1)
    assert not log.flush_due_by_time(now)
    assert log.flush_due_by_time(now + 60_000)
