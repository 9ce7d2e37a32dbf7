"""Share-group consume throughput: 1, 2 and 4 confluent-kafka ShareConsumers of one share group
reading one partition, kafkacompat against librdkafka's mock cluster (which serves share groups:
src/rdkafka_mock_sharegrp.c).

    python benchmarks/bench_share.py [--messages N] [--repeat R] [--skip-mock] [--json]

Per target and consumer count, per round: a fresh one-partition topic; the consumers subscribe,
and a probe record is produced until one of them receives it (the share group starts at the log
end, share.auto.offset.reset=latest); then N x 100-byte records are produced (acks=1) and the
clock runs from the first poll until the consumers together have received all N, each consumer
in its own thread, implicit acknowledgement (each poll accepts the previous poll's records),
max.poll.records 500. The table shows the median over the rounds (msgs/s) and the broker's CPU
seconds per 100k records (psutil, user+system). Records delivered more than once (a lock that
expired, a duplicate) are counted and shown: 0 is expected. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer, ShareConsumer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import KafkacompatTarget, MockTarget, log, machine_info, wait_for_topic  # noqa: E402

VALUE = b"x" * 100
PROBE = b"probe"
CONSUMER_COUNTS = (1, 2, 4)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "enable.idempotence": False,
                         "queue.buffering.max.messages": 500_000})
    wait_for_topic(producer, topic, 1)
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(120) == 0


def started(consumers: list[ShareConsumer], bootstrap: str, topic: str, timeout: float = 60) -> None:
    probe = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe.produce(topic, PROBE, partition=0)
        probe.flush(10)
        for consumer in consumers:
            if any(m.error() is None for m in consumer.poll(0.3)):
                return
    raise RuntimeError("no share consumer received the probe")


def consume_round(target, consumers_count: int, messages: int, round_index: int) -> dict:
    topic = f"share-bench-{consumers_count}-{round_index}-{time.monotonic_ns()}"
    target.create_topic(topic, 1)
    group = f"g-{topic}"
    consumers = [ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group,
                                "max.poll.records": 500}) for _ in range(consumers_count)]
    for consumer in consumers:
        consumer.subscribe([topic])
    try:
        started(consumers, target.bootstrap, topic)
        produce(target.bootstrap, topic, messages)
        counts = [0] * consumers_count
        seen: set[int] = set()
        duplicates = [0]
        lock = threading.Lock()
        done = threading.Event()

        def run(index: int) -> None:
            consumer = consumers[index]
            while not done.is_set():
                for message in consumer.poll(0.2):
                    if message.error() is not None or message.value() == PROBE:
                        continue
                    with lock:
                        if message.offset() in seen:
                            duplicates[0] += 1
                            continue
                        seen.add(message.offset())
                        counts[index] += 1
                        if len(seen) >= messages:
                            done.set()

        cpu_before = target.cpu_seconds()
        began = time.perf_counter()
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(consumers_count)]
        for thread in threads:
            thread.start()
        finished = done.wait(300)
        elapsed = time.perf_counter() - began
        cpu = target.cpu_seconds() - cpu_before
        done.set()
        for thread in threads:
            thread.join(5)
        if not finished:
            log(f"  {target.name}, {consumers_count} consumer(s): only {len(seen)} of {messages} in 300 s")
        return {"msgs_per_s": len(seen) / elapsed, "seconds": elapsed, "received": len(seen),
                "per_consumer": counts, "duplicates": duplicates[0], "broker_cpu_s": cpu}
    finally:
        for consumer in consumers:
            consumer.close()


def run(args) -> dict:
    results: dict = {"messages": args.messages, "repeat": args.repeat, "machine": machine_info(), "targets": {}}
    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        targets.append(("kafkacompat", lambda: KafkacompatTarget(Path(tmp) / "data")))
        if not args.skip_mock:
            targets.append(("mock", MockTarget))
        for name, make in targets:
            target = make()
            try:
                per_count = {}
                for count in CONSUMER_COUNTS:
                    rounds = [consume_round(target, count, args.messages, r) for r in range(args.repeat)]
                    median = statistics.median(r["msgs_per_s"] for r in rounds)
                    cpu = sum(r["broker_cpu_s"] for r in rounds) / sum(r["received"] for r in rounds) * 100_000
                    per_count[count] = {"median_msgs_per_s": median, "cpu_s_per_100k": cpu,
                                        "duplicates": sum(r["duplicates"] for r in rounds), "rounds": rounds}
                    log(f"{name}: {count} consumer(s) {median:,.0f} msgs/s, broker CPU {cpu:.2f} s/100k, "
                        f"split {rounds[-1]['per_consumer']}")
                results["targets"][name] = per_count
            finally:
                target.close()
    return results


def print_table(results: dict) -> None:
    names = list(results["targets"])
    print(f"\nShare-group consume, one partition, {results['messages']:,} x 100 B records, "
          f"median of {results['repeat']}")
    print("| consumers | " + " | ".join(f"{n} msgs/s | {n} broker CPU s/100k" for n in names) + " |")
    print("|---|" + "---|---|" * len(names))
    for count in CONSUMER_COUNTS:
        cells = []
        for name in names:
            figures = results["targets"][name][count]
            cells += [f"{figures['median_msgs_per_s']:,.0f}", f"{figures['cpu_s_per_100k']:.2f}"]
        print(f"| {count} | " + " | ".join(cells) + " |")
    for name in names:
        duplicates = sum(results["targets"][name][c]["duplicates"] for c in CONSUMER_COUNTS)
        print(f"{name}: records delivered more than once: {duplicates}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # The mock keeps at most 5 MiB per partition (older batches are dropped): 30,000 records fit.
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-mock", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args)
    print(json.dumps(results, indent=2) if args.json else "", end="")
    print_table(results)


if __name__ == "__main__":
    main()
