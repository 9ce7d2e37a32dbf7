"""KIP-714 client telemetry against a real broker process: client-metrics subscriptions created
and described with raw IncrementalAlterConfigs / AlterConfigs / DescribeConfigs /
ListConfigResources requests (Kafka's keys, validation and error codes), GetTelemetrySubscriptions
and PushTelemetry with every error code Kafka's ClientMetricsManager answers, and a real
confluent-kafka producer (librdkafka pushes its metrics by default) whose
org.apache.kafka.producer.* metrics (and a consumer's consumer ones) then appear on the broker's
/metrics."""

from __future__ import annotations

import gzip
import itertools
import json
import struct
import time
import uuid

import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from clients import RawConnection, frame, request_header  # noqa: E402
from kafkacompat.testing import otlp
from kafkacompat.testing.http import http_request
from kafkacompat.testing.process import BrokerProcess, free_port
from kafkacompat.wire import codec, compression

GET_SUBSCRIPTIONS, PUSH, LIST_CONFIG_RESOURCES = 71, 72, 74
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
CLIENT_METRICS = 16
SET, DELETE, APPEND = 0, 1, 2
NONE, INVALID_CONFIG, INVALID_REQUEST = 0, 40, 42
UNSUPPORTED_VERSION, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 35, 76, 87
THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SUBSCRIPTION_ID, TELEMETRY_TOO_LARGE = 89, 117, 118
MAX_BYTES = 4096

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    http_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("telemetry"), extra_args=[
        "--http-port", str(http_port), "--set", f"telemetry.max.bytes={MAX_BYTES}"]).start()
    broker.wait_for_output("HTTP console")
    yield broker, f"http://127.0.0.1:{http_port}"
    broker.kill()


def call(conn: RawConnection, api_key: int, version: int, client_id: str = "compat-tests", **fields):
    """One request built with the broker's generated codecs, its response decoded."""
    correlation_id = next(_ids)
    request = codec.request_class(api_key)(**fields)
    header = request_header(api_key, version, correlation_id, flexible=version >= codec.flexible_versions(api_key),
                            client_id=client_id)
    conn.send(frame(header + bytes(codec.encode_request(request, version))))
    payload = conn.recv_frame()
    assert struct.unpack_from(">i", payload)[0] == correlation_id
    flexible = version >= codec.flexible_versions(api_key)
    return codec.decode_response(api_key, version, payload[5 if flexible else 4:])


def alter_subscription(conn: RawConnection, name: str, *ops: tuple[str, str | None, int], validate_only=False):
    request = codec.request_class(INCREMENTAL_ALTER_CONFIGS)
    resource = request.AlterConfigsResource
    configs = [resource.AlterableConfig(name=key, config_operation=op, value=value) for key, value, op in ops]
    response = call(conn, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=validate_only, resources=[
        resource(resource_type=CLIENT_METRICS, resource_name=name, configs=configs)])
    (result,) = response.responses
    return result.error_code, result.error_message


def subscribe(conn: RawConnection, name: str, **props: str) -> None:
    code, message = alter_subscription(conn, name, *((k.replace("_", "."), v, SET) for k, v in props.items()))
    assert code == NONE, message


def unsubscribe(conn: RawConnection, name: str) -> None:
    assert alter_subscription(conn, name, *((k, None, DELETE) for k in ("metrics", "interval.ms", "match")))[0] == NONE


def describe(conn: RawConnection, name: str, *, synonyms: bool = False):
    request = codec.request_class(DESCRIBE_CONFIGS)
    response = call(conn, DESCRIBE_CONFIGS, 4, include_synonyms=synonyms, include_documentation=synonyms, resources=[
        request.DescribeConfigsResource(resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None)])
    (result,) = response.results
    return result


def listed(conn: RawConnection, version: int = 0, resource_types=()) -> tuple[int, list[tuple[int, str]]]:
    fields = {"resource_types": list(resource_types)} if version else {}
    response = call(conn, LIST_CONFIG_RESOURCES, version, **fields)
    return response.error_code, [(r.resource_type, r.resource_name) for r in response.config_resources]


def get_subscriptions(conn: RawConnection, instance_id: uuid.UUID = uuid.UUID(int=0), client_id="compat-tests"):
    return call(conn, GET_SUBSCRIPTIONS, 0, client_id=client_id, client_instance_id=instance_id)


def push(conn: RawConnection, instance_id, subscription_id, metrics=b"", *, compression_type=0, terminating=False,
         client_id="compat-tests"):
    return call(conn, PUSH, 0, client_id=client_id, client_instance_id=instance_id, subscription_id=subscription_id,
                terminating=terminating, compression_type=compression_type, metrics=metrics).error_code


def scrape(base: str) -> list:
    answer = http_request("GET", base + "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(answer.body.decode())}
    family = families.get("kafkacompat_client_telemetry")
    return [] if family is None else family.samples


def wait_for_samples(base: str, predicate, timeout: float = 60.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        samples = [s for s in scrape(base) if predicate(s)]
        if samples:
            return samples
        assert time.monotonic() < deadline, "the pushed metrics never appeared on /metrics"
        time.sleep(0.5)


# ---- the client-metrics config resource -------------------------------------------------------


def test_a_subscription_is_stored_described_and_listed(served):
    broker, _ = served
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, "sub-described", metrics="org.apache.kafka.producer., org.apache.kafka.consumer.",
                  interval_ms="2000", match="client_id=app-.*")
        result = describe(conn, "sub-described", synonyms=True)
        assert result.error_code == NONE
        assert {c.name: (c.value, c.config_source) for c in result.configs} == {
            "interval.ms": ("2000", 7), "match": ("client_id=app-.*", 7),
            "metrics": ("org.apache.kafka.producer.,org.apache.kafka.consumer.", 7)}
        interval = next(c for c in result.configs if c.name == "interval.ms")
        assert (interval.config_type, interval.documentation) == (3, "Metrics push interval in milliseconds")
        assert [(s.name, s.value, s.source) for s in interval.synonyms] == [("interval.ms", "2000", 7)]
        assert listed(conn, 0)[0] == NONE and (CLIENT_METRICS, "sub-described") in listed(conn, 0)[1]
        assert (CLIENT_METRICS, "sub-described") in listed(conn, 1, [CLIENT_METRICS])[1]
        unsubscribe(conn, "sub-described")
        assert (CLIENT_METRICS, "sub-described") not in listed(conn, 0)[1]
        # a subscription that does not exist describes as the defaults
        defaults = describe(conn, "sub-described")
        assert {c.name: (c.value, c.config_source) for c in defaults.configs} == {
            "interval.ms": ("300000", 5), "match": ("", 5), "metrics": ("", 5)}


def test_append_and_legacy_alter_configs(served):
    broker, _ = served
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, "sub-append", metrics="a.")
        assert alter_subscription(conn, "sub-append", ("metrics", "b.", APPEND))[0] == NONE
        assert {c.name: c.value for c in describe(conn, "sub-append").configs}["metrics"] == "a.,b."
        request = codec.request_class(ALTER_CONFIGS)
        resource = request.AlterConfigsResource
        response = call(conn, ALTER_CONFIGS, 2, validate_only=False, resources=[resource(
            resource_type=CLIENT_METRICS, resource_name="sub-append",
            configs=[resource.AlterableConfig(name="interval.ms", value="1000")])])
        assert response.responses[0].error_code == NONE
        assert {c.name: c.value for c in describe(conn, "sub-append").configs} == {
            "interval.ms": "1000", "match": "", "metrics": ""}
        unsubscribe(conn, "sub-append")


@pytest.mark.parametrize("ops, code", [
    ((("unknown.key", "1", SET),), INVALID_REQUEST),
    ((("interval.ms", "99", SET),), INVALID_REQUEST),
    ((("interval.ms", "3600001", SET),), INVALID_REQUEST),
    ((("interval.ms", "often", SET),), INVALID_CONFIG),
    ((("match", "client_colour=red", SET),), INVALID_CONFIG),
    ((("match", "client_id", SET),), INVALID_CONFIG),
    ((("match", "client_id=(unclosed", SET),), INVALID_CONFIG),
    ((("metrics", "a.,a.", SET),), INVALID_CONFIG),
    ((("interval.ms", "1000", APPEND),), INVALID_CONFIG),
    ((("interval.ms", "1000", SET), ("interval.ms", "2000", SET)), INVALID_REQUEST),
    ((("interval.ms", None, SET),), INVALID_REQUEST),
])
def test_bad_subscription_configs(served, ops, code):
    broker, _ = served
    with RawConnection(broker.bootstrap) as conn:
        got, message = alter_subscription(conn, "sub-bad", *ops)
        assert got == code, message
        assert (CLIENT_METRICS, "sub-bad") not in listed(conn, 0)[1]


def test_an_empty_subscription_name_and_validate_only(served):
    broker, _ = served
    with RawConnection(broker.bootstrap) as conn:
        assert alter_subscription(conn, "", ("interval.ms", "1000", SET))[0] == INVALID_REQUEST
        assert describe(conn, "").error_code == INVALID_REQUEST
        assert alter_subscription(conn, "sub-validated", ("interval.ms", "1000", SET), validate_only=True)[0] == NONE
        assert (CLIENT_METRICS, "sub-validated") not in listed(conn, 0)[1]


def test_list_config_resources_v1_types(served):
    broker, _ = served
    with RawConnection(broker.bootstrap) as conn:
        code, resources = listed(conn, 1, [4])
        assert code == NONE and resources == [(4, "0")]
        assert listed(conn, 1, [99])[0] == UNSUPPORTED_VERSION


# ---- GetTelemetrySubscriptions and PushTelemetry ----------------------------------------------


@pytest.fixture
def subscribed(served):
    """A subscription matching only this test's client id, with a long push interval (a second
    push within it is throttled)."""
    broker, base = served
    name = f"sub-{uuid.uuid4().hex[:8]}"
    client_id = f"raw-{name}"
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, name, metrics="org.apache.kafka.producer.", interval_ms="200000",
                  match=f"client_id={client_id}")
        yield conn, client_id
        unsubscribe(conn, name)


def test_get_subscriptions_assigns_an_instance_id(subscribed):
    conn, client_id = subscribed
    response = get_subscriptions(conn, client_id=client_id)
    assert response.error_code == NONE
    assert response.client_instance_id.int != 0
    assert response.requested_metrics == ["org.apache.kafka.producer."]
    assert response.push_interval_ms == 200000 and response.telemetry_max_bytes == MAX_BYTES
    assert response.delta_temporality is True
    assert set(response.accepted_compression_types) == {1, 2, 3, 4}
    other = get_subscriptions(conn, client_id="someone-else")
    assert other.requested_metrics == [] and other.client_instance_id != response.client_instance_id
    # asked again within the push interval
    assert get_subscriptions(conn, response.client_instance_id, client_id).error_code == THROTTLING_QUOTA_EXCEEDED


def fresh(conn: RawConnection, client_id: str) -> tuple[uuid.UUID, int]:
    """A new client instance (the zero id asks for one) and its subscription id."""
    response = get_subscriptions(conn, client_id=client_id)
    assert response.error_code == NONE
    return response.client_instance_id, response.subscription_id


PAYLOAD = otlp.metrics_data(otlp.gauge_metric("org.apache.kafka.producer.x", 1))


def test_push_with_the_zero_instance_id_is_invalid(subscribed):
    conn, client_id = subscribed
    _, sub_id = fresh(conn, client_id)
    assert push(conn, uuid.UUID(int=0), sub_id, PAYLOAD, client_id=client_id) == INVALID_REQUEST


def test_push_with_another_subscription_id_and_asking_again(subscribed):
    conn, client_id = subscribed
    instance, sub_id = fresh(conn, client_id)
    assert push(conn, instance, sub_id + 1, PAYLOAD, client_id=client_id) == UNKNOWN_SUBSCRIPTION_ID
    # the client may ask for its subscription again at once (no throttling after this error)
    again = get_subscriptions(conn, instance, client_id)
    assert again.error_code == NONE and again.subscription_id == sub_id


def test_push_with_an_unknown_compression_type(subscribed):
    conn, client_id = subscribed
    instance, sub_id = fresh(conn, client_id)
    code = push(conn, instance, sub_id, PAYLOAD, compression_type=9, client_id=client_id)
    assert code == UNSUPPORTED_COMPRESSION_TYPE
    assert get_subscriptions(conn, instance, client_id).error_code == NONE


def test_push_larger_than_telemetry_max_bytes(subscribed):
    conn, client_id = subscribed
    instance, sub_id = fresh(conn, client_id)
    assert push(conn, instance, sub_id, b"\x00" * (MAX_BYTES + 1), client_id=client_id) == TELEMETRY_TOO_LARGE


def test_push_within_the_interval_and_terminating_pushes(subscribed):
    conn, client_id = subscribed
    instance, sub_id = fresh(conn, client_id)
    assert push(conn, instance, sub_id, PAYLOAD, client_id=client_id) == NONE
    assert push(conn, instance, sub_id, PAYLOAD, client_id=client_id) == THROTTLING_QUOTA_EXCEEDED
    # a terminating push is accepted within the interval, but only one
    assert push(conn, instance, sub_id, PAYLOAD, terminating=True, client_id=client_id) == NONE
    assert push(conn, instance, sub_id, PAYLOAD, terminating=True, client_id=client_id) == INVALID_REQUEST


@pytest.mark.parametrize("payload, compression_type, code", [
    (b"\xff\xff\xff", 0, INVALID_RECORD),                             # not protobuf
    (otlp.tag(1, 0) + otlp.varint(1), 0, INVALID_RECORD),             # protobuf, not MetricsData
    (b"not gzip at all", compression.GZIP, INVALID_RECORD),           # does not decompress
    (b"\x00\x01\x02", compression.ZSTD, INVALID_RECORD),
    # decompresses past telemetry.max.bytes
    (gzip.compress(b"\x00" * (MAX_BYTES * 4)), compression.GZIP, TELEMETRY_TOO_LARGE),
    (compression.compress(compression.ZSTD, b"\x00" * (MAX_BYTES * 4)), compression.ZSTD, TELEMETRY_TOO_LARGE),
])
def test_bad_payloads(subscribed, payload, compression_type, code):
    conn, client_id = subscribed
    instance, sub_id = fresh(conn, client_id)
    assert push(conn, instance, sub_id, payload, compression_type=compression_type, client_id=client_id) == code


def test_a_changed_subscription_changes_the_subscription_id(served, subscribed):
    broker, _ = served
    conn, client_id = subscribed
    first = get_subscriptions(conn, client_id=client_id)
    name = f"sub-extra-{uuid.uuid4().hex[:6]}"
    subscribe(conn, name, metrics="org.apache.kafka.consumer.", match=f"client_id={client_id}")
    try:
        code = push(conn, first.client_instance_id, first.subscription_id, b"", client_id=client_id)
        assert code == UNKNOWN_SUBSCRIPTION_ID
        second = get_subscriptions(conn, first.client_instance_id, client_id)
        assert second.error_code == NONE and second.subscription_id != first.subscription_id
        assert second.requested_metrics == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    finally:
        unsubscribe(conn, name)


@pytest.mark.parametrize("codec_id", [0, *compression.CODECS])
def test_pushed_metrics_appear_on_the_metrics_endpoint(served, subscribed, codec_id):
    _, base = served
    conn, client_id = subscribed
    first = get_subscriptions(conn, client_id=client_id)
    payload = otlp.metrics_data(otlp.gauge_metric("org.apache.kafka.producer.raw.gauge", 42.5, {"topic": "orders"}))
    if codec_id:
        payload = compression.compress(codec_id, payload)
    assert push(conn, first.client_instance_id, first.subscription_id, payload, compression_type=codec_id,
                client_id=client_id) == NONE
    (sample,) = wait_for_samples(base, lambda s: s.labels.get("client_id") == client_id)
    assert sample.value == 42.5
    assert sample.labels["metric"] == "org.apache.kafka.producer.raw.gauge" and sample.labels["topic"] == "orders"
    assert sample.labels["client_instance_id"] == str(first.client_instance_id)
    (client,) = [c for c in http_request("GET", base + "/v1/client-telemetry").json()
                 if c["client_instance_id"] == str(first.client_instance_id)]
    assert client["client_id"] == client_id and client["metrics"] == [{
        "name": "org.apache.kafka.producer.raw.gauge", "kind": "gauge", "value": 42.5,
        "attributes": {"topic": "orders"}}]


# ---- a real client -----------------------------------------------------------------------------


def test_confluent_producer_pushes_its_metrics(served):
    broker, base = served
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, "sub-librdkafka", metrics="org.apache.kafka.producer.", interval_ms="1000",
                  match="client_id=telemetry-producer")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-producer",
                                         "linger.ms": 0})
    try:
        deadline = time.monotonic() + 60
        samples = []
        while not samples:
            producer.produce("telemetry-topic", b"value")
            producer.poll(0.5)
            samples = [s for s in scrape(base) if s.labels.get("client_id") == "telemetry-producer"]
            assert time.monotonic() < deadline, f"librdkafka never pushed its metrics:\n{broker.output()[-3000:]}"
        assert all(s.labels["metric"].startswith("org.apache.kafka.producer.") for s in samples)
        assert {s.labels["client_software_name"] for s in samples} == {"confluent-kafka-python"}
        producer.flush(30)
    finally:
        with RawConnection(broker.bootstrap) as conn:
            unsubscribe(conn, "sub-librdkafka")


def test_confluent_consumer_pushes_its_metrics(served):
    broker, base = served
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, "sub-consumer", metrics="org.apache.kafka.consumer.", interval_ms="1000",
                  match="client_id=telemetry-consumer")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-consumer",
                                         "group.id": "telemetry-group", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["telemetry-consumed"])
        deadline = time.monotonic() + 60
        samples = []
        while not samples:
            consumer.poll(0.5)
            samples = [s for s in scrape(base) if s.labels.get("client_id") == "telemetry-consumer"]
            assert time.monotonic() < deadline, f"librdkafka never pushed its metrics:\n{broker.output()[-3000:]}"
        assert all(s.labels["metric"].startswith("org.apache.kafka.consumer.") for s in samples)
    finally:
        consumer.close()
        with RawConnection(broker.bootstrap) as conn:
            unsubscribe(conn, "sub-consumer")


# ---- stored like the other configs ------------------------------------------------------------


def wait_for_interval(bootstrap: str, client_id: str, interval_ms: int, timeout: float = 30.0) -> None:
    """A new client instance on ``bootstrap`` until it is offered ``interval_ms``."""
    deadline = time.monotonic() + timeout
    while True:
        with RawConnection(bootstrap) as conn:
            response = get_subscriptions(conn, client_id=client_id)
        if response.error_code == NONE and response.push_interval_ms == interval_ms:
            return
        assert time.monotonic() < deadline, f"{bootstrap} never offered interval {interval_ms}: {response}"
        time.sleep(0.2)


def test_a_subscription_survives_a_restart(broker_factory):
    broker = broker_factory()
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, "kept", metrics="org.apache.kafka.", interval_ms="4000")
    broker.restart()
    wait_for_interval(broker.bootstrap, "anyone", 4000)
    with RawConnection(broker.bootstrap) as conn:
        assert listed(conn, 0) == (NONE, [(CLIENT_METRICS, "kept")])
        unsubscribe(conn, "kept")
    broker.stop()
    nodes = json.loads((broker.data_dir / "metadata-store.json").read_text())["nodes"]
    assert "/config/client-metrics/kept" not in nodes  # deleting every key deletes the subscription


def test_every_broker_of_a_cluster_serves_a_subscription_and_its_changes(tmp_path):
    from cluster import ZooKeeperCluster

    with ZooKeeperCluster(tmp_path, brokers=2) as cluster:
        first, second = cluster.brokers[0], cluster.brokers[1]
        with RawConnection(first.bootstrap) as conn:
            subscribe(conn, "everywhere", metrics="org.apache.kafka.", interval_ms="7000", match="client_id=app")
        wait_for_interval(second.bootstrap, "app", 7000)
        with RawConnection(first.bootstrap) as conn:
            subscribe(conn, "everywhere", interval_ms="8000")  # a change of an existing subscription
        wait_for_interval(second.bootstrap, "app", 8000)
        with RawConnection(second.bootstrap) as conn:
            assert listed(conn, 0) == (NONE, [(CLIENT_METRICS, "everywhere")])
            unsubscribe(conn, "everywhere")
        wait_for_interval(first.bootstrap, "app", 300000)


def test_acls_guard_subscriptions_not_telemetry(broker_factory):
    """As Kafka: subscriptions need DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster; the telemetry
    APIs themselves need no ACL."""
    broker = broker_factory("--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    cluster_authorization_failed = 31
    with RawConnection(broker.bootstrap) as conn:  # User:ANONYMOUS, no ACL allows it anything
        assert listed(conn, 1) == (cluster_authorization_failed, [])
        assert alter_subscription(conn, "denied", ("interval.ms", "1000", SET))[0] == cluster_authorization_failed
        assert describe(conn, "denied").error_code == cluster_authorization_failed
        subscribed = get_subscriptions(conn)
        assert subscribed.error_code == NONE
        assert push(conn, subscribed.client_instance_id, subscribed.subscription_id) == NONE


def advertised(bootstrap: str) -> set[int]:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    with RawConnection(bootstrap) as conn:  # ApiVersions answers with a v0 header at every version
        response = conn.call(ApiVersionsRequest(client_software_name="compat-tests", client_software_version="1"),
                             ApiVersionsResponse, 3)
    return {entry.api_key for entry in response.api_keys}


def test_the_telemetry_apis_are_advertised_only_while_a_subscription_exists(broker_factory):
    """Kafka advertises GetTelemetrySubscriptions and PushTelemetry only with a telemetry receiver;
    here they are advertised to new connections while some subscription exists, so that clients
    do not ask for subscriptions (and librdkafka does not log about it) when there is nothing to push."""
    broker = broker_factory()
    assert not advertised(broker.bootstrap) & {GET_SUBSCRIPTIONS, PUSH}
    assert LIST_CONFIG_RESOURCES in advertised(broker.bootstrap)
    with RawConnection(broker.bootstrap) as conn:
        subscribe(conn, "sub-advertised", metrics="*")
        assert {GET_SUBSCRIPTIONS, PUSH} <= advertised(broker.bootstrap)
        unsubscribe(conn, "sub-advertised")
    assert not advertised(broker.bootstrap) & {GET_SUBSCRIPTIONS, PUSH}
