"""`kafkacompat dev-cluster --brokers 3` as a subprocess, driven by confluent_kafka: it prints a
bootstrap string; an RF=3 topic gets three replicas in sync on every broker's view, takes
acks=all idempotent writes and reads them back; the three replicas hold the same bytes; after a
restart on the same data dir the topic and its messages are still there.

One process hosts all three brokers, so a single broker cannot be killed from outside; broker
failures are covered with separate processes in test_replication_failover.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkacompat.testing.process import free_ports

import confluent_kafka
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 3


class DevCluster:
    def __init__(self, data_dir: Path, port: int, log_path: Path) -> None:
        self.data_dir = data_dir
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> str:
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        sink = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kafkacompat", "dev-cluster", "--brokers", "3", "--port", str(self.port),
                 "--data-dir", str(self.data_dir), "--set", "replica.fetch.backoff.ms=100"],
                stdout=sink, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        finally:
            sink.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            found = re.search(r"bootstrap servers: (\S+)", text)
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"dev-cluster exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        raise AssertionError(f"dev-cluster printed no bootstrap within {timeout}s")

    def stop(self, timeout: float = 30) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"dev-cluster did not stop within {timeout}s of SIGINT")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def metadata(bootstrap: str, topic: str | None = None):
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=topic, timeout=10)


def wait_metadata(bootstrap: str, predicate, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = metadata(bootstrap)
            if predicate(md):
                return md
        except Exception:  # noqa: BLE001 - still starting
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"metadata condition not reached within {timeout}s")
        time.sleep(0.2)


def fully_replicated(md, topic: str) -> bool:
    parts = md.topics.get(topic)
    return (parts is not None and not parts.error and len(parts.partitions) == PARTITIONS
            and all(sorted(p.replicas) == [0, 1, 2] and sorted(p.isrs) == [0, 1, 2] and p.leader in (0, 1, 2)
                    for p in parts.partitions.values()))


def read_all(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 60) -> dict[int, list]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}-{time.time()}",
                                         "enable.auto.commit": False})
    out: dict[int, list] = {p: [] for p in ends}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        deadline = time.monotonic() + timeout
        while any(len(out[p]) < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {[len(v) for v in out.values()]} of {ends}"
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                out[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    return out


def test_dev_cluster_replicates_rf3_topics_with_acks_all_and_survives_a_restart(tmp_path, topic_name):
    port = free_ports(3)
    cluster = DevCluster(tmp_path / "dev", port, tmp_path / "dev-cluster.log")
    try:
        bootstrap = cluster.start()
        assert bootstrap == f"127.0.0.1:{port},127.0.0.1:{port + 1},127.0.0.1:{port + 2}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic(topic_name, num_partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": "2"})
        admin.create_topics([topic], operation_timeout=20)[topic_name].result(timeout=30)
        for i in range(3):  # every broker's own view: three brokers, replicas and ISR of three
            md = wait_metadata(f"127.0.0.1:{port + i}", lambda md: fully_replicated(md, topic_name))
            assert sorted(md.brokers) == [0, 1, 2]
            assert md.controller_id in (0, 1, 2)
        assert {p.leader for p in md.topics[topic_name].partitions.values()} == {0, 1, 2}

        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 5})
        acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

        def report(err, msg):
            assert err is None, err
            acked[msg.partition()].append((msg.offset(), msg.value()))

        for i in range(300):
            producer.produce(topic_name, value=b"d-%05d" % i, partition=i % PARTITIONS, on_delivery=report)
        assert producer.flush(30) == 0
        for p in range(PARTITIONS):
            assert sorted(o for o, _ in acked[p]) == list(range(100))
        consumed = read_all(bootstrap, topic_name, {p: 100 for p in range(PARTITIONS)})
        for p in range(PARTITIONS):
            assert consumed[p] == sorted(acked[p])

        assert cluster.stop() == 0
        for p in range(PARTITIONS):  # followers hold the leader's bytes
            logs = [b"".join(f.read_bytes() for f in sorted((tmp_path / "dev" / f"broker-{b}" / f"{topic_name}-{p}").glob("*.log")))
                    for b in range(3)]
            assert logs[0] == logs[1] == logs[2] and len(logs[0]) > 0

        # Restarted on the same data dir: same topic, same replicas, same messages.
        bootstrap = cluster.start()
        wait_metadata(bootstrap, lambda md: fully_replicated(md, topic_name))
        assert read_all(bootstrap, topic_name, {p: 100 for p in range(PARTITIONS)}) == consumed
    finally:
        cluster.kill()
