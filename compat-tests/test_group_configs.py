"""Kafka 4's per-group configs (ConfigResource type GROUP) against a real broker process:
kafka-python's admin client describes, alters (incrementally and replacing) and lists them,
with Kafka's validation against the broker's group.consumer.* / group.share.* bounds, and the
coordinators apply them: a share group set to share.auto.offset.reset=earliest reads from the
start with confluent-kafka's ShareConsumer, and a group's heartbeat interval and lock duration
are what its members are told. (confluent-kafka's AdminClient has no GROUP config resource:
its ResourceType.GROUP is the ACL resource type.)"""

from __future__ import annotations

import time
import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import Msg, RawConnection, confluent_send, create_topic  # noqa: E402
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient  # noqa: E402
from test_consumer_protocol import heartbeat  # noqa: E402
from test_shares_raw import ACCEPT, Member, acquired, call  # noqa: E402
from test_client_telemetry import listed  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402
from kafkacompat.wire import codec  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402

GROUP = 32
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
SET, DELETE = 0, 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("group-configs") / "data").start()
    yield proc
    proc.kill()


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def alter(conn: RawConnection, group: str, *ops: tuple[str, str | None, int], validate_only: bool = False):
    cls = codec.request_class(INCREMENTAL_ALTER_CONFIGS)
    resource = cls.AlterConfigsResource
    (result,) = call(conn, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=validate_only, resources=[resource(
        resource_type=GROUP, resource_name=group,
        configs=[resource.AlterableConfig(name=k, config_operation=op, value=v) for k, v, op in ops])]).responses
    return result.error_code, result.error_message


def described(conn: RawConnection, group: str) -> dict[str, tuple[str, int]]:
    cls = codec.request_class(DESCRIBE_CONFIGS)
    (result,) = call(conn, DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False, resources=[
        cls.DescribeConfigsResource(resource_type=GROUP, resource_name=group, configuration_keys=None)]).results
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_group_configs_are_described_with_the_broker_defaults_and_set_by_kafka_python(broker, admin):
    group = unique("cfg")
    with RawConnection(broker.bootstrap) as conn:
        assert described(conn, group) == {
            "consumer.session.timeout.ms": ("45000", DEFAULT_CONFIG),
            "consumer.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
            "share.session.timeout.ms": ("45000", DEFAULT_CONFIG),
            "share.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
            "share.record.lock.duration.ms": ("30000", DEFAULT_CONFIG),
            "share.delivery.count.limit": ("5", DEFAULT_CONFIG),
            "share.auto.offset.reset": ("latest", DEFAULT_CONFIG),
            "share.isolation.level": ("read_uncommitted", DEFAULT_CONFIG),
            "streams.session.timeout.ms": ("45000", DEFAULT_CONFIG),
            "streams.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG),
            "streams.num.standby.replicas": ("0", DEFAULT_CONFIG),
        }
        result = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs={
            "share.auto.offset.reset": (AlterConfigOp.SET, "earliest"),
            "consumer.heartbeat.interval.ms": (AlterConfigOp.SET, "6000")})], incremental=True)
        assert result == {"group": {group: "OK"}}
        got = described(conn, group)
        assert got["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG)
        assert got["consumer.heartbeat.interval.ms"] == ("6000", GROUP_CONFIG)
        assert got["share.session.timeout.ms"] == ("45000", DEFAULT_CONFIG)
        by_client = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, group)],
                                           config_filter="all")["group"][group]
        assert by_client["share.auto.offset.reset"]["value"] == "earliest"
        assert by_client["share.auto.offset.reset"]["config_source"] == "DYNAMIC_GROUP_CONFIG"
        assert by_client["share.isolation.level"]["config_source"] == "DEFAULT_CONFIG"
        assert by_client["consumer.heartbeat.interval.ms"]["config_type"] == "INT"
        assert group in admin.list_config_resources()["group"]
        assert (GROUP, group) in listed(conn, 1, [GROUP])[1]
        refused = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs={
            "share.session.timeout.ms": (AlterConfigOp.SET, "90000")})], incremental=True)["group"][group]
        assert "Error 40" in refused and "group.share.max.session.timeout.ms" in refused, refused
        assert alter(conn, group, ("share.auto.offset.reset", None, DELETE),
                     ("consumer.heartbeat.interval.ms", None, DELETE)) == (0, None)
        assert all(source == DEFAULT_CONFIG for _, source in described(conn, group).values())
        assert (GROUP, group) not in listed(conn, 1, [GROUP])[1]


@pytest.mark.parametrize("ops, message", [
    ([("no.such.config", "1", SET)], "Unknown group config name: no.such.config"),
    ([("share.auto.offset.reset", "sometime", SET)], "share.auto.offset.reset"),
    ([("share.isolation.level", "dirty", SET)], "share.isolation.level"),
    ([("share.auto.offset.reset", "by_duration", SET)], "'by_duration:<PnDTnHnMn.nS.>'"),
    ([("share.auto.offset.reset", "by_duration:-PT1H", SET)], "'by_duration:<PnDTnHnMn.nS.>'"),
    ([("share.auto.offset.reset", "by_duration:PT1X", SET)], "'by_duration:<PnDTnHnMn.nS.>'"),
    ([("share.auto.offset.reset", "by_duration:1h", SET)], "'by_duration:<PnDTnHnMn.nS.>'"),
    ([("consumer.session.timeout.ms", "abc", SET)], "Not a number of type INT"),
    ([("consumer.session.timeout.ms", "30000", SET)],
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ([("share.heartbeat.interval.ms", "20000", SET)],
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ([("share.delivery.count.limit", "11", SET)],
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ([("share.record.lock.duration.ms", "10000", SET)],
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
])
def test_invalid_group_configs_are_refused_as_kafka_refuses_them(broker, ops, message):
    group = unique("bad")
    with RawConnection(broker.bootstrap) as conn:
        code, got = alter(conn, group, *ops)
        assert code == ErrorCode.INVALID_CONFIG and message in got, got
        assert alter(conn, "", ("share.auto.offset.reset", "earliest", SET))[0] == ErrorCode.INVALID_REQUEST
        assert alter(conn, group, ("share.auto.offset.reset", "earliest", SET), validate_only=True) == (0, None)
        assert described(conn, group)["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG)  # validated only


def test_share_auto_offset_reset_earliest_makes_a_new_share_group_read_from_the_start(broker, admin):
    from confluent_kafka import ShareConsumer

    topic, group = unique("early"), unique("g")
    create_topic(broker.bootstrap, topic)
    confluent_send(broker.bootstrap, topic, [Msg(b"before-%d" % i) for i in range(3)])
    admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs={
        "share.auto.offset.reset": (AlterConfigOp.SET, "earliest")})], incremental=True)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
        assert got == [b"before-0", b"before-1", b"before-2"]
    finally:
        consumer.close()


@pytest.mark.parametrize("reset, expected", [
    ("by_duration:PT1H", [b"recent-0", b"recent-1", b"new"]),  # from the first record of the last hour
    ("by_duration:P1DT2H", [b"old-0", b"old-1", b"recent-0", b"recent-1", b"new"]),  # all of them
    ("by_duration:PT1M", [b"new"]),  # nothing that recent: the end, as latest
])
def test_share_auto_offset_reset_by_duration_starts_at_the_first_record_that_recent(broker, admin, reset, expected):
    from confluent_kafka import ShareConsumer

    topic, group = unique("dur"), unique("g")
    create_topic(broker.bootstrap, topic)
    now_ms = int(time.time() * 1000)
    confluent_send(broker.bootstrap, topic, [Msg(b"old-%d" % i, timestamp=now_ms - 3 * 3600_000 + i) for i in range(2)]
                   + [Msg(b"recent-%d" % i, timestamp=now_ms - 1800_000 + i) for i in range(2)])
    assert admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs={
        "share.auto.offset.reset": (AlterConfigOp.SET, reset)})], incremental=True) == {"group": {group: "OK"}}
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        sent_new = False
        while len(got) < len(expected) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
            if not sent_new and _share_partition_started(broker, group, topic):
                confluent_send(broker.bootstrap, topic, [Msg(b"new")])
                sent_new = True
        assert got == expected
    finally:
        consumer.close()


def _share_partition_started(broker, group: str, topic: str) -> bool:
    """Whether the broker logged the start of ``group``'s share partition ``topic``-0."""
    return f"Share group {group} starts {topic}-0 at offset" in broker.output()


def test_a_groups_heartbeat_intervals_and_lock_duration_are_what_its_members_are_told(broker):
    topic = unique("hb")
    create_topic(broker.bootstrap, topic)
    share_group, consumer_group = unique("share"), unique("consumer")
    with RawConnection(broker.bootstrap) as conn:
        assert alter(conn, share_group, ("share.heartbeat.interval.ms", "7000", SET),
                     ("share.record.lock.duration.ms", "20000", SET)) == (0, None)
        assert alter(conn, consumer_group, ("consumer.heartbeat.interval.ms", "8000", SET)) == (0, None)
        member = Member(conn, share_group, topic)
        assert member.join().heartbeat_interval_ms == 7000
        opened = member.fetch()
        assert opened.error_code == 0 and opened.acquisition_lock_timeout_ms == 20000
        confluent_send(broker.bootstrap, topic, [Msg(b"x")])
        assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 0, 1)]
    joined = heartbeat(broker, group_id=consumer_group, member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
                       subscribed_topic_names=[topic], topic_partitions=[])
    assert joined.error_code == 0 and joined.heartbeat_interval_ms == 8000
    other = heartbeat(broker, group_id=unique("consumer"), member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
                      subscribed_topic_names=[topic], topic_partitions=[])
    assert other.error_code == 0 and other.heartbeat_interval_ms == 5000  # the broker's


def test_alter_configs_replaces_a_groups_configs(broker):
    alter_configs = 33
    group = unique("replace")
    with RawConnection(broker.bootstrap) as conn:
        assert alter(conn, group, ("share.auto.offset.reset", "earliest", SET)) == (0, None)
        cls = codec.request_class(alter_configs)
        resource = cls.AlterConfigsResource
        (result,) = call(conn, alter_configs, 2, validate_only=False, resources=[resource(
            resource_type=GROUP, resource_name=group,
            configs=[resource.AlterableConfig(name="share.isolation.level", value="read_committed")])]).responses
        assert result.error_code == 0, result
        got = described(conn, group)
        assert got["share.isolation.level"] == ("read_committed", GROUP_CONFIG)
        assert got["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG)  # replaced: no longer set


def test_a_group_config_set_through_one_broker_applies_on_the_groups_coordinator(tmp_path):
    from cluster import ZooKeeperCluster
    from test_replication_failover import FAST, deadline_loop

    topic, group = unique("hbc"), unique("share")
    with ZooKeeperCluster(tmp_path, brokers=2, extra_args=FAST) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 2)
        create_topic(cluster.bootstrap, topic)
        for _ in deadline_loop(30, "the group's coordinator", interval=0.2):
            with RawConnection(cluster.brokers[0].bootstrap) as conn:
                (found,) = call(conn, 10, 4, key_type=0, coordinator_keys=[group]).coordinators
            if found.error_code == 0:
                break
        elsewhere = next(b for b in cluster.brokers if b != found.node_id)
        with RawConnection(cluster.brokers[elsewhere].bootstrap) as conn:
            assert alter(conn, group, ("share.heartbeat.interval.ms", "9000", SET)) == (0, None)
        with RawConnection(f"{found.host}:{found.port}") as conn:
            # the coordinator learns of the change from the metadata store's notification
            for _ in deadline_loop(30, "the coordinator to apply the group's heartbeat interval", interval=0.2):
                member = Member(conn, group, topic)
                answer = member.join()
                call(conn, 76, 1, group_id=group, member_id=member.member_id, member_epoch=-1)  # leaves
                if answer.heartbeat_interval_ms == 9000:
                    break


def test_share_isolation_level_read_committed_holds_back_an_open_transaction(broker):
    from confluent_kafka import Producer

    topic, group = unique("txn"), unique("share")
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    assert producer.flush(10) == 0
    with RawConnection(broker.bootstrap) as conn:
        assert alter(conn, group, ("share.isolation.level", "read_committed", SET),
                     ("share.auto.offset.reset", "earliest", SET)) == (0, None)
        member = Member(conn, group, topic)
        member.join()
        assert acquired(member.fetch()) == []
        assert acquired(member.fetch(max_wait_ms=1000)) == []  # the open transaction is not stable yet
        dirty_group = unique("dirty")
        assert alter(conn, dirty_group, ("share.auto.offset.reset", "earliest", SET)) == (0, None)
        dirty = Member(conn, dirty_group, topic)
        dirty.join()
        seen = acquired(dirty.fetch())  # (the session's opening fetch acquires too)
        seen += acquired(dirty.fetch(max_wait_ms=5000)) if not seen else []
        assert seen == [(0, 0, 1)]  # read_uncommitted, the broker's default, reads it
        producer.commit_transaction(30)
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = acquired(member.fetch(max_wait_ms=1000))
        assert got and got[0][0] == 0, got


SHORT_BOUNDS = [arg for key, value in {
    "group.share.min.session.timeout.ms": "1000", "group.share.min.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500",
}.items() for arg in ("--set", f"{key}={value}")]


@pytest.fixture(scope="module")
def short_bounds_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("group-configs-short") / "data", extra_args=SHORT_BOUNDS).start()
    yield proc
    proc.kill()


def test_a_groups_own_session_timeout_removes_its_silent_members(short_bounds_broker):
    """The broker's session timeouts are 45 s; the groups' own 2 s ones remove a member that stops
    heartbeating well within the 30 s waited here."""
    from test_replication_failover import deadline_loop

    broker = short_bounds_broker
    topic, share_group, consumer_group = unique("st"), unique("share"), unique("consumer")
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        assert alter(conn, share_group, ("share.session.timeout.ms", "2000", SET),
                     ("share.heartbeat.interval.ms", "1000", SET)) == (0, None)
        assert alter(conn, consumer_group, ("consumer.session.timeout.ms", "2000", SET),
                     ("consumer.heartbeat.interval.ms", "1000", SET)) == (0, None)
        member = Member(conn, share_group, topic)
        member.join()
        joined = heartbeat(broker, group_id=consumer_group, member_id="m1", member_epoch=0,
                           rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
        assert joined.error_code == 0 and joined.heartbeat_interval_ms == 1000
        for _ in deadline_loop(30, "the silent share member to be removed", interval=0.5):
            answer = call(conn, 76, 1, group_id=share_group, member_id=member.member_id, member_epoch=member.epoch)
            if answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                break
            time.sleep(5)  # silent for well over the session timeout (and the 1 s expiry round)
        for _ in deadline_loop(30, "the silent consumer member to be removed", interval=0.5):
            time.sleep(5)
            answer = heartbeat(broker, group_id=consumer_group, member_id="m1", member_epoch=joined.member_epoch)
            if answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                break


def test_a_groups_delivery_count_limit_archives_a_record_released_that_often(broker):
    from test_shares_raw import RELEASE

    topic, group = unique("dcl"), unique("share")
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        assert alter(conn, group, ("share.delivery.count.limit", "2", SET)) == (0, None)  # the broker's is 5
        member = Member(conn, group, topic)
        member.join()
        member.fetch()
        confluent_send(broker.bootstrap, topic, [Msg(b"twice"), Msg(b"next")])
        assert acquired(member.fetch(max_wait_ms=5000)) == [(0, 1, 1)]
        assert acquired(member.fetch([(0, 0, RELEASE), (1, 1, ACCEPT)], max_wait_ms=5000)) == [(0, 0, 2)]
        # released at its second delivery: archived, not delivered a third time
        assert acquired(member.fetch([(0, 0, RELEASE)], max_wait_ms=1000)) == []
