"""Sarama 1.22 (Go; Debian's golang-github-shopify-sarama-dev, built with Debian's Go 1.19 in
GOPATH mode) against a real broker process, through the small CLI in go/ (it prints JSON; the
asserts live here).

Sarama 1.22 picks request versions from ``config.Version``, mostly hard-coded per API:

- ``2.2.0`` (V2_2_0_0, the newest it knows): Produce v3 (RecordBatch v2), Fetch v4, Metadata v5,
  ListOffsets v1, CreateTopics v2, DeleteTopics v1, CreatePartitions v0, AlterConfigs v0,
  DescribeConfigs v0 (always), FindCoordinator v0, JoinGroup v1, SyncGroup/Heartbeat/LeaveGroup
  v0, OffsetCommit v1 (v2 with Consumer.Offsets.Retention), OffsetFetch v1, DescribeGroups/ListGroups
  v0, DeleteRecords v0, InitProducerId v0;
- ``0.11.0.0``: the same data path (the first version with headers and RecordBatch v2), Metadata v1;
- ``0.10.2.0`` (Produce v2, magic-1 message sets with timestamps) and ``0.8.2.0`` (Produce v0,
  magic-0 message sets without): the legacy produce path, read back with a newer Sarama (old
  consumers on Fetch v0-3 are in test_sarama_old_fetch.py).

zstd: Sarama 1.22 compresses with zstd but still sends Produce v3, so Kafka (and the broker) refuse
it (UNSUPPORTED_COMPRESSION_TYPE, zstd needs Produce v7); it can still read zstd batches.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    BASE_TIMESTAMP, CODEC_IDS, ConfluentDriver, Msg, RawConnection, admin, create_topic, fetch_request,
    stored_batches,
)
from proxy import FaultyProxy  # noqa: E402

GO_DIR = Path(__file__).parent / "go"
GOPATH = Path("/usr/share/gocode")
SARAMA_SRC = GOPATH / "src/github.com/Shopify/sarama"
INSTALL_HINT = "scripts/test.sh installs it: apt-get install golang-go golang-github-shopify-sarama-dev gcc"

NEWEST = "2.2.0"  # sarama.V2_2_0_0, Sarama 1.22's MaxVersion
OLD = "0.11.0.0"  # sarama.V0_11_0_0: the oldest with headers, RecordBatch v2 and Fetch v4
DATA_VERSIONS = (NEWEST, OLD)
FAST = ("--set", "group.initial.rebalance.delay.ms=0")

# Kafka error codes
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
UNSUPPORTED_COMPRESSION_TYPE = 76


# ---- the CLI -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sarama_cli(tmp_path_factory) -> Path:
    """Build go/ once per session (GOPATH mode against Debian's Go sources; cgo for zstd)."""
    go = shutil.which("go")
    assert go, f"the Go toolchain is missing; {INSTALL_HINT}"
    assert (SARAMA_SRC / "sarama.go").is_file(), f"Sarama's sources are missing from {SARAMA_SRC}; {INSTALL_HINT}"
    assert shutil.which("gcc"), f"gcc is missing (cgo builds Sarama's zstd codec); {INSTALL_HINT}"
    out = tmp_path_factory.mktemp("sarama")
    env = {
        **os.environ,
        "GO111MODULE": "off",  # Debian's packages are a GOPATH tree, and no module proxy is reachable
        "GOPATH": str(GOPATH),
        "GOFLAGS": "",
        "GOENV": "off",
        "GOPROXY": "off",
        "CGO_ENABLED": "1",  # without cgo Sarama's zstd codec is a stub that fails
        "CGO_CFLAGS": "-O2 -Wno-deprecated-declarations",
    }
    if not env.get("GOCACHE") and not env.get("HOME") and not env.get("XDG_CACHE_HOME"):
        env["GOCACHE"] = str(out / "go-build")
    binary = out / "sarama-cli"
    started = time.monotonic()
    done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_DIR, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"go build failed:\n{done.stderr[-6000:]}"
    print(f"sarama-cli built in {time.monotonic() - started:.1f} s")
    return binary


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def spec_message(m: Msg) -> dict:
    return {"partition": m.partition, "key": b64(m.key), "value": b64(m.value),
            "headers": [{"key": b64(k.encode()), "value": b64(v)} for k, v in m.headers],
            "timestamp": m.timestamp or 0}


def as_msg(got: dict) -> Msg:
    headers = tuple((unb64(h["key"]).decode(), unb64(h["value"])) for h in got["headers"] or ())
    return Msg(unb64(got["value"]), unb64(got["key"]), headers, got["timestamp"], got["partition"])


def run_cli(cli: Path, command: str, spec: dict, *, timeout: float = 120) -> list[dict]:
    done = subprocess.run([str(cli), command], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"sarama-cli {command} exited {done.returncode}:\n{done.stderr[-6000:]}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"sarama-cli {command} printed nothing:\n{done.stderr[-6000:]}"
    return lines


def produce(cli, broker, topic: str, msgs, *, version: str = NEWEST, acks: int = -1, codec: str = "none",
            one_batch: bool = True, idempotent: bool = False, bootstrap: str | None = None,
            expect_ok: bool = True, **extra) -> list[dict]:
    """SyncProducer: returns one {partition, offset, timestamp, error} per message."""
    (result,) = run_cli(cli, "produce", {
        "brokers": [bootstrap or broker.bootstrap], "version": version, "topic": topic, "acks": acks,
        "compression": codec, "oneBatch": one_batch, "idempotent": idempotent,
        "messages": [spec_message(m) for m in msgs], **extra,
    })
    assert "error" not in result, f"producer could not start: {result['error']}"
    assert result["closeError"] is None, result["closeError"]
    if expect_ok:
        failed = [r["error"] for r in result["results"] if r["error"]]
        assert not failed, f"{len(failed)} of {len(msgs)} messages failed, e.g. {failed[:3]}"
    return result["results"]


def consume(cli, broker, topic: str, count: int, *, partition: int = 0, offset: int = -2,
            version: str = NEWEST, timeout_ms: int = 20000, expect_errors: bool = False,
            bootstrap: str | None = None, fetch_default: int = 0) -> dict:
    """A partition consumer from ``offset`` (-2 oldest) until ``count`` messages or the timeout;
    ``fetch_default`` sets Sarama's per-partition fetch size (Consumer.Fetch.Default, 1 MiB)."""
    (result,) = run_cli(cli, "consume", {
        "brokers": [bootstrap or broker.bootstrap], "version": version, "topic": topic, "partition": partition,
        "offset": offset, "count": count, "timeoutMs": timeout_ms, "fetchDefault": fetch_default,
    })
    assert "error" not in result, f"consumer could not start: {result['error']}"
    if not expect_errors:
        assert result["errors"] == [], result["errors"]
    return result


def admin_ops(cli, broker, *ops: dict, version: str = NEWEST) -> list[dict]:
    lines = run_cli(cli, "admin", {"brokers": [broker.bootstrap], "version": version, "ops": list(ops)})
    assert lines[0]["op"] != "connect", f"ClusterAdmin could not start: {lines[0]['error']}"
    assert [line["op"] for line in lines] == [op["op"] for op in ops]
    return lines


def error_code(line: dict) -> int | None:
    return None if line["error"] is None else line["error"]["code"]


def _stored(bootstrap: str, topic: str, partition: int):
    """The record batches a raw Fetch v11 returns from offset 0 (kafka-python's view)."""
    from kafka.protocol.consumer import FetchResponse
    from kafka.record import MemoryRecords

    with RawConnection(bootstrap) as conn:
        response = conn.call(fetch_request(topic, partition, 0), FetchResponse, version=11)
    (part,) = response.responses[0].partitions
    assert part.error_code == 0
    records = MemoryRecords(bytes(part.records or b""))
    while (batch := records.next_batch()) is not None:
        yield batch


def raw_records(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(offset, timestamp) of every stored record."""
    return [(r.offset, r.timestamp) for batch in _stored(bootstrap, topic, partition) for r in batch]


def raw_batches(bootstrap: str, topic: str, partition: int = 0):
    """(base offset, record count, producer id, producer epoch, base sequence) of stored batches."""
    return [(b.base_offset, len(list(b)), b.producer_id, b.producer_epoch, b.base_sequence)
            for b in _stored(bootstrap, topic, partition)]


# Every record shape Sarama can send: keys, no key, empty key and value, a null value, binary
# bytes, repeated and empty headers, explicit CreateTime timestamps.
SHAPES = [
    Msg(b"v-plain", b"k-plain", timestamp=BASE_TIMESTAMP),
    Msg(b"v-headers", b"k-headers", (("h1", b"one"), ("h2", b"two"), ("h1", b"again")), BASE_TIMESTAMP + 1),
    Msg(None, b"k-tombstone", timestamp=BASE_TIMESTAMP + 2),
    Msg(b"", b"k-empty-value", timestamp=BASE_TIMESTAMP + 3),
    Msg(b"v-no-key", timestamp=BASE_TIMESTAMP + 4),
    Msg(b"v-empty-key", b"", timestamp=BASE_TIMESTAMP + 5),
    Msg(bytes(range(256)) * 4, b"\x00\xff binary", timestamp=BASE_TIMESTAMP + 6),
    Msg(b"compressible " * 300, b"k-repetitive", timestamp=BASE_TIMESTAMP + 7),
    Msg("välue ✓".encode(), "kéy".encode(), (("empty", b""),), BASE_TIMESTAMP + 8),
]


# ---- SyncProducer and partition consumer ----------------------------------------------------------


@pytest.mark.parametrize("version", DATA_VERSIONS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_every_record_shape_round_trips(sarama_cli, broker, topic_name, version, codec):
    results = produce(sarama_cli, broker, topic_name, SHAPES, version=version, codec=codec)
    assert [(r["partition"], r["offset"]) for r in results] == [(0, i) for i in range(len(SHAPES))]
    got = consume(sarama_cli, broker, topic_name, len(SHAPES), version=version)
    assert [as_msg(m) for m in got["messages"]] == SHAPES
    assert [m["offset"] for m in got["messages"]] == list(range(len(SHAPES)))
    assert got["highWaterMark"] == len(SHAPES)
    # one batch, stored with the producer's codec; and an independent reader agrees
    assert [(b.base_offset, b.last_offset, b.compression) for b in stored_batches(broker.bootstrap, topic_name)] == [
        (0, len(SHAPES) - 1, CODEC_IDS[codec]),
    ]
    other = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, len(SHAPES))
    assert [r.msg(with_timestamp=True) for r in other] == SHAPES


@pytest.mark.parametrize("version", DATA_VERSIONS)
def test_acks_all_leader_and_none_one_message_at_a_time(sarama_cli, broker, topic_name, version):
    first = produce(sarama_cli, broker, topic_name, [Msg(b"all-0"), Msg(b"all-1")], version=version, acks=-1,
                    one_batch=False)
    second = produce(sarama_cli, broker, topic_name, [Msg(b"one-2"), Msg(b"one-3")], version=version, acks=1,
                     one_batch=False)
    assert [r["offset"] for r in first + second] == [0, 1, 2, 3]
    # acks=0: no response at all, so no offsets; the records must still be written
    produce(sarama_cli, broker, topic_name, [Msg(b"none-4"), Msg(b"none-5")], version=version, acks=0,
            one_batch=False)
    got = consume(sarama_cli, broker, topic_name, 6, version=version)
    assert [unb64(m["value"]) for m in got["messages"]] == [b"all-0", b"all-1", b"one-2", b"one-3", b"none-4",
                                                           b"none-5"]
    assert [m["offset"] for m in got["messages"]] == list(range(6))
    assert [b.records for b in stored_batches(broker.bootstrap, topic_name)] == [1] * 6


def test_timestamps_default_to_the_send_time(sarama_cli, broker, topic_name):
    before = int(time.time() * 1000)
    produce(sarama_cli, broker, topic_name, [Msg(b"a"), Msg(b"b")])
    after = int(time.time() * 1000)
    got = consume(sarama_cli, broker, topic_name, 2)["messages"]
    assert all(before <= m["timestamp"] <= after for m in got), (before, [m["timestamp"] for m in got], after)


def test_log_append_time_topic(sarama_cli, broker, topic_name):
    """The Produce v3 response carries the broker's LogAppendTime, which Sarama copies into the
    acknowledged message; the consumer reports the batch's max timestamp for such batches."""
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    results = produce(sarama_cli, broker, topic_name, [Msg(b"a", timestamp=BASE_TIMESTAMP),
                                                       Msg(b"b", timestamp=BASE_TIMESTAMP + 1)])
    after = int(time.time() * 1000)
    stamps = {r["timestamp"] for r in results}
    assert len(stamps) == 1 and before <= stamps.pop() <= after, results
    got = consume(sarama_cli, broker, topic_name, 2)["messages"]
    assert [m["timestamp"] for m in got] == [results[0]["timestamp"]] * 2


def test_explicit_partitions(sarama_cli, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    msgs = [Msg(b"p2-a", partition=2), Msg(b"p0-a", partition=0), Msg(b"p2-b", partition=2),
            Msg(b"p1-a", partition=1)]
    results = produce(sarama_cli, broker, topic_name, msgs)
    assert [(r["partition"], r["offset"]) for r in results] == [(2, 0), (0, 0), (2, 1), (1, 0)]
    for partition, expected in {0: [b"p0-a"], 1: [b"p1-a"], 2: [b"p2-a", b"p2-b"]}.items():
        got = consume(sarama_cli, broker, topic_name, len(expected), partition=partition)
        assert [(m["partition"], unb64(m["value"])) for m in got["messages"]] == [(partition, v) for v in expected]
        assert got["highWaterMark"] == len(expected)


def test_produce_to_a_missing_partition_fails(sarama_cli, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    (result,) = produce(sarama_cli, broker, topic_name, [Msg(b"nowhere", partition=5)], expect_ok=False)
    assert result["error"] is not None and "partition" in result["error"]["message"]


@pytest.mark.parametrize("version", DATA_VERSIONS)
def test_large_message_acks_all(sarama_cli, broker, topic_name, version):
    big = Msg(b"L" * (900 * 1024), b"k-large", timestamp=BASE_TIMESTAMP)
    (result,) = produce(sarama_cli, broker, topic_name, [big], version=version)
    assert (result["partition"], result["offset"]) == (0, 0)
    got = consume(sarama_cli, broker, topic_name, 1, version=version)
    assert [as_msg(m) for m in got["messages"]] == [big]
    # a 1 KiB partition fetch size: Fetch v3+ returns the first batch whole anyway (KIP-74)
    got = consume(sarama_cli, broker, topic_name, 1, version=version, fetch_default=1024)
    assert [as_msg(m) for m in got["messages"]] == [big]


def test_message_larger_than_the_broker_limit_is_refused(sarama_cli, broker, topic_name):
    """A 1.2 MB record (Sarama's own limit raised) against message.max.bytes 1048588: Kafka answers
    MESSAGE_TOO_LARGE and writes nothing."""
    create_topic(broker.bootstrap, topic_name)
    (result,) = produce(sarama_cli, broker, topic_name, [Msg(b"X" * 1_200_000)], maxMessageBytes=2_000_000,
                        expect_ok=False)
    assert error_code(result) == MESSAGE_TOO_LARGE
    assert stored_batches(broker.bootstrap, topic_name) == []


@pytest.mark.parametrize("version", DATA_VERSIONS)
def test_consume_from_a_specific_offset_inside_a_batch(sarama_cli, broker, topic_name, version):
    msgs = [Msg(f"m{i}".encode(), f"k{i}".encode(), (("n", str(i).encode()),), BASE_TIMESTAMP + i * 1000)
            for i in range(10)]
    produce(sarama_cli, broker, topic_name, msgs, version=version, codec="gzip")
    got = consume(sarama_cli, broker, topic_name, 6, offset=4, version=version)
    assert [m["offset"] for m in got["messages"]] == [4, 5, 6, 7, 8, 9]
    assert [as_msg(m) for m in got["messages"]] == msgs[4:]
    assert got["highWaterMark"] == 10
    # from the newest offset: nothing to read (Sarama updates the high watermark only from
    # fetch responses that carry records, so it stays unknown here)
    assert consume(sarama_cli, broker, topic_name, 1, offset=-1, version=version, timeout_ms=1500)["messages"] == []


def test_offset_beyond_the_end_is_refused(sarama_cli, broker, topic_name):
    produce(sarama_cli, broker, topic_name, [Msg(b"only")])
    (result,) = run_cli(sarama_cli, "consume", {
        "brokers": [broker.bootstrap], "version": NEWEST, "topic": topic_name, "partition": 0, "offset": 7,
        "count": 1, "timeoutMs": 2000,
    })
    assert result["error"]["code"] == 1  # OFFSET_OUT_OF_RANGE: Sarama checks against ListOffsets


@pytest.mark.parametrize("version,codec", [
    *[("0.10.2.0", c) for c in ("none", "gzip", "snappy", "lz4")],
    *[("0.8.2.0", c) for c in ("none", "gzip", "snappy")],  # Sarama allows lz4 from 0.10 only
])
def test_legacy_message_sets_from_old_sarama(sarama_cli, broker, topic_name, version, codec):
    """Produce v2 (magic 1, with timestamps) and v0 (magic 0, without): Kafka 3.x up-converts them
    to one RecordBatch v2 with the producer's codec; magic 0 has no timestamp (-1)."""
    msgs = [Msg(b"legacy " * 40 + str(i).encode(), f"k{i}".encode() if i % 3 else None, (),
                BASE_TIMESTAMP + i) for i in range(7)]
    msgs.append(Msg(None, b"k-null-value", (), BASE_TIMESTAMP + 7))
    results = produce(sarama_cli, broker, topic_name, msgs, version=version, codec=codec)
    assert [r["offset"] for r in results] == list(range(len(msgs)))
    got = consume(sarama_cli, broker, topic_name, len(msgs), version=NEWEST)
    magic0 = version.startswith("0.8")
    # magic 0 has no timestamp: stored as -1 (NO_TIMESTAMP), which Sarama reports as the zero time
    expected = [Msg(m.value, m.key, (), 0 if magic0 else m.timestamp) for m in msgs]
    assert [as_msg(m) for m in got["messages"]] == expected
    assert [r[1] for r in raw_records(broker.bootstrap, topic_name)] == [-1 if magic0 else m.timestamp for m in msgs]
    assert [(b.base_offset, b.last_offset, b.compression) for b in stored_batches(broker.bootstrap, topic_name)] == [
        (0, len(msgs) - 1, CODEC_IDS[codec]),
    ]


def test_headers_need_sarama_0_11(sarama_cli, broker, topic_name):
    (result,) = produce(sarama_cli, broker, topic_name, [Msg(b"v", headers=(("h", b"x"),))], version="0.10.2.0",
                        expect_ok=False)
    assert "headers requires Kafka at least v0.11" in result["error"]["message"]


def test_zstd_produce_needs_produce_v7_which_sarama_1_22_never_sends(sarama_cli, broker, topic_name):
    """Kafka's ProduceRequest.validateRecords: zstd batches in Produce < v7 get
    UNSUPPORTED_COMPRESSION_TYPE, and nothing is written."""
    create_topic(broker.bootstrap, topic_name)
    results = produce(sarama_cli, broker, topic_name, SHAPES[:3], codec="zstd", expect_ok=False)
    assert [error_code(r) for r in results] == [UNSUPPORTED_COMPRESSION_TYPE] * 3
    assert stored_batches(broker.bootstrap, topic_name) == []
    # the connection is still good: an uncompressed batch gets through
    (ok,) = produce(sarama_cli, broker, topic_name, [Msg(b"after")])
    assert ok["offset"] == 0


def test_zstd_batches_from_another_client_are_read(sarama_cli, broker, topic_name):
    """Fetch v4 returns stored zstd batches as they are when the topic's compression.type is not
    zstd (Kafka refuses only that case, below Fetch v10), and Sarama 1.22 decodes them."""
    ConfluentDriver(broker.bootstrap).produce(topic_name, SHAPES, codec="zstd")
    assert {b.compression for b in stored_batches(broker.bootstrap, topic_name)} == {CODEC_IDS["zstd"]}
    got = consume(sarama_cli, broker, topic_name, len(SHAPES))
    assert [as_msg(m) for m in got["messages"]] == SHAPES


def test_fetch_below_v10_from_a_zstd_topic_is_refused(sarama_cli, broker, topic_name):
    """Kafka's KafkaApis.handleFetchRequest (maybeConvertFetchedData): a partition whose topic has
    compression.type=zstd answers UNSUPPORTED_COMPRESSION_TYPE to Fetch < v10, whatever is stored;
    Sarama 1.22 fetches with v4 and reports the error on the partition consumer."""
    create_topic(broker.bootstrap, topic_name, config={"compression.type": "zstd"})
    ConfluentDriver(broker.bootstrap).produce(topic_name, [Msg(b"zstd-topic")])
    got = consume(sarama_cli, broker, topic_name, 1, timeout_ms=5000, expect_errors=True)
    assert got["messages"] == []
    assert got["errors"] and {e["code"] for e in got["errors"]} == {UNSUPPORTED_COMPRESSION_TYPE}, got["errors"]


def test_topic_compression_type_recompresses_what_sarama_sends(sarama_cli, broker, topic_name):
    """Kafka's LogValidator writes batches with the topic's compression.type (unless 'producer'):
    an uncompressed Sarama batch to a compression.type=gzip topic is stored gzip-compressed."""
    create_topic(broker.bootstrap, topic_name, config={"compression.type": "gzip"})
    produce(sarama_cli, broker, topic_name, SHAPES)
    got = consume(sarama_cli, broker, topic_name, len(SHAPES))
    assert [as_msg(m) for m in got["messages"]] == SHAPES
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [CODEC_IDS["gzip"]]


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_batch_max_timestamp_is_recomputed_from_the_records(sarama_cli, broker, topic_name, codec):
    """Sarama 1.22 never sets a RecordBatch's maxTimestamp (it sends -1). Kafka's LogValidator
    computes the max of the records' timestamps for CreateTime batches and rewrites the header
    (setMaxTimestamp, new CRC) before appending, so the stored batch, the time index and
    ListOffsets by timestamp see the real one."""
    msgs = [Msg(f"v{i}".encode(), timestamp=BASE_TIMESTAMP + i * 1000) for i in (0, 2, 1)]
    produce(sarama_cli, broker, topic_name, msgs, codec=codec)
    (batch,) = list(_stored(broker.bootstrap, topic_name, 0))
    assert batch.validate_crc()  # the header was patched: its CRC must have been recomputed
    assert [r.timestamp for r in batch] == [m.timestamp for m in msgs]
    assert (batch.first_timestamp, batch.max_timestamp) == (BASE_TIMESTAMP, BASE_TIMESTAMP + 2000)


# ---- idempotent producer --------------------------------------------------------------------------


@pytest.mark.parametrize("version", DATA_VERSIONS)
def test_idempotent_producer(sarama_cli, broker, topic_name, version):
    """InitProducerId v0, then batches carrying the producer id, epoch 0 and sequences 0, 1, ..."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    msgs = [Msg(f"i{i}".encode(), partition=i % 2) for i in range(6)]
    results = produce(sarama_cli, broker, topic_name, msgs, version=version, idempotent=True, one_batch=False)
    assert [(r["partition"], r["offset"]) for r in results] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    batches = {p: raw_batches(broker.bootstrap, topic_name, p) for p in (0, 1)}
    producer_ids = {b[2] for p in batches.values() for b in p}
    assert len(producer_ids) == 1 and producer_ids.pop() >= 0
    for p in (0, 1):
        assert [(b[0], b[1], b[3], b[4]) for b in batches[p]] == [(0, 1, 0, 0), (1, 1, 0, 1), (2, 1, 0, 2)]
    # a second producer gets another id; its batch (several records) starts again at sequence 0
    produce(sarama_cli, broker, topic_name, [Msg(b"x"), Msg(b"y")], version=version, idempotent=True)
    last = raw_batches(broker.bootstrap, topic_name, 0)[-1]
    assert last[0] == 3 and last[1] == 2 and last[4] == 0 and last[2] not in {b[2] for b in batches[0]}
    got = consume(sarama_cli, broker, topic_name, 5, version=version)
    assert [unb64(m["value"]) for m in got["messages"]] == [b"i0", b"i2", b"i4", b"x", b"y"]


def test_idempotent_producer_exactly_once_through_a_lossy_proxy(sarama_cli, broker_factory, topic_name):
    """A proxy swallows every 7th Produce response and resets the connection after every 11th
    Produce request: Sarama retries with the same sequence numbers and every message must be
    stored exactly once, in order."""
    count = 120
    with FaultyProxy(drop_every=7, reset_every=11) as proxy:
        broker = broker_factory("--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}")
        proxy.upstream_port = broker.port
        create_topic(broker.bootstrap, topic_name)
        msgs = [Msg(str(i).encode()) for i in range(count)]
        results = produce(sarama_cli, broker, topic_name, msgs, idempotent=True, one_batch=False,
                          bootstrap=proxy.bootstrap, retryMax=50)
        assert proxy.stats.dropped_responses > 0 and proxy.stats.resets > 0, proxy.stats
        proxy.faults = False
        assert [r["offset"] for r in results] == list(range(count))
        got = consume(sarama_cli, broker, topic_name, count + 1, timeout_ms=5000, bootstrap=proxy.bootstrap)
    assert [int(unb64(m["value"])) for m in got["messages"]] == list(range(count))
    assert got["highWaterMark"] == count


# ---- consumer groups --------------------------------------------------------------------------------


class GroupMember:
    """A `sarama-cli group` process: a ConsumerGroup member printing its events as JSON lines."""

    def __init__(self, cli: Path, broker, group: str, topics: list[str], log_path: Path, *,
                 version: str = NEWEST, retention_ms: int = 0) -> None:
        self.log_path = log_path
        self.stderr = open(log_path, "w")
        self.proc = subprocess.Popen([str(cli), "group"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        spec = {"brokers": [broker.bootstrap], "version": version, "group": group, "topics": topics,
                "initial": -2, "sessionTimeoutMs": 6000, "heartbeatMs": 500, "commitIntervalMs": 500,
                "retentionMs": retention_ms}
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        self.events: list[dict] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            with self.changed:
                self.events.append(event)
                self.changed.notify_all()
        with self.changed:
            self.events.append({"event": "exited"})
            self.changed.notify_all()

    def describe(self) -> str:
        self.stderr.flush()
        return f"events: {self.events[-20:]}\nstderr: {self.log_path.read_text()[-4000:]}"

    def wait_for(self, what: str, predicate, timeout: float = 60):
        """Wait until ``predicate(events)`` is truthy and return it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not (found := predicate(self.events)):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.events and self.events[-1]["event"] == "exited":
                    pytest.fail(f"group member: no {what} within {timeout} s\n{self.describe()}")
                self.changed.wait(remaining)
            return found

    def snapshot(self) -> list[dict]:
        with self.changed:
            return list(self.events)

    def messages(self) -> list[dict]:
        return [e["message"] for e in self.snapshot() if e["event"] == "message"]

    def setup(self, claims: dict | None = None, timeout: float = 60) -> dict:
        """The latest session setup event (with exactly these claims when given)."""
        def latest(events):
            setups = [e for e in events if e["event"] == "setup"]
            if setups and (claims is None or setups[-1]["claims"] == claims):
                return setups[-1]
            return None
        return self.wait_for(f"session with claims {claims}", latest, timeout)

    def wait_messages(self, count: int, timeout: float = 60) -> list[dict]:
        self.wait_for(f"{count} messages", lambda ev: sum(e["event"] == "message" for e in ev) >= count, timeout)
        return self.messages()

    def stop(self, timeout: float = 60) -> None:
        """Cancel the consume loop, commit, leave the group, exit."""
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"group member did not stop within {timeout} s\n{self.describe()}")
        self.reader.join(10)
        assert self.proc.returncode == 0, self.describe()
        closed = [e for e in self.events if e["event"] == "closed"]
        assert closed and closed[-1]["error"] is None, self.describe()
        errors = [e for e in self.events if e["event"] in ("error", "consumeError", "fatal")]
        assert not errors, self.describe()
        self.stderr.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.stderr.closed:
            self.stderr.close()


@pytest.fixture
def members(sarama_cli, tmp_path):
    started: list[GroupMember] = []

    def start(broker, group: str, topics: list[str], **kw) -> GroupMember:
        member = GroupMember(sarama_cli, broker, group, topics, tmp_path / f"member-{len(started)}.log", **kw)
        started.append(member)
        return member

    yield start
    for member in started:
        member.kill()


def by_partition(messages: list[dict]) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = {}
    for m in messages:
        got.setdefault(m["partition"], []).append((m["offset"], unb64(m["value"])))
    return got


def committed(cli, broker, group: str, topic: str, partitions) -> dict[int, int]:
    (line,) = admin_ops(cli, broker, {"op": "listGroupOffsets", "group": group,
                                      "topicPartitions": {topic: list(partitions)}})
    assert line["error"] is None and line["result"]["error"] == 0, line
    blocks = line["result"]["offsets"][topic]
    assert all(b["error"] == 0 for b in blocks.values()), blocks
    return {int(p): b["offset"] for p, b in blocks.items()}


def wait_committed(cli, broker, group: str, topic: str, expected: dict[int, int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (got := committed(cli, broker, group, topic, expected)) != expected:
        assert time.monotonic() < deadline, f"committed offsets {got}, expected {expected}"
        time.sleep(0.2)


@pytest.mark.parametrize("version,retention_ms", [(NEWEST, 0), (OLD, 3_600_000)],
                         ids=["2.2.0-OffsetCommit-v1", "0.11.0.0-OffsetCommit-v2-retention"])
def test_consumer_group_commits_and_a_restarted_group_resumes(sarama_cli, broker_factory, members, topic_name,
                                                               version, retention_ms):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name, partitions=3)
    first = [Msg(f"a{p}-{i}".encode(), partition=p) for i in range(10) for p in range(3)]
    produce(sarama_cli, broker, topic_name, first, version=version)
    group = f"g-{uuid.uuid4().hex[:8]}"

    member = members(broker, group, [topic_name], version=version, retention_ms=retention_ms)
    setup = member.setup({topic_name: [0, 1, 2]})
    got = by_partition(member.wait_messages(30))
    assert got == {p: [(i, f"a{p}-{i}".encode()) for i in range(10)] for p in range(3)}
    described = admin_ops(sarama_cli, broker, {"op": "describeGroups", "groups": [group]},
                          {"op": "listGroups"})
    (group_description,) = described[0]["result"]
    assert (group_description["error"], group_description["state"], group_description["protocolType"],
            group_description["protocol"]) == (0, "Stable", "consumer", "range")
    assert list(group_description["members"]) == [setup["memberId"]]
    (only,) = group_description["members"].values()
    assert only["clientId"] == "sarama-compat"
    assert only["assignment"] == {topic_name: [0, 1, 2]} and only["subscription"] == [topic_name]
    assert described[1]["result"].get(group) == "consumer"
    member.stop()

    (offsets,) = admin_ops(sarama_cli, broker, {"op": "listGroupOffsets", "group": group,
                                               "topicPartitions": {topic_name: [0, 1, 2]}})
    assert offsets["result"]["error"] == 0
    assert {p: (o["offset"], o["error"]) for p, o in offsets["result"]["offsets"][topic_name].items()} == {
        "0": (10, 0), "1": (10, 0), "2": (10, 0),
    }

    # a restarted member resumes at the committed offsets: it must get the sentinels, only them
    again = members(broker, group, [topic_name], version=version, retention_ms=retention_ms)
    generation = again.setup({topic_name: [0, 1, 2]})["generation"]
    claims = again.wait_for("3 claims", lambda ev: [e for e in ev if e["event"] == "claim"][:3]
                            if sum(e["event"] == "claim" for e in ev) >= 3 else None)
    assert sorted((c["partition"], c["initialOffset"]) for c in claims) == [(0, 10), (1, 10), (2, 10)]
    produce(sarama_cli, broker, topic_name, [Msg(f"sentinel-{p}".encode(), partition=p) for p in range(3)],
            version=version)
    assert by_partition(again.wait_messages(3)) == {p: [(10, f"sentinel-{p}".encode())] for p in range(3)}
    assert all(e["generation"] == generation for e in again.snapshot() if e["event"] == "message")
    again.stop()
    (offsets,) = admin_ops(sarama_cli, broker, {"op": "listGroupOffsets", "group": group,
                                               "topicPartitions": {topic_name: [0, 1, 2]}})
    assert {p: o["offset"] for p, o in offsets["result"]["offsets"][topic_name].items()} == {"0": 11, "1": 11, "2": 11}
    (after,) = admin_ops(sarama_cli, broker, {"op": "describeGroups", "groups": [group]})
    assert (after["result"][0]["state"], after["result"][0]["members"]) == ("Empty", {})


@pytest.mark.parametrize("departure", ["leave", "crash"])
def test_consumer_group_rebalances_between_two_members(sarama_cli, broker_factory, members, topic_name, departure):
    """Two members split the partitions; when one leaves (LeaveGroup) or is killed (its session
    times out on the coordinator), the other takes its partitions over at the offsets it had
    committed (auto-commit every 500 ms) and gets what is produced there afterwards."""
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name, partitions=3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = members(broker, group, [topic_name])
    a.setup({topic_name: [0, 1, 2]})
    b = members(broker, group, [topic_name])

    # both in one generation, the three partitions split between them (range: 2 + 1)
    def split(_events):
        sa, sb = a.snapshot(), b.snapshot()
        last_a = [e for e in sa if e["event"] == "setup"][-1:]
        last_b = [e for e in sb if e["event"] == "setup"][-1:]
        if last_a and last_b and last_a[0]["generation"] == last_b[0]["generation"]:
            return last_a[0], last_b[0]
        return None
    setup_a, setup_b = b.wait_for("a shared generation", split, timeout=90)
    claimed_a, claimed_b = setup_a["claims"][topic_name], setup_b["claims"][topic_name]
    assert sorted(claimed_a + claimed_b) == [0, 1, 2] and sorted([len(claimed_a), len(claimed_b)]) == [1, 2]

    (described,) = admin_ops(sarama_cli, broker, {"op": "describeGroups", "groups": [group]})
    (desc,) = described["result"]
    assert desc["state"] == "Stable"
    assert {m: v["assignment"][topic_name] for m, v in desc["members"].items()} == {
        setup_a["memberId"]: claimed_a, setup_b["memberId"]: claimed_b,
    }

    produce(sarama_cli, broker, topic_name, [Msg(f"to-{p}".encode(), partition=p) for p in range(3)])
    got_a = by_partition(a.wait_messages(len(claimed_a)))
    got_b = by_partition(b.wait_messages(len(claimed_b)))
    assert got_a == {p: [(0, f"to-{p}".encode())] for p in claimed_a}
    assert got_b == {p: [(0, f"to-{p}".encode())] for p in claimed_b}

    wait_committed(sarama_cli, broker, group, topic_name, {p: 1 for p in range(3)})

    if departure == "leave":
        b.stop()
    else:
        b.kill()
    setup = a.setup({topic_name: [0, 1, 2]}, timeout=90)
    claims = a.wait_for("claims of the new session", lambda ev: [
        e for e in ev if e["event"] == "claim" and e["generation"] == setup["generation"]][:3]
        if sum(e["event"] == "claim" and e["generation"] == setup["generation"] for e in ev) >= 3 else None)
    assert sorted((c["partition"], c["initialOffset"]) for c in claims) == [(0, 1), (1, 1), (2, 1)]
    produce(sarama_cli, broker, topic_name, [Msg(f"later-{p}".encode(), partition=p) for p in claimed_b])
    a.wait_for("messages for b's old partitions",
               lambda ev: {m["partition"] for m in a.messages() if unb64(m["value"]).startswith(b"later")}
               == set(claimed_b))
    assert sorted((m["partition"], m["offset"], unb64(m["value"])) for m in a.messages()) == sorted(
        [(p, 0, f"to-{p}".encode()) for p in claimed_a] + [(p, 1, f"later-{p}".encode()) for p in claimed_b])
    a.stop()
    assert committed(sarama_cli, broker, group, topic_name, range(3)) == {
        p: 2 if p in claimed_b else 1 for p in range(3)}


def test_standalone_offset_manager_commits_and_a_group_resumes_there(sarama_cli, broker_factory, members,
                                                                     topic_name):
    """Sarama's OffsetManager outside a group: OffsetCommit v1 with generation -1 and no member id
    (a "simple" commit, accepted for a group without members), OffsetFetch v1 to read them back."""
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(sarama_cli, broker, topic_name, [Msg(f"p{p}-{i}".encode(), partition=p) for i in range(10)
                                             for p in range(2)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    spec = {"brokers": [broker.bootstrap], "version": NEWEST, "group": group, "topic": topic_name,
            "offsets": {"0": 3, "1": 7}, "metadata": "by-hand"}
    (first,) = run_cli(sarama_cli, "commit", spec)
    assert (first["errors"], first["closeError"]) == ([], None)
    assert first["before"] == {"0": {"offset": -1, "metadata": ""}, "1": {"offset": -1, "metadata": ""}}
    # (Sarama's MarkOffset ignores an offset that is not ahead of the current one)
    (second,) = run_cli(sarama_cli, "commit", {**spec, "offsets": {"0": 4, "1": 8}, "metadata": "again"})
    assert second["before"] == {"0": {"offset": 3, "metadata": "by-hand"}, "1": {"offset": 7, "metadata": "by-hand"}}
    (line,) = admin_ops(sarama_cli, broker, {"op": "listGroupOffsets", "group": group,
                                             "topicPartitions": {topic_name: [0, 1]}})
    assert {p: (b["offset"], b["metadata"]) for p, b in line["result"]["offsets"][topic_name].items()} == {
        "0": (4, "again"), "1": (8, "again"),
    }
    member = members(broker, group, [topic_name])
    member.setup({topic_name: [0, 1]})
    got = by_partition(member.wait_messages(6 + 2))
    assert got == {0: [(i, f"p0-{i}".encode()) for i in range(4, 10)],
                   1: [(i, f"p1-{i}".encode()) for i in range(8, 10)]}
    member.stop()


# ---- Client: metadata and ListOffsets ----------------------------------------------------------------------


@pytest.mark.parametrize("version", (NEWEST, OLD, "0.10.2.0"))
def test_client_metadata_and_offsets_for_times(sarama_cli, broker, topic_name, version):
    """Metadata (v5 from 1.0, v1 before) and ListOffsets v1: oldest, newest and by timestamp (the
    first offset with a timestamp at or after it; -1 past the last). The records come from Sarama
    itself, in one batch: from 0.11 a RecordBatch whose maxTimestamp Kafka recomputes
    (test_batch_max_timestamp_is_recomputed_from_the_records), before that a magic-1 message set
    up-converted by the broker."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(sarama_cli, broker, topic_name, [Msg(f"t{i}".encode(), partition=1, timestamp=BASE_TIMESTAMP + i * 1000)
                                             for i in range(5)], version=version)
    times = [-2, -1, BASE_TIMESTAMP - 1, BASE_TIMESTAMP + 2500, BASE_TIMESTAMP + 4000, BASE_TIMESTAMP + 60000]
    (result,) = run_cli(sarama_cli, "client", {"brokers": [broker.bootstrap], "version": version,
                                               "topic": topic_name, "partition": 1, "times": times})
    assert topic_name in result["topics"]
    assert (result["partitions"], result["writablePartitions"]) == ([0, 1], [0, 1])
    assert result["leader"] == {"id": 0, "addr": broker.bootstrap}
    assert (result["replicas"], result["isr"], result["controller"]) == ([0], [0], 0)
    assert result["offsets"] == [0, 5, 0, 3, 4, -1]


# ---- ClusterAdmin ----------------------------------------------------------------------------------------


def topic_configs(broker, topic: str) -> dict[str, str]:
    """Non-default configs of a topic, read with librdkafka (an independent view)."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", topic)
    entries = admin(broker).describe_configs([resource])[resource].result(timeout=15)
    return {name: e.value for name, e in entries.items() if not e.is_default}


def test_admin_topics_partitions_and_configs(sarama_cli, broker, topic_name):
    other = f"{topic_name}-validate"
    lines = admin_ops(
        sarama_cli, broker,
        {"op": "createTopic", "topic": topic_name, "partitions": 2, "replicationFactor": 1,
         "configs": {"retention.ms": "3600000", "cleanup.policy": "compact"}},
        {"op": "createTopic", "topic": topic_name, "partitions": 2, "replicationFactor": 1},
        {"op": "createTopic", "topic": other, "partitions": 4, "replicationFactor": 1, "validateOnly": True},
        {"op": "createTopic", "topic": other, "partitions": 1, "replicationFactor": 3},
        {"op": "createTopic", "topic": other, "partitions": 1, "replicationFactor": 1,
         "configs": {"cleanup.policy": "sometimes"}},
        {"op": "describeTopics", "topics": [topic_name, other]},
    )
    assert [error_code(line) for line in lines[:5]] == [
        None, TOPIC_ALREADY_EXISTS, None, INVALID_REPLICATION_FACTOR, INVALID_CONFIG,
    ]
    described = {t["name"]: t for t in lines[5]["result"]}
    assert described[other]["error"] == UNKNOWN_TOPIC_OR_PARTITION  # validate_only created nothing
    assert described[topic_name]["error"] == 0 and not described[topic_name]["internal"]
    assert [(p["id"], p["leader"], p["replicas"], p["isr"], p["error"]) for p in described[topic_name]["partitions"]] \
        == [(0, 0, [0], [0], 0), (1, 0, [0], [0], 0)]
    assert topic_configs(broker, topic_name) == {"retention.ms": "3600000", "cleanup.policy": "compact"}

    lines = admin_ops(
        sarama_cli, broker,
        {"op": "createPartitions", "topic": topic_name, "partitions": 5},
        {"op": "createPartitions", "topic": topic_name, "partitions": 3},
        {"op": "describeTopics", "topics": [topic_name]},
        {"op": "alterConfig", "resourceType": "topic", "name": topic_name, "configs": {"retention.ms": "7200000"}},
        {"op": "alterConfig", "resourceType": "topic", "name": topic_name,
         "configs": {"retention.ms": "not-a-number"}},
    )
    # (Sarama 1.22's CreatePartitions never sends its validateOnly argument, so none of that here)
    assert [error_code(line) for line in lines[:2]] == [None, INVALID_PARTITIONS]
    assert [p["id"] for p in lines[2]["result"][0]["partitions"]] == [0, 1, 2, 3, 4]
    assert lines[3]["error"] is None
    # Sarama reports only the error message of AlterConfigs (not the code), Kafka's ConfigException text
    assert lines[4]["error"]["message"] == (
        "Invalid value not-a-number for configuration retention.ms: Not a number of type LONG")
    # AlterConfigs replaces the whole set: cleanup.policy is back to its default
    assert topic_configs(broker, topic_name) == {"retention.ms": "7200000"}

    lines = admin_ops(
        sarama_cli, broker,
        {"op": "describeCluster"},
        {"op": "deleteTopic", "topic": topic_name},
        {"op": "deleteTopic", "topic": topic_name},
        {"op": "describeTopics", "topics": [topic_name]},
    )
    assert lines[0]["result"] == {"brokers": [{"id": 0, "addr": broker.bootstrap}],
                                  "controller": -1}  # Sarama asks Metadata v0: no controller id in it
    assert [error_code(line) for line in lines[1:3]] == [None, UNKNOWN_TOPIC_OR_PARTITION]
    assert lines[3]["result"][0]["error"] == UNKNOWN_TOPIC_OR_PARTITION


def test_admin_delete_records(sarama_cli, broker, topic_name):
    produce(sarama_cli, broker, topic_name, [Msg(f"r{i}".encode()) for i in range(5)])
    (line,) = admin_ops(sarama_cli, broker, {"op": "deleteRecords", "topic": topic_name, "offsets": {"0": 3}})
    assert line["error"] is None
    got = consume(sarama_cli, broker, topic_name, 2)  # oldest is now 3
    assert [(m["offset"], unb64(m["value"])) for m in got["messages"]] == [(3, b"r3"), (4, b"r4")]
    (client,) = run_cli(sarama_cli, "client", {"brokers": [broker.bootstrap], "version": NEWEST,
                                               "topic": topic_name, "partition": 0, "times": [-2, -1]})
    assert client["offsets"] == [3, 5]


def test_admin_describe_config(sarama_cli, broker, topic_name):
    """Sarama 1.22's DescribeConfig always sends DescribeConfigs v0 (IsDefault instead of
    ConfigSource, no synonyms), which Kafka 3.x serves (validVersions 0-4)."""
    create_topic(broker.bootstrap, topic_name, config={"retention.ms": "3600000"})
    (line,) = admin_ops(sarama_cli, broker, {"op": "describeConfig", "resourceType": "topic", "name": topic_name})
    assert line["error"] is None, line["error"]
    entries = line["result"]
    assert entries["retention.ms"]["value"] == "3600000" and not entries["retention.ms"]["default"]
    assert entries["cleanup.policy"]["value"] == "delete" and entries["cleanup.policy"]["default"]
    assert all(e["synonyms"] == 0 for e in entries.values())
    broker_described, sarama_constant = admin_ops(
        sarama_cli, broker,
        {"op": "describeConfig", "resourceType": "broker", "name": "0", "configNames": ["message.max.bytes"]},
        # Sarama 1.22's BrokerResource is 5, an id Kafka does not know: the whole request fails
        {"op": "describeConfig", "resourceType": "saramaBroker", "name": "0"},
    )
    assert broker_described["error"] is None, broker_described["error"]
    assert list(broker_described["result"]) == ["message.max.bytes"]
    assert broker_described["result"]["message.max.bytes"]["value"] == "1048588"
    assert sarama_constant["error"]["message"] == "Unexpected resource type UNKNOWN for resource 0"


@pytest.mark.parametrize("version", ["0.10.2.0", "0.11.0.0"], ids=["CreateTopics-v0-DeleteTopics-v0",
                                                                     "CreateTopics-v1-DeleteTopics-v1"])
def test_admin_of_old_kafka_versions_creates_and_deletes_topics(sarama_cli, broker, topic_name, version):
    """Sarama's ClusterAdmin at Kafka 0.10.2 sends CreateTopics and DeleteTopics v0 (served until Kafka 4)."""
    lines = admin_ops(
        sarama_cli, broker,
        {"op": "createTopic", "topic": topic_name, "partitions": 2, "replicationFactor": 1,
         "configs": {"retention.ms": "3600000"}},
        {"op": "createTopic", "topic": topic_name, "partitions": 2, "replicationFactor": 1},
        {"op": "describeTopics", "topics": [topic_name]},
        {"op": "deleteTopic", "topic": topic_name},
        {"op": "deleteTopic", "topic": topic_name},
        version=version,
    )
    assert [error_code(line) for line in lines] == [None, TOPIC_ALREADY_EXISTS, None, None,
                                                    UNKNOWN_TOPIC_OR_PARTITION]
    assert [p["id"] for p in lines[2]["result"][0]["partitions"]] == [0, 1]


def test_admin_list_topics(sarama_cli, broker, topic_name):
    """ListTopics is Metadata then DescribeConfigs v0 for every topic (non-default configs)."""
    create_topic(broker.bootstrap, topic_name, partitions=3, config={"retention.ms": "3600000"})
    (line,) = admin_ops(sarama_cli, broker, {"op": "listTopics"})
    assert line["error"] is None, line["error"]
    listed = line["result"][topic_name]
    assert (listed["numPartitions"], listed["replicationFactor"]) == (3, 1)
    assert listed["replicaAssignment"] == {"0": [0], "1": [0], "2": [0]}
    assert listed["configs"] == {"retention.ms": "3600000"}
