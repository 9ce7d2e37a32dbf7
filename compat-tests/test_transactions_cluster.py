"""Transactions on a 3-broker ZooKeeper cluster (real processes, confluent-kafka): the transaction
coordinator's broker is SIGKILLed after EndTxn was answered but before its markers could be
written (the only leader of the transaction's partition is down), and the broker that takes over
its __transaction_state partition writes them once the partition is back: the commit is
complete, and a read_committed consumer never sees the transaction's records before that."""

from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import ZooKeeperCluster


def _coordinator_of(bootstrap: str, transactional_id: str) -> int:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from clients import RawConnection
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    with RawConnection(bootstrap.split(",")[0]) as conn:
        found = conn.call(FindCoordinatorRequest(key=transactional_id, key_type=1), FindCoordinatorResponse, 3)
    assert found.error_code == 0
    return found.node_id


def _read_committed(bootstrap: str, topic: str, count: int, timeout: float) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_new_coordinator_completes_a_commit_whose_coordinator_died_before_its_markers(tmp_path):
    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3)
        transactional_id = "cluster-txn"
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap,
                                             "transactional.id": transactional_id})
        producer.init_transactions(60)
        coordinator = _coordinator_of(cluster.bootstrap, transactional_id)
        md = cluster.wait_for(lambda md: "__transaction_state" in md.topics)
        assert {len(p.replicas) for p in md.topics["__transaction_state"].partitions.values()} == {3}
        leader, survivor = [b for b in range(3) if b != coordinator]
        topic = "txn-on-one-broker"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader]])],
                            operation_timeout=20)[topic].result(timeout=30)
        cluster.wait_for(lambda md: topic in md.topics and md.topics[topic].partitions[0].leader == leader)

        producer.begin_transaction()
        values = [b"in-the-transaction-%d" % i for i in range(5)]
        for value in values:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0
        # The partition's only replica goes: no marker can be written until it is back.
        cluster.brokers[leader].kill()
        cluster.wait_for(lambda md: md.topics[topic].partitions[0].leader == -1, broker_id=survivor)
        producer.commit_transaction(60)  # PrepareCommit is in the ISR of the coordinator's partition
        cluster.brokers[coordinator].kill()
        cluster.brokers[leader].start()
        cluster.wait_for(lambda md: md.topics[topic].partitions[0].leader == leader, broker_id=survivor)

        assert sorted(_read_committed(cluster.brokers[survivor].bootstrap, topic, len(values), 60)) == values
        assert "was in PrepareCommit when __transaction_state" in cluster.brokers[survivor].output()
        # The id works on with its new coordinator.
        again = confluent_kafka.Producer({"bootstrap.servers": cluster.brokers[survivor].bootstrap,
                                          "transactional.id": transactional_id})
        again.init_transactions(60)
        again.begin_transaction()
        again.produce(topic, value=b"after", partition=0)
        again.commit_transaction(60)
        assert sorted(_read_committed(cluster.brokers[survivor].bootstrap, topic, len(values) + 1, 60)) == sorted(
            values + [b"after"])
