"""kcat (its own librdkafka build, older than confluent-kafka's) against a real broker process:
metadata listing, producing from stdin with keys, headers, NULLs and codecs, consuming with
offsets, counts and timestamps. kcat never joins a group here (no -G)."""

import json
import subprocess
import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    BASE_TIMESTAMP, CODEC_IDS, CODECS, confluent_send, create_topic, numbered, stored_batches,
)

KCAT = "/usr/bin/kcat"


def kcat(broker, *args: str, stdin: str | None = None, timeout: float = 20) -> str:
    done = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def consume_json(broker, topic: str, *args: str) -> list[dict]:
    """Consume to the end of the partition (-e) and return kcat's JSON envelopes."""
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-e", "-J", *args)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_metadata_listing_shows_broker_and_topics(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    listing = kcat(broker, "-L")
    assert f"broker 0 at 127.0.0.1:{broker.port} (controller)" in listing
    assert f'topic "{topic_name}" with 2 partitions:' in listing
    assert "partition 1, leader 0, replicas: 0, isrs: 0" in listing
    as_json = json.loads(kcat(broker, "-L", "-J", "-t", topic_name))
    assert as_json["controllerid"] == 0
    assert as_json["brokers"] == [{"id": 0, "name": f"127.0.0.1:{broker.port}"}]
    (topic,) = as_json["topics"]
    assert topic["topic"] == topic_name and "error" not in topic
    assert [(p["partition"], p["leader"]) for p in topic["partitions"]] == [(0, 0), (1, 0)]


def test_produce_and_consume_keys_headers_and_nulls(broker, topic_name):
    before = int(time.time() * 1000)
    kcat(broker, "-P", "-t", topic_name, "-p", "0", "-K", ":", "-Z", "-H", "h1=x", "-H", "h2=",
         stdin="k1:v1\n:v-no-key\ntomb:\nk4:v:with:colons\n")
    after = int(time.time() * 1000)
    got = consume_json(broker, topic_name, "-o", "beginning")
    assert [(m["offset"], m["key"], m["payload"]) for m in got] == [
        (0, "k1", "v1"), (1, None, "v-no-key"), (2, "tomb", None), (3, "k4", "v:with:colons"),
    ]
    assert {tuple(m["headers"]) for m in got} == {("h1", "x", "h2", "")}
    assert all(m["tstype"] == "create" and before <= m["ts"] <= after for m in got)
    formatted = kcat(broker, "-C", "-t", topic_name, "-e", "-Z", "-o", "1", "-c", "2", "-f", "%o|%k|%s\n")
    assert formatted.splitlines() == ["1|NULL|v-no-key", "2|tomb|NULL"]


def test_empty_value_without_null_flag_stays_empty(broker, topic_name):
    kcat(broker, "-P", "-t", topic_name, "-K", ":", stdin="k-empty:\n")
    (got,) = consume_json(broker, topic_name, "-o", "beginning")
    assert (got["key"], got["payload"]) == ("k-empty", "")


def test_offsets_counts_and_exit_at_end(broker, topic_name):
    kcat(broker, "-P", "-t", topic_name, stdin="".join(f"m{i}\n" for i in range(10)))
    assert [m["offset"] for m in consume_json(broker, topic_name, "-o", "7")] == [7, 8, 9]
    assert [m["payload"] for m in consume_json(broker, topic_name, "-o", "-2")] == ["m8", "m9"]
    assert [m["offset"] for m in consume_json(broker, topic_name, "-o", "3", "-c", "2")] == [3, 4]
    assert consume_json(broker, topic_name, "-o", "end") == []


def test_start_at_timestamp_and_query_offsets(broker, topic_name):
    confluent_send(broker.bootstrap, topic_name, numbered(6, timestamps=True))
    (first_ts,) = {m["ts"] for m in consume_json(broker, topic_name, "-o", "beginning", "-c", "1")}
    assert first_ts == BASE_TIMESTAMP
    got = consume_json(broker, topic_name, "-o", f"s@{BASE_TIMESTAMP + 3500}")
    assert [(m["offset"], m["ts"]) for m in got] == [(4, BASE_TIMESTAMP + 4000), (5, BASE_TIMESTAMP + 5000)]
    queried = kcat(broker, "-Q", "-t", f"{topic_name}:0:{BASE_TIMESTAMP + 2000}")
    assert f"{topic_name} [0] offset 2" in queried


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "none"])
def test_compression(broker, topic_name, codec):
    """kcat's librdkafka (2.0.2, as Debian ships it) uses gzip, snappy or lz4 only if the broker's
    ApiVersions include Produce v0 (lz4 also FindCoordinator v0), zstd only with Produce v7+;
    otherwise it sends the batch uncompressed without a word (rdkafka_msgset_writer.c,
    select_MsgVersion). Kafka 3.x serves Produce v0+; librdkafka 2.11.1 relaxed the check."""
    lines = [f"compressible line {i} " * 20 for i in range(20)]
    kcat(broker, "-P", "-t", topic_name, "-z", codec, "-X", "linger.ms=1000", stdin="\n".join(lines) + "\n")
    assert [m["payload"] for m in consume_json(broker, topic_name, "-o", "beginning")] == lines
    assert {b.compression for b in stored_batches(broker.bootstrap, topic_name)} == {CODEC_IDS[codec]}


def test_explicit_partition(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    kcat(broker, "-P", "-t", topic_name, "-p", "2", stdin="to-two\n")
    kcat(broker, "-P", "-t", topic_name, "-p", "1", stdin="to-one\n")
    got = kcat(broker, "-C", "-t", topic_name, "-p", "2", "-e", "-o", "beginning", "-f", "%p:%o:%s\n")
    assert got.splitlines() == ["2:0:to-two"]
    assert consume_json(broker, topic_name, "-o", "beginning") == []


def test_acks_all_produce_reports_success_for_large_message(broker, topic_name):
    big = "x" * (900 * 1024)
    kcat(broker, "-P", "-t", topic_name, "-X", "acks=all", "-X", "message.max.bytes=2000000", stdin=big + "\n")
    got = kcat(broker, "-C", "-t", topic_name, "-e", "-o", "beginning", "-f", "%o:%S\n",
               "-X", "fetch.message.max.bytes=2000000")
    assert got.splitlines() == [f"0:{len(big)}"]
