"""__consumer_offsets record formats byte for byte against Kafka's schemas, Java's String.hashCode,
and the OffsetCommit/OffsetFetch versions below kafka-python's advertised range."""

from __future__ import annotations

import struct

import pytest

from kafkacompat.groups import storage
from kafkacompat.handlers import REGISTRY

# (Expected hash values were printed by a JVM: System.out.println(s.hashCode()).)
# Field lists copied from Kafka's group-coordinator JSON (OffsetCommitKey/Value, GroupMetadataKey/Value):
# (name, type, versions) where versions is (first, last) inclusive.
OFFSET_COMMIT_KEY = [("group", "string", (0, 1)), ("topic", "string", (0, 1)), ("partition", "int32", (0, 1))]
OFFSET_COMMIT_VALUE = [
    ("offset", "int64", (0, 4)), ("leaderEpoch", "int32", (3, 4)), ("metadata", "string", (0, 4)),
    ("commitTimestamp", "int64", (0, 4)), ("expireTimestamp", "int64", (1, 1)),
]
GROUP_METADATA_KEY = [("group", "string", (2, 2))]
MEMBER_METADATA = [
    ("memberId", "string", (0, 4)), ("groupInstanceId", "nullable_string", (3, 4)), ("clientId", "string", (0, 4)),
    ("clientHost", "string", (0, 4)), ("rebalanceTimeout", "int32", (1, 4)), ("sessionTimeout", "int32", (0, 4)),
    ("subscription", "bytes", (0, 4)), ("assignment", "bytes", (0, 4)),
]
GROUP_METADATA_VALUE = [
    ("protocolType", "string", (0, 4)), ("generation", "int32", (0, 4)), ("protocol", "nullable_string", (0, 4)),
    ("leader", "nullable_string", (0, 4)), ("currentStateTimestamp", "int64", (2, 4)),
    ("members", MEMBER_METADATA, (0, 4)),
]


def encode(fields, version: int, values: dict) -> bytes:
    """A plain (non-flexible) encoder driven by the JSON field lists."""
    out = b""
    for name, kind, (low, high) in fields:
        if not low <= version <= high:
            continue
        value = values[name]
        if isinstance(kind, list):
            out += struct.pack(">i", len(value)) + b"".join(encode(kind, version, v) for v in value)
        elif kind == "int32":
            out += struct.pack(">i", value)
        elif kind == "int64":
            out += struct.pack(">q", value)
        elif kind in ("string", "nullable_string"):
            out += struct.pack(">h", -1) if value is None else struct.pack(">h", len(value.encode())) + value.encode()
        elif kind == "bytes":
            out += struct.pack(">i", len(value)) + value
    return out


def record(fields, version, values) -> bytes:
    return struct.pack(">h", version) + encode(fields, version, values)


def test_offset_commit_key_and_value_bytes():
    assert storage.offset_commit_key("grp", "tópic", 7) == record(
        OFFSET_COMMIT_KEY, 1, {"group": "grp", "topic": "tópic", "partition": 7})
    value = storage.OffsetCommitValue(123456789012, 5, "meta", 1_700_000_000_000)
    assert storage.offset_commit_value(value) == record(OFFSET_COMMIT_VALUE, 3, {
        "offset": 123456789012, "leaderEpoch": 5, "metadata": "meta", "commitTimestamp": 1_700_000_000_000})
    with_expiry = storage.OffsetCommitValue(1, -1, "", 10, 99)
    assert storage.offset_commit_value(with_expiry) == record(OFFSET_COMMIT_VALUE, 1, {
        "offset": 1, "metadata": "", "commitTimestamp": 10, "expireTimestamp": 99})
    assert storage.decode_offset_value(storage.offset_commit_value(value)) == value
    assert storage.decode_offset_value(storage.offset_commit_value(with_expiry)) == with_expiry
    assert storage.decode_key(storage.offset_commit_key("grp", "t", 7)) == storage.OffsetKey("grp", "t", 7)


def test_group_metadata_key_and_value_bytes():
    assert storage.group_metadata_key("grp") == record(GROUP_METADATA_KEY, 2, {"group": "grp"})
    members = [
        storage.MemberMetadataRecord("m-1", None, "client", "/127.0.0.1", 30000, 10000, b"\x00sub", b"\x01asg"),
        storage.MemberMetadataRecord("m-2", "inst", "client2", "/10.0.0.1", 60000, 45000, b"", b""),
    ]
    value = storage.GroupMetadataValue("consumer", 3, "range", "m-1", 1_700_000_000_000, members)
    expected = record(GROUP_METADATA_VALUE, 3, {
        "protocolType": "consumer", "generation": 3, "protocol": "range", "leader": "m-1",
        "currentStateTimestamp": 1_700_000_000_000,
        "members": [
            {"memberId": m.member_id, "groupInstanceId": m.group_instance_id, "clientId": m.client_id,
             "clientHost": m.client_host, "rebalanceTimeout": m.rebalance_timeout,
             "sessionTimeout": m.session_timeout, "subscription": m.subscription, "assignment": m.assignment}
            for m in members
        ],
    })
    assert storage.group_metadata_value(value) == expected
    assert storage.decode_group_value(expected) == value
    empty = storage.GroupMetadataValue("", 4, None, None, 5, [])
    assert storage.group_metadata_value(empty) == record(GROUP_METADATA_VALUE, 3, {
        "protocolType": "", "generation": 4, "protocol": None, "leader": None, "currentStateTimestamp": 5,
        "members": []})


def test_older_value_versions_decode():
    v0 = record(OFFSET_COMMIT_VALUE, 0, {"offset": 9, "metadata": "x", "commitTimestamp": 3})
    assert storage.decode_offset_value(v0) == storage.OffsetCommitValue(9, -1, "x", 3, -1)
    g1 = record(GROUP_METADATA_VALUE, 1, {
        "protocolType": "consumer", "generation": 1, "protocol": "range", "leader": "m",
        "members": [{"memberId": "m", "clientId": "c", "clientHost": "h", "rebalanceTimeout": 5,
                     "sessionTimeout": 6, "subscription": b"s", "assignment": b"a"}]})
    decoded = storage.decode_group_value(g1)
    assert decoded.current_state_timestamp == -1 and decoded.members[0].rebalance_timeout == 5


def test_flexible_v4_values_decode():
    # OffsetCommitValue v4: compact string and an empty tag buffer
    v4 = struct.pack(">hqi", 4, 77, 2) + bytes([len(b"md") + 1]) + b"md" + struct.pack(">q", 8) + b"\x00"
    assert storage.decode_offset_value(v4) == storage.OffsetCommitValue(77, 2, "md", 8, -1)


def test_batches_round_trip():
    records = [(storage.offset_commit_key("g", "t", 0), storage.offset_commit_value(storage.OffsetCommitValue(1))),
               (storage.group_metadata_key("g"), None)]
    for codec in (0, 1):
        batch = bytes(storage.build_batch(records, 1234, codec))
        assert [(k, v) for _, k, v in storage.iter_batch_records(batch)] == records


@pytest.mark.parametrize("text, expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("consumer-group-1", 147483020), ("my-group", -1906497762),
    ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
    ("\U0001F600", 55357 * 31 + 56832),  # outside the BMP: two UTF-16 code units
    ("é", 233),
])
def test_java_string_hash(text, expected):
    assert storage.java_string_hash(text) == expected


def test_partition_for_group():
    assert storage.partition_for("polygenelubricants", 50) == 0
    assert storage.partition_for("hello", 50) == 99162322 % 50
    assert storage.partition_for("my-group", 50) == 1906497762 % 50


# ---- versions below kafka-python's advertised range ----------------------------------------------


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_offset_commit_v0_and_v1_decode_and_respond():
    handler = REGISTRY[8]
    assert handler.supports(0) and handler.supports(1)
    v0 = _s("g") + struct.pack(">i", 1) + _s("t") + struct.pack(">i", 1) + struct.pack(">iq", 2, 42) + _s("md")
    request = handler.decode(0, memoryview(v0))
    p = request.topics[0].partitions[0]
    assert (request.group_id, request.topics[0].name, p.partition_index, p.committed_offset,
            p.committed_metadata) == ("g", "t", 2, 42, "md")
    v1 = (_s("g") + struct.pack(">i", 5) + _s("member") + struct.pack(">i", 1) + _s("t") + struct.pack(">i", 1)
          + struct.pack(">iqq", 0, 7, 1234) + _s(""))
    request = handler.decode(1, memoryview(v1))
    p = request.topics[0].partitions[0]
    assert (request.generation_id_or_member_epoch, request.member_id, p.committed_offset, p.commit_timestamp) == (
        5, "member", 7, 1234)
    from kafkacompat.wire.codec import response_class

    topic_cls = response_class(8).OffsetCommitResponseTopic
    response = response_class(8)(topics=[topic_cls(name="t", partitions=[
        topic_cls.OffsetCommitResponsePartition(partition_index=2, error_code=25)])])
    assert handler.encode(response, 0) == struct.pack(">i", 1) + _s("t") + struct.pack(">iih", 1, 2, 25)


def test_offset_fetch_v0_decode_and_respond():
    handler = REGISTRY[9]
    body = _s("g") + struct.pack(">i", 1) + _s("t") + struct.pack(">iii", 2, 0, 1)
    request = handler.decode(0, memoryview(body))
    assert request.group_id == "g" and list(request.topics[0].partition_indexes) == [0, 1]
    from kafkacompat.wire.codec import response_class

    topic_cls = response_class(9).OffsetFetchResponseTopic
    response = response_class(9)(topics=[topic_cls(name="t", partitions=[
        topic_cls.OffsetFetchResponsePartition(partition_index=0, committed_offset=5, metadata="m", error_code=0)])])
    assert handler.encode(response, 0) == (struct.pack(">i", 1) + _s("t") + struct.pack(">iiq", 1, 0, 5) + _s("m")
                                          + struct.pack(">h", 0))
