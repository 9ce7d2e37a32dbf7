"""LogSegment's remembered tail (headers of the last appended batches): find_batch answers from it
for offsets at the log end, and must agree with a header scan from the start of the segment at
every offset, across appends, trimming of the tail, truncation, roll, recovery and reopening."""

from __future__ import annotations

import random

import pytest

from kafkacompat.log import LogConfig, PartitionLog
from kafkacompat.log import segment as segment_module
from kafkacompat.wire.records import patch_base_offset

try:
    from test_log_support import make_batch, records_of
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import make_batch, records_of


def _fields(header):
    if header is None:
        return None
    return header.position, header.base_offset, header.last_offset, header.size, header.max_timestamp


def _scanned(segment, offset):
    return next((h for h in segment.headers_from(0) if h.last_offset >= offset), None)


def assert_find_batch_agrees(log: PartitionLog) -> None:
    for segment in log.segments():
        end = (segment.next_offset if segment.next_offset is not None else log.log_end_offset) + 3
        for offset in range(max(0, segment.base_offset - 2), end):
            assert _fields(segment.find_batch(offset)) == _fields(_scanned(segment, offset)), (segment.name, offset)


def reads(log: PartitionLog) -> list[bytes]:
    out = []
    for offset in range(log.log_start_offset, log.log_end_offset + 1):
        for max_bytes in (0, 1, 300, 1 << 20):
            result = log.read(offset, max_bytes)
            try:
                out.append(result.read_all())
            finally:
                result.close()
    return out


def append_random(log: PartitionLog, rng: random.Random, appends: int) -> None:
    for _ in range(appends):
        batches = [make_batch(rng.randint(1, 4), value_size=rng.randint(1, 40)) for _ in range(rng.randint(1, 3))]
        log.append(*records_of(*batches))


@pytest.mark.parametrize("index_interval_bytes", [1, 200, 4096])
def test_tail_lookups_agree_with_a_scan_across_appends_and_trimming(tmp_path, monkeypatch, index_interval_bytes):
    monkeypatch.setattr(segment_module, "_TAIL_BATCHES", 8)  # trim often
    rng = random.Random(index_interval_bytes)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(index_interval_bytes=index_interval_bytes))
    for _ in range(12):
        append_random(log, rng, 3)
        assert_find_batch_agrees(log)
    active = log.segments()[-1]
    assert 0 < len(active._tail_headers) <= 8
    assert active._tail_floor > active.base_offset  # trimmed: older offsets go through the index
    fresh = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(index_interval_bytes=index_interval_bytes))
    assert reads(log) == reads(fresh)  # a log with no remembered tail reads the same bytes
    fresh.close()
    log.close()


def test_tail_after_truncation_roll_and_reopen(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_module, "_TAIL_BATCHES", 6)
    rng = random.Random(7)
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, "t", 0, LogConfig(index_interval_bytes=100, segment_bytes=2_000))
    append_random(log, rng, 20)
    assert log.segment_count > 1
    assert_find_batch_agrees(log)
    for cut in (log.log_end_offset - 1, log.log_end_offset - 5, log.segments()[-1].base_offset + 1):
        log.truncate_to(cut)
        assert_find_batch_agrees(log)
        append_random(log, rng, 4)
        assert_find_batch_agrees(log)
    log.roll()
    append_random(log, rng, 5)
    assert_find_batch_agrees(log)
    expected = reads(log)
    log.close()
    log = PartitionLog.open(path, "t", 0, LogConfig(index_interval_bytes=100, segment_bytes=2_000))
    assert log.segments()[-1]._tail_floor is None  # nothing remembered after a restart
    assert reads(log) == expected
    append_random(log, rng, 5)
    assert log.segments()[-1]._tail_floor is not None
    assert_find_batch_agrees(log)
    log.truncate_fully_and_start_at(log.log_end_offset + 10)
    append_random(log, rng, 3)
    assert_find_batch_agrees(log)
    log.close()


def test_tail_forgotten_by_recovery(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
    append_random(log, random.Random(3), 10)
    active = log.segments()[-1]
    assert active._tail_headers
    active.recover()
    assert active._tail_floor is None and not active._tail_headers
    assert_find_batch_agrees(log)
    log.append(*records_of(make_batch(2)))
    assert_find_batch_agrees(log)
    log.close()


def test_replica_appends_with_offset_gaps(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
    for base in (0, 10, 13, 50):
        records, headers = records_of(make_batch(3))
        for header in headers:
            patch_base_offset(records, header, base)
        log.append(records, headers, assign_offsets=False)
    assert_find_batch_agrees(log)
    active = log.segments()[-1]
    assert _fields(active.find_batch(5)) == _fields(_scanned(active, 5))
    assert active.find_batch(5).base_offset == 10
    log.close()
