"""CreateTopics, DeleteTopics and CreatePartitions with real admin clients (confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient) and, for what clients never send, raw requests."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

pytest.register_assert_rewrite("clients")
from clients import RawConnection, admin  # noqa: E402

from clients import request_class, response_class  # noqa: E402

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
TIMEOUT = 15


def outcome(future) -> int:
    """The Kafka error code of an admin future (0 when it succeeded)."""
    try:
        future.result(timeout=TIMEOUT)
    except KafkaException as exc:
        return exc.args[0].code()
    return KafkaError.NO_ERROR


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT)
    return raised.value.args[0]


def create(broker, *topics: NewTopic, **options) -> dict[str, int]:
    futures = admin(broker).create_topics(list(topics), **options)
    return {name: outcome(future) for name, future in futures.items()}


def partition_count(broker, topic: str) -> int | None:
    metadata = admin(broker).list_topics(timeout=TIMEOUT)
    found = metadata.topics.get(topic)
    return None if found is None or found.error is not None else len(found.partitions)


def partition_dirs(broker, topic: str) -> list[str]:
    return sorted(p.name for p in broker.data_dir.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic)


def raw_call(broker, api_key: int, version: int, **fields):
    request = request_class(api_key)(version=version, **fields)
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(request, response_class(api_key), version)


def creatable(name: str, partitions: int = 1, replication: int = 1, assignments=(), configs=()):
    cls = request_class(CREATE_TOPICS).CreatableTopic
    return cls(
        name=name, num_partitions=partitions, replication_factor=replication,
        assignments=[cls.CreatableReplicaAssignment(partition_index=i, broker_ids=ids) for i, ids in assignments],
        configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in configs],
    )


# ---- CreateTopics ------------------------------------------------------------------------------


def test_create_topic_with_partitions_and_configs(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 3, 1, config={"cleanup.policy": "compact"})) == {topic_name: 0}
    assert partition_count(broker, topic_name) == 3
    assert partition_dirs(broker, topic_name) == [f"{topic_name}-{i}" for i in range(3)]


def test_create_topic_response_v7_carries_id_counts_and_configs(broker, topic_name):
    topic = creatable(topic_name, 2, 1, configs=[("retention.ms", "1234")])
    response = raw_call(broker, CREATE_TOPICS, 7, topics=[topic], timeout_ms=10000, validate_only=False)
    (result,) = response.topics
    assert (result.error_code, result.error_message) == (0, None)
    assert result.topic_id is not None and result.topic_id.int != 0
    assert (result.num_partitions, result.replication_factor) == (2, 1)
    configs = {c.name: c for c in result.configs}
    assert configs["retention.ms"].value == "1234" and configs["retention.ms"].config_source == 1  # TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824" and configs["segment.bytes"].config_source == 5  # DEFAULT
    assert not any(c.read_only or c.is_sensitive for c in result.configs)


def test_default_partitions_and_replication_factor(broker_factory, topic_name):
    broker = broker_factory("--set", "num.partitions=4")
    assert create(broker, NewTopic(topic_name, -1, -1)) == {topic_name: 0}
    assert partition_count(broker, topic_name) == 4


def test_topic_already_exists(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    error = error_of(admin(broker).create_topics([NewTopic(topic_name, 1, 1)])[topic_name])
    assert error.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert error.str() == f"Topic '{topic_name}' already exists."


def test_zero_partitions(broker, topic_name):
    error = error_of(admin(broker).create_topics([NewTopic(topic_name, 0, 1)])[topic_name])
    assert error.code() == KafkaError.INVALID_PARTITIONS
    assert error.str() == "Number of partitions was set to an invalid non-positive value."
    assert partition_count(broker, topic_name) is None


def test_negative_partitions(broker, topic_name):
    # librdkafka refuses counts below -1 itself, so send the request by hand.
    response = raw_call(broker, CREATE_TOPICS, 7, topics=[creatable(topic_name, -2, 1)], timeout_ms=10000,
                        validate_only=False)
    assert response.topics[0].error_code == KafkaError.INVALID_PARTITIONS


def test_replication_factor_larger_than_the_cluster(broker, topic_name):
    error = error_of(admin(broker).create_topics([NewTopic(topic_name, 1, 3)])[topic_name])
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "replication factor of 3 cannot be reached because only 1 broker(s) are registered" in error.str()


@pytest.mark.parametrize("replication", [0, -2])
def test_invalid_replication_factor(broker, topic_name, replication):
    response = raw_call(broker, CREATE_TOPICS, 5, topics=[creatable(topic_name, 1, replication)], timeout_ms=10000,
                        validate_only=False)
    assert response.topics[0].error_code == KafkaError.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("config, fragment", [
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"retention.ms": "soon"}, "retention.ms"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"segment.bytes": "10"}, "segment.bytes"),
])
def test_invalid_topic_config(broker, topic_name, config, fragment):
    error = error_of(admin(broker).create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name])
    assert error.code() == KafkaError.INVALID_CONFIG
    assert fragment in error.str()
    assert partition_count(broker, topic_name) is None


@pytest.mark.parametrize("name", ["has space", "x" * 250, "..", "bad/slash"])
def test_invalid_topic_name(broker, name):
    assert create(broker, NewTopic(name, 1, 1)) == {name: KafkaError.TOPIC_EXCEPTION}


def test_names_colliding_on_dot_and_underscore(broker):
    suffix = uuid.uuid4().hex[:8]
    assert create(broker, NewTopic(f"col.{suffix}", 1, 1)) == {f"col.{suffix}": 0}
    error = error_of(admin(broker).create_topics([NewTopic(f"col_{suffix}", 1, 1)])[f"col_{suffix}"])
    assert error.code() == KafkaError.TOPIC_EXCEPTION
    assert f"collides with existing topic: col.{suffix}" in error.str()


def test_topic_named_twice_in_one_request(broker, topic_name):
    other = topic_name + "-other"
    topics = [creatable(topic_name), creatable(other), creatable(topic_name)]
    response = raw_call(broker, CREATE_TOPICS, 7, topics=topics, timeout_ms=10000, validate_only=False)
    results = {r.name: (r.error_code, r.error_message) for r in response.topics}
    assert results == {other: (0, None), topic_name: (KafkaError.INVALID_REQUEST, "Duplicate topic name.")}
    assert partition_count(broker, topic_name) is None


def test_validate_only_checks_everything_and_creates_nothing(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 2, 1), validate_only=True) == {topic_name: 0}
    assert create(broker, NewTopic(topic_name, 2, 3), validate_only=True) == {
        topic_name: KafkaError.INVALID_REPLICATION_FACTOR}
    assert partition_count(broker, topic_name) is None
    assert partition_dirs(broker, topic_name) == []


def test_manual_replica_assignment(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 2, replica_assignment=[[0], [0]])) == {topic_name: 0}
    assert partition_count(broker, topic_name) == 2


def test_manual_assignment_to_an_unknown_broker(broker, topic_name):
    error = error_of(admin(broker).create_topics([NewTopic(topic_name, 2, replica_assignment=[[0], [7]])])[topic_name])
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "broker 7, but no such broker is registered" in error.str()


def test_manual_assignment_checks(broker, topic_name):
    cases = {
        f"{topic_name}-gap": (creatable(f"{topic_name}-gap", -1, -1, assignments=[(0, [0]), (2, [0])]),
                              KafkaError.INVALID_REPLICA_ASSIGNMENT),
        f"{topic_name}-counts": (creatable(f"{topic_name}-counts", 2, -1, assignments=[(0, [0])]),
                                 KafkaError.INVALID_REQUEST),
        f"{topic_name}-repeat": (creatable(f"{topic_name}-repeat", -1, -1, assignments=[(0, [0, 0])]),
                                 KafkaError.INVALID_REPLICA_ASSIGNMENT),
        f"{topic_name}-empty": (creatable(f"{topic_name}-empty", -1, -1, assignments=[(0, [])]),
                                KafkaError.INVALID_REPLICA_ASSIGNMENT),
    }
    response = raw_call(broker, CREATE_TOPICS, 7, topics=[topic for topic, _ in cases.values()], timeout_ms=10000,
                        validate_only=False)
    assert {r.name: r.error_code for r in response.topics} == {name: code for name, (_, code) in cases.items()}
    assert all(r.error_message for r in response.topics)


def test_kafka_python_create_topics_reports_configs(broker, topic_name):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import TopicAlreadyExistsError

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        response = client.create_topics([KNewTopic(topic_name, 2, 1, topic_configs={"cleanup.policy": "compact"})])
        (result,) = response["topics"]
        assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 2, 1)
        assert result["configs"]["cleanup.policy"]["value"] == "compact"
        assert result["configs"]["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([KNewTopic(topic_name, 2, 1)])
    finally:
        client.close()


def test_topics_and_configs_survive_a_restart(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 2, 1, config={"retention.ms": "99000"})) == {topic_name: 0}
    broker.restart()
    assert partition_count(broker, topic_name) == 2
    # Topics live in the data dir's embedded metadata store, in ZooKeeper's layout.
    nodes = json.loads((broker.data_dir / "metadata-store.json").read_text())["nodes"]
    config = json.loads(nodes[f"/config/topics/{topic_name}"]["data"])
    assert config["config"] == {"retention.ms": "99000"}
    assignment = json.loads(nodes[f"/brokers/topics/{topic_name}"]["data"])["partitions"]
    assert assignment == {"0": [0], "1": [0]}


# ---- DeleteTopics ------------------------------------------------------------------------------


def test_delete_topic_removes_its_files(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 3, 1)) == {topic_name: 0}
    assert len(partition_dirs(broker, topic_name)) == 3
    futures = admin(broker).delete_topics([topic_name], operation_timeout=10)
    assert outcome(futures[topic_name]) == 0
    assert partition_dirs(broker, topic_name) == []
    assert partition_count(broker, topic_name) is None
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}  # the name is free again


def test_delete_unknown_topic(broker, topic_name):
    futures = admin(broker).delete_topics([topic_name], operation_timeout=10)
    assert outcome(futures[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_disabled(broker_factory, topic_name):
    broker = broker_factory("--set", "delete.topic.enable=false")
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    futures = admin(broker).delete_topics([topic_name], operation_timeout=10)
    assert outcome(futures[topic_name]) == KafkaError.TOPIC_DELETION_DISABLED
    assert partition_count(broker, topic_name) == 1
    response = raw_call(broker, DELETE_TOPICS, 2, topic_names=[topic_name], timeout_ms=10000)
    assert response.responses[0].error_code == KafkaError.INVALID_REQUEST  # before v3 Kafka has no better code


def test_delete_by_topic_id(broker, topic_name):
    created = raw_call(broker, CREATE_TOPICS, 7, topics=[creatable(topic_name)], timeout_ms=10000, validate_only=False)
    topic_id = created.topics[0].topic_id
    unknown_id = uuid.uuid4()
    state = request_class(DELETE_TOPICS).DeleteTopicState
    response = raw_call(broker, DELETE_TOPICS, 6, timeout_ms=10000,
                        topics=[state(name=None, topic_id=topic_id), state(name=None, topic_id=unknown_id)])
    results = {r.topic_id: (r.name, r.error_code) for r in response.responses}
    assert results == {topic_id: (topic_name, 0), unknown_id: (None, KafkaError.UNKNOWN_TOPIC_ID)}
    assert partition_dirs(broker, topic_name) == []


def test_kafka_python_delete_topics(broker, topic_name):
    from kafka import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        response = client.delete_topics([topic_name])
        assert [(r["name"], r["error_code"]) for r in response["topics"]] == [(topic_name, 0)]
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topics([topic_name])
    finally:
        client.close()
    assert partition_dirs(broker, topic_name) == []


def test_kafka_python_as_a_kafka_0_10_1_client_creates_and_deletes(broker, topic_name):
    """An admin client of Kafka 0.10.1's era sends CreateTopics v0 and DeleteTopics v0 (served until Kafka 4)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import IncompatibleBrokerVersion, TopicAlreadyExistsError, UnknownTopicOrPartitionError

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1))
    try:
        with pytest.raises(IncompatibleBrokerVersion):  # the client holds to Kafka 0.10.1's CreateTopics v0
            client.create_topics([KNewTopic(topic_name, 2, 1)], validate_only=True)
        response = client.create_topics([KNewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "5000"})])
        assert [(r["name"], r["error_code"]) for r in response["topics"]] == [(topic_name, 0)]
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([KNewTopic(topic_name, 2, 1)])
        assert partition_count(broker, topic_name) == 2
        response = client.delete_topics([topic_name])
        assert [(r["name"], r["error_code"]) for r in response["topics"]] == [(topic_name, 0)]
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topics([topic_name])
    finally:
        client.close()
    assert partition_dirs(broker, topic_name) == []


@pytest.mark.parametrize("version", [0, 1])
def test_create_topics_v0_v1_raw(broker, topic_name, version):
    """v0 has neither validate_only nor error messages; v1 adds both (validate_only creates nothing)."""
    fields = {"validate_only": True} if version == 1 else {}
    response = raw_call(broker, CREATE_TOPICS, version, topics=[creatable(topic_name, 3)], timeout_ms=10000, **fields)
    assert [(r.name, r.error_code) for r in response.topics] == [(topic_name, 0)]
    assert partition_count(broker, topic_name) == (None if version == 1 else 3)
    again = raw_call(broker, CREATE_TOPICS, version, topics=[creatable(topic_name, 3), creatable("bad/name")],
                     timeout_ms=10000)
    codes = {r.name: r.error_code for r in again.topics}
    if version == 0:
        assert codes == {topic_name: KafkaError.TOPIC_ALREADY_EXISTS, "bad/name": KafkaError.TOPIC_EXCEPTION}
    else:
        assert codes == {topic_name: 0, "bad/name": KafkaError.TOPIC_EXCEPTION}
        assert all(r.error_message for r in again.topics if r.error_code)


def test_delete_topics_v0_raw(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    response = raw_call(broker, DELETE_TOPICS, 0, topic_names=[topic_name, topic_name + "-missing"], timeout_ms=10000)
    assert {r.name: r.error_code for r in response.responses} == {
        topic_name: 0, topic_name + "-missing": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert partition_dirs(broker, topic_name) == []


# ---- CreatePartitions --------------------------------------------------------------------------


def test_create_partitions(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    futures = admin(broker).create_partitions([NewPartitions(topic_name, 3)])
    assert outcome(futures[topic_name]) == 0
    assert partition_count(broker, topic_name) == 3
    assert partition_dirs(broker, topic_name) == [f"{topic_name}-{i}" for i in range(3)]


@pytest.mark.parametrize("count, message", [
    (2, "Topic already has 2 partition(s)."),
    (1, "The topic {topic} currently has 2 partition(s); 1 would not be an increase."),
])
def test_create_partitions_must_increase(broker, topic_name, count, message):
    assert create(broker, NewTopic(topic_name, 2, 1)) == {topic_name: 0}
    error = error_of(admin(broker).create_partitions([NewPartitions(topic_name, count)])[topic_name])
    assert error.code() == KafkaError.INVALID_PARTITIONS
    assert error.str() == message.format(topic=topic_name)


def test_create_partitions_for_unknown_topic(broker, topic_name):
    futures = admin(broker).create_partitions([NewPartitions(topic_name, 3)])
    assert outcome(futures[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_validate_only(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    futures = admin(broker).create_partitions([NewPartitions(topic_name, 4)], validate_only=True)
    assert outcome(futures[topic_name]) == 0
    assert partition_count(broker, topic_name) == 1


def test_create_partitions_with_assignments(broker, topic_name):
    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    bad = admin(broker).create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[0], [5]])])
    assert outcome(bad[topic_name]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    short = admin(broker).create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[0]])])
    assert outcome(short[topic_name]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    good = admin(broker).create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[0], [0]])])
    assert outcome(good[topic_name]) == 0
    assert partition_count(broker, topic_name) == 3


def test_kafka_python_create_partitions(broker, topic_name):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions

    assert create(broker, NewTopic(topic_name, 1, 1)) == {topic_name: 0}
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        response = client.create_partitions({topic_name: KNewPartitions(2)})
        assert [(r.name, r.error_code) for r in response.results] == [(topic_name, 0)]
    finally:
        client.close()
    assert partition_count(broker, topic_name) == 2
