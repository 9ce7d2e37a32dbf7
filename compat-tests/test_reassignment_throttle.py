"""Replication throttles on a ZooKeeper cluster of three broker processes (ids 1-3), set as
kafka-reassign-partitions --throttle does: the moving partition's leader.replication.throttled.replicas
(its current replicas) and follower.replication.throttled.replicas (the new one), and the
leader.replication.throttled.rate / follower.replication.throttled.rate of every broker
(IncrementalAlterConfigs on BROKER resources). A throttled move copies no faster than about the
rate (the bytes copied by any moment are bounded by the rate times the time since the move
began: a loaded machine is slower, never faster), a partition that is not throttled keeps
replicating meanwhile, and once the throttle is lifted the move completes with every record in
order. Bad values get Kafka's codes."""

from __future__ import annotations

import os
import re
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaAdminClient, TopicPartition

from cluster import ZooKeeperCluster
from test_replication_failover import ContinuousProducer, deadline_loop, partitions_of, read_partition, set_args

BROKERS = (1, 2, 3)
TIMEOUT = 30
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
RATE = 256 * 1024  # bytes per second
MESSAGES = 2048
VALUE_SIZE = 2048  # MESSAGES x VALUE_SIZE = 4 MiB: about 16 s at RATE


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Small follower fetches (64 KiB a partition) so the throttle is checked often; /metrics on
    # a port of each broker's own (logged).
    args = set_args(replica_fetch_max_bytes=65536) + ["--http-port", "0"]
    with ZooKeeperCluster(tmp_path_factory.mktemp("throttle"), brokers=0, extra_args=args) as cluster:
        for broker_id in BROKERS:
            cluster.start_broker(broker_id)
        cluster.wait_until_every_broker_sees(len(BROKERS))
        yield cluster


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


@pytest.fixture
def kafka_admin(cluster):
    """kafka-python's AdminClient: AlterPartitionReassignments / ListPartitionReassignments."""
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def create(admin: AdminClient, cluster, replicas: list[int], **configs: str) -> str:
    name = f"throttled-{uuid.uuid4().hex[:8]}"
    topic = NewTopic(name, 1, replica_assignment=[replicas], config=configs)
    admin.create_topics([topic])[name].result(TIMEOUT)
    for _ in deadline_loop(TIMEOUT, f"{name} led with its whole ISR on every broker"):
        if all(sorted(replicas_and_isr(cluster, name, b)[1]) == sorted(replicas) for b in BROKERS):
            return name
    raise AssertionError("unreachable")


def replicas_and_isr(cluster, topic: str, broker_id: int) -> tuple[list[int], list[int]]:
    part = partitions_of(cluster.metadata(broker_id, topic=topic), topic).get(0)
    return (sorted(part.replicas), sorted(part.isrs)) if part is not None else ([], [])


def alter_broker(admin: AdminClient, broker_id: int, key: str, value: str | None) -> None:
    operation = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    resource = ConfigResource("BROKER", str(broker_id), incremental_configs=[
        ConfigEntry(key, value or "", incremental_operation=operation)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)


def broker_config(admin: AdminClient, broker_id: int, key: str) -> str:
    future, = admin.describe_configs([ConfigResource("BROKER", str(broker_id))]).values()
    return future.result(TIMEOUT)[key].value


def set_rates(admin: AdminClient, rate: int | None) -> None:
    """Both rates on every broker, then wait until each broker has applied them."""
    for broker_id in BROKERS:
        for key in (LEADER_RATE, FOLLOWER_RATE):
            alter_broker(admin, broker_id, key, None if rate is None else str(rate))
    expected = str(rate if rate is not None else 2**63 - 1)
    for broker_id in BROKERS:
        for _ in deadline_loop(TIMEOUT, f"broker {broker_id} applying the throttle rates {expected}"):
            if all(broker_config(admin, broker_id, key) == expected for key in (LEADER_RATE, FOLLOWER_RATE)):
                break


def fill(cluster, topic: str) -> list[bytes]:
    values = [b"%06d-" % i + os.urandom(VALUE_SIZE // 2).hex().encode()[:VALUE_SIZE - 7] for i in range(MESSAGES)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "batch.size": 16384, "linger.ms": 5, "compression.type": "none"})
    failed = []
    for value in values:
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=lambda err, _: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0 and not failed, failed[:3]
    return values


def copied_bytes(cluster, broker_id: int, topic: str) -> int:
    directory = cluster.brokers[broker_id].data_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.exists() else 0


def byte_rate(cluster, broker_id: int, name: str) -> float:
    """A gauge of the broker's /metrics (its HTTP port is in its log)."""
    found = re.search(r"/metrics and /v1 API on (http://[^/\s]+)/", cluster.brokers[broker_id].output())
    assert found, "the broker logged no HTTP address"
    with urllib.request.urlopen(found.group(1) + "/metrics", timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    value = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert value, f"no {name} in /metrics"
    return float(value.group(1))


SIDES = {
    # As kafka-reassign-partitions --throttle: the current replicas on the leader side, the
    # moving one on the follower side. Each side alone holds the copy back too.
    "both": {LEADER_REPLICAS: "0:1", FOLLOWER_REPLICAS: "0:3"},
    "leader": {LEADER_REPLICAS: "*"},
    "follower": {FOLLOWER_REPLICAS: "0:3"},
}


@pytest.mark.parametrize("side", SIDES)
def test_a_throttled_move_copies_no_faster_than_the_rate_and_completes_once_the_throttle_is_lifted(
        cluster, admin, kafka_admin, side):
    # The throttled replicas are set when the topic is created: every broker knows them before
    # the move starts. One replica: no follower traffic while it is filled (a leader counts
    # the bytes of its throttled partitions to in-sync followers too, as Kafka's).
    moving = create(admin, cluster, [1], **SIDES[side])
    steady = create(admin, cluster, [1, 2, 3], **{"min.insync.replicas": "3"})
    values = fill(cluster, moving)
    # One rate per broker and side, as Kafka's: let what an earlier test's move recorded expire
    # (replication.quota.window.num windows), so this move starts from nothing.
    for _ in deadline_loop(60, "the replication byte rates of earlier moves back to 0"):
        if (byte_rate(cluster, 1, "kafka_server_leaderreplication_byte_rate") == 0
                and byte_rate(cluster, 3, "kafka_server_followerreplication_byte_rate") == 0):
            break
    set_rates(admin, RATE)
    tp = TopicPartition(moving, 0)
    try:
        with ContinuousProducer(cluster.bootstrap, steady, 1) as producer:
            started = time.monotonic()
            assert kafka_admin.alter_partition_reassignments({tp: [3]}) == {tp: None}
            # the non-throttled partition, replicated by broker 3 too, takes acks=all writes meanwhile
            producer.wait_for_new_acks(0, count=100, timeout=60)
            for _ in deadline_loop(60, "broker 3 copying some of the throttled partition"):
                if copied_bytes(cluster, 3, moving) > 0:
                    break
            if side == "both":   # the throttled bytes show in the byte-rate gauges
                for _ in deadline_loop(60, "the throttled copy in the brokers' byte rates"):
                    if (byte_rate(cluster, 1, "kafka_server_leaderreplication_byte_rate") > 0
                            and byte_rate(cluster, 3, "kafka_server_followerreplication_byte_rate") > 0):
                        break
            total = MESSAGES * VALUE_SIZE
            time.sleep(max(0.0, started + 0.5 * total / RATE - time.monotonic()))
            # Never faster than the rate since the move began (a lower bound on the time only: the
            # waits above may have taken longer on a loaded machine, so what it allows is measured
            # now). SimpleRate spans at least one window, and the check before a fetch lets one
            # fetch (replica.fetch.max.bytes) go over.
            copied = copied_bytes(cluster, 3, moving)
            elapsed = time.monotonic() - started
            assert copied <= RATE * max(elapsed, 1.0) * 1.1 + 65536, \
                f"{copied} bytes copied in {elapsed:.1f}s at {RATE} bytes/s"
            if elapsed < 0.9 * total / RATE:
                assert kafka_admin.list_partition_reassignments().get(tp) is not None
            producer.wait_for_new_acks(0, count=100, timeout=60)
        assert not producer.failed, producer.failed[:5]
    finally:
        set_rates(admin, None)  # lifted: the move completes at full speed
    for _ in deadline_loop(180, "the move to broker 3 finished on every broker"):
        if not kafka_admin.list_partition_reassignments() and all(
                replicas_and_isr(cluster, moving, b) == ([3], [3]) for b in BROKERS):
            break
    messages = read_partition(cluster.bootstrap, moving, 0, MESSAGES, timeout=120)
    assert [m.offset() for m in messages] == list(range(MESSAGES))
    assert [m.value() for m in messages] == values


def error_code(futures) -> int:
    future, = futures.values()
    with pytest.raises(KafkaException) as raised:
        future.result(TIMEOUT)
    return raised.value.args[0].code()


@pytest.mark.parametrize("value", ["-1", "fast", "1.5"])
def test_a_bad_throttle_rate_is_an_invalid_request(admin, value):
    for key in (LEADER_RATE, FOLLOWER_RATE):
        resource = ConfigResource("BROKER", "2", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        assert error_code(admin.incremental_alter_configs([resource])) == KafkaError.INVALID_REQUEST
        assert broker_config(admin, 2, key) == str(2**63 - 1)   # nothing stored


def test_a_throttle_rate_cannot_be_appended_to(admin):
    # Kafka's "Can't APPEND to key ... because its type is not LIST." (handlers/configs.py)
    resource = ConfigResource("BROKER", "2", incremental_configs=[
        ConfigEntry(LEADER_RATE, "10", incremental_operation=AlterConfigOpType.APPEND)])
    assert error_code(admin.incremental_alter_configs([resource])) == KafkaError.INVALID_CONFIG


@pytest.mark.parametrize("value", ["0-1", "0:a", "*,0:1", "0:1:2"])
def test_bad_throttled_replicas_are_an_invalid_config(cluster, admin, value):
    topic = create(admin, cluster, [1, 2])
    for key in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
        resource = ConfigResource("TOPIC", topic, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        assert error_code(admin.incremental_alter_configs([resource])) == KafkaError.INVALID_CONFIG
        name = f"refused-{uuid.uuid4().hex[:8]}"
        created = admin.create_topics([NewTopic(name, 1, replication_factor=1, config={key: value})])
        assert error_code(created) == KafkaError.INVALID_CONFIG
