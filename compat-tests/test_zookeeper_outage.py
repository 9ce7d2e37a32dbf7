"""ZooKeeper failures against real broker processes, driven by confluent_kafka (librdkafka).

- ZooKeeper killed for several seconds while an acks=all idempotent producer runs and admin calls
  are made: every broker stays up, every admin call is answered by the broker with a Kafka error
  (not a closed connection, not a client-side timeout, not a success that did not happen), and
  once ZooKeeper is back the admin calls succeed and no acknowledged message is missing.
- A znode that does not parse (written with kazoo) is logged and skipped; the brokers keep
  serving every other topic, and the damaged one from its last good version.
- Shutdown with ZooKeeper unreachable: SIGTERM ends the broker after Kafka's bounded controlled
  shutdown retries, with its logs flushed (the clean-shutdown marker written); a second SIGTERM
  ends it at once.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import confluent_kafka
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
)

from cluster import ZooKeeperCluster
from kafkacompat.log.manager import CLEAN_SHUTDOWN_FILE
from kafkacompat.wire.errors import ErrorCode

CHROOT = "/kafkacompat"
# cluster.py's 1.5 s sessions give ZooKeeper about 0.5 s to answer kazoo's pings; on a loaded
# machine a stall that long drops the connection, and an admin call then rightly fails. These
# tests need ZooKeeper down only when they stop it: longer sessions, the same 1.5 s bound on
# waiting for a connection (what an operation waits while ZooKeeper is down).
STEADY_SESSIONS = ["--set", "zookeeper.session.timeout.ms=6000", "--set", "zookeeper.connection.timeout.ms=1500"]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def outcome(future, timeout: float = 30):
    """None for a success, else the error code (librdkafka's own codes are negative)."""
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def admin_calls(bootstrap: str, existing: str) -> dict[str, int | None]:
    """One of each admin call that writes cluster metadata; the outcome of each."""
    client = admin(bootstrap)
    new = f"new-{uuid.uuid4().hex[:8]}"
    entry = ConfigEntry("retention.ms", "86400001", incremental_operation=AlterConfigOpType.SET)
    futures = {
        "CreateTopics": client.create_topics([NewTopic(new, 1, 3)], operation_timeout=10)[new],
        "CreatePartitions": client.create_partitions([NewPartitions(existing, 4)], operation_timeout=10)[existing],
        "IncrementalAlterConfigs": next(iter(client.incremental_alter_configs(
            [ConfigResource("topic", existing, incremental_configs=[entry])]).values())),
        "ElectLeaders": client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(existing, 0)]),
    }
    results = {name: outcome(future) for name, future in futures.items()}
    spare = existing + "-spare"
    results["DeleteTopics"] = outcome(client.delete_topics([spare], operation_timeout=10)[spare])
    return results


def create_topic(bootstrap: str, name: str, partitions: int = 3, rf: int = 3) -> None:
    client = admin(bootstrap)
    code = outcome(client.create_topics([NewTopic(name, partitions, rf)], operation_timeout=20)[name])
    assert code is None, f"CreateTopics {name}: error {code}"


class NumberedProducer:
    """An acks=all idempotent producer sending numbered values in a thread; records the acked ones."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        })
        self.topic = topic
        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, message) -> None:
        if err is None:
            self.acked.add(message.value())
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"%d" % number, on_delivery=self._delivered)
            number += 1
            self.producer.poll(0.01)

    def wait_for_acks(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} messages acknowledged; {self.failed[:3]}"
            time.sleep(0.05)

    def __enter__(self) -> "NumberedProducer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(60) == 0


def consume_all(bootstrap: str, topic: str, expected: set[bytes], timeout: float = 60) -> set[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while not expected <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


def wait_for_store(cluster: ZooKeeperCluster, brokers: int, timeout: float = 60) -> None:
    """ZooKeeper itself lists every broker and a controller (read with kazoo)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=cluster.zookeeper.connect + CHROOT)
    client.start(timeout=30)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(client.get_children("/brokers/ids")) == brokers and client.exists("/controller"):
                return
            time.sleep(0.1)
        raise AssertionError(f"the brokers did not register again within {timeout}s")
    finally:
        client.stop()
        client.close()


def all_alive(cluster: ZooKeeperCluster) -> bool:
    return all(proc.proc.poll() is None for proc in cluster.brokers.values())


def test_zookeeper_outage_stops_no_broker_and_admin_calls_get_kafka_errors(tmp_path, topic_name):
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=STEADY_SESSIONS) as cluster:
        cluster.wait_until_every_broker_sees(3)
        create_topic(cluster.bootstrap, topic_name)
        create_topic(cluster.bootstrap, topic_name + "-spare", 1)
        with NumberedProducer(cluster.bootstrap, topic_name) as producer:
            # Its producer id comes from a block the broker claims in ZooKeeper: get it first.
            producer.wait_for_acks(100)
            cluster.zookeeper.stop()  # SIGKILL
            outage_started = time.monotonic()
            acked_before_outage = len(producer.acked)
            during = admin_calls(cluster.bootstrap, topic_name)
            time.sleep(max(0.0, 6 - (time.monotonic() - outage_started)))
            acked_during_outage = len(producer.acked) - acked_before_outage
            assert all_alive(cluster), [p.output() for p in cluster.brokers.values()]
            cluster.zookeeper.start()
            wait_for_store(cluster, 3)
            time.sleep(1)
        # Every call was answered by a broker, with an error: the store could not be written.
        assert during == {name: ErrorCode.REQUEST_TIMED_OUT for name in during}, during
        assert acked_during_outage > 0
        assert all_alive(cluster)
        assert not producer.failed, producer.failed[:5]
        # Nothing the failed calls asked for happened.
        md = cluster.metadata(topic=topic_name)
        assert len(md.topics[topic_name].partitions) == 3
        assert topic_name + "-spare" in cluster.metadata().topics
        # ZooKeeper is back: the same calls succeed, and every acknowledged message is there.
        after = admin_calls(cluster.bootstrap, topic_name)
        assert all(code in (None, ErrorCode.ELECTION_NOT_NEEDED) for code in after.values()), after
        seen = consume_all(cluster.bootstrap, topic_name, producer.acked)
        assert producer.acked <= seen, f"{len(producer.acked - seen)} acknowledged messages missing"
        assert all_alive(cluster)


def test_a_malformed_znode_is_logged_and_skipped(tmp_path, topic_name):
    from kazoo.client import KazooClient

    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=STEADY_SESSIONS) as cluster:
        cluster.wait_until_every_broker_sees(3)
        damaged = topic_name + "-damaged"
        create_topic(cluster.bootstrap, topic_name)
        create_topic(cluster.bootstrap, damaged)
        for broker_id in cluster.brokers:  # every broker has applied the good states first
            cluster.wait_for(lambda md: damaged in md.topics
                             and all(p.leader >= 0 for p in md.topics[damaged].partitions.values()),
                             broker_id=broker_id)
        client = KazooClient(hosts=cluster.zookeeper.connect + CHROOT)
        client.start(timeout=30)
        try:
            client.create("/brokers/topics/garbage", b"{this is not json")
            client.set(f"/brokers/topics/{damaged}/partitions/0/state", b'{"version":1,"leader":"x"')
            client.set(f"/brokers/topics/{damaged}", b"[]")
        finally:
            client.stop()
            client.close()
        create_topic(cluster.bootstrap, topic_name + "-after")  # a sync on every broker
        cluster.wait_for(lambda md: topic_name + "-after" in md.topics)
        assert all_alive(cluster)
        for proc in cluster.brokers.values():
            deadline = time.monotonic() + 30
            while "/brokers/topics/garbage, which does not parse" not in proc.output() and time.monotonic() < deadline:
                time.sleep(0.1)
            output = proc.output()
            assert "/brokers/topics/garbage, which does not parse" in output
            assert f"/brokers/topics/{damaged}, which does not parse" in output
        # The other topics are served, and so is the damaged one (its last good version).
        for topic in (topic_name, topic_name + "-after", damaged):
            with NumberedProducer(cluster.bootstrap, topic) as producer:
                producer.wait_for_acks(100)
            assert not producer.failed
            assert producer.acked <= consume_all(cluster.bootstrap, topic, producer.acked)
        assert "garbage" not in cluster.metadata().topics
        assert all_alive(cluster)


def test_sigterm_with_zookeeper_down_stops_after_bounded_retries(tmp_path):
    # 3 attempts, each failing after zookeeper.connection.timeout.ms (1.5 s), 1 s apart: ~6.5 s.
    args = [*STEADY_SESSIONS, "--set", "controlled.shutdown.max.retries=3",
            "--set", "controlled.shutdown.retry.backoff.ms=1000"]
    with ZooKeeperCluster(tmp_path, brokers=1, extra_args=args) as cluster:
        cluster.wait_until_every_broker_sees(1)
        create_topic(cluster.bootstrap, "kept", 1, 1)
        broker = cluster.brokers[0]
        cluster.zookeeper.stop()
        broker.wait_for_output("Connection dropped")  # kazoo noticed
        marker = broker.data_dir / CLEAN_SHUTDOWN_FILE
        assert not marker.exists()
        assert broker.stop(timeout=30) == 0  # raises if still running 30 s after SIGTERM
        output = broker.output()
        assert output.count("controlled shutdown attempts failed") == 1
        assert "attempt 3 of 3 failed" in output
        assert "stopped; logs flushed and checkpoints written" in output
        assert marker.exists()


def test_a_second_sigterm_stops_the_broker_at_once(tmp_path):
    # Kafka's default budget (3 attempts, 5 s apart) is cut short by a second signal.
    with ZooKeeperCluster(tmp_path, brokers=1, extra_args=STEADY_SESSIONS) as cluster:
        cluster.wait_until_every_broker_sees(1)
        broker = cluster.brokers[0]
        cluster.zookeeper.stop()
        broker.wait_for_output("Connection dropped")  # kazoo noticed
        broker.proc.send_signal(signal.SIGTERM)
        broker.wait_for_output("attempt 1 of 3 failed")
        broker.proc.send_signal(signal.SIGTERM)
        assert broker.proc.wait(5) == 0  # raises if still running 5 s after the second signal
        assert "attempt 2 of 3" not in broker.output()
        assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
