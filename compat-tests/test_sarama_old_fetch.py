"""Sarama 1.22 consumers at ``0.10.2.0`` (V0_10_2_0: Fetch v3, magic 1 message sets) against a
real broker process, through test_sarama.py's Go CLI: the stored RecordBatch v2 is down-converted
for them as by Kafka 3.x (headers dropped, timestamps kept, compressed batches as one wrapper).

Sarama below 0.10.1 resolves its starting offsets with ListOffsets v0, which is not served, so
Fetch v0-2 are covered by compat-tests/test_old_consumers.py (kafka-python and raw requests).
"""

from __future__ import annotations

import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import BASE_TIMESTAMP, CODEC_IDS, ConfluentDriver, Msg, create_topic, stored_batches  # noqa: E402
from test_old_consumers import RecordingProxy  # noqa: E402
from test_sarama import (  # noqa: E402,F401 - sarama_cli and members are fixtures
    FAST, NEWEST, SHAPES, UNSUPPORTED_COMPRESSION_TYPE, as_msg, by_partition, committed, consume, members, produce,
    sarama_cli, unb64,
)

OLD_FETCH = "0.10.2.0"  # sarama.V0_10_2_0: Fetch v3, ListOffsets v1, Metadata v0
FETCH = 1


def without_headers(msgs) -> list[Msg]:
    return [Msg(m.value, m.key, (), m.timestamp, m.partition) for m in msgs]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_old_sarama_reads_what_confluent_wrote(sarama_cli, broker_factory, topic_name, codec):
    proxy = RecordingProxy()
    try:
        broker = broker_factory("--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}")
        proxy.upstream_port = broker.port
        ConfluentDriver(broker.bootstrap).produce(topic_name, SHAPES, codec=codec)
        assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [CODEC_IDS[codec]]
        got = consume(sarama_cli, broker, topic_name, len(SHAPES), version=OLD_FETCH, bootstrap=proxy.bootstrap)
        assert proxy.versions(FETCH) == {3}
    finally:
        proxy.close()
    assert [as_msg(m) for m in got["messages"]] == without_headers(SHAPES)
    assert [m["offset"] for m in got["messages"]] == list(range(len(SHAPES)))
    assert got["highWaterMark"] == len(SHAPES)


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_old_sarama_reads_what_a_new_sarama_wrote(sarama_cli, broker, topic_name, codec):
    produce(sarama_cli, broker, topic_name, SHAPES, version=NEWEST, codec=codec)
    got = consume(sarama_cli, broker, topic_name, len(SHAPES), version=OLD_FETCH)
    assert [as_msg(m) for m in got["messages"]] == without_headers(SHAPES)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_old_sarama_from_the_middle_of_a_batch(sarama_cli, broker, topic_name, codec):
    msgs = [Msg(f"m{i}".encode() * 20, f"k{i}".encode(), (("n", str(i).encode()),), BASE_TIMESTAMP + i * 1000)
            for i in range(10)]
    ConfluentDriver(broker.bootstrap).produce(topic_name, msgs, codec=codec)
    got = consume(sarama_cli, broker, topic_name, 6, offset=4, version=OLD_FETCH)
    assert [m["offset"] for m in got["messages"]] == [4, 5, 6, 7, 8, 9]
    assert [as_msg(m) for m in got["messages"]] == without_headers(msgs[4:])


def test_old_sarama_many_batches_small_fetch_size(sarama_cli, broker, topic_name):
    """Batches of every codec one after another, read with a 1 KiB fetch size: converted messages
    are cut to the stored bytes read, so Sarama fetches again from where it stopped; a batch
    larger than the fetch size comes whole (Fetch v3, KIP-74)."""
    driver = ConfluentDriver(broker.bootstrap)
    expected = []
    for i, codec in enumerate(["gzip", "none", "snappy", "lz4", "none"]):
        msgs = [Msg(f"{codec}-{i}-{n} ".encode() * 30, timestamp=BASE_TIMESTAMP + i) for n in range(4)]
        driver.produce(topic_name, msgs, codec=codec)
        expected += msgs
    big = Msg(bytes(range(256)) * 400, b"big", timestamp=BASE_TIMESTAMP + 99)
    driver.produce(topic_name, [big])
    expected.append(big)
    got = consume(sarama_cli, broker, topic_name, len(expected), version=OLD_FETCH, fetch_default=1024)
    assert [as_msg(m) for m in got["messages"]] == expected
    assert [m["offset"] for m in got["messages"]] == list(range(len(expected)))


def test_old_sarama_log_append_time(sarama_cli, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    ConfluentDriver(broker.bootstrap).produce(topic_name, SHAPES[:4], codec="gzip")
    appended = {r.timestamp for r in ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 4)}
    assert len(appended) == 1
    got = consume(sarama_cli, broker, topic_name, 4, version=OLD_FETCH)
    assert [m["timestamp"] for m in got["messages"]] == [appended.pop()] * 4


def test_old_sarama_stops_at_a_zstd_batch(sarama_cli, broker, topic_name):
    """Batches before a zstd batch are read; at the zstd batch Kafka answers
    UNSUPPORTED_COMPRESSION_TYPE (it cannot be down-converted), which Sarama reports."""
    driver = ConfluentDriver(broker.bootstrap)
    driver.produce(topic_name, [Msg(b"before-0"), Msg(b"before-1")])
    driver.produce(topic_name, [Msg(b"zstd " * 100)], codec="zstd")
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [0, CODEC_IDS["zstd"]]
    got = consume(sarama_cli, broker, topic_name, 3, version=OLD_FETCH, timeout_ms=5000, expect_errors=True)
    assert [unb64(m["value"]) for m in got["messages"]] == [b"before-0", b"before-1"]
    assert got["errors"] and {e["code"] for e in got["errors"]} == {UNSUPPORTED_COMPRESSION_TYPE}, got["errors"]


def test_old_sarama_consumer_group_commits_and_resumes(sarama_cli, broker_factory, members, topic_name):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name, partitions=3)
    for p, codec in enumerate(["none", "gzip", "snappy"]):
        ConfluentDriver(broker.bootstrap).produce(
            topic_name, [Msg(f"a{p}-{i}".encode() * 10, partition=p, headers=(("h", b"x"),)) for i in range(10)],
            codec=codec)
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = members(broker, group, [topic_name], version=OLD_FETCH)
    member.setup({topic_name: [0, 1, 2]})
    got = by_partition(member.wait_messages(30))
    assert got == {p: [(i, f"a{p}-{i}".encode() * 10) for i in range(10)] for p in range(3)}
    member.stop()
    assert committed(sarama_cli, broker, group, topic_name, range(3)) == {0: 10, 1: 10, 2: 10}

    again = members(broker, group, [topic_name], version=OLD_FETCH)
    again.setup({topic_name: [0, 1, 2]})
    produce(sarama_cli, broker, topic_name, [Msg(f"sentinel-{p}".encode(), partition=p) for p in range(3)])
    assert by_partition(again.wait_messages(3)) == {p: [(10, f"sentinel-{p}".encode())] for p in range(3)}
    again.stop()
