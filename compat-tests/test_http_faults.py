"""Injected faults against real clients (confluent-kafka, kafka-python, kafkajs), added through the
HTTP API or the ``kafkacompat fault`` CLI: a producer's retries under NOT_LEADER_OR_FOLLOWER
deliver each message once (the broker applied none of the failed requests), an injected delay
shows in the client's latency, a closed connection is reconnected, and a consumer reads
everything through injected Fetch errors. Producers are not idempotent, so a request the broker
had applied before failing would show up as a duplicate."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import kafka
import pytest

from kafkacompat.testing.http import add_fault, clear_faults, http_request
from kafkacompat.testing.process import BrokerProcess, free_port

JS = Path(__file__).parent / "js"
MESSAGES = 3
DELAY_MS = 400


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    http_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("http-faults"), extra_args=["--http-port", str(http_port)]).start()
    broker.wait_for_output("HTTP console")
    yield broker, f"127.0.0.1:{http_port}"
    broker.kill()


@pytest.fixture
def topic(served):
    broker, http = served
    name = f"faults-{uuid.uuid4().hex[:8]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(name, 1, 1)])[name].result(30)
    yield name
    clear_faults(f"http://{http}")


# ---- the three producers: MESSAGES sends, one at a time; (offset, seconds) each ---------------


def send_confluent(bootstrap: str, topic: str) -> list[tuple[int, float]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                                         "enable.idempotence": False, "retry.backoff.ms": 50})
    sends = []
    for i in range(MESSAGES):
        delivered = []
        started = time.monotonic()
        producer.produce(topic, value=f"confluent-{i}".encode(), partition=0,
                         on_delivery=lambda error, message: delivered.append((error, message.offset())))
        assert producer.flush(60) == 0
        [(error, offset)] = delivered
        assert error is None, error
        sends.append((offset, time.monotonic() - started))
    return sends


def send_kafka_python(bootstrap: str, topic: str) -> list[tuple[int, float]]:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False,
                                   retries=5, retry_backoff_ms=50, linger_ms=0)
    try:
        sends = []
        for i in range(MESSAGES):
            started = time.monotonic()
            metadata = producer.send(topic, value=f"kafka-python-{i}".encode(), partition=0).get(timeout=60)
            sends.append((metadata.offset, time.monotonic() - started))
        return sends
    finally:
        producer.close(timeout=10)


def send_kafkajs(bootstrap: str, topic: str) -> list[tuple[int, float]]:
    assert (JS / "node_modules" / "kafkajs").is_dir(), f"run: cd {JS} && npm install --no-audit --no-fund"
    done = subprocess.run(["node", str(JS / "faults.js"), bootstrap, topic, str(MESSAGES)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    sends = json.loads(done.stdout)
    assert all(send["errorCode"] == 0 for send in sends), sends
    return [(send["offset"], send["ms"] / 1000) for send in sends]


SENDERS = {"confluent": (send_confluent, "confluent"), "kafka-python": (send_kafka_python, "kafka-python"),
           "kafkajs": (send_kafkajs, "kafkajs")}


def stored_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=30)
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        values = []
        while len(values) < high:
            message = consumer.poll(10)
            assert message is not None, f"read {len(values)} of {high}"
            assert message.error() is None, message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()


def inject(via: str, http: str, **fields) -> None:
    """Through the HTTP API, or the ``kafkacompat fault add`` command line."""
    if via == "http":
        add_fault(f"http://{http}", **fields)
        return
    args = [sys.executable, "-m", "kafkacompat", "fault", "add", "--http", http]
    for key, value in fields.items():
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fault ") and " added: " in done.stdout


def faults(http: str) -> list[dict]:
    return http_request("GET", f"http://{http}/v1/faults").json()


# Each client meets each fault kind; each fault kind is added through both the API and the CLI.
VIA = {("confluent", "error"): "http", ("confluent", "delay"): "cli", ("confluent", "close"): "http",
       ("kafka-python", "error"): "cli", ("kafka-python", "delay"): "http", ("kafka-python", "close"): "cli",
       ("kafkajs", "error"): "http", ("kafkajs", "delay"): "cli", ("kafkajs", "close"): "http"}


@pytest.mark.parametrize("client", list(SENDERS))
def test_retries_under_not_leader_deliver_each_message_once(served, topic, client):
    broker, http = served
    send, prefix = SENDERS[client]
    inject(VIA[client, "error"], http, api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=2, topic=topic)
    sends = send(broker.bootstrap, topic)
    assert [offset for offset, _ in sends] == list(range(MESSAGES))
    assert stored_values(broker.bootstrap, topic) == [f"{prefix}-{i}".encode() for i in range(MESSAGES)]
    [fault] = faults(http)
    assert (fault["remaining"], fault["matched"], fault["error"]) == (0, 2, "NOT_LEADER_OR_FOLLOWER")


@pytest.mark.parametrize("client", list(SENDERS))
def test_an_injected_delay_shows_in_the_clients_latency(served, topic, client):
    broker, http = served
    send, _ = SENDERS[client]
    inject(VIA[client, "delay"], http, api="Produce", delay_ms=DELAY_MS, count=1, topic=topic)
    sends = send(broker.bootstrap, topic)
    assert [offset for offset, _ in sends] == list(range(MESSAGES))
    assert max(seconds for _, seconds in sends) >= DELAY_MS / 1000
    assert faults(http)[0]["remaining"] == 0


@pytest.mark.parametrize("client", list(SENDERS))
def test_a_closed_connection_is_reconnected(served, topic, client):
    broker, http = served
    send, prefix = SENDERS[client]
    inject(VIA[client, "close"], http, api="Produce", close=True, count=1, topic=topic)
    sends = send(broker.bootstrap, topic)
    assert [offset for offset, _ in sends] == list(range(MESSAGES))
    assert stored_values(broker.bootstrap, topic) == [f"{prefix}-{i}".encode() for i in range(MESSAGES)]
    [fault] = faults(http)
    assert fault["matched"] == 1
    broker.wait_for_output(f"fault {fault['id']} closes the connection of this Produce request")


def read_with_kafka_python(bootstrap: str, topic: str) -> list[bytes]:
    """kafka-python 3 consumes with fetch sessions (KIP-227): an injected error must not wedge one."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        partition = kafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < MESSAGES:
            assert time.monotonic() < deadline, f"read {len(values)} of {MESSAGES}"
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("reader", ["confluent", "kafka-python"])
def test_a_consumer_reads_everything_through_injected_fetch_errors(served, topic, reader):
    broker, http = served
    send_confluent(broker.bootstrap, topic)
    inject("http", http, api="Fetch", error="NOT_LEADER_OR_FOLLOWER", count=2, topic=topic)
    read = stored_values if reader == "confluent" else read_with_kafka_python
    assert read(broker.bootstrap, topic) == [f"confluent-{i}".encode() for i in range(MESSAGES)]
    assert faults(http)[0]["matched"] == 2


def test_cli_lists_and_clears_faults(served, topic):
    _, http = served
    inject("cli", http, api="Metadata", error="LEADER_NOT_AVAILABLE", count=5, topic="elsewhere")
    inject("cli", http, api=3, delay_ms=10, count=2, client_id="nobody")

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "kafkacompat", "fault", *args, "--http", http],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    listing = cli("list")
    assert "Metadata topic elsewhere: error LEADER_NOT_AVAILABLE; 5 of 5 left" in listing
    assert "Metadata client_id nobody: delay 10 ms; 2 of 2 left" in listing
    first = faults(http)[0]["id"]
    assert cli("clear", "--id", str(first)) == "1 fault(s) removed\n"
    assert cli("clear") == "1 fault(s) removed\n"
    assert cli("list") == "no faults\n"


def test_cli_reports_refusals_and_unreachable_brokers(served):
    _, http = served
    refused = subprocess.run([sys.executable, "-m", "kafkacompat", "fault", "add", "--http", http, "--api", "Nope",
                              "--error", "NOT_LEADER_OR_FOLLOWER"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "answered 400: unknown api 'Nope'; valid apis: Produce" in refused.stderr
    unreachable = subprocess.run([sys.executable, "-m", "kafkacompat", "fault", "list", "--http",
                                  f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 1 and "cannot reach the broker's HTTP API" in unreachable.stderr
