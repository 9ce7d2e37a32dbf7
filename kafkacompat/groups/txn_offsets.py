"""Offsets committed inside transactions (TxnOffsetCommit), held per producer until the
transaction's marker reaches the group's __consumer_offsets partition: a COMMIT makes them the
group's offsets (unless a later plain commit of the partition got there first), an ABORT drops
them. While they are pending, OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for
their partitions (Kafka's pendingTransactionalOffsetCommits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafkacompat.groups.storage import OffsetCommitValue

TopicPartition = tuple[str, int]


class PendingTxnOffsets:
    def __init__(self) -> None:
        # producer id -> group id -> partition -> (value, position of its record's end in the log)
        self._by_producer: dict[int, dict[str, dict[TopicPartition, tuple["OffsetCommitValue", int]]]] = {}
        self._pending: dict[str, dict[TopicPartition, int]] = {}  # group -> partition -> producers

    def add(self, producer_id: int, group_id: str, values: "list[tuple[TopicPartition, OffsetCommitValue]]",
            position: int) -> None:
        offsets = self._by_producer.setdefault(producer_id, {}).setdefault(group_id, {})
        counts = self._pending.setdefault(group_id, {})
        for tp, value in values:
            if tp not in offsets:
                counts[tp] = counts.get(tp, 0) + 1
            offsets[tp] = (value, position)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return tp in self._pending.get(group_id, ())

    def groups_of(self, producer_id: int) -> list[str]:
        return list(self._by_producer.get(producer_id, ()))

    def take(self, producer_id: int, group_id: str) -> "dict[TopicPartition, tuple[OffsetCommitValue, int]]":
        """The producer's pending offsets of ``group_id``, no longer pending."""
        groups = self._by_producer.get(producer_id)
        offsets = groups.pop(group_id, {}) if groups is not None else {}
        if groups is not None and not groups:
            del self._by_producer[producer_id]
        counts = self._pending.get(group_id)
        if counts is not None:
            for tp in offsets:
                counts[tp] -= 1
                if counts[tp] <= 0:
                    del counts[tp]
            if not counts:
                del self._pending[group_id]
        return offsets

    def drop_groups(self, group_ids: set[str]) -> None:
        """The groups' partition moved to another coordinator: their pending offsets go with it."""
        for producer_id in list(self._by_producer):
            for group_id in group_ids & set(self._by_producer[producer_id]):
                self.take(producer_id, group_id)
