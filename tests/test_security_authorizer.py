"""The authorizer's decisions (StandardAuthorizerData's rules) and its ZooKeeper-layout store,
over a real EmbeddedStore: two Authorizer objects on one tree act as two brokers of a cluster."""

from __future__ import annotations

import json

import trio

from kafkacompat.controller.store import EmbeddedStore, EmbeddedTree
from kafkacompat.security.acl import (
    AclBindingFilter,
    AclOperation as Op,
    PatternType,
    Permission,
    ResourceType,
    binding_of,
)
from kafkacompat.security.authorizer import Authorizer
from kafkacompat.security.principal import KafkaPrincipal
from kafkacompat.wire.errors import ErrorCode
from tests.conftest import trio_test

ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def binding(name: str, principal: str, operation: Op, permission=Permission.ALLOW, pattern=LITERAL,
            resource_type=TOPIC, host="*"):
    return binding_of(resource_type, name, pattern, principal, host, operation, permission)


def every(**overrides) -> AclBindingFilter:
    fields = dict(resource_type=ResourceType.ANY, name=None, pattern_type=PatternType.ANY, principal=None,
                  host=None, operation=Op.ANY, permission=Permission.ANY)
    return AclBindingFilter(**{**fields, **overrides})


async def authorizer_with(*bindings, tree=None, super_users=(), allow_if_no_acl=False) -> Authorizer:
    store = EmbeddedStore(tree or EmbeddedTree())
    authorizer = Authorizer(lambda: store, super_users, allow_if_no_acl)
    await authorizer.load()
    assert await authorizer.create_acls(list(bindings)) == [None] * len(bindings)
    return authorizer


@trio_test
async def test_deny_wins_and_allows_imply_describe_only():
    authorizer = await authorizer_with(
        binding("t", "User:alice", Op.READ), binding("t", "User:alice", Op.ALTER_CONFIGS),
        binding("t", "User:alice", Op.WRITE, Permission.DENY), binding("t", "User:alice", Op.WRITE))
    allowed = {op for op in Op if op > Op.ALL and authorizer.authorize(ALICE, "10.0.0.1", op, TOPIC, "t")}
    assert allowed == {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    # A DENY of READ denies READ, not the DESCRIBE an ALLOW of READ implies.
    deny_read = await authorizer_with(binding("t", "User:alice", Op.READ),
                                      binding("t", "User:alice", Op.READ, Permission.DENY))
    assert not deny_read.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert deny_read.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")


@trio_test
async def test_wildcards_prefixes_hosts_and_the_default():
    authorizer = await authorizer_with(
        binding("*", "User:*", Op.DESCRIBE), binding("pay", "User:alice", Op.ALL, pattern=PREFIXED),
        binding("payroll", "User:alice", Op.ALL, Permission.DENY), binding("h", "User:bob", Op.READ, host="10.0.0.2"),
        binding("g", "User:alice", Op.READ, resource_type=GROUP))
    assert authorizer.authorize(BOB, "h", Op.DESCRIBE, TOPIC, "anything")
    assert authorizer.authorize(ALICE, "h", Op.WRITE, TOPIC, "payments")
    assert not authorizer.authorize(ALICE, "h", Op.WRITE, TOPIC, "payroll")
    assert not authorizer.authorize(ALICE, "h", Op.WRITE, TOPIC, "pa")   # shorter than the prefix
    assert authorizer.authorize(BOB, "10.0.0.2", Op.READ, TOPIC, "h")
    assert not authorizer.authorize(BOB, "10.0.0.3", Op.READ, TOPIC, "h")
    # Groups are another resource type: no group ACL for "other", and the default is to deny.
    assert authorizer.authorize(ALICE, "h", Op.READ, GROUP, "g")
    assert not authorizer.authorize(ALICE, "h", Op.READ, GROUP, "other")
    open_default = await authorizer_with(binding("closed", "User:bob", Op.READ), allow_if_no_acl=True)
    assert open_default.authorize(ALICE, "h", Op.WRITE, TOPIC, "no-acl-here")
    assert not open_default.authorize(ALICE, "h", Op.WRITE, TOPIC, "closed")


@trio_test
async def test_super_users_and_authorized_operations():
    authorizer = await authorizer_with(binding("t", "User:alice", Op.ALL, Permission.DENY), super_users=["User:alice"])
    assert authorizer.authorize(ALICE, "h", Op.DELETE, TOPIC, "t")
    plain = await authorizer_with(binding("t", "User:bob", Op.WRITE))
    assert plain.authorized_operations(BOB, "h", TOPIC, "t") == (1 << Op.WRITE) | (1 << Op.DESCRIBE)


@trio_test
async def test_authorize_by_resource_type():
    authorizer = await authorizer_with(binding("a", "User:alice", Op.WRITE), binding("b", "User:bob", Op.WRITE),
                                       binding("b", "User:bob", Op.WRITE, Permission.DENY, pattern=PREFIXED))
    assert authorizer.authorize_by_resource_type(ALICE, "h", Op.WRITE, TOPIC)
    assert not authorizer.authorize_by_resource_type(BOB, "h", Op.WRITE, TOPIC)   # every allow is denied
    assert not authorizer.authorize_by_resource_type(ALICE, "h", Op.READ, TOPIC)


@trio_test
async def test_filters_literal_prefixed_match_and_any():
    authorizer = await authorizer_with(binding("orders", "User:alice", Op.READ),
                                       binding("ord", "User:bob", Op.READ, pattern=PREFIXED),
                                       binding("*", "User:carol", Op.READ))
    def names(**overrides):
        return sorted((b.pattern.name, b.pattern.pattern_type.name) for b in authorizer.acls(every(**overrides)))

    assert names() == [("*", "LITERAL"), ("ord", "PREFIXED"), ("orders", "LITERAL")]
    assert names(name="orders", pattern_type=PatternType.MATCH) == [
        ("*", "LITERAL"), ("ord", "PREFIXED"), ("orders", "LITERAL")]
    assert names(name="orders", pattern_type=PatternType.ANY) == [("orders", "LITERAL")]
    assert names(name="ord", pattern_type=PREFIXED) == [("ord", "PREFIXED")]
    assert names(pattern_type=LITERAL, principal="User:carol") == [("*", "LITERAL")]
    deleted = await authorizer.delete_acls([every(name="orders", pattern_type=PatternType.MATCH, principal="User:bob")])
    assert [(b.pattern.name, b.entry.principal) for b in deleted[0]] == [("ord", "User:bob")]
    assert names() == [("*", "LITERAL"), ("orders", "LITERAL")]


@trio_test
async def test_invalid_creations_get_kafkas_errors():
    authorizer = await authorizer_with()
    results = await authorizer.create_acls([
        binding("t", "User:a", Op.READ, pattern=PatternType.MATCH), binding("", "User:a", Op.READ),
        binding("x", "User:a", Op.READ, resource_type=CLUSTER), binding("t", "noprefix", Op.READ),
        binding("a/b", "User:a", Op.READ, resource_type=GROUP), binding("ok", "User:a", Op.READ)])
    assert [r.code if r else None for r in results] == [ErrorCode.INVALID_REQUEST] * 5 + [None]
    assert [r.message for r in results[:3]] == [
        "Invalid patternType MATCH", "Invalid empty resource name",
        "The only valid name for the CLUSTER resource is kafka-cluster"]


@trio_test
async def test_the_zookeeper_layout_and_a_second_broker_following_notifications():
    tree = EmbeddedTree()
    first = await authorizer_with(binding("t", "User:alice", Op.READ), binding("p", "User:bob", Op.WRITE, pattern=PREFIXED),
                                  tree=tree)
    store = EmbeddedStore(tree)
    data, _ = await store.get("/kafka-acl/Topic/t")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert json.loads((await store.get("/kafka-acl-extended/prefixed/Topic/p"))[0])["acls"][0]["operation"] == "Write"
    literal_changes = await store.children("/kafka-acl-changes")
    assert [(await store.get(f"/kafka-acl-changes/{c}"))[0] for c in literal_changes] == [b"Topic:t"]
    (extended,) = await store.children("/kafka-acl-extended-changes")
    assert json.loads((await store.get(f"/kafka-acl-extended-changes/{extended}"))[0]) == {
        "version": 1, "resourceType": "Topic", "name": "p", "patternType": "PREFIXED"}

    second = Authorizer(lambda: EmbeddedStore(tree), [], False)
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        assert second.authorize(ALICE, "h", Op.READ, TOPIC, "t")
        await first.delete_acls([every(name="t", pattern_type=LITERAL)])
        with trio.fail_after(5):
            while second.authorize(ALICE, "h", Op.READ, TOPIC, "t"):
                await trio.sleep(0.01)   # the watch's nudge runs on this loop
        assert not await store.exists("/kafka-acl/Topic/t")
        nursery.cancel_scope.cancel()
