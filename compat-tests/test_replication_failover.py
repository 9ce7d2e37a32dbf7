"""Data-path failover with real processes: a real ZooKeeper, three kafkacompat brokers started
with --zookeeper, and confluent_kafka (librdkafka) as the client.

- leaders SIGKILLed ten times in a row under a continuous acks=all idempotent producer: every
  acknowledged message is read back at its acknowledged offset, in order, without gaps or
  duplicates, and every killed broker rejoins the ISR;
- a SIGSTOPped follower leaves the ISR after replica.lag.time.max.ms, acks=all goes on with two
  in-sync replicas, and after SIGCONT it catches up and rejoins;
- a leader that took acks=1 writes its followers never fetched dies; a follower takes over, and
  the old leader, back, truncates those writes (leader epochs) so its log equals the new
  leader's byte for byte;
- the controller SIGKILLed: another broker becomes controller and the cluster keeps serving;
- a consumer group keeps consuming when its coordinator dies, and no committed offset is lost.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from cluster import ZooKeeperCluster

import confluent_kafka
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

BROKERS = [0, 1, 2]


def set_args(**settings) -> list[str]:
    args: list[str] = []
    for key, value in settings.items():
        args += ["--set", f"{key.replace('_', '.')}={value}"]
    return args


# Short timeouts so a failover takes a second or two: ZooKeeper sessions of 1.5 s (the helper's
# default), followers dropped after 3 s behind, quick fetcher back-off.
FAST = set_args(replica_lag_time_max_ms=3000, replica_fetch_backoff_ms=100, offsets_topic_replication_factor=3,
                group_initial_rebalance_delay_ms=0)


def deadline_loop(timeout: float, what: str, interval: float = 0.1):
    """Yield until the caller breaks out; fail with `what` once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        yield
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def create_topic(bootstrap: str, name: str, partitions: int = 3, rf: int = 3, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=rf,
                     config={k.replace("_", "."): str(v) for k, v in configs.items()})
    admin.create_topics([topic], operation_timeout=20)[name].result(timeout=30)


def partitions_of(md, topic: str) -> dict:
    return dict(md.topics[topic].partitions) if topic in md.topics and not md.topics[topic].error else {}


def all_led_with_isr(md, topic: str, count: int, isr: set[int]) -> bool:
    parts = partitions_of(md, topic)
    return len(parts) == count and all(p.leader in isr and set(p.isrs) == isr for p in parts.values())


def alive(cluster: ZooKeeperCluster) -> list[int]:
    return [b for b, p in sorted(cluster.brokers.items()) if p.proc is not None and p.proc.poll() is None]


class ContinuousProducer:
    """An idempotent acks=all producer in a thread, producing numbered values (``prefix``-n) to
    every partition round-robin; records each delivery report: partition -> [(offset, value)]."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, prefix: bytes = b"m", **extra) -> None:
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120000, "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 1000,
            **extra,
        })
        self.topic = topic
        self.partitions = partitions
        self.prefix = prefix
        # (offset, value); offset None: acknowledged implicitly (see assert_acknowledged_messages_are_there)
        self.acked: dict[int, list[tuple[int | None, bytes]]] = {p: [] for p in range(partitions)}
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self.last_ack = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err, msg) -> None:
        with self._lock:
            if err is not None:
                self.failed.append((msg.value(), str(err)))
            else:
                self.acked[msg.partition()].append((msg.offset(), msg.value()))
                self.last_ack = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            partition = self.sent % self.partitions
            try:
                self.producer.produce(self.topic, value=b"%s-%08d" % (self.prefix, self.sent), partition=partition,
                                      on_delivery=self._report)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.01)

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def wait_for_new_acks(self, partition: int, count: int = 5, timeout: float = 30) -> None:
        """Until `count` more messages of `partition` are acknowledged."""
        with self._lock:
            start = len(self.acked[partition])
        for _ in deadline_loop(timeout, f"{count} new acknowledgements on partition {partition}"):
            with self._lock:
                if len(self.acked[partition]) >= start + count:
                    return

    def __enter__(self) -> "ContinuousProducer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            remaining = self.producer.flush(60)
            assert remaining == 0, f"{remaining} messages still undelivered"


def read_partition(bootstrap: str, topic: str, partition: int, end: int, timeout: float = 60) -> list:
    """Every message of a partition from offset 0 up to `end` (exclusive), in order."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                         "enable.partition.eof": False})
    messages = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        for _ in deadline_loop(timeout, f"{topic}-{partition} up to offset {end}", interval=0):
            if messages and messages[-1].offset() >= end - 1:
                break
            if end == 0:
                break
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


def assert_acknowledged_messages_are_there(bootstrap: str, topic: str, acked: dict[int, list[tuple[int | None, bytes]]]):
    """Every acknowledged value is in the log, at its acknowledged offset, with no gap or duplicate.
    An offset of None is librdkafka's implicit acknowledgement (rd_kafka_dr_implicit_ack): a request
    whose answer was lost (its leader killed) was followed by one that succeeded, so the idempotent
    producer knows the earlier messages were written but not where; they must be in the log too."""
    total = 0
    for partition, acks in acked.items():
        assert acks, f"nothing acknowledged on partition {partition}"
        offsets = [o for o, _ in acks if o is not None]
        assert offsets, f"no acknowledgement with an offset on partition {partition}"
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), "acknowledgements out of order"
        end = max(offsets) + 1
        messages = read_partition(bootstrap, topic, partition, end)
        consumed = [(m.offset(), m.value()) for m in messages]
        assert [o for o, _ in consumed[:end]] == list(range(end)), f"gap in partition {partition}"
        at = dict(consumed)
        found = {v for _, v in consumed[:end]}
        for offset, value in acks:
            if offset is None:
                assert value in found, f"{topic}-{partition}: {value!r} acknowledged (implicitly) but not read"
                continue
            assert at.get(offset) == value, f"{topic}-{partition}@{offset}: acknowledged {value!r}, read {at.get(offset)!r}"
        values = [v for _, v in consumed]
        assert len(values) == len(set(values)), f"duplicates in partition {partition}"
        total += len(acks)
    return total


def wait_in_isr(cluster: ZooKeeperCluster, topic: str, broker_id: int, view_from: int, timeout: float = 30):
    return cluster.wait_for(lambda md: all(broker_id in p.isrs for p in partitions_of(md, topic).values())
                            and len(md.brokers) == 3, broker_id=view_from, timeout=timeout)


# ---- 1. ten leader kills under load ---------------------------------------------------------


def test_leaders_killed_ten_times_under_acks_all_load_lose_nothing(tmp_path, topic_name):
    partitions = 3
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, partitions, 3, min_insync_replicas=2)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)))
        with ContinuousProducer(cluster.bootstrap, topic_name, partitions) as producer:
            for round_ in range(10):
                partition = round_ % partitions
                observer = (round_ + 1) % 3
                md = cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)),
                                      broker_id=observer)
                victim = md.topics[topic_name].partitions[partition].leader
                producer.wait_for_new_acks(partition)
                cluster.brokers[victim].kill()
                survivors = [b for b in BROKERS if b != victim]
                cluster.wait_for(lambda md: md.topics[topic_name].partitions[partition].leader in survivors,
                                 broker_id=survivors[0])
                for p in range(partitions):  # every partition takes acks=all writes again
                    producer.wait_for_new_acks(p)
                cluster.start_broker(victim)
                wait_in_isr(cluster, topic_name, victim, view_from=victim)
            producer.wait_for_new_acks(0)
        assert not producer.failed, producer.failed[:5]
        total = assert_acknowledged_messages_are_there(cluster.bootstrap, topic_name, producer.acked)
        assert total > 100
        md = cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)))
        assert sorted(md.brokers) == BROKERS
        for b in BROKERS:  # stopped cleanly, the three replicas of every partition hold the same bytes
            cluster.brokers[b].stop()
        for p in range(partitions):
            logs = [partition_log_bytes(cluster, b, topic_name, p) for b in BROKERS]
            assert logs[0] == logs[1] == logs[2], f"replicas of partition {p} differ"


# ---- 2. a stopped follower leaves the ISR and comes back ---------------------------------------


def test_stopped_follower_leaves_isr_after_lag_time_and_rejoins(tmp_path, topic_name):
    # ZooKeeper sessions (10 s) outlive the stop, so it is replica.lag.time.max.ms (2 s) alone that
    # takes the follower out of the ISR.
    args = set_args(replica_lag_time_max_ms=2000, replica_fetch_backoff_ms=100, zookeeper_session_timeout_ms=10000)
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=args) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, 1, 3, min_insync_replicas=2)
        md = cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, 1, set(BROKERS)))
        leader = md.topics[topic_name].partitions[0].leader
        follower = next(b for b in BROKERS if b != leader)
        others = [b for b in BROKERS if b != follower]
        bootstrap = ",".join(cluster.brokers[b].bootstrap for b in others)
        with ContinuousProducer(bootstrap, topic_name, 1) as producer:
            producer.wait_for_new_acks(0)
            os.kill(cluster.brokers[follower].pid(), signal.SIGSTOP)
            try:
                stopped_at = time.monotonic()
                cluster.wait_for(lambda md: set(md.topics[topic_name].partitions[0].isrs) == set(others),
                                 broker_id=leader, timeout=15)
                assert time.monotonic() - stopped_at >= 1.5  # not before replica.lag.time.max.ms
                md = cluster.metadata(leader)
                assert follower in md.brokers  # still registered: the lag, not ZooKeeper, removed it
                producer.wait_for_new_acks(0, count=20)  # acks=all with two in-sync replicas
            finally:
                os.kill(cluster.brokers[follower].pid(), signal.SIGCONT)
            cluster.wait_for(lambda md: set(md.topics[topic_name].partitions[0].isrs) == set(BROKERS),
                             broker_id=leader, timeout=20)
            producer.wait_for_new_acks(0, count=10)
        assert not producer.failed
        assert_acknowledged_messages_are_there(bootstrap, topic_name, producer.acked)
        # The follower caught up: stopped cleanly, every replica holds the same bytes.
        for b in (follower, *others):
            cluster.brokers[b].stop()
        logs = [partition_log_bytes(cluster, b, topic_name, 0) for b in BROKERS]
        assert logs[0] == logs[1] == logs[2] and len(logs[0]) > 0


def partition_log_bytes(cluster: ZooKeeperCluster, broker_id: int, topic: str, partition: int) -> bytes:
    directory = Path(cluster.brokers[broker_id].data_dir) / f"{topic}-{partition}"
    segments = sorted(directory.glob("*.log"))
    assert segments, f"no segments in {directory}"
    return b"".join(s.read_bytes() for s in segments)


# ---- 3. divergent acks=1 writes are truncated on the old leader --------------------------------


def test_old_leader_truncates_unreplicated_acks_1_writes(tmp_path, topic_name):
    # Sessions (6 s) outlive the followers' stop, so they stay registered and in the ISR (lag
    # time 20 s) and one of them can be elected cleanly when the leader's session expires.
    args = set_args(replica_lag_time_max_ms=20000, replica_fetch_backoff_ms=100, replica_fetch_wait_max_ms=200,
                    zookeeper_session_timeout_ms=6000)
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=args) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, 1, 3)
        md = cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, 1, set(BROKERS)))
        old = md.topics[topic_name].partitions[0].leader
        followers = [b for b in BROKERS if b != old]
        leader_only = {"bootstrap.servers": cluster.brokers[old].bootstrap}

        replicated = produce_values(cluster.bootstrap, topic_name, [b"committed-%d" % i for i in range(20)], acks="all")
        assert [o for o, _ in replicated] == list(range(20))
        for b in followers:
            os.kill(cluster.brokers[b].pid(), signal.SIGSTOP)
        try:
            # A fetch already parked on the leader is answered (empty) after replica.fetch.wait.max.ms;
            # the stopped followers send no new one.
            time.sleep(0.6)
            lost = []
            for i in range(5):  # five batches, acknowledged by the leader alone
                lost += produce_values(leader_only["bootstrap.servers"], topic_name, [b"lost-%d-%d" % (i, j) for j in range(3)],
                                       acks="1")
            assert [o for o, _ in lost] == list(range(20, 35))
            cluster.brokers[old].kill()
        finally:
            for b in followers:
                os.kill(cluster.brokers[b].pid(), signal.SIGCONT)
        md = cluster.wait_for(lambda md: md.topics[topic_name].partitions[0].leader in followers and old not in md.brokers,
                              broker_id=followers[0], timeout=30)
        new = md.topics[topic_name].partitions[0].leader
        after = produce_values(cluster.brokers[new].bootstrap, topic_name, [b"after-%d" % i for i in range(10)], acks="all")
        assert [o for o, _ in after] == list(range(20, 30))  # the acks=1 writes were never replicated

        cluster.start_broker(old)
        cluster.wait_for(lambda md: set(md.topics[topic_name].partitions[0].isrs) == set(BROKERS), broker_id=new)
        messages = read_partition(cluster.brokers[new].bootstrap, topic_name, 0, 30)
        assert [m.value() for m in messages] == [v for _, v in replicated + after]
        for b in BROKERS:
            cluster.brokers[b].stop()
        logs = {b: partition_log_bytes(cluster, b, topic_name, 0) for b in BROKERS}
        assert b"lost-" not in logs[old]
        assert logs[old] == logs[new] == logs[[b for b in followers if b != new][0]]


def produce_values(bootstrap: str, topic: str, values: list[bytes], *, acks: str) -> list[tuple[int, bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 50,
                                         "enable.idempotence": acks == "all"})
    results = []

    def report(err, msg):
        assert err is None, err
        results.append((msg.offset(), msg.value()))

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert len(results) == len(values)
    return sorted(results)


# ---- 4. the controller dies ------------------------------------------------------------------


def test_controller_killed_new_controller_elected_cluster_serves(tmp_path, topic_name):
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST) as cluster:
        md = cluster.wait_for(lambda md: len(md.brokers) == 3 and md.controller_id in BROKERS)
        old = md.controller_id
        survivors = [b for b in BROKERS if b != old]
        cluster.brokers[old].kill()
        for b in survivors:  # every survivor names the same live controller
            md = cluster.wait_for(lambda md: md.controller_id in survivors and len(md.brokers) == 2, broker_id=b)
        new = md.controller_id
        for b in survivors:
            assert cluster.metadata(b).controller_id == new
            admin = AdminClient({"bootstrap.servers": cluster.brokers[b].bootstrap})
            described = admin.describe_cluster(request_timeout=10).result(timeout=15)  # DescribeCluster agrees
            assert described.controller.id == new and sorted(n.id for n in described.nodes) == survivors
        bootstrap = ",".join(cluster.brokers[b].bootstrap for b in survivors)
        create_topic(bootstrap, topic_name, 2, 2, min_insync_replicas=2)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, 2, set(survivors)), broker_id=survivors[0])
        acked = produce_values(bootstrap, topic_name, [b"v%d" % i for i in range(30)], acks="all")
        assert [o for o, _ in acked] == list(range(30))
        assert [m.value() for m in read_partition(bootstrap, topic_name, 0, 30)] == [v for _, v in acked]
        # The old controller returns as an ordinary broker; the new controller stays.
        cluster.start_broker(old)
        md = cluster.wait_for(lambda md: len(md.brokers) == 3, broker_id=old)
        assert md.controller_id == new


# ---- 5. consumer group across a coordinator failover ------------------------------------------


def test_consumer_group_survives_coordinator_failover_without_losing_commits(tmp_path, topic_name):
    from kafkacompat.groups.storage import partition_for

    group = f"group-{topic_name}"
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, 3, 3, min_insync_replicas=2)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, 3, set(BROKERS)))
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                             "enable.idempotence": True})
        counter = iter(range(10**6))

        def produce(n: int) -> None:
            for _ in range(n):
                i = next(counter)
                producer.produce(topic_name, value=b"g-%06d" % i, partition=i % 3)
            assert producer.flush(30) == 0

        produce(60)
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        seen: list[bytes] = []
        committed: dict[int, int] = {}

        def consume_and_commit(until: int, timeout: float = 60) -> None:
            for _ in deadline_loop(timeout, f"{until} messages consumed and committed", interval=0):
                if len(seen) >= until:
                    return
                messages = consumer.consume(50, 0.5)
                messages = [m for m in messages if m.error() is None]
                if not messages:
                    continue
                seen.extend(m.value() for m in messages)
                positions = {}
                for m in messages:
                    positions[m.partition()] = m.offset() + 1
                offsets = [TopicPartition(topic_name, p, o) for p, o in positions.items()]
                for _ in deadline_loop(timeout, "a synchronous commit", interval=0.3):
                    try:
                        consumer.commit(offsets=offsets, asynchronous=False)
                        break
                    except confluent_kafka.KafkaException:
                        pass  # NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE while it moves
                committed.update(positions)

        try:
            consumer.subscribe([topic_name])
            consume_and_commit(60)
            md = cluster.wait_for(lambda md: "__consumer_offsets" in md.topics)
            offsets_partition = partition_for(group, len(md.topics["__consumer_offsets"].partitions))
            state = md.topics["__consumer_offsets"].partitions[offsets_partition]
            assert sorted(state.replicas) == BROKERS
            coordinator = state.leader
            cluster.wait_for(lambda md: set(md.topics["__consumer_offsets"].partitions[offsets_partition].isrs)
                             == set(BROKERS))
            cluster.brokers[coordinator].kill()
            survivors = [b for b in BROKERS if b != coordinator]
            produce(60)
            consume_and_commit(120)  # the same consumer keeps going through the failover
            md = cluster.metadata(survivors[0])
            assert md.topics["__consumer_offsets"].partitions[offsets_partition].leader in survivors
        finally:
            consumer.close()
        assert sorted(seen) == sorted(set(seen)) and len(seen) == 120
        assert committed == {0: 40, 1: 40, 2: 40}

        # The committed offsets survived on the new coordinator: a fresh member resumes after them.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        stored = admin.list_consumer_group_offsets(
            [confluent_kafka.ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
        assert {tp.partition: tp.offset for tp in stored.topic_partitions} == committed
        produce(30)
        resumed = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        firsts: dict[int, int] = {}
        values = []
        try:
            resumed.subscribe([topic_name])
            for _ in deadline_loop(60, "the 30 new messages", interval=0):
                if len(values) >= 30:
                    break
                for m in resumed.consume(50, 0.5):
                    if m.error() is None:
                        firsts.setdefault(m.partition(), m.offset())
                        values.append(m.value())
        finally:
            resumed.close()
        assert sorted(values) == [b"g-%06d" % i for i in range(120, 150)]
        for partition, offset in firsts.items():
            assert offset == committed[partition]


def test_acknowledged_offset_commit_survives_an_immediate_coordinator_crash(tmp_path, topic_name):
    """Kafka appends offset commits with acks=-1: a commit is acknowledged only once the ISR of
    the group's __consumer_offsets partition has it. The followers are stopped (still in the
    ISR: long sessions and lag time), a commit is sent, the coordinator is SIGKILLed and the
    followers resumed: if the commit was acknowledged, the new coordinator must have it."""
    from kafkacompat.groups.storage import partition_for

    group = f"group-{topic_name}"
    args = set_args(replica_lag_time_max_ms=20000, replica_fetch_backoff_ms=100, replica_fetch_wait_max_ms=200,
                    zookeeper_session_timeout_ms=6000, offsets_topic_replication_factor=3)
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=args) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, 1, 3)
        produce_values(cluster.bootstrap, topic_name, [b"c%d" % i for i in range(10)], acks="all")
        consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic_name, 0, 5)], asynchronous=False)
            md = cluster.wait_for(lambda md: "__consumer_offsets" in md.topics)
            offsets_partition = partition_for(group, len(md.topics["__consumer_offsets"].partitions))
            md = cluster.wait_for(lambda md: set(md.topics["__consumer_offsets"].partitions[offsets_partition].isrs)
                                  == set(BROKERS))
            coordinator = md.topics["__consumer_offsets"].partitions[offsets_partition].leader
            followers = [b for b in BROKERS if b != coordinator]
            # The first commit reaches the followers (their next fetch), then they stop.
            time.sleep(0.6)
            for b in followers:
                os.kill(cluster.brokers[b].pid(), signal.SIGSTOP)
            outcome: list = []
            try:
                time.sleep(0.6)  # a fetch parked on the leader is answered empty meanwhile
                thread = threading.Thread(target=lambda: outcome.append(_commit(consumer, topic_name, 8)), daemon=True)
                thread.start()
                thread.join(1.5)  # acknowledged at once only if the coordinator does not wait for its ISR
                cluster.brokers[coordinator].kill()
            finally:
                for b in followers:
                    os.kill(cluster.brokers[b].pid(), signal.SIGCONT)
            thread.join(60)
            assert outcome, "the commit did not return"
        finally:
            consumer.close()
        cluster.wait_for(lambda md: md.topics["__consumer_offsets"].partitions[offsets_partition].leader in followers,
                         broker_id=followers[0], timeout=30)
        admin = AdminClient({"bootstrap.servers": ",".join(cluster.brokers[b].bootstrap for b in followers)})
        for _ in deadline_loop(30, "the group's offsets from the new coordinator", interval=0.3):
            try:
                stored = admin.list_consumer_group_offsets(
                    [confluent_kafka.ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0)])]
                )[group].result(timeout=10)
                break
            except confluent_kafka.KafkaException:
                continue
        committed = stored.topic_partitions[0].offset
        if outcome[0] is None:  # acknowledged: never lost
            assert committed == 8
        else:  # not acknowledged: either value
            assert committed in (5, 8), outcome


def _commit(consumer, topic: str, offset: int):
    """None when the commit was acknowledged, else the error."""
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        return None
    except confluent_kafka.KafkaException as exc:
        return exc
