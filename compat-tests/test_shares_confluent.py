"""confluent-kafka 2.16's ShareConsumer (librdkafka's KIP-932 share consumer) against a real
broker process: several members of one share group share a partition, release, reject, lock
expiry and the delivery-count limit. The share group starts at the log end
(share.auto.offset.reset=latest): a probe record, produced until one arrives, shows it started."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import create_topic  # noqa: E402
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

SHORT_LOCKS = ["--set", "group.share.record.lock.duration.ms=1000", "--set", "group.share.delivery.count.limit=3"]
PROBE = b"probe"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("shares-confluent") / "data").start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def short_lock_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("shares-confluent-locks") / "data", extra_args=SHORT_LOCKS).start()
    yield proc
    proc.kill()


def new_topic(broker) -> str:
    name = f"share-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, name)
    return name


class Members:
    """Share consumers of one group, closed at the end."""

    def __init__(self, broker, topic: str, count: int, **conf) -> None:
        self.broker, self.topic = broker, topic
        self.group = f"g-{topic}"
        self.consumers = [self._consumer(conf) for _ in range(count)]
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

    def _consumer(self, conf) -> ShareConsumer:
        consumer = ShareConsumer({"bootstrap.servers": self.broker.bootstrap, "group.id": self.group,
                                  "share.acknowledgement.mode": "explicit", **conf})
        consumer.subscribe([self.topic])
        return consumer

    def add(self, **conf) -> ShareConsumer:
        consumer = self._consumer(conf)
        self.consumers.append(consumer)
        return consumer

    def __enter__(self) -> "Members":
        return self

    def __exit__(self, *exc) -> None:
        for consumer in self.consumers:
            consumer.close()

    def produce_one_batch(self, values) -> None:
        """All in one batch: a fetch (librdkafka prefetches while it holds nothing) that wakes
        on it acquires them all (batch-optimized acquisition takes whole batches)."""
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 200})
        for value in values:
            producer.produce(self.topic, value)
        assert producer.flush(10) == 0

    def produce(self, values) -> None:
        """One batch per record, so a fetch's MaxRecords (max.poll.records) is the unit shared."""
        for value in values:
            self.producer.produce(self.topic, value)
            assert self.producer.flush(10) == 0

    def started(self, timeout: float = 30) -> None:
        """Probe until a member receives one: the share partition exists, later records all count."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.produce([PROBE])
            for consumer in self.consumers:
                messages = [m for m in consumer.poll(0.5) if m.error() is None]
                for message in messages:
                    consumer.acknowledge(message)
                if messages:
                    consumer.commit_sync()
                    return
        raise AssertionError("no share consumer received a probe record")


def poll_records(consumer, timeout: float = 30, what: str = "records"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        messages = [m for m in consumer.poll(0.5) if m.error() is None and m.value() != PROBE]
        if messages:
            return messages
    raise AssertionError(f"no {what} within {timeout}s")


def test_members_share_one_partition_and_each_record_is_accepted_once(broker):
    topic = new_topic(broker)
    values = [b"n-%03d" % i for i in range(30)]
    with Members(broker, topic, 3, **{"max.poll.records": 5}) as members:
        members.started()
        members.produce(values)
        accepted: dict[bytes, int] = {}
        held = []
        # Each member takes records while the others hold theirs unacknowledged (locked): a
        # record held by one member is never delivered to another.
        for index, consumer in enumerate(members.consumers):
            got = poll_records(consumer)
            assert not {m.value() for m in got} & {m.value() for _, m in held}
            held += [(index, m) for m in got]
        for index, message in held:
            members.consumers[index].acknowledge(message)
            accepted[message.value()] = accepted.get(message.value(), 0) + 1
        for consumer in members.consumers:
            consumer.commit_sync()
        deadline = time.monotonic() + 60
        while len(accepted) < len(values) and time.monotonic() < deadline:
            for consumer in members.consumers:
                for message in [m for m in consumer.poll(0.3) if m.error() is None and m.value() != PROBE]:
                    consumer.acknowledge(message)
                    accepted[message.value()] = accepted.get(message.value(), 0) + 1
                consumer.commit_sync()
        assert accepted == {value: 1 for value in values}
        assert {index for index, _ in held} == {0, 1, 2}


def test_released_records_come_back_with_a_rising_delivery_count_and_rejected_ones_never(broker):
    topic = new_topic(broker)
    with Members(broker, topic, 1) as members:
        (consumer,) = members.consumers
        members.started()
        members.produce([b"keep", b"drop", b"again"])
        seen: list[tuple[bytes, int]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (b"again", 3) not in seen:
            for message in [m for m in consumer.poll(0.5) if m.error() is None and m.value() != PROBE]:
                seen.append((message.value(), message.delivery_count()))
                kind = {b"keep": AcknowledgeType.ACCEPT, b"drop": AcknowledgeType.REJECT,
                        b"again": AcknowledgeType.RELEASE}[message.value()]
                if message.value() == b"again" and message.delivery_count() == 3:
                    kind = AcknowledgeType.ACCEPT
                consumer.acknowledge(message, kind)
            consumer.commit_sync()
        assert seen == [(b"keep", 1), (b"drop", 1), (b"again", 1), (b"again", 2), (b"again", 3)]


def test_an_expired_lock_redelivers_to_another_member_until_the_delivery_limit_archives(short_lock_broker):
    topic = new_topic(short_lock_broker)
    with Members(short_lock_broker, topic, 1) as members:
        (holder,) = members.consumers
        members.started()
        members.produce([b"slow"])
        first = poll_records(holder)
        assert [(m.value(), m.delivery_count()) for m in first] == [(b"slow", 1)]
        # The other member joins only now: librdkafka prefetches while it holds nothing, so a member
        # present before the record could take it first. The holder, holding it, fetches no more.
        other = members.add()
        # holder never acknowledges: after group.share.record.lock.duration.ms (1 s) the record is
        # released, and the other member gets it with delivery count 2
        again = poll_records(other, what="the redelivered record")
        assert [(m.value(), m.delivery_count()) for m in again] == [(b"slow", 2)]
        other.acknowledge(again[0], AcknowledgeType.RELEASE)
        other.commit_sync()
        third = poll_records(other, what="the third delivery")
        assert [(m.value(), m.delivery_count()) for m in third] == [(b"slow", 3)]
        # released at group.share.delivery.count.limit (3): archived, never delivered again
        other.acknowledge(third[0], AcknowledgeType.RELEASE)
        other.commit_sync()
        members.produce([b"next"])
        after = poll_records(other, what="the next record")
        assert [(m.value(), m.delivery_count()) for m in after] == [(b"next", 1)]


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_accepted_records_are_not_redelivered_after_a_broker_restart(tmp_path, stop):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = new_topic(broker)
        values = [b"r-%02d" % i for i in range(10)]
        with Members(broker, topic, 1, **{"max.poll.records": 100}) as first:
            (consumer,) = first.consumers
            first.started()
            first.produce_one_batch(values)
            received = poll_records(consumer)
            assert [m.value() for m in received] == values
            for message in received[:6]:
                consumer.acknowledge(message)
            consumer.commit_sync()
            # the broker stops while the last four are still acquired by this member
            broker.stop() if stop == "clean" else broker.kill()
            broker.start()
            with Members(broker, topic, 1, **{"max.poll.records": 100}) as second:
                (other,) = second.consumers
                redelivered = []
                while len(redelivered) < 4:  # several polls: each poll's records accepted before the next
                    got = poll_records(other, what="the unacknowledged records")
                    for message in got:
                        other.acknowledge(message)
                    other.commit_sync()
                    redelivered += got
                assert [m.value() for m in redelivered] == values[6:]
                second.produce([b"after"])
                # nothing accepted before the restart comes back before (or with) the next record
                assert [m.value() for m in poll_records(other, what="the next record")] == [b"after"]
    finally:
        broker.kill()


def test_a_share_groups_lag_falls_as_its_consumer_accepts_and_rejects_and_not_as_it_releases(broker):
    from clients import RawConnection
    from test_shares_raw import describe_lags

    topic = new_topic(broker)
    with Members(broker, topic, 1) as members, RawConnection(broker.bootstrap) as conn:
        (consumer,) = members.consumers
        members.started()
        deadline = time.monotonic() + 30
        while describe_lags(conn, members.group)[0][1] != 0:  # until every probe past the start is accepted
            assert time.monotonic() < deadline, describe_lags(conn, members.group)
            probes = [m for m in consumer.poll(0.5) if m.error() is None]
            for message in probes:
                consumer.acknowledge(message)
            if probes:
                consumer.commit_sync()
        values = [b"l-%d" % i for i in range(10)]
        members.produce_one_batch(values)
        assert describe_lags(conn, members.group)[0][1] == 10
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            messages = [m for m in consumer.poll(0.5) if m.error() is None and m.value() != PROBE]
            for message in messages:
                index = values.index(message.value())
                kind = AcknowledgeType.ACCEPT if index < 4 else AcknowledgeType.REJECT if index < 6 \
                    else AcknowledgeType.RELEASE
                consumer.acknowledge(message, kind)  # a released one redelivered early is released again
            got += [m for m in messages if m.delivery_count() == 1]
            if messages:
                consumer.commit_sync()
        assert [m.value() for m in got] == values
        assert describe_lags(conn, members.group)[0][1] == 4  # the four released ones
        accepted = set()
        deadline = time.monotonic() + 30
        while len(accepted) < 4 and time.monotonic() < deadline:
            messages = [m for m in consumer.poll(0.5) if m.error() is None and m.value() != PROBE]
            for message in messages:
                consumer.acknowledge(message)
                accepted.add(message.value())
            if messages:
                consumer.commit_sync()
        assert accepted == set(values[6:])
        assert describe_lags(conn, members.group)[0][1] == 0
