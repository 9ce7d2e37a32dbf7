"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs with real admin clients
(confluent-kafka's AdminClient, kafka-python's KafkaAdminClient) and raw requests for the fields
and resource types the clients do not expose."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

pytest.register_assert_rewrite("clients")
from clients import RawConnection, admin  # noqa: E402

from clients import request_class, response_class  # noqa: E402

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
TIMEOUT = 15


@pytest.fixture
def topic(broker, topic_name) -> str:
    admin(broker).create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "3600000"})])[topic_name].result(
        timeout=TIMEOUT)
    return topic_name


def describe(broker, restype, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(restype, name)
    return admin(broker).describe_configs([resource])[resource].result(timeout=TIMEOUT)


def describe_error(broker, restype, name: str) -> KafkaError:
    resource = ConfigResource(restype, name)
    with pytest.raises(KafkaException) as raised:
        admin(broker).describe_configs([resource])[resource].result(timeout=TIMEOUT)
    return raised.value.args[0]


def alter_incrementally(broker, name: str, *entries: ConfigEntry, validate_only: bool = False,
                        restype=ResourceType.TOPIC) -> KafkaError | None:
    resource = ConfigResource(restype, name, incremental_configs=list(entries))
    future = admin(broker).incremental_alter_configs([resource], validate_only=validate_only)[resource]
    try:
        future.result(timeout=TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]
    return None


def op(name: str, value: str | None, operation: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=operation)


def raw_call(broker, api_key: int, version: int, **fields):
    request = request_class(api_key)(version=version, **fields)
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(request, response_class(api_key), version)


def raw_describe(broker, version: int, *resources: tuple[int, str, list[str] | None], synonyms=True, docs=True):
    cls = request_class(DESCRIBE_CONFIGS).DescribeConfigsResource
    fields = dict(resources=[cls(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources],
                  include_synonyms=synonyms)
    if version >= 3:
        fields["include_documentation"] = docs
    return raw_call(broker, DESCRIBE_CONFIGS, version, **fields).results


# ---- DescribeConfigs: topics -------------------------------------------------------------------


def test_describe_topic_sources_and_defaults(broker, topic):
    configs = describe(broker, ResourceType.TOPIC, topic)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source, retention.is_default) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    segment = configs["segment.bytes"]
    assert (segment.value, segment.source, segment.is_default) == (
        "1073741824", ConfigSource.DEFAULT_CONFIG.value, True)
    assert configs["cleanup.policy"].value == "delete"
    assert not any(entry.is_read_only or entry.is_sensitive for entry in configs.values())
    assert {"min.insync.replicas", "max.message.bytes", "message.timestamp.type", "compression.type"} <= set(configs)


def test_describe_topic_synonyms(broker, topic):
    configs = describe(broker, ResourceType.TOPIC, topic)
    retention = configs["retention.ms"].synonyms
    assert {name: (s.value, s.source) for name, s in retention.items()} == {
        "retention.ms": ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)}
    segment = configs["segment.bytes"].synonyms
    assert {name: (s.value, s.source) for name, s in segment.items()} == {
        "log.segment.bytes": ("1073741824", ConfigSource.DEFAULT_CONFIG.value)}


def test_topic_default_from_a_static_broker_config(broker_factory, topic_name):
    broker = broker_factory("--set", "log.segment.bytes=5000000", "--set", "log.retention.ms=7200000")
    admin(broker).create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=TIMEOUT)
    configs = describe(broker, ResourceType.TOPIC, topic_name)
    segment = configs["segment.bytes"]
    assert (segment.value, segment.source, segment.is_default) == (
        "5000000", ConfigSource.STATIC_BROKER_CONFIG.value, False)
    assert configs["retention.ms"].value == "7200000"
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # Raw, to see every synonym in order (confluent keys them by name): static first, then default.
    (result,) = raw_describe(broker, 4, (TOPIC, topic_name, ["segment.bytes"]))
    (entry,) = result.configs
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.segment.bytes", "5000000", 4), ("log.segment.bytes", "1073741824", 5)]


def test_describe_unknown_topic(broker, topic_name):
    assert describe_error(broker, ResourceType.TOPIC, topic_name).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_with_configuration_keys_and_documentation(broker, topic):
    (result,) = raw_describe(broker, 4, (TOPIC, topic, ["retention.ms", "cleanup.policy", "no.such.key"]))
    assert result.error_code == 0
    entries = {entry.name: entry for entry in result.configs}
    assert set(entries) == {"retention.ms", "cleanup.policy"}
    assert (entries["retention.ms"].config_type, entries["cleanup.policy"].config_type) == (5, 7)  # LONG, LIST
    assert entries["retention.ms"].documentation
    (without_docs,) = raw_describe(broker, 3, (TOPIC, topic, ["retention.ms"]), synonyms=False, docs=False)
    (entry,) = without_docs.configs
    assert (entry.documentation, entry.synonyms, entry.config_source) == (None, [], 1)


def test_describe_v0_reports_is_default(broker, topic):
    """v0 (Sarama before 1.27, old admin tools) has is_default instead of config_source."""
    request = request_class(DESCRIBE_CONFIGS)(version=0, resources=[
        request_class(DESCRIBE_CONFIGS).DescribeConfigsResource(
            resource_type=TOPIC, resource_name=topic, configuration_keys=["retention.ms", "segment.bytes"])])
    with RawConnection(broker.bootstrap) as conn:
        (result,) = conn.call(request, response_class(DESCRIBE_CONFIGS), 0).results
    assert result.error_code == 0
    entries = {entry.name: (entry.value, entry.is_default) for entry in result.configs}
    assert entries == {"retention.ms": ("3600000", False), "segment.bytes": ("1073741824", True)}


def test_describe_invalid_topic_name(broker):
    (result,) = raw_describe(broker, 4, (TOPIC, "bad name", None))
    assert result.error_code == KafkaError.TOPIC_EXCEPTION


# ---- DescribeConfigs: the broker and its loggers -----------------------------------------------


def test_describe_broker(broker):
    configs = describe(broker, ResourceType.BROKER, "0")
    assert configs["broker.id"].value == "0"
    assert configs["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value  # set with --broker-id
    segment = configs["log.segment.bytes"]
    assert (segment.value, segment.source, segment.is_default, segment.is_read_only) == (
        "1073741824", ConfigSource.DEFAULT_CONFIG.value, True, False)
    assert configs["num.partitions"].value == "1"
    assert configs["auto.create.topics.enable"].value == "true"


def test_describe_broker_reports_static_configs(broker_factory):
    broker = broker_factory("--set", "num.partitions=6")
    entry = describe(broker, ResourceType.BROKER, "0")["num.partitions"]
    assert (entry.value, entry.source, entry.is_default) == ("6", ConfigSource.STATIC_BROKER_CONFIG.value, False)


def test_describe_other_broker_is_invalid(broker):
    results = raw_describe(broker, 4, (BROKER, "7", None), (BROKER, "seven", None), (BROKER, "", None))
    assert [r.error_code for r in results] == [KafkaError.INVALID_REQUEST, KafkaError.INVALID_REQUEST, 0]
    assert results[0].error_message == "Unexpected broker id, expected 0 or empty string, but received 7"
    assert results[2].configs == []  # no cluster-wide dynamic defaults


def test_describe_broker_loggers(broker):
    (result,) = raw_describe(broker, 4, (BROKER_LOGGER, "0", None))
    assert result.error_code == 0
    levels = {entry.name: entry.value for entry in result.configs}
    assert levels["root"] in {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}
    assert "kafkacompat.broker" in levels
    assert {entry.config_source for entry in result.configs} == {6}  # DYNAMIC_BROKER_LOGGER_CONFIG
    (empty_name,) = raw_describe(broker, 4, (BROKER_LOGGER, "", None))
    assert empty_name.error_code == KafkaError.INVALID_REQUEST


def test_unknown_resource_type_fails_the_request(broker, topic):
    results = raw_describe(broker, 4, (TOPIC, topic, None), (99, "x", None))
    assert [r.error_code for r in results] == [KafkaError.INVALID_REQUEST] * 2


def test_kafka_python_describe_configs(broker, topic):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = client.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])
        modified = described["topic"][topic]
        assert set(modified) == {"retention.ms"}  # kafka-python's default filter: only what was changed
        assert modified["retention.ms"]["value"] == "3600000"
        assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    finally:
        client.close()


# ---- IncrementalAlterConfigs -------------------------------------------------------------------


def test_incremental_set_and_delete(broker, topic):
    assert alter_incrementally(broker, topic, op("segment.bytes", "2000000", AlterConfigOpType.SET),
                               op("retention.ms", None, AlterConfigOpType.DELETE)) is None
    configs = describe(broker, ResourceType.TOPIC, topic)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        "2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "604800000", ConfigSource.DEFAULT_CONFIG.value)


def test_incremental_append_and_subtract(broker, topic):
    assert alter_incrementally(broker, topic, op("cleanup.policy", "compact", AlterConfigOpType.APPEND)) is None
    assert describe(broker, ResourceType.TOPIC, topic)["cleanup.policy"].value == "delete,compact"
    assert alter_incrementally(broker, topic, op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)) is None
    assert describe(broker, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact"
    error = alter_incrementally(broker, topic, op("retention.ms", "5", AlterConfigOpType.APPEND))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert error.str() == "Can't APPEND to key retention.ms because its type is not LIST."


def test_incremental_validate_only(broker, topic):
    assert alter_incrementally(broker, topic, op("retention.ms", "1000", AlterConfigOpType.SET),
                               validate_only=True) is None
    assert describe(broker, ResourceType.TOPIC, topic)["retention.ms"].value == "3600000"


@pytest.mark.parametrize("name, value", [("retention.ms", "abc"), ("no.such.config", "1"), ("segment.bytes", "1")])
def test_incremental_invalid_values(broker, topic, name, value):
    error = alter_incrementally(broker, topic, op(name, value, AlterConfigOpType.SET))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert name in error.str()
    assert describe(broker, ResourceType.TOPIC, topic)["retention.ms"].value == "3600000"


def test_incremental_unknown_topic(broker, topic_name):
    error = alter_incrementally(broker, topic_name, op("retention.ms", "1000", AlterConfigOpType.SET))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# ---- dynamic broker configs ---------------------------------------------------------------------

DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG_ID, DEFAULT_CONFIG_ID = 2, 3, 4, 5


def store_nodes(broker) -> dict:
    path = broker.data_dir / "metadata-store.json"
    return json.loads(path.read_text())["nodes"] if path.exists() else {}


SET, DELETE = 0, 1


def alter_cluster_default(broker, *configs: tuple[str, int, str | None], name: str = "") -> tuple[int, str | None]:
    """IncrementalAlterConfigs on the BROKER resource "" (the cluster default), which librdkafka and
    kafka-python cannot name (Kafka's Java admin and kafka-configs --entity-default can)."""
    resource_cls = request_class(INCREMENTAL_ALTER_CONFIGS).AlterConfigsResource
    config_cls = resource_cls.AlterableConfig
    resource = resource_cls(resource_type=BROKER, resource_name=name,
                            configs=[config_cls(name=n, config_operation=o, value=v) for n, o, v in configs])
    (result,) = raw_call(broker, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[resource]).responses
    return result.error_code, result.error_message


def described_cluster_default(broker) -> dict[str, tuple[str, int, list]]:
    (result,) = raw_describe(broker, 4, (BROKER, "", None))
    assert result.error_code == 0
    return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def test_read_only_broker_configs_and_bad_values_are_refused(broker):
    cases = [
        ("0", op("num.partitions", "3", AlterConfigOpType.SET),
         "Cannot update these configs dynamically: Set(num.partitions)"),
        ("0", op("log.retention.ms", "soon", AlterConfigOpType.SET),
         "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"),
    ]
    for name, entry, message in cases:
        error = alter_incrementally(broker, name, entry, restype=ResourceType.BROKER)
        assert (error.code(), error.str()) == (KafkaError.INVALID_REQUEST, message)
    assert alter_cluster_default(broker, ("listener.name.x.ssl.key.password", SET, "secret")) == (
        KafkaError.INVALID_REQUEST, "Unknown broker configs, not stored: Set(listener.name.x.ssl.key.password)")
    assert alter_cluster_default(broker, ("ssl.key.password", SET, "secret")) == (
        KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically: Set(ssl.key.password)")
    assert alter_cluster_default(broker, ("broker.id", SET, "7")) == (
        KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically: Set(broker.id)")
    assert alter_cluster_default(broker, ("log.retention.ms", SET, "1000"), name="1") == (
        KafkaError.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 1")
    assert not any(path.startswith("/config/brokers") for path in store_nodes(broker))


def test_dynamic_broker_configs_per_broker_and_cluster_default(broker, topic):
    assert alter_cluster_default(broker, ("log.retention.ms", SET, "7200000"),
                                 ("message.max.bytes", SET, "2000000")) == (0, None)
    assert alter_incrementally(broker, "0", op("message.max.bytes", "3000000", AlterConfigOpType.SET),
                               restype=ResourceType.BROKER) is None
    configs = describe(broker, ResourceType.BROKER, "0")
    assert (configs["message.max.bytes"].value, configs["message.max.bytes"].source) == (
        "3000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == (
        "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    (described,) = raw_describe(broker, 4, (BROKER, "0", ["message.max.bytes"]))
    assert [(s.name, s.value, s.source) for s in described.configs[0].synonyms] == [
        ("message.max.bytes", "3000000", DYNAMIC_BROKER_CONFIG), ("message.max.bytes", "2000000",
                                                                  DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", "1048588", DEFAULT_CONFIG_ID)]
    assert described_cluster_default(broker) == {
        "log.retention.ms": ("7200000", DYNAMIC_DEFAULT_BROKER_CONFIG,
                             [("log.retention.ms", "7200000", DYNAMIC_DEFAULT_BROKER_CONFIG)]),
        "message.max.bytes": ("2000000", DYNAMIC_DEFAULT_BROKER_CONFIG,
                              [("message.max.bytes", "2000000", DYNAMIC_DEFAULT_BROKER_CONFIG)])}
    # A topic without its own max.message.bytes takes the broker's new message.max.bytes.
    topic_configs = describe(broker, ResourceType.TOPIC, topic)
    assert (topic_configs["max.message.bytes"].value, topic_configs["max.message.bytes"].source) == (
        "3000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert topic_configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # its override still wins
    nodes = store_nodes(broker)
    assert json.loads(nodes["/config/brokers/<default>"]["data"]) == {
        "version": 1, "config": {"log.retention.ms": "7200000", "message.max.bytes": "2000000"}}
    assert json.loads(nodes["/config/brokers/0"]["data"]) == {"version": 1, "config": {"message.max.bytes": "3000000"}}
    changes = sorted(path for path in nodes if path.startswith("/config/changes/config_change_"))
    assert [json.loads(nodes[path]["data"]) for path in changes] == [
        {"version": 2, "entity_path": "brokers/<default>"}, {"version": 2, "entity_path": "brokers/0"}]
    broker.restart()
    assert describe(broker, ResourceType.BROKER, "0")["message.max.bytes"].source == (
        ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert alter_incrementally(broker, "0", op("message.max.bytes", None, AlterConfigOpType.DELETE),
                               restype=ResourceType.BROKER) is None
    assert describe(broker, ResourceType.BROKER, "0")["message.max.bytes"].value == "2000000"  # the default again


def test_dynamic_log_segment_bytes_reaches_topics_without_override(broker, topic_name):
    admin(broker).create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=TIMEOUT)
    assert alter_cluster_default(broker, ("log.segment.bytes", SET, "1024")) == (0, None)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(20):
        producer.produce(topic_name, value=b"x" * 200, partition=0)
        producer.flush(TIMEOUT)
    assert len(list((broker.data_dir / f"{topic_name}-0").glob("*.log"))) > 1


def test_kafka_python_legacy_alter_configs_on_a_broker_and_raw_replacement(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        configs = {"log.cleaner.threads": "2", "log.retention.bytes": "1000000"}
        response = client.alter_configs([KConfigResource(ConfigResourceType.BROKER, "0", configs=configs)],
                                        incremental=False)
        assert response == {"broker": {"0": "OK"}}
    finally:
        client.close()
    configs = describe(broker, ResourceType.BROKER, "0")
    assert {k: (configs[k].value, configs[k].source) for k in ("log.cleaner.threads", "log.retention.bytes")} == {
        "log.cleaner.threads": ("2", DYNAMIC_BROKER_CONFIG), "log.retention.bytes": ("1000000", DYNAMIC_BROKER_CONFIG)}
    # AlterConfigs replaces the resource's whole dynamic config.
    resource_cls = request_class(ALTER_CONFIGS).AlterConfigsResource
    resource = resource_cls(resource_type=BROKER, resource_name="0", configs=[
        resource_cls.AlterableConfig(name="log.retention.bytes", value="5")])
    (result,) = raw_call(broker, ALTER_CONFIGS, 2, validate_only=False, resources=[resource]).responses
    assert (result.error_code, result.error_message) == (0, None)
    configs = describe(broker, ResourceType.BROKER, "0")
    assert (configs["log.retention.bytes"].value, configs["log.retention.bytes"].source) == (
        "5", DYNAMIC_BROKER_CONFIG)
    assert configs["log.cleaner.threads"].source == DEFAULT_CONFIG_ID


def test_dynamic_broker_default_reaches_every_broker_of_a_zookeeper_cluster(tmp_path):
    import time

    from cluster import ZooKeeperCluster

    with ZooKeeperCluster(tmp_path, brokers=2) as cluster:
        first, second = cluster.brokers[0], cluster.brokers[1]
        assert alter_cluster_default(first, ("log.retention.ms", SET, "7200000")) == (0, None)
        deadline = time.monotonic() + 15
        while describe(second, ResourceType.BROKER, "1")["log.retention.ms"].value != "7200000":
            assert time.monotonic() < deadline, "broker 1 never applied the cluster default"
            time.sleep(0.1)
        assert describe(second, ResourceType.BROKER, "1")["log.retention.ms"].source == (
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def test_altered_configs_persist_and_reach_the_log(broker, topic):
    # A tiny segment.bytes makes the log roll: proof the partitions' logs took the new config.
    assert alter_incrementally(broker, topic, op("segment.bytes", "1024", AlterConfigOpType.SET)) is None
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic, value=b"x" * 200, partition=0)
        producer.flush(TIMEOUT)
    segments = list((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) > 1
    broker.restart()
    assert describe(broker, ResourceType.TOPIC, topic)["segment.bytes"].value == "1024"
    nodes = json.loads((broker.data_dir / "metadata-store.json").read_text())["nodes"]
    assert json.loads(nodes[f"/config/topics/{topic}"]["data"])["config"] == {
        "retention.ms": "3600000", "segment.bytes": "1024"}


def test_incremental_raw_request_checks(broker, topic):
    resource_cls = request_class(INCREMENTAL_ALTER_CONFIGS).AlterConfigsResource
    config_cls = resource_cls.AlterableConfig

    def resource(name, *configs, resource_type=TOPIC):
        return resource_cls(resource_type=resource_type, resource_name=name,
                            configs=[config_cls(name=n, config_operation=o, value=v) for n, o, v in configs])

    response = raw_call(broker, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
        resource(topic, ("retention.ms", 0, "1"), ("retention.ms", 0, "2")),
        resource(topic + "-null", ("retention.ms", 0, None)),
        resource("0", ("root", 0, "LOUD"), resource_type=BROKER_LOGGER),
    ])
    assert [(r.error_code, r.error_message) for r in response.responses] == [
        (KafkaError.INVALID_REQUEST, "Error due to duplicate config keys"),
        (KafkaError.INVALID_REQUEST, "Null value not supported for : retention.ms"),
        (KafkaError.INVALID_CONFIG, "Cannot set the log level of root to LOUD as it is not a supported log level. "
                                    "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"),
    ]
    response = raw_call(broker, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
        resource("0", ("root", 1, None), resource_type=BROKER_LOGGER)])
    assert [(r.error_code, r.error_message) for r in response.responses] == [
        (KafkaError.INVALID_REQUEST, "Removing the log level of the root logger is not allowed")]


def test_set_a_logger_level(broker):
    resource_cls = request_class(INCREMENTAL_ALTER_CONFIGS).AlterConfigsResource
    change = resource_cls(resource_type=BROKER_LOGGER, resource_name="0", configs=[
        resource_cls.AlterableConfig(name="kafkacompat.broker", config_operation=0, value="DEBUG")])
    response = raw_call(broker, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[change])
    assert response.responses[0].error_code == 0
    (result,) = raw_describe(broker, 4, (BROKER_LOGGER, "0", ["kafkacompat.broker"]))
    assert [(e.name, e.value) for e in result.configs] == [("kafkacompat.broker", "DEBUG")]


# ---- AlterConfigs (legacy: replaces every override) --------------------------------------------


def test_legacy_alter_configs_replaces_all_overrides(broker, topic):
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"cleanup.policy": "compact"})
    admin(broker).alter_configs([resource])[resource].result(timeout=TIMEOUT)
    configs = describe(broker, ResourceType.TOPIC, topic)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == (
        "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # the old override is gone


def test_legacy_alter_configs_validation(broker, topic, topic_name):
    resource_cls = request_class(ALTER_CONFIGS).AlterConfigsResource
    config_cls = resource_cls.AlterableConfig

    def resource(resource_type, name, **configs):
        return resource_cls(resource_type=resource_type, resource_name=name,
                            configs=[config_cls(name=k.replace("_", "."), value=v) for k, v in configs.items()])

    response = raw_call(broker, ALTER_CONFIGS, 2, validate_only=True, resources=[
        resource(TOPIC, topic + "-missing", retention_ms="1000"),
        resource(BROKER, "0", num_partitions="3"),
        resource(BROKER_LOGGER, "0", root="INFO"),
        resource(TOPIC, topic, retention_ms="1000"),
        resource(TOPIC, topic, retention_ms="2000"),
    ])
    assert [r.error_code for r in response.responses] == [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.INVALID_REQUEST,  # no dynamic broker configs
        KafkaError.INVALID_REQUEST,  # log levels only through IncrementalAlterConfigs (KIP-412)
        KafkaError.INVALID_REQUEST, KafkaError.INVALID_REQUEST,  # a resource named twice
    ]
    invalid = raw_call(broker, ALTER_CONFIGS, 0, validate_only=True,
                       resources=[resource(TOPIC, topic, retention_ms="-5")])
    assert invalid.responses[0].error_code == KafkaError.INVALID_CONFIG
    assert describe(broker, ResourceType.TOPIC, topic)["retention.ms"].value == "3600000"


def test_kafka_python_alter_configs(broker, topic):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "2000"})])
    finally:
        client.close()
    assert describe(broker, ResourceType.TOPIC, topic)["max.message.bytes"].value == "2000"
