"""Share-group record state that must outlive a lock, a delivery limit and a broker restart
(clean and SIGKILL), through raw requests against real broker processes."""

from __future__ import annotations

import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import Msg, RawConnection, confluent_send, create_topic  # noqa: E402
from test_shares_raw import ACCEPT, RELEASE, Member, acquired  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

SHORT_LOCKS = ["--set", "group.share.record.lock.duration.ms=1000", "--set", "group.share.delivery.count.limit=2"]


@pytest.fixture(scope="module")
def short_lock_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("shares-locks") / "data", extra_args=SHORT_LOCKS).start()
    yield proc
    proc.kill()


def started_member(conn, broker, topic, group):
    member = Member(conn, group, topic)
    member.join()
    assert acquired(member.fetch()) == []
    return member


def test_an_expired_lock_redelivers_to_another_member_until_the_delivery_limit_archives(short_lock_broker):
    broker = short_lock_broker
    topic = f"share-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn_a, RawConnection(broker.bootstrap) as conn_b:
        a = started_member(conn_a, broker, topic, f"g-{topic}")
        b = started_member(conn_b, broker, topic, f"g-{topic}")
        confluent_send(broker.bootstrap, topic, [Msg(b"0"), Msg(b"1")])
        assert acquired(a.fetch(max_wait_ms=5000)) == [(0, 1, 1)]
        # a never acknowledges: b's long poll is answered when a's locks expire
        assert acquired(b.fetch(max_wait_ms=10000)) == [(0, 1, 2)]
        # released once more, both records have reached group.share.delivery.count.limit=2: archived
        b.acknowledge([(0, 1, RELEASE)])
        confluent_send(broker.bootstrap, topic, [Msg(b"2")])
        assert acquired(a.fetch(max_wait_ms=5000)) == [(2, 2, 1)]


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_acknowledged_records_are_not_redelivered_after_a_restart(tmp_path, stop):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = f"share-{uuid.uuid4().hex[:10]}"
        group = f"g-{topic}"
        create_topic(broker.bootstrap, topic)
        with RawConnection(broker.bootstrap) as conn:
            member = started_member(conn, broker, topic, group)
            confluent_send(broker.bootstrap, topic, [Msg(b"%d" % i) for i in range(6)])
            assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 5, 1)]
            assert member.acknowledge([(0, 2, ACCEPT), (4, 4, ACCEPT)]).error_code == 0
            # stopped with the member still connected
            broker.stop() if stop == "clean" else broker.kill()
        broker.start()
        with RawConnection(broker.bootstrap) as conn:
            member = Member(conn, group, topic)
            member.join()
            # what was acquired but never acknowledged comes back, counting the earlier delivery
            assert acquired(member.fetch(max_wait_ms=5000)) == [(3, 3, 2), (5, 5, 2)]
    finally:
        broker.kill()
