"""Transactional produce against idempotent produce, kafkacompat beside librdkafka's mock cluster.

    python benchmarks/bench_transactions.py [--messages N] [--transaction-size K] [--repeat R]
                                            [--skip-mock] [--json]

The same confluent-kafka client drives each target (kafkacompat first, then the mock cluster,
round after round, so drift on a shared machine hits both alike), on a fresh one-partition topic
per phase:

  idempotent      N x 100-byte messages, enable.idempotence=true (acks=all), linger.ms=5
  transactional   the same N messages in transactions of K (1,000): begin_transaction, K
                  produce() calls, flush(), commit_transaction(); throughput over the whole run
  commit          the latency of each commit_transaction() above (after its flush(), so it is
                  the EndTxn round trip plus what the coordinator waits for before answering)

The table shows medians over the rounds and the verdicts of issue 10: transactional throughput at
least 0.8x the idempotent throughput of the same client, and commit p50 under 2 ms on a single
node. Nothing is asserted. The mock cluster is bench_broker.py's child (test.mock.num.brokers=1),
which serves the transaction coordinator APIs itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_broker  # noqa: E402  (its targets and the mock cluster child)
from confluent_kafka import Producer  # noqa: E402

VALUE = b"x" * 100


def produce_idempotent(bootstrap: str, topic: str, count: int) -> dict:
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "on_delivery": lambda err, _m: err and failed.append(err)})
    producer.produce(topic, VALUE, partition=0)  # the producer id and connections first, as
    producer.flush(60)                           # init_transactions() does for the other phase
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    assert not failed, failed[:3]
    return {"msgs_per_s": count / elapsed, "seconds": elapsed}


def produce_transactional(bootstrap: str, topic: str, count: int, size: int) -> dict:
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5, "on_delivery": lambda err, _m: err and failed.append(err)})
    producer.init_transactions(60)
    commits = []
    started = time.perf_counter()
    for first in range(0, count, size):
        producer.begin_transaction()
        for _ in range(min(size, count - first)):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)
        before = time.perf_counter()
        producer.commit_transaction(60)
        commits.append((time.perf_counter() - before) * 1000)
    elapsed = time.perf_counter() - started
    assert not failed, failed[:3]
    commits.sort()
    return {"msgs_per_s": count / elapsed, "seconds": elapsed, "commit_p50_ms": bench_broker.percentile(commits, 0.5),
            "commit_p99_ms": bench_broker.percentile(commits, 0.99), "transactions": len(commits)}


def run_round(target, args) -> dict:
    idempotent_topic, txn_topic = f"idem-{uuid.uuid4().hex[:8]}", f"txn-{uuid.uuid4().hex[:8]}"
    target.create_topic(idempotent_topic, 1)
    target.create_topic(txn_topic, 1)
    idempotent = produce_idempotent(target.bootstrap, idempotent_topic, args.messages)
    transactional = produce_transactional(target.bootstrap, txn_topic, args.messages, args.transaction_size)
    return {"idempotent_msgs_per_s": idempotent["msgs_per_s"], "transactional_msgs_per_s": transactional["msgs_per_s"],
            "commit_p50_ms": transactional["commit_p50_ms"], "commit_p99_ms": transactional["commit_p99_ms"]}


def median_of(rounds: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def main() -> None:
    if "--mock-child" in sys.argv[1:]:
        bench_broker.mock_child_main()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--transaction-size", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-mock", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        targets = [bench_broker.KafkacompatTarget(Path(tmp) / "data")]
        if not args.skip_mock:
            targets.append(bench_broker.MockTarget())
        rounds: dict[str, list[dict]] = {t.name: [] for t in targets}
        try:
            for number in range(args.repeat):
                for target in targets:
                    bench_broker.log(f"round {number + 1}/{args.repeat}: {target.name}")
                    rounds[target.name].append(run_round(target, args))
        finally:
            for target in targets:
                target.close()
    results = {name: median_of(r) for name, r in rounds.items()}
    results["machine"] = bench_broker.machine_info()
    results["args"] = vars(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.messages:,} x 100 B, transactions of {args.transaction_size:,}, median of {args.repeat} rounds")
    print(f"{'':28}" + "".join(f"{t.name:>14}" for t in targets))
    for key, label, spec in (("idempotent_msgs_per_s", "idempotent msgs/s", ",.0f"),
                             ("transactional_msgs_per_s", "transactional msgs/s", ",.0f"),
                             ("commit_p50_ms", "commit p50 (ms)", ".2f"),
                             ("commit_p99_ms", "commit p99 (ms)", ".2f")):
        print(f"{label:28}" + "".join(f"{format(results[t.name][key], spec):>14}" for t in targets))
    ours = results["kafkacompat"]
    ratio = ours["transactional_msgs_per_s"] / ours["idempotent_msgs_per_s"]
    print(f"transactional / idempotent (kafkacompat): {ratio:.2f}x (target >= 0.8x): "
          f"{'ok' if ratio >= 0.8 else 'MISSED'}")
    print(f"commit p50 {ours['commit_p50_ms']:.2f} ms (target < 2 ms): "
          f"{'ok' if ours['commit_p50_ms'] < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
