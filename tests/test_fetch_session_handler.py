"""The follower's fetch session handler (Kafka's FetchSessionHandler), sans-IO: which partitions a
request carries, how the epochs go, and how every session error starts over; and, against the
broker's own FetchSessionCache through the real request encoder/decoder, that the leader's
session and the follower's view of it agree."""

from __future__ import annotations

import uuid

from kafkacompat.fetch_sessions import FetchSessionCache
from kafkacompat.replication.fetch_session import FetchSessionHandler, PartitionData
from kafkacompat.replication.fetcher import _by_topic, _forgotten_by_topic, encode_fetch_request
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.fetch import FetchPartitionResult, FetchTopicResult, decode_fetch_request

FOO = uuid.uuid4()
BAR = uuid.uuid4()


def data(offset: int, *, topic_id=FOO, log_start: int = 0, epoch: int = 3, last_epoch: int = 3) -> PartitionData:
    return PartitionData(topic_id, offset, log_start, 1048576, epoch, last_epoch)


def opened(handler: FetchSessionHandler, wanted: dict, session_id: int = 123) -> None:
    plan = handler.build(wanted, uses_topic_ids=True)
    assert plan.full and (plan.session_id, plan.epoch) == (0, 0)
    assert handler.handle_response(ErrorCode.NONE, session_id, set(wanted))


def test_a_session_opens_with_a_full_fetch_and_goes_on_with_only_the_changes():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10), ("foo", 1): data(20), ("bar", 0): data(5, topic_id=BAR)}
    opened(handler, wanted)

    plan = handler.build(wanted, uses_topic_ids=True)
    assert (plan.session_id, plan.epoch, plan.to_send, plan.forgotten) == (123, 1, {}, [])
    assert handler.handle_response(ErrorCode.NONE, 123, set())  # nothing new: no partition in the answer

    changed = {("foo", 0): data(15), ("foo", 1): data(20, log_start=4), ("bar", 0): data(5, topic_id=BAR, epoch=4)}
    plan = handler.build(changed, uses_topic_ids=True)
    assert plan.epoch == 2 and plan.to_send == changed and plan.forgotten == []
    assert handler.handle_response(ErrorCode.NONE, 123, {("foo", 0)})

    # foo-1 left out (throttled or backing off), foo-2 new
    plan = handler.build({("foo", 0): data(15), ("bar", 0): data(5, topic_id=BAR, epoch=4),
                          ("foo", 2): data(0)}, uses_topic_ids=True)
    assert plan.epoch == 3
    assert plan.to_send == {("foo", 2): data(0)}
    assert plan.forgotten == [("foo", FOO, 1)]
    assert set(handler.session) == {("foo", 0), ("bar", 0), ("foo", 2)}


def test_the_epoch_wraps_to_one_as_kafkas():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted)
    handler.epoch = 0x7FFFFFFF
    assert handler.build(wanted, uses_topic_ids=True).epoch == 0x7FFFFFFF
    assert handler.handle_response(ErrorCode.NONE, 123, set())
    assert handler.build(wanted, uses_topic_ids=True).epoch == 1


def test_session_id_not_found_starts_a_new_session_from_scratch():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted)
    handler.build(wanted, uses_topic_ids=True)
    assert not handler.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, set())
    plan = handler.build(wanted, uses_topic_ids=True)
    assert (plan.session_id, plan.epoch, plan.to_send) == (0, 0, wanted)


def test_other_session_errors_close_the_session_and_ask_for_a_new_one():
    for error in (ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR):
        handler = FetchSessionHandler()
        wanted = {("foo", 0): data(10)}
        opened(handler, wanted)
        handler.build(wanted, uses_topic_ids=True)
        assert not handler.handle_response(error, 0, set())
        plan = handler.build(wanted, uses_topic_ids=True)
        assert (plan.session_id, plan.epoch, plan.to_send) == (123, 0, wanted)  # closes 123, opens another


def test_a_lost_connection_closes_the_session_on_the_next_request():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted)
    handler.build(wanted, uses_topic_ids=True)
    handler.handle_error()
    plan = handler.build(wanted, uses_topic_ids=True)
    assert (plan.session_id, plan.epoch, plan.to_send) == (123, 0, wanted)
    assert handler.handle_response(ErrorCode.NONE, 456, set(wanted))
    assert (handler.session_id, handler.epoch) == (456, 1)


def test_no_slot_on_the_leader_means_full_fetches_go_on():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted, session_id=0)
    plan = handler.build(wanted, uses_topic_ids=True)
    assert (plan.session_id, plan.epoch, plan.to_send) == (0, 0, wanted)


def test_an_incremental_answer_closing_the_session_resets():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted)
    handler.build(wanted, uses_topic_ids=True)
    assert handler.handle_response(ErrorCode.NONE, 0, set())
    assert handler.build(wanted, uses_topic_ids=True).full


def test_an_answer_naming_partitions_outside_the_session_is_not_used():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted)
    handler.build(wanted, uses_topic_ids=True)
    assert not handler.handle_response(ErrorCode.NONE, 123, {("foo", 7)})
    plan = handler.build(wanted, uses_topic_ids=True)
    assert (plan.session_id, plan.epoch) == (123, 0)
    assert not handler.handle_response(ErrorCode.NONE, 0, {("foo", 0), ("foo", 7)})  # a full one too
    assert handler.build(wanted, uses_topic_ids=True).full


def test_an_empty_throttled_full_answer_is_not_used():
    handler = FetchSessionHandler()
    handler.build({("foo", 0): data(10)}, uses_topic_ids=True)
    assert not handler.handle_response(ErrorCode.NONE, 0, set(), throttle_time_ms=100)
    assert handler.build({("foo", 0): data(10)}, uses_topic_ids=True).full


def test_a_recreated_topic_replaces_its_partitions():
    handler = FetchSessionHandler()
    opened(handler, {("foo", 0): data(10)})
    new_id = uuid.uuid4()
    plan = handler.build({("foo", 0): data(0, topic_id=new_id)}, uses_topic_ids=True)
    assert plan.epoch == 1
    assert plan.to_send == {("foo", 0): data(0, topic_id=new_id)}
    assert plan.forgotten == [("foo", FOO, 0)]


def test_switching_between_topic_ids_and_names_replaces_the_session():
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    opened(handler, wanted)
    plan = handler.build({("foo", 0): data(10, topic_id=None)}, uses_topic_ids=False)
    assert (plan.session_id, plan.epoch) == (123, 0)


# -- against the leader's FetchSessionCache, through the wire ---------------------------------------


class Leader:
    """The broker's fetch session cache behind the real request decoder; every partition's
    high watermark is what the test sets."""

    def __init__(self, slots: int = 10) -> None:
        self.cache = FetchSessionCache(slots, 60000)
        self.high_watermarks: dict[tuple[uuid.UUID, int], int] = {}
        self.seen: list[dict[tuple[uuid.UUID, int], int]] = []  # the fetch offsets each request read at

    def fetch(self, handler: FetchSessionHandler, wanted: dict) -> tuple[bool, set]:
        plan = handler.build(wanted, uses_topic_ids=True)
        body = encode_fetch_request(17, replica_id=2, replica_epoch=-1, max_wait_ms=0, min_bytes=1,
                                    max_bytes=1 << 20, topics=_by_topic(plan.to_send), session_id=plan.session_id,
                                    session_epoch=plan.epoch, forgotten=_forgotten_by_topic(plan.forgotten))
        request = decode_fetch_request(memoryview(body), 17)
        context = self.cache.new_context(17, request, lambda topic_id: {FOO: "foo", BAR: "bar"}[topic_id])
        if context.error:
            return handler.handle_response(context.error, 0, set()), set()
        self.seen.append({(t.topic_id, p.partition): p.fetch_offset for t in context.topics for p in t.partitions})
        results = [FetchTopicResult(t.name, t.topic_id, [
            FetchPartitionResult(p.partition, high_watermark=self.high_watermarks.get((t.topic_id, p.partition), 0),
                                 log_start_offset=0) for p in t.partitions]) for t in context.topics]
        error, session_id, answered = context.respond(results)
        names = {FOO: "foo", BAR: "bar"}
        keys = {(names[t.topic_id], p.index) for t in answered for p in t.partitions}
        return handler.handle_response(error, session_id, keys), keys


def test_the_leaders_session_follows_the_handlers():
    leader = Leader()
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10), ("foo", 1): data(20), ("bar", 0): data(5, topic_id=BAR)}
    assert leader.fetch(handler, wanted) == (True, set(wanted))
    assert handler.epoch == 1 and handler.session_id in leader.cache.sessions

    assert leader.fetch(handler, wanted) == (True, set())  # nothing changed: an empty answer
    assert leader.seen[-1] == {(FOO, 0): 10, (FOO, 1): 20, (BAR, 0): 5}  # yet every partition was read

    leader.high_watermarks[(FOO, 1)] = 30
    wanted[("foo", 0)] = data(12)
    del wanted[("bar", 0)]
    assert leader.fetch(handler, wanted) == (True, {("foo", 1)})
    assert leader.seen[-1] == {(FOO, 0): 12, (FOO, 1): 20}
    assert leader.cache.requests[("follower", "incremental")] == 2


def test_an_evicted_session_is_replaced_by_a_full_fetch():
    leader = Leader(slots=1)
    handler = FetchSessionHandler()
    wanted = {("foo", 0): data(10)}
    leader.fetch(handler, wanted)
    leader.cache.sessions.clear()  # evicted (by another follower, or the leader restarted)
    assert leader.fetch(handler, wanted) == (False, set())
    assert leader.fetch(handler, wanted) == (True, {("foo", 0)})
    assert handler.session_id in leader.cache.sessions
    assert leader.fetch(handler, wanted) == (True, set())
