"""kafkacompat.wire.produce against two independent encoders: kafka-python 3 and kio 0.6.5.

For every Produce version the broker serves (3-13) the same logical message is encoded by both
libraries; the two encodings must agree with each other, our decoder must read them back to the
same fields, and our response encoder must produce the very same bytes. kio has every version
3-13 of Produce, so no version relies on a single oracle.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import importlib
import io
import random
import struct
import tracemalloc
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer

from kafkacompat.wire.produce import (
    NodeEndpoint,
    ProducePartitionData,
    ProducePartitionResult,
    ProduceRequestData,
    ProduceTopicData,
    ProduceTopicResult,
    WireDecodeError,
    decode_produce_request,
    encode_produce_response,
)

VERSIONS = range(3, 14)  # the oracles (kafka-python, kio) start at v3; v0-2 are checked by hand below
FLEXIBLE_VERSIONS = range(9, 14)
TOPIC_A = uuid.UUID("6f1d0c5e-8a0b-4c47-9a4e-0b7f2d1e3c11")
TOPIC_B = uuid.UUID("00000000-0000-0000-0000-0000000000ff")


def _blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


# --------------------------------------------------------------------------------------------
# Logical messages and the two oracles
# --------------------------------------------------------------------------------------------

# (name, topic_id, [(partition, records)]): sizes chosen so compact lengths need 1, 2 and 3
# varint bytes; b'' and None are distinct on the wire.
REQUEST_TOPICS = [
    ("orders", TOPIC_A, [(0, _blob(1, 61)), (7, None), (3, b""), (2, _blob(2, 300))]),
    ("pay.ments-ü", TOPIC_B, [(1, _blob(3, 20000))]),
]

REQUEST_CASES = {
    "idempotent": dict(transactional_id=None, acks=-1, timeout_ms=30000, topics=REQUEST_TOPICS),
    "transactional": dict(transactional_id="txn-ß-" + "x" * 200, acks=1, timeout_ms=1, topics=REQUEST_TOPICS[:1]),
    "acks0-no-topics": dict(transactional_id="", acks=0, timeout_ms=-1, topics=[]),
}


def kafka_python_produce_request(case: dict, version: int) -> bytes:
    topic_cls = ProduceRequest.TopicProduceData
    partition_cls = topic_cls.PartitionProduceData
    request = ProduceRequest(
        version=version,
        transactional_id=case["transactional_id"],
        acks=case["acks"],
        timeout_ms=case["timeout_ms"],
        topic_data=[
            topic_cls(
                name=name,
                topic_id=topic_id,
                partition_data=[partition_cls(index=index, records=records) for index, records in parts],
            )
            for name, topic_id, parts in case["topics"]
        ],
    )
    return bytes(request.encode(version=version))


def kio_make(cls: type, **candidates):
    """Build a kio entity from whichever of ``candidates`` its version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in candidates.items() if key in names})


def kio_encode(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def kio_produce_request(case: dict, version: int) -> bytes:
    schema = importlib.import_module(f"kio.schema.produce.v{version}.request")
    request = kio_make(
        schema.ProduceRequest,
        transactional_id=case["transactional_id"],
        acks=case["acks"],
        timeout=datetime.timedelta(milliseconds=case["timeout_ms"]),
        topic_data=tuple(
            kio_make(
                schema.TopicProduceData,
                name=name,
                topic_id=topic_id,
                partition_data=tuple(
                    schema.PartitionProduceData(index=index, records=records) for index, records in parts
                ),
            )
            for name, topic_id, parts in case["topics"]
        ),
    )
    return kio_encode(request)


def expected_request(case: dict, version: int) -> ProduceRequestData:
    return ProduceRequestData(
        case["transactional_id"],
        case["acks"],
        case["timeout_ms"],
        [
            ProduceTopicData(
                "" if version >= 13 else name,
                topic_id if version >= 13 else None,
                [ProducePartitionData(index, records) for index, records in parts],
            )
            for name, topic_id, parts in case["topics"]
        ],
    )


def materialised(request: ProduceRequestData) -> ProduceRequestData:
    """The request with records views turned into bytes, for == comparison."""
    request = copy.copy(request)
    request.topics = [
        ProduceTopicData(
            t.name,
            t.topic_id,
            [ProducePartitionData(p.index, None if p.records is None else bytes(p.records)) for p in t.partitions],
        )
        for t in request.topics
    ]
    return request


def writable_body(data: bytes) -> memoryview:
    """What the server hands the decoder: a view over a (writable) bytearray."""
    return memoryview(bytearray(data))


# --------------------------------------------------------------------------------------------
# ProduceRequest decoding
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case_name", REQUEST_CASES)
@pytest.mark.parametrize("version", VERSIONS)
def test_oracles_agree_and_we_decode_their_request(version: int, case_name: str) -> None:
    case = REQUEST_CASES[case_name]
    encoded = kafka_python_produce_request(case, version)
    assert kio_produce_request(case, version) == encoded

    decoded = decode_produce_request(writable_body(encoded), version)

    assert materialised(decoded) == expected_request(case, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_decoder_accepts_bytes_and_readonly_views(version: int) -> None:
    case = REQUEST_CASES["idempotent"]
    encoded = kafka_python_produce_request(case, version)
    for body in (encoded, bytearray(encoded), memoryview(encoded)):
        assert materialised(decode_produce_request(body, version)) == expected_request(case, version)


def test_kio_reads_back_what_kafka_python_wrote_v13() -> None:
    # Guards the oracles themselves: both parse the topic-id layout the same way.
    case = REQUEST_CASES["idempotent"]
    schema = importlib.import_module("kio.schema.produce.v13.request")
    parsed, size = entity_reader(schema.ProduceRequest)(kafka_python_produce_request(case, 13), 0)
    assert [t.topic_id for t in parsed.topic_data] == [TOPIC_A, TOPIC_B]


def _with_future_tags(json: dict) -> dict:
    """ProduceRequest.json plus tagged fields a newer client might send, at every level."""
    json = copy.deepcopy(json)

    def add(fields: list, name: str, tag: int) -> None:
        fields.append({
            "name": name, "type": "string", "versions": "9+", "taggedVersions": "9+", "tag": tag,
            "nullableVersions": "9+", "default": "null", "about": "unknown to the broker",
        })

    add(json["fields"], "FutureTop", 7)
    topic = next(f for f in json["fields"] if f["name"] == "TopicData")
    add(topic["fields"], "FutureTopic", 3)
    partition = next(f for f in topic["fields"] if f["name"] == "PartitionData")
    add(partition["fields"], "FuturePartitionA", 0)
    add(partition["fields"], "FuturePartitionB", 20000)  # needs a 3-byte tag varint
    return json


def _future_produce_request_class() -> type:
    class ProduceRequest(ApiMessage):  # noqa: F811 - the class name selects the JSON schema
        @classmethod
        def json_patch(cls, json: dict) -> dict:
            return _with_future_tags(json)

    return ProduceRequest


FutureProduceRequest = _future_produce_request_class()


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
def test_unknown_tagged_fields_are_skipped_at_every_level(version: int) -> None:
    case = REQUEST_CASES["idempotent"]
    topic_cls = FutureProduceRequest.TopicProduceData
    partition_cls = topic_cls.PartitionProduceData
    request = FutureProduceRequest(
        version=version,
        transactional_id=case["transactional_id"],
        acks=case["acks"],
        timeout_ms=case["timeout_ms"],
        future_top="t" * 300,  # a 2-byte size varint
        topic_data=[
            topic_cls(
                name=name,
                topic_id=topic_id,
                future_topic="topic-level",
                partition_data=[
                    partition_cls(index=index, records=records, future_partition_a="a", future_partition_b="b" * 200)
                    for index, records in parts
                ],
            )
            for name, topic_id, parts in case["topics"]
        ],
    )
    encoded = bytes(request.encode(version=version))
    plain = kafka_python_produce_request(case, version)
    assert len(encoded) > len(plain) + 500  # the tags really are on the wire
    # kafka-python's own decoder skips them too, so the bytes are a valid message.
    assert ProduceRequest.decode(encoded, version=version) == ProduceRequest.decode(plain, version=version)

    decoded = decode_produce_request(writable_body(encoded), version)

    assert materialised(decoded) == expected_request(case, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_records_are_writable_zero_copy_slices_of_the_body(version: int) -> None:
    case = REQUEST_CASES["idempotent"]
    body = bytearray(kafka_python_produce_request(case, version))
    view = memoryview(body)

    decoded = decode_produce_request(view, version)

    records = [p.records for t in decoded.topics for p in t.partitions if p.records]
    assert len(records) == 3
    for slice_ in records:
        assert slice_.obj is body and not slice_.readonly
        start = bytes(body).index(bytes(slice_))
        struct.pack_into(">q", slice_, 0, 0x0102030405060708)  # what the broker does to baseOffset
        assert body[start : start + 8] == bytes.fromhex("0102030405060708")


def test_unsupported_versions_are_rejected() -> None:
    for version in (-1, 14):
        with pytest.raises(ValueError):
            decode_produce_request(memoryview(b"\x00" * 64), version)
        with pytest.raises(ValueError):
            encode_produce_response([], 0, version)


# --------------------------------------------------------------------------------------------
# Robustness: truncation, garbage, claimed lengths
# --------------------------------------------------------------------------------------------

VALID_REQUESTS = [
    (version, kafka_python_produce_request(case, version))
    for version in VERSIONS
    for case in (REQUEST_CASES["transactional"], REQUEST_CASES["acks0-no-topics"])
]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_raises_value_error(version: int) -> None:
    case = dict(REQUEST_CASES["idempotent"], topics=[("t", TOPIC_A, [(0, b"r" * 130), (1, None)])])
    encoded = kafka_python_produce_request(case, version)
    for cut in range(len(encoded)):
        with pytest.raises(WireDecodeError):
            decode_produce_request(memoryview(bytearray(encoded[:cut])), version)


def _decode_or_value_error(data: bytes, version: int) -> None:
    try:
        decode_produce_request(memoryview(bytearray(data)), version)
    except ValueError:
        pass


@settings(max_examples=400, deadline=200, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), data=st.binary(max_size=300))
def test_random_bytes_only_raise_value_error(version: int, data: bytes) -> None:
    _decode_or_value_error(data, version)


@settings(max_examples=600, deadline=200)
@given(
    request=st.sampled_from(VALID_REQUESTS),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 10_000),
)
def test_mutated_and_truncated_requests_only_raise_value_error(request, edits, cut) -> None:
    version, encoded = request
    data = bytearray(encoded)
    for position, value in edits:
        data[position % len(data)] = value
    _decode_or_value_error(bytes(data[: cut % (len(data) + 1)]), version)


HUGE_CLAIMS = {
    # non-flexible: string length 32767, array count 2**31-1, records length 2**31-1
    3: [
        b"\x7f\xff" + b"x" * 10,
        b"\xff\xff" + b"\xff\xff" + b"\x00\x00\x00\x01" + b"\x7f\xff\xff\xff",
        b"\xff\xff\xff\xff\x00\x00\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00\x7f\xff\xff\xff",
    ],
    # flexible: compact lengths of 2**32-2 (5-byte varints), and an over-long varint
    9: [
        b"\xff\xff\xff\xff\x0f" + b"x" * 10,
        b"\x00\xff\xff\x00\x00\x00\x01\xff\xff\xff\xff\x0f",
        b"\x00\xff\xff\x00\x00\x00\x01\x02\x02t\x02\x00\x00\x00\x00\xff\xff\xff\xff\x0f",
        b"\x00\xff\xff\x00\x00\x00\x01\x02\x02t\x02\x00\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff\x0f",
        b"\x00\xff\xff\x00\x00\x00\x01\x80\x80\x80\x80\x80\x01",
    ],
}


@pytest.mark.parametrize("version, data", [(v, d) for v, items in HUGE_CLAIMS.items() for d in items])
def test_claimed_lengths_are_checked_before_allocating(version: int, data: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(WireDecodeError):
            decode_produce_request(memoryview(bytearray(data)), version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_overlong_varints_are_rejected() -> None:
    # Kafka reads at most 5 bytes of an unsigned varint; a 6-byte encoding of 1 is malformed.
    valid = kafka_python_produce_request(REQUEST_CASES["acks0-no-topics"], 9)
    assert valid[:2] == b"\x01\x00"  # compact string "" then acks
    overlong = b"\x81\x80\x80\x80\x80\x00" + valid[1:]
    with pytest.raises(WireDecodeError, match="longer than 5 bytes"):
        decode_produce_request(memoryview(bytearray(overlong)), 9)
    five_bytes = b"\x81\x80\x80\x80\x00" + valid[1:]  # still 1, in the longest legal form
    assert decode_produce_request(memoryview(bytearray(five_bytes)), 9).transactional_id == ""


# --------------------------------------------------------------------------------------------
# ProduceResponse encoding
# --------------------------------------------------------------------------------------------

RESPONSE_CASES = {
    "success": dict(
        throttle_time_ms=0,
        node_endpoints=None,
        topics=[
            ProduceTopicResult("orders", TOPIC_A, [
                ProducePartitionResult(0, base_offset=1234567890123, log_start_offset=17),
                ProducePartitionResult(7, base_offset=0, log_append_time_ms=1_700_000_000_123, log_start_offset=0),
            ]),
            ProduceTopicResult("pay.ments-ü", TOPIC_B, [ProducePartitionResult(1, base_offset=5, log_start_offset=5)]),
        ],
    ),
    "errors-and-leader-hints": dict(
        throttle_time_ms=250,
        node_endpoints=[NodeEndpoint(2, "broker-2.example", 9092, "rack-ä"), NodeEndpoint(300, "b" * 150, 19092, None)],
        topics=[
            ProduceTopicResult("orders", TOPIC_A, [
                ProducePartitionResult(0, error_code=6, current_leader=(2, 17)),
                ProducePartitionResult(
                    3,
                    error_code=87,
                    record_errors=[(0, "bad key"), (4, None), (70000, "ü" * 100)],
                    error_message="records rejected: " + "x" * 200,
                    current_leader=(-1, 0),
                ),
                ProducePartitionResult(4, error_code=3, log_start_offset=-1),
            ]),
        ],
    ),
    "empty": dict(throttle_time_ms=7, node_endpoints=[], topics=[]),
}


def kafka_python_produce_response(case: dict, version: int) -> bytes:
    topic_cls = ProduceResponse.TopicProduceResponse
    partition_cls = topic_cls.PartitionProduceResponse

    def partition(p: ProducePartitionResult):
        fields = dict(
            index=p.index,
            error_code=p.error_code,
            base_offset=p.base_offset,
            log_append_time_ms=p.log_append_time_ms,
            log_start_offset=p.log_start_offset,
            record_errors=[
                partition_cls.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                for i, m in p.record_errors
            ],
            error_message=p.error_message,
        )
        if p.current_leader is not None:
            fields["current_leader"] = partition_cls.LeaderIdAndEpoch(
                leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
            )
        return partition_cls(**fields)

    response = ProduceResponse(
        version=version,
        responses=[
            topic_cls(name=t.name, topic_id=t.topic_id, partition_responses=[partition(p) for p in t.partitions])
            for t in case["topics"]
        ],
        throttle_time_ms=case["throttle_time_ms"],
        node_endpoints=[
            ProduceResponse.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in case["node_endpoints"] or []
        ],
    )
    return bytes(response.encode(version=version))


def kio_produce_response(case: dict, version: int) -> bytes:
    schema = importlib.import_module(f"kio.schema.produce.v{version}.response")

    def partition(p: ProducePartitionResult):
        extra = {}
        if p.current_leader is not None and version >= 10:
            extra["current_leader"] = schema.LeaderIdAndEpoch(
                leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
            )
        return kio_make(
            schema.PartitionProduceResponse,
            index=p.index,
            error_code=KioErrorCode(p.error_code),
            base_offset=p.base_offset,
            log_append_time=None
            if p.log_append_time_ms == -1
            else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, datetime.timezone.utc),
            log_start_offset=p.log_start_offset,
            record_errors=tuple(
                kio_make(schema.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                for i, m in p.record_errors
            )
            if version >= 8
            else (),
            error_message=p.error_message,
            **extra,
        )

    response = kio_make(
        schema.ProduceResponse,
        responses=tuple(
            kio_make(
                schema.TopicProduceResponse,
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=tuple(partition(p) for p in t.partitions),
            )
            for t in case["topics"]
        ),
        throttle_time=datetime.timedelta(milliseconds=case["throttle_time_ms"]),
        node_endpoints=tuple(
            kio_make(schema.NodeEndpoint, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in (case["node_endpoints"] or [] if version >= 10 else [])
        ),
    )
    return kio_encode(response)


@pytest.mark.parametrize("case_name", RESPONSE_CASES)
@pytest.mark.parametrize("version", VERSIONS)
def test_response_bytes_match_kafka_python_and_kio(version: int, case_name: str) -> None:
    case = RESPONSE_CASES[case_name]
    expected = kafka_python_produce_response(case, version)
    assert kio_produce_response(case, version) == expected

    ours = encode_produce_response(case["topics"], case["throttle_time_ms"], version, case["node_endpoints"])

    assert isinstance(ours, bytes)
    assert ours == expected


@pytest.mark.parametrize("version", range(10, 14))
def test_response_tagged_fields_decode_in_kafka_python(version: int) -> None:
    case = RESPONSE_CASES["errors-and-leader-hints"]
    ours = encode_produce_response(case["topics"], case["throttle_time_ms"], version, case["node_endpoints"])

    decoded = ProduceResponse.decode(ours, version=version)

    partitions = decoded.responses[0].partition_responses
    assert (partitions[0].current_leader.leader_id, partitions[0].current_leader.leader_epoch) == (2, 17)
    assert [(e.node_id, e.host, e.port, e.rack) for e in decoded.node_endpoints] == [
        (2, "broker-2.example", 9092, "rack-ä"),
        (300, "b" * 150, 19092, None),
    ]


@pytest.mark.parametrize("version", range(3, 10))
def test_response_leaves_out_fields_the_version_lacks(version: int) -> None:
    case = RESPONSE_CASES["errors-and-leader-hints"]
    with_hints = encode_produce_response(case["topics"], 250, version, case["node_endpoints"])
    stripped = [
        ProduceTopicResult(t.name, t.topic_id, [dataclasses.replace(p, current_leader=None) for p in t.partitions])
        for t in case["topics"]
    ]
    assert with_hints == encode_produce_response(stripped, 250, version, None)


# --------------------------------------------------------------------------------------------
# v0-v2 (old clients): no oracle has them, so the bytes are written out from protocol.html
# --------------------------------------------------------------------------------------------


def _legacy_request(version: int, records: bytes) -> bytes:
    topic = b"\x00\x01t"
    partition = struct.pack(">ii", 4, len(records)) + records
    return struct.pack(">hi", -1, 1500) + struct.pack(">i", 1) + topic + struct.pack(">i", 1) + partition


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_requests_have_no_transactional_id(version: int) -> None:
    body = bytearray(_legacy_request(version, b"RECORDS"))
    decoded = decode_produce_request(memoryview(body), version)
    assert (decoded.transactional_id, decoded.acks, decoded.timeout_ms) == (None, -1, 1500)
    (topic,) = decoded.topics
    (partition,) = topic.partitions
    assert (topic.name, partition.index, bytes(partition.records)) == ("t", 4, b"RECORDS")


@pytest.mark.parametrize(
    "version, tail",
    [
        (0, b""),  # index, error, base_offset; no throttle time
        (1, struct.pack(">i", 7)),  # + throttle_time_ms after the topics
        (2, struct.pack(">i", 7)),  # + log_append_time per partition (below)
    ],
)
def test_produce_v0_to_v2_responses(version: int, tail: bytes) -> None:
    result = ProducePartitionResult(4, error_code=0, base_offset=42, log_append_time_ms=99)
    encoded = encode_produce_response([ProduceTopicResult("t", None, [result])], 7, version)
    partition = struct.pack(">ihq", 4, 0, 42) + (struct.pack(">q", 99) if version == 2 else b"")
    assert encoded == struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 1) + partition + tail
