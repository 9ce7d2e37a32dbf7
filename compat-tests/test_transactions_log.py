"""Transactions on the partition side, against real broker processes: transactional batches
(producer ids from InitProducerId) ended by raw WriteTxnMarkers requests, as a transaction
coordinator sends them, read back by confluent-kafka, kafka-python and aiokafka with
read_committed and read_uncommitted; the last stable offset through ListOffsets; the marker and
produce errors Kafka answers; clean and SIGKILL restarts in the middle of a transaction, where
the producer state and the .txnindex come back."""

from __future__ import annotations

import os
import struct
import time

import pytest

pytest.register_assert_rewrite("clients", "txn_support")

from clients import RawConnection, create_topic  # noqa: E402
from txn_support import END, READERS, Producer, confluent_values, latest, produce, records, send_end  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED = 48, 47, 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_RECORD, UNKNOWN_TOPIC_OR_PARTITION = 53, 87, 3


# These tests act as the transaction coordinator themselves (raw markers for producer ids of
# InitProducerId without a transactional id), so the partition leader must not ask the real one.
NO_VERIFICATION = ["--set", "transaction.partition.verification.enable=false"]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("txnlog") / "data", extra_args=NO_VERIFICATION).start()
    yield broker
    broker.kill()


# ---- committed and aborted, interleaved -------------------------------------------------------------


@pytest.fixture(scope="module")
def interleaved(shared_broker):
    """One partition: A commits a1 a2, B aborts b1 (between A's records and A's marker), a plain
    c1, A aborts a3, B commits b2, then END. Returns the topic and the LSO seen while A and B
    were both open."""
    topic = "interleaved"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        a, b = Producer.start(conn, "txn-a"), Producer.start(conn, "txn-b")
        a.send(topic, 0, b"a1", b"a2")  # 0-1
        b.send(topic, 0, b"b1")  # 2
        produce(conn, topic, 0, records(-1, -1, -1, [b"c1"], transactional=False), transactional_id=None)  # 3
        open_lso = latest(shared_broker.bootstrap, topic, committed=True)
        assert a.end(True, {topic: [0]}) == {(topic, 0): 0}  # 4
        assert b.end(False, {topic: [0]}) == {(topic, 0): 0}  # 5
        a.send(topic, 0, b"a3")  # 6
        b.send(topic, 0, b"b2")  # 7
        assert a.end(False, {topic: [0]}) == {(topic, 0): 0}  # 8
        assert b.end(True, {topic: [0]}) == {(topic, 0): 0}  # 9
        send_end(conn, topic)  # 10
    return topic, open_lso


@pytest.mark.parametrize("client", READERS)
def test_read_committed_never_sees_aborted_records(shared_broker, interleaved, client):
    topic, _ = interleaved
    assert READERS[client](shared_broker.bootstrap, topic, "read_committed") == [b"a1", b"a2", b"c1", b"b2", END]


@pytest.mark.parametrize("client", READERS)
def test_read_uncommitted_sees_every_data_record(shared_broker, interleaved, client):
    topic, _ = interleaved
    assert READERS[client](shared_broker.bootstrap, topic, "read_uncommitted") == [
        b"a1", b"a2", b"b1", b"c1", b"a3", b"b2", END]


def test_the_lso_waits_for_the_first_open_transaction(shared_broker, interleaved):
    topic, open_lso = interleaved
    assert open_lso == 0
    assert latest(shared_broker.bootstrap, topic, committed=True) == latest(shared_broker.bootstrap, topic,
                                                                            committed=False) == 11


def test_a_read_committed_fetch_stops_at_the_lso_and_lists_the_aborted(shared_broker):
    topic = "open-transaction"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        a, b = Producer.start(conn, "txn-open-a"), Producer.start(conn, "txn-open-b")
        send_end(conn, topic)  # 0: a plain record before the transactions
        b.send(topic, 0, b"b1")  # 1
        a.send(topic, 0, b"a1")  # 2: stays open
        assert b.end(False, {topic: [0]}) == {(topic, 0): 0}  # 3
        assert latest(shared_broker.bootstrap, topic, committed=True) == 2
        assert latest(shared_broker.bootstrap, topic, committed=False) == 4
        committed = raw_fetch(conn, topic, isolation_level=1)
        uncommitted = raw_fetch(conn, topic, isolation_level=0)
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 2)
    assert [tuple(t)[:2] for t in committed.aborted_transactions] == [(b.producer_id, 1)]
    assert batch_offsets(committed.records) == [0, 1]  # below the LSO only, whole batches
    assert batch_offsets(uncommitted.records) == [0, 1, 2, 3]
    assert uncommitted.aborted_transactions is None


def raw_fetch(conn: RawConnection, topic: str, *, isolation_level: int, version: int = 11):
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    Topic = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                           isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=[
                               Topic(topic=topic, partitions=[Topic.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                   partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
    response = conn.call(request, FetchResponse, version)
    [partition] = response.responses[0].partitions
    assert partition.error_code == 0
    return partition


def batch_offsets(data: bytes) -> list[int]:
    """The base offsets of the batches in a fetched records section."""
    offsets, position = [], 0
    while position + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        offsets.append(base)
        position += 12 + length
    return offsets


# ---- what Kafka refuses ----------------------------------------------------------------------------


def test_marker_errors(shared_broker):
    topic = "marker-errors"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        producer = Producer.start(conn, "txn-errors")
        producer.epoch = 3
        producer.send(topic, 0, b"x")
        assert producer.end(True, {"no-such-topic": [0], topic: [5]}) == {
            ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION, (topic, 5): UNKNOWN_TOPIC_OR_PARTITION}
        assert producer.end(True, {topic: [0]}, epoch=2) == {(topic, 0): INVALID_PRODUCER_EPOCH}
        assert producer.end(True, {topic: [0]}, coordinator_epoch=7) == {(topic, 0): 0}
        producer.send(topic, 0, b"y")
        assert producer.end(False, {topic: [0]}, coordinator_epoch=6) == {(topic, 0): TRANSACTION_COORDINATOR_FENCED}
        assert producer.end(False, {topic: [0]}, coordinator_epoch=8) == {(topic, 0): 0}
        # WriteTxnMarkers v2, transaction version 2: the coordinator bumped the epoch for the marker
        producer.send(topic, 0, b"z")
        assert producer.end(True, {topic: [0]}, coordinator_epoch=8, transaction_version=2) == {
            (topic, 0): INVALID_PRODUCER_EPOCH}  # the producer's own epoch: not newer
        assert producer.end(True, {topic: [0]}, coordinator_epoch=8, transaction_version=2, epoch=4) == {(topic, 0): 0}
        assert producer.end(True, {topic: [0]}, coordinator_epoch=8, transaction_version=2, epoch=4) == {
            (topic, 0): 0}  # a retry of that marker
        send_end(conn, topic)
    assert confluent_values(shared_broker.bootstrap, topic, "read_committed") == [b"x", b"z", END]


def test_produce_errors(shared_broker):
    topic = "produce-errors"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        producer = Producer.start(conn, "txn-produce-errors")
        batch = records(producer.producer_id, 0, 0, [b"x"])
        assert produce(conn, topic, 0, batch, transactional_id=None)[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        producer.send(topic, 0, b"x")
        # a plain batch of the same producer while its transaction is open
        assert producer.try_send(topic, 0, b"y", transactional=False)[0] == INVALID_TXN_STATE
        producer.epoch, producer.sequences[(topic, 0)] = 1, 0
        producer.send(topic, 0, b"z")  # an epoch bump starts at sequence 0
        assert produce(conn, topic, 0, records(producer.producer_id, 0, 1, [b"old"]))[0] == INVALID_PRODUCER_EPOCH
        # a control batch from a client
        from kafkacompat.wire.records import TxnMarker, new_marker_batch

        control = bytes(new_marker_batch(producer.producer_id, 1, TxnMarker(True, 0), int(time.time() * 1000)))
        assert produce(conn, topic, 0, control)[0] == INVALID_RECORD


# ---- restarts in the middle of a transaction ------------------------------------------------------


def txnindex(data_dir, topic: str) -> bytes:
    directory = data_dir / f"{topic}-0"
    return b"".join((directory / name).read_bytes() for name in sorted(os.listdir(directory))
                    if name.endswith(".txnindex"))


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_a_restart_keeps_open_transactions_and_the_aborted_index(broker_factory, stop):
    broker = broker_factory(*NO_VERIFICATION)
    topic = "restarted"
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        a, b = Producer.start(conn, "txn-restart-a"), Producer.start(conn, "txn-restart-b")
        b.send(topic, 0, b"b1")  # 0
        a.send(topic, 0, b"a1", b"a2")  # 1-2: open across the restart
        assert b.end(False, {topic: [0]}) == {(topic, 0): 0}  # 3
    index = txnindex(broker.data_dir, topic)
    assert index == struct.pack(">hqqqq", 0, b.producer_id, 0, 3, 1)  # Kafka's AbortedTxn entry
    if stop == "clean":
        broker.stop()
    else:
        broker.kill()
        for name in os.listdir(broker.data_dir / f"{topic}-0"):
            if name.endswith(".txnindex"):
                os.unlink(broker.data_dir / f"{topic}-0" / name)  # lost with the crash: recovery rebuilds it
    broker.start()
    assert txnindex(broker.data_dir, topic) == index
    assert latest(broker.bootstrap, topic, committed=True) == 1
    with RawConnection(broker.bootstrap) as conn:
        a.conn = conn
        a.send(topic, 0, b"a3")  # 4: the same transaction goes on
        assert a.end(False, {topic: [0]}) == {(topic, 0): 0}  # 5
        send_end(conn, topic)  # 6
    assert latest(broker.bootstrap, topic, committed=True) == 7
    assert confluent_values(broker.bootstrap, topic, "read_committed") == [END]
    assert txnindex(broker.data_dir, topic) == index + struct.pack(">hqqqq", 0, a.producer_id, 1, 5, 6)


# ---- a replicated partition whose leader dies -------------------------------------------------------


def test_a_new_leader_serves_the_same_lso_and_aborted_transactions(tmp_path):
    from cluster import ZooKeeperCluster
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "replicated"
    fast = ["--set", "replica.lag.time.max.ms=3000", "--set", "replica.fetch.backoff.ms=100", *NO_VERIFICATION]
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=fast) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=20)[topic].result(timeout=30)
        md = cluster.wait_for(lambda md: topic in md.topics and not md.topics[topic].error
                              and set(md.topics[topic].partitions[0].isrs) == {0, 1, 2})
        old = md.topics[topic].partitions[0].leader
        # The raw producer talks to the leader alone: it must have applied the topic itself.
        cluster.wait_for(lambda md: topic in md.topics and md.topics[topic].partitions[0].leader == old,
                         broker_id=old)
        with RawConnection(cluster.brokers[old].bootstrap) as conn:
            a, b = Producer.start(conn, "txn-failover-a"), Producer.start(conn, "txn-failover-b")
            b.send(topic, 0, b"b1")  # 0
            a.send(topic, 0, b"a1")  # 1: open when the leader dies
            assert b.end(False, {topic: [0]}) == {(topic, 0): 0}  # 2: answered once replicated
            produce(conn, topic, 0, records(-1, -1, -1, [b"c1"], transactional=False), transactional_id=None)  # 3
            before = raw_fetch(conn, topic, isolation_level=1)
        assert (before.last_stable_offset, batch_offsets(before.records)) == (1, [0])
        cluster.brokers[old].kill()
        md = cluster.wait_for(lambda md: md.topics[topic].partitions[0].leader not in (old, -1)
                              and old not in md.brokers, broker_id=(old + 1) % 3, timeout=30)
        new = md.topics[topic].partitions[0].leader
        cluster.wait_for(lambda md: md.topics[topic].partitions[0].leader == new, broker_id=new)  # applied there
        with RawConnection(cluster.brokers[new].bootstrap) as conn:
            after = raw_fetch(conn, topic, isolation_level=1)
            assert (after.last_stable_offset, batch_offsets(after.records)) == (1, [0])
            assert [tuple(t)[:2] for t in after.aborted_transactions] == [(b.producer_id, 0)]
            a.conn = conn
            assert a.end(False, {topic: [0]}) == {(topic, 0): 0}  # 4, by the coordinator to the new leader
            send_end(conn, topic)  # 5
        assert confluent_values(cluster.brokers[new].bootstrap, topic, "read_committed") == [b"c1", END]
        survivors = [broker for broker in cluster.brokers if broker != old]
        for broker in survivors:
            cluster.brokers[broker].stop()
        indexes = {broker: txnindex(cluster.brokers[broker].data_dir, topic) for broker in survivors}
        assert indexes[new] == indexes[survivors[0]] == indexes[survivors[1]] == (
            struct.pack(">hqqqq", 0, b.producer_id, 0, 2, 1) + struct.pack(">hqqqq", 0, a.producer_id, 1, 4, 5))
