"""Memory and other clients' latency with slow and idle clients, against a real broker process.

    python benchmarks/bench_slow_clients.py [--slow N [N ...]] [--idle M [M ...]] [--mb MB] [--seconds S]

Phases, each against the same broker, figures printed as they come (nothing is asserted):

  setup     one partition holding --mb MB of 1 KiB records (uncompressed, confluent-kafka)
  baseline  produce latency of a side producer alone: one message, acks=1, produce + flush (the
            delivery report), repeatedly for --seconds; p50, p99 and max
  slow      the side producer runs for --seconds; half a second in, N connections each send
            one Fetch v2 (down-converted to magic 1) for the whole partition with a partition
            limit of --mb MB, and never read their socket (4 KiB receive buffer). The broker's
            RSS (peak, sampled every 50 ms; and at the end, while they still hang), the side
            producer's latency meanwhile, RSS again after they close
  idle      M connections that each send one ApiVersions, read the answer, and then stay idle;
            RSS with them open (per connection) and after they close

RSS is the broker process's (psutil). The machine's load moves the latencies; run it on a
quiet machine to compare figures.
"""

from __future__ import annotations

import argparse
import itertools
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

MIB = 1024 * 1024
_correlation_ids = itertools.count(1)


def frame_request(api_key: int, version: int, body: bytes) -> bytes:
    client_id = b"bench-slow"
    header = struct.pack(">hhih", api_key, version, next(_correlation_ids), len(client_id)) + client_id
    return struct.pack(">i", len(header) + len(body)) + header + body


def fetch_v2(topic: str, max_bytes: int) -> bytes:
    name = topic.encode()
    body = struct.pack(">iii", -1, 0, 1)  # replica id, max wait ms, min bytes
    body += struct.pack(">ih", 1, len(name)) + name + struct.pack(">iiqi", 1, 0, 0, max_bytes)
    return frame_request(1, 2, body)


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / MIB


class PeakRss:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> "PeakRss":
        self.peak = rss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def fill(bootstrap: str, topic: str, megabytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "enable.idempotence": False, "compression.type": "none"})
    value = b"x" * 1024
    for i in range(megabytes * 1024):
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def produce_latencies(bootstrap: str, topic: str, seconds: float) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "enable.idempotence": False})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    latencies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        producer.produce(topic, b"side producer")
        producer.flush(60)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def describe(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return f"{len(ordered)} produces: p50 {at(0.5):.1f} ms, p99 {at(0.99):.1f} ms, max {ordered[-1]:.1f} ms"


def slow_consumers(broker: BrokerProcess, topic: str, side_topic: str, count: int, megabytes: int,
                   seconds: float) -> None:
    pid = broker.pid()
    before = rss_mib(pid)
    sockets = []
    latencies: list[float] = []
    side = threading.Thread(target=lambda: latencies.extend(produce_latencies(broker.bootstrap, side_topic, seconds)))
    with PeakRss(pid) as peak:
        side.start()
        time.sleep(0.5)  # the side producer is connected and producing when the slow ones arrive
        for _ in range(count):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", broker.port))
            sock.sendall(fetch_v2(topic, megabytes * MIB))
            sockets.append(sock)
        side.join()
        during = rss_mib(pid)
    for sock in sockets:
        sock.close()
    time.sleep(2)
    after = rss_mib(pid)
    print(f"slow x{count}: RSS {before:.0f} MiB before, {during:.0f} MiB while they hang (peak {peak.peak:.0f}, "
          f"+{peak.peak - before:.0f} MiB), {after:.0f} MiB after they closed; side {describe(latencies)}",
          flush=True)


def idle_connections(broker: BrokerProcess, count: int) -> None:
    pid = broker.pid()
    before = rss_mib(pid)
    sockets = []
    versions = frame_request(18, 0, b"")
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", broker.port))
        sock.sendall(versions)
        sockets.append(sock)
    for sock in sockets:
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        sock.recv(size, socket.MSG_WAITALL)
    time.sleep(1)
    during = rss_mib(pid)
    for sock in sockets:
        sock.close()
    time.sleep(3)  # the broker collects a second after a burst of closes ends
    after = rss_mib(pid)
    print(f"idle x{count}: RSS {before:.0f} MiB before, {during:.0f} MiB with them open "
          f"({(during - before) * 1024 / count:.1f} KiB each), {after:.0f} MiB after they closed", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--idle", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the broker inherits it
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", extra_args=["--set", f"max.connections.per.ip={1 << 30}"]).start()
        try:
            topic, side = f"slow-{uuid.uuid4().hex[:6]}", f"side-{uuid.uuid4().hex[:6]}"
            started = time.monotonic()
            fill(broker.bootstrap, topic, args.mb)
            print(f"setup: {args.mb} MiB in 1 KiB records in {time.monotonic() - started:.1f} s; "
                  f"broker RSS {rss_mib(broker.pid()):.0f} MiB", flush=True)
            print(f"baseline: side {describe(produce_latencies(broker.bootstrap, side, args.seconds))}", flush=True)
            for count in args.slow:
                slow_consumers(broker, topic, side, count, args.mb, args.seconds)
            for count in args.idle:
                idle_connections(broker, count)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
