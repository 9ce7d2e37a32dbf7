"""Rebalance time: 10 confluent-kafka consumers joining one group on a 100-partition topic, with
the classic protocol and with the KIP-848 consumer protocol, against kafkacompat and against
librdkafka's built-in mock cluster.

    python benchmarks/bench_rebalance.py [--consumers N] [--partitions P] [--repeat R] [--skip-mock] [--json]

A round: create a fresh topic and group, start N consumers at once (each polled by its own
thread), and time from the first subscribe() until every consumer holds a non-empty assignment
and the assignments together cover every partition exactly once (the group has settled). The
consumers then close; the next round starts on a new topic. The table shows the median and the
range over --repeat rounds (3).

Settings: the classic consumers use librdkafka's default range assignor and its default
session/heartbeat settings; the consumer-protocol ones use the server's uniform assignor. The
kafkacompat broker runs with its defaults (Kafka's: group.initial.rebalance.delay.ms=3000,
group.consumer.heartbeat.interval.ms=5000) and a second time with group.initial.rebalance.delay.ms=0,
which is what the classic figure is mostly made of. The mock cluster is hosted in a child process
by benchmarks/bench_broker.py's --mock-child (it creates topics through the mock's C API).
Nothing is asserted: this prints figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

from bench_broker import MockTarget  # noqa: E402
from kafkacompat.testing.process import BrokerProcess  # noqa: E402

SETTLE_TIMEOUT = 120.0


class Broker:
    def __init__(self, data_dir: Path, *settings: str) -> None:
        args = [arg for setting in settings for arg in ("--set", setting)]
        self.process = BrokerProcess(data_dir, extra_args=args, log_path=data_dir.parent / "broker.log").start()
        self.bootstrap = self.process.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, topic: str, partitions: int) -> None:
        self.admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)

    def close(self) -> None:
        self.process.stop()


def settle_time(target, protocol: str, consumers: int, partitions: int) -> float:
    topic, group = f"rb-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    target.create_topic(topic, partitions)
    config = {"bootstrap.servers": target.bootstrap, "group.id": group, "group.protocol": protocol,
              "enable.auto.commit": False, "auto.offset.reset": "latest"}
    members = [Consumer(config) for _ in range(consumers)]
    assignments: list[set[int]] = [set() for _ in members]
    stop = threading.Event()

    def run(index: int) -> None:
        c = members[index]
        c.subscribe([topic])
        while not stop.is_set():
            c.poll(0.02)
            assignments[index] = {tp.partition for tp in c.assignment()}

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(consumers)]
    for thread in threads:
        thread.start()
    try:
        while True:
            snapshot = [set(a) for a in assignments]
            owned = [p for a in snapshot for p in a]
            if all(snapshot) and len(owned) == partitions and set(owned) == set(range(partitions)):
                return time.monotonic() - started
            if time.monotonic() - started > SETTLE_TIMEOUT:
                raise RuntimeError(f"{protocol} group on {topic} did not settle in {SETTLE_TIMEOUT:.0f} s")
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
        for c in members:
            c.close()


def measure(name: str, target, protocols: list[str], args) -> list[dict]:
    rows = []
    for protocol in protocols:
        times = [settle_time(target, protocol, args.consumers, args.partitions) for _ in range(args.repeat)]
        row = {"target": name, "protocol": protocol, "median_s": statistics.median(times),
               "min_s": min(times), "max_s": max(times)}
        print(f"{name:<34} {protocol:<9} median {row['median_s']:6.2f} s  (range {row['min_s']:.2f}-"
              f"{row['max_s']:.2f} s over {len(times)} rounds)", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--consumers", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-mock", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, settings in (("kafkacompat (defaults)", ()),
                                ("kafkacompat (initial delay 0)", ("group.initial.rebalance.delay.ms=0",))):
            broker = Broker(Path(tmp) / f"data-{len(rows)}", *settings)
            try:
                rows += measure(label, broker, ["classic", "consumer"], args)
            finally:
                broker.close()
    if not args.skip_mock:
        mock = MockTarget()
        try:
            rows += measure("librdkafka mock cluster", mock, ["classic", "consumer"], args)
        finally:
            mock.close()
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
