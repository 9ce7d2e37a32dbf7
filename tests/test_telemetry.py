"""ClientMetricsManager's per-client state (kafkacompat/telemetry.py) with a clock of the test's:
subscription matching, push intervals, expiry and the bounds on what it keeps."""

from __future__ import annotations

import uuid

import pytest

from kafkacompat import telemetry
from kafkacompat.telemetry import ClientMetadata, ClientMetricsManager, Push, validate_client_metrics_configs
from kafkacompat.testing import otlp
from kafkacompat.wire.errors import ErrorCode, KafkaError
from tests.conftest import trio_test

ZERO = uuid.UUID(int=0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client(client_id: str = "app", instance_id: uuid.UUID = ZERO, software: str = "librdkafka") -> ClientMetadata:
    return ClientMetadata(instance_id, client_id, software, "2.6.0", "127.0.0.1", "50000")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(clock) -> ClientMetricsManager:
    m = ClientMetricsManager(1024, clock=clock)
    m.set_subscriptions({
        "producers": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000", "match": "client_id=app.*"},
        "rdkafka": {"metrics": "org.apache.kafka.consumer.", "interval.ms": "2000",
                    "match": "client_software_name=librdkafka"},
    })
    return m


def test_matching_subscriptions_are_combined(manager):
    subscribed = manager.get_subscriptions(client())
    assert subscribed.requested_metrics == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    assert subscribed.push_interval_ms == 1000
    other = manager.get_subscriptions(client("other", software="java"))
    assert other.requested_metrics == [] and other.push_interval_ms == telemetry.DEFAULT_INTERVAL_MS
    assert other.subscription_id != subscribed.subscription_id


def test_a_star_subscribes_to_everything(manager):
    manager.set_subscriptions({"all": {"metrics": "*,org.apache.kafka.producer."}})
    assert manager.get_subscriptions(client()).requested_metrics == ["*"]


@trio_test
async def test_push_intervals_are_kept(manager, clock):
    subscribed = manager.get_subscriptions(client())
    me = client(instance_id=subscribed.client_instance_id)
    payload = otlp.metrics_data(otlp.gauge_metric("org.apache.kafka.producer.x", 1))
    await manager.push(me, Push(me.client_instance_id, subscribed.subscription_id, False, 0, payload))
    clock.now += 0.5
    with pytest.raises(KafkaError) as raised:
        await manager.push(me, Push(me.client_instance_id, subscribed.subscription_id, False, 0, payload))
    assert raised.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += 0.6
    await manager.push(me, Push(me.client_instance_id, subscribed.subscription_id, False, 0, payload))
    (snapshot,) = manager.snapshots()
    assert snapshot[1].points[0].name == "org.apache.kafka.producer.x"


def test_quiet_clients_expire(manager, clock):
    manager.get_subscriptions(client())
    clock.now += telemetry.MIN_EXPIRY_MS / 1000 - 1
    manager.expire()
    assert len(manager.instances) == 1
    clock.now += 2
    manager.expire()
    assert not manager.instances


def test_instances_are_bounded_least_recently_used_first(clock):
    manager = ClientMetricsManager(1024, clock=clock, max_instances=3)
    ids = [manager.get_subscriptions(client(f"c{i}")).client_instance_id for i in range(5)]
    assert list(manager.instances) == ids[2:]


@trio_test
async def test_kept_points_are_bounded(manager, monkeypatch):
    monkeypatch.setattr(telemetry, "MAX_KEPT_POINTS", 3)
    manager.set_subscriptions({"all": {"metrics": "*"}})
    payload = otlp.metrics_data(*(otlp.gauge_metric(f"m{i}", i) for i in range(2)))
    for name in ("a", "b", "c"):
        subscribed = manager.get_subscriptions(client(name))
        me = client(name, subscribed.client_instance_id)
        await manager.push(me, Push(me.client_instance_id, subscribed.subscription_id, False, 0, payload))
    assert [metadata.client_id for metadata, _ in manager.snapshots()] == ["c"]


@pytest.mark.parametrize("props, code", [
    ({"interval.ms": "100"}, None),
    ({"interval.ms": "3600000", "metrics": "", "match": ""}, None),
    ({"match": "client_id=a=b, client_source_port=5.*"}, None),
    ({"interval.ms": "99"}, ErrorCode.INVALID_REQUEST),
    ({"colour": "red"}, ErrorCode.INVALID_REQUEST),
    ({"interval.ms": "1.5"}, ErrorCode.INVALID_CONFIG),
    ({"match": "client_id=[", }, ErrorCode.INVALID_CONFIG),
    ({"match": "=x"}, ErrorCode.INVALID_CONFIG),
    ({"metrics": "a, a"}, ErrorCode.INVALID_CONFIG),
])
def test_validation(props, code):
    if code is None:
        assert validate_client_metrics_configs("s", props) == props
    else:
        with pytest.raises(KafkaError) as raised:
            validate_client_metrics_configs("s", props)
        assert raised.value.code == code


def test_reading_the_same_subscriptions_again_changes_nothing(manager):
    version = manager.version
    manager.set_subscriptions({name: {"metrics": ",".join(sorted(s.metrics)), "interval.ms": str(s.interval_ms),
                                      "match": ",".join(f"{k}={p.pattern}" for k, p in s.patterns.items())}
                               for name, s in manager.subscriptions.items()})
    assert manager.version == version
