"""A broker whose data dir fills up for real (a 4 MiB tmpfs the test mounts and fills with a file
until ENOSPC): writes are answered KAFKA_STORAGE_ERROR and leave nothing half-done, reads keep
working, and once the filler is deleted the same requests succeed without a restart.
Real clients: confluent-kafka's AdminClient and Producer, kafka-python's KafkaProducer."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

pytest.register_assert_rewrite("clients")
from clients import ConfluentDriver, Msg, admin, confluent_send, create_topic, values  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402

TIMEOUT = 15
DISK_SIZE = "4m"


class SmallDisk:
    """A tmpfs of DISK_SIZE mounted at ``root``; ``fill()`` writes a file until the kernel says
    ENOSPC, ``free()`` deletes it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        chunk = b"\0" * 65536
        with open(self.filler, "ab", buffering=0) as file:
            while True:
                try:
                    file.write(chunk)
                except OSError as error:
                    assert error.errno == errno.ENOSPC, error
                    if len(chunk) == 1:
                        break
                    chunk = chunk[:len(chunk) // 2]
        assert os.statvfs(self.root).f_bavail == 0

    def free(self) -> None:
        self.filler.unlink()
        assert os.statvfs(self.root).f_bavail > 0


@pytest.fixture
def disk(tmp_path):
    root = tmp_path / "disk"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(root)], check=True)
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)


@pytest.fixture
def broker(disk, tmp_path):
    proc = BrokerProcess(disk.root / "data", log_path=tmp_path / "broker.log")
    try:
        yield proc.start()
    finally:
        proc.kill()


def create_error(broker, topic: str, partitions: int = 1) -> KafkaException:
    futures = admin(broker).create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                          operation_timeout=10, request_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=TIMEOUT)
    return raised.value


def listed_topics(broker) -> set[str]:
    return set(admin(broker).list_topics(timeout=TIMEOUT).topics)


def test_create_topics_on_a_full_disk_answers_storage_error_and_creates_nothing(disk, broker, topic_name):
    disk.fill()
    error = create_error(broker, topic_name, partitions=3).args[0]
    assert error.code() == ErrorCode.KAFKA_STORAGE_ERROR, error
    assert topic_name not in listed_topics(broker)
    assert not [entry for entry in os.listdir(broker.data_dir) if entry.startswith(topic_name)]

    disk.free()
    create_topic(broker.bootstrap, topic_name, partitions=3)   # the same request, no restart
    assert topic_name in listed_topics(broker)
    assert confluent_send(broker.bootstrap, topic_name, [Msg(b"after", partition=2)]) == [0]
    assert values(ConfluentDriver(broker.bootstrap).consume(topic_name, 2, 0, 1, timeout=10)) == [b"after"]


def test_create_topics_survives_a_full_disk_after_restart(disk, broker, topic_name):
    """Nothing of the failed creation was recorded: a restart knows no such topic either."""
    disk.fill()
    assert create_error(broker, topic_name).args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
    disk.free()
    broker.restart()
    assert topic_name not in listed_topics(broker)
    create_topic(broker.bootstrap, topic_name)
    assert topic_name in listed_topics(broker)


def test_produce_on_a_full_disk_is_refused_and_resumes_when_space_returns(disk, broker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    create_topic(broker.bootstrap, topic_name, partitions=2)
    before = [Msg(f"before-{i}".encode(), partition=0) for i in range(3)]
    confluent_send(broker.bootstrap, topic_name, before)
    segment = broker.data_dir / f"{topic_name}-0" / f"{0:020d}.log"
    complete_size = segment.stat().st_size
    disk.fill()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, retries=0, linger_ms=0,
                             batch_size=64 * 1024, compression_type=None)
    try:
        big = os.urandom(20_000)   # larger than the room left in the segment's last page: a torn write
        for partition in (0, 1):
            with pytest.raises(KafkaStorageError):
                producer.send(topic_name, value=big, partition=partition).get(timeout=TIMEOUT)
        assert segment.stat().st_size == complete_size  # the part that fitted was cut off again
        # Reads and metadata still served while full.
        got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 3, timeout=10)
        assert values(got) == [m.value for m in before]

        disk.free()
        assert producer.send(topic_name, value=b"after", partition=0).get(timeout=TIMEOUT).offset == 3
        assert producer.send(topic_name, value=b"after-1", partition=1).get(timeout=TIMEOUT).offset == 0
    finally:
        producer.close()
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 4, timeout=10)
    assert values(got) == [m.value for m in before] + [b"after"]
    assert [r.offset for r in got] == [0, 1, 2, 3]


def test_create_partitions_on_a_full_disk_adds_none_until_space_returns(disk, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    disk.fill()
    futures = admin(broker).create_partitions([NewPartitions(topic_name, 3)], operation_timeout=10,
                                              request_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as raised:
        futures[topic_name].result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
    metadata = admin(broker).list_topics(topic_name, timeout=TIMEOUT).topics[topic_name]
    assert sorted(metadata.partitions) == [0]
    assert not (broker.data_dir / f"{topic_name}-1").exists()

    disk.free()
    futures = admin(broker).create_partitions([NewPartitions(topic_name, 3)], operation_timeout=10,
                                              request_timeout=TIMEOUT)
    futures[topic_name].result(timeout=TIMEOUT)
    assert confluent_send(broker.bootstrap, topic_name, [Msg(b"new", partition=2)]) == [0]


def test_delete_records_on_a_full_disk_moves_nothing_until_space_returns(disk, broker, topic_name):
    from confluent_kafka import TopicPartition

    create_topic(broker.bootstrap, topic_name)
    sent = [Msg(f"m{i}".encode()) for i in range(5)]
    confluent_send(broker.bootstrap, topic_name, sent)
    tp = TopicPartition(topic_name, 0, 3)
    disk.fill()
    with pytest.raises(KafkaException) as raised:
        admin(broker).delete_records([tp], request_timeout=TIMEOUT)[tp].result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 5, timeout=10)
    assert values(got) == [m.value for m in sent]   # refused: every record still there

    disk.free()
    result = admin(broker).delete_records([tp], request_timeout=TIMEOUT)[tp].result(timeout=TIMEOUT)
    assert result.low_watermark == 3
    broker.kill()   # the new log start was checkpointed before the answer
    broker.start()
    assert [r.offset for r in ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 2, timeout=10)] == [3, 4]


def test_alter_configs_on_a_full_disk_changes_nothing_until_space_returns(disk, broker, topic_name):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    create_topic(broker.bootstrap, topic_name)

    def set_retention(value: str) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
            ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
        admin(broker).incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource].result(timeout=TIMEOUT)

    def retention() -> str:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
        described = admin(broker).describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
        return described["retention.ms"].value

    disk.fill()
    with pytest.raises(KafkaException) as raised:
        set_retention("1234567")
    assert raised.value.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
    assert retention() == "604800000"   # the broker default: nothing changed
    disk.free()
    set_retention("1234567")
    assert retention() == "1234567"
    broker.restart()
    assert retention() == "1234567"


def test_delete_topics_on_a_full_disk_keeps_the_topic_whole_until_space_returns(disk, broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    confluent_send(broker.bootstrap, topic_name, [Msg(b"kept")])
    disk.fill()
    with pytest.raises(KafkaException) as raised:
        admin(broker).delete_topics([topic_name], request_timeout=TIMEOUT)[topic_name].result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
    assert topic_name in listed_topics(broker)
    assert values(ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 1, timeout=10)) == [b"kept"]

    disk.free()
    admin(broker).delete_topics([topic_name], request_timeout=TIMEOUT)[topic_name].result(timeout=TIMEOUT)
    assert topic_name not in listed_topics(broker)
    assert not (broker.data_dir / f"{topic_name}-0").exists()


def test_a_produce_that_rolls_a_segment_on_a_full_disk_is_refused_and_the_log_stays_whole(disk, broker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": "2048"})
    before = [Msg(os.urandom(1200)) for _ in range(3)]
    for msg in before:   # one request, one batch and one segment each
        confluent_send(broker.bootstrap, topic_name, [msg])
    disk.fill()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, retries=0, linger_ms=0)
    try:
        for _ in range(2):
            with pytest.raises(KafkaStorageError):
                producer.send(topic_name, value=os.urandom(1200), partition=0).get(timeout=TIMEOUT)
        disk.free()
        offsets = [producer.send(topic_name, value=f"after-{i}".encode() * 200, partition=0).get(timeout=TIMEOUT).offset
                   for i in range(3)]
    finally:
        producer.close()
    assert offsets == [3, 4, 5]
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 6, timeout=10)
    assert [r.offset for r in got] == list(range(6))
    assert values(got) == [m.value for m in before] + [f"after-{i}".encode() * 200 for i in range(3)]
    broker.kill()   # and recovery after a crash finds the same log
    broker.start()
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 6, timeout=10)
    assert [r.offset for r in got] == list(range(6))


def test_a_zookeeper_broker_opens_its_partitions_once_its_full_disk_has_room(tmp_path, topic_name):
    """ZooKeeper mode, as Kafka's: the topic's znodes are written and the broker creates the logs
    when it applies the partition states; while its disk is full it cannot, and once there is
    room again it does without a restart: it retries every RETRY_SECONDS, not only when the
    metadata changes (which this test cannot tell apart: ZooKeeper's watch notifications of the
    creation may still arrive after the free)."""
    from cluster import ZooKeeperCluster

    root = tmp_path / "broker-0"   # the cluster's data dir of broker 0
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(root)], check=True)
    try:
        with ZooKeeperCluster(tmp_path, brokers=1) as cluster:
            disk = SmallDisk(root)
            disk.fill()
            client = admin_for(cluster.bootstrap)   # alive until its futures are done
            futures = client.create_topics(
                [NewTopic(topic_name, num_partitions=2, replication_factor=1)],
                operation_timeout=10, request_timeout=TIMEOUT)
            futures[topic_name].result(timeout=TIMEOUT)   # recorded in ZooKeeper
            for partition in (0, 1):
                cluster.brokers[0].wait_for_output(f"Applying {topic_name}-{partition} failed")
            assert not (root / f"{topic_name}-0" / "partition.metadata").exists()
            disk.free()
            assert confluent_send(cluster.bootstrap, topic_name, [Msg(b"room", partition=1)]) == [0]
            got = ConfluentDriver(cluster.bootstrap).consume(topic_name, 1, 0, 1, timeout=10)
            assert values(got) == [b"room"]
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)


def admin_for(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})
