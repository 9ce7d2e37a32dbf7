"""The ACL APIs as a Kafka broker without an authorizer answers them, and client quotas.

ACLs: confluent-kafka, kafka-python and kafkajs admin clients against a real broker process,
plus raw requests at every version for the exact fields. Client quotas: no installed client has
DescribeClientQuotas / AlterClientQuotas (confluent-kafka 2.16, kafka-python 3.0.12, kafkajs
2.2.4), so they go through RawConnection with kafka-python's schema classes; they round-trip,
survive a restart, are stored in ZooKeeper mode's layout and are shared by a ZooKeeper cluster.
"""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

pytest.register_assert_rewrite("clients", "cluster")
from clients import RawConnection, admin, frame, request_header  # noqa: E402
from cluster import ZooKeeperCluster  # noqa: E402

from clients import request_class, response_class  # noqa: E402

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
API_VERSIONS = 18
SECURITY_DISABLED, INVALID_REQUEST, UNSUPPORTED_VERSION = 54, 42, 35
DESCRIBE_NO_AUTHORIZER = "No Authorizer is configured on the broker"
ALTER_NO_AUTHORIZER = "No Authorizer is configured."
TIMEOUT = 15
JS = Path(__file__).parent / "js"

# ResourceType / PatternType / AclOperation / AclPermissionType codes.
ANY, TOPIC_RESOURCE, LITERAL, READ, ALLOW = 1, 2, 3, 3, 3


# ---- ACLs: real clients ------------------------------------------------------------------------


def _match_anything() -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def test_confluent_acls_get_kafkas_no_authorizer_answers(broker, topic_name):
    client = admin(broker)
    # librdkafka drops DescribeAcls' top-level error code (rd_kafka_DescribeAclsResponse_parse
    # returns no error whatever the broker said), so against Kafka without an authorizer, too, the
    # listing is empty and successful; the raw tests below check the SECURITY_DISABLED it carries.
    assert client.describe_acls(_match_anything()).result(timeout=TIMEOUT) == []

    bindings = [
        AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "g", ResourcePatternType.PREFIXED, "User:bob", "*", AclOperation.ALL,
                   AclPermissionType.DENY),
    ]
    creations = client.create_acls(bindings, request_timeout=TIMEOUT)
    deletions = client.delete_acls([_match_anything()], request_timeout=TIMEOUT)
    for future in [*creations.values(), *deletions.values()]:
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=TIMEOUT)
        error = raised.value.args[0]
        assert (error.code(), error.name(), error.str()) == (SECURITY_DISABLED, "SECURITY_DISABLED",
                                                             ALTER_NO_AUTHORIZER)
    assert len(creations) == 2 and len(deletions) == 1


def test_kafka_python_acls_get_kafkas_no_authorizer_answers(broker, topic_name):
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonResourceType
    from kafka.errors import SecurityDisabledError

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        anything = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                             permission_type=ACLPermissionType.ANY,
                             resource_pattern=ResourcePatternFilter(KafkaPythonResourceType.ANY, None,
                                                                    ACLResourcePatternType.ANY))
        with pytest.raises(SecurityDisabledError, match=DESCRIBE_NO_AUTHORIZER):
            client.describe_acls(anything)
        acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KafkaPythonResourceType.TOPIC, topic_name))
        assert client.create_acls([acl]) == {"succeeded": [], "failed": [SecurityDisabledError]}
        [(acl_filter, matching, error)] = client.delete_acls([anything])
        assert (acl_filter, matching, error) == (anything, [], SecurityDisabledError)
    finally:
        client.close()


def test_kafkajs_acls_get_kafkas_no_authorizer_answers(broker, topic_name):
    assert (JS / "node_modules" / "kafkajs").is_dir(), f"run: cd {JS} && npm install --no-audit --no-fund"
    done = subprocess.run(["node", str(JS / "acls.js"), broker.bootstrap, topic_name], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, f"acls.js failed:\n{done.stderr[-4000:]}"
    result = json.loads(done.stdout)
    refused = {"error": {"name": "KafkaJSProtocolError", "type": "SECURITY_DISABLED", "code": SECURITY_DISABLED,
                         "retriable": False}}
    assert result == {"described": refused, "created": refused, "deleted": refused}


# ---- ACLs: raw requests --------------------------------------------------------------------------


def _call(broker, api_key: int, version: int, **fields):
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(request_class(api_key)(**fields), response_class(api_key), version)


def _describe_filter(**overrides) -> dict:
    fields = dict(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=LITERAL,
                  principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)
    return {**fields, **overrides}


def _creation(name: str, **overrides):
    fields = dict(resource_type=TOPIC_RESOURCE, resource_name=name, resource_pattern_type=LITERAL,
                  principal="User:alice", host="*", operation=READ, permission_type=ALLOW)
    return request_class(CREATE_ACLS).AclCreation(**{**fields, **overrides})


def _deletion_filter(**overrides):
    fields = dict(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=LITERAL,
                  principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)
    return request_class(DELETE_ACLS).DeleteAclsFilter(**{**fields, **overrides})


def test_api_versions_advertise_the_acl_and_quota_apis(broker):
    response = _call(broker, API_VERSIONS, 3, client_software_name="compat-tests", client_software_version="1")
    served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert {key: served.get(key) for key in (29, 30, 31, 48, 49)} == {
        DESCRIBE_ACLS: (0, 3), CREATE_ACLS: (0, 3), DELETE_ACLS: (0, 3),
        DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1),
    }


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_acl_requests_at_every_version_get_security_disabled(broker, version):
    described = _call(broker, DESCRIBE_ACLS, version, **_describe_filter(resource_name_filter="t"))
    assert (described.error_code, described.error_message, described.resources) == (
        SECURITY_DISABLED, DESCRIBE_NO_AUTHORIZER, [])

    created = _call(broker, CREATE_ACLS, version, creations=[_creation("a"), _creation("b", operation=4)])
    assert [(r.error_code, r.error_message) for r in created.results] == [(SECURITY_DISABLED, ALTER_NO_AUTHORIZER)] * 2
    assert _call(broker, CREATE_ACLS, version, creations=[]).results == []

    deleted = _call(broker, DELETE_ACLS, version, filters=[_deletion_filter(), _deletion_filter(principal_filter="x")])
    assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == [
        (SECURITY_DISABLED, ALTER_NO_AUTHORIZER, [])] * 2


def _string(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else struct.pack(">h", len(text)) + text.encode()


@pytest.mark.parametrize("api_key, request_body, response_body", [
    (DESCRIBE_ACLS,
     struct.pack(">b", TOPIC_RESOURCE) + _string("t") + _string(None) + _string(None) + struct.pack(">bb", READ, ALLOW),
     struct.pack(">ih", 0, SECURITY_DISABLED) + _string(DESCRIBE_NO_AUTHORIZER) + struct.pack(">i", 0)),
    (CREATE_ACLS,
     struct.pack(">ib", 1, TOPIC_RESOURCE) + _string("t") + _string("User:a") + _string("*")
     + struct.pack(">bb", READ, ALLOW),
     struct.pack(">iih", 0, 1, SECURITY_DISABLED) + _string(ALTER_NO_AUTHORIZER)),
    (DELETE_ACLS,
     struct.pack(">ib", 1, ANY) + _string(None) + _string(None) + _string(None) + struct.pack(">bb", ANY, ANY),
     struct.pack(">iih", 0, 1, SECURITY_DISABLED) + _string(ALTER_NO_AUTHORIZER) + struct.pack(">i", 0)),
], ids=["describe", "create", "delete"])
def test_acl_v0_layouts_byte_for_byte(broker, api_key, request_body, response_body):
    # v0 (no pattern type) is past kafka-python's advertised range: hand-built bytes both ways.
    with RawConnection(broker.bootstrap) as conn:
        conn.send(frame(request_header(api_key, 0, 7, flexible=False) + request_body))
        assert conn.recv_frame() == struct.pack(">i", 7) + response_body


@pytest.mark.parametrize("api_key, fields", [
    (DESCRIBE_ACLS, _describe_filter(resource_type_filter=0)),
    (DESCRIBE_ACLS, _describe_filter(pattern_type_filter=0)),
    (CREATE_ACLS, {"creations": [_creation("a"), _creation("b", operation=0)]}),
    (CREATE_ACLS, {"creations": [_creation("a", permission_type=0)]}),
    (DELETE_ACLS, {"filters": [_deletion_filter(resource_type_filter=0)]}),
    (DELETE_ACLS, {"filters": [_deletion_filter(), _deletion_filter(operation=0)]}),
], ids=["describe-resource", "describe-pattern", "create-operation", "create-permission", "delete-resource",
        "delete-operation"])
def test_acl_request_with_an_unknown_element_closes_the_connection(broker, api_key, fields):
    # Kafka's request classes refuse UNKNOWN (0) while parsing, and the broker closes the connection.
    with RawConnection(broker.bootstrap) as conn:
        conn.send_request(request_class(api_key)(**fields), 2)
        assert conn.closed_by_broker(timeout=10)
    described = _call(broker, DESCRIBE_ACLS, 2, **_describe_filter())
    assert described.error_code == SECURITY_DISABLED


# ---- client quotas --------------------------------------------------------------------------------

USER, CLIENT_ID, IP = "user", "client-id", "ip"
EXACT, DEFAULT, SPECIFIED = 0, 1, 2

Entity = frozenset  # of (entity type, name or None) pairs, as Kafka's ClientQuotaEntity map


def entity(**names: str | None) -> Entity:
    return frozenset((kind.replace("_", "-"), name) for kind, name in names.items())


def alter_quotas(broker, entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float | None]]]], *,
                 validate_only: bool = False, version: int = 1) -> dict[Entity, tuple[int, str | None]]:
    """entries: ([(entity type, name)], [(key, value or None to remove)]) -> {entity: (code, message)}."""
    cls = request_class(ALTER_CLIENT_QUOTAS)
    entry_cls = cls.EntryData
    request_entries = [
        entry_cls(entity=[entry_cls.EntityData(entity_type=t, entity_name=n) for t, n in names],
                  ops=[entry_cls.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops])
        for names, ops in entries
    ]
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(cls(entries=request_entries, validate_only=validate_only),
                             response_class(ALTER_CLIENT_QUOTAS), version)
    return {frozenset((e.entity_type, e.entity_name) for e in r.entity): (r.error_code, r.error_message)
            for r in response.entries}


def describe_quotas(broker, components: list[tuple[str, int, str | None]] = (), *, strict: bool = False,
                    version: int = 1):
    """-> (error code, error message, {entity: {key: value}} or None)."""
    cls = request_class(DESCRIBE_CLIENT_QUOTAS)
    request = cls(components=[cls.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components],
                  strict=strict)
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(request, response_class(DESCRIBE_CLIENT_QUOTAS), version)
    entries = None if response.entries is None else {
        frozenset((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }
    return response.error_code, response.error_message, entries


def quotas(broker, components=(), *, strict: bool = False, version: int = 1) -> dict:
    code, message, entries = describe_quotas(broker, components, strict=strict, version=version)
    assert (code, message) == (0, None)
    return entries


ODD_USER = "CN=alice, O=Acme/Dev*~"   # every character Kafka's Sanitizer encodes in a store path

STORED = {
    entity(user="alice"): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
    entity(user=None): {"request_percentage": 12.5},
    entity(user="alice", client_id="app"): {"consumer_byte_rate": 4096.0},
    entity(user=None, client_id=None): {"controller_mutation_rate": 5.0},
    entity(client_id="app"): {"producer_byte_rate": 1024.0},
    entity(client_id=None): {"producer_byte_rate": 512.0},
    entity(user=ODD_USER): {"request_percentage": 50.0},
    entity(ip="127.0.0.1"): {"connection_creation_rate": 10.0},
    entity(ip=None): {"connection_creation_rate": 100.0},
}


def store_sample(broker, version: int = 1) -> None:
    entries = [(sorted(e, key=lambda pair: pair[0] != USER), sorted(values.items())) for e, values in STORED.items()]
    assert alter_quotas(broker, entries, version=version) == {e: (0, None) for e in STORED}


def read_store_file(data_dir: Path) -> dict[str, dict]:
    nodes = json.loads((data_dir / "metadata-store.json").read_text())["nodes"]
    return {path: json.loads(node["data"]) for path, node in nodes.items()
            if path.startswith(("/config/users/", "/config/clients/", "/config/ips/")) and node["data"]}


@pytest.mark.parametrize("version", [0, 1])
def test_quotas_round_trip_survive_a_restart_and_are_stored_in_zookeeper_layout(broker, version):
    assert quotas(broker, version=version) == {}
    store_sample(broker, version)
    assert quotas(broker, version=version) == STORED

    broker.restart()
    assert quotas(broker, version=version) == STORED

    # Removing keys: one of two, then the last one of an entity (which then no longer shows).
    assert alter_quotas(broker, [([(USER, "alice")], [("consumer_byte_rate", None), ("no_such_key", None)]),
                                 ([(IP, "127.0.0.1")], [("connection_creation_rate", None)])], version=version) == {
        entity(user="alice"): (0, None), entity(ip="127.0.0.1"): (0, None)}
    expected = {**STORED, entity(user="alice"): {"producer_byte_rate": 1048576.0}}
    del expected[entity(ip="127.0.0.1")]
    assert quotas(broker, version=version) == expected

    broker.stop()
    assert read_store_file(broker.data_dir) == {
        "/config/users/alice": {"version": 1, "config": {"producer_byte_rate": "1048576"}},
        "/config/users/<default>": {"version": 1, "config": {"request_percentage": "12.5"}},
        "/config/users/alice/clients/app": {"version": 1, "config": {"consumer_byte_rate": "4096"}},
        "/config/users/<default>/clients/<default>": {"version": 1, "config": {"controller_mutation_rate": "5.0"}},
        "/config/clients/app": {"version": 1, "config": {"producer_byte_rate": "1024"}},
        "/config/clients/<default>": {"version": 1, "config": {"producer_byte_rate": "512"}},
        "/config/users/CN%3Dalice%2C%20O%3DAcme%2FDev%2A%7E": {"version": 1,
                                                              "config": {"request_percentage": "50.0"}},
        "/config/ips/127.0.0.1": {"version": 1, "config": {}},
        "/config/ips/<default>": {"version": 1, "config": {"connection_creation_rate": "100"}},
    }
    broker.start()
    assert quotas(broker, version=version) == expected


def _entities(*names: dict) -> set[Entity]:
    return {entity(**n) for n in names}


@pytest.mark.parametrize("components, strict, expected", [
    ([], True, set()),
    ([(USER, EXACT, "alice")], False, _entities({"user": "alice"}, {"user": "alice", "client_id": "app"})),
    ([(USER, EXACT, "alice")], True, _entities({"user": "alice"})),
    ([(USER, DEFAULT, None)], False, _entities({"user": None}, {"user": None, "client_id": None})),
    ([(USER, DEFAULT, None)], True, _entities({"user": None})),
    ([(USER, SPECIFIED, None)], True, _entities({"user": "alice"}, {"user": None}, {"user": ODD_USER})),
    ([(USER, SPECIFIED, None), (CLIENT_ID, SPECIFIED, None)], False,
     _entities({"user": "alice", "client_id": "app"}, {"user": None, "client_id": None})),
    ([(CLIENT_ID, EXACT, "app")], False, _entities({"client_id": "app"}, {"user": "alice", "client_id": "app"})),
    ([(CLIENT_ID, EXACT, "app")], True, _entities({"client_id": "app"})),
    ([(CLIENT_ID, DEFAULT, None), (USER, DEFAULT, None)], True, _entities({"user": None, "client_id": None})),
    ([(USER, EXACT, "alice"), (CLIENT_ID, DEFAULT, None)], False, set()),
    ([(USER, EXACT, "nobody")], False, set()),
    ([(USER, EXACT, ODD_USER)], True, _entities({"user": ODD_USER})),
    ([(IP, SPECIFIED, None)], False, _entities({"ip": "127.0.0.1"}, {"ip": None})),
    ([(IP, DEFAULT, None)], True, _entities({"ip": None})),
    ([(IP, EXACT, "127.0.0.1")], False, _entities({"ip": "127.0.0.1"})),
])
def test_describe_filters_match_as_kafka(broker, components, strict, expected):
    store_sample(broker)
    found = quotas(broker, components, strict=strict)
    assert set(found) == expected
    assert all(found[e] == STORED[e] for e in expected)


def test_describe_without_components_and_not_strict_returns_everything(broker):
    store_sample(broker)
    assert quotas(broker, [], strict=False) == STORED


@pytest.mark.parametrize("components, code, message", [
    ([("", EXACT, "x")], INVALID_REQUEST, "Invalid empty entity type."),
    ([(USER, EXACT, "a"), (USER, DEFAULT, None)], INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", EXACT, "g")], UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([(USER, EXACT, None)], INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([(USER, DEFAULT, "a")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([(CLIENT_ID, SPECIFIED, "a")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([(USER, 7, None)], INVALID_REQUEST, "Unknown match type 7"),
    ([(IP, SPECIFIED, None), (USER, EXACT, "a")], INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
])
def test_describe_with_an_invalid_filter_gets_kafkas_error(broker, components, code, message):
    assert describe_quotas(broker, components) == (code, message, None)


@pytest.mark.parametrize("names, ops, message", [
    ([], [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ([("group", "g")], [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ([(USER, "")], [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ([(IP, "10.0.0.1"), (USER, "u")], [("connection_creation_rate", 1.0)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([(IP, "no-such-host.invalid")], [("connection_creation_rate", 1.0)],
     "no-such-host.invalid is not a valid IP or resolvable host."),
    ([(USER, "u")], [("not_a_quota", 1.0)], "Invalid configuration key not_a_quota"),
    ([(USER, "u")], [("connection_creation_rate", 1.0)], "Invalid configuration key connection_creation_rate"),
    ([(IP, "10.0.0.1")], [("producer_byte_rate", 1.0)], "Invalid configuration key producer_byte_rate"),
    ([(CLIENT_ID, "c")], [("consumer_byte_rate", 0.0)], "Quota consumer_byte_rate must be greater than 0"),
    ([(CLIENT_ID, "c")], [("request_percentage", -1.0)], "Quota request_percentage must be greater than 0"),
    ([(USER, "u")], [("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
    ([(USER, "u")], [("producer_byte_rate", 1e19)], "Proposed value for producer_byte_rate is too large for a LONG."),
    ([(IP, None)], [("connection_creation_rate", 3e9)],
     "Proposed value for connection_creation_rate is too large for an INT."),
    ([(USER, "u")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})"),
])
def test_alter_with_invalid_input_gets_kafkas_error_and_stores_nothing(broker, names, ops, message):
    invalid_entity = frozenset(names)
    good = ([(CLIENT_ID, "fine")], [("producer_byte_rate", 2048.0)])
    assert alter_quotas(broker, [(names, ops), good]) == {
        invalid_entity: (INVALID_REQUEST, message), entity(client_id="fine"): (0, None)}
    assert quotas(broker) == {entity(client_id="fine"): {"producer_byte_rate": 2048.0}}


def test_alter_accepts_a_resolvable_host_name_an_ipv6_address_and_near_integral_values(broker):
    assert alter_quotas(broker, [
        ([(IP, "localhost")], [("connection_creation_rate", 7.0)]),
        ([(IP, "::1")], [("connection_creation_rate", 3.0)]),
        ([(USER, "u")], [("producer_byte_rate", 1000.0000001), ("request_percentage", 0.5)]),
    ]) == {entity(ip="localhost"): (0, None), entity(ip="::1"): (0, None), entity(user="u"): (0, None)}
    assert quotas(broker) == {
        entity(ip="localhost"): {"connection_creation_rate": 7.0},
        entity(ip="::1"): {"connection_creation_rate": 3.0},
        entity(user="u"): {"producer_byte_rate": 1000.0000001, "request_percentage": 0.5},
    }


def test_alter_validate_only_checks_but_stores_nothing(broker):
    request = [([(USER, "alice")], [("producer_byte_rate", 1024.0)]),
               ([(USER, "bob")], [("producer_byte_rate", 1.5)])]
    assert alter_quotas(broker, request, validate_only=True) == {
        entity(user="alice"): (0, None),
        entity(user="bob"): (INVALID_REQUEST, "producer_byte_rate cannot be a fractional value."),
    }
    assert quotas(broker) == {}
    assert alter_quotas(broker, request[:1]) == {entity(user="alice"): (0, None)}
    assert quotas(broker) == {entity(user="alice"): {"producer_byte_rate": 1024.0}}


def test_an_entity_named_twice_answers_once_with_kafkas_duplicate_error(broker):
    # As Kafka's controller: the first alteration of the entity applies, the answer says the
    # repeated one was ignored.
    assert alter_quotas(broker, [([(USER, "u")], [("producer_byte_rate", 100.0)]),
                                 ([(USER, "u")], [("producer_byte_rate", 200.0)])]) == {
        entity(user="u"): (INVALID_REQUEST, "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})")}
    assert quotas(broker) == {entity(user="u"): {"producer_byte_rate": 100.0}}


def test_quotas_are_shared_by_a_zookeeper_cluster_in_kafkas_znodes(tmp_path):
    from kazoo.client import KazooClient

    with ZooKeeperCluster(tmp_path, brokers=2) as cluster:
        first, second = cluster.brokers[0], cluster.brokers[1]
        assert alter_quotas(first, [
            ([(USER, "alice"), (CLIENT_ID, "app")], [("producer_byte_rate", 4096.0)]),
            ([(IP, None)], [("connection_creation_rate", 20.0)]),
        ]) == {entity(user="alice", client_id="app"): (0, None), entity(ip=None): (0, None)}
        assert quotas(second) == {entity(user="alice", client_id="app"): {"producer_byte_rate": 4096.0},
                                  entity(ip=None): {"connection_creation_rate": 20.0}}

        zk = KazooClient(hosts=f"{cluster.zookeeper.connect}/kafkacompat")
        zk.start(timeout=TIMEOUT)
        try:
            data, _ = zk.get("/config/users/alice/clients/app")
            assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "4096"}}
            data, _ = zk.get("/config/ips/<default>")
            assert json.loads(data) == {"version": 1, "config": {"connection_creation_rate": "20"}}
        finally:
            zk.stop()
            zk.close()
