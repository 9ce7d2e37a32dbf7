"""Kafka 4.2 APIs no client library here drives yet, as raw requests written by kafka-python's
codec (independent of the broker's): DescribeTopicPartitions (KIP-966), UpdateFeatures and the
feature levels in ApiVersions (KIP-584)."""

from __future__ import annotations

import uuid

import pytest

pytest.register_assert_rewrite("clients")
from clients import RawConnection, admin  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from kafkacompat.testing.fuzz import request_class, response_class
from kafkacompat.testing.process import BrokerProcess

DESCRIBE_TOPIC_PARTITIONS = 75
UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 3, 17, 42


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("kafka4-apis") / "data").start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def topics(broker) -> dict[str, int]:
    """Three topics sorting together, with 3, 1 and 2 partitions."""
    prefix = f"dtp-{uuid.uuid4().hex[:6]}"
    wanted = {f"{prefix}-a": 3, f"{prefix}-b": 1, f"{prefix}-c": 2}
    futures = admin(broker).create_topics([NewTopic(name, count, 1) for name, count in wanted.items()])
    for future in futures.values():
        future.result(timeout=15)
    return wanted


def raw_call(broker, api_key: int, version: int, **fields):
    request = request_class(api_key)(version=version, **fields)
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(request, response_class(api_key), version)


def describe_partitions(broker, names, limit=2000, cursor=None):
    cls = request_class(DESCRIBE_TOPIC_PARTITIONS)
    return raw_call(
        broker, DESCRIBE_TOPIC_PARTITIONS, 0, topics=[cls.TopicRequest(name=name) for name in names],
        response_partition_limit=limit,
        cursor=None if cursor is None else cls.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )


def pages(response) -> list[tuple[str, int, list[int]]]:
    return [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics]


def next_cursor(response):
    cursor = response.next_cursor
    return None if cursor is None else (cursor.topic_name, cursor.partition_index)


def test_describe_topic_partitions_in_name_order_with_leaders(broker, topics):
    names = list(topics)
    response = describe_partitions(broker, reversed(names))
    assert pages(response) == [(names[0], 0, [0, 1, 2]), (names[1], 0, [0]), (names[2], 0, [0, 1])]
    assert next_cursor(response) is None
    partition = response.topics[0].partitions[0]
    assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (0, [0], [0])
    assert all(t.topic_id != uuid.UUID(int=0) and not t.is_internal for t in response.topics)


def test_describe_topic_partitions_pages_with_a_cursor(broker, topics):
    names = list(topics)
    seen, cursor = [], None
    for _ in range(6):
        response = describe_partitions(broker, names, limit=2, cursor=cursor)
        seen += [(name, index) for name, _, indexes in pages(response) for index in indexes]
        cursor = next_cursor(response)
        if cursor is None:
            break
    assert seen == [(name, i) for name, count in topics.items() for i in range(count)]
    # The limit reached at a topic's end points at the next topic's first partition.
    first = describe_partitions(broker, names, limit=3)
    assert (pages(first), next_cursor(first)) == ([(names[0], 0, [0, 1, 2])], (names[1], 0))


def test_describe_all_topics_from_a_cursor(broker, topics):
    names = list(topics)
    response = describe_partitions(broker, [], cursor=(names[1], 0))
    listed = [name for name, _, _ in pages(response)]
    assert listed[:2] == names[1:] and all(name >= names[1] for name in listed)


def test_describe_topic_partitions_unknown_and_invalid_names(broker, topics):
    names = list(topics)
    missing = names[0] + "-missing"
    response = describe_partitions(broker, [names[1], missing, "bad/name"])
    assert pages(response) == [("bad/name", INVALID_TOPIC_EXCEPTION, []), (missing, UNKNOWN_TOPIC_OR_PARTITION, []),
                               (names[1], 0, [0])]


@pytest.mark.parametrize("cursor", ["other-topic", "negative-partition"])
def test_describe_topic_partitions_bad_cursor_is_invalid_request(broker, topics, cursor):
    names = list(topics)
    bad = ("zz-not-listed", 0) if cursor == "other-topic" else (names[0], -1)
    response = describe_partitions(broker, names, cursor=bad)
    assert pages(response) == [(name, INVALID_REQUEST, []) for name in names]
