"""The authorizer with several users (SASL/PLAIN on a SASL_PLAINTEXT listener) and
allow.everyone.if.no.acl.found=false, as production clusters run it: a super user administers,
each user may do only what its ACLs allow, and a PLAINTEXT client (User:ANONYMOUS) nothing.
Per-user quotas resolve by principal name."""

from __future__ import annotations


import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kafkacompat.testing.process import BrokerProcess, free_port

pytest.register_assert_rewrite("clients")
from clients import first_consume_error, first_produce_error, request_class, response_class  # noqa: E402

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TIMEOUT = 15
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
CREATE_ACLS, USER_RESOURCE, DESCRIBE_TOKENS = 30, 7, 14


class Cluster:
    def __init__(self, broker: BrokerProcess, sasl_port: int) -> None:
        self.broker, self.sasl_port = broker, sasl_port
        self.admins: dict[str | None, AdminClient] = {}   # kept: a destroyed client fails its futures

    def conf(self, user: str | None, **extra) -> dict:
        if user is None:
            return {"bootstrap.servers": self.broker.bootstrap, **extra}
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user], **extra}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    base = tmp_path_factory.mktemp("authorizer-sasl")
    port = free_port()
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    properties = base / "server.properties"
    properties.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.enabled.mechanisms=PLAIN",
        f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        "super.users=User:admin",
        "allow.everyone.if.no.acl.found=false",
        "group.initial.rebalance.delay.ms=0",
        "delegation.token.secret.key=token-signing-secret",
    ]) + "\n")
    broker = BrokerProcess(base / "data", extra_args=["--config", str(properties)]).start()
    yield Cluster(broker, port)
    broker.kill()


def acl(resource_type, name, user, operation, pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW):
    return AclBinding(resource_type, name, pattern, f"User:{user}", "*", operation, permission)


def admin(cluster: Cluster, user: str | None = "admin") -> AdminClient:
    if user not in cluster.admins:
        cluster.admins[user] = AdminClient(cluster.conf(user))
    return cluster.admins[user]


def create_acls(cluster: Cluster, *bindings, user: str = "admin") -> None:
    for future in admin(cluster, user).create_acls(list(bindings), request_timeout=TIMEOUT).values():
        future.result(timeout=TIMEOUT)


def idempotent_produce_error(conf: dict, topic: str) -> int | None:
    """An idempotent producer's first message: a refused InitProducerId is a fatal error, which
    flush raises (no delivery callback: confluent-kafka cannot run one after a fatal error)."""
    producer = Producer({**conf, "message.timeout.ms": 5000, "enable.idempotence": True})
    try:
        producer.produce(topic, b"v")
        remaining = producer.flush(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0].code()
    assert remaining == 0
    return None


def test_each_user_may_do_what_its_acls_allow(cluster):
    topic = "orders"
    admin(cluster).create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT)
    assert first_produce_error(cluster.conf("admin"), topic) is None   # a super user needs no ACL

    alice, bob = cluster.conf("alice"), cluster.conf("bob")
    assert first_produce_error(alice, topic) == TOPIC_AUTHORIZATION_FAILED   # nothing without an ACL
    create_acls(cluster, acl(ResourceType.TOPIC, topic, "alice", AclOperation.WRITE))
    assert first_produce_error(alice, topic) is None
    # Idempotence: InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    assert idempotent_produce_error(alice, topic) is None
    # bob may see the topic, but write nowhere: his InitProducerId is refused.
    create_acls(cluster, acl(ResourceType.TOPIC, topic, "bob", AclOperation.DESCRIBE))
    assert idempotent_produce_error(bob, topic) == CLUSTER_AUTHORIZATION_FAILED

    create_acls(cluster, acl(ResourceType.TOPIC, "ord", "bob", AclOperation.READ, ResourcePatternType.PREFIXED))
    assert first_consume_error(bob, topic, "bob-app") == GROUP_AUTHORIZATION_FAILED
    create_acls(cluster, acl(ResourceType.GROUP, "bob-", "bob", AclOperation.READ, ResourcePatternType.PREFIXED))
    assert first_consume_error(bob, topic, "bob-app") is None
    assert first_consume_error(alice, topic, "bob-app") == GROUP_AUTHORIZATION_FAILED   # bob's group, not hers
    create_acls(cluster, acl(ResourceType.GROUP, "alice-app", "alice", AclOperation.READ))
    assert first_consume_error(alice, topic, "alice-app") == TOPIC_AUTHORIZATION_FAILED   # WRITE does not imply READ

    # The ACL APIs need ALTER / DESCRIBE on the cluster: only the super user has them.
    (future,) = admin(cluster, "bob").create_acls([acl(ResourceType.TOPIC, topic, "bob", AclOperation.ALL)]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == CLUSTER_AUTHORIZATION_FAILED
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    assert len(admin(cluster).describe_acls(everything).result(timeout=TIMEOUT)) == 5

    # A PLAINTEXT client is User:ANONYMOUS: it has no ACL, so it may do nothing, nor see the topic.
    assert first_produce_error(cluster.conf(None), topic) == TOPIC_AUTHORIZATION_FAILED
    listed = admin(cluster, None).list_topics(timeout=TIMEOUT).topics
    assert topic not in listed


def test_a_deny_for_one_user_leaves_the_others(cluster):
    topic = "payments"
    admin(cluster).create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT)
    create_acls(cluster, acl(ResourceType.TOPIC, "*", "*", AclOperation.WRITE),
                acl(ResourceType.TOPIC, topic, "bob", AclOperation.WRITE, permission=AclPermissionType.DENY))
    try:
        assert first_produce_error(cluster.conf("alice"), topic) is None   # User:* on the wildcard topic
        assert first_produce_error(cluster.conf("bob"), topic) == TOPIC_AUTHORIZATION_FAILED
    finally:
        (future,) = admin(cluster).delete_acls([AclBindingFilter(
            ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.WRITE,
            AclPermissionType.ANY)]).values()
        assert len(future.result(timeout=TIMEOUT)) >= 2
    assert first_produce_error(cluster.conf("bob"), "orders") == TOPIC_AUTHORIZATION_FAILED


def test_delegation_tokens_are_visible_to_their_owner_and_to_who_may_describe_them(cluster):
    from test_security import _header, _logged_in, create_token, describe_tokens

    address = f"127.0.0.1:{cluster.sasl_port}"
    alice = _logged_in(address, "alice", USERS["alice"])
    error, owner, token_id, _ = create_token(alice)
    assert (error, owner) == (0, "User:alice")

    def visible_to(user: str) -> list[str]:
        error, tokens = describe_tokens(_logged_in(address, user, USERS[user]))
        assert error == 0
        return [described for _, described, _ in tokens]

    assert token_id in visible_to("alice") and token_id in visible_to("admin")
    assert token_id not in visible_to("bob")
    # DESCRIBE_TOKENS on the owner (confluent-kafka has neither the USER resource type nor that
    # operation: a raw CreateAcls v1 by the super user).
    creation = request_class(CREATE_ACLS).AclCreation(
        resource_type=USER_RESOURCE, resource_name="User:alice", resource_pattern_type=3, principal="User:bob",
        host="*", operation=DESCRIBE_TOKENS, permission_type=3)
    admin_raw = _logged_in(address, "admin", USERS["admin"])
    admin_raw.send(_header(CREATE_ACLS, 1) + bytes(request_class(CREATE_ACLS)(creations=[creation]).encode(version=1)))
    (result,) = response_class(CREATE_ACLS).decode(admin_raw.receive()[4:], version=1).results
    assert result.error_code == 0
    assert token_id in visible_to("bob")
