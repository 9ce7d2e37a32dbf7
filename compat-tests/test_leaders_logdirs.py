"""ElectLeaders and DescribeLogDirs on a single node, as operators' tools call them
(confluent_kafka's elect_leaders, kafka-python's describe_log_dirs)."""

from __future__ import annotations

import pytest

import confluent_kafka
from confluent_kafka import ElectionType, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def test_preferred_election_is_not_needed_on_a_single_node(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])[topic_name].result(20)
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
    results = future.result(20)
    for tp, error in results.items():
        assert error is not None and error.code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED


def test_describe_log_dirs_reports_partition_sizes(broker, topic_name):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(10):
        producer.send(topic_name, b"x" * 100)
    producer.flush(20)
    producer.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        response = admin.describe_log_dirs()
    finally:
        admin.close()
    data = response.to_dict() if hasattr(response, "to_dict") else response
    text = repr(data)
    assert str(broker.data_dir.resolve()) in text
    assert topic_name in text
