"""Partition reassignment on a ZooKeeper cluster of four broker processes (ids 1-4), driven by
kafka-python's AdminClient and by kafkajs's admin: a partition moves from broker 1 to broker 4
under an acks=all load and loses nothing; a move is cancelled; bad targets get Kafka's codes.
(librdkafka and so confluent-kafka have no reassignment API; the Java AdminClient is not
installable here.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError

from cluster import ZooKeeperCluster
from test_replication_failover import (
    ContinuousProducer,
    assert_acknowledged_messages_are_there,
    create_topic,
    deadline_loop,
    partitions_of,
)

BROKERS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ZooKeeperCluster(tmp_path_factory.mktemp("reassign"), brokers=0) as cluster:
        for broker_id in BROKERS:
            cluster.start_broker(broker_id)
        cluster.wait_until_every_broker_sees(len(BROKERS))
        yield cluster


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def replicas_of(cluster, topic: str, partition: int, broker_id: int) -> tuple[list[int], list[int], int]:
    part = partitions_of(cluster.metadata(broker_id, topic=topic), topic)[partition]
    return sorted(part.replicas), sorted(part.isrs), part.leader


def new_topic(cluster, replicas: list[int]) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"moved-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas])])[name].result(30)
    for _ in deadline_loop(30, f"{name} led with its ISR"):
        if all(replicas_of(cluster, name, 0, b)[1] == sorted(replicas) for b in BROKERS):
            return name
    raise AssertionError("unreachable")


def test_a_partition_moves_from_broker_1_to_broker_4_under_acks_all_load(cluster, admin):
    topic = new_topic(cluster, [1, 2, 3])
    with ContinuousProducer(cluster.bootstrap, topic, 1) as producer:
        producer.wait_for_new_acks(0, count=200)
        assert admin.alter_partition_reassignments({TopicPartition(topic, 0): [4, 2, 3]}) == {
            TopicPartition(topic, 0): None}
        for _ in deadline_loop(60, "the move finished on every broker"):
            if (not admin.list_partition_reassignments()
                    and all(replicas_of(cluster, topic, 0, b)[:2] == ([2, 3, 4], [2, 3, 4]) for b in BROKERS)):
                break
        producer.wait_for_new_acks(0, count=200)  # still producing after the move
    assert not producer.failed, producer.failed[:5]
    assert assert_acknowledged_messages_are_there(cluster.bootstrap, topic, producer.acked) >= 400
    leader = replicas_of(cluster, topic, 0, 4)[2]
    assert leader in (2, 3, 4)
    # broker 1 dropped its copy of the partition
    for _ in deadline_loop(30, "broker 1 deleted its copy"):
        if not (cluster.brokers[1].data_dir / f"{topic}-0").exists():
            break


JS = Path(__file__).parent / "js"


def test_kafkajs_moves_a_partition_from_broker_1_to_broker_4_under_acks_all_load(cluster):
    topic = new_topic(cluster, [1, 2, 3])
    with ContinuousProducer(cluster.bootstrap, topic, 1) as producer:
        producer.wait_for_new_acks(0, count=200)
        assert (JS / "node_modules" / "kafkajs").is_dir(), f"run: cd {JS} && npm install --no-audit --no-fund"
        done = subprocess.run(["node", str(JS / "reassign.js"), cluster.bootstrap, topic, "4,2,3"],
                              capture_output=True, text=True, timeout=150)
        assert done.returncode == 0, f"reassign.js failed:\n{done.stderr[-4000:]}"
        result = json.loads(done.stdout)
        producer.wait_for_new_acks(0, count=200)  # still producing after the move
    assert not producer.failed, producer.failed[:5]
    # while it moved, kafkajs listed it with Kafka's replicas = target + removing, adding/removing
    moving = [t["partitions"][0] for listed in result["listings"] for t in listed["topics"] if t["partitions"]]
    assert all(sorted(p["replicas"]) == [1, 2, 3, 4] and p["addingReplicas"] == [4] and p["removingReplicas"] == [1]
               for p in moving), moving
    assert "INVALID_REPLICA_ASSIGNMENT" in result["unknown"], result["unknown"]  # no broker 99
    for _ in deadline_loop(30, "every broker sees the partition on brokers 2, 3, 4"):
        if all(replicas_of(cluster, topic, 0, b)[:2] == ([2, 3, 4], [2, 3, 4]) for b in BROKERS):
            break
    assert assert_acknowledged_messages_are_there(cluster.bootstrap, topic, producer.acked) >= 400


def test_the_leader_moves_when_it_leaves_and_a_move_can_be_cancelled(cluster, admin):
    topic = new_topic(cluster, [1, 2])
    tp = TopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: [3, 4]}) == {tp: None}
    for _ in deadline_loop(60, "the partition led by broker 3 on brokers 3 and 4"):
        if replicas_of(cluster, topic, 0, 2) == ([3, 4], [3, 4], 3):
            break
    # nothing moves now: a cancellation is refused
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    # a move to a frozen broker (still registered, fetching nothing) cannot finish; cancelling
    # it puts the partition back on its replicas
    controller = admin.describe_cluster()["controller_id"]
    frozen_id = 1 if controller != 1 else 2  # not the controller: it must take the requests
    frozen = cluster.brokers[frozen_id].proc
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        assert admin.alter_partition_reassignments({tp: [frozen_id, 4]}) == {tp: None}
        listed = admin.list_partition_reassignments()
        assert listed == {tp: {"replicas": [frozen_id, 4, 3], "adding_replicas": [frozen_id],
                               "removing_replicas": [3]}}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        for _ in deadline_loop(30, "the move cancelled"):
            if not admin.list_partition_reassignments() and replicas_of(cluster, topic, 0, 3)[:2] == ([3, 4], [3, 4]):
                break
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    cluster.wait_until_every_broker_sees(len(BROKERS))


def test_bad_targets(cluster, admin):
    topic = new_topic(cluster, [2, 3])
    tp = TopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({
        tp: [2, 9],  # no broker 9
        TopicPartition(topic, 5): [2, 3],  # no partition 5
        TopicPartition("no-such-topic", 0): [2],
    }) == {tp: InvalidReplicationAssignmentError, TopicPartition(topic, 5): UnknownTopicOrPartitionError,
           TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError}
    assert admin.alter_partition_reassignments({tp: [2, 2]}) == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: [3, 2]}) == {tp: None}  # a reorder moves nothing
    assert replicas_of(cluster, topic, 0, 2)[:2] == ([2, 3], [2, 3])
