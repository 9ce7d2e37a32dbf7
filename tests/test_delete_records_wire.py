"""DeleteRecords v0-2 through the codec adapter (kafka-python's schema classes) against an
independent encoder, kio: requests kio writes decode to the same fields, and the responses the
handler's codec writes are byte for byte what kio writes."""

from __future__ import annotations

import datetime
import importlib
import io

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from kafkacompat.wire import codec

DELETE_RECORDS = 21
TOPICS = [("orders", [(0, 5), (3, -1)]), ("a-much-longer-topic-name.with.dots", [(1, 1 << 40)])]
RESULTS = [("orders", [(0, 5, 0), (3, -1, 1)]), ("a-much-longer-topic-name.with.dots", [(1, -1, 44)])]


def kio_schema(version: int, kind: str):
    return importlib.import_module(f"kio.schema.delete_records.v{version}.{kind}")


def kio_encode(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_requests_written_by_kio_decode_to_the_same_fields(version):
    schema = kio_schema(version, "request")
    body = kio_encode(schema.DeleteRecordsRequest(
        topics=tuple(schema.DeleteRecordsTopic(name=name, partitions=tuple(
            schema.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in partitions))
            for name, partitions in TOPICS),
        timeout=datetime.timedelta(milliseconds=30_000),
    ))
    request = codec.decode_request(DELETE_RECORDS, version, body)
    assert request.timeout_ms == 30_000
    assert [(t.name, [(p.partition_index, p.offset) for p in t.partitions]) for t in request.topics] == TOPICS


@pytest.mark.parametrize("version", [0, 1, 2])
def test_responses_are_byte_for_byte_what_kio_writes(version):
    schema = kio_schema(version, "response")
    expected = kio_encode(schema.DeleteRecordsResponse(
        throttle_time=datetime.timedelta(milliseconds=0),
        topics=tuple(schema.DeleteRecordsTopicResult(name=name, partitions=tuple(
            schema.DeleteRecordsPartitionResult(partition_index=p, low_watermark=low, error_code=KioErrorCode(code))
            for p, low, code in partitions)) for name, partitions in RESULTS),
    ))
    topic_cls = codec.response_class(DELETE_RECORDS).DeleteRecordsTopicResult
    partition_cls = topic_cls.DeleteRecordsPartitionResult
    response = codec.new_response(DELETE_RECORDS, version, throttle_time_ms=0, topics=[
        topic_cls(name=name, partitions=[partition_cls(partition_index=p, low_watermark=low, error_code=code)
                                         for p, low, code in partitions])
        for name, partitions in RESULTS])
    assert codec.encode_response(response, version) == expected
