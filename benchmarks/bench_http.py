"""What the HTTP side costs, in one run:

    python benchmarks/bench_http.py [--messages N] [--requests R] [--repeat K] [--fixture-samples S] [--json]

1. Metrics on and off. Two broker processes side by side, one serving HTTP (metrics counted: the
   default) and one with --no-http (nothing counted). Rounds alternate between them (so drift on
   a shared machine hits both alike), each on a fresh topic: produce N x 100-byte messages
   (acks=1, linger.ms=5), consume them back, and R single-message deliveries (acks=1,
   linger.ms=0: one Produce request each, where the per-request counting weighs most). For each
   phase: the medians of throughput or latency, and the broker process's CPU seconds per message
   or request (psutil), with the cost of metrics as on/off - 1. Target: <= 3 %.
2. The same cost measured in-process, with less of the machine's noise: one broker's dispatch
   of Produce requests (one 10-record batch each, acks=1) and Metadata requests, in alternating
   blocks of DISPATCH_BLOCK with its metrics enabled and disabled; per setting the time per
   request of its fastest block (the least disturbed by other processes), and the counting
   work alone timed as timeit does, as a share of the request.
3. ``kafka_broker`` fixture start to first produce: in a fresh interpreter per sample (the pytest
   plugin imported, as in a test session), the time from ``start_broker()`` to the first
   message's delivery report, with and without the broker's imports (a second broker in the same
   process). Target: <= 300 ms.

Figures only; nothing is asserted. The producer/consumer phases are bench_broker.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
sys.path.insert(0, str(REPO_ROOT))

import psutil  # noqa: E402
from bench_broker import VALUE_SIZE, consume_load, delivery_latency, produce_load  # noqa: E402

from kafkacompat.testing.process import BrokerProcess, free_port  # noqa: E402

FIXTURE_SAMPLE = r"""
import json, sys, tempfile, time
from pathlib import Path
import kafkacompat.pytest_plugin as plugin
from confluent_kafka import Producer

def first_produce(data_dir):
    started = time.perf_counter()
    loop, broker = plugin.start_broker(Path(data_dir))
    ready = time.perf_counter()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce("first", b"v")
    assert producer.flush(30) == 0
    done = time.perf_counter()
    loop.close()
    return ready - started, done - started

with tempfile.TemporaryDirectory() as work:
    cold = first_produce(work + "/a")
    warm = first_produce(work + "/b")
print(json.dumps({"cold_ready": cold[0], "cold_first_produce": cold[1],
                  "warm_ready": warm[0], "warm_first_produce": warm[1]}))
"""


class Broker:
    def __init__(self, work: Path, label: str, args: list[str]) -> None:
        self.label = label
        self.process = BrokerProcess(work / label, extra_args=args, log_path=work / f"{label}.log").start()
        self.bootstrap = self.process.bootstrap
        self.psutil = psutil.Process(self.process.pid())

    def cpu(self) -> float:
        times = self.psutil.cpu_times()
        return times.user + times.system

    def create_topic(self, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)


def measured(broker: Broker, work) -> tuple[dict, float]:
    before = broker.cpu()
    result = work()
    return result, broker.cpu() - before


def metrics_rounds(args) -> dict:
    phases: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as temp:
        work = Path(temp)
        brokers = [Broker(work, "metrics-on", ["--http-port", str(free_port())]),
                   Broker(work, "metrics-off", ["--no-http"])]
        try:
            for round_index in range(args.repeat):
                for broker in brokers if round_index % 2 == 0 else reversed(brokers):
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    broker.create_topic(topic)
                    produced, cpu = measured(broker, lambda: produce_load(
                        broker.bootstrap, topic, 1, args.messages, b"v" * VALUE_SIZE, 1))
                    _add(phases, "produce", broker.label, produced["msgs_per_s"], cpu / args.messages)
                    consumed, cpu = measured(broker, lambda: consume_load(broker.bootstrap, topic, 1))
                    _add(phases, "consume", broker.label, consumed["msgs_per_s"], cpu / args.messages)
                    delivered, cpu = measured(broker, lambda: delivery_latency(broker.bootstrap, topic, args.requests))
                    _add(phases, "delivery", broker.label, delivered["delivery_p50_us"], cpu / delivered["requests"])
                    print(f"  round {round_index + 1} {broker.label}: produce {produced['msgs_per_s']:,.0f} msg/s, "
                          f"consume {consumed['msgs_per_s']:,.0f} msg/s, delivery p50 "
                          f"{delivered['delivery_p50_us']:,.0f} us", file=sys.stderr, flush=True)
        finally:
            for broker in brokers:
                broker.process.stop()
    return {phase: _summary(values) for phase, values in phases.items()}


def _add(phases: dict, phase: str, label: str, figure: float, cpu_per_unit: float) -> None:
    entry = phases.setdefault(phase, {})
    entry.setdefault(f"{label} figure", []).append(figure)
    entry.setdefault(f"{label} cpu", []).append(cpu_per_unit)


def _summary(values: dict[str, list[float]]) -> dict:
    medians = {key: statistics.median(samples) for key, samples in values.items()}
    on, off = medians["metrics-on cpu"], medians["metrics-off cpu"]
    return {**medians, "cpu_cost_pct": (on / off - 1) * 100 if off else float("nan"),
            "figure_change_pct": (medians["metrics-on figure"] / medians["metrics-off figure"] - 1) * 100}


DISPATCH_BLOCK = 500


def dispatch_rounds(blocks: int) -> dict:
    import trio

    from kafkacompat.broker import Broker
    from kafkacompat.config import BrokerConfig
    from kafkacompat.http import HttpSettings
    from kafkacompat.testing import fuzz
    from kafkacompat.wire.frame import RequestHeader

    async def main(data_dir: Path) -> dict:
        broker = Broker(BrokerConfig.load(None, {}, port=0, data_dir=data_dir), http=HttpSettings())
        broker.open()
        broker.admin.create_topic_now("bench", 1, 1, {})
        services = broker.services()
        produce = fuzz.produce_body("bench", 0, fuzz.record_batch([b"v" * VALUE_SIZE] * 10), 9, acks=1)
        metadata = fuzz.default_body(3, 12)
        requests = {"Produce": (RequestHeader(0, 9, 1, "bench", True), produce),
                    "Metadata": (RequestHeader(3, 12, 1, "bench", True), metadata)}
        samples: dict[str, list[float]] = {}
        for block in range(2 * blocks):
            enabled = block % 2 == 0
            services.metrics.enabled = enabled
            for name, (header, body) in requests.items():
                started = time.perf_counter()
                for _ in range(DISPATCH_BLOCK):
                    await broker.dispatch(header, memoryview(bytearray(body)), None)
                per_request = (time.perf_counter() - started) / DISPATCH_BLOCK
                samples.setdefault(f"{name} {'on' if enabled else 'off'}", []).append(per_request)
        broker.close()
        medians = {key: min(values) for key, values in samples.items()}
        counting = {"Produce": counting_seconds(with_append=True), "Metadata": counting_seconds(with_append=False)}
        return {name: {"on_us": medians[f"{name} on"] * 1e6, "off_us": medians[f"{name} off"] * 1e6,
                       "cost_pct": (medians[f"{name} on"] / medians[f"{name} off"] - 1) * 100,
                       "counting_us": counting[name] * 1e6,
                       "counting_pct": counting[name] / medians[f"{name} off"] * 100}
                for name in requests}

    with tempfile.TemporaryDirectory() as temp:
        return trio.run(main, Path(temp))


def counting_seconds(*, with_append: bool) -> float:
    """What metrics add to one request, timed alone (best of 5, as timeit): the two clock reads
    and the histogram update of dispatch, and for a Produce the one partition's counters."""
    import timeit

    from kafkacompat.metrics import BrokerMetrics

    metrics = BrokerMetrics()
    clock = time.perf_counter

    def one_request() -> None:
        started = clock()
        if with_append:
            metrics.produced("bench", 10, 1100)
        metrics.request_done(0, clock() - started)

    loops = 200_000
    return min(timeit.repeat(one_request, number=loops, repeat=5)) / loops


def fixture_samples(count: int) -> dict:
    """Fresh interpreters' fixture start, reading the modules' bytecode as an installed package
    does (pip compiles it at install): a first, discarded, sample writes kafkacompat's .pyc files
    even where PYTHONDONTWRITEBYTECODE=1 is set (some CI images set it, and then every start
    compiles the broker's ~90 modules from source: about 0.3 s more here)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    samples = []
    for index in range(count + 1):
        done = subprocess.run([sys.executable, "-c", FIXTURE_SAMPLE], capture_output=True, text=True, timeout=120,
                              cwd=REPO_ROOT, env=env)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        if index:
            samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per produce/consume round")
    parser.add_argument("--requests", type=int, default=2_000, help="single-message deliveries per round")
    parser.add_argument("--repeat", type=int, default=4, help="rounds per broker (alternating)")
    parser.add_argument("--dispatch-blocks", type=int, default=60,
                        help=f"blocks of {DISPATCH_BLOCK} requests per setting in the in-process phase")
    parser.add_argument("--fixture-samples", type=int, default=5, help="fresh interpreters timed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    results = {"metrics": metrics_rounds(args), "dispatch": dispatch_rounds(args.dispatch_blocks),
               "fixture": fixture_samples(args.fixture_samples),
               "args": vars(args), "seconds": time.monotonic() - started}
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'phase':<10} {'metrics on':>14} {'metrics off':>14} {'change':>8} {'broker CPU/unit on':>20} "
          f"{'off':>10} {'CPU cost':>9}")
    units = {"produce": "msg/s", "consume": "msg/s", "delivery": "us p50"}
    for phase, row in results["metrics"].items():
        print(f"{phase:<10} {row['metrics-on figure']:>10,.0f} {units[phase]:<3} {row['metrics-off figure']:>10,.0f}"
              f"     {row['figure_change_pct']:>+7.1f}% {row['metrics-on cpu'] * 1e6:>17.2f} us "
              f"{row['metrics-off cpu'] * 1e6:>7.2f} us {row['cpu_cost_pct']:>+8.1f}%")
    print("\nin-process dispatch, per request in the fastest block (metrics enabled / disabled):")
    for name, row in results["dispatch"].items():
        print(f"  {name:<9} {row['on_us']:7.2f} us / {row['off_us']:7.2f} us  cost {row['cost_pct']:+.1f}%; "
              f"the counting itself, timed alone: {row['counting_us']:.2f} us = {row['counting_pct']:.1f}% of the "
              f"request")
    fixture = results["fixture"]
    print(f"\nkafka_broker fixture, start to first produce (median of {args.fixture_samples} fresh interpreters):")
    print(f"  first broker in the process (imports included): ready {fixture['cold_ready'] * 1000:.0f} ms, "
          f"first produce delivered {fixture['cold_first_produce'] * 1000:.0f} ms")
    print(f"  another broker in the same process:             ready {fixture['warm_ready'] * 1000:.0f} ms, "
          f"first produce delivered {fixture['warm_first_produce'] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
