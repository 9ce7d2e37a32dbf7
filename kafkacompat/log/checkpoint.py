"""Kafka's offset checkpoint files (recovery point, log start offset, cleaner offset) and the
directory fsync that makes a rename durable."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Kafka's offset checkpoint: "0", the entry count, then "topic partition offset" lines."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"{path} is not a version {CHECKPOINT_VERSION} offset checkpoint")
    count = int(lines[1])
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise ValueError(f"{path} announces {count} entries but holds {len(entries)}")
    offsets: dict[TopicPartition, int] = {}
    for line in entries:
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(f"{path} has a malformed line: {line!r}")
        topic, partition, offset = fields
        offsets[(topic, int(partition))] = int(offset)
    return offsets


def write_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Write atomically: a temporary file, fsync, rename over the old one, fsync the directory."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)  # the old file stays whole; a full disk gets its room back
        raise
    fsync_directory(path.parent)


def read_small_file(path: Path | str) -> str:
    """A small text file's contents in three system calls (pathlib's read_text costs several times
    as much, and a start reads two such files per partition). FileNotFoundError if missing."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def fsync_directory(directory: Path) -> None:
    """Make the renames, creations and deletions in ``directory`` durable. A directory that is gone
    (a partition deleted while a worker thread flushed it) has nothing left to make durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
