"""Three real broker processes on a real ZooKeeper, driven by confluent_kafka (librdkafka):
every broker reports the same metadata (brokers, controller, leaders, replicas, ISR); CreateTopics
with replication factor 3; the controller SIGKILLed -> another is elected and the cluster keeps
serving; dev-cluster prints a bootstrap that works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from cluster import ZooKeeperCluster
from kafkacompat.testing.process import free_port, free_ports

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)],
                                  operation_timeout=20)
    futures[name].result(timeout=30)


def partition_view(md, topic):
    return {p.id: (p.leader, tuple(p.replicas), tuple(sorted(p.isrs))) for p in md.topics[topic].partitions.values()}


def produce_and_consume(bootstrap: str, topic: str, count: int = 20) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.add(message.value())
    consumer.close()
    assert len(seen) == count


def test_three_brokers_agree_on_metadata_and_create_topics_rf3(tmp_path, topic_name):
    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3)
        create_topic(cluster.bootstrap, topic_name, 6, 3)
        views = []
        for broker_id in range(3):
            md = cluster.wait_for(lambda md: topic_name in md.topics and len(md.topics[topic_name].partitions) == 6
                                  and all(p.leader >= 0 for p in md.topics[topic_name].partitions.values()),
                                  broker_id=broker_id)
            assert sorted(md.brokers) == [0, 1, 2]
            views.append((md.controller_id, partition_view(md, topic_name)))
        assert views[0] == views[1] == views[2]
        controller, partitions = views[0]
        assert controller in (0, 1, 2)
        assert {leader for leader, _, _ in partitions.values()} == {0, 1, 2}   # leaders spread
        for leader, replicas, isr in partitions.values():
            assert sorted(replicas) == [0, 1, 2] and isr == (0, 1, 2) and leader == replicas[0]
        produce_and_consume(cluster.bootstrap, topic_name)


def test_controller_killed_a_new_one_is_elected_and_the_cluster_serves(tmp_path, topic_name):
    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3)
        old = cluster.metadata().controller_id
        create_topic(cluster.bootstrap, topic_name, 3, 3)
        cluster.brokers[old].kill()
        survivors = [b for b in range(3) if b != old]
        md = cluster.wait_for(lambda md: md.controller_id in survivors and len(md.brokers) == 2
                              and all(p.leader in survivors for p in md.topics[topic_name].partitions.values()),
                              broker_id=survivors[0])
        for p in md.topics[topic_name].partitions.values():
            assert old not in p.isrs
        # The cluster keeps serving: a new topic (RF 2 on the two survivors), and the old one.
        create_topic(cluster.bootstrap, topic_name + "-2", 2, 2)
        cluster.wait_for(lambda md: all(p.leader in survivors for p in md.topics[topic_name + "-2"].partitions.values()),
                         broker_id=survivors[1])
        with pytest.raises(Exception):
            create_topic(cluster.bootstrap, topic_name + "-3", 1, 3)  # only two brokers left
        # The killed broker comes back and registers again.
        cluster.start_broker(old)
        cluster.wait_for(lambda md: len(md.brokers) == 3, broker_id=old)


def test_dev_cluster_prints_a_working_bootstrap(tmp_path, topic_name):
    port = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkacompat", "dev-cluster", "--brokers", "3", "--port", str(port),
         "--data-dir", str(tmp_path / "dev")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        bootstrap = None
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"bootstrap servers: (\S+)", line)
            if found:
                bootstrap = found.group(1)
                break
        assert bootstrap == f"127.0.0.1:{port},127.0.0.1:{port + 1},127.0.0.1:{port + 2}", "".join(lines)
        create_topic(bootstrap, topic_name, 3, 3)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 30
        while True:  # every broker's metadata catches up with the store within moments
            md = admin.list_topics(timeout=10)
            if topic_name in md.topics or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sorted(md.brokers) == [0, 1, 2]
        assert all(sorted(p.replicas) == [0, 1, 2] for p in md.topics[topic_name].partitions.values())
        produce_and_consume(bootstrap, topic_name)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_group_coordinator_moves_with_offsets_leadership(tmp_path, topic_name):
    from kafkacompat.groups.storage import partition_for

    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3)
        create_topic(cluster.bootstrap, topic_name, 3, 3)
        group = f"group-{topic_name}"
        produce_and_consume_group(cluster.bootstrap, topic_name, group, range(10))
        offsets_partition = partition_for(group, 50)
        md = cluster.wait_for(lambda md: "__consumer_offsets" in md.topics)
        offsets = md.topics["__consumer_offsets"].partitions[offsets_partition]
        assert len(offsets.replicas) == 3  # offsets.topic.replication.factor 3 on three brokers
        coordinator = offsets.leader
        cluster.brokers[coordinator].kill()
        survivors = [b for b in range(3) if b != coordinator]
        cluster.wait_for(lambda md: md.topics["__consumer_offsets"].partitions[offsets_partition].leader in survivors,
                         broker_id=survivors[0])
        # The new coordinator has the group's committed offsets: a new member resumes after them.
        produce_and_consume_group(cluster.bootstrap, topic_name, group, range(10, 15))


def produce_and_consume_group(bootstrap: str, topic: str, group: str, values) -> None:
    wanted = {f"v{i}".encode() for i in values}
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in sorted(wanted):
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < len(wanted) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    deadline = time.monotonic() + 30
    while True:  # the commit may first meet NOT_COORDINATOR while the coordinator moves
        try:
            consumer.commit(asynchronous=False)
            break
        except confluent_kafka.KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    consumer.close()
    assert sorted(seen) == sorted(wanted)


def test_serve_without_a_reachable_zookeeper_exits_with_a_message(tmp_path):
    port = free_port()  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "kafkacompat", "serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "d"),
         "--zookeeper", f"127.0.0.1:{port}", "--set", "zookeeper.connection.timeout.ms=1000"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
