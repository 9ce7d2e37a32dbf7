"""A partition as the request handlers see it: its log, leader epoch, high watermark and the
waiters woken by new data (long-poll fetches).

On a single node the leader is the only replica in the ISR, so the high watermark follows the
log end offset as soon as a batch is written. Replication (followers, ISR, acks=all waiters)
builds on this class.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import BatchHeader

if TYPE_CHECKING:
    from kafkacompat.log import AppendInfo, PartitionLog, ReadResult


class Partition:
    def __init__(self, topic: str, index: int, log: "PartitionLog", *, leader_id: int, leader_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas: list[int] = [leader_id]
        self.isr: list[int] = [leader_id]
        self.high_watermark = log.log_end_offset
        self._waiters: set[trio.Event] = set()

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    def append(self, records: memoryview, headers: list[BatchHeader]) -> "AppendInfo":
        info = self.log.append(records, headers, leader_epoch=self.leader_epoch, now_ms=int(time.time() * 1000))
        self._advance_high_watermark(self.log.log_end_offset)
        return info

    def _advance_high_watermark(self, offset: int) -> None:
        if offset > self.high_watermark:
            self.high_watermark = offset
            self.wake_waiters()

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> "ReadResult":
        """Whole batches from ``offset``, only below the high watermark (what is committed)."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark, min_one_batch=min_one_batch)

    def check_fetch_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside {self.log_start_offset}..{self.log_end_offset} for {self}",
            )

    def add_waiter(self, event: trio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def wake_waiters(self) -> None:
        for event in self._waiters:
            event.set()
        self._waiters.clear()
