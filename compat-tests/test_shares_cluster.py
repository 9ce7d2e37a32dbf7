"""Share-group state across a leader change in a 3-broker ZooKeeper cluster: the new leader of
the partition reads the share-partition state from the share coordinator (the leader of its
__share_group_state partition, over ReadShareGroupState) and redelivers only what was never
acknowledged."""

from __future__ import annotations

import base64
import uuid

import pytest

pytest.register_assert_rewrite("clients")

from cluster import ZooKeeperCluster  # noqa: E402
from clients import Msg, RawConnection, confluent_send  # noqa: E402
from test_replication_failover import FAST, all_led_with_isr, create_topic, deadline_loop, partitions_of  # noqa: E402
from test_shares_raw import ACCEPT, HEARTBEAT, Member, acquired, call, new_member_id  # noqa: E402

from kafkacompat.wire.errors import ErrorCode  # noqa: E402

FIND_COORDINATOR = 10
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE}


def topic_id_from_heartbeat(cluster, group: str, topic: str):
    """Find the group's coordinator and join there, as a client does."""
    for _ in deadline_loop(30, "a share group coordinator", interval=0.2):
        with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
            (found,) = call(conn, FIND_COORDINATOR, 4, key_type=0, coordinator_keys=[group]).coordinators
        if found.error_code:
            continue
        with RawConnection(f"{found.host}:{found.port}") as conn:
            answer = call(conn, HEARTBEAT, group_id=group, member_id=new_member_id(), member_epoch=0,
                          subscribed_topic_names=[topic])
        if answer.error_code == 0 and answer.assignment and answer.assignment.topic_partitions:
            return answer.assignment.topic_partitions[0].topic_id


def leader_of(cluster, topic: str) -> int:
    """Partition 0's leader once every running broker's metadata names the same live one. Each
    broker learns of a leader change through its own ZooKeeper watch, so right after a failover
    one may answer with the new leader while another still has the old state (leader -1 once
    the old leader's registration is gone), as Kafka's brokers differ until the controller's
    UpdateMetadata reaches each of them (its tests wait for the propagation too)."""
    running = [b for b, proc in sorted(cluster.brokers.items()) if proc.proc is not None and proc.proc.poll() is None]
    for _ in deadline_loop(30, f"every broker to agree on a live leader of {topic}-0", interval=0.1):
        try:
            found = {getattr(partitions_of(cluster.metadata(b), topic).get(0), "leader", -1) for b in running}
        except Exception:  # noqa: BLE001 - a broker coming or going
            continue
        if len(found) == 1 and (leader := found.pop()) in running:
            return leader


def fetch_until_served(member: Member, **kwargs):
    """A client retries a fetch answered with a retriable error (a leader or coordinator moving)."""
    for _ in deadline_loop(30, "a share fetch served without a retriable error", interval=0.2):
        answer = member.fetch(**kwargs)
        errors = {p.error_code for t in answer.responses for p in t.partitions} | {answer.error_code}
        if not errors & RETRIABLE:
            return answer


def test_acknowledged_records_are_not_redelivered_after_a_leader_change(tmp_path):
    topic = f"share-{uuid.uuid4().hex[:10]}"
    group = f"g-{topic}"
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic, 1, 3, min_insync_replicas=2)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic, 1, {0, 1, 2}))
        topic_id = topic_id_from_heartbeat(cluster, group, topic)
        old_leader = leader_of(cluster, topic)
        with RawConnection(cluster.brokers[old_leader].bootstrap) as conn:
            member = Member(conn, group, topic)
            member.topic_id = topic_id
            assert acquired(fetch_until_served(member)) == []
            confluent_send(cluster.bootstrap, topic, [Msg(b"%d" % i) for i in range(6)])
            got = member.fetch(max_wait_ms=10000)
            assert acquired(got) == [(0, 5, 1)], got
            answer = member.acknowledge([(0, 2, ACCEPT), (4, 4, ACCEPT)])
            assert answer.error_code == 0 and [p.error_code for t in answer.responses for p in t.partitions] == [0]
            # killed with the member still connected (a closed connection would release its records)
            cluster.brokers[old_leader].kill()
        cluster.wait_for(lambda md: partitions_of(md, topic) and partitions_of(md, topic)[0].leader
                         not in (old_leader, -1))
        new_leader = leader_of(cluster, topic)
        with RawConnection(cluster.brokers[new_leader].bootstrap) as conn:
            member = Member(conn, group, topic)
            member.topic_id = topic_id
            got = acquired(fetch_until_served(member, max_wait_ms=5000))
            if not got:
                got = acquired(member.fetch(max_wait_ms=10000))
            assert got == [(3, 3, 2), (5, 5, 2)]


def test_a_share_consumer_resumes_after_a_leader_change_without_redelivering_accepted_records(tmp_path):
    from confluent_kafka import Producer, ShareConsumer

    topic = f"share-{uuid.uuid4().hex[:10]}"
    group = f"g-{topic}"
    values = [b"c-%02d" % i for i in range(10)]
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic, 1, 3, min_insync_replicas=2)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic, 1, {0, 1, 2}))
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})

        def share_consumer() -> ShareConsumer:
            consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                      "share.acknowledgement.mode": "explicit", "max.poll.records": 100,
                                      "topic.metadata.refresh.interval.ms": 1000})
            consumer.subscribe([topic])
            return consumer

        def poll_values(consumer, count: int, what: str, *, accept: bool = False) -> list:
            """Records until ``count``; explicit mode needs a poll's records acknowledged before the
            next poll, so a wait spanning several polls accepts them (``accept``)."""
            got = []
            for _ in deadline_loop(60, what, interval=0):
                messages = [m for m in consumer.poll(0.5) if m.error() is None and m.value() != b"probe"]
                got += messages
                if accept and messages:
                    for message in messages:
                        consumer.acknowledge(message)
                    consumer.commit_sync()
                if len(got) >= count:
                    return got

        first = share_consumer()
        for _ in deadline_loop(60, "the share group to start (a probe received)", interval=0):
            producer.produce(topic, b"probe")
            assert producer.flush(10) == 0
            probes = [m for m in first.poll(0.5) if m.error() is None]
            for message in probes:
                first.acknowledge(message)
            if probes:
                first.commit_sync()
                break
        # one batch: a (pre)fetch that wakes on it acquires all ten (whole batches are acquired)
        batching = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 200})
        for value in values:
            batching.produce(topic, value)
        assert batching.flush(10) == 0
        received = poll_values(first, len(values), "the records on the first leader")
        assert [m.value() for m in received] == values
        for message in received[:6]:
            first.acknowledge(message)
        first.commit_sync()
        old_leader = leader_of(cluster, topic)
        cluster.brokers[old_leader].kill()
        cluster.wait_for(lambda md: partitions_of(md, topic) and partitions_of(md, topic)[0].leader
                         not in (old_leader, -1))
        second = share_consumer()
        redelivered = poll_values(second, 4, "the unacknowledged records from the new leader", accept=True)
        assert [(m.value(), m.delivery_count()) for m in redelivered] == [(v, 2) for v in values[6:]]
        producer.produce(topic, b"after")
        assert producer.flush(10) == 0
        # nothing accepted on the old leader comes back before (or with) the next record
        assert [m.value() for m in poll_values(second, 1, "the next record", accept=True)] == [b"after"]
        second.close()


def coordinator(cluster, key_type: int, key: str) -> int:
    for _ in deadline_loop(30, f"the coordinator of {key}", interval=0.2):
        with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
            (found,) = call(conn, FIND_COORDINATOR, 6, key_type=key_type, coordinator_keys=[key]).coordinators
        if found.error_code == 0:
            return found.node_id


def topic_id_of(cluster, topic: str):
    from kafkacompat.wire import codec

    cls = codec.request_class(3)
    with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
        answer = call(conn, 3, 12, topics=[cls.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    (found,) = answer.topics
    return found.topic_id


def test_share_group_lag_from_a_group_coordinator_that_does_not_lead_the_partition(tmp_path):
    """The group coordinator answers DescribeShareGroupOffsets v1 with the high watermark from
    the partition's leader (ListOffsets) and the state from the share coordinator, neither of
    them itself nor each other."""
    from test_shares_raw import REJECT, RELEASE, describe_lags

    topic = f"share-{uuid.uuid4().hex[:10]}"
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic, 1, 3, min_insync_replicas=2)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic, 1, {0, 1, 2}))
        leader = leader_of(cluster, topic)
        topic_id = topic_id_of(cluster, topic)
        kafka_id = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
        for candidate in (f"g-{topic}-{i}" for i in range(200)):
            group_coordinator = coordinator(cluster, 0, candidate)
            if group_coordinator != leader and coordinator(cluster, 2, f"{candidate}:{kafka_id}:0") != leader:
                group = candidate
                break
        else:
            raise AssertionError("no group name whose coordinators are off the partition leader")
        with RawConnection(cluster.brokers[group_coordinator].bootstrap) as at_coordinator, \
                RawConnection(cluster.brokers[leader].bootstrap) as at_leader:
            member = Member(at_coordinator, group, topic)
            member.join()
            member.conn = at_leader

            def wait_lags(expected: dict) -> None:
                for _ in deadline_loop(30, f"the lags {expected}", interval=0.2):
                    if describe_lags(at_coordinator, group) == expected:
                        return

            assert acquired(fetch_until_served(member)) == []
            wait_lags({0: (0, 0)})
            confluent_send(cluster.bootstrap, topic, [Msg(b"%d" % i) for i in range(6)])
            wait_lags({0: (0, 6)})
            assert acquired(member.fetch(max_wait_ms=10000)) == [(0, 5, 1)]
            answer = member.acknowledge([(0, 1, ACCEPT), (3, 3, REJECT), (4, 4, RELEASE)])
            assert answer.error_code == 0 and [p.error_code for t in answer.responses for p in t.partitions] == [0]
            wait_lags({0: (2, 3)})  # 2, 4 and 5 left; 3 archived
