"""The ACL authorizer against real clients: ACLs denied, granted and revoked (literal and
prefixed) on topics, groups, transactional ids and the cluster; confluent-kafka and kafka-python
admin clients; super users; allow.everyone.if.no.acl.found; a 3-broker ZooKeeper cluster where an
ACL created on one broker is enforced by every broker.

Every client here is User:ANONYMOUS (PLAINTEXT), so a resource is "closed" to it by an ACL for
another principal (User:alice): with allow.everyone.if.no.acl.found=true a resource with no ACL
is open, one with any ACL is open only to whom the ACLs allow.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

pytest.register_assert_rewrite("clients", "cluster")
from clients import (  # noqa: E402
    RawConnection, admin, first_consume_error, first_produce_error, init_producer_id, request_class, response_class,
)
from cluster import ZooKeeperCluster  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

TIMEOUT = 15
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ME, OTHER = "User:ANONYMOUS", "User:alice"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
METADATA, DESCRIBE_CLUSTER, CREATE_ACLS, LIST_OFFSETS, CREATE_TOPICS = 3, 60, 30, 2, 19
LIST_REASSIGNMENTS, DESCRIBE_LOG_DIRS = 46, 35
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 31, 53
INVALID_REQUEST = 42


def authorizer_args(*extra: str, allow_if_no_acl: bool = True) -> list[str]:
    return ["--set", f"authorizer.class.name={AUTHORIZER}", "--set", "group.initial.rebalance.delay.ms=0",
            "--set", f"allow.everyone.if.no.acl.found={str(allow_if_no_acl).lower()}", *extra]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("authorizer") / "data", extra_args=authorizer_args()).start()
    yield proc
    proc.kill()


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def acl(resource_type, resource, principal, operation, permission=ALLOW, pattern=LITERAL) -> AclBinding:
    return AclBinding(resource_type, resource, pattern, principal, "*", operation, permission)


def matching(resource_type=ResourceType.ANY, resource=None, pattern=ResourcePatternType.ANY, principal=None,
             operation=AclOperation.ANY) -> AclBindingFilter:
    return AclBindingFilter(resource_type, resource, pattern, principal, None, operation, AclPermissionType.ANY)


def create_acls(broker, *bindings: AclBinding) -> None:
    for future in admin(broker).create_acls(list(bindings), request_timeout=TIMEOUT).values():
        assert future.result(timeout=TIMEOUT) is None


def delete_acls(broker, acl_filter: AclBindingFilter) -> list[AclBinding]:
    (future,) = admin(broker).delete_acls([acl_filter], request_timeout=TIMEOUT).values()
    return future.result(timeout=TIMEOUT)


def describe_acls(broker, acl_filter: AclBindingFilter) -> set[AclBinding]:
    return set(admin(broker).describe_acls(acl_filter, request_timeout=TIMEOUT).result(timeout=TIMEOUT))


def create_topic(broker, topic: str, partitions: int = 1, replication_factor: int = 1) -> None:
    admin(broker).create_topics([NewTopic(topic, partitions, replication_factor)])[topic].result(timeout=TIMEOUT)


def produce_error(broker, topic: str) -> int | None:
    return first_produce_error({"bootstrap.servers": broker.bootstrap}, topic)


def consume_error(broker, topic: str, group: str | None = None) -> int | None:
    """A new consumer in a group (a new one by default): its first error, None for a message."""
    return first_consume_error({"bootstrap.servers": broker.bootstrap}, topic, group or name("g"))


def metadata_topics(broker, topics: list[str] | None, version: int = 12):
    cls = request_class(METADATA)
    request = cls(topics=None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics],
                  allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(request, response_class(METADATA), version)
    return {t.name: (t.error_code, t.authorized_operations) for t in response.topics}


def codes(*operations: AclOperation) -> set[int]:
    """AclOperation codes, as kafka-python decodes an authorized-operations bitfield."""
    return {op.value for op in operations}


# ---- topics --------------------------------------------------------------------------------------


def test_a_topic_is_denied_then_granted_then_revoked_literal(broker):
    topic = name()
    create_topic(broker, topic)
    assert produce_error(broker, topic) is None  # no ACL on the topic: allow.everyone.if.no.acl.found

    create_acls(broker, acl(ResourceType.TOPIC, topic, OTHER, AclOperation.ALL))
    assert produce_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED
    assert consume_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED
    # Not even DESCRIBE: hidden from a listing, TOPIC_AUTHORIZATION_FAILED when asked for by name.
    assert topic not in metadata_topics(broker, None)
    assert metadata_topics(broker, [topic]) == {topic: (TOPIC_AUTHORIZATION_FAILED, None)}

    create_acls(broker, acl(ResourceType.TOPIC, topic, ME, AclOperation.WRITE))
    assert produce_error(broker, topic) is None
    assert consume_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED  # WRITE does not imply READ
    # WRITE implies DESCRIBE: the topic is listed, with its authorized operations.
    assert metadata_topics(broker, None)[topic] == (0, codes(AclOperation.WRITE, AclOperation.DESCRIBE))

    create_acls(broker, acl(ResourceType.TOPIC, topic, ME, AclOperation.READ))
    assert consume_error(broker, topic) is None

    assert {b.operation for b in delete_acls(broker, matching(ResourceType.TOPIC, topic, LITERAL, ME))} == {
        AclOperation.WRITE, AclOperation.READ}
    assert produce_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED
    assert describe_acls(broker, matching(ResourceType.TOPIC, topic)) == {
        acl(ResourceType.TOPIC, topic, OTHER, AclOperation.ALL)}


def test_prefixed_acls_and_deny_over_allow(broker):
    prefix = name("pfx") + "-"
    topic = prefix + "orders"
    create_topic(broker, topic)
    create_acls(broker, acl(ResourceType.TOPIC, prefix, OTHER, AclOperation.ALL, pattern=PREFIXED))
    assert produce_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED

    create_acls(broker, acl(ResourceType.TOPIC, prefix, ME, AclOperation.WRITE, pattern=PREFIXED))
    assert produce_error(broker, topic) is None

    # A DENY wins over the ALLOW, and applies to the literal name only.
    create_acls(broker, acl(ResourceType.TOPIC, topic, ME, AclOperation.WRITE, DENY))
    assert produce_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED
    other = prefix + "payments"
    create_topic(broker, other)
    assert produce_error(broker, other) is None

    # A MATCH filter finds every ACL that applies to the topic: literal and prefixed.
    assert describe_acls(broker, matching(ResourceType.TOPIC, topic, ResourcePatternType.MATCH)) == {
        acl(ResourceType.TOPIC, prefix, OTHER, AclOperation.ALL, pattern=PREFIXED),
        acl(ResourceType.TOPIC, prefix, ME, AclOperation.WRITE, pattern=PREFIXED),
        acl(ResourceType.TOPIC, topic, ME, AclOperation.WRITE, DENY),
    }
    assert describe_acls(broker, matching(ResourceType.TOPIC, prefix, PREFIXED, ME)) == {
        acl(ResourceType.TOPIC, prefix, ME, AclOperation.WRITE, pattern=PREFIXED)}

    delete_acls(broker, matching(ResourceType.TOPIC, prefix, PREFIXED, ME))
    assert produce_error(broker, other) == TOPIC_AUTHORIZATION_FAILED
    assert delete_acls(broker, matching(ResourceType.TOPIC, topic, ResourcePatternType.MATCH)) != []
    assert describe_acls(broker, matching(ResourceType.TOPIC, topic, ResourcePatternType.MATCH)) == set()
    assert produce_error(broker, topic) is None  # no ACL left: open again


def test_the_wildcard_topic_acl_covers_every_topic(broker):
    topic = name()
    create_topic(broker, topic)
    create_acls(broker, acl(ResourceType.TOPIC, topic, OTHER, AclOperation.READ))
    assert produce_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED
    create_acls(broker, acl(ResourceType.TOPIC, "*", "User:*", AclOperation.WRITE))
    try:
        assert produce_error(broker, topic) is None
    finally:
        delete_acls(broker, matching(ResourceType.TOPIC, "*", LITERAL))
    assert produce_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED


# ---- groups, transactional ids, the cluster -------------------------------------------------------


def test_a_group_is_denied_then_granted(broker):
    topic, group = name(), name("g")
    create_topic(broker, topic)
    assert produce_error(broker, topic) is None
    create_acls(broker, acl(ResourceType.GROUP, group, OTHER, AclOperation.READ))
    assert consume_error(broker, topic, group) == GROUP_AUTHORIZATION_FAILED
    create_acls(broker, acl(ResourceType.GROUP, group[:4], ME, AclOperation.READ, pattern=PREFIXED))
    assert consume_error(broker, topic, group) is None
    delete_acls(broker, matching(ResourceType.GROUP, group[:4], PREFIXED))
    assert consume_error(broker, topic, group) == GROUP_AUTHORIZATION_FAILED


def transaction_error(broker, txn: str, topic: str) -> int | None:
    """A confluent transactional producer's init_transactions + one committed transaction: the
    error code it meets (None: committed)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn,
                         "transaction.timeout.ms": 10000})
    try:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce(topic, b"in a transaction")
        producer.commit_transaction(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def test_a_transactional_id_needs_write(broker):
    txn, topic = name("txn"), name()
    create_topic(broker, topic)
    create_acls(broker, acl(ResourceType.TRANSACTIONAL_ID, txn, OTHER, AclOperation.WRITE))
    with RawConnection(broker.bootstrap) as conn:
        assert init_producer_id(conn, 4, transactional_id=txn).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert transaction_error(broker, txn, topic) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # WRITE on the transactional id (prefixed here) lets InitProducerId, AddPartitionsToTxn and EndTxn through.
    create_acls(broker, acl(ResourceType.TRANSACTIONAL_ID, txn[:6], ME, AclOperation.WRITE, pattern=PREFIXED))
    assert transaction_error(broker, txn, topic) is None
    delete_acls(broker, matching(ResourceType.TRANSACTIONAL_ID, txn[:6], PREFIXED, ME))
    with RawConnection(broker.bootstrap) as conn:
        assert init_producer_id(conn, 4, transactional_id=txn).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def describe_cluster_operations(broker) -> int:
    cls = request_class(DESCRIBE_CLUSTER)
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(cls(include_cluster_authorized_operations=True), response_class(DESCRIBE_CLUSTER),
                         0).authorized_operations


def test_cluster_operations_create_topics_and_the_acl_apis(broker):
    cluster = "kafka-cluster"
    # Every topic gets an ACL (the wildcard), so CREATE on a new topic is no longer open to all.
    create_acls(broker, acl(ResourceType.BROKER, cluster, ME, AclOperation.ALTER),
                acl(ResourceType.BROKER, cluster, ME, AclOperation.DESCRIBE),
                acl(ResourceType.BROKER, cluster, OTHER, AclOperation.CREATE),
                acl(ResourceType.TOPIC, "*", OTHER, AclOperation.CREATE))
    try:
        assert describe_cluster_operations(broker) == codes(AclOperation.ALTER, AclOperation.DESCRIBE)
        topic = name()
        with pytest.raises(KafkaException) as raised:
            create_topic(broker, topic)
        assert raised.value.args[0].code() == TOPIC_AUTHORIZATION_FAILED
        create_acls(broker, acl(ResourceType.BROKER, cluster, ME, AclOperation.CREATE))
        create_topic(broker, topic)
        delete_acls(broker, matching(ResourceType.BROKER, cluster, LITERAL, ME, AclOperation.CREATE))
        with pytest.raises(KafkaException):
            create_topic(broker, name())
        # CREATE on the topic itself is enough too.
        own = name("own")
        create_acls(broker, acl(ResourceType.TOPIC, own, ME, AclOperation.CREATE))
        cls = request_class(CREATE_TOPICS)
        with RawConnection(broker.bootstrap) as conn:
            (created,) = conn.call(cls(topics=[cls.CreatableTopic(name=own, num_partitions=1, replication_factor=1,
                                                                  assignments=[], configs=[])], timeout_ms=10000),
                                   response_class(CREATE_TOPICS), 7).topics
        # Created, but without DESCRIBE_CONFIGS on it the answer leaves out its configs and layout.
        assert (created.error_code, created.topic_config_error_code, created.num_partitions, created.configs) == (
            0, TOPIC_AUTHORIZATION_FAILED, -1, [])
    finally:
        delete_acls(broker, matching(ResourceType.TOPIC, "*", LITERAL, OTHER))
        delete_acls(broker, matching(ResourceType.BROKER))
    assert describe_cluster_operations(broker) == codes(
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE)


def test_invalid_acls_are_refused_with_kafkas_codes(broker):
    creation = request_class(CREATE_ACLS).AclCreation
    base = dict(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:bob", host="*",
                operation=3, permission_type=3)
    cases = [
        (dict(resource_pattern_type=2), "Invalid patternType MATCH"),
        (dict(resource_pattern_type=1), "Invalid patternType ANY"),
        (dict(resource_name=""), "Invalid empty resource name"),
        (dict(resource_type=4, resource_name="other"), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (dict(resource_type=1), "Invalid resourceType ANY"),
        (dict(operation=1), "Invalid operation ANY"),
        (dict(permission_type=1), "Invalid permissionType ANY"),
        (dict(principal="bob"), "expected a string in format principalType:principalName but got bob"),
    ]
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(request_class(CREATE_ACLS)(creations=[creation(**{**base, **c}) for c, _ in cases]),
                             response_class(CREATE_ACLS), 3)
    assert [(r.error_code, r.error_message) for r in response.results] == [(INVALID_REQUEST, m) for _, m in cases]
    assert describe_acls(broker, matching(principal="User:bob")) == set()


def test_kafka_python_admin_manages_acls(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern, ResourcePatternFilter
    from kafka.admin import ACLResourcePatternType, ResourceType as KResourceType

    topic = name("kp")
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        pattern = ResourcePattern(KResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
        wanted = ACL("User:carol", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
        result = client.create_acls([wanted])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        found_filter = ACLFilter("User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                 ResourcePatternFilter(KResourceType.TOPIC, topic, ACLResourcePatternType.ANY))
        found, error = client.describe_acls(found_filter)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] == [
            ("User:carol", ACLOperation.READ, topic)]
        ((_, deleted, error),) = client.delete_acls([found_filter])
        assert error.errno == 0 and [a.principal for a in deleted] == ["User:carol"]
        assert client.describe_acls(found_filter)[0] == []
    finally:
        client.close()


# ---- super users and the default for resources without ACLs --------------------------------------


def test_super_users_may_do_anything_and_nothing_is_allowed_without_acls(tmp_path):
    closed = BrokerProcess(tmp_path / "closed", extra_args=authorizer_args(allow_if_no_acl=False)).start()
    superuser = BrokerProcess(tmp_path / "super", extra_args=authorizer_args(
        "--set", f"super.users=User:admin;{ME}", allow_if_no_acl=False)).start()
    try:
        topic = name()
        with pytest.raises(KafkaException) as raised:
            create_topic(closed, topic)
        assert raised.value.args[0].code() == TOPIC_AUTHORIZATION_FAILED
        (future,) = admin(closed).create_acls([acl(ResourceType.TOPIC, topic, ME, AclOperation.ALL)]).values()
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=TIMEOUT)
        assert raised.value.args[0].code() == CLUSTER_AUTHORIZATION_FAILED
        assert metadata_topics(closed, None) == {}
        with RawConnection(closed.bootstrap) as conn:   # cluster operations: DESCRIBE on the cluster
            assert conn.call(request_class(LIST_REASSIGNMENTS)(timeout_ms=1000, topics=None),
                             response_class(LIST_REASSIGNMENTS), 0).error_code == CLUSTER_AUTHORIZATION_FAILED
            log_dirs = conn.call(request_class(DESCRIBE_LOG_DIRS)(topics=None), response_class(DESCRIBE_LOG_DIRS), 3)
            assert (log_dirs.error_code, log_dirs.results) == (CLUSTER_AUTHORIZATION_FAILED, [])

        create_topic(superuser, topic)
        create_acls(superuser, acl(ResourceType.TOPIC, topic, ME, AclOperation.ALL, DENY))
        assert produce_error(superuser, topic) is None  # a DENY does not bind a super user
        assert consume_error(superuser, topic) is None
        # The ACLs are in the data dir's store, in ZooKeeper mode's layout.
        tree = json.loads((tmp_path / "super" / "metadata-store.json").read_text())
        stored = json.loads(tree["nodes"][f"/kafka-acl/Topic/{topic}"]["data"])
        assert stored == {"version": 1, "acls": [
            {"principal": ME, "permissionType": "Deny", "operation": "All", "host": "*"}]}
    finally:
        closed.kill()
        superuser.kill()


# ---- a ZooKeeper cluster --------------------------------------------------------------------------


def await_condition(check, what: str, timeout: float = TIMEOUT) -> None:
    """Wait for another broker to apply a change it learns of through a ZooKeeper watch."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_an_acl_created_on_one_broker_is_enforced_by_every_broker(tmp_path):
    from kazoo.client import KazooClient

    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=authorizer_args()) as cluster:
        first, second, third = (cluster.brokers[i] for i in range(3))
        brokers = [first, second, third]
        topic = name()
        create_topic(first, topic, partitions=3, replication_factor=3)
        await_condition(lambda: all(metadata_topics(b, [topic])[topic][0] == 0 for b in brokers),
                        "every broker to know the topic")

        create_acls(first, acl(ResourceType.TOPIC, topic, OTHER, AclOperation.READ))
        for broker in brokers:
            await_condition(lambda b=broker: metadata_topics(b, [topic])[topic][0] == TOPIC_AUTHORIZATION_FAILED,
                            f"broker {broker.broker_id} to enforce the ACL")
        assert produce_error(second, topic) == TOPIC_AUTHORIZATION_FAILED

        create_acls(third, acl(ResourceType.TOPIC, topic, ME, AclOperation.WRITE, pattern=LITERAL))
        for broker in brokers:
            await_condition(lambda b=broker: metadata_topics(b, [topic])[topic][0] == 0,
                            f"broker {broker.broker_id} to apply the grant")
        assert produce_error(first, topic) is None
        assert describe_acls(second, matching(ResourceType.TOPIC, topic)) == {
            acl(ResourceType.TOPIC, topic, OTHER, AclOperation.READ), acl(ResourceType.TOPIC, topic, ME, AclOperation.WRITE)}

        zk = KazooClient(hosts=f"{cluster.zookeeper.connect}/kafkacompat")
        zk.start(timeout=TIMEOUT)
        try:
            data, _ = zk.get(f"/kafka-acl/Topic/{topic}")
            assert sorted(json.loads(data)["acls"], key=lambda a: a["principal"]) == [
                {"principal": ME, "permissionType": "Allow", "operation": "Write", "host": "*"},
                {"principal": OTHER, "permissionType": "Allow", "operation": "Read", "host": "*"}]
            changes = zk.get_children("/kafka-acl-changes")
            assert changes and all(c.startswith("acl_changes_") for c in changes)
            assert f"Topic:{topic}".encode() in {zk.get(f"/kafka-acl-changes/{c}")[0] for c in changes}
        finally:
            zk.stop()
            zk.close()

        delete_acls(second, matching(ResourceType.TOPIC, topic, LITERAL, ME))
        for broker in brokers:
            await_condition(lambda b=broker: metadata_topics(b, [topic])[topic][0] == TOPIC_AUTHORIZATION_FAILED,
                            f"broker {broker.broker_id} to apply the revocation")


def list_offsets_error(broker, topic: str) -> int:
    cls = request_class(LIST_OFFSETS)
    wanted = cls.ListOffsetsTopic(name=topic, partitions=[
        cls.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(cls(replica_id=-1, isolation_level=0, topics=[wanted]), response_class(LIST_OFFSETS), 7)
    return response.topics[0].partitions[0].error_code


def test_admin_operations_on_a_closed_topic(broker):
    """DescribeConfigs, AlterConfigs, CreatePartitions, ListOffsets, OffsetCommit and DeleteTopics each check the operation Kafka checks, with Kafka's code."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    topic, group = name(), name("g")
    create_topic(broker, topic)
    client = admin(broker)
    create_acls(broker, acl(ResourceType.TOPIC, topic, OTHER, AclOperation.ALL))

    def code_of(future) -> int:
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=TIMEOUT)
        return raised.value.args[0].code()

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert code_of(client.describe_configs([resource])[resource]) == TOPIC_AUTHORIZATION_FAILED
    altered = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    assert code_of(client.incremental_alter_configs([altered])[altered]) == TOPIC_AUTHORIZATION_FAILED
    assert code_of(client.create_partitions([NewPartitions(topic, 2)])[topic]) == TOPIC_AUTHORIZATION_FAILED
    assert list_offsets_error(broker, topic) == TOPIC_AUTHORIZATION_FAILED
    (committed,) = client.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])]).values()
    assert committed.result(timeout=TIMEOUT).topic_partitions[0].error.code() == TOPIC_AUTHORIZATION_FAILED
    assert code_of(client.delete_topics([topic])[topic]) == TOPIC_AUTHORIZATION_FAILED

    create_acls(broker, acl(ResourceType.TOPIC, topic, ME, AclOperation.ALL))
    assert client.describe_configs([resource])[resource].result(timeout=TIMEOUT)["retention.ms"] is not None
    assert list_offsets_error(broker, topic) == 0
    client.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=TIMEOUT)
    client.delete_topics([topic])[topic].result(timeout=TIMEOUT)
    # Unknown to a client that may not delete it: TOPIC_AUTHORIZATION_FAILED before existence.
    create_acls(broker, acl(ResourceType.TOPIC, "gone-", OTHER, AclOperation.ALL, pattern=PREFIXED))
    assert code_of(client.delete_topics(["gone-never-was"])["gone-never-was"]) == TOPIC_AUTHORIZATION_FAILED


# ---- share groups and KIP-848 consumer groups -------------------------------------------------------


def test_share_fetch_needs_read_on_the_topic_and_share_state_needs_cluster_action(broker):
    from test_shares_raw import ACCEPT, HEARTBEAT, Member, acquired, call, partition_errors

    topic, group = name("share"), name("g")
    create_topic(broker, topic)
    with RawConnection(broker.bootstrap) as conn:
        member = Member(conn, group, topic)
        member.join()
        assert acquired(member.fetch()) == []  # the share partition starts at the end (share.auto.offset.reset)
        assert produce_error(broker, topic) is None  # one record at offset 0
        create_acls(broker, acl(ResourceType.TOPIC, topic, OTHER, AclOperation.ALL))
        # Closed to DESCRIBE: the subscription is refused.
        answer = call(conn, HEARTBEAT, group_id=group, member_id=member.member_id, member_epoch=member.epoch,
                      subscribed_topic_names=[topic])
        assert answer.error_code == TOPIC_AUTHORIZATION_FAILED
        answer = member.fetch()
        assert answer.error_code == 0 and partition_errors(answer) == [TOPIC_AUTHORIZATION_FAILED]
        assert acquired(answer) == []
        create_acls(broker, acl(ResourceType.TOPIC, topic, ME, AclOperation.READ))
        deadline = time.monotonic() + TIMEOUT
        while not (got := acquired(member.fetch(max_wait_ms=200))):  # the next fetch adds it to the session
            assert time.monotonic() < deadline, "the record was never acquired once READ was granted"
        assert got == [(0, 0, 1)]
        delete_acls(broker, matching(ResourceType.TOPIC, topic, LITERAL, ME))
        answer = member.acknowledge([(0, 0, ACCEPT)])
        assert answer.error_code == 0 and partition_errors(answer) == [TOPIC_AUTHORIZATION_FAILED]
        from kafkacompat.wire import codec

        read_state = codec.request_class(84)
        ask = dict(group_id=group, topics=[read_state.ReadStateData(
            topic_id=member.topic_id, partitions=[read_state.ReadStateData.PartitionData(partition=0, leader_epoch=0)])])
        assert [p.error_code for r in call(conn, 84, 0, **ask).results for p in r.partitions] == [0]
        create_acls(broker, acl(ResourceType.BROKER, "kafka-cluster", ME, AclOperation.ALTER),  # to delete them
                    acl(ResourceType.BROKER, "kafka-cluster", OTHER, AclOperation.CLUSTER_ACTION))
        try:
            answer = call(conn, 84, 0, **ask)
            assert [p.error_code for r in answer.results for p in r.partitions] == [CLUSTER_AUTHORIZATION_FAILED]
        finally:
            delete_acls(broker, matching(ResourceType.BROKER))


def test_a_consumer_group_member_may_subscribe_only_to_topics_it_may_describe(broker):
    from test_shares_raw import call, new_member_id

    topic, group = name(), name("g")
    create_topic(broker, topic)
    create_acls(broker, acl(ResourceType.TOPIC, topic, OTHER, AclOperation.ALL))
    with RawConnection(broker.bootstrap) as conn:
        answer = call(conn, 68, 0, group_id=group, member_id=new_member_id(), member_epoch=0,
                      rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
        assert answer.error_code == TOPIC_AUTHORIZATION_FAILED
        create_acls(broker, acl(ResourceType.TOPIC, topic, ME, AclOperation.DESCRIBE))
        answer = call(conn, 68, 0, group_id=group, member_id=new_member_id(), member_epoch=0,
                      rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
        assert answer.error_code == 0 and answer.member_epoch > 0
