"""Partition reassignment (KIP-455) in the store's topic nodes, as Kafka's ZooKeeper-mode
controller keeps it: while a partition moves, its replica list is the target followed by the
original replicas not in it, and the topic node's ``adding_replicas`` / ``removing_replicas`` name
the difference. The new replicas follow the leader like any replica; once every target replica is
in the ISR the controller moves the leadership into the target if needed, shrinks the ISR and the
replica list to the target and clears the two lists (the removed brokers then drop their copy).

Pure functions over the topic node's JSON: the controller and the admin path share them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkacompat.wire.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Reassignment:
    replicas: tuple[int, ...]  # the full set while moving: target first, then the leaving ones
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)


def ongoing(topic_node: dict, partition: int) -> Reassignment | None:
    key = str(partition)
    adding = tuple(int(r) for r in (topic_node.get("adding_replicas") or {}).get(key, ()))
    removing = tuple(int(r) for r in (topic_node.get("removing_replicas") or {}).get(key, ()))
    if not adding and not removing:
        return None
    return Reassignment(tuple(int(r) for r in topic_node["partitions"][key]), adding, removing)


def invalid_target(target: list[int], brokers: set[int], current_size: int, allow_rf_change: bool) -> str | None:
    """Why Kafka refuses this target replica list (INVALID_REPLICA_ASSIGNMENT), or None."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    if len(set(target)) != len(target):
        return f"The manual partition assignment includes the broker {_first_duplicate(target)} more than once."
    unknown = [r for r in target if r not in brokers]
    if unknown:
        return f"The manual partition assignment includes broker {unknown[0]}, but no such broker is registered."
    if not allow_rf_change and len(target) != current_size:
        return (f"The replication factor is changed from {current_size} to {len(target)} but "
                "allowReplicationFactorChange is false.")
    return None


def _first_duplicate(items: list[int]) -> int:
    seen: set[int] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    raise ValueError("no duplicate")


def start(topic_node: dict, partition: int, target: list[int]) -> None:
    """Record a reassignment of ``partition`` to ``target`` in the topic node (in place); a
    reassignment already under way is replaced, starting again from its original replicas."""
    key = str(partition)
    current = ongoing(topic_node, partition)
    origin = list(current.origin) if current else [int(r) for r in topic_node["partitions"][key]]
    full = list(dict.fromkeys([*target, *origin]))
    adding = [r for r in target if r not in origin]
    removing = [r for r in origin if r not in target]
    topic_node["partitions"][key] = full
    _set_lists(topic_node, key, adding, removing)


def cancel(topic_node: dict, partition: int) -> int:
    """Put ``partition`` back on its original replicas; NO_REASSIGNMENT_IN_PROGRESS if none moves."""
    current = ongoing(topic_node, partition)
    if current is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    key = str(partition)
    topic_node["partitions"][key] = list(current.origin)
    _set_lists(topic_node, key, [], [])
    return ErrorCode.NONE


def complete(topic_node: dict, partition: int) -> None:
    current = ongoing(topic_node, partition)
    if current is None:
        return
    key = str(partition)
    topic_node["partitions"][key] = list(current.target)
    _set_lists(topic_node, key, [], [])


def _set_lists(topic_node: dict, key: str, adding: list[int], removing: list[int]) -> None:
    for name, values in (("adding_replicas", adding), ("removing_replicas", removing)):
        lists = dict(topic_node.get(name) or {})
        if values:
            lists[key] = values
        else:
            lists.pop(key, None)
        topic_node[name] = lists


def next_leadership(reassignment: Reassignment, leader: int, isr: tuple[int, ...],
                    eligible: set[int]) -> tuple[int, list[int]] | None:
    """When every target replica is in the ISR: the (leader, isr) to write before the replica
    list shrinks to the target (the leader moved into the target if it is not there or not
    eligible). None while the target is still catching up, or when no target replica can lead."""
    target = reassignment.target
    if not all(r in isr for r in target):
        return None
    if leader not in target or leader not in eligible:
        candidates = [r for r in target if r in eligible]
        if not candidates:
            return None
        leader = candidates[0]
    return leader, [r for r in isr if r in target]
