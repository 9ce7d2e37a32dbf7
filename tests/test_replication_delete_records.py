"""DeleteRecords across three Broker objects in one Trio process (the harness of
test_replication_cluster: real sockets, real logs, follower fetchers, a fake controller): the
answer waits until every live replica's log start reaches the offset (Kafka's
DelayedDeleteRecords), times out with REQUEST_TIMED_OUT when one does not follow, and the
followers' log start offsets follow the leader's."""

from __future__ import annotations

import itertools

from kafkacompat.handlers.delete_records import handle_delete_records
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.log import read_checkpoint
from kafkacompat.wire.codec import request_class
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.frame import RequestHeader
from tests.test_replication_cluster import TOPIC, produce, run, wait_until

DELETE_RECORDS = 21
_correlation = itertools.count(1)


async def delete_records(broker, offset: int, *, timeout_ms: int = 15000, partition: int = 0,
                         version: int = 2) -> tuple[int, int]:
    """(error code, low watermark) of a DeleteRecords request handled by ``broker``."""
    topic_cls = request_class(DELETE_RECORDS).DeleteRecordsTopic
    request = request_class(DELETE_RECORDS)(timeout_ms=timeout_ms, topics=[
        topic_cls(name=TOPIC, partitions=[topic_cls.DeleteRecordsPartition(partition_index=partition, offset=offset)]),
    ])
    ctx = RequestContext(broker, RequestHeader(DELETE_RECORDS, version, next(_correlation), "test", True), None)
    response = await handle_delete_records(request, ctx)
    [topic] = response.topics
    [result] = topic.partitions
    assert (topic.name, result.partition_index) == (TOPIC, partition)
    return result.error_code, result.low_watermark


def log_start(cluster, broker_id: int) -> int:
    return cluster.broker(broker_id).partition(TOPIC, 0).log_start_offset


@run
async def test_the_answer_waits_for_every_replica_and_times_out_without_one(cluster):
    await cluster.create_topic(min_isr=2)
    leader = cluster.broker(0)
    for i in range(5):
        assert (await produce(leader, [b"m%d" % i] * 2))[0] == 0  # offsets 0-9, acks=all
    assert await delete_records(leader, 6) == (ErrorCode.NONE, 6)
    # The answer came once every follower had reported log start 6: none can serve 0-5 any more.
    assert [log_start(cluster, i) for i in range(3)] == [6, 6, 6]
    for i in (1, 2):
        checkpoint = read_checkpoint(cluster.broker(i).data_dir / "log-start-offset-checkpoint")
        assert checkpoint[(TOPIC, 0)] == 6

    cluster.stop_fetching(2)
    assert await delete_records(leader, 8, timeout_ms=300) == (ErrorCode.REQUEST_TIMED_OUT, 6)
    assert log_start(cluster, 0) == 8  # deleted on the leader all the same, as Kafka
    await wait_until(lambda: log_start(cluster, 1) == 8)
    assert log_start(cluster, 2) == 6
    await cluster.resume_fetching(2)
    assert await delete_records(leader, 8) == (ErrorCode.NONE, 8)
    assert log_start(cluster, 2) == 8


@run
async def test_high_watermark_offset_followers_and_versions(cluster):
    await cluster.create_topic(min_isr=2)
    leader = cluster.broker(0)
    assert (await produce(leader, [b"a", b"b", b"c"]))[0] == 0
    for version in (0, 1, 2):
        assert await delete_records(cluster.broker(1), 1, version=version) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        assert await delete_records(leader, 4, version=version) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert await delete_records(leader, -1, version=0) == (ErrorCode.NONE, 3)
    assert [log_start(cluster, i) for i in range(3)] == [3, 3, 3]
