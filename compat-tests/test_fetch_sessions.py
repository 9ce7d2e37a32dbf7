"""Fetch sessions (KIP-227) against a real broker: raw Fetch requests for each rule, and
kafka-python's consumer, which opens a session and then sends incremental fetches."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from clients import Msg, RawConnection, confluent_send, create_topic
from kafkacompat.testing.process import BrokerProcess

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
BY_NAME, BY_ID = 12, 13


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("sessions") / "data").start()
    yield proc
    proc.stop()


def topic_with(broker, partitions: int) -> str:
    name = f"sessions-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def topic_id(conn: RawConnection, name: str) -> uuid.UUID:
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                              allow_auto_topic_creation=False)
    answer = conn.call(request, MetadataResponse, 12)
    return answer.topics[0].topic_id


def fetch(conn: RawConnection, version: int, session_id: int, epoch: int, partitions: dict[int, int], *,
          topic: str = "", topic_uuid: uuid.UUID | None = None, forget: list[int] = (), max_wait_ms: int = 0):
    """``partitions``: index -> fetch offset. Returns (error, session id, {index: (error, hw, values)})."""
    def key():
        return {"topic_id": topic_uuid} if version >= BY_ID else {"topic": topic}

    parts = [FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20,
                                                   current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
             for p, offset in partitions.items()]
    topics = [FetchRequest.FetchTopic(partitions=parts, **key())] if parts else []
    forgotten = ([FetchRequest.ForgottenTopic(partitions=list(forget), **key())]
                 if forget else [])
    request = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
                           session_id=session_id, session_epoch=epoch, topics=topics,
                           forgotten_topics_data=forgotten, rack_id="")
    answer = conn.call(request, FetchResponse, version)
    results = {}
    for topic_answer in answer.responses:
        for p in topic_answer.partitions:
            results[p.partition_index] = (p.error_code, p.high_watermark, values_of(p.records))
    return answer.error_code, answer.session_id, results


def values_of(records) -> list[bytes]:
    from kafka.record import MemoryRecords

    if not records:
        return []
    batches = MemoryRecords(bytes(records))
    out = []
    while (batch := batches.next_batch()) is not None:
        out.extend(record.value for record in batch)
    return out


def produce(broker, topic: str, partition: int, *values: bytes) -> None:
    confluent_send(broker.bootstrap, topic, [Msg(value, partition=partition) for value in values])


def test_an_incremental_fetch_answers_only_what_changed(broker):
    topic = topic_with(broker, 3)
    produce(broker, topic, 0, b"a0")
    with RawConnection(broker.bootstrap) as conn:
        error, session, results = fetch(conn, BY_NAME, 0, 0, {0: 0, 1: 0, 2: 0}, topic=topic)
        assert error == 0 and session != 0
        assert sorted(results) == [0, 1, 2] and results[0][2] == [b"a0"]

        # nothing new: every partition left out (the fetch waited its max_wait for data)
        assert fetch(conn, BY_NAME, session, 1, {0: 1}, topic=topic, max_wait_ms=50) == (0, session, {})

        produce(broker, topic, 2, b"c0", b"c1")
        error, same, results = fetch(conn, BY_NAME, session, 2, {}, topic=topic)
        assert (error, same) == (0, session)
        assert results == {2: (0, 2, [b"c0", b"c1"])}  # only the partition that moved

        # the session remembers partition 2's fetch offset was 0 until the client says otherwise
        error, _, results = fetch(conn, BY_NAME, session, 3, {2: 2}, topic=topic, max_wait_ms=50)
        assert (error, results) == (0, {})


def test_forgotten_partitions_leave_the_session_and_an_empty_session_ends(broker):
    topic = topic_with(broker, 2)
    with RawConnection(broker.bootstrap) as conn:
        _, session, _ = fetch(conn, BY_NAME, 0, 0, {0: 0, 1: 0}, topic=topic)
        assert fetch(conn, BY_NAME, session, 1, {}, topic=topic, forget=[1], max_wait_ms=10)[0] == 0
        produce(broker, topic, 1, b"forgotten")
        produce(broker, topic, 0, b"kept")
        assert fetch(conn, BY_NAME, session, 2, {}, topic=topic)[2] == {0: (0, 1, [b"kept"])}
        # forgetting the last partition ends the session: the next incremental fetch finds none
        fetch(conn, BY_NAME, session, 3, {}, topic=topic, forget=[0], max_wait_ms=10)
        assert fetch(conn, BY_NAME, session, 4, {}, topic=topic)[:2] == (FETCH_SESSION_ID_NOT_FOUND, 0)


def test_session_errors(broker):
    topic = topic_with(broker, 1)
    with RawConnection(broker.bootstrap) as conn:
        assert fetch(conn, BY_NAME, 123456, 1, {}, topic=topic) == (FETCH_SESSION_ID_NOT_FOUND, 0, {})
        _, session, _ = fetch(conn, BY_NAME, 0, 0, {0: 0}, topic=topic)
        # epochs go 1, 2, ...: a repeated or skipped one is refused, and the session stays
        assert fetch(conn, BY_NAME, session, 5, {}, topic=topic) == (INVALID_FETCH_SESSION_EPOCH, 0, {})
        assert fetch(conn, BY_NAME, session, 1, {}, topic=topic, max_wait_ms=10)[0] == 0
        assert fetch(conn, BY_NAME, session, 1, {}, topic=topic)[0] == INVALID_FETCH_SESSION_EPOCH
        # a session made by name cannot go on with topic ids (Fetch v13+)
        assert fetch(conn, BY_ID, session, 2, {}, topic_uuid=topic_id(conn, topic))[0] == FETCH_SESSION_TOPIC_ID_ERROR
        # epoch -1 closes it, and that fetch is answered in full without a session
        produce(broker, topic, 0, b"x")
        assert fetch(conn, BY_NAME, session, -1, {0: 0}, topic=topic) == (0, 0, {0: (0, 1, [b"x"])})
        assert fetch(conn, BY_NAME, session, 2, {}, topic=topic)[0] == FETCH_SESSION_ID_NOT_FOUND


def test_sessions_by_topic_id(broker):
    topic = topic_with(broker, 2)
    with RawConnection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        _, session, results = fetch(conn, BY_ID, 0, 0, {0: 0, 1: 0}, topic_uuid=tid)
        assert session != 0 and sorted(results) == [0, 1]
        produce(broker, topic, 1, b"by id")
        assert fetch(conn, BY_ID, session, 1, {}, topic_uuid=tid) == (0, session, {1: (0, 1, [b"by id"])})
        assert fetch(conn, BY_NAME, session, 2, {}, topic=topic)[0] == FETCH_SESSION_TOPIC_ID_ERROR


def test_a_full_cache_gives_no_session_then_evicts_a_stale_one(tmp_path):
    proc = BrokerProcess(tmp_path / "data", extra_args=[
        "--set", "max.incremental.fetch.session.cache.slots=1",
        "--set", "min.incremental.fetch.session.eviction.ms=500"]).start()
    try:
        topic = topic_with(proc, 1)
        with RawConnection(proc.bootstrap) as conn:
            _, first, _ = fetch(conn, BY_NAME, 0, 0, {0: 0}, topic=topic)
            # the only slot is taken by a session used just now, of the same size: none for this one
            assert fetch(conn, BY_NAME, 0, 0, {0: 0}, topic=topic)[:2] == (0, 0)
            time.sleep(1.0)  # unused for longer than the eviction time: a new session may take its slot
            _, second, _ = fetch(conn, BY_NAME, 0, 0, {0: 0}, topic=topic)
            assert second not in (0, first)
            assert fetch(conn, BY_NAME, first, 1, {}, topic=topic)[0] == FETCH_SESSION_ID_NOT_FOUND
            assert fetch(conn, BY_NAME, second, 1, {}, topic=topic, max_wait_ms=10)[0] == 0
    finally:
        proc.stop()


def test_kafka_python_consumes_many_partitions_through_one_session(broker):
    from kafka import KafkaConsumer, TopicPartition

    topic = topic_with(broker, 20)
    sent = {p: [f"p{p}-{i}".encode() for i in range(3)] for p in range(20)}
    for p, values in sent.items():
        produce(broker, topic, p, *values)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100, api_version=(4, 0))
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(20)])
        got: dict[int, list[bytes]] = {p: [] for p in range(20)}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 60:
            assert time.monotonic() < deadline, got
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend(r.value for r in records)
        more = {p: [f"later-{p}".encode()] for p in (3, 17)}
        for p, values in more.items():
            produce(broker, topic, p, *values)
        while len(got[3]) < 4 or len(got[17]) < 4:
            assert time.monotonic() < deadline, got
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend(r.value for r in records)
        assert got == {p: sent[p] + more.get(p, []) for p in range(20)}
        handlers = consumer._fetcher._session_handlers  # the client really used a session
        assert handlers and all(h.next_metadata.session_id != 0 for h in handlers.values())
        assert all(h.next_metadata.epoch > 1 for h in handlers.values())
    finally:
        consumer.close()
