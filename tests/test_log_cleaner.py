"""Log compaction (kafkacompat.log.cleaner) on real segment files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkacompat.log import LogConfig, PartitionLog, read_checkpoint, swap
from kafkacompat.config import BrokerConfig
from kafkacompat.log.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner, log_to_clean
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import DELETE_HORIZON_FLAG, crc_ok, iter_batches, require_record_keys, validate_batches
from tests.support import T0, latest, make_batch, records

HOUR = 3_600_000
DAY = 24 * HOUR
def append(log: PartitionLog, items, *, leader_epoch: int = 0, **options) -> int:
    blob = bytearray(make_batch(items, **options))
    view = memoryview(blob)
    return log.append(view, validate_batches(view, 1 << 30), leader_epoch=leader_epoch).first_offset


def open_log(tmp_path: Path, **config) -> PartitionLog:
    options = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.0, "segment_bytes": 1 << 20}
    options.update(config)
    return PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(**options))


def cleaner_for(tmp_path: Path, *logs: PartitionLog) -> LogCleaner:
    return LogCleaner(tmp_path, lambda: list(logs))


def clean(cleaner: LogCleaner, log: PartitionLog, now: int):
    candidate = log_to_clean(log, cleaner.checkpoints.get((log.topic, log.partition)), now)
    return cleaner.clean_sync(candidate, now)


def test_keeps_the_last_record_of_each_key_and_never_touches_the_active_segment(tmp_path):
    log = open_log(tmp_path)
    for round_ in range(3):  # keys spread over three segments
        for key in (b"a", b"b", b"c"):
            append(log, [(key, b"%s-%d" % (key, round_))], timestamp=T0 + round_)
        log.roll()
    append(log, [(b"a", b"active-1")])
    append(log, [(b"a", b"active-2")])
    active = log.segments()[-1]
    active_bytes = Path(active.log_path).read_bytes()
    before = records(log)
    end = log.log_end_offset

    stats = clean(cleaner_for(tmp_path, log), log, T0 + HOUR)

    after = records(log)
    assert [row[0] for row in after] == [6, 7, 8, 9, 10]  # offsets preserved, active untouched
    assert {(key, value) for _, key, value, _ in after[:3]} == {(b"a", b"a-2"), (b"b", b"b-2"), (b"c", b"c-2")}
    assert latest(after) == latest(before)
    assert log.log_end_offset == end and log.log_start_offset == 0
    assert Path(log.segments()[-1].log_path).read_bytes() == active_bytes and log.segments()[-1] is active
    assert len(log.segments()) == 2  # three small cleaned segments grouped into one
    assert stats.records_read == 9 and stats.records_kept == 3
    assert set(os.listdir(log.dir)) >= {"00000000000000000000.log", "00000000000000000000.index",
                                       "00000000000000000000.timeindex"}
    assert not [name for name in os.listdir(log.dir) if name.endswith((".cleaned", ".swap"))]
    timestamps = {offset: ts for offset, _, _, ts in before}
    assert all(ts == timestamps[offset] for offset, _, _, ts in after)


def test_records_keep_headers_producer_fields_and_leader_epoch(tmp_path):
    log = open_log(tmp_path)
    append(log, [(b"k", b"old"), (b"x", b"keep")], producer=(7, 3, 40), headers=[("h", b"v")], leader_epoch=4)
    append(log, [(b"k", b"new")], producer=(7, 3, 42))
    log.roll()
    append(log, [(b"z", b"1")])
    clean(cleaner_for(tmp_path, log), log, T0 + HOUR)
    data = log.read(0, 1 << 30)
    blob = data.read_all()
    data.close()
    headers = list(iter_batches(blob))
    first = headers[0]
    assert (first.base_offset, first.last_offset_delta, first.records_count) == (0, 1, 1)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 3, 40)
    assert first.partition_leader_epoch == 4 and crc_ok(blob, first)
    batch = MemoryRecords(bytes(blob)).next_batch()
    record = next(iter(batch))
    assert (record.offset, record.key, record.value, record.headers) == (1, b"x", b"keep", [("h", b"v")])


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_are_rewritten_with_their_codec(tmp_path, codec):
    log = open_log(tmp_path)
    value = b"compressible " * 20
    append(log, [(b"k%d" % i, value + b"%d" % i) for i in range(10)], codec=codec)
    append(log, [(b"k%d" % i, value + b"new") for i in range(0, 10, 2)], codec=codec)
    log.roll()
    append(log, [(b"other", b"x")])
    clean(cleaner_for(tmp_path, log), log, T0 + HOUR)
    data = log.read(0, 1 << 30)
    blob = data.read_all()
    data.close()
    first, second = list(iter_batches(blob))[:2]
    assert first.compression == codec and first.records_count == 5 and first.last_offset_delta == 9
    assert second.compression == codec and second.records_count == 5
    rows = records(log)
    assert [offset for offset, *_ in rows] == [1, 3, 5, 7, 9, 10, 11, 12, 13, 14, 15]
    assert latest(rows)[b"k1"] == value + b"1" and latest(rows)[b"k0"] == value + b"new"


def test_tombstones_stay_for_delete_retention_ms_after_their_clean_then_go(tmp_path):
    log = open_log(tmp_path, delete_retention_ms=DAY)
    cleaner = cleaner_for(tmp_path, log)
    append(log, [(b"gone", b"v1")])
    append(log, [(b"kept", b"v1")])
    append(log, [(b"gone", None)])  # tombstone at offset 2
    log.roll()
    append(log, [(b"filler", b"1")])
    clean(cleaner, log, T0 + HOUR)
    rows = records(log)
    assert [(offset, key, value) for offset, key, value, _ in rows[:2]] == [(1, b"kept", b"v1"), (2, b"gone", None)]
    tombstone_batch = list(iter_batches(log.read(2, 1 << 20).read_all()))[0]
    assert tombstone_batch.attributes & DELETE_HORIZON_FLAG
    assert tombstone_batch.base_timestamp == T0 + HOUR + DAY
    assert rows[1][3] == T0  # the record's own timestamp survives the new base timestamp

    for step, now in enumerate((T0 + HOUR + DAY - 1, T0 + HOUR + DAY + 1)):
        log.roll()
        append(log, [(b"filler%d" % step, b"x")])
        assert cleaner.grab_filthiest(now) is not None
        clean(cleaner, log, now)
        keys = [key for _, key, _, _ in records(log)]
        assert (b"gone" in keys) == (step == 0)
    assert latest(records(log))[b"kept"] == b"v1"


def test_null_key_records_are_removed_from_the_cleaned_section(tmp_path):
    log = open_log(tmp_path)
    append(log, [(None, b"keyless"), (b"k", b"v")])
    log.roll()
    append(log, [(b"z", b"1")])
    clean(cleaner_for(tmp_path, log), log, T0 + HOUR)
    assert [(offset, key) for offset, key, _, _ in records(log)] == [(1, b"k"), (2, b"z")]


def test_reads_indexes_and_timestamp_lookups_after_cleaning(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=0, segment_bytes=4096)
    for i in range(200):
        append(log, [(b"key%d" % (i % 17), b"value-%d" % i)], timestamp=T0 + i * 10)
    log.roll()
    append(log, [(b"tail", b"t")], timestamp=T0 + 5000)
    before = records(log)
    clean(cleaner_for(tmp_path, log), log, T0 + HOUR)
    after = records(log)
    assert latest(after) == latest(before)
    kept = [offset for offset, *_ in after]
    assert len(kept) == 18 and kept == sorted(set(kept))
    for offset in range(0, log.log_end_offset):
        first = records(log, offset)[0][0]
        assert first == min(k for k in kept if k >= offset)  # a removed offset reads from the next record
    for segment in log.segments()[:-1]:
        offsets, times = segment.offset_index_entries(), segment.time_index_entries()
        segment.rebuild_indexes()
        assert segment.offset_index_entries() == offsets and segment.time_index_entries() == times
    by_offset = {offset: ts for offset, _, _, ts in after}
    for target in (T0, T0 + 1000, T0 + 1835, T0 + 1990, T0 + 5000):
        expected = min(((ts, o) for o, ts in by_offset.items() if ts >= target), key=lambda p: p[1])
        assert log.offset_for_timestamp(target) == (expected[1], expected[0])
    assert log.offset_for_timestamp(T0 + 6000) is None
    assert log.max_timestamp_and_offset() == (T0 + 5000, 200)


def test_dirty_ratio_and_the_checkpoint_file(tmp_path):
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.5)
    for i in range(40):
        append(log, [(b"k%d" % (i % 4), b"v" * 50)])
    log.roll()
    append(log, [(b"x", b"y")])
    cleaner = cleaner_for(tmp_path, log)
    assert cleaner.grab_filthiest(T0).cleanable_ratio == 1.0
    assert cleaner.clean_until_done(T0 + HOUR) == 1
    checkpoint = read_checkpoint(tmp_path / CLEANER_CHECKPOINT)
    assert checkpoint == {("t", 0): 40}
    assert (tmp_path / CLEANER_CHECKPOINT).read_text().splitlines()[:3] == ["0", "1", "t 0 40"]
    clean_bytes = log.segments()[0].size
    # A small dirty segment: ratio below 0.5, nothing to do.
    log.roll()
    append(log, [(b"k0", b"new")])
    log.roll()
    candidate = cleaner_for(tmp_path, log).grab_filthiest(T0 + HOUR)  # a fresh cleaner reads the checkpoint
    assert candidate is None
    assert log_to_clean(log, 40, T0).cleanable_ratio < 0.5
    # Enough dirty bytes to pass the ratio.
    while log_to_clean(log, 40, T0 + HOUR).cleanable_bytes <= clean_bytes:
        append(log, [(b"k1", b"v" * 50)])
        log.roll()
    assert cleaner.grab_filthiest(T0 + HOUR) is not None
    cleaner.clean_until_done(T0 + HOUR)
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT)[("t", 0)] == log.segments()[-1].base_offset


@pytest.mark.parametrize("load_factor, cleaned_up_to", [("0.9", 16), ("0.5", 10)])
def test_the_dedupe_buffer_holds_size_over_24_times_the_load_factor_keys(tmp_path, load_factor, cleaned_up_to):
    broker = BrokerConfig.load(None, {"log.cleaner.dedupe.buffer.size": str(24 * 20),
                                      "log.cleaner.io.buffer.load.factor": load_factor})
    log = open_log(tmp_path)
    for i in range(16):
        append(log, [(b"k%02d" % i, b"v")])
    log.roll()
    append(log, [(b"z", b"active")])
    cleaner = LogCleaner(tmp_path, lambda: [log], CleanerConfig.from_broker_config(broker))
    clean(cleaner, log, T0 + HOUR)  # a full map ends the round early: the rest is cleaned next round
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {("t", 0): cleaned_up_to}


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    log = open_log(tmp_path, min_compaction_lag_ms=HOUR)
    append(log, [(b"k", b"old")], timestamp=T0)
    log.roll()
    append(log, [(b"k", b"recent")], timestamp=T0 + 2 * HOUR)
    log.roll()
    append(log, [(b"z", b"active")], timestamp=T0 + 2 * HOUR)
    candidate = log_to_clean(log, None, T0 + 2 * HOUR + 1)
    assert candidate.first_uncleanable_offset == 1
    cleaner = cleaner_for(tmp_path, log)
    cleaner.clean_sync(candidate, T0 + 2 * HOUR + 1)
    assert [key for _, key, _, _ in records(log)] == [b"k", b"k", b"z"]  # only the first segment was cleanable
    candidate = log_to_clean(log, cleaner.checkpoints[("t", 0)], T0 + 4 * HOUR)
    assert candidate.first_uncleanable_offset == 2
    cleaner.clean_sync(candidate, T0 + 4 * HOUR)
    assert [(key, value) for _, key, value, _ in records(log)] == [(b"k", b"recent"), (b"z", b"active")]


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path):
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=HOUR)
    append(log, [(b"k", b"v" * 100)], timestamp=T0)
    log.roll()
    append(log, [(b"z", b"v" * 10)], timestamp=T0)
    log.roll()
    append(log, [(b"a", b"active")], timestamp=T0)
    cleaner = cleaner_for(tmp_path, log)
    cleaner.checkpoints[("t", 0)] = 1  # the first segment is clean, the second dirty and small
    assert log_to_clean(log, 1, T0).cleanable_ratio < 0.9
    assert cleaner.grab_filthiest(T0 + 1) is None
    forced = cleaner.grab_filthiest(T0 + 2 * HOUR)
    assert forced is not None and forced.need_compaction_now


def test_log_cleaner_enable_false_does_nothing(tmp_path):
    import trio

    log = open_log(tmp_path)
    append(log, [(b"k", b"1")])
    append(log, [(b"k", b"2")])
    log.roll()
    cleaner = cleaner_for(tmp_path, log)
    cleaner.config.enable = False
    trio.run(cleaner.run)
    assert len(records(log)) == 2


def test_idempotent_producers_keep_their_last_batch_as_an_empty_batch(tmp_path):
    log = open_log(tmp_path)
    now = time.time_ns() // 1_000_000  # producer state expires by the wall clock
    append(log, [(b"k", b"1")], producer=(5, 0, 0), timestamp=now)
    append(log, [(b"k", b"2")], producer=(5, 0, 1), timestamp=now)  # producer 5's last batch, superseded
    append(log, [(b"k", b"3")], timestamp=now)
    append(log, [(b"j", b"x")], timestamp=now)
    log.roll()
    append(log, [(b"z", b"active")], timestamp=now)
    clean(cleaner_for(tmp_path, log), log, now)
    blob = log.read(0, 1 << 20).read_all()
    spans = [(h.base_offset, h.records_count, h.producer_id, h.base_sequence) for h in iter_batches(blob)]
    assert spans[:3] == [(1, 0, 5, 1), (2, 1, -1, -1), (3, 1, -1, -1)]
    # And the producer's sequence state still loads from the log after a restart.
    log.close()
    reopened = PartitionLog.open(log.dir, "t", 0, log.config)
    assert [offset for offset, *_ in records(reopened)] == [2, 3, 4]
    active = {e.producer_id: e.last_data_offset for e in reopened.producer_state.active_producers()}
    assert active.get(5) == 1
    reopened.close()


class Crash(Exception):
    """The process dies at this step of the swap: nothing after it runs."""


# The swap step that crashes, and what is on disk then: .cleaned files (nothing renamed yet), the
# committed .swap files beside the old segments, or the .swap files with the old segments gone.
@pytest.mark.parametrize("point, step", [
    ("cleaned", "commit_swap"), ("swap", "delete_replaced"), ("deleted", "finish_swap"),
])
def test_a_crash_during_the_swap_leaves_a_readable_log_without_loss_or_duplicates(tmp_path, monkeypatch, point, step):
    log = open_log(tmp_path, segment_bytes=600)
    for i in range(60):
        append(log, [(b"k%d" % (i % 5), b"value-%03d" % i)])
    append(log, [(b"z", b"active")])
    before = records(log)
    cleaner = cleaner_for(tmp_path, log)

    def crash(*args: object) -> None:
        raise Crash(step)

    with monkeypatch.context() as patched:
        patched.setattr(swap, step, crash)
        with pytest.raises(Crash):
            clean(cleaner, log, T0 + HOUR)
    names = os.listdir(log.dir)
    pending = [name[:-len(".swap")] for name in names if name.endswith(".log.swap")]
    if point == "cleaned":
        assert any(name.endswith(".log.cleaned") for name in names) and not pending
    else:  # the old segment at the cleaned segment's base is still there until the deletion step
        assert pending and all((name in names) == (point == "swap") for name in pending)
    assert any(name.endswith((".cleaned", ".swap")) for name in os.listdir(log.dir))
    log.close()

    reopened = PartitionLog.open(log.dir, "t", 0, log.config)  # recovery point 0: a full recovery
    after = records(reopened)
    offsets = [offset for offset, *_ in after]
    assert offsets == sorted(set(offsets))
    assert latest(after) == latest(before)
    assert reopened.log_end_offset == log.log_end_offset
    assert not [name for name in os.listdir(reopened.dir) if name.endswith((".cleaned", ".swap"))]
    if point == "cleaned":
        assert after == before  # the swap never started: the old segments are whole
    else:
        assert len(after) < len(before)  # the swap was committed: a cleaned segment replaced old ones
    # And a later clean works on the recovered log.
    clean(cleaner_for(tmp_path, reopened), reopened, T0 + HOUR)
    assert latest(records(reopened)) == latest(before)
    reopened.close()


def test_compacted_topics_reject_records_without_a_key():
    keyed = bytearray(make_batch([(b"k", b"v"), (b"j", None)]))
    keyless = bytearray(make_batch([(b"k", b"v"), (None, b"v")], codec=1))
    require_record_keys(memoryview(keyed), validate_batches(memoryview(keyed), 1 << 20), "t-0")
    with pytest.raises(KafkaError) as raised:
        require_record_keys(memoryview(keyless), validate_batches(memoryview(keyless), 1 << 20), "t-0")
    assert raised.value.code == ErrorCode.INVALID_RECORD
    assert "Compacted topic cannot accept message without key in topic partition t-0." in raised.value.message


def test_an_open_transaction_stops_the_cleaner(tmp_path):
    log = open_log(tmp_path)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=9,
                                        producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    builder.append(0, timestamp=T0, key=b"k", value=b"in-txn", headers=[])
    blob = bytearray(builder.build())
    view = memoryview(blob)
    log.append(view, validate_batches(view, 1 << 20))
    append(log, [(b"k", b"plain")])
    log.roll()
    append(log, [(b"z", b"active")])
    assert log_to_clean(log, None, T0 + HOUR).first_uncleanable_offset == 0  # Kafka stops at the LSO
    clean(cleaner_for(tmp_path, log), log, T0 + HOUR)
    assert [(offset, value) for offset, _, value, _ in records(log)] == [(0, b"in-txn"), (1, b"plain"), (2, b"active")]


def test_compact_and_delete_both_apply(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms=DAY, segment_bytes=120)  # a batch each
    cleaner = cleaner_for(tmp_path, log)
    append(log, [(b"old", b"1")], timestamp=T0)
    append(log, [(b"k", b"1")], timestamp=T0 + 2 * DAY)
    append(log, [(b"k", b"2")], timestamp=T0 + 2 * DAY)
    append(log, [(b"z", b"active")], timestamp=T0 + 2 * DAY)
    assert log.segment_count == 4
    cleaner.clean_until_done(T0 + 2 * DAY)
    assert [key for _, key, _, _ in records(log)] == [b"old", b"k", b"z"]
    assert log.apply_retention(T0 + 2 * DAY) == 1  # the segment of "old" is past retention.ms
    assert log.log_start_offset == 1
    cleaner.checkpoints[("t", 0)] = 0  # below the log start now: reset without complaint (Kafka)
    candidate = log_to_clean(log, 0, T0 + 2 * DAY)
    assert candidate.force_checkpoint and candidate.first_dirty_offset == 1
    append(log, [(b"k", b"3")], timestamp=T0 + 2 * DAY)
    append(log, [(b"y", b"active")], timestamp=T0 + 2 * DAY)
    assert cleaner.clean_until_done(T0 + 2 * DAY) >= 1
    assert [(key, value) for _, key, value, _ in records(log)] == [(b"z", b"active"), (b"k", b"3"), (b"y", b"active")]
    assert log.log_start_offset == 1


def test_a_clean_whose_segments_change_underneath_is_abandoned_and_retried(tmp_path):
    import trio

    from kafkacompat.log.cleaner import CleaningAborted

    log = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms=DAY)
    cleaner = cleaner_for(tmp_path, log)
    append(log, [(b"k", b"1")], timestamp=T0)
    log.roll()
    append(log, [(b"k", b"2")], timestamp=T0 + 2 * DAY)
    log.roll()
    append(log, [(b"z", b"active")], timestamp=T0 + 2 * DAY)
    steps = cleaner._clean_steps(cleaner.grab_filthiest(T0 + 2 * DAY), T0 + 2 * DAY)
    build = next(steps)
    result = build()  # the worker thread's part
    assert log.apply_retention(T0 + 2 * DAY) == 1  # meanwhile, on the event loop, retention runs
    with pytest.raises(CleaningAborted):
        steps.send(result)
    assert not [name for name in os.listdir(log.dir) if name.endswith((".cleaned", ".swap"))]
    assert [(offset, value) for offset, _, value, _ in records(log)] == [(1, b"2"), (2, b"active")]
    assert ("t", 0) not in cleaner.checkpoints
    # The broker's task logs it and tries again next time; the partition is not marked uncleanable.
    assert trio.run(cleaner.run_once, T0 + 2 * DAY)
    assert not cleaner.uncleanable and cleaner.checkpoints[("t", 0)] == 2


@pytest.mark.parametrize("damage", ["garbage in the middle", "a flipped byte"])
def test_a_damaged_segment_is_never_compacted_over(tmp_path, damage, caplog):
    """Kafka's cleaner stops at a CorruptRecordException and marks the partition uncleanable; it
    must not take the damage for the segment's end and drop the batches behind it."""
    import trio

    log = open_log(tmp_path)
    for round_ in range(3):
        for key in (b"a", b"b"):
            append(log, [(key, b"%s-%d" % (key, round_))], timestamp=T0 + round_)
    log.roll()
    append(log, [(b"a", b"active")])
    first = Path(log.segments()[0].log_path)
    data = bytearray(first.read_bytes())
    batch = next(iter_batches(data))
    if damage == "a flipped byte":
        data[batch.size + 70] ^= 0xFF  # inside the second batch's records: its CRC no longer matches
    else:
        data[batch.size:batch.size + 12] = b"\xff" * 12  # the second batch's offset and length
    first.write_bytes(bytes(data))
    cleaner = cleaner_for(tmp_path, log)

    assert trio.run(cleaner.run_once, T0 + HOUR)
    assert ("t", 0) in cleaner.uncleanable
    assert first.read_bytes() == bytes(data)  # left exactly as it was
    assert "marked uncleanable" in caplog.text and "t-0" in caplog.text
    assert not trio.run(cleaner.run_once, T0 + HOUR)  # and not tried again
