"""kafkajs 2.2.4 against a real broker process: producing and admin, driven by the scripts in
js/ (they print JSON; the asserts live here), with what kafkajs wrote read back by librdkafka.

kafkajs has no consumer without a group, so consuming with kafkajs waits for consumer groups.
"""

import json
import subprocess
from pathlib import Path

import pytest

pytest.register_assert_rewrite("clients")

from clients import BASE_TIMESTAMP, CODEC_IDS, ConfluentDriver, Msg, offsets, stored_batches  # noqa: E402

JS = Path(__file__).parent / "js"


def run_script(script: str, broker, topic: str, timeout: float = 60) -> dict:
    assert (JS / "node_modules" / "kafkajs").is_dir(), f"run: cd {JS} && npm install --no-audit --no-fund"
    done = subprocess.run(["node", str(JS / script), broker.bootstrap, topic], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout)


def test_producer_acks_keys_headers_nulls_timestamps_gzip_and_large_value(broker, topic_name):
    result = run_script("produce.js", broker, topic_name)
    assert [(r["partition"], r["errorCode"], r["baseOffset"]) for r in result["allAcks"]] == [(0, 0, "0")]
    assert [(r["partition"], r["errorCode"], r["baseOffset"]) for r in result["leaderAck"]] == [(0, 0, "5")]
    assert [(r["partition"], r["errorCode"], r["baseOffset"]) for r in result["gzip"]] == [(0, 0, "6")]
    assert [(r["partition"], r["errorCode"], r["baseOffset"]) for r in result["large"]] == [(0, 0, "16")]

    expected = [
        Msg(b"v-plain", b"k-plain", timestamp=BASE_TIMESTAMP),
        Msg(b"v-headers", b"k-headers", (("h1", b"one"), ("h1", b"again"), ("h2", b"two")), BASE_TIMESTAMP + 1000),
        Msg(None, b"k-tombstone", timestamp=BASE_TIMESTAMP + 2000),
        Msg(b"", b"k-empty", timestamp=BASE_TIMESTAMP + 3000),
        Msg(b"v-no-key", None, timestamp=BASE_TIMESTAMP + 4000),
        Msg(b"v-acks-1", b"k-acks-1", timestamp=BASE_TIMESTAMP + 5000),
        *[Msg(f"gzip {i} ".encode() * 50, f"k-gzip-{i}".encode(), timestamp=BASE_TIMESTAMP + 10000 + i)
          for i in range(10)],
        Msg(b"L" * 900 * 1024, b"k-large", timestamp=BASE_TIMESTAMP + 20000),
    ]
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, len(expected))
    assert [r.msg(with_timestamp=True) for r in got] == expected
    assert offsets(got) == list(range(len(expected))) and all(r.create_time for r in got)
    batches = stored_batches(broker.bootstrap, topic_name)
    assert [(b.base_offset, b.last_offset, b.compression) for b in batches] == [
        (0, 4, 0), (5, 5, 0), (6, 15, CODEC_IDS["gzip"]), (16, 16, 0),
    ]


def test_admin_topics_metadata_and_offsets(broker, topic_name):
    result = run_script("admin.js", broker, topic_name)
    assert (result["created"], result["createdAgain"], result["listed"]) == (True, False, True)
    (topic,) = result["metadata"]["topics"]
    assert topic["name"] == topic_name
    assert sorted((p["partitionId"], p["leader"], p["replicas"], p["isr"]) for p in topic["partitions"]) == [
        (0, 0, [0], [0]), (1, 0, [0], [0]), (2, 0, [0], [0]),
    ]
    assert sorted((o["partition"], o["low"], o["high"], o["offset"]) for o in result["offsets"]) == [
        (0, "0", "1", "1"), (1, "0", "2", "2"), (2, "0", "3", "3"),
    ]
    by_timestamp = {
        int(ts): sorted((o["partition"], int(o["offset"])) for o in answer)
        for ts, answer in result["byTimestamp"].items()
    }
    assert by_timestamp == {
        BASE_TIMESTAMP - 1: [(0, 0), (1, 0), (2, 0)],
        BASE_TIMESTAMP + 1000: [(0, 1), (1, 1), (2, 1)],
        BASE_TIMESTAMP + 1500: [(0, 1), (1, 2), (2, 2)],  # nothing that late in partitions 0, 1: their ends
        BASE_TIMESTAMP + 60000: [(0, 1), (1, 2), (2, 3)],
    }
    assert result["listedAfterDelete"] is False
