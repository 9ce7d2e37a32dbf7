"""The transaction coordinator with real clients against a real broker process: confluent-kafka
transactions committed and aborted across partitions and read back by read_committed and
read_uncommitted consumers, consume-transform-produce with send_offsets_to_transaction, fencing
by a second producer with the same transactional.id, a hung transaction rolled back by its
timeout, restarts (clean and SIGKILL) with transactions open and just committed; the APIs on the
wire with Kafka's error codes (kafka-python's protocol classes)."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import RawConnection, create_topic, init_producer_id  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

CLEANUP_INTERVAL_MS = 200


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", extra_args=[
        "--set", f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CLEANUP_INTERVAL_MS}",
    ]).start()
    yield broker
    broker.kill()


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(broker, partitions: int = 3) -> str:
    name = _id("txn")
    create_topic(broker.bootstrap, name, partitions)
    return name


def _producer(broker, transactional_id: str, **conf) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id, **conf})
    producer.init_transactions(30)
    return producer


def read_all(broker, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads up to the end of each partition (for
    read_committed: up to the last stable offset)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _id("reader"),
                         "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = [], set()
    try:
        while len(at_end) < partitions:
            message = consumer.poll(10)
            assert message is not None, f"no end of partition reached on {topic} ({isolation})"
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                at_end.add(message.partition())
            else:
                values.append(message.value())
                at_end.discard(message.partition())
    finally:
        consumer.close()
    return sorted(values)


def describe(broker, transactional_id: str):
    from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse

    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                             DescribeTransactionsResponse, 0)
    return response.transaction_states[0]


def wait_for_state(broker, transactional_id: str, state: str, timeout: float = 30) -> bool:
    """Until DescribeTransactions shows ``state`` (the coordinator's background work got there)."""
    deadline = time.monotonic() + timeout
    while describe(broker, transactional_id).transaction_state != state:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---- confluent-kafka -------------------------------------------------------------------------------


def test_commits_and_aborts_across_partitions(txn_broker):
    topic = _topic(txn_broker)
    producer = _producer(txn_broker, _id("tx"))
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=b"committed-%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=b"aborted-%d" % i, partition=i % 3)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"last", partition=1)
    producer.commit_transaction(30)

    committed = sorted([b"committed-%d" % i for i in range(9)] + [b"last"])
    assert read_all(txn_broker, topic, 3, "read_committed") == committed
    assert read_all(txn_broker, topic, 3, "read_uncommitted") == sorted(committed + [b"aborted-%d" % i
                                                                                    for i in range(9)])


def test_consume_transform_produce_commits_offsets_with_the_transaction(txn_broker):
    source, sink = _topic(txn_broker, 2), _topic(txn_broker, 2)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(6):
        plain.produce(source, value=b"in-%d" % i, partition=i % 2)
    plain.flush(30)
    group = _id("ctp")
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source, p, 0) for p in range(2)])
    producer = _producer(txn_broker, _id("ctp-tx"))

    def transform(count: int, commit: bool) -> tuple[dict[int, int], list[bytes]]:
        received = []
        while len(received) < count:
            message = consumer.poll(10)
            assert message is not None and not message.error()
            received.append(message)
        producer.begin_transaction()
        for message in received:
            producer.produce(sink, value=message.value().upper(), partition=message.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        return {tp.partition: tp.offset for tp in positions}, [m.value().upper() for m in received]

    def committed() -> dict[int, int]:
        return {tp.partition: tp.offset
                for tp in consumer.committed([TopicPartition(source, p) for p in range(2)], timeout=10)}

    positions, produced = transform(4, commit=True)
    assert committed() == positions and sum(positions.values()) == 4
    transform(2, commit=False)  # the offsets of an aborted transaction are never the group's
    assert committed() == positions
    consumer.close()
    assert read_all(txn_broker, sink, 2, "read_committed") == sorted(produced)


def test_a_second_producer_with_the_same_id_fences_the_first(txn_broker):
    topic = _topic(txn_broker, 1)
    transactional_id = _id("fenced")
    first = _producer(txn_broker, transactional_id)
    first.begin_transaction()
    first.produce(topic, value=b"from-the-fenced-one")
    first.flush(30)
    second = _producer(txn_broker, transactional_id)  # aborts the first one's transaction
    second.begin_transaction()
    second.produce(topic, value=b"from-the-new-one")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as failure:
        first.commit_transaction(30)
    assert failure.value.args[0].fatal() or failure.value.args[0].txn_requires_abort()
    assert read_all(txn_broker, topic, 1, "read_committed") == [b"from-the-new-one"]


def test_a_hung_transaction_is_aborted_by_its_timeout(txn_broker):
    topic = _topic(txn_broker, 1)
    hung_id = _id("hung")
    hung = _producer(txn_broker, hung_id, **{"transaction.timeout.ms": 1000})
    hung.begin_transaction()
    hung.produce(topic, value=b"never-committed")
    hung.flush(30)
    # The coordinator aborts it (and fences the producer) once it is open longer than 1 s: the
    # last stable offset moves past it, so a later transaction's records become readable.
    assert wait_for_state(txn_broker, hung_id, "CompleteAbort")
    other = _producer(txn_broker, _id("after-hung"))
    other.begin_transaction()
    other.produce(topic, value=b"committed-after")
    other.commit_transaction(30)
    assert read_all(txn_broker, topic, 1, "read_committed") == [b"committed-after"]
    with pytest.raises(KafkaException):
        hung.commit_transaction(30)
    assert "timed out after 1000 ms; aborting it" in txn_broker.output()


# ---- kafkajs, aiokafka and kafka-python 3 -----------------------------------------------------------


def _committed_and_aborted(prefix: str) -> tuple[list[bytes], list[bytes]]:
    return ([b"%s-committed-%d" % (prefix.encode(), i) for i in range(2)],
            [b"%s-aborted-%d" % (prefix.encode(), i) for i in range(2)])


def test_kafkajs_transactions_read_back_by_kafka_python(txn_broker):
    import json
    import subprocess
    from pathlib import Path

    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KpTopicPartition

    js = Path(__file__).parent / "js"
    assert (js / "node_modules" / "kafkajs").is_dir(), f"run: cd {js} && npm install --no-audit --no-fund"
    topic = _topic(txn_broker, 2)
    done = subprocess.run(["node", str(js / "transactions.js"), txn_broker.bootstrap, topic, _id("kafkajs")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout) == {"committed": True, "aborted": True}
    committed, aborted = _committed_and_aborted("kafkajs")
    consumer = KafkaConsumer(bootstrap_servers=txn_broker.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
    consumer.seek_to_beginning()
    assert sorted(record.value for record in consumer) == committed
    consumer.close()
    assert read_all(txn_broker, topic, 2, "read_uncommitted") == sorted(committed + aborted)


def test_kafka_python_transactions_read_back_by_aiokafka(txn_broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition
    from kafka import KafkaProducer

    topic = _topic(txn_broker, 2)
    producer = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=_id("kafka-python"))
    producer.init_transactions()
    committed, aborted = _committed_and_aborted("kafka-python")
    producer.begin_transaction()
    for i, value in enumerate(committed):
        producer.send(topic, value=value, partition=i)
    producer.commit_transaction()
    producer.begin_transaction()
    for i, value in enumerate(aborted):
        producer.send(topic, value=value, partition=i)
    producer.flush()
    producer.abort_transaction()
    producer.close()

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=txn_broker.bootstrap, isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            partitions = [AioTopicPartition(topic, 0), AioTopicPartition(topic, 1)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)  # read_committed: the last stable offsets
            values = []
            while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    values.extend(record.value for record in records)
            return sorted(values)
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == committed
    assert read_all(txn_broker, topic, 2, "read_uncommitted") == sorted(committed + aborted)


def test_aiokafka_transactions_read_back_by_confluent_kafka(txn_broker):
    import asyncio

    from aiokafka import AIOKafkaProducer

    topic = _topic(txn_broker, 2)
    committed, aborted = _committed_and_aborted("aiokafka")

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=_id("aiokafka"))
        await producer.start()
        try:
            async with producer.transaction():
                for i, value in enumerate(committed):
                    await producer.send_and_wait(topic, value=value, partition=i)
            await producer.begin_transaction()
            for i, value in enumerate(aborted):
                await producer.send_and_wait(topic, value=value, partition=i)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(produce())
    assert read_all(txn_broker, topic, 2, "read_committed") == committed
    assert read_all(txn_broker, topic, 2, "read_uncommitted") == sorted(committed + aborted)


def test_an_idle_transactional_id_expires(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=[
        "--set", "transactional.id.expiration.ms=500",
        "--set", "transaction.remove.expired.transaction.cleanup.interval.ms=100"]).start()
    try:
        topic = _topic(broker, 1)
        tid = _id("expiring")
        producer = _producer(broker, tid)
        producer.begin_transaction()
        producer.produce(topic, value=b"kept")
        producer.commit_transaction(30)
        first_id = describe(broker, tid).producer_id
        assert wait_for_state(broker, tid, "")  # TRANSACTIONAL_ID_NOT_FOUND: the id is gone
        assert describe(broker, tid).error_code == 105
        assert "Transactional id %r expired" % tid in broker.output()
        again = _producer(broker, tid)  # a new producer id: the old state is gone
        again.begin_transaction()
        again.produce(topic, value=b"after-expiry")
        again.commit_transaction(30)
        assert describe(broker, tid).producer_id != first_id
        assert read_all(broker, topic, 1, "read_committed") == [b"after-expiry", b"kept"]
    finally:
        broker.kill()


# ---- restarts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_a_restart_with_transactions_open_and_just_committed(tmp_path, stop):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = _topic(broker, 2)
        committed = _producer(broker, "restart-committed")
        committed.begin_transaction()
        for i in range(4):
            committed.produce(topic, value=b"c-%d" % i, partition=i % 2)
        committed.commit_transaction(30)  # the markers may still be on their way when the broker stops
        open_ = _producer(broker, "restart-open")
        open_.begin_transaction()
        open_.produce(topic, value=b"open", partition=0)
        open_.flush(30)
        if stop == "clean":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        # The reloaded coordinator still knows the open transaction: the id's next producer
        # fences and aborts it, and the committed one is complete.
        again = _producer(broker, "restart-open")
        again.begin_transaction()
        again.produce(topic, value=b"after-restart", partition=1)
        again.commit_transaction(30)
        assert read_all(broker, topic, 2, "read_committed") == [b"after-restart", b"c-0", b"c-1", b"c-2", b"c-3"]
    finally:
        broker.kill()


# ---- the APIs on the wire ------------------------------------------------------------------------


def _find(conn: RawConnection, transactional_id: str):
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    return conn.call(FindCoordinatorRequest(key=transactional_id, key_type=1), FindCoordinatorResponse, 3)


def _add_partitions(conn, version: int, transactional_id: str, producer_id: int, epoch: int, topics):
    from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

    topic_cls = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    entries = [topic_cls(name=name, partitions=ids) for name, ids in topics]
    if version >= 4:
        txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, verify_only=False,
            topics=entries)
        response = conn.call(AddPartitionsToTxnRequest(transactions=[txn]), AddPartitionsToTxnResponse, version)
        results = response.results_by_transaction[0].topic_results
    else:
        response = conn.call(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=entries), AddPartitionsToTxnResponse, version)
        results = response.results_by_topic_v3_and_below
    return {(t.name, p.partition_index): p.partition_error_code for t in results for p in t.results_by_partition}


def _end(conn, version: int, transactional_id: str, producer_id: int, epoch: int, committed: bool):
    from kafka.protocol.producer.transaction import EndTxnRequest, EndTxnResponse

    return conn.call(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                                   committed=committed), EndTxnResponse, version)


def test_bad_input_gets_kafkas_error_codes(txn_broker):
    topic = _topic(txn_broker, 2)
    tid = _id("wire")
    with RawConnection(txn_broker.bootstrap) as conn:
        assert _find(conn, tid).error_code == 0
        too_long = init_producer_id(conn, 4, transactional_id=tid)
        assert too_long.error_code == 0
        from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

        timeout = conn.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=900001,
                                                  producer_id=-1, producer_epoch=-1), InitProducerIdResponse, 4)
        assert timeout.error_code == 50  # INVALID_TRANSACTION_TIMEOUT (transaction.max.timeout.ms 900000)
        pid, epoch = too_long.producer_id, too_long.producer_epoch
        assert _end(conn, 3, tid, pid, epoch, True).error_code == 48  # INVALID_TXN_STATE: no transaction
        assert _end(conn, 3, _id("unknown"), pid, epoch, True).error_code == 49  # INVALID_PRODUCER_ID_MAPPING
        assert _add_partitions(conn, 3, tid, pid, epoch, [(topic, [0, 1]), ("no-such-topic", [0])]) == {
            (topic, 0): 55, (topic, 1): 55, ("no-such-topic", 0): 3}  # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC
        assert _add_partitions(conn, 3, tid, pid, epoch, [(topic, [5])]) == {(topic, 5): 3}
        assert _add_partitions(conn, 3, tid, pid, epoch + 1, [(topic, [0])]) == {(topic, 0): 90}  # PRODUCER_FENCED
        assert _add_partitions(conn, 1, tid, pid, epoch + 1, [(topic, [0])]) == {(topic, 0): 47}  # v<2: INVALID_PRODUCER_EPOCH
        assert _add_partitions(conn, 3, tid, pid + 1000, epoch, [(topic, [0])]) == {(topic, 0): 49}  # INVALID_PRODUCER_ID_MAPPING
        assert _add_partitions(conn, 3, tid, pid, epoch, [(topic, [0, 1])]) == {(topic, 0): 0, (topic, 1): 0}
        assert _end(conn, 3, tid, pid, epoch + 1, True).error_code == 90  # PRODUCER_FENCED
        assert _end(conn, 1, tid, pid, epoch + 1, True).error_code == 47  # v<2: INVALID_PRODUCER_EPOCH
        # A new InitProducerId fences the open transaction: aborted, then CONCURRENT_TRANSACTIONS
        # until the abort is complete; the retry gets the next epoch.
        assert init_producer_id(conn, 4, transactional_id=tid).error_code == 51
        deadline = time.monotonic() + 10
        while (again := init_producer_id(conn, 4, transactional_id=tid)).error_code == 51:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, epoch + 2)
        # KIP-360: the current producer recovers with its id and epoch; an old epoch is fenced
        recovered = init_producer_id(conn, 4, transactional_id=tid, producer_id=pid, epoch=epoch + 2)
        assert (recovered.error_code, recovered.producer_epoch) == (0, epoch + 3)
        assert init_producer_id(conn, 4, transactional_id=tid, producer_id=pid, epoch=epoch).error_code == 90
        assert init_producer_id(conn, 3, transactional_id=tid, producer_id=pid, epoch=epoch).error_code == 47


def test_transaction_version_2_bumps_the_epoch_on_every_end(txn_broker):
    """A partition leader adds the partitions (AddPartitionsToTxn v5, verify_only false), EndTxn v5
    answers the bumped epoch, and the previous epoch is fenced."""
    topic = _topic(txn_broker, 1)
    tid = _id("tv2")
    with RawConnection(txn_broker.bootstrap) as conn:
        _find(conn, tid)
        init = init_producer_id(conn, 5, transactional_id=tid)
        pid, epoch = init.producer_id, init.producer_epoch
        assert _add_partitions(conn, 5, tid, pid, epoch, [(topic, [0])]) == {(topic, 0): 0}
        ended = _end(conn, 5, tid, pid, epoch, True)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        assert wait_for_state(txn_broker, tid, "CompleteCommit")  # the markers are written
        retried = _end(conn, 5, tid, pid, epoch, True)  # a retry of the EndTxn that was answered
        assert (retried.error_code, retried.producer_epoch) == (0, epoch + 1)
        assert _add_partitions(conn, 5, tid, pid, epoch, [(topic, [0])]) == {(topic, 0): 90}
        assert _add_partitions(conn, 5, tid, pid, epoch + 1, [(topic, [0])]) == {(topic, 0): 0}
        aborted = _end(conn, 5, tid, pid, epoch + 1, False)
        assert (aborted.error_code, aborted.producer_epoch) == (0, epoch + 2)
        assert wait_for_state(txn_broker, tid, "CompleteAbort")
        # KIP-890: an abort with nothing added bumps the epoch too; a commit of nothing is refused
        empty = _end(conn, 5, tid, pid, epoch + 2, False)
        assert (empty.error_code, empty.producer_epoch) == (0, epoch + 3)
        assert wait_for_state(txn_broker, tid, "CompleteAbort")
        assert _end(conn, 5, tid, pid, epoch + 3, True).error_code == 48  # INVALID_TXN_STATE
        assert _end(conn, 5, tid, pid, epoch + 1, False).error_code == 90  # an old epoch: PRODUCER_FENCED


def _produce_transactional(conn, version: int, tid: str, topic: str, producer_id: int, epoch: int, sequence: int,
                           values: list[bytes]) -> int:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
                                        producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    topic_data = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[topic_data(
        name=topic, partition_data=[topic_data.PartitionProduceData(index=0, records=bytes(builder.build()))])])
    return conn.call(request, ProduceResponse, version).responses[0].partition_responses[0].error_code


def test_transaction_version_2_end_to_end_without_add_partitions_or_add_offsets(txn_broker):
    """What a Kafka 4 producer does with transaction.version 2: Produce v12 (the leader adds the
    partition), TxnOffsetCommit v5 (the group coordinator adds its partition), EndTxn v5 (the
    answer's bumped epoch is the next transaction's)."""
    from kafka.protocol.producer.transaction import TxnOffsetCommitRequest, TxnOffsetCommitResponse

    topic = _topic(txn_broker, 1)
    tid, group = _id("tv2-e2e"), _id("tv2-group")
    with RawConnection(txn_broker.bootstrap) as conn:
        _find(conn, tid)
        init = init_producer_id(conn, 5, transactional_id=tid)
        pid, epoch = init.producer_id, init.producer_epoch
        assert _produce_transactional(conn, 12, tid, topic, pid, epoch, 0, [b"tv2-a", b"tv2-b"]) == 0
        state = describe(txn_broker, tid)
        assert (state.transaction_state, [(t.topic, t.partitions) for t in state.topics]) == ("Ongoing", [(topic, [0])])
        commit_topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        offsets = conn.call(TxnOffsetCommitRequest(
            transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[commit_topic(name=topic, partitions=[
                commit_topic.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=2,
                                                             committed_leader_epoch=-1, committed_metadata="")])]),
            TxnOffsetCommitResponse, 5)
        assert [p.error_code for t in offsets.topics for p in t.partitions] == [0]
        ended = _end(conn, 5, tid, pid, epoch, True)
        assert (ended.error_code, ended.producer_epoch) == (0, epoch + 1)
        assert wait_for_state(txn_broker, tid, "CompleteCommit")
        # The old epoch is fenced; the new one starts its sequence at 0
        # INVALID_PRODUCER_EPOCH: the partition's marker carried the bumped epoch
        assert _produce_transactional(conn, 12, tid, topic, pid, epoch, 2, [b"stale"]) == 47
        assert _produce_transactional(conn, 12, tid, topic, pid, epoch + 1, 0, [b"tv2-aborted"]) == 0
        aborted = _end(conn, 5, tid, pid, epoch + 1, False)
        assert (aborted.error_code, aborted.producer_epoch) == (0, epoch + 2)
        assert wait_for_state(txn_broker, tid, "CompleteAbort")
        # KIP-890: an abort with nothing added bumps the epoch too; a commit of nothing is refused
        empty = _end(conn, 5, tid, pid, epoch + 2, False)
        assert (empty.error_code, empty.producer_epoch) == (0, epoch + 3)
        assert wait_for_state(txn_broker, tid, "CompleteAbort")
        assert _end(conn, 5, tid, pid, epoch + 3, True).error_code == 48  # INVALID_TXN_STATE
        assert _end(conn, 5, tid, pid, epoch + 1, False).error_code == 90  # an old epoch: PRODUCER_FENCED
        assert wait_for_state(txn_broker, tid, "CompleteAbort")
    assert read_all(txn_broker, topic, 1, "read_committed") == [b"tv2-a", b"tv2-b"]
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    consumer.close()
    assert committed.offset == 2


def test_describe_and_list_transactions(txn_broker):
    from kafka.protocol.admin import (DescribeTransactionsRequest, DescribeTransactionsResponse,
                                      ListTransactionsRequest, ListTransactionsResponse)

    topic = _topic(txn_broker, 2)
    tid = _id("described")
    producer = _producer(txn_broker, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=1)
    producer.flush(30)
    with RawConnection(txn_broker.bootstrap) as conn:
        described = conn.call(DescribeTransactionsRequest(transactional_ids=[tid, _id("nobody")]),
                              DescribeTransactionsResponse, 0)
        found, missing = described.transaction_states
        assert (found.error_code, found.transaction_state, found.transaction_timeout_ms) == (0, "Ongoing", 60000)
        assert [(t.topic, t.partitions) for t in found.topics] == [(topic, [1])]
        assert found.transaction_start_time_ms > 0 and found.producer_id >= 0
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND

        def listed(version: int, **filters) -> set[str]:
            response = conn.call(ListTransactionsRequest(**filters), ListTransactionsResponse, version)
            assert response.error_code == 0
            return {state.transactional_id for state in response.transaction_states}

        assert tid in listed(0, state_filters=["Ongoing"], producer_id_filters=[])
        assert tid not in listed(0, state_filters=["CompleteCommit"], producer_id_filters=[])
        assert listed(0, state_filters=[], producer_id_filters=[found.producer_id]) == {tid}
        assert tid in listed(1, state_filters=[], producer_id_filters=[], duration_filter=0)
        assert tid not in listed(1, state_filters=[], producer_id_filters=[], duration_filter=3_600_000)
        unknown = conn.call(ListTransactionsRequest(state_filters=["Bogus"], producer_id_filters=[]),
                            ListTransactionsResponse, 0)
        assert unknown.unknown_state_filters == ["Bogus"]
        # v2: a regular expression the whole id must match
        assert listed(2, state_filters=[], producer_id_filters=[], transactional_id_pattern="described-.*") >= {tid}
        assert tid not in listed(2, state_filters=[], producer_id_filters=[], transactional_id_pattern="described")
        bad = conn.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                                transactional_id_pattern="(unclosed"), ListTransactionsResponse, 2)
        assert bad.error_code == 128  # INVALID_REGULAR_EXPRESSION
    producer.commit_transaction(30)
