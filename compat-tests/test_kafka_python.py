"""kafka-python 3 against a real broker process: the data-path contract (the default, idempotent
producer, KafkaConsumer without a group) plus KafkaAdminClient."""

import pytest

pytest.register_assert_rewrite("clients")

from clients import DataPathContract, KafkaPythonDriver, numbered, values  # noqa: E402


class TestKafkaPython(DataPathContract):
    driver_class = KafkaPythonDriver


def test_admin_client_creates_describes_and_lists_topics(broker, topic_name):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)])
        assert topic_name in admin.list_topics()
        (described,) = admin.describe_topics([topic_name])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
        assert {p["leader_id"] for p in described["partitions"]} == {0}
        cluster = admin.describe_cluster()
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(0, "127.0.0.1", broker.port)]
    finally:
        admin.close()


def test_consumer_sees_topics_and_partitions(broker, topic_name):
    from kafka import KafkaConsumer

    driver = KafkaPythonDriver(broker.bootstrap)
    driver.produce(topic_name, numbered(2))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        assert topic_name in consumer.topics()
        assert consumer.partitions_for_topic(topic_name) == {0}
    finally:
        consumer.close()
    assert values(driver.consume(topic_name, 0, 0, 2)) == [b"m-0", b"m-1"]
