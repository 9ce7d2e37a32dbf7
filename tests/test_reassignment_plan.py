"""The topic-node bookkeeping of a partition reassignment (KIP-455), as Kafka's ZooKeeper-mode
controller writes it: the full replica list while moving, adding/removing, cancel and complete."""

from __future__ import annotations

from kafkacompat.controller import reassignment
from kafkacompat.wire.errors import ErrorCode


def node(replicas: list[int]) -> dict:
    return {"version": 3, "partitions": {"0": replicas}, "adding_replicas": {}, "removing_replicas": {}}


def test_a_move_lists_target_first_then_the_leaving_replicas():
    data = node([1, 2, 3])
    reassignment.start(data, 0, [4, 2, 3])
    assert data["partitions"]["0"] == [4, 2, 3, 1]
    assert (data["adding_replicas"], data["removing_replicas"]) == ({"0": [4]}, {"0": [1]})
    moving = reassignment.ongoing(data, 0)
    assert (moving.target, moving.origin) == ((4, 2, 3), (2, 3, 1))
    reassignment.complete(data, 0)
    assert data == node([4, 2, 3])


def test_a_new_target_replaces_a_move_from_its_origin_and_cancel_restores_it():
    data = node([1, 2])
    reassignment.start(data, 0, [3, 4])
    reassignment.start(data, 0, [1, 5])  # 3 and 4 were only being added: they are dropped
    assert data["partitions"]["0"] == [1, 5, 2]
    assert (data["adding_replicas"], data["removing_replicas"]) == ({"0": [5]}, {"0": [2]})
    assert reassignment.cancel(data, 0) == ErrorCode.NONE
    assert data["partitions"]["0"] == [1, 2] and reassignment.ongoing(data, 0) is None
    assert reassignment.cancel(data, 0) == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_invalid_targets():
    brokers = {1, 2, 3}
    assert "empty" in reassignment.invalid_target([], brokers, 2, True)
    assert "more than once" in reassignment.invalid_target([1, 1], brokers, 2, True)
    assert "broker 9" in reassignment.invalid_target([1, 9], brokers, 2, True)
    assert "replication factor" in reassignment.invalid_target([1, 2, 3], brokers, 2, False)
    assert reassignment.invalid_target([3, 1], brokers, 2, False) is None


def test_leadership_moves_into_the_target_only_once_it_is_in_sync():
    moving = reassignment.Reassignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert reassignment.next_leadership(moving, 1, (1, 2, 3), {1, 2, 3, 4}) is None  # 4 catching up
    assert reassignment.next_leadership(moving, 1, (1, 2, 3, 4), {1, 2, 3, 4}) == (4, [2, 3, 4])
    assert reassignment.next_leadership(moving, 2, (1, 2, 3, 4), {1, 2, 3, 4}) == (2, [2, 3, 4])
    assert reassignment.next_leadership(moving, 2, (1, 2, 3, 4), {1, 3, 4}) == (4, [2, 3, 4])
