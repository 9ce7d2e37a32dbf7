"""The broker's HTTP side against a real broker process: the /v1 JSON API and /metrics show what
real clients did (topics, partitions, a live consumer group with its lag), bad input to every
route is a 4xx with a message and never touches the Kafka listener, and an HTTP port in use or
--no-http leave the broker serving Kafka."""

from __future__ import annotations

import socket
import time

import confluent_kafka
import confluent_kafka.admin
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kafkacompat.testing.http import http_request
from kafkacompat.testing.process import BrokerProcess, free_port

TOPIC = "orders"
PARTITIONS = 3
MESSAGES_PER_PARTITION = 6
CONSUMED = 4  # per partition; the group's lag is MESSAGES_PER_PARTITION - CONSUMED each
GROUP = "billing"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    http_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("http-api"), extra_args=["--http-port", str(http_port)]).start()
    base = f"http://127.0.0.1:{http_port}"
    broker.wait_for_output("HTTP console")
    consumer = _produce_and_consume(broker.bootstrap)
    yield broker, base
    consumer.close()
    broker.kill()


def _wait_for_http(broker: BrokerProcess, base: str) -> None:
    broker.wait_for_output("HTTP console")


def _produce_and_consume(bootstrap: str) -> confluent_kafka.Consumer:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(PARTITIONS):
        for i in range(MESSAGES_PER_PARTITION):
            producer.produce(TOPIC, value=f"order {partition}-{i}".encode(), key=f"k{i}".encode(),
                             partition=partition, headers=[("source", b"test"), ("bin", b"\x00\xff")])
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": "billing-worker",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.subscribe([TOPIC])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while sum(seen.values()) < PARTITIONS * MESSAGES_PER_PARTITION and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen[message.partition()] = seen.get(message.partition(), 0) + 1
    assert seen == {p: MESSAGES_PER_PARTITION for p in range(PARTITIONS)}
    consumer.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, p, CONSUMED) for p in range(PARTITIONS)],
                    asynchronous=False)
    return consumer


def get(base: str, path: str):
    answer = http_request("GET", base + path)
    assert answer.status == 200, (path, answer.status, answer.body[:500])
    return answer.json()


# ---- the JSON API -----------------------------------------------------------------------------


def test_brokers_and_topics(served):
    broker, base = served
    assert get(base, "/v1/brokers") == [{"id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None,
                                         "controller": True, "this_broker": True}]
    listed = {t["name"]: t for t in get(base, "/v1/topics")}
    assert listed[TOPIC]["partitions"] == PARTITIONS
    assert listed[TOPIC]["messages"] == PARTITIONS * MESSAGES_PER_PARTITION
    assert listed["__consumer_offsets"]["internal"] is True


def test_topic_detail_per_partition(served):
    _, base = served
    detail = get(base, f"/v1/topics/{TOPIC}")
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"], p["log_start_offset"], p["high_watermark"],
             p["last_stable_offset"], p["log_end_offset"], p["segments"]) for p in detail["partition_details"]] == [
        (p, 0, [0], [0], 0, MESSAGES_PER_PARTITION, MESSAGES_PER_PARTITION, MESSAGES_PER_PARTITION, 1)
        for p in range(PARTITIONS)]
    assert all(p["size_bytes"] > 0 for p in detail["partition_details"])


def test_group_with_members_offsets_and_lag(served):
    _, base = served
    assert [(g["group_id"], g["state"], g["members"], g["lag"]) for g in get(base, "/v1/groups")] == [
        (GROUP, "Stable", 1, PARTITIONS * (MESSAGES_PER_PARTITION - CONSUMED))]
    detail = get(base, f"/v1/groups/{GROUP}")
    assert (detail["state"], detail["protocol_type"], detail["protocol"]) == ("Stable", "consumer", "range")
    [member] = detail["members"]
    assert member["client_id"] == "billing-worker" and member["client_host"].endswith("127.0.0.1")
    assert member["assignment"] == {TOPIC: list(range(PARTITIONS))}
    assert [(o["topic"], o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"])
            for o in detail["offsets"]] == [
        (TOPIC, p, CONSUMED, MESSAGES_PER_PARTITION, MESSAGES_PER_PARTITION - CONSUMED) for p in range(PARTITIONS)]


def test_messages_with_keys_headers_and_paging(served):
    _, base = served
    page = get(base, f"/v1/topics/{TOPIC}/messages?partition=1&offset=2&limit=3")
    assert [(r["offset"], r["key"]["text"], r["value"]["text"]) for r in page["records"]] == [
        (2, "k2", "order 1-2"), (3, "k3", "order 1-3"), (4, "k4", "order 1-4")]
    assert page["records"][0]["headers"] == [
        {"key": "source", "value": {"text": "test", "size": 4, "truncated": False}},
        {"key": "bin", "value": {"hex": "00 ff", "size": 2, "truncated": False}}]
    assert (page["next_offset"], page["previous_offset"]) == (5, 0)
    last = get(base, f"/v1/topics/{TOPIC}/messages?partition=1&offset=5")
    assert [r["offset"] for r in last["records"]] == [5] and last["next_offset"] is None
    newest = get(base, f"/v1/topics/{TOPIC}/messages?partition=2&limit=2")
    assert [r["offset"] for r in newest["records"]] == [4, 5]


def test_messages_page_across_batches(served):
    """One batch per record (a flush after each): a page reads on through the batches after the
    first one the log returns (it used to stop after the first)."""
    broker, base = served
    topic = "one-record-batches"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 1)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, value=b"single %d" % i, partition=0)
        assert producer.flush(30) == 0
    page = get(base, f"/v1/topics/{topic}/messages?partition=0&offset=1&limit=3")
    assert [(r["offset"], r["value"]["text"]) for r in page["records"]] == [
        (1, "single 1"), (2, "single 2"), (3, "single 3")]
    assert page["next_offset"] == 4
    assert [r["offset"] for r in get(base, f"/v1/topics/{topic}/messages?partition=0")["records"]] == [0, 1, 2, 3, 4]


# ---- /metrics ---------------------------------------------------------------------------------


def _samples(base: str) -> dict[tuple[str, tuple], float]:
    answer = http_request("GET", base + "/metrics")
    assert answer.status == 200 and answer.content_type.startswith("text/plain; version=0.0.4")
    families = list(text_string_to_metric_families(answer.text))
    untyped = [family.name for family in families if family.type not in ("counter", "gauge", "histogram")]
    assert untyped == []  # every sample belongs to the family its TYPE line declares
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in families for sample in family.samples}


def test_metrics_parse_and_count_traffic(served):
    broker, base = served
    before = _samples(base)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce(TOPIC, value=b"metered %d" % i, partition=0)
        producer.flush(30)
    after = _samples(base)
    topic = (("topic", TOPIC),)
    assert after[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == \
        before[("kafka_server_brokertopicmetrics_messagesin_total", topic)] + 5
    assert after[("kafka_server_brokertopicmetrics_bytesin_total", topic)] > \
        before[("kafka_server_brokertopicmetrics_bytesin_total", topic)]
    produce = (("request", "Produce"),)
    assert after[("kafka_network_requestmetrics_requests_total", produce)] == \
        before[("kafka_network_requestmetrics_requests_total", produce)] + 5
    assert after[("kafkacompat_request_duration_seconds_count", produce)] == \
        after[("kafka_network_requestmetrics_requests_total", produce)]
    assert after[("kafkacompat_request_duration_seconds_bucket", (("le", "+Inf"), ("request", "Produce")))] == \
        after[("kafkacompat_request_duration_seconds_count", produce)]
    assert after[("kafka_server_brokertopicmetrics_bytesout_total", topic)] > 0
    assert after[("kafka_log_log_size", (("partition", "0"), ("topic", TOPIC)))] > \
        before[("kafka_log_log_size", (("partition", "0"), ("topic", TOPIC)))]
    assert after[("kafka_consumergroup_lag", (("group", GROUP), ("partition", "0"), ("topic", TOPIC)))] == \
        MESSAGES_PER_PARTITION + 5 - CONSUMED
    assert after[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert after[("process_resident_memory_bytes", ())] > 0
    assert after[("process_open_fds", ())] > 0


# ---- bad input --------------------------------------------------------------------------------

BAD_REQUESTS = [
    ("GET", "/nowhere", None, 404),
    ("GET", "/v1/nowhere", None, 404),
    ("DELETE", "/v1/topics", None, 405),
    ("PUT", "/v1/faults", None, 405),
    ("GET", "/v1/topics/no-such-topic", None, 404),
    ("GET", "/v1/groups/no-such-group", None, 404),
    ("GET", f"/v1/topics/{TOPIC}/messages?partition=9", None, 404),
    ("GET", f"/v1/topics/{TOPIC}/messages?partition=x", None, 400),
    ("GET", f"/v1/topics/{TOPIC}/messages?offset=-1", None, 400),
    ("GET", f"/v1/topics/{TOPIC}/messages?limit=0", None, 400),
    ("GET", "/v1/topics/no-such-topic/messages", None, 404),
    ("POST", "/v1/faults", b"{not json", 400),
    ("POST", "/v1/faults", b"\xff\xfe", 400),
    ("POST", "/v1/faults", b"[]", 400),
    ("POST", "/v1/faults", b'{"api": "Produce", "error": "NOPE"}', 400),
    ("POST", "/v1/faults", b'{"api": "NoSuchApi", "error": 6}', 400),
    ("POST", "/v1/faults", b'{"api": 4, "error": 6}', 400),  # LeaderAndIsr: not served
    ("POST", "/v1/faults", b'{"api": "Produce", "error": 6, "count": -3}', 400),
    ("POST", "/v1/faults", b'{"api": "Produce", "delay_ms": 1e9}', 400),
    ("DELETE", "/v1/faults/12345", None, 404),
    ("DELETE", "/v1/faults/abc", None, 400),
    ("POST", "/v1/brokers/0/stop", None, 404),  # only in dev-cluster
    ("POST", "/v1/brokers/x/start", None, 404),
    ("POST", "/v1/topics/no-such-topic/elect-leaders", None, 404),
    ("POST", f"/v1/topics/{TOPIC}/elect-leaders", b'{"partitions": [99]}', 400),
    ("POST", f"/v1/topics/{TOPIC}/elect-leaders", b"[1]", 400),
    ("GET", "/topics/no-such-topic", None, 404),
    ("GET", f"/topics/{TOPIC}/messages?partition=-1", None, 400),
    ("GET", "/groups/no-such-group", None, 404),
    ("POST", "/", None, 405),
]


@pytest.mark.parametrize("method,path,body,status", BAD_REQUESTS, ids=[f"{m} {p}" for m, p, _, _ in BAD_REQUESTS])
def test_bad_input_is_a_4xx_with_a_message(served, method, path, body, status):
    broker, base = served
    answer = http_request(method, base + path, raw=body)
    assert answer.status == status, answer.body
    message = answer.json()["error"] if path.startswith("/v1/") else answer.text
    assert message.strip()
    assert "Traceback" not in broker.output()


def test_unknown_names_answer_the_valid_ones(served):
    _, base = served
    api = http_request("POST", base + "/v1/faults", {"api": "Prodcue", "error": 6}).json()["error"]
    assert "Produce" in api and "Fetch" in api and "ApiVersions" in api
    error = http_request("POST", base + "/v1/faults", {"api": "Produce", "error": "NOT_LEADER"}).json()["error"]
    assert "NOT_LEADER_OR_FOLLOWER" in error and "REQUEST_TIMED_OUT" in error


def test_garbage_and_oversized_http_leave_kafka_serving(served):
    broker, base = served
    port = int(base.rsplit(":", 1)[1])
    for garbage in (b"\x00\x01\x02 nonsense\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n",
                    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(garbage)
            reply = sock.recv(200)
            assert reply.startswith(b"HTTP/1.1 4"), reply
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(TOPIC, value=b"still serving", partition=2)
    assert producer.flush(30) == 0
    assert get(base, "/v1/brokers")[0]["id"] == 0


# ---- the listener's settings ------------------------------------------------------------------


def test_an_http_port_in_use_is_a_warning_and_kafka_serves(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(tmp_path / "data", extra_args=["--http-port", str(port)]).start()
        try:
            broker.wait_for_output(f"WARNING kafkacompat.http: HTTP port 127.0.0.1:{port} is in use")
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
            producer.produce("after-warning", value=b"v")
            assert producer.flush(30) == 0
        finally:
            broker.kill()


def test_no_http_serves_no_http(tmp_path):
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", extra_args=["--no-http", "--http-port", str(port)]).start()
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("no-http", value=b"v")
        assert producer.flush(30) == 0
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert "HTTP console" not in broker.output()
    finally:
        broker.kill()


def test_keep_alive_and_head(served):
    import http.client

    _, base = served
    connection = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=10)
    try:
        for path in ("/v1/brokers", "/topics", "/v1/nowhere"):
            connection.request("GET", path)
            answer = connection.getresponse()
            assert answer.status == (404 if path == "/v1/nowhere" else 200) and answer.read()
        connection.request("HEAD", "/metrics")
        answer = connection.getresponse()
        assert answer.status == 200 and int(answer.getheader("Content-Length")) > 0 and answer.read() == b""
        connection.request("GET", f"/topics/{TOPIC}")  # the connection still serves after a HEAD
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def test_changes_from_another_sites_page_are_refused(served):
    _, base = served
    host = base.removeprefix("http://")
    evil = http_request("POST", base + "/v1/faults", {"api": "Produce", "error": 6},
                        headers={"Origin": "http://evil.example"})
    assert evil.status == 403 and "another origin" in evil.json()["error"]
    assert http_request("GET", base + "/v1/faults").json() == []
    own = http_request("POST", base + "/v1/faults", {"api": "Produce", "delay_ms": 1, "topic": "nope"},
                       headers={"Origin": f"http://{host}"})
    assert own.status == 201
    assert http_request("DELETE", base + "/v1/faults").status == 200



def test_http_connections_are_capped_and_kafka_keeps_serving(served):
    from kafkacompat.http.server import MAX_CONNECTIONS

    broker, base = served
    port = int(base.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            try:
                extra.sendall(b"GET /v1/brokers HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = extra.recv(100)
            except ConnectionResetError:  # closed before it read the request
                reply = b""
            assert reply == b""  # closed unanswered
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(TOPIC, value=b"beside a full HTTP listener", partition=2)
        assert producer.flush(30) == 0
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 30
    while True:  # the slots come back as the server sees the idle connections close
        try:
            answer = http_request("GET", base + "/v1/brokers")
            if answer.status == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the HTTP listener never served again"
        time.sleep(0.05)
