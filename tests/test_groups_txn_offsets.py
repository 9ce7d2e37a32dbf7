"""Offsets committed inside a transaction (TxnOffsetCommit) in the group coordinator of a real
single-node broker: pending until the producer's marker reaches the group's __consumer_offsets
partition (written by the replica manager's write_txn_markers, as WriteTxnMarkers does), applied
on COMMIT and dropped on ABORT, UNSTABLE_OFFSET_COMMIT for require_stable meanwhile, Kafka's
member and generation checks, and rebuilt with their markers when the partition is loaded."""

from __future__ import annotations

import trio

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.groups.coordinator import CommitPartition
from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.wire.errors import ErrorCode as E

from tests.test_groups_coordinator import Harness, _topic, run_test

PRODUCER, EPOCH = 4242, 3


async def _commit_in_txn(h: Harness, group: str, offset: int, generation: int = -1, member: str = "",
                         producer: int = PRODUCER) -> list[int]:
    return await h.coord.txn_commit_offsets(group, producer, EPOCH, generation, member, None,
                                            [CommitPartition("orders", 0, offset)])


async def _marker(h: Harness, group: str, committed: bool, producer: int = PRODUCER) -> None:
    partition = (OFFSETS_TOPIC, h.coord.partition_for(group))
    written = await h.broker.replicas.write_txn_markers(producer, EPOCH, 0, committed, [partition])
    assert written == {partition: E.NONE}


def _fetch(h: Harness, group: str, stable: bool = False):
    fetched = h.coord.fetch_offsets(group, [("orders", [0])], require_stable=stable)[1][0]
    return fetched.error, fetched.offset


def test_transactional_offsets_become_visible_with_the_commit_marker_only(tmp_path):
    async def body(h: Harness):
        _topic(h)
        h.coord.ensure_offsets_topic()
        assert h.coord.commit_offsets("g", -1, "", None, [CommitPartition("orders", 0, 5)]) == [E.NONE]
        assert await _commit_in_txn(h, "g", 9) == [E.NONE]
        assert _fetch(h, "g") == (E.NONE, 5)  # read_uncommitted-like: the last committed offset
        assert _fetch(h, "g", stable=True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        await _marker(h, "g", committed=True)
        assert _fetch(h, "g", stable=True) == (E.NONE, 9)

        assert await _commit_in_txn(h, "g", 20) == [E.NONE]
        await _marker(h, "g", committed=False)  # aborted: never the group's
        assert _fetch(h, "g", stable=True) == (E.NONE, 9)

    run_test(tmp_path, body)


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one(tmp_path):
    async def body(h: Harness):
        _topic(h)
        h.coord.ensure_offsets_topic()
        assert await _commit_in_txn(h, "g", 7) == [E.NONE]
        assert h.coord.commit_offsets("g", -1, "", None, [CommitPartition("orders", 0, 12)]) == [E.NONE]
        await _marker(h, "g", committed=True)
        assert _fetch(h, "g", stable=True) == (E.NONE, 12)

    run_test(tmp_path, body)


def test_member_and_generation_are_checked_as_kafka(tmp_path):
    async def body(h: Harness):
        _topic(h)
        ids = await h.stable_group("g", ["a"])
        assert await _commit_in_txn(h, "g", 1, generation=1, member=ids["a"]) == [E.NONE]
        assert await _commit_in_txn(h, "g", 1, generation=7, member=ids["a"]) == [E.ILLEGAL_GENERATION]
        assert await _commit_in_txn(h, "g", 1, generation=1, member="stranger") == [E.UNKNOWN_MEMBER_ID]
        # no member and no generation: allowed, as Kafka (a producer outside the group)
        assert await _commit_in_txn(h, "g", 1) == [E.NONE]
        errors = await h.coord.txn_commit_offsets("g", PRODUCER, EPOCH, -1, "", None,
                                                  [CommitPartition("nope", 0, 1)])
        assert errors == [E.UNKNOWN_TOPIC_OR_PARTITION]

    run_test(tmp_path, body)


def test_loading_replays_transactional_offsets_with_their_markers(tmp_path):
    async def write(h: Harness):
        _topic(h)
        h.coord.ensure_offsets_topic()
        assert await _commit_in_txn(h, "committed", 3, producer=1) == [E.NONE]
        await _marker(h, "committed", True, producer=1)
        assert await _commit_in_txn(h, "aborted", 4, producer=2) == [E.NONE]
        await _marker(h, "aborted", False, producer=2)
        assert await _commit_in_txn(h, "open", 5, producer=3) == [E.NONE]

    run_test(tmp_path, write)

    async def reload():
        broker = Broker(BrokerConfig(data_dir=tmp_path / "data"))
        broker.open()  # loads __consumer_offsets
        try:
            coord = broker.groups
            offset = lambda g, stable=False: coord.fetch_offsets(g, [("orders", [0])], stable)[1][0]  # noqa: E731
            assert offset("committed").offset == 3
            assert offset("aborted").offset == -1
            assert (offset("open").offset, offset("open", True).error) == (-1, E.UNSTABLE_OFFSET_COMMIT)
            partition = (OFFSETS_TOPIC, coord.partition_for("open"))
            assert await broker.replicas.write_txn_markers(3, EPOCH, 0, True, [partition]) == {partition: E.NONE}
            assert offset("open", True).offset == 5
        finally:
            broker.close()

    trio.run(reload)
