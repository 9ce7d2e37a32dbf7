"""Several log directories (log.dirs, JBOD) on real broker processes, as Kafka serves them:
partitions spread over the directories, each with its own meta.properties and checkpoints;
DescribeLogDirs and AlterReplicaLogDirs through kafka-python's KafkaAdminClient; a replica moved
under an acks=all produce load loses nothing and reads in order, also after a restart; a failed
directory goes offline with its partitions while the others keep serving, and the broker stops
once every directory has failed."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

pytest.register_assert_rewrite("clients")
from clients import RawConnection, fetch_request  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402

TIMEOUT = 30
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


@pytest.fixture
def jbod(tmp_path):
    started: list[BrokerProcess] = []

    def make(count: int, *extra_args: str) -> BrokerProcess:
        dirs = [tmp_path / f"disk-{i}" for i in range(count)]
        proc = BrokerProcess(dirs[0], more_log_dirs=dirs[1:], extra_args=list(extra_args),
                             log_path=tmp_path / f"broker-{len(started)}.log")
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.kill()


def create_topic(broker: BrokerProcess, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config=config or {})])[name].result(TIMEOUT)


def kafka_python_admin(broker: BrokerProcess):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)


def describe(broker: BrokerProcess) -> dict[str, dict]:
    """kafka-python's describe_log_dirs: {log dir: its result}."""
    admin = kafka_python_admin(broker)
    try:
        (response,) = admin.describe_log_dirs()
    finally:
        admin.close()
    return {result["log_dir"]: result for result in response["log_dirs"]}


def replicas_in(result: dict, topic: str) -> dict[int, dict]:
    return {p["partition_index"]: p for t in result["topics"] if t["name"] == topic for p in t["partitions"]}


def alter_replica_log_dirs(broker: BrokerProcess, moves: dict[tuple[str, int], str]) -> dict[tuple[str, int], str]:
    """kafka-python's alter_replica_log_dirs: {(topic, partition): error name}."""
    admin = kafka_python_admin(broker)
    try:
        results = admin.alter_replica_log_dirs({(t, p, 0): path for (t, p), path in moves.items()})
    finally:
        admin.close()
    return {(tpr.topic, tpr.partition): error.__name__ for tpr, error in results.items()}


def set_broker_config(broker: BrokerProcess, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("BROKER", "0", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)


def produce(broker: BrokerProcess, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    failed = []
    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(TIMEOUT) == 0 and not failed, failed


def produce_error(broker: BrokerProcess, topic: str, partition: int) -> int | None:
    """The error code of one message sent without retries (None: acknowledged)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False, "message.timeout.ms": 10000})
    outcome = []
    producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT)
    assert len(outcome) == 1
    return None if outcome[0] is None else outcome[0].code()


def consume(broker: BrokerProcess, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def fetch_error(broker: BrokerProcess, topic: str, partition: int) -> int:
    from kafka.protocol.consumer import FetchResponse

    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(fetch_request(topic, partition, 0), FetchResponse, version=11)
    return response.responses[0].partitions[0].error_code


def properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def test_partitions_spread_over_the_log_dirs_each_with_its_own_files(jbod, topic_name):
    broker = jbod(3)
    create_topic(broker, topic_name, 6)
    for partition in range(6):
        produce(broker, topic_name, partition, [f"p{partition}-{i}".encode() for i in range(5)])
    dirs = [str(path.resolve()) for path in broker.log_dirs]
    described = describe(broker)
    assert sorted(described) == sorted(dirs)
    placed = {}
    for path, result in described.items():
        assert result["error_code"] == 0 and result["total_bytes"] > 0 and result["usable_bytes"] > 0
        here = replicas_in(result, topic_name)
        assert len(here) == 2, f"{path} holds {sorted(here)}"  # the dir with the fewest logs, in turn
        for index, replica in here.items():
            assert replica["partition_size"] > 0 and replica["offset_lag"] == 0 and not replica["is_future_key"]
            assert (Path(path) / f"{topic_name}-{index}").is_dir()
            placed[index] = path
    assert sorted(placed) == list(range(6))
    metas = [properties(path / "meta.properties") for path in broker.log_dirs]
    assert len({meta["cluster.id"] for meta in metas}) == 1 and {meta["node.id"] for meta in metas} == {"0"}
    assert len({meta["directory.id"] for meta in metas}) == 3

    assert broker.stop() == 0
    for path in broker.log_dirs:
        assert (path / ".kafka_cleanshutdown").exists()
        checkpointed = (path / "recovery-point-offset-checkpoint").read_text().splitlines()[2:]
        partitions = sorted(int(line.split()[1]) for line in checkpointed if line.startswith(topic_name + " "))
        assert partitions == sorted(i for i, where in placed.items() if where == str(path.resolve()))
    broker.start()
    for partition in range(6):
        assert consume(broker, topic_name, partition, 5) == [f"p{partition}-{i}".encode() for i in range(5)]
    assert properties(broker.log_dirs[1] / "meta.properties")["directory.id"] == metas[1]["directory.id"]


def test_a_partition_in_two_log_dirs_refuses_the_start_naming_both(jbod, topic_name):
    broker = jbod(2)
    create_topic(broker, topic_name, 1)
    produce(broker, topic_name, 0, [b"a"])
    assert broker.stop() == 0
    original = broker.log_dirs[0] / f"{topic_name}-0"
    copy = broker.log_dirs[1] / f"{topic_name}-0"
    shutil.copytree(original, copy)
    with pytest.raises(RuntimeError) as refused:
        broker.start()
    assert f"in two log directories: {original.resolve()} and {copy.resolve()}" in str(refused.value)


def test_a_replica_moves_to_another_log_dir_under_an_acks_all_load(jbod, topic_name):
    broker = jbod(2)
    source, destination = (str(path.resolve()) for path in broker.log_dirs)
    create_topic(broker, topic_name, 1)
    produce(broker, topic_name, 0, [f"before-{i:05}".encode() * 10 for i in range(2000)])
    assert alter_replica_log_dirs(broker, {(topic_name, 0): "/no/such/dir", ("no-such-topic", 0): destination}) == {
        (topic_name, 0): "LogDirNotFoundError", ("no-such-topic", 0): "UnknownTopicOrPartitionError"}
    assert alter_replica_log_dirs(broker, {(topic_name, 0): source}) == {(topic_name, 0): "NoError"}  # already there

    acked: list[bytes] = []
    failed: list = []
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5})
        sent = 0
        while not stop.is_set():
            value = f"during-{sent:06}".encode()
            producer.produce(topic_name, value, partition=0,
                             on_delivery=lambda err, msg: failed.append(err) if err else acked.append(msg.value()))
            sent += 1
            producer.poll(0.002)
        assert producer.flush(TIMEOUT) == 0

    set_broker_config(broker, THROTTLE, "1")  # the copy waits after its first step
    thread = threading.Thread(target=load)
    thread.start()
    try:
        wait_until(lambda: len(acked) > 100, "the load is acknowledged")
        assert alter_replica_log_dirs(broker, {(topic_name, 0): destination}) == {(topic_name, 0): "NoError"}
        moving = describe(broker)
        current, future = replicas_in(moving[source], topic_name)[0], replicas_in(moving[destination], topic_name)[0]
        assert not current["is_future_key"] and future["is_future_key"]
        assert future["offset_lag"] > 0 and future["partition_size"] < current["partition_size"]
        assert list((broker.log_dirs[1]).glob(f"{topic_name}-0.*-future"))
        set_broker_config(broker, THROTTLE, str(2**62))
        wait_until(lambda: not replicas_in(describe(broker)[source], topic_name), "the move is done")
        acked_when_moved = len(acked)
        wait_until(lambda: len(acked) > acked_when_moved + 500, "more is acknowledged after the move")
    finally:
        stop.set()
        thread.join(TIMEOUT)
    assert not failed
    moved = replicas_in(describe(broker)[destination], topic_name)[0]
    assert not moved["is_future_key"] and moved["offset_lag"] == 0
    assert not (broker.log_dirs[0] / f"{topic_name}-0").exists() and (broker.log_dirs[1] / f"{topic_name}-0").is_dir()
    broker.wait_for_output(f"Moved the replica of {topic_name}-0 from log directory {source} to {destination}")

    expected = [f"before-{i:05}".encode() * 10 for i in range(2000)] + acked
    assert consume(broker, topic_name, 0, len(expected)) == expected
    broker.restart()
    assert consume(broker, topic_name, 0, len(expected)) == expected
    assert not (broker.log_dirs[0] / f"{topic_name}-0").exists()


def test_a_failed_log_dir_goes_offline_and_the_other_keeps_serving(jbod, topic_name):
    broker = jbod(2, "--set", "log.flush.offset.checkpoint.interval.ms=200")
    first, second = broker.log_dirs
    create_topic(broker, topic_name, 2)  # partition 0 in the first dir, 1 in the second
    assert (first / f"{topic_name}-0").is_dir() and (second / f"{topic_name}-1").is_dir()
    for partition in (0, 1):
        produce(broker, topic_name, partition, [b"before"])

    # The disk under the second dir goes away: nothing can be created there any more.
    os.rename(second, second.with_name("disk-1.gone"))
    second.write_text("not a directory")
    broker.wait_for_output(f"Log directory {second.resolve()} is offline after an I/O error")
    broker.wait_for_output(f"its partitions {topic_name}-1 are offline here")

    described = describe(broker)
    assert described[str(second.resolve())]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert described[str(first.resolve())]["error_code"] == 0
    assert list(replicas_in(described[str(first.resolve())], topic_name)) == [0]
    assert produce_error(broker, topic_name, 1) == ErrorCode.KAFKA_STORAGE_ERROR
    assert fetch_error(broker, topic_name, 1) == ErrorCode.KAFKA_STORAGE_ERROR
    assert alter_replica_log_dirs(broker, {(topic_name, 0): str(second.resolve())}) == {
        (topic_name, 0): "KafkaStorageError"}
    produce(broker, topic_name, 0, [b"after"])
    assert consume(broker, topic_name, 0, 2) == [b"before", b"after"]

    os.rename(first, first.with_name("disk-0.gone"))
    first.write_text("not a directory")
    assert broker.proc.wait(TIMEOUT) != 0
    assert "every log directory has failed" in broker.output()
