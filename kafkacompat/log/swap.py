"""The cleaner's segment swap (Kafka's UnifiedLog.replaceSegments) and finishing one a crash cut
short (as Kafka's LogLoader does), used by PartitionLog.open.

A cleaned group is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``, ``.timeindex.cleaned``,
and ``.txnindex.cleaned`` when it keeps an aborted transaction's marker);
``swap_in`` then renames them to ``.swap`` (the commit point), deletes the segments they replace
and renames the ``.swap`` files to their final names, each step its own function so that a crash
between any two of them can be reproduced (tests replace a step with one that raises).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from kafkacompat.log.checkpoint import fsync_directory
from kafkacompat.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    batches_in_file,
    parse_segment_file_name,
    segment_file_name,
)

logger = logging.getLogger("kafkacompat.log.cleaner")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SWAPPED_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)  # the .log last: it commits
_OPTIONAL_SUFFIXES = (TXN_INDEX_SUFFIX,)  # a segment without aborted transactions has no .txnindex


@dataclass
class CleanedSegment:
    """The files of one cleaned group, named after its first segment's base offset."""

    base_offset: int
    size: int
    directory: Path

    def path(self, suffix: str, state: str) -> Path:
        return self.directory / (segment_file_name(self.base_offset, suffix) + state)

    def delete(self) -> None:
        for suffix in _SWAPPED_SUFFIXES:
            for state in (CLEANED_SUFFIX, SWAP_SUFFIX):
                self.path(suffix, state).unlink(missing_ok=True)


def swap_in(old: list[LogSegment], cleaned: CleanedSegment) -> None:
    """Replace the segments ``old`` by ``cleaned`` on disk (the caller updates the segment list)."""
    commit_swap(cleaned)
    delete_replaced(old)
    finish_swap(cleaned)


def commit_swap(cleaned: CleanedSegment) -> None:
    """.cleaned -> .swap: from here on a restart completes the swap instead of dropping it."""
    for suffix in _SWAPPED_SUFFIXES:
        _replace(cleaned.path(suffix, CLEANED_SUFFIX), cleaned.path(suffix, SWAP_SUFFIX), suffix)
    fsync_directory(cleaned.directory)


def _replace(source: Path, target: Path, suffix: str) -> None:
    if suffix in _OPTIONAL_SUFFIXES and not source.exists():
        return
    os.replace(source, target)


def delete_replaced(old: list[LogSegment]) -> None:
    for segment in old:
        segment.delete_files()


def finish_swap(cleaned: CleanedSegment) -> None:
    for suffix in _SWAPPED_SUFFIXES:
        final = cleaned.directory / segment_file_name(cleaned.base_offset, suffix)
        _replace(cleaned.path(suffix, SWAP_SUFFIX), final, suffix)
    fsync_directory(cleaned.directory)


def complete_interrupted_swaps(directory: Path, label: str, names: list[str] | None = None) -> int:
    """Finish what a crash interrupted; returns the swaps completed.

    Index ``.swap`` files are dropped (indexes are rebuilt). A ``<base>.log.swap`` holds the cleaned
    replacement of the segments whose base offsets lie in [base, its next offset): those are
    deleted, with their indexes, and the swap file takes its final name. ``.cleaned`` files are
    left for PartitionLog's leftover sweep (their swap never started, the old segments are whole).
    """
    names = os.listdir(directory) if names is None else names
    if not any(name.endswith(SWAP_SUFFIX) for name in names):
        return 0
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not name.endswith((LOG_SUFFIX + SWAP_SUFFIX, TXN_INDEX_SUFFIX + SWAP_SUFFIX)):
            logger.info("Removing %s of %s: an index of an interrupted swap (it will be rebuilt)", name, label)
            (directory / name).unlink(missing_ok=True)
    completed = 0
    for name in sorted(names):
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = parse_segment_file_name(name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)
        if base is None:
            continue
        swap = directory / name
        next_offset = max(_next_offset_of(swap, base), base + 1)
        for other in os.listdir(directory):
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                other_base = parse_segment_file_name(other, suffix)
                if other_base is not None and base <= other_base < next_offset:
                    logger.info("Deleting %s of %s: replaced by the cleaned segment in %s", other, label, name)
                    (directory / other).unlink(missing_ok=True)
        txn_index_swap = directory / (segment_file_name(base, TXN_INDEX_SUFFIX) + SWAP_SUFFIX)
        if txn_index_swap.exists():  # cannot be rebuilt from the cleaned log (its data is gone): keep it
            os.replace(txn_index_swap, directory / segment_file_name(base, TXN_INDEX_SUFFIX))
        os.replace(swap, directory / segment_file_name(base, LOG_SUFFIX))
        logger.info("Completed the interrupted swap of %s into %s", name, label)
        completed += 1
    if completed:
        fsync_directory(directory)
    return completed


def _next_offset_of(path: Path, base_offset: int) -> int:
    next_offset = base_offset
    for header, _ in batches_in_file(str(path), os.stat(path).st_size):
        next_offset = header.next_offset
    return next_offset
