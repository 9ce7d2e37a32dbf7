"""The server-side assignors of KIP-848 consumer groups: `uniform` and `range`.

Both are pure functions of the members' subscriptions (and, for stickiness, their current
target assignment) and the subscribed topics' partition counts, as Kafka's UniformAssignor and
RangeAssignor (group-coordinator assignor package). The result maps every member id to its
target partitions by topic id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

# topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True)
class MemberSpec:
    subscribed: frozenset[uuid.UUID]
    current: Assignment = field(default_factory=dict)
    rack_id: str | None = None


Assignor = Callable[[dict[str, MemberSpec], dict[uuid.UUID, int]], dict[str, Assignment]]


def _to_assignment(owned: dict[str, set[tuple[uuid.UUID, int]]]) -> dict[str, Assignment]:
    result: dict[str, Assignment] = {}
    for member_id, partitions in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, index in partitions:
            by_topic.setdefault(topic_id, set()).add(index)
        result[member_id] = {topic_id: frozenset(indexes) for topic_id, indexes in by_topic.items()}
    return result


def uniform(members: dict[str, MemberSpec], topics: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    """Balanced and sticky: a member keeps the partitions it has while that keeps the group
    balanced (partition counts differ by at most one among members with the same subscription);
    the others go to the least loaded eligible member."""
    order = sorted(members)
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in order}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member_id in order:
        spec = members[member_id]
        for topic_id, indexes in spec.current.items():
            if topic_id not in spec.subscribed or topic_id not in topics:
                continue
            for index in indexes:
                tp = (topic_id, index)
                if index < topics[topic_id] and tp not in taken:
                    owned[member_id].add(tp)
                    taken.add(tp)
    eligible: dict[uuid.UUID, list[str]] = {
        topic_id: [m for m in order if topic_id in members[m].subscribed] for topic_id in sorted(topics)
    }
    unassigned = [(t, i) for t in sorted(topics) if eligible[t] for i in range(topics[t]) if (t, i) not in taken]
    # Partitions with the fewest candidates first, so the constrained ones are placed while there is room.
    unassigned.sort(key=lambda tp: (len(eligible[tp[0]]), tp[0], tp[1]))
    for tp in unassigned:
        target = min(eligible[tp[0]], key=lambda m: (len(owned[m]), m))
        owned[target].add(tp)
    _rebalance(owned, eligible)
    return _to_assignment(owned)


def _rebalance(owned: dict[str, set[tuple[uuid.UUID, int]]], eligible: dict[uuid.UUID, list[str]]) -> None:
    """Move partitions from the most to the least loaded member that may take them until no move
    narrows the gap (every move shrinks the sum of squared loads, so this ends)."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[giver]):
                candidates = [m for m in eligible.get(tp[0], []) if len(owned[m]) + 1 < len(owned[giver])]
                if candidates:
                    taker = min(candidates, key=lambda m: (len(owned[m]), m))
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    moved = True
                    break
            if moved:
                break


def range_(members: dict[str, MemberSpec], topics: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    """Per topic, its subscribers in member id order get contiguous ranges of partitions; the
    first (partitions % subscribers) get one more. Members subscribed to the same topics get the
    same partition numbers of each (co-partitioning)."""
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in members}
    for topic_id in sorted(topics):
        subscribers = sorted(m for m, spec in members.items() if topic_id in spec.subscribed)
        if not subscribers:
            continue
        count = topics[topic_id]
        base, extra = divmod(count, len(subscribers))
        start = 0
        for position, member_id in enumerate(subscribers):
            size = base + (1 if position < extra else 0)
            if size:
                result[member_id][topic_id] = frozenset(range(start, start + size))
            start += size
    return result


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}

# Kafka's class names of the built-in assignors, accepted in group.consumer.assignors too.
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def configured_assignors(names: list[str]) -> list[str]:
    """The built-in assignor names group.consumer.assignors lists, in its order (the first is the
    default); unknown entries raise ValueError."""
    result = []
    for name in names:
        name = name.strip()
        if not name:
            continue
        resolved = _CLASS_NAMES.get(name, name)
        if resolved not in ASSIGNORS:
            raise ValueError(f"unknown consumer group assignor {name!r}: the built-in ones are uniform and range")
        if resolved not in result:
            result.append(resolved)
    return result
