"""Throughput and round trip over TLS and SASL_SSL against PLAINTEXT, in one run on one broker.

    python benchmarks/bench_security.py [--messages N] [--value-bytes B] [--round-trips M] [--repeat R] [--json]

One kafkacompat broker process serves three listeners: PLAINTEXT, SSL (TLS, no client
certificate) and SASL_SSL (TLS + SASL/PLAIN), with a certificate made for the run (openssl). The
same confluent-kafka load runs on each listener in turn, round after round (so drift on a shared
machine hits them alike); the table shows medians:

  produce      N messages of B bytes, acks=1, linger.ms=5: messages/s and MB/s
  consume      the same topic read back with assign(): messages/s and MB/s
  round-trip   one message produced and flushed until an already-assigned consumer has it,
               M times: p50 / p99 in ms

The broker's CPU seconds per phase are measured too (psutil). PLAINTEXT fetches go out with
sendfile; TLS fetches are read from the segment and encrypted in the broker (no sendfile for TLS,
as in Kafka). Nothing is asserted.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafkacompat.testing.certs import CertificateAuthority  # noqa: E402
from kafkacompat.testing.process import BrokerProcess, distinct_free_ports  # noqa: E402

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


def start_broker(base: Path) -> tuple[BrokerProcess, dict[str, dict]]:
    authority = CertificateAuthority(base / "certs")
    keystore = authority.issue("server", "/CN=localhost", server=True).keystore()
    ssl_port, sasl_ssl_port, plaintext_port = distinct_free_ports(3)
    ports = {"SSL": ssl_port, "SASL_SSL": sasl_ssl_port}
    properties = base / "server.properties"
    properties.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{ports['SSL']},SASL_SSL://127.0.0.1:{ports['SASL_SSL']}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
        "sasl.enabled.mechanisms=PLAIN",
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-pw";',
        "group.initial.rebalance.delay.ms=0",
    ]) + "\n")
    broker = BrokerProcess(base / "data", port=plaintext_port, extra_args=["--config", str(properties)]).start()
    tls = {"ssl.ca.location": str(authority.cert)}
    confs = {
        "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
        "SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL", **tls},
        "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
                     "sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-pw", **tls},
    }
    return broker, confs


def broker_cpu(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def produce(conf: dict, topic: str, count: int, value: bytes) -> float:
    from confluent_kafka import Producer

    producer = Producer({**conf, "acks": 1, "linger.ms": 5, "enable.idempotence": False})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def consume(conf: dict, topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    while not [m for m in consumer.consume(1, timeout=5) if m.error() is None]:
        pass  # the warm-up message: connected, the fetch session going; the clock starts now
    started = time.perf_counter()
    received = 0
    while received < count:
        for message in consumer.consume(1000, timeout=5):
            if message.error() is None:
                received += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def round_trips(conf: dict, topic: str, iterations: int) -> list[float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({**conf, "acks": 1, "linger.ms": 0})
    producer.produce(topic, b"open")
    producer.flush(30)
    consumer = Consumer({**conf, "group.id": f"rt-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500})
    consumer.assign([TopicPartition(topic, 0, 1)])
    samples = []
    for index in range(iterations + 5):
        payload = f"rt-{index}".encode()
        started = time.perf_counter()
        producer.produce(topic, payload)
        producer.flush(10)
        while True:
            message = consumer.poll(5)
            if message is not None and message.error() is None and message.value() == payload:
                break
        if index >= 5:  # the first few warm the connections up
            samples.append((time.perf_counter() - started) * 1000)
    consumer.close()
    return samples


def run(args) -> dict:
    value = b"x" * args.value_bytes
    results: dict[str, dict[str, list]] = {name: {"produce": [], "consume": [], "rtt50": [], "rtt99": [],
                                                  "produce_cpu": [], "consume_cpu": []} for name in LISTENERS}
    with tempfile.TemporaryDirectory(prefix="bench-security-") as directory:
        broker, confs = start_broker(Path(directory))
        try:
            for round_index in range(args.repeat):
                for name in LISTENERS:
                    topic = f"bench-{name.lower()}-{round_index}"
                    cpu = broker_cpu(broker.pid())
                    elapsed = produce(confs[name], topic, args.messages, value)
                    results[name]["produce_cpu"].append(broker_cpu(broker.pid()) - cpu)
                    results[name]["produce"].append(args.messages / elapsed)
                    cpu = broker_cpu(broker.pid())
                    elapsed = consume(confs[name], topic, args.messages)
                    results[name]["consume_cpu"].append(broker_cpu(broker.pid()) - cpu)
                    results[name]["consume"].append(args.messages / elapsed)
                    samples = sorted(round_trips(confs[name], f"rt-{topic}", args.round_trips))
                    results[name]["rtt50"].append(samples[len(samples) // 2])
                    results[name]["rtt99"].append(samples[min(len(samples) - 1, int(len(samples) * 0.99))])
                    print(f"round {round_index + 1} {name}: done", file=sys.stderr)
        finally:
            broker.stop()
    return {name: {key: statistics.median(values) for key, values in phases.items()}
            for name, phases in results.items()}


def print_table(results: dict, args) -> None:
    megabytes = args.value_bytes / 1e6
    print(f"{args.messages} x {args.value_bytes} B messages, {args.round_trips} round trips, median of {args.repeat}")
    print(f"{'listener':<10} {'produce msg/s':>14} {'MB/s':>7} {'cpu s':>6} {'consume msg/s':>14} {'MB/s':>7} "
          f"{'cpu s':>6} {'rtt p50 ms':>11} {'rtt p99 ms':>11}")
    for name, row in results.items():
        print(f"{name:<10} {row['produce']:>14,.0f} {row['produce'] * megabytes:>7.1f} {row['produce_cpu']:>6.2f} "
              f"{row['consume']:>14,.0f} {row['consume'] * megabytes:>7.1f} {row['consume_cpu']:>6.2f} "
              f"{row['rtt50']:>11.2f} {row['rtt99']:>11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results, args)


if __name__ == "__main__":
    main()
