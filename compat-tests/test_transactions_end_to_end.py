"""Transactions end to end against a real broker process: confluent-kafka transactional producers
(through the transaction coordinator) whose committed and aborted batches interleave on the same
partitions, read by confluent-kafka, kafka-python and aiokafka at both isolation levels; the last
stable offset while transactions are open; and the partition leader's KIP-890 verification
refusing a transactional batch for a partition never added to the transaction. (kafkajs',
kafka-python's and aiokafka's own transactional producers: test_transactions_coordinator.py.)"""

from __future__ import annotations

import uuid

import pytest

pytest.register_assert_rewrite("clients", "txn_support")

from clients import RawConnection, create_topic, init_producer_id  # noqa: E402
from txn_support import END, READERS, latest, produce, records, send_end  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # One __transaction_state partition: creating Kafka's 50 is most of a transactional test's time.
    broker = BrokerProcess(tmp_path_factory.mktemp("txn-e2e") / "data",
                           extra_args=["--set", "transaction.state.log.num.partitions=1"]).start()
    yield broker
    broker.kill()


def transactional(broker, transactional_id: str):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 0})
    producer.init_transactions(TIMEOUT)
    return producer


def send(producer, topic: str, value: bytes, *partitions: int) -> None:
    for partition in partitions:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(TIMEOUT) == 0  # on the broker before the next step


@pytest.fixture(scope="module")
def interleaved(broker):
    """Two partitions. P and Q both open; Q's records land between P's; Q aborts, P commits; then
    P aborts a second transaction; END on each partition. Returns the topic and the LSO of each
    partition while both were open."""
    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    p, q = transactional(broker, "e2e-p"), transactional(broker, "e2e-q")
    p.begin_transaction()
    send(p, topic, b"p-c1", 0, 1)
    q.begin_transaction()
    send(q, topic, b"q-a1", 0, 1)
    send(p, topic, b"p-c2", 0)
    open_lsos = [latest(broker.bootstrap, topic, partition, committed=True) for partition in (0, 1)]
    q.abort_transaction(TIMEOUT)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    send(p, topic, b"p-a3", 0, 1)
    p.abort_transaction(TIMEOUT)
    with RawConnection(broker.bootstrap) as conn:
        for partition in (0, 1):
            send_end(conn, topic, partition)
    return topic, open_lsos


@pytest.mark.parametrize("client", READERS)
def test_read_committed_gets_exactly_the_committed_records(broker, interleaved, client):
    topic, _ = interleaved
    assert READERS[client](broker.bootstrap, topic, "read_committed", 0) == [b"p-c1", b"p-c2", END]
    assert READERS[client](broker.bootstrap, topic, "read_committed", 1) == [b"p-c1", END]


@pytest.mark.parametrize("client", READERS)
def test_read_uncommitted_gets_every_record(broker, interleaved, client):
    topic, _ = interleaved
    assert READERS[client](broker.bootstrap, topic, "read_uncommitted", 0) == [
        b"p-c1", b"q-a1", b"p-c2", b"p-a3", END]


def test_the_lso_was_held_at_the_first_open_transaction(broker, interleaved):
    topic, open_lsos = interleaved
    assert open_lsos == [0, 0]
    for partition in (0, 1):
        assert (latest(broker.bootstrap, topic, partition, committed=True)
                == latest(broker.bootstrap, topic, partition, committed=False))


def test_a_batch_for_a_partition_never_added_is_refused(broker):
    """Produce v9 (transaction version 1): the leader asks the coordinator, which has partition 0
    in the transaction but not partition 1 (Kafka: INVALID_TXN_STATE)."""
    from kafka.protocol.producer.transaction import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        EndTxnRequest,
        EndTxnResponse,
    )

    topic = f"verify-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    tid = f"verify-{uuid.uuid4().hex[:8]}"
    with RawConnection(broker.bootstrap) as conn:
        init = init_producer_id(conn, 4, transactional_id=tid)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        added = conn.call(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
            AddPartitionsToTxnResponse, 3)
        assert [p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition] == [0]
        assert produce(conn, topic, 1, records(pid, epoch, 0, [b"not-added"]), transactional_id=tid)[0] == 48
        assert produce(conn, topic, 0, records(pid, epoch, 0, [b"added"]), transactional_id=tid) == (0, 0)
        ended = conn.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True),
                          EndTxnResponse, 3)
        assert ended.error_code == 0
        for partition in (0, 1):
            send_end(conn, topic, partition)
    assert READERS["confluent-kafka"](broker.bootstrap, topic, "read_committed", 0) == [b"added", END]
    assert READERS["confluent-kafka"](broker.bootstrap, topic, "read_uncommitted", 1) == [END]


# ---- compaction ----------------------------------------------------------------------------------


def test_compaction_removes_aborted_records_and_read_committed_stays_right(tmp_path):
    """A compacted topic with small segments and an eager cleaner: after a clean, the aborted
    records are gone from the log itself (read_uncommitted no longer sees them) and what
    read_committed sees is unchanged."""
    from confluent_kafka import Producer

    broker = BrokerProcess(tmp_path / "data", extra_args=["--set", "log.cleaner.backoff.ms=50",
                                                          "--set", "transaction.state.log.num.partitions=1"]).start()
    try:
        topic = "compacted-txn"
        create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "300",
                                                  "min.cleanable.dirty.ratio": "0.01"})
        producer = transactional(broker, "compacting")
        for value, commit in ((b"aborted-1", False), (b"committed-1", True), (b"aborted-2", False),
                              (b"committed-2", True)):
            producer.begin_transaction()
            producer.produce(topic, key=value, value=value, partition=0)
            producer.abort_transaction(TIMEOUT) if not commit else producer.commit_transaction(TIMEOUT)
        plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        offsets: list[int] = []
        for i in range(4):  # filler, so that the transactions' segments are no longer the active one
            plain.produce(topic, key=b"filler-%d" % i, value=b"filler", partition=0,
                          on_delivery=lambda err, msg: offsets.append(msg.offset()))
            assert plain.flush(TIMEOUT) == 0
        plain.produce(topic, key=END, value=END, partition=0)
        assert plain.flush(TIMEOUT) == 0
        wait_for_clean(broker, topic, past=offsets[0])  # every transaction is below the first filler
        fillers = [b"filler"] * 4
        for isolation in ("read_committed", "read_uncommitted"):
            assert READERS["confluent-kafka"](broker.bootstrap, topic, isolation, 0) == [
                b"committed-1", b"committed-2", *fillers, END]
    finally:
        broker.kill()


def wait_for_clean(broker, topic: str, *, past: int) -> None:
    """Until the broker logs a clean of the partition up to an offset beyond ``past``."""
    import re
    import time

    pattern = re.compile(rf"Cleaned {re.escape(topic)}-0 up to offset (\d+)")
    deadline = time.monotonic() + TIMEOUT
    while not any(int(found) > past for found in pattern.findall(broker.output())):
        assert time.monotonic() < deadline, f"no clean of {topic}-0 past offset {past}:\n{broker.output()[-4000:]}"
        time.sleep(0.05)
