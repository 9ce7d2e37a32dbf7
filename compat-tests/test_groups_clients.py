"""Consumer groups with kafka-python 3, aiokafka, kcat and kafkajs against a real broker process:
each consumes a 3-partition topic in a group, commits, stops, and a restarted consumer resumes
exactly after the committed offsets (a sentinel produced after the restart must arrive, so an
idle consumer cannot pass). Plus a mixed confluent-kafka + kafka-python group and kafka-python's
admin group APIs."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytest.register_assert_rewrite("clients")
from clients import kafka_python_group_consumer  # noqa: E402

FAST = ("--set", "group.initial.rebalance.delay.ms=0", "--set", "group.min.session.timeout.ms=1000")
JS_DIR = Path(__file__).parent / "js"

FIRST = [(i % 3, f"a{i}") for i in range(30)]
SECOND = [(i % 3, f"b{i}") for i in range(6)] + [(0, "sentinel")]


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, values) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, value in values:
        producer.produce(topic, value.encode(), partition=partition)
    assert producer.flush(15) == 0


def check_resume(broker, topic, consume) -> None:
    """``consume(group, count)`` returns [(partition, offset, value)] once ``count`` records
    arrived, committing what it consumed."""
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, FIRST)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = consume(group, len(FIRST))
    assert sorted(v for _, _, v in first) == sorted(v for _, v in FIRST)
    produce(broker.bootstrap, topic, SECOND)
    second = consume(group, len(SECOND))  # the sentinel is among them: an idle consumer cannot pass
    assert sorted(v for _, _, v in second) == sorted(v for _, v in SECOND)
    assert all(o >= 10 for _, o, _ in second)


# ---- kafka-python ------------------------------------------------------------------------------


def kafka_python_consume(bootstrap: str, topic: str):
    def consume(group, until):
        consumer = kafka_python_group_consumer(
            bootstrap, topic, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
        )
        got = []
        deadline = time.monotonic() + 30
        while not _done(got, until):
            assert time.monotonic() < deadline, got
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset, r.value.decode()) for r in records]
        consumer.commit()
        consumer.close()
        return got

    return consume


def _done(got, until) -> bool:
    if until == "sentinel":
        return any(v == "sentinel" for _, _, v in got)
    return len(got) >= until


def test_kafka_python_resumes_after_commit(broker_factory, topic_name):
    broker = broker_factory(*FAST)
    check_resume(broker, topic_name, kafka_python_consume(broker.bootstrap, topic_name))


# ---- aiokafka ------------------------------------------------------------------------------------


def test_aiokafka_resumes_after_commit(broker_factory, topic_name):
    from aiokafka import AIOKafkaConsumer

    broker = broker_factory(*FAST)

    async def consume_async(group, until):
        consumer = AIOKafkaConsumer(
            topic_name, bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
        )
        await consumer.start()
        got = []
        try:
            deadline = time.monotonic() + 30
            while not _done(got, until):
                assert time.monotonic() < deadline, got
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    got += [(r.partition, r.offset, r.value.decode()) for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    check_resume(broker, topic_name, lambda group, until: asyncio.run(consume_async(group, until)))


# ---- kcat ------------------------------------------------------------------------------------------


def test_kcat_balanced_consumer_resumes_after_commit(broker_factory, topic_name):
    broker = broker_factory(*FAST)

    def consume(group, until):
        # -G: balanced consumer group; -e: exit at the end of every partition (commits on close)
        out = subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-G", group, "-e", "-q", "-X", "auto.offset.reset=earliest",
             "-f", "%p %o %s\n", topic_name],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        got = []
        for line in out.splitlines():
            partition, offset, value = line.split(" ", 2)
            got.append((int(partition), int(offset), value))
        return got

    check_resume(broker, topic_name, consume)


# ---- kafkajs ---------------------------------------------------------------------------------------


def test_kafkajs_resumes_after_commit(broker_factory, topic_name):
    assert shutil.which("node"), "node is required for the kafkajs compat tests"
    if not (JS_DIR / "node_modules" / "kafkajs").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=300)
    broker = broker_factory(*FAST)

    def consume(group, until):
        result = subprocess.run(
            ["node", str(JS_DIR / "group_consume.js"), broker.bootstrap, topic_name, group, str(until)],
            capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return [tuple(r) for r in json.loads(result.stdout)]

    check_resume(broker, topic_name, consume)


# ---- mixed group -------------------------------------------------------------------------------------


def test_mixed_confluent_and_kafka_python_group_with_range_assignor(broker_factory, topic_name):
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, topic_name, FIRST)
    kp = kafka_python_group_consumer(
        broker.bootstrap, topic_name, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
        partition_assignment_strategy=[RangePartitionAssignor],
    )
    kp_records: list = []
    stop = threading.Event()

    def run_kafka_python():
        while not stop.is_set():
            for records in kp.poll(timeout_ms=100).values():
                kp_records.extend((r.partition, r.offset, r.value.decode()) for r in records)
                kp.commit()

    thread = threading.Thread(target=run_kafka_python, daemon=True)
    thread.start()
    cf = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False, "partition.assignment.strategy": "range",
                   "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    cf.subscribe([topic_name])
    cf_records = []
    try:
        deadline = time.monotonic() + 40
        while True:
            msg = cf.poll(0.1)
            if msg is not None and not msg.error():
                cf_records.append((msg.partition(), msg.offset(), msg.value().decode()))
                cf.commit(message=msg, asynchronous=False)
            assigned_cf = {tp.partition for tp in cf.assignment()}
            assigned_kp = {tp.partition for tp in kp.assignment()}
            values = {v for _, _, v in cf_records + kp_records}
            if (assigned_cf and assigned_kp and assigned_cf | assigned_kp == {0, 1, 2}
                    and not assigned_cf & assigned_kp and values >= {v for _, v in FIRST}):
                break
            assert time.monotonic() < deadline, (assigned_cf, assigned_kp, len(values))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(15)
        assert described.partition_assignor == "range" and len(described.members) == 2
    finally:
        stop.set()
        thread.join(10)
        kp.close()
        cf.close()


# ---- kafka-python admin ------------------------------------------------------------------------------


def test_kafka_python_admin_group_apis(broker_factory, topic_name):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, FIRST)
    group = f"g-{uuid.uuid4().hex[:8]}"
    kafka_python_consume(broker.bootstrap, topic_name)(group, len(FIRST))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = [g for g in admin.list_groups() if g["group_id"] == group]
        assert listed == [{"group_id": group, "protocol_type": "consumer", "group_state": "Empty",
                           "group_type": "classic"}]
        assert admin.list_groups(states_filter=["Stable"]) == []
        described = admin.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_type"], described["members"], described["error"]) == (
            "Empty", "consumer", [], None)
        offsets = admin.list_group_offsets({group: None})
        flat = offsets[group] if isinstance(offsets, dict) and group in offsets else offsets
        assert sorted((tp.partition, meta.offset) for tp, meta in flat.items()) == [(0, 10), (1, 10), (2, 10)]
        admin.alter_group_offsets(group, {TopicPartition(topic_name, 1): OffsetAndMetadata(4, "", -1)})
        admin.delete_group_offsets(group, [TopicPartition(topic_name, 2)])
        offsets = admin.list_group_offsets({group: None})
        flat = offsets[group] if isinstance(offsets, dict) and group in offsets else offsets
        assert sorted((tp.partition, meta.offset) for tp, meta in flat.items()) == [(0, 10), (1, 4)]
        result = admin.delete_groups([group])
        assert result == {group: "OK"}
        assert admin.delete_groups([group]) != {group: "OK"}  # GROUP_ID_NOT_FOUND now
        remaining = [g for g in admin.list_groups() if g["group_id"] == group]
        assert remaining == []
    finally:
        admin.close()
