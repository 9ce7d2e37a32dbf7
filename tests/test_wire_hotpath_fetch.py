"""kafkacompat.wire.fetch against two independent encoders: kafka-python 3 and kio 0.6.5.

For every Fetch version the broker serves (0-18): the request as kafka-python and kio encode it
(the two must agree) decodes to the same fields with our decoder; our chunked response, joined
(FileRegions read back), is byte-for-byte what both libraries encode; and the follower-side
decoder reads the libraries' responses back. kio has every Fetch version 4-18, so those are
checked against both; kio has no v0-3, so the old consumers' versions are checked against
kafka-python 3 (schema JSON) and aiokafka's hand-written Struct classes instead.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import importlib
import io
import os
import random
import struct
import tempfile
import tracemalloc
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from kafkacompat.wire.chunks import Chunk, FileRegion, close_chunks
from kafkacompat.wire.fetch import (
    NO_HIGH_WATERMARK,
    FetchForgottenTopic,
    FetchPartitionRequest,
    FetchPartitionResult,
    FetchRequestData,
    FetchTopicRequest,
    FetchTopicResult,
    WireDecodeError,
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_response,
)
from kafkacompat.wire.produce import NodeEndpoint

VERSIONS = range(4, 19)  # every version kio has
OLD_VERSIONS = range(0, 4)  # Fetch v0-3: old consumers (legacy message sets)
ALL_VERSIONS = range(0, 19)
FLEXIBLE_VERSIONS = range(12, 19)
TOPIC_A = uuid.UUID("6f1d0c5e-8a0b-4c47-9a4e-0b7f2d1e3c11")
TOPIC_B = uuid.UUID("1c7b2ad3-52c5-4f6e-8f0e-5e2d9ab0c4d7")
TOPIC_OLD = uuid.UUID("00000000-0000-0000-0000-0000000000ff")
DIRECTORY = uuid.UUID("9a3e0b1c-0d4f-4aa5-bb6c-1f2e3d4c5b6a")


def _blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def kio_make(cls: type, **candidates):
    """Build a kio entity from whichever of ``candidates`` its version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in candidates.items() if key in names})


def kio_encode(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def patched_message_class(name: str, patch) -> type:
    """A kafka-python message class built from its JSON after ``patch(json)``."""
    namespace = {"json_patch": classmethod(lambda cls, json: patch(copy.deepcopy(json)))}
    return type(ApiMessage)(name, (ApiMessage,), namespace)


def add_tag(fields: list, name: str, tag: int, versions: str) -> None:
    fields.append({
        "name": name, "type": "string", "versions": versions, "taggedVersions": versions, "tag": tag,
        "nullableVersions": versions, "default": "null", "about": "unknown to the broker",
    })


def field_named(fields: list, name: str) -> dict:
    return next(f for f in fields if f["name"] == name)


# --------------------------------------------------------------------------------------------
# FetchRequest decoding
# --------------------------------------------------------------------------------------------

# partitions: (partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
#              log_start_offset, partition_max_bytes, replica_directory_id, high_watermark)
REQUEST_CASES = {
    "follower-full": dict(
        replica_id=2, replica_epoch=77, max_wait_ms=500, min_bytes=1, max_bytes=52428800,
        isolation_level=1, session_id=0, session_epoch=-1, rack_id="rack-1", cluster_id="cluster-ÄBC",
        topics=[
            ("orders", TOPIC_A, [
                (0, 5, 1234567890123, 4, 17, 1048576, DIRECTORY, 99),
                (7, 0, 0, -1, 0, 0x7FFFFFFF, DIRECTORY, -1),
            ]),
            ("pay.ments-ü" + "x" * 150, TOPIC_B, [(1, 2, 42, 1, -1, 65536, DIRECTORY, 41)]),
        ],
        forgotten=[("old", TOPIC_OLD, [1, 2, 3])],
    ),
    "consumer-incremental": dict(
        replica_id=-1, replica_epoch=-1, max_wait_ms=0, min_bytes=0, max_bytes=0x7FFFFFFF,
        isolation_level=0, session_id=55, session_epoch=3, rack_id="", cluster_id=None,
        topics=[],
        forgotten=[("old", TOPIC_OLD, list(range(300))), ("older", TOPIC_A, [])],
    ),
    # Many partitions, one of them (late in the array) carrying tagged fields from v17: the
    # decoder's fixed-size fast path must hand over to field-by-field decoding mid-array.
    "many-partitions": dict(
        replica_id=-1, replica_epoch=-1, max_wait_ms=500, min_bytes=1, max_bytes=50 << 20,
        isolation_level=1, session_id=0, session_epoch=0, rack_id="r", cluster_id=None,
        topics=[
            (f"topic-{t}", uuid.UUID(int=t + 1), [
                (p, 3, 1000 + p, 2, -1, 1 << 20, DIRECTORY if p == 20 else None, 5 if p == 20 else NO_HIGH_WATERMARK)
                for p in range(30)
            ])
            for t in range(3)
        ],
        forgotten=[],
    ),
}


def kafka_python_fetch_request(case: dict, version: int, cls: type = FetchRequest, extra=None) -> bytes:
    """Encode ``case`` with kafka-python; ``extra`` adds fields (unknown tags) per level."""
    extra = extra or {}
    topic_cls = cls.FetchTopic
    partition_cls = topic_cls.FetchPartition
    fields = dict(
        cluster_id=case["cluster_id"],
        replica_id=case["replica_id"],
        max_wait_ms=case["max_wait_ms"],
        min_bytes=case["min_bytes"],
        max_bytes=case["max_bytes"],
        isolation_level=case["isolation_level"],
        session_id=case["session_id"],
        session_epoch=case["session_epoch"],
        topics=[
            topic_cls(
                topic=name,
                topic_id=topic_id,
                partitions=[
                    partition_cls(
                        partition=p[0], current_leader_epoch=p[1], fetch_offset=p[2], last_fetched_epoch=p[3],
                        log_start_offset=p[4], partition_max_bytes=p[5], replica_directory_id=p[6],
                        high_watermark=p[7], **extra.get("partition", {}),
                    )
                    for p in parts
                ],
                **extra.get("topic", {}),
            )
            for name, topic_id, parts in case["topics"]
        ],
        forgotten_topics_data=[
            cls.ForgottenTopic(topic=name, topic_id=topic_id, partitions=parts, **extra.get("forgotten", {}))
            for name, topic_id, parts in case["forgotten"]
        ],
        rack_id=case["rack_id"],
        **extra.get("top", {}),
    )
    if case["replica_id"] != -1 or case["replica_epoch"] != -1:
        fields["replica_state"] = cls.ReplicaState(replica_id=case["replica_id"], replica_epoch=case["replica_epoch"])
    return bytes(cls(version=version, **fields).encode(version=version))


def kio_fetch_request(case: dict, version: int) -> bytes:
    schema = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    extra = {}
    if version >= 15:
        extra["replica_state"] = schema.ReplicaState(replica_id=case["replica_id"], replica_epoch=case["replica_epoch"])
    request = kio_make(
        schema.FetchRequest,
        cluster_id=case["cluster_id"],
        replica_id=case["replica_id"],
        max_wait=datetime.timedelta(milliseconds=case["max_wait_ms"]),
        min_bytes=case["min_bytes"],
        max_bytes=case["max_bytes"],
        isolation_level=case["isolation_level"],
        session_id=case["session_id"],
        session_epoch=case["session_epoch"],
        topics=tuple(
            kio_make(
                schema.FetchTopic,
                topic=name,
                topic_id=topic_id,
                partitions=tuple(
                    kio_make(
                        schema.FetchPartition,
                        partition=p[0], current_leader_epoch=p[1], fetch_offset=p[2], last_fetched_epoch=p[3],
                        log_start_offset=p[4], partition_max_bytes=p[5], replica_directory_id=p[6],
                        high_watermark=p[7],
                    )
                    for p in parts
                ),
            )
            for name, topic_id, parts in case["topics"]
        ),
        forgotten_topics_data=tuple(
            kio_make(schema.ForgottenTopic, topic=name, topic_id=topic_id, partitions=tuple(parts))
            for name, topic_id, parts in case["forgotten"]
        )
        if version >= 7
        else (),
        rack_id=case["rack_id"],
        **extra,
    )
    return kio_encode(request)


def expected_request(case: dict, version: int) -> FetchRequestData:
    """``case`` as a version carries it: absent fields take Kafka's defaults."""

    def since(first: int, value, default):
        return value if version >= first else default

    def key(name: str, topic_id: uuid.UUID) -> tuple[str, uuid.UUID | None]:
        return ("", topic_id) if version >= 13 else (name, None)

    return FetchRequestData(
        replica_id=case["replica_id"],
        replica_epoch=since(15, case["replica_epoch"], -1),
        max_wait_ms=case["max_wait_ms"],
        min_bytes=case["min_bytes"],
        max_bytes=case["max_bytes"],
        isolation_level=case["isolation_level"],
        session_id=since(7, case["session_id"], 0),
        session_epoch=since(7, case["session_epoch"], -1),
        topics=[
            FetchTopicRequest(*key(name, topic_id), [
                FetchPartitionRequest(
                    p[0], since(9, p[1], -1), p[2], since(12, p[3], -1), since(5, p[4], -1), p[5],
                    since(17, p[6], None), since(18, p[7], NO_HIGH_WATERMARK),
                )
                for p in parts
            ])
            for name, topic_id, parts in case["topics"]
        ],
        forgotten_topics_data=[
            FetchForgottenTopic(*key(name, topic_id), parts) for name, topic_id, parts in case["forgotten"]
        ]
        if version >= 7
        else [],
        rack_id=since(11, case["rack_id"], ""),
        cluster_id=since(12, case["cluster_id"], None),
    )


@pytest.mark.parametrize("case_name", REQUEST_CASES)
@pytest.mark.parametrize("version", VERSIONS)
def test_oracles_agree_and_we_decode_their_request(version: int, case_name: str) -> None:
    case = REQUEST_CASES[case_name]
    encoded = kafka_python_fetch_request(case, version)
    assert kio_fetch_request(case, version) == encoded

    decoded = decode_fetch_request(memoryview(bytearray(encoded)), version)

    assert decoded == expected_request(case, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_decoder_accepts_bytes(version: int) -> None:
    case = REQUEST_CASES["follower-full"]
    assert decode_fetch_request(kafka_python_fetch_request(case, version), version) == expected_request(case, version)


def _future_fetch_request_json(json: dict) -> dict:
    """Tags a newer client might send, including known tag numbers at versions that predate them
    (ReplicaState = tag 1 before v15, ReplicaDirectoryId = partition tag 0 before v17,
    HighWatermark = partition tag 1 before v18): those must be skipped, not decoded."""
    add_tag(json["fields"], "FutureTop", 9, "12+")
    add_tag(json["fields"], "EarlyTag1", 1, "12-14")
    topic = field_named(json["fields"], "Topics")
    add_tag(topic["fields"], "FutureTopic", 0, "12+")
    partition = field_named(topic["fields"], "Partitions")
    add_tag(partition["fields"], "EarlyTag0", 0, "12-16")
    add_tag(partition["fields"], "EarlyTag1", 1, "12-17")
    add_tag(partition["fields"], "FuturePartition", 300, "12+")
    forgotten = field_named(json["fields"], "ForgottenTopicsData")
    add_tag(forgotten["fields"], "FutureForgotten", 2, "12+")
    return json


FutureFetchRequest = patched_message_class("FetchRequest", _future_fetch_request_json)


@pytest.mark.parametrize("case_name", REQUEST_CASES)
@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
def test_unknown_tagged_fields_in_requests_are_skipped(version: int, case_name: str) -> None:
    case = REQUEST_CASES[case_name]
    partition_tags = {"future_partition": "p" * 200}
    top_tags = {"future_top": "top"}
    if version <= 16:
        partition_tags["early_tag0"] = "not a uuid"
    if version <= 17:
        partition_tags["early_tag1"] = "not an int64"
    if version <= 14:
        top_tags["early_tag1"] = "not a ReplicaState"
    extra = {"top": top_tags, "topic": {"future_topic": "t"}, "partition": partition_tags, "forgotten": {"future_forgotten": "f"}}
    encoded = kafka_python_fetch_request(case, version, FutureFetchRequest, extra)
    plain = kafka_python_fetch_request(case, version)
    assert len(encoded) > len(plain)
    assert FetchRequest.decode(encoded, version=version) == FetchRequest.decode(plain, version=version)

    assert decode_fetch_request(memoryview(bytearray(encoded)), version) == expected_request(case, version)


def test_unsupported_versions_are_rejected() -> None:
    for version in (-1, 19, 20):
        with pytest.raises(ValueError):
            decode_fetch_request(memoryview(b"\x00" * 64), version)
        with pytest.raises(ValueError):
            decode_fetch_response(memoryview(b"\x00" * 64), version)
        with pytest.raises(ValueError):
            encode_fetch_response([], version=version)


# --------------------------------------------------------------------------------------------
# FetchResponse encoding
# --------------------------------------------------------------------------------------------


@pytest.fixture
def log_file() -> Iterator[tuple[int, bytes]]:
    """An open file holding some 'log' bytes: (fd, contents)."""
    contents = _blob(10, 9000)
    with tempfile.TemporaryFile() as handle:
        handle.write(contents)
        handle.flush()
        yield handle.fileno(), contents


def region(log: tuple[int, bytes], offset: int, length: int) -> FileRegion:
    return FileRegion(os.dup(log[0]), offset, length)


def response_case(log: tuple[int, bytes]) -> dict:
    """A response with every kind of record chunk and every optional field."""
    backing = bytearray(_blob(11, 400))
    return dict(
        throttle_time_ms=10,
        error_code=0,
        session_id=12345,
        node_endpoints=[NodeEndpoint(3, "broker-3.example", 9092, "rack-ä"), NodeEndpoint(4, "h" * 130, 9093, None)],
        topics=[
            FetchTopicResult("orders", TOPIC_A, [
                FetchPartitionResult(0, high_watermark=5000, last_stable_offset=4990, log_start_offset=17,
                                     records=[region(log, 100, 4000)], preferred_read_replica=2),
                FetchPartitionResult(1, high_watermark=2**40, last_stable_offset=2**40 - 5, log_start_offset=0,
                                     aborted_transactions=[(1000, 5), (2**40, 2**50)],
                                     records=[_blob(12, 50), memoryview(backing)[10:150], bytearray(_blob(13, 77))]),
                FetchPartitionResult(2, error_code=1, aborted_transactions=[], records=[]),
                FetchPartitionResult(3, error_code=6, current_leader=(3, 9)),
                FetchPartitionResult(4, high_watermark=10, last_stable_offset=10, log_start_offset=3,
                                     diverging_epoch=(4, 123456), snapshot_id=(999, 7),
                                     records=[region(log, 0, 61), region(log, 61, 1)]),
            ]),
            FetchTopicResult("pay.ments-ü", TOPIC_B, [
                FetchPartitionResult(9, high_watermark=1, last_stable_offset=1, log_start_offset=0,
                                     records=[_blob(14, 70000)], records_size=70000),
            ]),
        ],
    )


EMPTY_RESPONSE = dict(throttle_time_ms=0, error_code=70, session_id=0, node_endpoints=None, topics=[])


def record_bytes(chunks: list[Chunk]) -> bytes:
    return b"".join(c.read_all() if isinstance(c, FileRegion) else bytes(c) for c in chunks)


def kafka_python_fetch_response(case: dict, version: int, cls: type = FetchResponse, extra=None) -> bytes:
    extra = extra or {}
    topic_cls = cls.FetchableTopicResponse
    partition_cls = topic_cls.PartitionData

    def partition(p: FetchPartitionResult):
        fields = dict(
            partition_index=p.index, error_code=p.error_code, high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
            aborted_transactions=None if p.aborted_transactions is None else [
                partition_cls.AbortedTransaction(producer_id=pid, first_offset=first, **extra.get("aborted", {}))
                for pid, first in p.aborted_transactions
            ],
            preferred_read_replica=p.preferred_read_replica,
            records=record_bytes(p.records),
            **extra.get("partition", {}),
        )
        if p.diverging_epoch:
            fields["diverging_epoch"] = partition_cls.EpochEndOffset(epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1])
        if p.current_leader:
            fields["current_leader"] = partition_cls.LeaderIdAndEpoch(leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
        if p.snapshot_id:
            fields["snapshot_id"] = partition_cls.SnapshotId(end_offset=p.snapshot_id[0], epoch=p.snapshot_id[1])
        return partition_cls(**fields)

    response = cls(
        version=version,
        throttle_time_ms=case["throttle_time_ms"],
        error_code=case["error_code"],
        session_id=case["session_id"],
        responses=[
            topic_cls(topic=t.name, topic_id=t.topic_id, partitions=[partition(p) for p in t.partitions],
                      **extra.get("topic", {}))
            for t in case["topics"]
        ],
        node_endpoints=[
            cls.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in case["node_endpoints"] or []
        ],
        **extra.get("top", {}),
    )
    return bytes(response.encode(version=version))


def kio_fetch_response(case: dict, version: int) -> bytes:
    schema = importlib.import_module(f"kio.schema.fetch.v{version}.response")

    def partition(p: FetchPartitionResult):
        tags = {}
        if version >= 12:
            if p.diverging_epoch:
                tags["diverging_epoch"] = schema.EpochEndOffset(epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1])
            if p.current_leader:
                tags["current_leader"] = schema.LeaderIdAndEpoch(leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
            if p.snapshot_id:
                tags["snapshot_id"] = schema.SnapshotId(end_offset=p.snapshot_id[0], epoch=p.snapshot_id[1])
        return kio_make(
            schema.PartitionData,
            partition_index=p.index, error_code=KioErrorCode(p.error_code), high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
            aborted_transactions=None if p.aborted_transactions is None else tuple(
                schema.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in p.aborted_transactions
            ),
            preferred_read_replica=p.preferred_read_replica,
            records=record_bytes(p.records),
            **tags,
        )

    response = kio_make(
        schema.FetchResponse,
        throttle_time=datetime.timedelta(milliseconds=case["throttle_time_ms"]),
        error_code=KioErrorCode(case["error_code"]),
        session_id=case["session_id"],
        responses=tuple(
            kio_make(schema.FetchableTopicResponse, topic=t.name, topic_id=t.topic_id,
                     partitions=tuple(partition(p) for p in t.partitions))
            for t in case["topics"]
        ),
        node_endpoints=tuple(
            kio_make(schema.NodeEndpoint, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in (case["node_endpoints"] or [] if version >= 16 else [])
        ),
    )
    return kio_encode(response)


def encode(case: dict, version: int) -> list[Chunk]:
    return encode_fetch_response(
        case["topics"], version=version, throttle_time_ms=case["throttle_time_ms"], error_code=case["error_code"],
        session_id=case["session_id"], node_endpoints=case["node_endpoints"],
    )


def all_record_chunks(case: dict) -> list[Chunk]:
    return [c for t in case["topics"] for p in t.partitions for c in p.records]


@pytest.mark.parametrize("version", VERSIONS)
def test_response_bytes_match_kafka_python_and_kio(version: int, log_file) -> None:
    case = response_case(log_file)
    try:
        expected = kafka_python_fetch_response(case, version)
        assert kio_fetch_response(case, version) == expected

        chunks = encode(case, version)

        assert record_bytes(chunks) == expected
    finally:
        close_chunks(all_record_chunks(case))


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_response_matches_kafka_python_and_kio(version: int) -> None:
    expected = kafka_python_fetch_response(EMPTY_RESPONSE, version)
    assert kio_fetch_response(EMPTY_RESPONSE, version) == expected
    chunks = encode(EMPTY_RESPONSE, version)
    assert len(chunks) == 1 and chunks[0] == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_record_chunks_pass_through_as_the_same_objects(version: int, log_file) -> None:
    case = response_case(log_file)
    records = all_record_chunks(case)
    try:
        chunks = encode(case, version)

        passed = [c for c in chunks if any(c is r for r in records)]
        assert len(passed) == len(records) and all(a is b for a, b in zip(passed, records))
        pieces = [c for c in chunks if not any(c is r for r in records)]
        assert all(type(piece) is bytes for piece in pieces)
        partitions_with_records = sum(1 for t in case["topics"] for p in t.partitions if p.records)
        assert len(pieces) == partitions_with_records + 1  # header pieces coalesced between records
        assert all(region.fd >= 0 for region in records if isinstance(region, FileRegion))
    finally:
        close_chunks(records)


@pytest.mark.parametrize("version", [4, 11, 12, 18])
def test_records_size_must_match_the_chunks(version: int) -> None:
    partition = FetchPartitionResult(0, records=[b"abc", b"de"], records_size=4)
    with pytest.raises(ValueError):
        encode_fetch_response([FetchTopicResult("t", TOPIC_A, [partition])], version=version)
    partition.records_size = 5
    assert record_bytes(encode_fetch_response([FetchTopicResult("t", TOPIC_A, [partition])], version=version))


@pytest.mark.parametrize("version", range(12, 19))
def test_response_tagged_fields_decode_in_kafka_python(version: int, log_file) -> None:
    case = response_case(log_file)
    try:
        decoded = FetchResponse.decode(record_bytes(encode(case, version)), version=version)
    finally:
        close_chunks(all_record_chunks(case))
    partitions = decoded.responses[0].partitions
    assert (partitions[3].current_leader.leader_id, partitions[3].current_leader.leader_epoch) == (3, 9)
    assert (partitions[4].diverging_epoch.epoch, partitions[4].diverging_epoch.end_offset) == (4, 123456)
    assert (partitions[4].snapshot_id.end_offset, partitions[4].snapshot_id.epoch) == (999, 7)
    endpoints = [(e.node_id, e.host, e.port, e.rack) for e in decoded.node_endpoints]
    assert endpoints == ([(3, "broker-3.example", 9092, "rack-ä"), (4, "h" * 130, 9093, None)] if version >= 16 else [])


# --------------------------------------------------------------------------------------------
# FetchResponse decoding (follower side)
# --------------------------------------------------------------------------------------------


def expected_decoded_topics(case: dict, version: int) -> list[FetchTopicResult]:
    """What the follower should read: the fields the version carries, records as bytes."""
    topics = []
    for t in case["topics"]:
        partitions = []
        for p in t.partitions:
            data = record_bytes(p.records)
            partitions.append(FetchPartitionResult(
                p.index, p.error_code, p.high_watermark, p.last_stable_offset,
                p.log_start_offset if version >= 5 else -1,
                p.aborted_transactions,
                p.preferred_read_replica if version >= 11 else -1,
                [data] if data else [],
                len(data),
                p.diverging_epoch if version >= 12 else None,
                p.current_leader if version >= 12 else None,
                p.snapshot_id if version >= 12 else None,
            ))
        topics.append(FetchTopicResult("" if version >= 13 else t.name, t.topic_id if version >= 13 else None, partitions))
    return topics


def with_bytes_records(topics: list[FetchTopicResult]) -> list[FetchTopicResult]:
    return [
        FetchTopicResult(t.name, t.topic_id, [
            dataclasses.replace(p, records=[bytes(c) for c in p.records],
                                aborted_transactions=None if p.aborted_transactions is None else [tuple(a) for a in p.aborted_transactions])
            for p in t.partitions
        ])
        for t in topics
    ]


def _future_fetch_response_json(json: dict) -> dict:
    add_tag(json["fields"], "FutureTop", 1, "12+")
    topic = field_named(json["fields"], "Responses")
    add_tag(topic["fields"], "FutureTopic", 0, "12+")
    partition = field_named(topic["fields"], "Partitions")
    add_tag(partition["fields"], "FuturePartition", 3, "12+")
    add_tag(field_named(partition["fields"], "AbortedTransactions")["fields"], "FutureAborted", 0, "12+")
    return json


FutureFetchResponse = patched_message_class("FetchResponse", _future_fetch_response_json)


@pytest.mark.parametrize("version", VERSIONS)
def test_follower_decodes_kafka_python_response(version: int, log_file) -> None:
    case = response_case(log_file)
    try:
        encoded = kafka_python_fetch_response(case, version)
        expected = expected_decoded_topics(case, version)
    finally:
        close_chunks(all_record_chunks(case))
    body = bytearray(encoded)

    throttle, error, session, topics = decode_fetch_response(memoryview(body), version)

    assert (throttle, error, session) == (10, 0, 12345) if version >= 7 else (10, 0, 0)
    assert with_bytes_records(topics) == expected
    for view in (c for t in topics for p in t.partitions for c in p.records):
        assert view.obj is body  # zero-copy slice


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
def test_follower_skips_unknown_tagged_fields(version: int, log_file) -> None:
    case = response_case(log_file)
    extra = {"top": {"future_top": "x" * 200}, "topic": {"future_topic": "t"},
             "partition": {"future_partition": "p"}, "aborted": {"future_aborted": "a"}}
    try:
        encoded = kafka_python_fetch_response(case, version, FutureFetchResponse, extra)
        assert len(encoded) > len(kafka_python_fetch_response(case, version))
        expected = expected_decoded_topics(case, version)
    finally:
        close_chunks(all_record_chunks(case))

    assert with_bytes_records(decode_fetch_response(memoryview(bytearray(encoded)), version).topics) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_follower_reads_our_own_response(version: int, log_file) -> None:
    case = response_case(log_file)
    try:
        joined = record_bytes(encode(case, version))
        expected = expected_decoded_topics(case, version)
    finally:
        close_chunks(all_record_chunks(case))
    assert with_bytes_records(decode_fetch_response(joined, version).topics) == expected


# --------------------------------------------------------------------------------------------
# Robustness: truncation, garbage, claimed lengths
# --------------------------------------------------------------------------------------------

VALID_REQUESTS = [(v, kafka_python_fetch_request(c, v)) for v in ALL_VERSIONS for c in REQUEST_CASES.values()]
SMALL_RESPONSE = dict(
    throttle_time_ms=1, error_code=0, session_id=2, node_endpoints=[NodeEndpoint(1, "h", 9092, None)],
    topics=[FetchTopicResult("t", TOPIC_A, [
        FetchPartitionResult(0, aborted_transactions=[(1, 2)], records=[b"r" * 20], current_leader=(1, 2)),
        FetchPartitionResult(1, records=[]),
    ])],
)
VALID_RESPONSES = [(v, kafka_python_fetch_response(SMALL_RESPONSE, v)) for v in ALL_VERSIONS]


@pytest.mark.parametrize("version, encoded", VALID_REQUESTS)
def test_every_request_truncation_raises_value_error(version: int, encoded: bytes) -> None:
    for cut in range(len(encoded)):
        with pytest.raises(WireDecodeError):
            decode_fetch_request(memoryview(bytearray(encoded[:cut])), version)


@pytest.mark.parametrize("version, encoded", VALID_RESPONSES)
def test_every_response_truncation_raises_value_error(version: int, encoded: bytes) -> None:
    for cut in range(len(encoded)):
        with pytest.raises(WireDecodeError):
            decode_fetch_response(memoryview(bytearray(encoded[:cut])), version)


def _decode_or_value_error(decoder, data: bytes, version: int) -> None:
    try:
        decoder(memoryview(bytearray(data)), version)
    except ValueError:
        pass


@settings(max_examples=500, deadline=200, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(ALL_VERSIONS), data=st.binary(max_size=300),
       decoder=st.sampled_from([decode_fetch_request, decode_fetch_response]))
def test_random_bytes_only_raise_value_error(version: int, data: bytes, decoder) -> None:
    _decode_or_value_error(decoder, data, version)


@settings(max_examples=800, deadline=200)
@given(
    message=st.sampled_from([(decode_fetch_request, *r) for r in VALID_REQUESTS]
                            + [(decode_fetch_response, *r) for r in VALID_RESPONSES]),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 10_000),
)
def test_mutated_and_truncated_messages_only_raise_value_error(message, edits, cut) -> None:
    decoder, version, encoded = message
    data = bytearray(encoded)
    for position, value in edits:
        data[position % len(data)] = value
    _decode_or_value_error(decoder, bytes(data[: cut % (len(data) + 1)]), version)


HUGE_CLAIMS = [
    # v0: topics array count 2**31-1; v3: a topic claiming 2**31-1 partitions
    (decode_fetch_request, 0, struct.pack(">iii", -1, 0, 0) + b"\x7f\xff\xff\xff"),
    (decode_fetch_request, 3, struct.pack(">iiii", -1, 0, 0, 0) + b"\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff"),
    # v1 response: records length 2**31-1
    (decode_fetch_response, 1, struct.pack(">ii", 0, 1) + b"\x00\x01t" + struct.pack(">iihqi", 1, 0, 0, 0, 0x7FFFFFFF)),
    # v4: topics array count 2**31-1
    (decode_fetch_request, 4, struct.pack(">iiiib", -1, 0, 0, 0, 0) + b"\x7f\xff\xff\xff"),
    # v7: a forgotten topic claiming 2**31-1 partitions
    (decode_fetch_request, 7, struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x00\x00\x00\x00"
     + b"\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff" + b"\x00" * 8),
    # v12: compact forgotten-partitions count 2**32-2, then a top-level tag claiming 2**32 bytes
    (decode_fetch_request, 12, struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x01\x02\x02t\xff\xff\xff\xff\x0f"),
    (decode_fetch_request, 12, struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x01\x01\x01\x01\x00\xff\xff\xff\xff\x0f"),
    # responses: records length 2**31-1 (v4), compact records length 2**32-2 (v12)
    (decode_fetch_response, 4, struct.pack(">ii", 0, 1) + b"\x00\x01t" + struct.pack(">iihqqii", 1, 0, 0, 0, 0, -1, 0x7FFFFFFF)),
    (decode_fetch_response, 12, struct.pack(">ihi", 0, 0, 0) + b"\x02\x02t\x02" + struct.pack(">ihqqq", 0, 0, 0, 0, 0)
     + b"\x00" + struct.pack(">i", -1) + b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize("decoder, version, data", HUGE_CLAIMS)
def test_claimed_lengths_are_checked_before_allocating(decoder, version: int, data: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(WireDecodeError):
            decoder(memoryview(bytearray(data)), version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


# --------------------------------------------------------------------------------------------
# Fetch v0-3 (old consumers): kafka-python 3 and aiokafka's Struct classes (kio has no v0-3)
# --------------------------------------------------------------------------------------------


def aiokafka_fetch_request(case: dict, version: int) -> bytes:
    from aiokafka.protocol import fetch

    cls = getattr(fetch, f"FetchRequest_v{version}")
    topics = [(name, [(p[0], p[2], p[5]) for p in parts]) for name, _, parts in case["topics"]]
    if version >= 3:
        request = cls(case["replica_id"], case["max_wait_ms"], case["min_bytes"], case["max_bytes"], topics)
    else:
        request = cls(case["replica_id"], case["max_wait_ms"], case["min_bytes"], topics)
    return request.encode()


def expected_old_request(case: dict, version: int) -> FetchRequestData:
    """What v0-3 carry: no isolation level, session, rack or tagged fields; MaxBytes from v3."""
    return FetchRequestData(
        replica_id=case["replica_id"], replica_epoch=-1, max_wait_ms=case["max_wait_ms"],
        min_bytes=case["min_bytes"], max_bytes=case["max_bytes"] if version >= 3 else 0x7FFFFFFF,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[
            FetchTopicRequest(name, None, [FetchPartitionRequest(p[0], -1, p[2], -1, -1, p[5]) for p in parts])
            for name, _, parts in case["topics"]
        ],
    )


@pytest.mark.parametrize("case_name", REQUEST_CASES)
@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_old_request_oracles_agree_and_we_decode_them(version: int, case_name: str) -> None:
    case = REQUEST_CASES[case_name]
    encoded = kafka_python_fetch_request(case, version)
    assert aiokafka_fetch_request(case, version) == encoded

    decoded = decode_fetch_request(memoryview(bytearray(encoded)), version)

    assert decoded == expected_old_request(case, version)
    assert decode_fetch_request(encoded, version) == decoded


def aiokafka_fetch_response(case: dict, version: int) -> bytes:
    from aiokafka.protocol import fetch

    cls = getattr(fetch, f"FetchResponse_v{version}")
    topics = [
        (t.name, [(p.index, p.error_code, p.high_watermark, record_bytes(p.records)) for p in t.partitions])
        for t in case["topics"]
    ]
    response = cls(topics) if version == 0 else cls(case["throttle_time_ms"], topics)
    return response.encode()


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_old_response_bytes_match_kafka_python_and_aiokafka(version: int, log_file) -> None:
    case = response_case(log_file)
    try:
        expected = kafka_python_fetch_response(case, version)
        assert aiokafka_fetch_response(case, version) == expected

        chunks = encode(case, version)

        assert record_bytes(chunks) == expected
        records = all_record_chunks(case)
        passed = [c for c in chunks if any(c is r for r in records)]
        assert len(passed) == len(records) and all(a is b for a, b in zip(passed, records))
    finally:
        close_chunks(all_record_chunks(case))


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_old_empty_response_matches(version: int) -> None:
    expected = kafka_python_fetch_response(EMPTY_RESPONSE, version)
    assert aiokafka_fetch_response(EMPTY_RESPONSE, version) == expected
    assert encode(EMPTY_RESPONSE, version) == [expected]


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_old_response_decodes_back(version: int, log_file) -> None:
    case = response_case(log_file)
    try:
        encoded = kafka_python_fetch_response(case, version)
        ours = record_bytes(encode(case, version))
        expected = [
            FetchTopicResult(t.name, None, [
                FetchPartitionResult(p.index, p.error_code, p.high_watermark,
                                     records=[record_bytes(p.records)] if p.records else [],
                                     records_size=len(record_bytes(p.records)))
                for p in t.partitions
            ])
            for t in case["topics"]
        ]
    finally:
        close_chunks(all_record_chunks(case))
    for data in (encoded, ours):
        throttle, error, session, topics = decode_fetch_response(memoryview(bytearray(data)), version)
        assert (throttle, error, session) == ((10 if version else 0), 0, 0)
        assert with_bytes_records(topics) == expected


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_old_records_size_must_match_the_chunks(version: int) -> None:
    partition = FetchPartitionResult(0, records=[b"abc", b"de"], records_size=4)
    with pytest.raises(ValueError):
        encode_fetch_response([FetchTopicResult("t", None, [partition])], version=version)
