"""Hostile clients against a real broker: a seeded fuzzer of frames, headers, bodies and damaged
Produce batches, with a well-behaved producer/consumer pair beside it.

    python benchmarks/hostile.py [--frames N] [--seed S] [--concurrency C] [--connections K]
                                 [--bootstrap HOST:PORT [--broker-pid PID] [--broker-log PATH]]
                                 [--max-seconds T] [--json] [--show-frame I]

Without --bootstrap it starts a broker subprocess (kafkacompat/testing/process.py) with
group.initial.rebalance.delay.ms=0 and group.max.session.timeout.ms=10000, as the fuzz test does.
Frame i is built from its own Random(seed, i), so ``--show-frame I`` prints the exact bytes of
any frame a report names, and the client id of every framed request is ``hostile:<kind>:<i>``,
so a traceback in the broker log points at the frame that caused it.

Frame kinds (weights in KINDS): random bytes; a valid size prefix with garbage; truncated
requests; sizes over socket.request.max.bytes, negative, or within it but never sent; valid
headers with unknown API keys or versions; valid headers with damaged bodies of every API and
version the broker serves, from empty and from populated templates (kafkacompat/testing/fuzz.py, shared with
compat-tests/test_fuzz_requests.py); Produce requests (acks=-1) carrying one damaged
RecordBatch of each kind in fuzz.DAMAGED_BATCHES, each kind to its own partition.

What each frame must get (fuzz.Bound): a complete request is followed by an ApiVersions probe and
must be answered (or its connection closed) within the wait its own fields allow plus 5 s (one
whose fields allow more than a minute is waited for a minute, and counted as held within its own
bound if still held then, as Kafka would hold it); a
frame that is not a complete request is followed by a half-close, and the broker must close the
connection within 5 s; a size the broker must refuse (negative, over the limit) must close it
within 5 s without the half-close. Anything else is counted as unanswered past its bound.

C workers (--concurrency) send frames one at a time each, reusing a connection while the broker
keeps it open; K bystander connections (--connections) stay open for the whole run and send the
probe once a second, each answer due within 5 s. Beside them a confluent-kafka producer (acks=all,
idempotent) writes numbered messages and a consumer reads them: every acknowledged message must
arrive. At the end each damaged-batch partition gets one good marker record and a confluent-kafka
consumer must read each partition from offset 0 up to its marker ("readable past it").

It prints figures and asserts nothing. Loopback only; it stops after N frames or --max-seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from kafkacompat.testing import fuzz
from kafkacompat.testing.process import BrokerProcess

REQUEST_MAX_BYTES = 104_857_600  # socket.request.max.bytes default
MAX_SESSION_MS = 10_000
BATCH_TOPIC = "hostile-batches"
SIDE_TOPIC = "hostile-side"
BATCH_KINDS = list(fuzz.DAMAGED_BATCHES)
PRODUCE_VERSIONS = range(3, 13)  # magic 2 only; v13 names topics by id

KINDS = {
    "mutated-body": 40, "damaged-batch": 14, "random-bytes": 8, "size-then-garbage": 8, "truncated": 8,
    "size-over-limit": 3, "size-negative": 3, "size-within-limit-unsent": 2, "unknown-api-key": 7,
    "unknown-version": 7,
}
PROBE, HALF_CLOSE, MUST_CLOSE = "probe", "half-close", "must-close"


@dataclass
class Frame:
    index: int
    kind: str
    data: bytes
    mode: str  # PROBE: a complete request; HALF_CLOSE: then SHUT_WR; MUST_CLOSE: the broker closes
    bound: fuzz.Bound
    produce_version: int = 0  # damaged-batch frames: to read the error code


class FrameMaker:
    """Frame ``i`` of a run, from Random(seed, i) alone (so any frame can be rebuilt)."""

    def __init__(self, seed: int, served: dict[int, tuple[int, int]], bounds: fuzz.Bounds) -> None:
        self.seed = seed
        self.served = served
        self.pairs = [(key, version) for key, (low, high) in sorted(served.items())
                      for version in range(low, high + 1) if fuzz.encodable(key, version)]
        self.unknown_keys = [key for key in range(-5, 200) if key not in served] + [0x7FFF, -0x8000]
        self.bounds = bounds
        self.lock = threading.Lock()
        self.kinds, self.weights = list(KINDS), list(KINDS.values())

    def make(self, index: int) -> Frame:
        rng = random.Random(self.seed * 1_000_003 + index)
        kind = rng.choices(self.kinds, self.weights)[0]
        return getattr(self, "_" + kind.replace("-", "_"))(index, kind, rng)

    def _header(self, api_key: int, version: int, index: int, kind: str) -> bytes:
        return fuzz.request_header(api_key, version, (1 << 30) + index % (1 << 30), f"hostile:{kind}:{index}")

    def _mutated_body(self, index: int, kind: str, rng: random.Random) -> Frame:
        api_key, version = rng.choice(self.pairs)
        template = rng.choice([fuzz.default_body, fuzz.populated_body])
        body = fuzz.damaged(template(api_key, version), rng.randrange(1, fuzz.TRIALS_PER_VERSION), rng)
        with self.lock:  # Bounds remembers JoinGroups
            bound = self.bounds.of(api_key, version, body)
        return Frame(index, f"{kind}:{api_key}", fuzz.frame(self._header(api_key, version, index, kind) + body), PROBE,
                     bound)

    def _damaged_batch(self, index: int, kind: str, rng: random.Random) -> Frame:
        batch_kind = rng.choice(BATCH_KINDS)
        version = rng.choice([v for v in PRODUCE_VERSIONS if self.served[0][0] <= v <= self.served[0][1]])
        body = fuzz.produce_body(BATCH_TOPIC, BATCH_KINDS.index(batch_kind), fuzz.DAMAGED_BATCHES[batch_kind](rng),
                                 version)
        with self.lock:
            bound = self.bounds.of(fuzz.PRODUCE, version, body)
        return Frame(index, f"{kind}:{batch_kind}", fuzz.frame(self._header(0, version, index, kind) + body), PROBE,
                     bound, version)

    def _unknown_api_key(self, index: int, kind: str, rng: random.Random) -> Frame:
        header = self._header(rng.choice(self.unknown_keys), rng.randrange(0, 20), index, kind)
        return Frame(index, kind, fuzz.frame(header + rng.randbytes(rng.randint(0, 32))), PROBE, _slack("must close"))

    def _unknown_version(self, index: int, kind: str, rng: random.Random) -> Frame:
        api_key = rng.choice(sorted(self.served))
        version = rng.choice([self.served[api_key][1] + rng.randint(1, 100), -rng.randint(1, 5), 0x7FFF])
        header = self._header(api_key, version, index, kind)
        # ApiVersions answers an unknown version (in the v0 layout); anything else closes.
        return Frame(index, kind, fuzz.frame(header + rng.randbytes(rng.randint(0, 32))), PROBE,
                     _slack("answered or closed at once"))

    def _random_bytes(self, index: int, kind: str, rng: random.Random) -> Frame:
        data = rng.randbytes(rng.randint(1, 64))
        if len(data) >= 4 and not 0 <= struct.unpack(">i", data[:4])[0] <= REQUEST_MAX_BYTES:
            return Frame(index, kind, data, MUST_CLOSE, _slack("size the broker refuses"))
        return Frame(index, kind, data, HALF_CLOSE, _slack("closed after the client's half-close"))

    def _size_then_garbage(self, index: int, kind: str, rng: random.Random) -> Frame:
        return Frame(index, kind, fuzz.frame(rng.randbytes(rng.randint(0, 256))), HALF_CLOSE,
                     _slack("closed after the client's half-close"))

    def _truncated(self, index: int, kind: str, rng: random.Random) -> Frame:
        api_key, version = rng.choice(self.pairs)
        whole = fuzz.frame(self._header(api_key, version, index, kind) + fuzz.default_body(api_key, version))
        return Frame(index, kind, whole[:rng.randrange(1, len(whole))], HALF_CLOSE,
                     _slack("closed after the client's half-close"))

    def _size_over_limit(self, index: int, kind: str, rng: random.Random) -> Frame:
        size = rng.choice([REQUEST_MAX_BYTES + 1, rng.randint(REQUEST_MAX_BYTES + 1, 2**31 - 1), 2**31 - 1])
        return Frame(index, kind, struct.pack(">i", size) + rng.randbytes(rng.randint(0, 32)), MUST_CLOSE,
                     _slack("size over socket.request.max.bytes"))

    def _size_negative(self, index: int, kind: str, rng: random.Random) -> Frame:
        size = rng.choice([-1, -(2**31), rng.randint(-(2**31), -1)])
        return Frame(index, kind, struct.pack(">i", size) + rng.randbytes(rng.randint(0, 32)), MUST_CLOSE,
                     _slack("negative size"))

    def _size_within_limit_unsent(self, index: int, kind: str, rng: random.Random) -> Frame:
        size = rng.randint(1 << 20, REQUEST_MAX_BYTES)
        header = self._header(0, 7, index, kind)
        return Frame(index, kind, struct.pack(">i", size) + header, HALF_CLOSE,
                     _slack("closed after the client's half-close"))


def _slack(why: str) -> fuzz.Bound:
    return fuzz.Bound(fuzz.SLACK_S, True, why)


# ---- sending --------------------------------------------------------------------------------


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0
    connections: int = 0
    outcomes: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    unanswered: list[str] = field(default_factory=list)
    unanswered_count: int = 0
    held: list[str] = field(default_factory=list)
    batch_errors: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    connect_failures: int = 0

    def record(self, frame: Frame, outcome: str, waited_s: float) -> None:
        with self.lock:
            self.sent += 1
            self.outcomes[frame.kind.split(":")[0]][outcome] += 1
            if outcome == fuzz.HELD and len(self.held) < 20:
                self.held.append(f"frame {frame.index} {frame.kind}: held {waited_s:.0f} s ({frame.bound.why})")
            if outcome in (fuzz.UNANSWERED, fuzz.DROPPED):
                self.unanswered_count += 1
                if len(self.unanswered) < 20:
                    self.unanswered.append(f"frame {frame.index} {frame.kind}: {outcome} after {waited_s:.1f} s "
                                           f"(its bound {frame.bound.seconds:.1f} s: {frame.bound.why})")


class Worker(threading.Thread):
    def __init__(self, bootstrap: str, maker: FrameMaker, indices, tally: Tally, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.maker, self.indices, self.tally, self.stop = bootstrap, maker, indices, tally, stop
        self.sock: socket.socket | None = None

    def run(self) -> None:
        for index in self.indices:
            if self.stop.is_set():
                break
            frame = self.maker.make(index)
            try:
                self._send(frame)
            except OSError:  # could not connect: the broker is gone or out of descriptors
                with self.tally.lock:
                    self.tally.connect_failures += 1
                self._drop()
                time.sleep(0.05)
        self._drop()

    def _connection(self) -> socket.socket:
        if self.sock is None:
            self.sock = fuzz.connect(self.bootstrap)
            with self.tally.lock:
                self.tally.connections += 1
        return self.sock

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _send(self, frame: Frame) -> None:
        sock = self._connection()
        waited = min(frame.bound.seconds, fuzz.LONGEST_WAIT_S)
        if frame.mode == PROBE:
            outcome, responses = fuzz.bounded_exchange(sock, frame.data, frame.bound)
            if frame.produce_version and responses:
                self._record_batch(frame, responses[0])
            if outcome not in (fuzz.ANSWERED, fuzz.NO_ANSWER_DUE):
                self._drop()
        else:
            outcome = _until_closed(sock, frame)
            self._drop()
        self.tally.record(frame, outcome, waited)

    def _record_batch(self, frame: Frame, response: bytes) -> None:
        try:
            error_code, _ = fuzz.produce_error(response, frame.produce_version)
        except Exception:  # noqa: BLE001 - an answer that does not parse is a finding too
            error_code = "unparsable answer"
        with self.tally.lock:
            self.tally.batch_errors[frame.kind.split(":", 1)[1]][error_code] += 1


def _until_closed(sock: socket.socket, frame: Frame) -> str:
    try:
        sock.sendall(frame.data)
        if frame.mode == HALF_CLOSE:
            sock.shutdown(socket.SHUT_WR)
    except (ConnectionResetError, BrokenPipeError):
        return fuzz.CLOSED
    deadline = time.monotonic() + frame.bound.seconds
    try:
        while fuzz.read_frame(sock, deadline) is not None:
            pass  # an answer before the close (e.g. ApiVersions at an unknown version)
        return fuzz.CLOSED
    except socket.timeout:
        return fuzz.UNANSWERED


class Bystanders(threading.Thread):
    """Connections that stay open all run long and must keep being answered."""

    def __init__(self, bootstrap: str, count: int, tally: Tally, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.count, self.tally, self.stop = bootstrap, count, tally, stop
        self.probes = Counter()

    def run(self) -> None:
        socks: list[socket.socket | None] = [None] * self.count
        while not self.stop.wait(1.0):
            for slot in range(self.count):
                socks[slot] = self._probe(socks[slot])
        for sock in socks:
            if sock is not None:
                sock.close()

    def _probe(self, sock: socket.socket | None) -> socket.socket | None:
        try:
            if sock is None:
                sock = fuzz.connect(self.bootstrap)
                with self.tally.lock:
                    self.tally.connections += 1
            sock.sendall(fuzz.probe_frame())
            answered = fuzz.read_frame(sock, time.monotonic() + fuzz.SLACK_S) is not None
        except (OSError, socket.timeout):
            answered = False
        self.probes["answered" if answered else "unanswered"] += 1
        if not answered and sock is not None:
            sock.close()
            return None
        return sock


# ---- the well-behaved pair -------------------------------------------------------------------


class SidePair:
    """An idempotent acks=all producer and a consumer: every acknowledged message must arrive."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: set[bytes] = set()
        self.failed = 0
        self.seen: Counter = Counter()
        self.seen_lock = threading.Lock()  # the consumer thread counts while finish() compares
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5})

        def done(err, msg) -> None:
            if err:
                self.failed += 1
            else:
                self.acked.add(msg.value())

        for n in itertools.count():
            if self.stop_producing.wait(0.01):
                break
            producer.produce(SIDE_TOPIC, value=f"side-{n}".encode(), partition=0, on_delivery=done)
            producer.poll(0)
        producer.flush(30)

    def _consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "hostile-side",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(SIDE_TOPIC, 0, OFFSET_BEGINNING)])
        try:
            while not self.stop_consuming.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    with self.seen_lock:
                        self.seen[msg.value()] += 1
        finally:
            consumer.close()

    def finish(self, timeout: float = 30.0) -> dict[str, int]:
        self.stop_producing.set()
        self.threads[0].join(40)
        deadline = time.monotonic() + timeout
        while self._missing() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.stop_consuming.set()
        self.threads[1].join(10)
        return {"acknowledged": len(self.acked), "delivery_failed": self.failed, "lost": self._missing(),
                "duplicates": sum(count - 1 for count in self.seen.values() if count > 1)}

    def _missing(self) -> int:
        with self.seen_lock:
            return len(self.acked - self.seen.keys())


def readable_past_damage(bootstrap: str) -> dict[str, dict]:
    """Append a good marker to every damaged-batch partition, then read each from offset 0 with
    librdkafka: does the consumer get past what the broker stored to the marker?"""
    from confluent_kafka import Consumer, TopicPartition

    markers: dict[int, int] = {}
    with fuzz.connect(bootstrap) as sock:
        for partition, kind in enumerate(BATCH_KINDS):
            body = fuzz.produce_body(BATCH_TOPIC, partition, fuzz.record_batch([f"marker-{kind}".encode()]), 9)
            outcome, responses = fuzz.exchange(sock, fuzz.frame(fuzz.request_header(0, 9, partition) + body),
                                               fuzz.Bound(10, True, "marker"))
            error_code, base_offset = fuzz.produce_error(responses[0], 9) if responses else (outcome, -1)
            if error_code == 0:
                markers[partition] = base_offset
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hostile-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(BATCH_TOPIC, p, 0) for p in markers])
    reached: set[int] = set()
    records: Counter = Counter()
    errors: dict[int, set[str]] = defaultdict(set)
    deadline = time.monotonic() + 30
    while len(reached) < len(markers) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            errors[msg.partition() if msg.partition() is not None else -1].add(str(msg.error())[:120])
            continue
        records[msg.partition()] += 1
        if msg.offset() >= markers.get(msg.partition(), 1 << 62):
            reached.add(msg.partition())
    consumer.close()
    return {kind: {"marker_appended": p in markers, "readable_past": p in reached, "records_read": records[p],
                   "consumer_errors": sorted(errors.get(p, ()))}
            for p, kind in enumerate(BATCH_KINDS)}


# ---- the broker ------------------------------------------------------------------------------


class RssSampler(threading.Thread):
    def __init__(self, pid: int | None, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid) if pid else None
        self.stop = stop
        self.samples: list[int] = []

    def run(self) -> None:
        while self.process is not None:
            try:
                self.samples.append(self.process.memory_info().rss)
            except psutil.Error:
                return
            if self.stop.wait(0.5):
                self.samples.append(self.process.memory_info().rss)
                return

    def figures(self) -> dict[str, float | None]:
        if not self.samples:
            return {"start_mib": None, "peak_mib": None, "end_mib": None}
        mib = 1 << 20
        return {"start_mib": round(self.samples[0] / mib, 1), "peak_mib": round(max(self.samples) / mib, 1),
                "end_mib": round(self.samples[-1] / mib, 1)}


_CLIENT_ID = re.compile(r"client id 'hostile:([^:']+(?::[^:']+)?):(\d+)'")


def tracebacks(log_path: Path | None) -> dict[str, dict]:
    """Tracebacks in the broker log, by exception and innermost frame: how many, from which
    frame kinds, and the first frame index (for --show-frame)."""
    found: dict[str, dict] = {}
    if log_path is None or not log_path.exists():
        return found
    previous, in_traceback, location = "", False, ""
    with open(log_path, errors="replace") as lines:
        for line in lines:
            if line.startswith("Traceback (most recent call last):"):
                in_traceback, location, context = True, "", previous
                continue
            if in_traceback:
                if line.startswith("  File "):
                    location = line.strip()
                elif not line.startswith(" ") and line.strip():
                    if line.startswith("During handling") or line.startswith("The above exception"):
                        continue
                    key = f"{line.strip()[:160]} | {location}"
                    entry = found.setdefault(key, {"count": 0, "kinds": Counter(), "first_frame": None})
                    entry["count"] += 1
                    match = _CLIENT_ID.search(context)
                    if match:
                        entry["kinds"][match.group(1)] += 1
                        entry["first_frame"] = entry["first_frame"] or int(match.group(2))
                    in_traceback = False
            previous = line
    return found


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(BATCH_TOPIC, num_partitions=len(BATCH_KINDS), replication_factor=1),
                                   NewTopic(SIDE_TOPIC, num_partitions=1, replication_factor=1)],
                                  operation_timeout=10, request_timeout=15)
    for future in futures.values():
        future.result(timeout=15)


def run(args: argparse.Namespace) -> dict:
    broker, workdir = None, None
    if args.bootstrap:
        bootstrap, pid, log_path = args.bootstrap, args.broker_pid, args.broker_log
    else:
        workdir = Path(tempfile.mkdtemp(prefix="hostile-"))
        broker = BrokerProcess(workdir / "data", log_path=workdir / "broker.log", extra_args=[
            "--set", "group.initial.rebalance.delay.ms=0", "--set", f"group.max.session.timeout.ms={MAX_SESSION_MS}"])
        broker.start()
        bootstrap, pid, log_path = broker.bootstrap, broker.pid(), broker.log_path
    try:
        return _fuzz(args, bootstrap, pid, log_path, broker)
    finally:
        if broker is not None:
            broker.kill()
        if workdir is not None:
            if args.keep:
                print(f"broker data dir and log kept in {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _fuzz(args, bootstrap: str, pid: int | None, log_path: Path | None, broker: BrokerProcess | None) -> dict:
    create_topics(bootstrap)
    bounds = fuzz.broker_bounds(single_broker=not args.cluster, initial_delay_ms=0, max_session_ms=MAX_SESSION_MS)
    maker = FrameMaker(args.seed, fuzz.served_versions(bootstrap), bounds)
    stop = threading.Event()
    tally = Tally()
    rss = RssSampler(pid, stop)
    side = SidePair(bootstrap)
    bystanders = Bystanders(bootstrap, args.connections, tally, stop)
    workers = [Worker(bootstrap, maker, range(w, args.frames, args.concurrency), tally, stop)
               for w in range(args.concurrency)]
    started = time.monotonic()
    for thread in (rss, bystanders, *workers):
        thread.start()
    side.start()
    crashed = _watch(workers, broker, pid, stop, started + args.max_seconds, tally)
    elapsed = time.monotonic() - started
    stop.set()
    for thread in (*workers, bystanders):
        thread.join(fuzz.LONGEST_WAIT_S + 10)
    alive = not crashed
    report = {
        "seed": args.seed, "frames_requested": args.frames, "frames_sent": tally.sent,
        "elapsed_s": round(elapsed, 1), "frames_per_s": round(tally.sent / elapsed, 1) if elapsed else None,
        "concurrency": args.concurrency, "connections_opened": tally.connections,
        "connect_failures": tally.connect_failures, "crashes": int(crashed),
        "unanswered_past_bound": tally.unanswered_count, "unanswered_examples": tally.unanswered,
        "held_within_own_bound": sum(c[fuzz.HELD] for c in tally.outcomes.values()), "held_examples": tally.held,
        "outcomes_by_kind": {kind: dict(c) for kind, c in sorted(tally.outcomes.items())},
        "damaged_batches": {kind: {"sent": sum(c.values()), "accepted": c.get(0, 0),
                                   "error_codes": {str(k): v for k, v in sorted(c.items(), key=str)}}
                            for kind, c in sorted(tally.batch_errors.items())},
        "bystander_probes": dict(bystanders.probes),
        "side_pair": side.finish() if alive else "broker died",
        "readability": readable_past_damage(bootstrap) if alive else "broker died",
        "tracebacks": {key: {**entry, "kinds": dict(entry["kinds"])} for key, entry in tracebacks(log_path).items()},
    }
    stop.set()
    rss.join(5)
    report["broker_rss"] = rss.figures()
    return report


def _watch(workers, broker: BrokerProcess | None, pid: int | None, stop: threading.Event, deadline: float,
           tally: Tally) -> bool:
    """Wait for the workers; stop early at the deadline or if the broker process died."""
    while any(w.is_alive() for w in workers):
        if broker is not None:
            broker._log_lines.clear()  # the log file has it all; a million lines need not sit in memory
        if (broker is not None and broker.proc.poll() is not None) or (pid and not psutil.pid_exists(pid)):
            stop.set()
            return True
        if time.monotonic() > deadline:
            stop.set()
            return False
        time.sleep(0.5)
    return False


def print_report(report: dict) -> None:
    scalars = {k: v for k, v in report.items() if not isinstance(v, (dict, list))}
    for key, value in scalars.items():
        print(f"{key:24} {value}")
    print(f"{'broker_rss':24} {report['broker_rss']}")
    print(f"{'side_pair':24} {report['side_pair']}")
    print(f"{'bystander_probes':24} {report['bystander_probes']}")
    for line in report["unanswered_examples"]:
        print(f"  unanswered: {line}")
    for line in report["held_examples"]:
        print(f"  held: {line}")
    print("outcomes by frame kind:")
    for kind, outcomes in report["outcomes_by_kind"].items():
        print(f"  {kind:26} {outcomes}")
    print("damaged batches (error code -> count; 0 = accepted) and readability past them:")
    readability = report["readability"] if isinstance(report["readability"], dict) else {}
    for kind, figures in report["damaged_batches"].items():
        read = readability.get(kind, {})
        print(f"  {kind:34} sent {figures['sent']:5} accepted {figures['accepted']:5} {figures['error_codes']} "
              f"readable past: {read.get('readable_past')} {read.get('consumer_errors') or ''}")
    print(f"tracebacks in the broker log: {sum(e['count'] for e in report['tracebacks'].values())}")
    for key, entry in report["tracebacks"].items():
        print(f"  {entry['count']:6} {key} kinds={entry['kinds']} first frame={entry['first_frame']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--concurrency", type=int, default=4, help="frames in flight at once (one per worker)")
    parser.add_argument("--connections", type=int, default=8, help="bystander connections held open all run")
    parser.add_argument("--bootstrap", help="fuzz this broker instead of starting one")
    parser.add_argument("--broker-pid", type=int, help="with --bootstrap: its process, for RSS and crash checks")
    parser.add_argument("--broker-log", type=Path, help="with --bootstrap: its log, for tracebacks")
    parser.add_argument("--cluster", action="store_true",
                        help="with --bootstrap: the broker has followers (Produce and DeleteRecords may wait)")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="stop sending after this long")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the started broker's data dir and log")
    parser.add_argument("--show-frame", type=int, metavar="I", help="print frame I's kind and bytes and exit")
    args = parser.parse_args()
    if args.show_frame is not None:
        show_frame(args)
        return
    report = run(args)
    print(json.dumps(report, indent=2, default=str) if args.json else "", end="")
    if not args.json:
        print_report(report)


def show_frame(args: argparse.Namespace) -> None:
    """Rebuild frame I as a run against this tree's broker did (same seed, same served versions;
    a JoinGroup's bound may differ, as it depends on the JoinGroups sent before it)."""
    from kafkacompat.handlers import REGISTRY

    served = {key: (h.min_version, h.max_version) for key, h in REGISTRY.items()}
    frame = FrameMaker(args.seed, served, fuzz.broker_bounds(initial_delay_ms=0, max_session_ms=MAX_SESSION_MS)
                       ).make(args.show_frame)
    print(f"frame {frame.index} {frame.kind} mode={frame.mode} bound={frame.bound}")
    print(frame.data.hex())


if __name__ == "__main__":
    main()
