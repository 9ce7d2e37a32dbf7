"""Random appends, reads, truncations, log start moves and reopens against an in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.log import FileCache, LogConfig, PartitionLog
from kafkacompat.wire.errors import ErrorCode, KafkaError

try:
    from test_log_support import make_batch, read_bytes, records_of
except ImportError:  # tests/ imported as a package
    from tests.test_log_support import make_batch, read_bytes, records_of


@dataclass
class StoredBatch:
    base: int
    last: int
    data: bytes
    timestamps: list[int]


@dataclass
class Model:
    batches: list[StoredBatch] = field(default_factory=list)
    log_start: int = 0
    log_end: int = 0
    clock: int = 1_000

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool) -> bytes:
        end = self.log_end if max_offset is None else min(max_offset, self.log_end)
        chosen: list[bytes] = []
        total = 0
        for batch in self.batches:
            if batch.last < offset:
                continue
            if batch.last >= end:
                break
            if total + len(batch.data) > max(0, max_bytes):
                if not chosen and min_one:
                    chosen.append(batch.data)
                break
            chosen.append(batch.data)
            total += len(batch.data)
        return b"".join(chosen)

    def truncate(self, offset: int) -> None:
        if offset >= self.log_end:
            return
        kept = [batch for batch in self.batches if batch.last < offset]
        dropped = self.batches[len(kept):]
        self.batches = kept
        self.log_end = min(offset, dropped[0].base) if dropped else offset
        self.log_start = min(self.log_start, self.log_end)

    def first_at_or_after(self, timestamp: int) -> tuple[int, int] | None:
        for batch in self.batches:
            for position, record_timestamp in enumerate(batch.timestamps):
                offset = batch.base + position
                if offset >= self.log_start and record_timestamp >= timestamp:
                    return offset, record_timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        best = (-1, -1)
        for batch in self.batches:
            for position, record_timestamp in enumerate(batch.timestamps):
                if record_timestamp > best[0]:
                    best = (record_timestamp, batch.base + position)
        return best


batch_spec = st.tuples(st.lists(st.integers(-20, 40), min_size=1, max_size=5), st.integers(0, 300))
appends = st.tuples(st.just("append"), st.lists(batch_spec, min_size=1, max_size=4))
reads = st.tuples(st.just("read"), st.floats(0, 1), st.integers(0, 3000), st.one_of(st.none(), st.floats(0, 1)),
                  st.booleans())
# Weighted so that logs grow over several segments: half the operations append.
OPERATION_WEIGHTS = [
    (10, appends),
    (4, reads),
    (1, st.tuples(st.just("truncate"), st.floats(0.5, 1))),  # mostly near the end
    (1, st.tuples(st.just("advance_start"), st.floats(0, 0.5))),
    (2, st.tuples(st.just("timestamp"), st.integers(900, 3_000))),
    (2, st.tuples(st.just("reopen"), st.booleans())),
]
_BY_DRAW = [strategy for weight, strategy in OPERATION_WEIGHTS for _ in range(weight)]
operations = st.lists(st.integers(0, len(_BY_DRAW) - 1).flatmap(lambda draw: _BY_DRAW[draw]), max_size=60)


def fraction_of(low: int, high: int, fraction: float) -> int:
    return low + int(fraction * (high - low))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, segment_bytes=st.sampled_from([300, 900, 6_000]),
       index_interval=st.sampled_from([0, 100, 1_000]))
def test_log_behaves_like_the_model(ops, segment_bytes, index_interval):
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    directory = Path(tempfile.mkdtemp()) / "prop-0"
    files = FileCache(max_open=8)  # shared, so that logs abandoned by "crashes" hold no descriptors
    log = PartitionLog.open(directory, "prop", 0, config, file_cache=files)
    model = Model()
    try:
        for op in ops:
            log = apply(op, log, model, directory, config, files)
            assert (log.log_start_offset, log.log_end_offset) == (model.log_start, model.log_end)
        check_everything_reads_back(log, model)
    finally:
        log.close()
        files.close()
        shutil.rmtree(directory.parent)


def apply(op: tuple, log: PartitionLog, model: Model, directory: Path, config: LogConfig,
          files: FileCache) -> PartitionLog:
    kind = op[0]
    if kind == "append":
        append(log, model, op[1], config)
    elif kind == "read":
        _, offset_fraction, max_bytes, max_offset_fraction, min_one = op
        offset = fraction_of(model.log_start, model.log_end, offset_fraction)
        max_offset = None if max_offset_fraction is None else fraction_of(0, model.log_end + 1, max_offset_fraction)
        result = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        data = result.read_all()
        result.close()
        assert data == model.read(offset, max_bytes, max_offset, min_one)
        assert result.size == len(data)
    elif kind == "truncate":
        offset = fraction_of(model.log_start, model.log_end, op[1])
        log.truncate_to(offset)
        model.truncate(offset)
    elif kind == "advance_start":
        offset = fraction_of(model.log_start, model.log_end, op[1])
        log.advance_log_start_offset(offset)
        model.log_start = max(model.log_start, offset)
    elif kind == "timestamp":
        assert log.offset_for_timestamp(op[1]) == model.first_at_or_after(op[1])
        if model.log_start == 0:  # below the log start Kafka still counts what its segments hold
            assert log.max_timestamp_and_offset() == model.max_timestamp()
    elif kind == "reopen":
        clean = op[1]
        if clean:
            log.close()
        # else a crash: the old log object is just dropped
        log = PartitionLog.open(directory, "prop", 0, config, recovery_point=model.log_end if clean else 0,
                                file_cache=files, log_start_offset=model.log_start)
        assert log.recovered_segments == 0 or not clean
    return log


def append(log: PartitionLog, model: Model, specs: list[tuple[list[int], int]], config: LogConfig) -> None:
    batches, timestamps = [], []
    for deltas, value_size in specs:
        stamps = [model.clock + delta for delta in deltas]
        model.clock += 10
        batches.append(make_batch(len(stamps), timestamps=stamps, value_size=value_size))
        timestamps.append(stamps)
    records, headers = records_of(*batches)
    if len(records) > config.segment_bytes:
        with pytest.raises(KafkaError) as raised:
            log.append(records, headers)
        assert raised.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
        return
    info = log.append(records, headers)
    assert info.first_offset == model.log_end
    for header, stamps in zip(headers, timestamps):
        start = header.position
        model.batches.append(StoredBatch(header.base_offset, header.last_offset,
                                         bytes(records[start:start + header.size]), stamps))
    model.log_end = info.last_offset + 1


def check_everything_reads_back(log: PartitionLog, model: Model) -> None:
    assert read_bytes(log, model.log_start, 1 << 30) == model.read(model.log_start, 1 << 30, None, True)
    for offset in range(model.log_start, model.log_end):
        assert read_bytes(log, offset, 1) == model.read(offset, 1, None, True)
