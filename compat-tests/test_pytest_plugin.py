"""The pytest plugin (kafkacompat/pytest_plugin.py) used as a project would use it: the fixtures
come from the installed package's pytest11 entry point, nothing in this repo's conftest
provides them. Also dev-cluster's broker stop/start and leader elections through the HTTP API."""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import confluent_kafka.admin
import pytest

from kafkacompat.testing.http import http_request


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        while len(values) < expected:
            message = consumer.poll(30)
            assert message is not None, f"consumed {len(values)} of {expected}"
            assert message.error() is None, message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()


def _produce(bootstrap: str, topic: str, values: list[bytes], **config) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    failures = []
    for value in values:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda error, _: failures.append(error) if error else None)
    assert producer.flush(60) == 0
    assert failures == []


def test_kafka_broker_serves_clients_and_its_api(kafka_broker):
    topic = f"plugin-{uuid.uuid4().hex[:8]}"
    _produce(kafka_broker.bootstrap_servers, topic, [b"a", b"b"])
    assert _consume_all(kafka_broker.bootstrap_servers, topic, 2) == [b"a", b"b"]
    assert http_request("GET", kafka_broker.http_url + "/v1/brokers").json()[0]["port"] == kafka_broker.port
    assert "kafka_broker" in str(kafka_broker.data_dir)


def test_kafka_broker_injects_faults(kafka_broker):
    topic = f"plugin-{uuid.uuid4().hex[:8]}"
    fault = kafka_broker.inject_fault(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=2, topic=topic)
    assert fault["remaining"] == 2 and fault["id"] >= 1
    _produce(kafka_broker.bootstrap_servers, topic, [b"once"], **{"enable.idempotence": False})
    assert _consume_all(kafka_broker.bootstrap_servers, topic, 1) == [b"once"]
    assert http_request("GET", kafka_broker.http_url + "/v1/faults").json()[0]["remaining"] == 0
    with pytest.raises(ValueError, match="valid apis"):
        kafka_broker.inject_fault(api="NoSuchApi", error=6)
    kafka_broker.clear_faults()
    assert http_request("GET", kafka_broker.http_url + "/v1/faults").json() == []


def _partition(cluster, topic: str) -> dict:
    """Partition 0 as a broker's console shows it; until that broker's metadata has the new topic
    (it answers 404 for a moment after CreateTopics returns), no leader and no ISR."""
    any_url = next(iter(cluster.http_urls.values()))
    answer = http_request("GET", f"{any_url}/v1/topics/{topic}")
    if answer.status == 404:
        return {"leader": -1, "isr": []}
    return answer.json()["partition_details"][0]


def _wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_kafka_cluster_replicates_and_survives_a_crash(kafka_cluster):
    assert sorted(kafka_cluster.brokers) == [0, 1, 2]
    topic = f"plugin-{uuid.uuid4().hex[:8]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 3)])[topic].result(30)
    _wait_for(lambda: len(_partition(kafka_cluster, topic)["isr"]) == 3, "a full ISR")
    _produce(kafka_cluster.bootstrap_servers, topic, [b"before"], acks="all")
    leader = _partition(kafka_cluster, topic)["leader"]

    kafka_cluster.stop(leader)
    assert leader not in kafka_cluster.brokers
    _wait_for(lambda: _partition(kafka_cluster, topic)["leader"] not in (leader, -1), "a new leader")
    _produce(kafka_cluster.bootstrap_servers, topic, [b"during"], acks="all")

    kafka_cluster.start(leader)
    assert leader in kafka_cluster.brokers
    _wait_for(lambda: len(_partition(kafka_cluster, topic)["isr"]) == 3, "the restarted broker back in the ISR")
    assert _consume_all(kafka_cluster.bootstrap_servers, topic, 2) == [b"before", b"during"]


def test_dev_cluster_brokers_stop_start_and_elect_through_the_http_api(kafka_cluster):
    urls = kafka_cluster.http_urls
    topic = f"plugin-{uuid.uuid4().hex[:8]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, replica_assignment=[[2, 0, 1]])])[topic].result(30)
    _wait_for(lambda: len(_partition(kafka_cluster, topic)["isr"]) == 3, "a full ISR")

    assert http_request("POST", f"{urls[0]}/v1/brokers/2/stop").status == 200
    assert http_request("POST", f"{urls[0]}/v1/brokers/2/stop").status == 409
    running = {b["id"]: b["running"] for b in http_request("GET", f"{urls[0]}/v1/brokers").json()}
    assert running == {0: True, 1: True, 2: False}
    _wait_for(lambda: _partition(kafka_cluster, topic)["leader"] in (0, 1), "the leader moved off broker 2")

    assert http_request("POST", f"{urls[1]}/v1/brokers/2/start").status == 200
    assert 2 in kafka_cluster.brokers
    _wait_for(lambda: len(_partition(kafka_cluster, topic)["isr"]) == 3, "broker 2 back in the ISR")
    elected = http_request("POST", f"{urls[0]}/v1/topics/{topic}/elect-leaders").json()
    assert elected == [{"topic": topic, "partition": 0, "error": "NONE", "message": None}]
    _wait_for(lambda: _partition(kafka_cluster, topic)["leader"] == 2, "the preferred leader back")

    # a broker asked to stop itself answers first, then stops
    assert http_request("POST", f"{urls[1]}/v1/brokers/1/stop").status == 202
    _wait_for(lambda: 1 not in kafka_cluster.brokers, "broker 1 stopped")
    assert {b["id"]: b["running"] for b in http_request("GET", f"{urls[0]}/v1/brokers").json()}[1] is False
    assert http_request("POST", f"{urls[0]}/v1/brokers/1/start").status == 200


def test_the_readme_example(kafka_broker):
    kafka_broker.inject_fault(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=2)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce("orders", b"v")
    assert producer.flush(10) == 0  # retried past the injected errors, written once


PROJECT_TESTS = '''
import confluent_kafka

def test_one(kafka_broker):
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce("t", b"v")
    assert producer.flush(30) == 0
    print("BROKER", kafka_broker.bootstrap_servers)

def test_two(kafka_broker):
    print("BROKER", kafka_broker.bootstrap_servers)
'''


def test_a_project_gets_the_fixtures_from_the_installed_plugin(tmp_path):
    """A fresh pytest process in a directory of its own (no conftest, no ini): the entry point
    alone provides kafka_broker, started once for the session."""
    import subprocess
    import sys

    (tmp_path / "test_project.py").write_text(PROJECT_TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_project.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    import re

    brokers = re.findall(r"BROKER (\S+)", done.stdout)
    assert len(brokers) == 2 and len(set(brokers)) == 1 and "2 passed" in done.stdout


def test_each_broker_shows_the_groups_it_coordinates_and_names_the_coordinator_of_others(kafka_cluster):
    topic = f"plugin-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    _produce(kafka_cluster.bootstrap_servers, topic, [b"g"])
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": group,
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = None
        while message is None or message.error() is not None:
            message = consumer.poll(30)
            assert message is not None, "nothing consumed"
        consumer.commit(asynchronous=False)
        listed = {broker_id: [g["group_id"] for g in http_request("GET", f"{url}/v1/groups").json()]
                  for broker_id, url in kafka_cluster.http_urls.items()}
        [coordinator] = [broker_id for broker_id, groups in listed.items() if group in groups]
        detail = http_request("GET", f"{kafka_cluster.http_urls[coordinator]}/v1/groups/{group}").json()
        assert [(o["topic"], o["committed_offset"], o["lag"]) for o in detail["offsets"]] == [(topic, 1, 0)]
        for broker_id, url in kafka_cluster.http_urls.items():
            if broker_id != coordinator:
                answer = http_request("GET", f"{url}/v1/groups/{group}")
                assert answer.status == 421
                assert answer.json()["error"].startswith(f"broker {coordinator} coordinates group")
    finally:
        consumer.close()
