"""Consumer groups with confluent-kafka (librdkafka) against a real broker process: resume after
committed offsets, partitions split across members with leave and crash, cooperative-sticky,
static membership, restarts of the broker, and the admin group APIs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

FAST = ("--set", "group.initial.rebalance.delay.ms=0", "--set", "group.min.session.timeout.ms=1000")


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(15) == 0


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    config.update(extra)
    return Consumer(config)


def poll_until(c: Consumer, done, timeout: float = 30.0) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"timed out with {len(got)} records"
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg)
    return got


def test_resume_after_committed_offsets(broker_factory, topic_name):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [(i % 3, f"a{i}".encode()) for i in range(30)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(broker.bootstrap, group)
    c.subscribe([topic_name])
    first = poll_until(c, lambda got: len(got) >= 30)
    assert sorted(m.value() for m in first) == sorted(f"a{i}".encode() for i in range(30))
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic_name, p) for p in range(3)], timeout=10)
    assert [tp.offset for tp in committed] == [10, 10, 10]
    c.close()

    produce(broker.bootstrap, topic_name, [(i % 3, f"b{i}".encode()) for i in range(6)] + [(0, b"sentinel")])
    c = consumer(broker.bootstrap, group)
    c.subscribe([topic_name])
    second = poll_until(c, lambda got: len(got) >= 7)
    c.close()
    assert sorted(m.value() for m in second) == sorted([f"b{i}".encode() for i in range(6)] + [b"sentinel"])
    assert all(m.offset() >= 10 for m in second)


MEMBER_SCRIPT = r"""
import json, signal, sys
from confluent_kafka import Consumer
bootstrap, topic, group = sys.argv[1:4]
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
def out(*parts):
    print(json.dumps(parts), flush=True)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
              "max.poll.interval.ms": 60000})
c.subscribe([topic], on_assign=lambda c, ps: out("assigned", sorted(p.partition for p in ps)))
while not stop:
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    out("rec", m.partition(), m.offset(), m.value().decode())
    c.commit(message=m, asynchronous=False)
    out("committed", m.partition(), m.offset() + 1)
c.close()
out("closed")
"""


class Member:
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, bootstrap, topic, group],
                                     stdout=subprocess.PIPE, text=True)
        self.events: list = []
        import threading

        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def assignment(self) -> list[int] | None:
        assigned = [e[1] for e in self.events if e[0] == "assigned"]
        return assigned[-1] if assigned else None

    def records(self) -> list[tuple[int, int, str]]:
        return [tuple(e[1:]) for e in self.events if e[0] == "rec"]


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_three_members_split_partitions_then_leave_crash_and_join(broker_factory, topic_name):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    members = [Member(broker.bootstrap, topic_name, group) for _ in range(3)]
    try:
        wait_for(lambda: sorted(sum((m.assignment() or [] for m in members), [])) == [0, 1, 2]
                 and all(m.assignment() for m in members), what="three one-partition assignments")
        produce(broker.bootstrap, topic_name, [(i % 3, f"m{i}".encode()) for i in range(30)])
        wait_for(lambda: len(set(sum((m.records() for m in members), []))) >= 30, what="first 30 records")
        members[0].proc.terminate()  # clean close: LeaveGroup
        members[0].proc.wait(15)
        assert members[0].events[-1] == ["closed"]
        members[1].proc.kill()  # crash: removed after its session timeout
        members[1].proc.wait(15)
        produce(broker.bootstrap, topic_name, [(i % 3, f"n{i}".encode()) for i in range(30)])
        members.append(Member(broker.bootstrap, topic_name, group))
        wait_for(lambda: sorted((members[2].assignment() or []) + (members[3].assignment() or [])) == [0, 1, 2],
                 what="the survivors own every partition")
        wait_for(lambda: {r[2] for m in members for r in m.records()} >= {f"n{i}" for i in range(30)},
                 what="every message of the second round")
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.proc.terminate()
        for m in members:
            try:
                m.proc.wait(15)
            except subprocess.TimeoutExpired:
                m.proc.kill()
    consumed = [r for m in members for r in m.records()]
    committed = {(e[1], e[2]) for m in members for e in m.events if e[0] == "committed"}
    values = {r[2] for r in consumed}
    assert values >= {f"m{i}" for i in range(30)} | {f"n{i}" for i in range(30)}
    seen: dict[tuple[int, int], int] = {}
    for partition, offset, _ in consumed:
        seen[(partition, offset)] = seen.get((partition, offset), 0) + 1
    twice = [key for key, count in seen.items() if count > 1]
    # a record may be consumed again only if its offset was not committed (the crashed member's last one)
    assert all((p, o + 1) not in committed for p, o in twice), twice


def test_cooperative_sticky_rebalances_incrementally(broker_factory, topic_name):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    log: dict[str, list] = {"a": [], "b": []}

    def callbacks(name):
        def on_assign(c, parts):
            log[name].append(("assign", sorted(p.partition for p in parts)))
            c.incremental_assign(parts)

        def on_revoke(c, parts):
            log[name].append(("revoke", sorted(p.partition for p in parts)))
            c.incremental_unassign(parts)

        return on_assign, on_revoke

    a = consumer(broker.bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    on_assign, on_revoke = callbacks("a")
    a.subscribe([topic_name], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + 30
    while log["a"] != [("assign", [0, 1, 2, 3])]:
        assert time.monotonic() < deadline, log
        a.poll(0.1)
    b = consumer(broker.bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    on_assign, on_revoke = callbacks("b")
    b.subscribe([topic_name], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + 40
    while not (log["b"] and sum(len(p) for kind, p in log["b"] if kind == "assign") == 2):
        assert time.monotonic() < deadline, log
        a.poll(0.1)
        b.poll(0.1)
    revoked = [p for kind, parts in log["a"] if kind == "revoke" for p in parts]
    assert len(revoked) == 2, log  # only the moved partitions were revoked, never all four
    assert a.assignment() and sorted(tp.partition for tp in a.assignment()) == sorted(set(range(4)) - set(revoked))
    assert sorted(tp.partition for tp in b.assignment()) == sorted(revoked)
    a.close()
    b.close()


def test_static_member_restart_does_not_rebalance(broker_factory, topic_name):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    assigned = {"static": [], "other": []}

    def track(name):
        return lambda c, parts: assigned[name].append(sorted(p.partition for p in parts))

    static = consumer(broker.bootstrap, group, **{"group.instance.id": "static-1", "session.timeout.ms": 10000})
    static.subscribe([topic_name], on_assign=track("static"))
    other = consumer(broker.bootstrap, group)
    other.subscribe([topic_name], on_assign=track("other"))
    deadline = time.monotonic() + 30
    while not (assigned["static"] and assigned["other"]
               and len(assigned["static"][-1]) + len(assigned["other"][-1]) == 3):
        assert time.monotonic() < deadline, assigned
        static.poll(0.1)
        other.poll(0.1)
    for _ in range(20):
        static.poll(0.05)
        other.poll(0.05)
    before = list(assigned["other"])
    static_partitions = assigned["static"][-1]
    static.close()  # a static member does not send LeaveGroup
    restarted = consumer(broker.bootstrap, group, **{"group.instance.id": "static-1", "session.timeout.ms": 10000})
    again = []
    restarted.subscribe([topic_name], on_assign=lambda c, parts: again.append(sorted(p.partition for p in parts)))
    deadline = time.monotonic() + 20
    while not again:
        assert time.monotonic() < deadline
        restarted.poll(0.1)
        other.poll(0.1)
    end = time.monotonic() + 3
    while time.monotonic() < end:
        restarted.poll(0.1)
        other.poll(0.1)
    assert again == [static_partitions]
    assert assigned["other"] == before  # the other member saw no rebalance
    restarted.close()
    other.close()


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_groups_and_offsets_survive_broker_restart(broker_factory, topic_name, stop):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [(p, b"x") for p in range(3) for _ in range(4)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(broker.bootstrap, group)
    c.subscribe([topic_name])
    poll_until(c, lambda got: len(got) >= 12)
    c.commit(offsets=[TopicPartition(topic_name, 0, 3), TopicPartition(topic_name, 1, 4),
                      TopicPartition(topic_name, 2, 1)], asynchronous=False)
    c.close()
    if stop == "clean":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(15)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(15)
    assert described.state.name == "EMPTY" and described.members == []
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions) == [
        (topic_name, 0, 3), (topic_name, 1, 4), (topic_name, 2, 1)]
    c = consumer(broker.bootstrap, group)
    c.subscribe([topic_name])
    produce(broker.bootstrap, topic_name, [(0, b"sentinel")])
    resumed = poll_until(c, lambda got: len(got) >= 5)  # (0, 4) is the sentinel
    for _ in range(5):  # and nothing else arrives
        msg = c.poll(0.1)
        assert msg is None or msg.error(), (msg.partition(), msg.offset())
    c.close()
    assert sorted((m.partition(), m.offset()) for m in resumed) == sorted(
        [(0, 3), (0, 4)] + [(2, o) for o in range(1, 4)])


def test_admin_list_describe_alter_delete(broker_factory, topic_name):
    broker = broker_factory(*FAST)
    create_topic(broker.bootstrap, topic_name)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(broker.bootstrap, group, **{"client.id": "described-client"})
    c.subscribe([topic_name])
    deadline = time.monotonic() + 20
    while not c.assignment():
        assert time.monotonic() < deadline
        c.poll(0.1)
    described = admin.describe_consumer_groups([group])[group].result(15)
    assert described.state.name == "STABLE" and described.partition_assignor == "range"
    assert [m.client_id for m in described.members] == ["described-client"]
    assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [0, 1, 2]
    assert described.coordinator.id == 0
    listed = admin.list_consumer_groups().result(15)
    assert [(g.group_id, g.state.name) for g in listed.valid if g.group_id == group] == [(group, "STABLE")]
    # an active group cannot be deleted
    with pytest.raises(Exception) as failure:
        admin.delete_consumer_groups([group])[group].result(15)
    assert "NON_EMPTY_GROUP" in str(failure.value) or "not empty" in str(failure.value).lower()
    c.close()
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic_name, 0, 7), TopicPartition(topic_name, 2, 9)])])[group].result(15)
    assert all(tp.error is None for tp in altered.topic_partitions)
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 7), (2, 9)]
    admin.delete_consumer_groups([group])[group].result(15)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}
    with pytest.raises(Exception) as failure:
        admin.delete_consumer_groups([group])[group].result(15)
    assert "GROUP_ID_NOT_FOUND" in str(failure.value) or "does not exist" in str(failure.value).lower()
