"""Helpers for the data-path compat tests: one driver per Python client with the same small
interface, the checks every driver must pass (``DataPathContract``), and a raw-socket client
built on kafka-python's protocol classes for requests no well-behaved client sends.

Test modules must call ``pytest.register_assert_rewrite("clients")`` before importing this
module so the contract's asserts report values.
"""

from __future__ import annotations

import functools

import asyncio
import contextlib
import itertools
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pytest

# kafka-python's request and response classes: raw requests are written by a codec independent
# of the broker's own.
from kafkacompat.testing.fuzz import request_class, response_class

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LARGE_VALUE_BYTES = 900 * 1024
# Client-side limits raised above the broker's default message.max.bytes (1048588), so the
# broker, not the client, is what a large message has to get through.
CLIENT_MAX_BYTES = 2 * 1024 * 1024
BASE_TIMESTAMP = 1_600_000_000_000  # a fixed CreateTime far from "now", so nothing can fake it


@dataclass(frozen=True)
class Msg:
    """What a producer sends (and, with offsets stripped, what a consumer must get back)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None
    partition: int = 0


@dataclass(frozen=True)
class Rec:
    """One consumed record, normalised across clients."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    create_time: bool  # timestamp type CreateTime (False: LogAppendTime)

    def msg(self, with_timestamp: bool = False) -> Msg:
        return Msg(self.value, self.key, self.headers, self.timestamp if with_timestamp else None, self.partition)


# Every shape of record a client must carry unchanged: keys, no key, empty key and value,
# tombstones (null value), binary bytes, several headers including a repeated key and an
# empty header value. (Clients send a batch uncompressed when the codec would not shrink it.)
SAMPLE = (
    Msg(b"v-plain", b"k-plain"),
    Msg(b"v-headers", b"k-headers", (("h1", b"one"), ("h2", b"two"), ("h1", b"again"))),
    Msg(None, b"k-tombstone"),
    Msg(b"", b"k-empty-value"),
    Msg(b"v-no-key"),
    Msg(b"v-empty-key", b""),
    Msg(bytes(range(256)) * 4, b"\x00\xff binary"),
    Msg(b"compressible " * 300, b"k-repetitive"),  # so that every codec wins and is really used
    Msg("välue ✓".encode(), "kéy".encode(), (("empty", b""),)),
)


def numbered(count: int, *, prefix: str = "m", partition: int = 0, timestamps: bool = False) -> list[Msg]:
    return [
        Msg(f"{prefix}-{i}".encode(), f"k{i}".encode(), timestamp=BASE_TIMESTAMP + i * 1000 if timestamps else None,
            partition=partition)
        for i in range(count)
    ]


def values(records: list[Rec]) -> list[bytes | None]:
    return [r.value for r in records]


def offsets(records: list[Rec]) -> list[int]:
    return [r.offset for r in records]


def _headers(raw) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, bytes(v) if v is not None else None) for k, v in (raw or ()))


def _rec_from_consumer_record(r) -> Rec:
    """kafka-python's and aiokafka's ConsumerRecord (timestamp type 0 is CreateTime)."""
    return Rec(r.partition, r.offset, r.key, r.value, _headers(r.headers), r.timestamp, r.timestamp_type == 0)


def _acks(acks) -> int:
    return -1 if acks == "all" else int(acks)


# ---- drivers ---------------------------------------------------------------------------------


class Driver:
    """The interface every Python client driver implements.

    ``produce`` sends ``msgs`` (all in one batch per partition where the client lets us) and
    returns each message's offset from its acknowledgement (None where acks=0 gives none).
    ``consume`` assigns one partition at ``offset`` (no consumer group) and polls until
    ``count`` records arrived or ``timeout`` passed.
    """

    name = "driver"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def produce(self, topic: str, msgs, *, acks="all", codec: str = "none") -> list[int | None]:
        raise NotImplementedError

    def consume(self, topic: str, partition: int, offset: int, count: int, *, timeout: float = 10.0,
                reset: str = "earliest") -> list[Rec]:
        raise NotImplementedError

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        raise NotImplementedError

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        raise NotImplementedError

    def wait_for_new(self, topic: str, partition: int, offset: int, trigger: Callable[[], None], *,
                     max_wait_ms: int = 5000, timeout: float = 9.0) -> tuple[Rec | None, float]:
        """Assign at ``offset`` (the end), let the consumer settle into a long-poll fetch, call
        ``trigger`` and return the first record and the monotonic time it arrived."""
        raise NotImplementedError


class SyncDriver(Driver):
    """A blocking client: subclasses open a consumer assigned to one partition (``_assigned``)
    and poll it (``_poll``); consuming and waiting for new data are written once, here."""

    def _assigned(self, topic: str, partition: int, offset: int | None, reset: str = "earliest",
                  max_wait_ms: int | None = None):
        """A context manager yielding (consumer, partition handle), assigned and positioned at
        ``offset`` (unless None), closed on exit."""
        raise NotImplementedError

    def _poll(self, consumer, count: int, deadline: float) -> list[Rec]:
        raise NotImplementedError

    def consume(self, topic, partition, offset, count, *, timeout=10.0, reset="earliest"):
        with self._assigned(topic, partition, offset, reset) as (consumer, _):
            return self._poll(consumer, count, time.monotonic() + timeout)

    def wait_for_new(self, topic, partition, offset, trigger, *, max_wait_ms=5000, timeout=9.0):
        with self._assigned(topic, partition, offset, max_wait_ms=max_wait_ms) as (consumer, _):
            assert self._poll(consumer, 1, time.monotonic() + 1.0) == []
            trigger()
            got = self._poll(consumer, 1, time.monotonic() + timeout)
            return (got[0] if got else None), time.monotonic()


class ConfluentDriver(SyncDriver):
    name = "confluent-kafka"

    def _producer_config(self, acks, codec: str) -> dict:
        return {
            "bootstrap.servers": self.bootstrap,
            "acks": str(_acks(acks)),
            "compression.type": codec,
            "linger.ms": 5000,  # everything goes out in one batch at flush()
            "batch.num.messages": 10000,
            "message.max.bytes": CLIENT_MAX_BYTES,
            "enable.idempotence": False,
        }

    def produce(self, topic, msgs, *, acks="all", codec="none"):
        from confluent_kafka import Producer

        producer = Producer(self._producer_config(acks, codec))
        reports: dict[int, object] = {}
        errors: list = []
        for i, m in enumerate(msgs):
            def done(err, msg, i=i):
                (errors.append(err) if err is not None else reports.__setitem__(i, msg.offset()))
            producer.produce(topic, value=m.value, key=m.key, headers=list(m.headers) or None,
                             partition=m.partition, timestamp=m.timestamp or 0, on_delivery=done)
        assert producer.flush(15) == 0, "confluent producer did not deliver everything within 15 s"
        assert not errors, f"delivery failed: {errors}"
        # With acks=0 librdkafka reports no offset (None or a negative logical offset).
        return [reports[i] if reports[i] is not None and reports[i] >= 0 else None for i in range(len(msgs))]

    @contextlib.contextmanager
    def _assigned(self, topic, partition, offset, reset="earliest", max_wait_ms=None):
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": "unused-manual-assignment",  # librdkafka wants one; assign() never joins
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": reset,
            "fetch.max.bytes": CLIENT_MAX_BYTES,
            "max.partition.fetch.bytes": CLIENT_MAX_BYTES,
            "receive.message.max.bytes": 2 * CLIENT_MAX_BYTES,
            **({"fetch.wait.max.ms": max_wait_ms} if max_wait_ms else {}),
        })
        try:
            if offset is not None:
                consumer.assign([TopicPartition(topic, partition, offset)])
            yield consumer, TopicPartition(topic, partition)
        finally:
            consumer.close()

    @staticmethod
    def _rec(m) -> Rec:
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        ts_type, ts = m.timestamp()
        return Rec(m.partition(), m.offset(), m.key(), m.value(), _headers(m.headers()), ts,
                   ts_type == TIMESTAMP_CREATE_TIME)

    def _poll(self, consumer, count: int, deadline: float) -> list[Rec]:
        got: list[Rec] = []
        while len(got) < count and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, f"consumer error: {m.error()}"
            got.append(self._rec(m))
        return got

    def watermarks(self, topic, partition):
        with self._assigned(topic, partition, None) as (consumer, tp):
            return consumer.get_watermark_offsets(tp, timeout=10)

    def offset_for_time(self, topic, partition, timestamp):
        from confluent_kafka import TopicPartition

        with self._assigned(topic, partition, None) as (consumer, _):
            (tp,) = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp)], timeout=10)
            assert tp.error is None, tp.error
            return tp.offset if tp.offset >= 0 else None


class KafkaPythonDriver(SyncDriver):
    name = "kafka-python"

    def produce(self, topic, msgs, *, acks="all", codec="none"):
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap, acks=_acks(acks), compression_type=None if codec == "none" else codec,
            linger_ms=5000, batch_size=CLIENT_MAX_BYTES, max_request_size=CLIENT_MAX_BYTES,
        )
        try:
            futures = [
                producer.send(topic, value=m.value, key=m.key, headers=list(m.headers), partition=m.partition,
                              timestamp_ms=m.timestamp)
                for m in msgs
            ]
            producer.flush(timeout=15)
            return [f.get(timeout=1).offset if _acks(acks) != 0 else None for f in futures]
        finally:
            producer.close(timeout=5)

    @contextlib.contextmanager
    def _assigned(self, topic, partition, offset, reset="earliest", max_wait_ms=None):
        from kafka import KafkaConsumer, TopicPartition

        waits = {"fetch_max_wait_ms": max_wait_ms, "request_timeout_ms": max_wait_ms + 10000} if max_wait_ms else {}
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset=reset,
            fetch_max_bytes=CLIENT_MAX_BYTES, max_partition_fetch_bytes=CLIENT_MAX_BYTES, **waits,
        )
        tp = TopicPartition(topic, partition)
        try:
            if offset is not None:
                consumer.assign([tp])
                consumer.seek(tp, offset)
            yield consumer, tp
        finally:
            consumer.close()

    _rec = staticmethod(_rec_from_consumer_record)

    def _poll(self, consumer, count: int, deadline: float) -> list[Rec]:
        got: list[Rec] = []
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(self._rec(r) for r in batch)
        return got

    def watermarks(self, topic, partition):
        with self._assigned(topic, partition, None) as (consumer, tp):
            return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]

    def offset_for_time(self, topic, partition, timestamp):
        with self._assigned(topic, partition, None) as (consumer, tp):
            found = consumer.offsets_for_times({tp: timestamp})[tp]
            return found.offset if found is not None else None


class AioKafkaDriver(Driver):
    """aiokafka, each call run to completion in its own event loop."""

    name = "aiokafka"

    def produce(self, topic, msgs, *, acks="all", codec="none"):
        return asyncio.run(self._produce(topic, list(msgs), _acks(acks), codec))

    async def _produce(self, topic, msgs, acks, codec):
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks=acks, compression_type=None if codec == "none" else codec,
            enable_idempotence=False, max_batch_size=CLIENT_MAX_BYTES, max_request_size=CLIENT_MAX_BYTES,
        )
        await producer.start()
        try:
            result: list[int | None] = [None] * len(msgs)
            by_partition: dict[int, list[int]] = {}
            for i, m in enumerate(msgs):
                by_partition.setdefault(m.partition, []).append(i)
            for partition, indexes in by_partition.items():
                batch = producer.create_batch()
                for i in indexes:
                    m = msgs[i]
                    appended = batch.append(key=m.key, value=m.value, timestamp=m.timestamp, headers=list(m.headers))
                    assert appended is not None, "aiokafka batch is full"
                meta = await (await producer.send_batch(batch, topic, partition=partition))
                for n, i in enumerate(indexes):
                    result[i] = meta.offset + n if acks != 0 else None
            return result
        finally:
            await producer.stop()

    def _consumer(self, reset: str, **extra):
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset=reset,
            fetch_max_bytes=CLIENT_MAX_BYTES, max_partition_fetch_bytes=CLIENT_MAX_BYTES, **extra,
        )

    _rec = staticmethod(_rec_from_consumer_record)

    async def _poll(self, consumer, count: int, deadline: float) -> list[Rec]:
        got: list[Rec] = []
        while len(got) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(self._rec(r) for r in batch)
        return got

    async def _with_consumer(self, topic, partition, reset, work, **extra):
        from aiokafka import TopicPartition

        consumer = self._consumer(reset, **extra)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            return await work(consumer, tp)
        finally:
            await consumer.stop()

    def consume(self, topic, partition, offset, count, *, timeout=10.0, reset="earliest"):
        async def work(consumer, tp):
            consumer.seek(tp, offset)
            return await self._poll(consumer, count, time.monotonic() + timeout)

        return asyncio.run(self._with_consumer(topic, partition, reset, work))

    def watermarks(self, topic, partition):
        async def work(consumer, tp):
            return (await consumer.beginning_offsets([tp]))[tp], (await consumer.end_offsets([tp]))[tp]

        return asyncio.run(self._with_consumer(topic, partition, "earliest", work))

    def offset_for_time(self, topic, partition, timestamp):
        async def work(consumer, tp):
            found = (await consumer.offsets_for_times({tp: timestamp}))[tp]
            return found.offset if found is not None else None

        return asyncio.run(self._with_consumer(topic, partition, "earliest", work))

    def wait_for_new(self, topic, partition, offset, trigger, *, max_wait_ms=5000, timeout=9.0):
        async def work(consumer, tp):
            consumer.seek(tp, offset)
            assert await self._poll(consumer, 1, time.monotonic() + 1.0) == []
            trigger()
            got = await self._poll(consumer, 1, time.monotonic() + timeout)
            return (got[0] if got else None), time.monotonic()

        return asyncio.run(self._with_consumer(
            topic, partition, "earliest", work, fetch_max_wait_ms=max_wait_ms, request_timeout_ms=max_wait_ms + 10000,
        ))


# ---- topics and independent views of the log -------------------------------------------------


def kafka_python_group_consumer(bootstrap: str, topic: str, **config):
    """A kafka-python 3 KafkaConsumer subscribed to ``topic`` in a group, returned only once its
    metadata lists the topic's partitions.

    kafka-python 3.0.12 can otherwise lose its own assignment: when its first JoinGroup beats the
    topic's metadata, the leader assigns nothing and rebalances again as soon as the metadata
    arrives; if that second SyncGroup straddles the end of a ``poll(timeout_ms=...)``, the leader's
    own assignment snapshot already says "no rejoin needed", the next poll never awaits the join
    task, and the consumer sits with no partitions forever. Kafka's default
    group.initial.rebalance.delay.ms (3 s) hides the race; the tests run with 0.
    """
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, **config)
    deadline = time.monotonic() + 15
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"kafka-python never saw metadata for {topic}"
        time.sleep(0.05)
    return consumer


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})], operation_timeout=10, request_timeout=15)
    futures[name].result(timeout=15)


def confluent_send(bootstrap: str, topic: str, msgs, **conf) -> list[int]:
    """Produce with a plain librdkafka producer (acks=all) and return the acknowledged offsets."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, **conf})
    acked: list[int] = []
    failed: list = []

    def done(err, msg):
        (failed.append(err) if err else acked.append(msg.offset()))

    for m in msgs:
        producer.produce(topic, value=m.value, key=m.key, headers=list(m.headers) or None, partition=m.partition,
                         timestamp=m.timestamp or 0, on_delivery=done)
    assert producer.flush(15) == 0 and not failed, f"delivery failed: {failed}"
    return acked


def assert_client_works(bootstrap: str, topic: str) -> None:
    """A fresh librdkafka producer and consumer (new connections) still get a record through."""
    marker = f"still-alive-{time.monotonic_ns()}".encode()
    (offset,) = confluent_send(bootstrap, topic, [Msg(marker)])
    got = ConfluentDriver(bootstrap).consume(topic, 0, offset, 1, timeout=10)
    assert values(got) == [marker]


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    compression: int
    records: int


def stored_batches(bootstrap: str, topic: str, partition: int = 0, offset: int = 0) -> list[StoredBatch]:
    """The record batches the broker returns from ``offset``, read with a raw Fetch (so the test
    sees batch boundaries and codecs, which consumers hide)."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.record import MemoryRecords

    with RawConnection(bootstrap) as conn:
        response = conn.call(fetch_request(topic, partition, offset, max_wait_ms=0), FetchResponse, version=11)
    (topic_response,) = response.responses
    (part,) = topic_response.partitions
    assert part.error_code == 0, f"fetch failed with error {part.error_code}"
    records = MemoryRecords(bytes(part.records or b""))
    found = []
    while (batch := records.next_batch()) is not None:
        found.append(StoredBatch(batch.base_offset, batch.last_offset, batch.compression_type, len(list(batch))))
    return found


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, max_bytes: int = 4 * 1024 * 1024):
    from kafka.protocol.consumer import FetchRequest

    part = FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                                   partition_max_bytes=max_bytes)
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])])


def produce_later(bootstrap: str, topic: str, msg: Msg, delay: float) -> tuple[Callable[[], None], dict]:
    """A trigger for ``Driver.wait_for_new``: produce ``msg`` ``delay`` seconds after it is called,
    from a producer connected beforehand; ``times['acked']`` is when the broker acknowledged it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    producer.list_topics(topic, timeout=10)
    times: dict[str, float] = {}

    def send() -> None:
        time.sleep(delay)
        producer.produce(topic, value=msg.value, key=msg.key, partition=msg.partition)
        producer.flush(10)
        times["acked"] = time.monotonic()

    def trigger() -> None:
        times["thread"] = threading.Thread(target=send, daemon=True)
        times["thread"].start()

    return trigger, times


# ---- the contract every Python driver passes -------------------------------------------------


class DataPathContract:
    """Data-path behaviour every client must see; a test module subclasses it as ``Test<Client>``
    and sets ``driver_class``."""

    driver_class: type[Driver] = Driver

    @pytest.fixture
    def driver(self, broker) -> Driver:
        return self.driver_class(broker.bootstrap)

    @pytest.mark.parametrize("codec", CODECS)
    def test_roundtrip_every_record_shape(self, driver, broker, topic_name, codec):
        acked = driver.produce(topic_name, SAMPLE, codec=codec)
        assert acked == list(range(len(SAMPLE)))
        got = driver.consume(topic_name, 0, 0, len(SAMPLE))
        assert [r.msg() for r in got] == list(SAMPLE)
        assert offsets(got) == acked
        (batch,) = stored_batches(broker.bootstrap, topic_name)
        assert (batch.base_offset, batch.last_offset, batch.records) == (0, len(SAMPLE) - 1, len(SAMPLE))
        # librdkafka silently sends a batch uncompressed when the broker's ApiVersions lack the API
        # it keys codec support on (lz4: FindCoordinator, any version; see rdkafka_feature.c).
        assert batch.compression == CODEC_IDS[codec], f"the stored batch is not {codec}-compressed"

    def test_large_message(self, driver, topic_name):
        big = Msg(bytes(i % 251 for i in range(LARGE_VALUE_BYTES)), b"big")
        small = Msg(b"after-the-big-one")
        assert driver.produce(topic_name, [big]) == [0]
        assert driver.produce(topic_name, [small]) == [1]
        got = driver.consume(topic_name, 0, 0, 2)
        assert [r.msg() for r in got] == [big, small]

    @pytest.mark.parametrize("acks", [0, 1, "all"])
    def test_acks(self, driver, topic_name, acks):
        msgs = numbered(5, prefix=f"acks-{acks}")
        acked = driver.produce(topic_name, msgs, acks=acks)
        assert acked == ([None] * 5 if acks == 0 else [0, 1, 2, 3, 4])
        got = driver.consume(topic_name, 0, 0, 5)
        assert [r.msg() for r in got] == msgs and offsets(got) == [0, 1, 2, 3, 4]

    def test_explicit_partitions(self, driver, broker, topic_name):
        create_topic(broker.bootstrap, topic_name, partitions=3)
        msgs = [m for p in (2, 0, 1) for m in numbered(p + 1, prefix=f"p{p}", partition=p)]
        acked = driver.produce(topic_name, msgs)
        assert acked == [0, 1, 2, 0, 0, 1]
        for p in range(3):
            got = driver.consume(topic_name, p, 0, p + 1)
            assert [r.msg() for r in got] == numbered(p + 1, prefix=f"p{p}", partition=p)
            assert driver.watermarks(topic_name, p) == (0, p + 1)

    def test_watermarks(self, driver, broker, topic_name):
        create_topic(broker.bootstrap, topic_name)
        assert driver.watermarks(topic_name, 0) == (0, 0)
        driver.produce(topic_name, numbered(7))
        assert driver.watermarks(topic_name, 0) == (0, 7)

    def test_create_time_and_offsets_for_times(self, driver, topic_name):
        msgs = numbered(5, timestamps=True)
        driver.produce(topic_name, msgs)
        got = driver.consume(topic_name, 0, 0, 5)
        assert [(r.timestamp, r.create_time) for r in got] == [(m.timestamp, True) for m in msgs]
        assert driver.offset_for_time(topic_name, 0, BASE_TIMESTAMP - 1) == 0
        assert driver.offset_for_time(topic_name, 0, BASE_TIMESTAMP + 2000) == 2
        assert driver.offset_for_time(topic_name, 0, BASE_TIMESTAMP + 2500) == 3
        assert driver.offset_for_time(topic_name, 0, BASE_TIMESTAMP + 9000) is None

    def test_consume_from_the_middle_of_a_batch(self, driver, broker, topic_name):
        msgs = numbered(10, prefix="mid")
        driver.produce(topic_name, msgs, codec="gzip")  # a compressed batch cannot be sliced
        assert [(b.base_offset, b.last_offset) for b in stored_batches(broker.bootstrap, topic_name)] == [(0, 9)]
        got = driver.consume(topic_name, 0, 4, 6)
        assert offsets(got) == [4, 5, 6, 7, 8, 9]
        assert [r.msg() for r in got] == msgs[4:]

    def test_long_poll_gets_new_data_before_max_wait(self, driver, broker, topic_name):
        driver.produce(topic_name, [Msg(b"existing")])
        trigger, times = produce_later(broker.bootstrap, topic_name, Msg(b"late"), delay=1.0)
        rec, arrived = driver.wait_for_new(topic_name, 0, 1, trigger, max_wait_ms=5000)
        assert rec is not None and (rec.offset, rec.value) == (1, b"late")
        times["thread"].join(5)
        # Without a broker that wakes the parked fetch, the record would wait for the 5 s
        # max wait of the fetch already in flight (about 3 s after the ack, given the 1 s delay
        # and the consumer's 1 s settling poll).
        assert arrived - times["acked"] < 1.5, f"record arrived {arrived - times['acked']:.2f}s after its ack"

    def test_offset_out_of_range_resets_to_earliest(self, driver, topic_name):
        driver.produce(topic_name, numbered(3))
        got = driver.consume(topic_name, 0, 1000, 3, reset="earliest")
        assert offsets(got) == [0, 1, 2]


# ---- raw protocol ----------------------------------------------------------------------------


_correlation_ids = itertools.count(1)




def request_header(api_key: int, version: int, correlation_id: int, *, flexible: bool,
                   client_id: str = "compat-tests") -> bytes:
    """Request header v1 (v2 adds an empty tagged-field section for flexible versions)."""
    encoded = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(encoded)) + encoded
    return header + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@dataclass
class RawConnection:
    """A plain blocking socket speaking Kafka framing, for requests clients never send."""

    bootstrap: str
    timeout: float = 10.0
    sock: socket.socket = field(init=False)

    def __post_init__(self) -> None:
        host, port = self.bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=self.timeout)

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_request(self, request, version: int, *, api_key: int | None = None) -> int:
        """Frame and send ``request`` (a kafka-python message) at ``version``; the header may
        name another ``api_key`` or the body may be encoded at a version the header does not
        name, for malformed requests."""
        correlation_id = next(_correlation_ids)
        body = bytes(request.encode(version=min(version, request.max_version)))
        header = request_header(request.API_KEY if api_key is None else api_key, version, correlation_id,
                                flexible=request.flexible_version_q(min(version, request.max_version)))
        self.send(frame(header + body))
        return correlation_id

    def recv_exact(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def read_response(self, response_class, version: int, correlation_id: int, *, header_tagged: bool | None = None):
        payload = self.recv_frame()
        (got_id,) = struct.unpack_from(">i", payload)
        assert got_id == correlation_id, f"response correlation id {got_id}, expected {correlation_id}"
        if header_tagged is None:
            header_tagged = response_class.flexible_version_q(version) and response_class.API_KEY != 18
        return response_class.decode(payload[5 if header_tagged else 4:], version=version)

    def call(self, request, response_class, version: int):
        return self.read_response(response_class, version, self.send_request(request, version))

    def closed_by_broker(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within ``timeout`` without
        sending anything first."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        return data == b""


@functools.cache
def _admin_for(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def admin(broker):
    """One confluent AdminClient per broker for the test, kept alive: a destroyed client fails its
    futures. compat-tests/conftest.py drops them after each test."""
    return _admin_for(broker.bootstrap)


def drop_admin_clients() -> None:
    _admin_for.cache_clear()


def init_producer_id(conn: RawConnection, version: int, transactional_id=None, producer_id=-1, epoch=-1):
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

    fields = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000}
    if version >= 3:
        fields.update(producer_id=producer_id, producer_epoch=epoch)
    return conn.call(InitProducerIdRequest(**fields), InitProducerIdResponse, version)


def first_produce_error(conf: dict, topic: str) -> int | None:
    """The error code of one message produced by a new confluent producer (None: acknowledged);
    a new producer each time, as librdkafka remembers a topic's authorization failure."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({**conf, "message.timeout.ms": 5000})
    outcome = []
    try:
        producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    except KafkaException as exc:
        return exc.args[0].code()
    producer.flush(15)
    assert len(outcome) == 1
    return None if outcome[0] is None else outcome[0].code()


def first_consume_error(conf: dict, topic: str, group: str, timeout: float = 15) -> int | None:
    """The first error code a new confluent consumer in ``group`` meets subscribing to the topic
    (None: it got a message)."""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                return None
            if msg.error().code() != KafkaError._PARTITION_EOF:
                return msg.error().code()
        raise AssertionError(f"the consumer of {topic} got neither a message nor an error")
    finally:
        consumer.close()
