"""Old consumers against a real broker process: Fetch v0-3, served with Kafka 3.x's
down-conversion of the stored RecordBatch v2 to legacy message sets (magic 0 for v0-1, magic 1
for v2-3).

kafka-python 3.0.12 with an explicit ``api_version`` skips ApiVersions and uses that broker
version's request versions: (0, 10, 1) -> Fetch v3, (0, 10, 0) -> Fetch v2, (0, 9) -> Fetch v1. A
recording proxy between client and broker checks which Fetch versions it really sent. The
records are written by a modern client (confluent-kafka: RecordBatch v2 with headers and
compression). Raw requests (kafka-python's protocol classes) cover what clients do not show:
error codes, byte limits, the long poll, v0.

ListOffsets v0 is not served, so the (0, 10, 0) and (0, 9) consumers here start from an explicit
position (seek) or from offsets the group committed before, never from an offset reset.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition as ConfluentPartition

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    BASE_TIMESTAMP, ConfluentDriver, Msg, RawConnection, confluent_send, create_topic, kafka_python_group_consumer,
    stored_batches,
)

FETCH = 1
FAST = ("--set", "group.initial.rebalance.delay.ms=0", "--set", "group.min.session.timeout.ms=1000")
# kafka-python api_version -> (Fetch version it sends, message magic it can read)
OLD_CLIENTS = {(0, 10, 1): (3, 1), (0, 10, 0): (2, 1), (0, 9): (1, 0)}
OVERFLOW_MARKER = struct.pack(">qi", -1, 61)  # Kafka's overflow batch: offset -1, a length past the end

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
UNSUPPORTED_VERSION = 35
UNSUPPORTED_COMPRESSION_TYPE = 76

# Every shape a legacy message can carry, written with headers (which it cannot: dropped) and
# explicit CreateTime timestamps.
SHAPES = [
    Msg(b"v-plain", b"k-plain", timestamp=BASE_TIMESTAMP),
    Msg(b"v-headers", b"k-headers", (("h1", b"one"), ("h2", b"two")), BASE_TIMESTAMP + 1),
    Msg(None, b"k-tombstone", timestamp=BASE_TIMESTAMP + 2),
    Msg(b"", b"k-empty-value", timestamp=BASE_TIMESTAMP + 3),
    Msg(b"v-no-key", timestamp=BASE_TIMESTAMP + 4),
    Msg(b"v-empty-key", b"", timestamp=BASE_TIMESTAMP + 5),
    Msg(bytes(range(256)) * 4, b"\x00\xff binary", timestamp=BASE_TIMESTAMP + 6),
    Msg(b"compressible " * 300, b"k-repetitive", timestamp=BASE_TIMESTAMP + 7),
    Msg("välue ✓".encode(), "kéy".encode(), (("empty", b""),), BASE_TIMESTAMP + 8),
]


# ---- a proxy that records the request versions ----------------------------------------------------


class RecordingProxy:
    """Forwards loopback connections to the broker and notes (api key, api version) of every
    request. Start the broker with ``advertised.listeners`` pointing here."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream_port: int | None = None
        self.requests: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def versions(self, api_key: int) -> set[int]:
        with self.lock:
            return {version for key, version in self.requests if key == api_key}

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                self.sockets += [client, broker]
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=self._copy, args=(broker, client), daemon=True).start()

    def _requests(self, source: socket.socket, target: socket.socket) -> None:
        buffer = b""
        try:
            while data := source.recv(65536):
                buffer += data
                while len(buffer) >= 8 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                    size = struct.unpack_from(">i", buffer)[0]
                    with self.lock:
                        self.requests.append(struct.unpack_from(">hh", buffer, 4))
                    target.sendall(buffer[:4 + size])
                    buffer = buffer[4 + size:]
        except OSError:
            pass
        self._close(source, target)

    def _copy(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        self._close(source, target)

    @staticmethod
    def _close(*sockets: socket.socket) -> None:
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            self._close(sock)
            sock.close()


@pytest.fixture
def proxied_broker(broker_factory):
    """(broker, proxy): clients that bootstrap from the proxy stay behind it (advertised there)."""
    proxy = RecordingProxy()
    broker = broker_factory(*FAST, "--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}")
    proxy.upstream_port = broker.port
    yield broker, proxy
    proxy.close()


# ---- kafka-python at old versions ----------------------------------------------------------------------


def old_consumer(bootstrap: str, api_version, **config):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, enable_auto_commit=False,
                         **{"group_id": None, **config})


def poll_records(consumer, count: int, timeout: float = 20) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


def read_assigned(bootstrap: str, api_version, topic: str, offset: int, count: int, partition: int = 0,
                  **config) -> list:
    from kafka import TopicPartition

    consumer = old_consumer(bootstrap, api_version, **config)
    tp = TopicPartition(topic, partition)
    try:
        consumer.assign([tp])
        consumer.seek(tp, offset)
        return poll_records(consumer, count)
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("api_version", list(OLD_CLIENTS), ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_reads_batches_a_modern_producer_wrote(proxied_broker, topic_name, api_version, codec):
    broker, proxy = proxied_broker
    ConfluentDriver(broker.bootstrap).produce(topic_name, SHAPES, codec=codec)
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [
        {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}[codec]]

    got = read_assigned(proxy.bootstrap, api_version, topic_name, 0, len(SHAPES))

    fetch_version, magic = OLD_CLIENTS[api_version]
    assert proxy.versions(FETCH) == {fetch_version}
    assert [(r.offset, r.key, r.value) for r in got] == [(i, m.key, m.value) for i, m in enumerate(SHAPES)]
    assert all(not r.headers for r in got)  # a legacy message has no headers
    if magic == 1:
        assert [(r.timestamp, r.timestamp_type) for r in got] == [(m.timestamp, 0) for m in SHAPES]
    else:
        assert {(r.timestamp, r.timestamp_type) for r in got} == {(None, None)}  # magic 0: no timestamp


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("api_version", list(OLD_CLIENTS), ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_from_the_middle_of_a_batch(broker, topic_name, api_version, codec):
    """Uncompressed: Kafka leaves out the messages below the fetch offset; compressed: the whole
    wrapper comes, and the client skips them. Either way the consumer starts at 4."""
    msgs = [Msg(f"mid-{i}".encode(), f"k{i}".encode()) for i in range(10)]
    ConfluentDriver(broker.bootstrap).produce(topic_name, msgs, codec=codec)
    got = read_assigned(broker.bootstrap, api_version, topic_name, 4, 6)
    assert [(r.offset, r.value) for r in got] == [(i, f"mid-{i}".encode()) for i in range(4, 10)]


def test_old_kafka_python_sees_log_append_time(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    ConfluentDriver(broker.bootstrap).produce(topic_name, SHAPES[:3], codec="gzip")
    appended = {r.timestamp for r in ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 3)}
    assert len(appended) == 1 and appended != {BASE_TIMESTAMP}
    got = read_assigned(broker.bootstrap, (0, 10, 1), topic_name, 0, 3)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(appended.pop(), 1)] * 3


def test_old_kafka_python_across_batches_and_codecs(broker, topic_name):
    driver = ConfluentDriver(broker.bootstrap)
    for i, codec in enumerate(["gzip", "none", "lz4", "snappy", "none"]):
        driver.produce(topic_name, [Msg(f"{codec}-{i}-{n}".encode()) for n in range(3)], codec=codec)
    for api_version in OLD_CLIENTS:
        got = read_assigned(broker.bootstrap, api_version, topic_name, 0, 15, max_partition_fetch_bytes=300)
        assert [r.offset for r in got] == list(range(15)), api_version


def test_large_message_kip74_for_v3_record_too_large_before(broker, topic_name):
    """Fetch v3 sends a first batch larger than the partition limit whole (KIP-74); v0-2 keep the
    limit hard, and the old consumer learns of the too-large message (Kafka's overflow marker)."""
    from kafka import TopicPartition
    from kafka.consumer.fetcher import RecordTooLargeError

    big = Msg(bytes(i % 251 for i in range(100_000)), b"big")
    ConfluentDriver(broker.bootstrap).produce(topic_name, [big, Msg(b"small")])
    got = read_assigned(broker.bootstrap, (0, 10, 1), topic_name, 0, 2, max_partition_fetch_bytes=1024)
    assert [(r.key, r.value) for r in got] == [(big.key, big.value), (None, b"small")]

    consumer = old_consumer(broker.bootstrap, (0, 10, 0), max_partition_fetch_bytes=1024)
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    try:
        with pytest.raises(RecordTooLargeError):
            poll_records(consumer, 1)
    finally:
        consumer.close()
    got = read_assigned(broker.bootstrap, (0, 10, 0), topic_name, 0, 2, max_partition_fetch_bytes=200_000)
    assert [r.value for r in got] == [big.value, b"small"]


def group_read(bootstrap: str, api_version, topic: str, group: str, until) -> list[tuple[int, int, bytes]]:
    consumer = kafka_python_group_consumer(bootstrap, topic, api_version=api_version, group_id=group,
                                           auto_offset_reset="earliest", enable_auto_commit=False,
                                           session_timeout_ms=6000, heartbeat_interval_ms=500)
    got: list[tuple[int, int, bytes]] = []
    try:
        deadline = time.monotonic() + 40
        while not until(got):
            assert time.monotonic() < deadline, got
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset, r.value) for r in records]
        consumer.commit()
    finally:
        consumer.close()
    return got


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([ConfluentPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 9)], ids=["0.10.1", "0.9"])
def test_old_kafka_python_group_consumes_commits_and_resumes(proxied_broker, topic_name, api_version):
    """A group member at an old version over three partitions; a restarted member resumes after
    the committed offsets (a sentinel written after the restart must arrive). (0, 9) would reset
    missing offsets with ListOffsets v0, which is not served, so its group starts from offsets
    committed beforehand by a modern client."""
    broker, proxy = proxied_broker
    create_topic(broker.bootstrap, topic_name, partitions=3)
    codecs = ["gzip", "none", "snappy"]
    for p in range(3):
        ConfluentDriver(broker.bootstrap).produce(
            topic_name, [Msg(f"a{p}-{i}".encode(), partition=p, headers=(("h", b"x"),)) for i in range(10)],
            codec=codecs[p])
    group = f"g-{uuid.uuid4().hex[:8]}"
    if api_version == (0, 9):
        seed = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        seed.commit(offsets=[ConfluentPartition(topic_name, p, 0) for p in range(3)], asynchronous=False)
        seed.close()

    first = group_read(proxy.bootstrap, api_version, topic_name, group, lambda got: len(got) >= 30)
    assert sorted(first) == sorted((p, i, f"a{p}-{i}".encode()) for p in range(3) for i in range(10))
    assert committed(broker.bootstrap, group, topic_name, 3) == {0: 10, 1: 10, 2: 10}

    confluent_send(broker.bootstrap, topic_name, [Msg(b"later", partition=1), Msg(b"sentinel", partition=2)])
    second = group_read(proxy.bootstrap, api_version, topic_name, group,
                        lambda got: any(v == b"sentinel" for _, _, v in got))
    assert sorted(second) == [(1, 10, b"later"), (2, 10, b"sentinel")]
    assert proxy.versions(FETCH) == {OLD_CLIENTS[api_version][0]}


# ---- raw Fetch v0-3 --------------------------------------------------------------------------------


def fetch(bootstrap: str, version: int, topics: dict[str, list[tuple[int, int, int]]], *, max_wait_ms: int = 0,
          min_bytes: int = 0, max_bytes: int = 0x7FFFFFFF, replica_id: int = -1):
    """A Fetch at ``version``; topics: name -> [(partition, fetch offset, partition max bytes)].
    Returns {(topic, partition): (error code, high watermark, records bytes)}."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    topic_cls = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        topics=[topic_cls(topic=name, partitions=[
            topic_cls.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=m) for p, o, m in parts])
            for name, parts in topics.items()],
    )
    with RawConnection(bootstrap, timeout=60) as conn:
        response = conn.call(request, FetchResponse, version=version)
    return {(t.topic, p.partition_index): (p.error_code, p.high_watermark, bytes(p.records or b""))
            for t in response.responses for p in t.partitions}


def messages(data: bytes) -> list[tuple[int, int, bytes | None]]:
    """(magic, offset, value) of every message, read with kafka-python's legacy reader."""
    from kafka.record import MemoryRecords

    records = MemoryRecords(data)
    found = []
    while (batch := records.next_batch()) is not None:
        found += [(batch.magic, r.offset, r.value) for r in batch]
    return found


def read_from(bootstrap: str, version: int, topic: str, offset: int, end: int) -> list[tuple[int, int, bytes | None]]:
    """Messages from ``offset`` up to ``end``, fetching again after the last one received, as a
    client does: converted messages are cut to the stored bytes read (legacy messages are larger
    than v2 records), so one fetch may not bring everything it read."""
    found: list[tuple[int, int, bytes | None]] = []
    while offset < end:
        error, _, records = fetch(bootstrap, version, {topic: [(0, offset, 1 << 20)]})[(topic, 0)]
        assert error == 0
        got = [m for m in messages(records) if m[1] >= offset]
        assert got, f"no progress at offset {offset}"
        found += got
        offset = got[-1][1] + 1
    return found


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_raw_old_fetch_magic_errors_and_high_watermark(broker, topic_name, version):
    driver = ConfluentDriver(broker.bootstrap)
    driver.produce(topic_name, [Msg(f"r{i} ".encode() * 50) for i in range(5)], codec="gzip")
    driver.produce(topic_name, [Msg(f"r{i} ".encode() * 50) for i in range(5, 8)])
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [1, 0]
    magic = 0 if version <= 1 else 1
    assert read_from(broker.bootstrap, version, topic_name, 0, 8) == [
        (magic, i, f"r{i} ".encode() * 50) for i in range(8)]
    found = fetch(broker.bootstrap, version, {topic_name: [(0, 0, 1 << 20), (3, 0, 1 << 20)],
                                              "no-such-topic": [(0, 0, 1 << 20)]})
    assert found[(topic_name, 0)][:2] == (0, 8)
    assert found[(topic_name, 3)][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert found[("no-such-topic", 0)][0] == UNKNOWN_TOPIC_OR_PARTITION
    # uncompressed: the messages below the fetch offset are left out; compressed: the wrapper whole
    assert [m[1] for m in messages(fetch(broker.bootstrap, version, {topic_name: [(0, 6, 1 << 20)]})
                                   [(topic_name, 0)][2])] == [6, 7]
    assert [m[1] for m in messages(fetch(broker.bootstrap, version, {topic_name: [(0, 3, 1 << 20)]})
                                   [(topic_name, 0)][2])][:5] == [0, 1, 2, 3, 4]
    # at the end: nothing; past it: OFFSET_OUT_OF_RANGE
    assert fetch(broker.bootstrap, version, {topic_name: [(0, 8, 1 << 20)]})[(topic_name, 0)] == (0, 8, b"")
    assert fetch(broker.bootstrap, version, {topic_name: [(0, 9, 1 << 20)]})[(topic_name, 0)][0] == \
        OFFSET_OUT_OF_RANGE


def test_raw_partition_limits_v0_2_hard_v3_kip74(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    driver = ConfluentDriver(broker.bootstrap)
    for p in range(2):
        driver.produce(topic_name, [Msg(b"L" * 3000, partition=p)])
        driver.produce(topic_name, [Msg(b"s" * 10, partition=p)])
    small = {topic_name: [(0, 0, 1000), (1, 0, 1000)]}
    for version in (0, 1, 2):
        found = fetch(broker.bootstrap, version, small)
        # the first message does not fit: Kafka's overflow marker, which old clients take for
        # a message larger than their fetch size
        assert found[(topic_name, 0)] == (0, 2, OVERFLOW_MARKER) == found[(topic_name, 1)]
        assert fetch(broker.bootstrap, version, {topic_name: [(0, 0, 0)]})[(topic_name, 0)] == (0, 2, b"")
    found = fetch(broker.bootstrap, 3, small)
    # v3: the first batch of the response goes out whole, then the limits hold
    assert [m[1] for m in messages(found[(topic_name, 0)][2])] == [0]
    assert found[(topic_name, 1)] == (0, 2, b"")
    # v3 max_bytes: the first partition's first batch, then nothing
    found = fetch(broker.bootstrap, 3, {topic_name: [(0, 0, 1 << 20), (1, 0, 1 << 20)]}, max_bytes=500)
    assert [m[1] for m in messages(found[(topic_name, 0)][2])] == [0]
    assert found[(topic_name, 1)][2] == b""
    # v0-2 have no response limit
    found = fetch(broker.bootstrap, 2, {topic_name: [(0, 0, 1 << 20), (1, 0, 1 << 20)]})
    assert [[m[1] for m in messages(found[(topic_name, p)][2])] for p in range(2)] == [[0, 1], [0, 1]]


def test_raw_long_poll_is_woken_by_new_data(broker, topic_name):
    """A Fetch v2 parked at the log end (max wait 30 s) returns the record produced meanwhile; if
    nothing woke it, it would come back empty after its max wait."""
    confluent_send(broker.bootstrap, topic_name, [Msg(b"first")])
    sender = threading.Thread(target=lambda: (time.sleep(0.5), confluent_send(broker.bootstrap, topic_name,
                                                                               [Msg(b"late")])))
    sender.start()
    found = fetch(broker.bootstrap, 2, {topic_name: [(0, 1, 1 << 20)]}, max_wait_ms=30_000, min_bytes=1)
    sender.join(30)
    error, high_watermark, records = found[(topic_name, 0)]
    assert (error, high_watermark, messages(records)) == (0, 2, [(1, 1, b"late")])


def test_raw_downconversion_disabled_answers_unsupported_version(broker, topic_name):
    """message.downconversion.enable=false: Kafka answers UNSUPPORTED_VERSION to every fetch that
    would need down-conversion (v0-3) from a consumer, not to v4+ nor to a replica fetch."""
    create_topic(broker.bootstrap, topic_name, config={"message.downconversion.enable": "false"})
    confluent_send(broker.bootstrap, topic_name, [Msg(b"modern only")])
    for version in range(4):
        assert fetch(broker.bootstrap, version, {topic_name: [(0, 0, 1 << 20)]})[(topic_name, 0)] == \
            (UNSUPPORTED_VERSION, -1, b"")
    error, _, records = fetch(broker.bootstrap, 4, {topic_name: [(0, 0, 1 << 20)]})[(topic_name, 0)]
    assert error == 0 and records
    # a replica fetch is not refused for it (here: not a replica of the partition at all)
    assert fetch(broker.bootstrap, 3, {topic_name: [(0, 0, 1 << 20)]}, replica_id=7)[(topic_name, 0)][0] == \
        NOT_LEADER_OR_FOLLOWER


def test_raw_zstd_topic_and_zstd_batches(broker, topic_name):
    """A zstd topic (compression.type) refuses every Fetch below v10. In another topic a zstd
    batch cannot be down-converted: the batches before it come back, and a fetch that starts at
    it gets UNSUPPORTED_COMPRESSION_TYPE (LazyDownConversionRecords)."""
    zstd_topic = f"{topic_name}-zstd"
    create_topic(broker.bootstrap, zstd_topic, config={"compression.type": "zstd"})
    confluent_send(broker.bootstrap, zstd_topic, [Msg(b"z")])
    for version in range(4):
        assert fetch(broker.bootstrap, version, {zstd_topic: [(0, 0, 1 << 20)]})[(zstd_topic, 0)] == \
            (UNSUPPORTED_COMPRESSION_TYPE, -1, b"")

    driver = ConfluentDriver(broker.bootstrap)
    driver.produce(topic_name, [Msg(b"plain-0"), Msg(b"plain-1")])
    driver.produce(topic_name, [Msg(b"zstd-2 " * 50), Msg(b"zstd-3 " * 50)], codec="zstd")
    driver.produce(topic_name, [Msg(b"plain-4")])
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [0, 4, 0]
    error, high_watermark, records = fetch(broker.bootstrap, 3, {topic_name: [(0, 0, 1 << 20)]})[(topic_name, 0)]
    assert (error, high_watermark, messages(records)) == (0, 5, [(1, 0, b"plain-0"), (1, 1, b"plain-1")])
    assert fetch(broker.bootstrap, 1, {topic_name: [(0, 2, 1 << 20)]})[(topic_name, 0)] == \
        (UNSUPPORTED_COMPRESSION_TYPE, -1, b"")
    assert messages(fetch(broker.bootstrap, 0, {topic_name: [(0, 4, 1 << 20)]})[(topic_name, 0)][2]) == \
        [(0, 4, b"plain-4")]
