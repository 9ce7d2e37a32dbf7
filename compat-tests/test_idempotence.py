"""Idempotent producers against a real broker process: exactly once, in order, while a proxy
loses Produce responses and resets connections, and across a broker SIGKILL in mid-run.

kafka-python 3's default producer is idempotent; librdkafka (confluent-kafka) is with
enable.idempotence=true. Both send through ``proxy.FaultyProxy`` (the broker advertises the
proxy's port, so reconnections go through it too); the records are then read back and every
message must be there exactly once, in the order sent, per partition. Also InitProducerId and
DescribeProducers on the wire, and the errors a misbehaving producer gets.
"""

from __future__ import annotations

import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import RawConnection, create_topic, init_producer_id  # noqa: E402
from proxy import FaultyProxy  # noqa: E402

PARTITIONS = 3
MESSAGES = 100_000


@pytest.fixture
def proxied(broker_factory, tmp_path):
    """(proxy, broker): the broker advertises the proxy, which loses produce responses."""
    with FaultyProxy(drop_every=7, reset_every=11) as proxy:
        broker = broker_factory("--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}",
                                "--log-level", "INFO")
        proxy.upstream_port = broker.port
        yield proxy, broker


def read_back(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> dict[int, list[int]]:
    """Message numbers per partition, in offset order, with each record's offset checked dense."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idempotence-check",
                         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20,
                         "max.partition.fetch.bytes": 8 << 20})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    next_offset = {p: 0 for p in range(PARTITIONS)}
    total, deadline = 0, time.monotonic() + timeout
    try:
        while total < expected and time.monotonic() < deadline:
            for m in consumer.consume(10000, 0.5):
                assert m.error() is None, m.error()
                assert m.offset() == next_offset[m.partition()], "offsets must be dense (no transactions here)"
                next_offset[m.partition()] += 1
                got[m.partition()].append(int(m.value()))
                total += 1
        # anything more than expected (a duplicate) would show up now
        extra = consumer.consume(10000, 1.0)
        for m in extra:
            got[m.partition()].append(int(m.value()))
    finally:
        consumer.close()
    return got


def assert_exactly_once_in_order(got: dict[int, list[int]], count: int) -> None:
    for partition, numbers in got.items():
        expected = list(range(partition, count, PARTITIONS))
        if numbers != expected:
            seen = set()
            duplicates = [n for n in numbers if n in seen or seen.add(n)]
            missing = sorted(set(expected) - set(numbers))
            pytest.fail(f"partition {partition}: {len(numbers)} records for {len(expected)} sent; "
                        f"duplicates {duplicates[:10]}, missing {missing[:10]}, "
                        f"in order: {numbers == sorted(numbers)}")


def kill_and_restart(broker) -> float:
    started = time.monotonic()
    broker.kill()
    broker.start()
    return time.monotonic() - started


# ---- librdkafka --------------------------------------------------------------------------------


def confluent_produce(proxy: FaultyProxy, topic: str, count: int, *, restart=None) -> None:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": proxy.bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 2000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 200,
        "message.timeout.ms": 120000,
    })
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
        if restart is not None and i == count // 2:
            producer.flush(0.2)  # some batches in flight while the broker dies
            restart()
    assert producer.flush(90) == 0, "librdkafka did not deliver everything"
    assert not errors, f"delivery failed: {errors[:5]}"


def test_confluent_idempotent_exactly_once_through_a_lossy_proxy(proxied, topic_name):
    proxy, broker = proxied
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    confluent_produce(proxy, topic_name, MESSAGES)
    assert proxy.stats.dropped_responses > 0 and proxy.stats.resets > 0, proxy.stats
    proxy.faults = False
    assert_exactly_once_in_order(read_back(proxy.bootstrap, topic_name, MESSAGES), MESSAGES)


def test_confluent_idempotent_exactly_once_across_a_broker_sigkill(proxied, topic_name):
    proxy, broker = proxied
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    confluent_produce(proxy, topic_name, MESSAGES, restart=lambda: kill_and_restart(broker))
    assert proxy.stats.dropped_responses > 0, proxy.stats
    proxy.faults = False
    assert_exactly_once_in_order(read_back(proxy.bootstrap, topic_name, MESSAGES), MESSAGES)


# ---- kafka-python ------------------------------------------------------------------------------


def kafka_python_produce(proxy: FaultyProxy, topic: str, count: int, *, restart=None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(  # idempotent by default (and so acks=all)
        bootstrap_servers=proxy.bootstrap, linger_ms=5, batch_size=16 * 1024,
        reconnect_backoff_ms=20, reconnect_backoff_max_ms=500, retry_backoff_ms=20,
        request_timeout_ms=30000, delivery_timeout_ms=120000,
    )
    assert producer.config["enable_idempotence"], "kafka-python 3 should be idempotent by default"
    futures = []
    try:
        for i in range(count):
            futures.append(producer.send(topic, value=str(i).encode(), partition=i % PARTITIONS))
            if restart is not None and i == count // 2:
                time.sleep(0.05)
                restart()
        producer.flush(timeout=90)
        failed = [f.exception for f in futures if f.failed()]
        assert not failed, f"{len(failed)} sends failed, e.g. {failed[:3]}"
        assert all(f.succeeded() for f in futures)
    finally:
        producer.close(timeout=5)


def test_kafka_python_default_producer_exactly_once_through_a_lossy_proxy(proxied, topic_name):
    proxy, broker = proxied
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    kafka_python_produce(proxy, topic_name, MESSAGES)
    assert proxy.stats.dropped_responses > 0 and proxy.stats.resets > 0, proxy.stats
    proxy.faults = False
    assert_exactly_once_in_order(read_back(proxy.bootstrap, topic_name, MESSAGES), MESSAGES)


def test_kafka_python_default_producer_exactly_once_across_a_broker_sigkill(proxied, topic_name):
    proxy, broker = proxied
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    kafka_python_produce(proxy, topic_name, MESSAGES, restart=lambda: kill_and_restart(broker))
    assert proxy.stats.dropped_responses > 0 and proxy.stats.refused + proxy.stats.connections > 2, proxy.stats
    proxy.faults = False
    assert_exactly_once_in_order(read_back(proxy.bootstrap, topic_name, MESSAGES), MESSAGES)


# ---- the APIs on the wire ------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(6))
def test_init_producer_id_versions(broker, version):
    with RawConnection(broker.bootstrap) as conn:
        first = init_producer_id(conn, version)
        second = init_producer_id(conn, version)
    assert (first.error_code, first.producer_epoch, second.error_code) == (0, 0, 0)
    assert second.producer_id > first.producer_id >= 0


def test_init_producer_id_rules(broker):
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    with RawConnection(broker.bootstrap) as conn:
        given = init_producer_id(conn, 4)
        # KIP-360 fields on a non-transactional request: Kafka hands out a fresh id
        again = init_producer_id(conn, 4, producer_id=given.producer_id, epoch=0)
        assert (again.error_code, again.producer_epoch) == (0, 0) and again.producer_id != given.producer_id
        assert init_producer_id(conn, 4, producer_id=given.producer_id).error_code == 42  # INVALID_REQUEST
        assert init_producer_id(conn, 4, transactional_id="").error_code == 42
        # Before any FindCoordinator created __transaction_state there is no coordinator yet
        assert init_producer_id(conn, 4, transactional_id="orders-txn").error_code == 15  # COORDINATOR_NOT_AVAILABLE
        find = conn.call(FindCoordinatorRequest(key="orders-txn", key_type=1), FindCoordinatorResponse, 3)
        assert find.error_code == 0
        txn = init_producer_id(conn, 4, transactional_id="orders-txn")
        assert (txn.error_code, txn.producer_epoch) == (0, 0) and txn.producer_id >= 0


def test_producer_ids_survive_a_restart(broker):
    with RawConnection(broker.bootstrap) as conn:
        before = init_producer_id(conn, 4).producer_id
    broker.kill()
    broker.start()
    with RawConnection(broker.bootstrap) as conn:
        after = init_producer_id(conn, 4).producer_id
    assert after > before


def raw_produce(conn: RawConnection, topic: str, producer_id: int, epoch: int, sequence: int, count: int = 2):
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                        producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=int(time.time() * 1000), key=None, value=b"v%d" % (sequence + i), headers=[])
    records = bytes(builder.build())
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=records)])])
    response = conn.call(request, ProduceResponse, 9)
    partition = response.responses[0].partition_responses[0]
    return partition.error_code, partition.base_offset


def describe_producers(conn: RawConnection, topic: str):
    from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse

    Topic = DescribeProducersRequest.TopicRequest
    response = conn.call(DescribeProducersRequest(topics=[Topic(name=topic, partition_indexes=[0, 7])]),
                         DescribeProducersResponse, 0)
    return response.topics[0].partitions


def test_produce_errors_duplicates_and_describe_producers(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(broker.bootstrap) as conn:
        pid = init_producer_id(conn, 4).producer_id
        assert raw_produce(conn, topic_name, pid, 0, 0) == (0, 0)
        assert raw_produce(conn, topic_name, pid, 0, 2) == (0, 2)
        assert raw_produce(conn, topic_name, pid, 0, 0) == (0, 0)  # duplicate: original offset
        assert raw_produce(conn, topic_name, pid, 0, 7)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert raw_produce(conn, topic_name, pid, 1, 3)[0] == 45  # a new epoch starts at 0
        assert raw_produce(conn, topic_name, pid, 1, 0) == (0, 4)  # epoch bump
        assert raw_produce(conn, topic_name, pid, 0, 4)[0] == 47  # INVALID_PRODUCER_EPOCH
        known, unknown = describe_producers(conn, topic_name)
    assert (known.error_code, unknown.error_code) == (0, 3)
    [state] = known.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.coordinator_epoch,
            state.current_txn_start_offset) == (pid, 1, 1, -1, -1)
    assert abs(state.last_timestamp - time.time() * 1000) < 60_000
    # the state survives a SIGKILL (snapshot + batch headers) and a clean restart (snapshot)
    for restart in (kill_and_restart, lambda b: b.restart()):
        restart(broker)
        with RawConnection(broker.bootstrap) as conn:
            assert raw_produce(conn, topic_name, pid, 1, 0) == (0, 4)  # still a duplicate
            [state] = describe_producers(conn, topic_name)[0].active_producers
            assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, 1, 1)


def test_idle_producers_expire_in_housekeeping(broker_factory, topic_name):
    broker = broker_factory("--set", "producer.id.expiration.ms=1000",
                            "--set", "producer.id.expiration.check.interval.ms=200")
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(broker.bootstrap) as conn:
        pid = init_producer_id(conn, 4).producer_id
        assert raw_produce(conn, topic_name, pid, 0, 0) == (0, 0)
        assert [s.producer_id for s in describe_producers(conn, topic_name)[0].active_producers] == [pid]
        deadline = time.monotonic() + 10
        while describe_producers(conn, topic_name)[0].active_producers and time.monotonic() < deadline:
            time.sleep(0.1)
        assert describe_producers(conn, topic_name)[0].active_producers == []
        # an expired producer is unknown: it may go on at any sequence (Kafka 2.5+)
        assert raw_produce(conn, topic_name, pid, 0, 7) == (0, 2)
    broker.wait_for_output("Expired 1 idle producer id(s)")


def test_kafka_python_admin_describes_the_default_producer(broker, topic_name):
    """An operator's view (KafkaAdminClient.describe_producers, DescribeProducers v0) of the
    producer id and sequences kafka-python's default producer used."""
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

    create_topic(broker.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for i in range(5):
            producer.send(topic_name, value=b"m%d" % i, partition=0).get(timeout=10)
    finally:
        producer.close(timeout=5)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = TopicPartition(topic_name, 0)
        [state] = admin.describe_producers([tp])[tp].active_producers
    finally:
        admin.close()
    assert state.producer_id >= 0 and state.producer_epoch == 0
    assert state.last_sequence == 4  # five single-record batches: sequences 0..4
    assert (state.coordinator_epoch, state.current_transaction_start_offset) == (-1, -1)
    assert abs(state.last_timestamp - time.time() * 1000) < 60_000
