"""DeleteRecords against real broker processes: confluent-kafka's AdminClient.delete_records,
kafka-python's KafkaAdminClient.delete_records and kafkajs' admin.deleteTopicRecords; consumers
then start at the new log start offset, ListOffsets earliest returns it, segments below it are
gone, and it survives a clean restart and a SIGKILL. Error cases through the raw protocol, and
one replicated partition on a ZooKeeper cluster whose followers' log start offsets follow."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

pytest.register_assert_rewrite("clients")
from cluster import ZooKeeperCluster  # noqa: E402
from clients import (  # noqa: E402
    ConfluentDriver, KafkaPythonDriver, Msg, RawConnection, admin, confluent_send, create_topic, fetch_request,
    numbered, offsets, values,
)
from test_kafkajs import run_script  # noqa: E402

from kafkacompat.log import read_checkpoint  # noqa: E402
from clients import request_class, response_class  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402

DELETE_RECORDS = 21
LIST_OFFSETS = 2
FIND_COORDINATOR = 10
TIMEOUT = 15
DEBUGGING_REPLICA_ID = -2  # ListOffsets from this id is answered by followers too


def delete_with_confluent(bootstrap: str, wanted: dict[int, int], topic: str) -> dict[int, int]:
    """partition -> offset in, partition -> low watermark out."""
    client = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures are done
    futures = client.delete_records([TopicPartition(topic, p, offset) for p, offset in wanted.items()],
                                    request_timeout=TIMEOUT)
    return {tp.partition: future.result(timeout=TIMEOUT).low_watermark for tp, future in futures.items()}


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    client = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future is done
    return client.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=TIMEOUT).offset


def send_one_batch_each(bootstrap: str, topic: str, msgs: list[Msg]) -> None:
    for msg in msgs:  # one produce request (one batch) per record: several segments
        confluent_send(bootstrap, topic, [msg])


def segment_bases(broker, topic: str, partition: int = 0) -> list[int]:
    directory = broker.data_dir / f"{topic}-{partition}"
    return sorted(int(name[:-4]) for name in os.listdir(directory) if name.endswith(".log"))


def raw_fetch_error(bootstrap: str, topic: str, offset: int) -> int:
    from kafka.protocol.consumer import FetchResponse

    with RawConnection(bootstrap) as conn:
        response = conn.call(fetch_request(topic, 0, offset), FetchResponse, version=11)
    return response.responses[0].partitions[0].error_code


def raw_delete(bootstrap: str, version: int, topics: list[tuple[str, list[tuple[int, int]]]], *,
               timeout_ms: int = 5000) -> list[tuple[str, int, int, int]]:
    """(topic, partition, error code, low watermark) for each partition of the response."""
    topic_cls = request_class(DELETE_RECORDS).DeleteRecordsTopic
    request = request_class(DELETE_RECORDS)(version=version, timeout_ms=timeout_ms, topics=[
        topic_cls(name=name, partitions=[topic_cls.DeleteRecordsPartition(partition_index=p, offset=o)
                                         for p, o in partitions])
        for name, partitions in topics
    ])
    with RawConnection(bootstrap) as conn:
        response = conn.call(request, response_class(DELETE_RECORDS), version)
    return [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in response.topics for p in t.partitions]


# ---- real clients --------------------------------------------------------------------------------


def test_confluent_delete_records_moves_what_consumers_and_list_offsets_see(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2, config={"segment.bytes": "300"})
    send_one_batch_each(broker.bootstrap, topic_name, numbered(10))
    confluent_send(broker.bootstrap, topic_name, numbered(5, partition=1))
    assert segment_bases(broker, topic_name) == [0, 4, 8]  # four one-record batches per segment

    assert delete_with_confluent(broker.bootstrap, {0: 5, 1: OFFSET_END}, topic_name) == {0: 5, 1: 5}
    assert segment_bases(broker, topic_name) == [4, 8]  # 0-3 went; 5 is inside the segment at 4
    driver = ConfluentDriver(broker.bootstrap)
    assert driver.watermarks(topic_name, 0) == (5, 10)
    assert driver.watermarks(topic_name, 1) == (5, 5)
    assert earliest(broker.bootstrap, topic_name) == 5
    assert raw_fetch_error(broker.bootstrap, topic_name, 4) == ErrorCode.OFFSET_OUT_OF_RANGE
    from_beginning = driver.consume(topic_name, 0, OFFSET_BEGINNING, 5)
    assert offsets(from_beginning) == [5, 6, 7, 8, 9]
    assert values(from_beginning) == [b"m-%d" % i for i in range(5, 10)]
    reset = driver.consume(topic_name, 0, 1, 5, reset="earliest")  # below the log start: reset
    assert offsets(reset) == [5, 6, 7, 8, 9]
    # Asking again for less than the log start deletes nothing and answers the low watermark.
    assert delete_with_confluent(broker.bootstrap, {0: 2}, topic_name) == {0: 5}


def test_kafka_python_delete_records(broker, topic_name):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import OffsetOutOfRangeError
    from kafka.structs import TopicPartition as KafkaPythonTopicPartition

    create_topic(broker.bootstrap, topic_name)
    confluent_send(broker.bootstrap, topic_name, numbered(6))
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = KafkaPythonTopicPartition(topic_name, 0)
        result = client.delete_records({tp: 4}, timeout_ms=TIMEOUT * 1000)
        assert (result[tp]["low_watermark"], result[tp]["error_code"]) == (4, 0)
        with pytest.raises(OffsetOutOfRangeError):
            client.delete_records({tp: 7}, timeout_ms=TIMEOUT * 1000)
    finally:
        client.close()
    assert offsets(KafkaPythonDriver(broker.bootstrap).consume(topic_name, 0, 0, 2, reset="earliest")) == [4, 5]


def test_kafkajs_delete_topic_records(broker, topic_name):
    result = run_script("delete_records.js", broker, topic_name)
    lows = lambda answer: sorted((o["partition"], o["low"], o["high"]) for o in answer)  # noqa: E731
    assert lows(result["before"]) == [(0, "0", "5"), (1, "0", "5")]
    assert lows(result["after"]) == [(0, "3", "5"), (1, "5", "5")]
    assert result["outOfRange"] == {
        "name": "KafkaJSNonRetriableError",
        "cause": "KafkaJSDeleteTopicRecordsError",
        "partitions": [{"partition": 0, "offset": "6", "type": "OFFSET_OUT_OF_RANGE"}],
    }
    assert lows(result["afterFailure"]) == lows(result["after"])
    assert values(ConfluentDriver(broker.bootstrap).consume(topic_name, 0, OFFSET_BEGINNING, 2)) == [b"p0-3", b"p0-4"]


# ---- durability ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_the_log_start_survives_a_restart(broker, topic_name, stop):
    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": "300"})
    send_one_batch_each(broker.bootstrap, topic_name, numbered(10))
    assert delete_with_confluent(broker.bootstrap, {0: 6}, topic_name) == {0: 6}
    assert segment_bases(broker, topic_name) == [4, 8]  # the new start is inside a segment
    if stop == "SIGTERM":
        assert broker.stop() == 0, broker.output()[-3000:]
    else:
        broker.kill()  # before any periodic checkpoint (log.flush.offset.checkpoint.interval.ms: 60 s)
    broker.start()
    assert earliest(broker.bootstrap, topic_name) == 6
    assert offsets(ConfluentDriver(broker.bootstrap).consume(topic_name, 0, OFFSET_BEGINNING, 4)) == [6, 7, 8, 9]
    assert raw_fetch_error(broker.bootstrap, topic_name, 5) == ErrorCode.OFFSET_OUT_OF_RANGE


# ---- errors through the raw protocol -------------------------------------------------------------


def create_consumer_offsets(bootstrap: str) -> None:
    """The first FindCoordinator creates __consumer_offsets."""
    request = request_class(FIND_COORDINATOR)(version=3, key="g", key_type=0)
    with RawConnection(bootstrap) as conn:
        response = conn.call(request, response_class(FIND_COORDINATOR), 3)
    assert response.error_code == 0


@pytest.mark.parametrize("version", [0, 1, 2])
def test_errors_as_kafka_answers_them(broker, topic_name, version):
    compacted = f"{topic_name}-compacted"
    client = admin(broker)
    futures = client.create_topics([NewTopic(topic_name, 3, 1),
                                    NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})])
    for future in futures.values():
        future.result(timeout=TIMEOUT)
    for partition in range(3):
        confluent_send(broker.bootstrap, topic_name, numbered(3, partition=partition))
    confluent_send(broker.bootstrap, compacted, [Msg(b"v", b"k")])
    create_consumer_offsets(broker.bootstrap)

    answers = raw_delete(broker.bootstrap, version, [
        (topic_name, [(0, 4), (1, -2), (2, 0), (7, 0), (2, 2)]),  # partition 2 twice: the last offset counts
        ("no-such-topic", [(0, 0)]),
        (compacted, [(0, 1)]),
        ("__consumer_offsets", [(0, 0)]),
    ])
    assert answers == [
        (topic_name, 0, ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # above the high watermark 3
        (topic_name, 1, ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # negative and not -1
        (topic_name, 2, ErrorCode.NONE, 2),
        (topic_name, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        (compacted, 0, ErrorCode.POLICY_VIOLATION, -1),
        ("__consumer_offsets", 0, ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
    ]
    assert [earliest(broker.bootstrap, topic_name, p) for p in range(3)] == [0, 0, 2]
    assert raw_delete(broker.bootstrap, version, [(topic_name, [(0, -1)])], timeout_ms=0) == [
        (topic_name, 0, ErrorCode.NONE, 3)]


# ---- a replicated partition ----------------------------------------------------------------------


def log_start_on(bootstrap: str, topic: str) -> int:
    """The log start offset of a broker's own replica, leader or not."""
    topic_cls = request_class(LIST_OFFSETS).ListOffsetsTopic
    request = request_class(LIST_OFFSETS)(version=1, replica_id=DEBUGGING_REPLICA_ID, topics=[
        topic_cls(name=topic, partitions=[topic_cls.ListOffsetsPartition(partition_index=0, timestamp=-2)])])
    with RawConnection(bootstrap) as conn:
        response = conn.call(request, response_class(LIST_OFFSETS), 1)
    [answer] = response.topics[0].partitions
    assert answer.error_code == 0
    return answer.offset


def test_replicated_partition_followers_follow_before_the_answer(tmp_path, topic_name):
    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_until_every_broker_sees(3)
        client = AdminClient({"bootstrap.servers": cluster.bootstrap})
        client.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=TIMEOUT * 2)
        metadata = cluster.wait_for(
            lambda md: topic_name in md.topics and len(md.topics[topic_name].partitions[0].isrs) == 3)
        leader = metadata.topics[topic_name].partitions[0].leader
        confluent_send(cluster.bootstrap, topic_name, numbered(10), acks="all")

        assert delete_with_confluent(cluster.bootstrap, {0: 6}, topic_name) == {0: 6}
        # The low watermark answered is the smallest log start of all replicas: every one is there.
        assert [log_start_on(cluster.brokers[i].bootstrap, topic_name) for i in range(3)] == [6, 6, 6]
        for follower in set(range(3)) - {leader}:
            checkpoint = cluster.brokers[follower].data_dir / "log-start-offset-checkpoint"
            assert read_checkpoint(checkpoint)[(topic_name, 0)] == 6
        consumed = ConfluentDriver(cluster.bootstrap).consume(topic_name, 0, OFFSET_BEGINNING, 4)
        assert offsets(consumed) == [6, 7, 8, 9]
