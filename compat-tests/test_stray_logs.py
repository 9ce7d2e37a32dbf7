"""Logs left behind while a broker was away: a broker that returns to a cluster deletes the logs
of partitions it no longer hosts (topic deleted meanwhile); a log whose partition.metadata names
another topic id (an earlier topic of the same name) is never served as the new topic's data; a
data dir of another cluster is refused at start-up instead of being joined."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import ZooKeeperCluster
from kafkacompat.controller.topics import encode_topic_id


def create_topic(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)],
                                  operation_timeout=20)
    futures[name].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(seen) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    consumer.close()
    return seen


def wait_until(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.2)


def partition_dirs(data_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in data_dir.glob(f"{topic}-*") if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit())


def test_a_returning_broker_deletes_logs_of_topics_deleted_while_it_was_away(tmp_path, topic_name):
    gone, kept = topic_name + "-two", topic_name + "-kept"
    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3)
        create_topic(cluster.bootstrap, gone, 2, 3)
        create_topic(cluster.bootstrap, kept, 1, 3)
        produce(cluster.bootstrap, gone, 10, partitions=2)
        produce(cluster.bootstrap, kept, 5)
        away = cluster.brokers[2]
        wait_until(lambda: len(partition_dirs(away.data_dir, gone)) == 2, what="replicas of the topic on broker 2")
        away.stop()

        admin = AdminClient({"bootstrap.servers": cluster.brokers[0].bootstrap})
        admin.delete_topics([gone], operation_timeout=20)[gone].result(timeout=30)
        cluster.wait_for(lambda md: gone not in md.topics, broker_id=0)
        assert partition_dirs(away.data_dir, gone) == ["%s-0" % gone, "%s-1" % gone]  # still there while away

        cluster.start_broker(2)
        wait_until(lambda: partition_dirs(away.data_dir, gone) == [], what="stray logs deleted")
        assert "this broker hosts no such partition any more" in away.output()
        assert partition_dirs(away.data_dir, kept) == [f"{kept}-0"]
        assert sorted(consume_all(away.bootstrap, kept, 5)) == sorted(f"v{i}".encode() for i in range(5))


def test_a_data_dir_of_another_cluster_is_refused(tmp_path):
    with ZooKeeperCluster(tmp_path, brokers=2) as cluster:
        cluster.wait_until_every_broker_sees(2)
        broker = cluster.brokers[1]
        broker.stop()
        meta = broker.data_dir / "meta.properties"
        text = meta.read_text()
        assert "cluster.id=" in text
        foreign = encode_topic_id(uuid.uuid4())
        meta.write_text("\n".join(f"cluster.id={foreign}" if line.startswith("cluster.id=") else line
                                  for line in text.splitlines()) + "\n")
        try:
            broker.start(timeout=30)
        except RuntimeError as exc:
            message = str(exc)
        else:
            raise AssertionError("a broker with another cluster's data dir started")
        assert "trying to join the wrong cluster" in message and foreign in message
        assert "Traceback" not in message


def test_a_log_of_an_earlier_topic_with_the_same_name_is_not_served(broker_factory, topic_name):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, 1, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce(topic_name, value=f"old{i}".encode())
    assert producer.flush(15) == 0
    broker.stop()
    # The directory now claims another topic id: it is what an earlier topic of this name left.
    (broker.data_dir / f"{topic_name}-0" / "partition.metadata").write_text(
        f"version: 0\ntopic_id: {encode_topic_id(uuid.uuid4())}\n")
    broker.start()
    assert "belongs to an earlier topic of that name" in broker.output()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic_name, 0), timeout=10)
    consumer.close()
    assert (low, high) == (0, 0)
