"""__consumer_offsets under a consumer that commits every second for a day stays bounded."""

from __future__ import annotations

import struct

import crc32c

from kafkacompat.groups.storage import OffsetCommitValue, build_batch, offset_commit_key, offset_commit_value
from kafkacompat.log import LogCleaner, LogConfig, PartitionLog
from kafkacompat.wire.records import validate_batches, write_varint
from tests.support import T0, latest, records

SEGMENT_BYTES = 256 * 1024
COMMITS = 86_400  # one a second for a day, on a compressed clock
BACKOFF_COMMITS = 15  # log.cleaner.backoff.ms = 15 s


def commit_batch(commit: list[tuple[bytes, bytes]], now: int) -> bytes:
    """The batch the coordinator writes (storage.build_batch), built here faster (small records:
    every varint but the key and value lengths is one byte)."""
    body = bytearray()
    for delta, (key, value) in enumerate(commit):
        record = (b"\x00\x00" + bytes((delta << 1,)) + write_varint(len(key)) + key + write_varint(len(value))
                  + value + b"\x00")
        body += write_varint(len(record)) + record
    batch = bytearray(61) + body
    _HEADER.pack_into(batch, 0, 0, len(batch) - 12, 0, 2, 0, 0, len(commit) - 1, now, now, -1, -1, -1, len(commit))
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


_HEADER = struct.Struct(">qiibIhiqqqhii")


def commit_value(offset: int, now: int) -> bytes:
    """storage.offset_commit_value(OffsetCommitValue(offset, 5, "", now)), without the dataclass."""
    return _VALUE.pack(3, offset, 5, 0, now)


_VALUE = struct.Struct(">hqihq")


def test_the_commit_batch_is_the_coordinators():
    commit = [(offset_commit_key("g", "t", 0), offset_commit_value(OffsetCommitValue(5, 5, "", T0)))]
    assert commit[0][1] == commit_value(5, T0)
    assert commit_batch(commit, T0) == bytes(build_batch(commit, T0))


def test_a_day_of_commits_every_second_keeps_the_offsets_log_bounded(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES)
    log = PartitionLog.open(tmp_path / "__consumer_offsets-7", "__consumer_offsets", 7, config)
    cleaner = LogCleaner(tmp_path, lambda: [log])
    keys = [offset_commit_key("billing", "payments", partition) for partition in range(4)]
    expected: dict[bytes, bytes] = {}
    largest, most_segments, cleans = 0, 0, 0
    for second in range(COMMITS):
        now = T0 + second * 1000
        commit = [(key, commit_value(second * 10 + p, now)) for p, key in enumerate(keys)]
        blob = memoryview(bytearray(commit_batch(commit, now)))
        log.append(blob, validate_batches(blob, 1 << 20), now_ms=now)
        expected.update(commit)
        if second % BACKOFF_COMMITS == 0:
            cleans += cleaner.clean_until_done(now)
            largest = max(largest, log.size_bytes)
            most_segments = max(most_segments, log.segment_count)

    raw_bytes = COMMITS * len(bytes(blob))
    assert cleans >= raw_bytes // SEGMENT_BYTES // 2  # it cleaned as it went
    assert largest <= 3 * SEGMENT_BYTES, (largest, raw_bytes)
    assert most_segments <= 4
    assert log.size_bytes <= 3 * SEGMENT_BYTES
    rows = records(log)
    assert latest(rows) == expected  # every key's last commit is there
    offsets = [row[0] for row in rows]
    assert offsets == sorted(set(offsets)) and log.log_end_offset == COMMITS * len(keys)
    log.close()
