"""Durability across broker restarts, against a real broker process and its data directory.

A clean stop (SIGTERM) and start must keep every topic, partition count and record, and must not
rescan the logs; a SIGKILL while a producer with acks=all is sending must keep every record the
producer saw acknowledged, at the offset it was acknowledged with, in order, however often it
happens in a row.
"""

import threading
import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    CODECS, ConfluentDriver, Msg, confluent_send, create_topic, numbered, offsets,
)

def snapshot(bootstrap: str, names: list[str]) -> dict:
    """The topics' partition counts and every record of every partition, as clients see them."""
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert set(names) <= set(topics), f"topics missing: {set(names) - set(topics)}"
    driver = ConfluentDriver(bootstrap)
    state = {}
    for name, topic in ((n, topics[n]) for n in names):
        for partition in sorted(topic.partitions):
            low, high = driver.watermarks(name, partition)
            records = driver.consume(name, partition, low, high - low)
            assert offsets(records) == list(range(low, high))
            state[(name, partition)] = records
        state[name] = len(topic.partitions)
    return state


def start_and_read_log(broker) -> str:
    """Start the broker and return what it logged during this start-up."""
    already = len(broker.output())
    broker.start()
    return broker.output()[already:]


def test_clean_restart_keeps_topics_partitions_and_records(broker, topic_name):
    multi, auto = f"{topic_name}-multi", f"{topic_name}-auto"
    create_topic(broker.bootstrap, multi, partitions=3)
    for partition in range(3):
        for codec in CODECS:
            confluent_send(broker.bootstrap, multi, numbered(4, prefix=f"{codec}-{partition}", partition=partition,
                                                            timestamps=True), **{"compression.type": codec})
    confluent_send(broker.bootstrap, auto, [Msg(b"v", b"k", (("h", b"1"),)), Msg(None, b"tombstone"), Msg(b"")])
    before = snapshot(broker.bootstrap, [multi, auto])
    assert before[multi] == 3 and before[auto] == 1 and len(before[(multi, 2)]) == 4 * len(CODECS)

    assert broker.stop() == 0, broker.output()[-3000:]
    started = start_and_read_log(broker)
    assert "after a clean shutdown" in started

    assert snapshot(broker.bootstrap, [multi, auto]) == before
    assert confluent_send(broker.bootstrap, multi, [Msg(b"next", partition=1)]) == [4 * len(CODECS)]
    assert confluent_send(broker.bootstrap, auto, [Msg(b"next")]) == [3]


def test_clean_restart_does_not_rescan_but_a_crash_does(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": "4096"})
    for i in range(10):
        confluent_send(broker.bootstrap, topic_name, [Msg(f"{i}-{j}|".encode() * 30) for j in range(20)])
    segments = list((broker.data_dir / f"{topic_name}-0").glob("*.log"))
    assert len(segments) > 3, "the topic should span several segments for this test to mean anything"

    broker.stop()
    started = start_and_read_log(broker)
    assert "after a clean shutdown" in started
    assert f"Recovered {topic_name}-0" not in started, "a clean restart rescanned the log"

    confluent_send(broker.bootstrap, topic_name, numbered(20, prefix="after-clean"))
    broker.kill()
    started = start_and_read_log(broker)
    assert "after an unclean shutdown" in started
    assert f"Recovered {topic_name}-0 from offset 200" in started, "a crash must validate what came after the checkpoint"
    assert ConfluentDriver(broker.bootstrap).watermarks(topic_name, 0) == (0, 220)


def produce_until_killed(broker, topic: str, label: str, kill_after: int) -> list[tuple[int, bytes]]:
    """Send continuously with acks=all; SIGKILL the broker once ``kill_after`` messages are
    acknowledged (more are in flight); return every (offset, value) acknowledged, in ack order."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False, "linger.ms": 1,
        "retries": 0, "queue.buffering.max.messages": 2000, "message.timeout.ms": 10000,
    })
    acked: list[tuple[int, bytes]] = []

    def done(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.value()))

    killer = threading.Thread(target=lambda: (time.sleep(0.01), broker.kill()))
    i = 0
    while killer.ident is None or killer.is_alive():  # keep the pipeline full until the kill is done
        try:
            producer.produce(topic, value=f"{label}-{i:06d}".encode(), partition=0, on_delivery=done)
            i += 1
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
        if killer.ident is None and len(acked) >= kill_after:
            killer.start()
    producer.purge(in_queue=True, in_flight=True)
    producer.flush(5)
    return acked


def test_kill_9_during_acks_all_produce_keeps_every_acknowledged_record(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"segment.bytes": "16384"})  # rolls while crashing
    acked: list[tuple[int, bytes]] = []
    for round_no in range(3):
        if round_no:
            broker.start()
        acked += produce_until_killed(broker, topic_name, f"round{round_no}", kill_after=1500 + 500 * round_no)
    broker.start()

    acked_offsets = [offset for offset, _ in acked]
    assert acked_offsets == sorted(acked_offsets) and len(set(acked_offsets)) == len(acked)
    produce_order = [value for _, value in acked]
    assert produce_order == sorted(produce_order)  # labels and counters sort in the order they were sent

    driver = ConfluentDriver(broker.bootstrap)
    low, high = driver.watermarks(topic_name, 0)
    assert low == 0 and high > acked_offsets[-1]
    stored = {r.offset: r.value for r in driver.consume(topic_name, 0, 0, high, timeout=20)}
    assert len(stored) == high, "the log has holes or the consumer stopped early"
    lost = [(offset, value) for offset, value in acked if stored.get(offset) != value]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, first: {lost[:3]}"
