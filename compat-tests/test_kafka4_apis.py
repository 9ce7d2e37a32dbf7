"""Kafka 4.2 APIs no client library here drives yet, as raw requests written by kafka-python's
codec (independent of the broker's): DescribeTopicPartitions (KIP-966), UpdateFeatures and the
feature levels in ApiVersions (KIP-584)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

pytest.register_assert_rewrite("clients")
from clients import RawConnection, admin  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from cluster import ZooKeeperCluster  # noqa: E402

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


# ---- feature levels: ApiVersions and UpdateFeatures -----------------------------------------

UPDATE_FEATURES, INVALID_UPDATE_VERSION = 57, 95
METADATA_VERSION = "metadata.version"
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@pytest.fixture
def feature_broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    proc.kill()


def metadata_version(broker) -> tuple[tuple[int, int], tuple[int, int], int | None]:
    """metadata.version's supported range, finalized level and epoch, as kafka-python's
    describe_features reads them from ApiVersions."""
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = client.describe_features()[METADATA_VERSION]
    finally:
        client.close()
    return described["supported"], described["finalized"], described["finalized_epoch"]


def update_features(broker, version: int, *updates, validate_only=False):
    """updates: (feature, level, upgrade type); v0 sends the type as AllowDowngrade."""
    cls = request_class(UPDATE_FEATURES)
    keys = [cls.FeatureUpdateKey(feature=name, max_version_level=level, allow_downgrade=kind != UPGRADE,
                                 upgrade_type=kind) for name, level, kind in updates]
    fields = {"validate_only": validate_only} if version >= 1 else {}
    return raw_call(broker, UPDATE_FEATURES, version, timeout_ms=10000, feature_updates=keys, **fields)


def failure(response) -> tuple[int, str]:
    prefix = "The update failed for all features since the following feature had an error: "
    assert response.error_message.startswith(prefix) and response.results == []
    return response.error_code, response.error_message[len(prefix):]


def test_api_versions_advertises_metadata_version_finalized_as_kafka_4_2(feature_broker):
    assert metadata_version(feature_broker) == ((7, 29), (29, 29), 0)


def test_update_features_checks_as_kafka(feature_broker):
    cases = [
        ((METADATA_VERSION, 30, UPGRADE),
         "Invalid update version 30 for feature metadata.version. Local controller 0 only supports versions 7-29"),
        ((METADATA_VERSION, 28, UPGRADE),
         "Invalid update version 28 for feature metadata.version. Can't downgrade the version of this feature "
         "without setting the upgrade type to either safe or unsafe downgrade."),
        ((METADATA_VERSION, -1, SAFE_DOWNGRADE),
         "Invalid update version -1 for feature metadata.version. A feature version cannot be less than 0."),
        ((METADATA_VERSION, 22, SAFE_DOWNGRADE),
         "Invalid metadata.version 22. Refusing to perform the requested downgrade because it might delete "
         "metadata information."),
        ((METADATA_VERSION, 22, UNSAFE_DOWNGRADE),
         "Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this version."),
        ((METADATA_VERSION, 28, 7),
         "Invalid update version 28 for feature metadata.version. The controller does not support the given "
         "upgrade type."),
        (("no.such.feature", 1, UPGRADE),
         "Invalid update version 1 for feature no.such.feature. Local controller 0 does not support this feature."),
        (("no.such.feature", 0, UPGRADE),
         "Invalid update version 0 for feature no.such.feature. Feature no.such.feature not found."),
    ]
    for update, message in cases:
        assert failure(update_features(feature_broker, 1, update)) == (INVALID_UPDATE_VERSION, message)
    # One bad update fails the request: the good one is not applied either.
    both = update_features(feature_broker, 1, (METADATA_VERSION, 28, SAFE_DOWNGRADE), ("no.such.feature", 1, UPGRADE))
    assert failure(both)[0] == INVALID_UPDATE_VERSION
    valid = update_features(feature_broker, 1, (METADATA_VERSION, 28, SAFE_DOWNGRADE), validate_only=True)
    assert (valid.error_code, [(r.feature, r.error_code) for r in valid.results]) == (0, [(METADATA_VERSION, 0)])
    assert metadata_version(feature_broker)[1] == (29, 29)


def test_update_features_changes_levels_persisted_across_restart(feature_broker):
    from kafka import KafkaAdminClient

    downgraded = update_features(feature_broker, 0, (METADATA_VERSION, 28, SAFE_DOWNGRADE))  # AllowDowngrade
    assert (downgraded.error_code, downgraded.error_message) == (0, None)
    assert [(r.feature, r.error_code, r.error_message) for r in downgraded.results] == [(METADATA_VERSION, 0, None)]
    assert metadata_version(feature_broker) == ((7, 29), (28, 28), 1)
    feature_broker.restart()
    assert metadata_version(feature_broker) == ((7, 29), (28, 28), 1)
    client = KafkaAdminClient(bootstrap_servers=feature_broker.bootstrap)
    try:
        assert client.update_features({METADATA_VERSION: 29}) == {METADATA_VERSION: "OK"}
    finally:
        client.close()
    assert metadata_version(feature_broker) == ((7, 29), (29, 29), 2)
    upgraded_again = update_features(feature_broker, 2, (METADATA_VERSION, 29, UPGRADE))
    assert (upgraded_again.error_code, upgraded_again.results) == (0, [])  # v2: no per-feature results


def test_feature_levels_shared_by_a_zookeeper_cluster_in_the_feature_znode(tmp_path):
    from kazoo.client import KazooClient

    with ZooKeeperCluster(tmp_path, brokers=2) as cluster:
        first, second = cluster.brokers[0], cluster.brokers[1]
        assert metadata_version(second)[1] == (29, 29)
        assert update_features(first, 1, (METADATA_VERSION, 26, SAFE_DOWNGRADE)).error_code == 0
        # The second broker hears of the change through its watch on /feature.
        deadline = time.monotonic() + 15
        while metadata_version(second)[1] != (26, 26):
            assert time.monotonic() < deadline, "broker 1 never saw metadata.version 26"
            time.sleep(0.1)
        zk = KazooClient(hosts=f"{cluster.zookeeper.connect}/kafkacompat")
        zk.start(timeout=15)
        try:
            data, _ = zk.get("/feature")
        finally:
            zk.stop()
            zk.close()
        stored = json.loads(data)
        assert (stored["version"], stored["status"]) == (2, 1)
        # Every finalized feature is listed (the others keep their levels).
        assert stored["features"][METADATA_VERSION] == {"min_version_level": 1, "max_version_level": 26}
        assert all(level["max_version_level"] >= 1 for level in stored["features"].values())
