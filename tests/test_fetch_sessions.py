"""The fetch session cache's eviction rules (Kafka's FetchSessionCache), on a clock the test moves:
which session a new one may push out depends on ages the compat tests cannot pin down."""

from __future__ import annotations

from kafkacompat.fetch_sessions import INVALID_SESSION_ID, FetchSessionCache
from kafkacompat.wire.fetch import (
    FetchPartitionRequest,
    FetchPartitionResult,
    FetchRequestData,
    FetchTopicRequest,
    FetchTopicResult,
)

EVICTION_MS = 1000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def open_session(cache: FetchSessionCache, partitions: int, *, follower: bool = False) -> int:
    request = FetchRequestData(replica_id=1 if follower else -1, session_id=0, session_epoch=0, topics=[
        FetchTopicRequest("t", None, [FetchPartitionRequest(p) for p in range(partitions)])])
    context = cache.new_context(12, request, lambda topic_id: None)
    answered = [FetchTopicResult("t", None, [FetchPartitionResult(p) for p in range(partitions)])]
    return context.respond(answered)[1]


def touch(cache: FetchSessionCache, session_id: int) -> None:
    session = cache.sessions[session_id]
    request = FetchRequestData(session_id=session_id, session_epoch=session.epoch)
    assert cache.new_context(12, request, lambda topic_id: None).error == 0


def test_a_consumer_evicts_only_an_older_smaller_consumer_session():
    clock = Clock()
    cache = FetchSessionCache(1, EVICTION_MS, clock)
    small = open_session(cache, 2)
    assert open_session(cache, 5) == INVALID_SESSION_ID  # the other is too young to be evicted
    clock.now += 1.5
    touch(cache, small)  # old now, but in use: not stale
    assert open_session(cache, 2) == INVALID_SESSION_ID  # not larger than it
    bigger = open_session(cache, 3)
    assert bigger != INVALID_SESSION_ID and list(cache.sessions) == [bigger] and cache.evictions == 1


def test_a_session_is_old_enough_to_evict_as_of_its_last_use():
    clock = Clock()
    cache = FetchSessionCache(1, EVICTION_MS, clock)
    small = open_session(cache, 2)
    clock.now += 0.6
    touch(cache, small)  # used while still young
    clock.now += 0.6  # created 1.2 s ago, used 0.6 s ago
    assert open_session(cache, 3) == INVALID_SESSION_ID
    touch(cache, small)
    assert open_session(cache, 3) != INVALID_SESSION_ID and small not in cache.sessions


def test_a_stale_session_goes_first_whatever_its_size():
    clock = Clock()
    cache = FetchSessionCache(2, EVICTION_MS, clock)
    stale, used = open_session(cache, 50), open_session(cache, 50)
    clock.now += 0.8
    touch(cache, used)
    clock.now += 0.5  # `stale` unused for 1.3 s, `used` for 0.5 s
    newcomer = open_session(cache, 1)
    assert set(cache.sessions) == {used, newcomer}


def test_followers_sessions_are_privileged():
    clock = Clock()
    cache = FetchSessionCache(1, EVICTION_MS, clock)
    follower = open_session(cache, 1, follower=True)
    clock.now += 0.5
    touch(cache, follower)
    assert open_session(cache, 100) == INVALID_SESSION_ID  # a consumer cannot push out a young follower
    cache = FetchSessionCache(1, EVICTION_MS, clock)
    consumer = open_session(cache, 100)
    follower = open_session(cache, 1, follower=True)  # a follower may push out any consumer
    assert follower != INVALID_SESSION_ID and consumer not in cache.sessions


def test_no_slots_means_no_sessions():
    cache = FetchSessionCache(0, EVICTION_MS, Clock())
    assert open_session(cache, 1) == INVALID_SESSION_ID and not cache.sessions
