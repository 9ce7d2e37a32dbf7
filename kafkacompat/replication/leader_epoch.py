"""The leader epoch cache of one partition: which leader epoch started at which offset.

Kafka's LeaderEpochFileCache and its ``leader-epoch-checkpoint`` file in the partition
directory (written atomically: temp file, fsync, rename)::

    0            <- version
    2            <- number of entries
    0 0          <- epoch start offset
    3 1200

Leaders add an entry when they become leader (epoch, log end offset); followers add one for
every batch whose partitionLeaderEpoch is newer than the latest entry. Truncating the log
truncates the cache, so the cache always describes the log as it is. It answers
OffsetForLeaderEpoch and the diverging-epoch check of Fetch v12+ (``end_offset_for``).
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path

from kafkacompat.log.checkpoint import read_small_file

log = logging.getLogger("kafkacompat.replication")

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path | None, label: str = "") -> None:
        self.path = directory / CHECKPOINT_FILE if directory is not None else None
        self.label = label
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self._file_exists = False

    # ---- file --------------------------------------------------------------------------

    @classmethod
    def load(cls, directory: Path, label: str = "") -> "LeaderEpochCache":
        cache = cls(directory, label)
        if cache.path is not None:
            try:
                cache._epochs, cache._offsets = read_checkpoint(cache.path)
                cache._file_exists = True
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as exc:
                log.warning("Ignoring unreadable leader epoch checkpoint %s: %s", cache.path, exc)
                cache._epochs, cache._offsets = [], []
                cache._file_exists = True
        return cache

    @property
    def file_exists(self) -> bool:
        """Whether the checkpoint file was there when loaded or has been written since."""
        return self._file_exists

    def flush(self) -> None:
        if self.path is not None:
            write_checkpoint(self.path, self.entries())
            self._file_exists = True

    # ---- queries -----------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        position = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[position] if position >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's LeaderEpochFileCache.endOffsetFor: the largest epoch
        <= the requested one and the start offset of the epoch after it (the log end offset for
        the latest epoch); (-1, -1) when the requested epoch is undefined or newer than any."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:  # older than every epoch we know: it ended where our first one starts
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    # ---- changes -----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (entries with an epoch or start
        offset not below it are dropped first, as Kafka); returns whether anything changed."""
        if epoch < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and self._offsets[-1] <= start_offset:
            return False
        if self._epochs and epoch < self._epochs[-1] and start_offset >= self._offsets[-1]:
            # An older epoch after a newer one (a stale batch): Kafka refuses it too.
            log.warning("%s: ignoring leader epoch %d at offset %d below the latest epoch %d",
                        self.label, epoch, start_offset, self._epochs[-1])
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        if flush:
            self.flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: drop the epochs that start at or after it."""
        keep = bisect.bisect_left(self._offsets, end_offset)
        if keep < len(self._offsets):
            del self._epochs[keep:], self._offsets[keep:]
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there."""
        position = bisect.bisect_right(self._offsets, start_offset) - 1
        if position < 0 or (position == 0 and self._offsets[0] == start_offset):
            return
        epoch = self._epochs[position]
        del self._epochs[:position], self._offsets[:position]
        self._epochs[0], self._offsets[0] = epoch, start_offset
        self.flush()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self.flush()


def read_checkpoint(path: Path) -> tuple[list[int], list[int]]:
    lines = read_small_file(path).splitlines()
    if len(lines) < 2:
        raise ValueError("missing version or entry count")
    version = int(lines[0].strip())
    if version != CHECKPOINT_VERSION:
        raise ValueError(f"unknown version {version}")
    count = int(lines[1].strip())
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise ValueError(f"says {count} entries but holds {len(entries)}")
    epochs, offsets = [], []
    for entry in entries:
        if len(entry) != 2:
            raise ValueError(f"malformed entry {' '.join(entry)!r}")
        epochs.append(int(entry[0]))
        offsets.append(int(entry[1]))
    return epochs, offsets


def write_checkpoint(path: Path, entries: list[tuple[int, int]]) -> None:
    text = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
