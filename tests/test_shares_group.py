"""Share group membership (kafkacompat/shares/group.py) with the real group coordinator of a
single node, on Trio's MockClock: epochs, the simple assignor across metadata changes, leaving,
session expiry and what is told to the share partitions."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

from kafkacompat.config import BrokerConfig
from kafkacompat.controller.topics import TopicInfo
from kafkacompat.groups.coordinator import GroupCoordinator
from kafkacompat.shares.group import ShareGroupCoordinator
from kafkacompat.shares.sessions import ShareSessionCache
from kafkacompat.wire.errors import ErrorCode, KafkaError
from tests.support import FakeController, NodeMetadata, Topics


def coordinator() -> tuple[ShareGroupCoordinator, Topics, list[tuple[str, str]]]:
    config = BrokerConfig(group_share_session_timeout_ms=45000)
    topics = Topics()
    topics.by_name["t"] = TopicInfo("t", uuid.uuid4(), 2)
    shares = ShareGroupCoordinator(config, GroupCoordinator(config, None, clustered=False),  # type: ignore[arg-type]
                                   NodeMetadata(0, topics, FakeController()))
    removed: list[tuple[str, str]] = []
    shares.member_removed_listeners.append(lambda group, member: removed.append((group, member)))
    return shares, topics, removed


def run(test) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_members_get_every_partition_and_the_epoch_follows_changes():
    async def main():
        shares, topics, _ = coordinator()
        t = topics.by_name["t"]
        a = shares.heartbeat("g", "a", 0, None, ["t"])
        assert (a.error, a.member_epoch, a.assignment) == (0, 1, {t.topic_id: (0, 1)})
        b = shares.heartbeat("g", "b", 0, None, ["t"])
        assert (b.member_epoch, b.assignment) == (2, {t.topic_id: (0, 1)})
        # a's next heartbeat: its epoch moves to the group's, its assignment is unchanged (not sent)
        again = shares.heartbeat("g", "a", 1, None, None)
        assert (again.member_epoch, again.assignment) == (2, None)
        topics.by_name["t"] = TopicInfo("t", t.topic_id, 3)  # partitions added
        grown = shares.heartbeat("g", "a", 2, None, None)
        assert (grown.member_epoch, grown.assignment) == (3, {t.topic_id: (0, 1, 2)})
        assert shares.heartbeat("g", "b", 1, None, None).error == ErrorCode.FENCED_MEMBER_EPOCH

    run(main)


def test_a_member_that_stops_heartbeating_is_removed_after_the_session_timeout():
    async def main():
        shares, _, removed = coordinator()
        shares.heartbeat("g", "a", 0, None, ["t"])
        await trio.sleep(44.9)
        assert shares.expire_members() == 0
        await trio.sleep(0.2)
        assert shares.expire_members() == 1
        assert removed == [("g", "a")]
        assert shares.heartbeat("g", "a", 1, None, None).error == ErrorCode.UNKNOWN_MEMBER_ID
        _, _, group = shares.describe("g")
        assert group is not None and group.state == "Empty"

    run(main)


def test_leaving_tells_the_share_partitions_and_a_full_group_refuses_joins():
    async def main():
        shares, _, removed = coordinator()
        shares.config = BrokerConfig(group_share_max_size=1)
        shares.heartbeat("g", "a", 0, None, ["t"])
        assert shares.heartbeat("g", "b", 0, None, ["t"]).error == ErrorCode.GROUP_MAX_SIZE_REACHED
        left = shares.heartbeat("g", "a", -1, None, None)
        assert (left.error, left.member_epoch, removed) == (0, -1, [("g", "a")])
        assert shares.heartbeat("g", "b", 0, None, ["t"]).error == 0

    run(main)


def test_share_session_epochs():
    cache = ShareSessionCache(max_sessions=1)
    key = (uuid.uuid4(), 0)
    session = cache.open("g", "m", [key])
    assert session.epoch == 1
    cache.update("g", "m", 1, [], [key])
    assert (session.epoch, list(session.partitions)) == (2, [])
    with pytest.raises(KafkaError) as failure:
        cache.update("g", "m", 1, [], [])
    assert failure.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    with pytest.raises(KafkaError) as failure:
        cache.open("g", "other", [])
    assert failure.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED  # the cache is full
    session.epoch = 2**31 - 1
    session.next_epoch()
    assert session.epoch == 1
    cache.close("g", "m")
    with pytest.raises(KafkaError) as failure:
        cache.existing("g", "m")
    assert failure.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
