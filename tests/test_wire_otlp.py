"""The sans-IO protobuf reader and OTLP MetricsData decoding (wire/protobuf.py, wire/otlp.py)."""

from __future__ import annotations

import pytest

from kafkacompat.testing import otlp as w
from kafkacompat.wire.otlp import decode_metrics_data
from kafkacompat.wire.protobuf import LENGTH_DELIMITED, VARINT, ProtobufError, as_int64, fields


def test_fields_reads_varints_and_nested_messages():
    data = w.tag(1, 0) + w.varint(300) + w.string(2, "hé") + w.tag(3, 0) + w.varint(-2)
    decoded = list(fields(data))
    assert decoded[0] == (1, VARINT, 300)
    assert decoded[1][:2] == (2, LENGTH_DELIMITED) and bytes(decoded[1][2]).decode() == "hé"
    assert as_int64(decoded[2][2], VARINT) == -2


@pytest.mark.parametrize("data", [
    b"\x08",                      # a varint field without its value
    b"\x08" + b"\xff" * 11,       # a varint longer than 10 bytes
    b"\x12\x05abc",               # a length running past the message
    b"\x09\x00\x00",              # a truncated fixed64
    b"\x0b",                      # a (deprecated) group
    b"\x00\x01",                  # field number 0
])
def test_malformed_input_is_a_protobuf_error(data):
    with pytest.raises(ProtobufError):
        list(fields(data))


def test_metrics_data_gauges_sums_and_histograms():
    payload = w.metrics_data(
        w.gauge_metric("org.apache.kafka.producer.record.queue.time.avg", 1.5, {"topic": "orders"}),
        w.gauge_metric("org.apache.kafka.producer.connection.creation.total", 3, as_int=True),
        w.histogram_metric("org.apache.kafka.producer.latency", 4, 10.0),
        resource={"client_rack": "r1"},
    )
    decoded = decode_metrics_data(payload)
    assert decoded.resource == {"client_rack": "r1"}
    assert [(p.name, p.value, p.attributes) for p in decoded.points] == [
        ("org.apache.kafka.producer.record.queue.time.avg", 1.5, (("topic", "orders"),)),
        ("org.apache.kafka.producer.connection.creation.total", 3.0, ()),
        ("org.apache.kafka.producer.latency.count", 4.0, ()),
        ("org.apache.kafka.producer.latency.sum", 10.0, ()),
    ]


def test_points_past_the_bound_are_counted_not_kept():
    payload = w.metrics_data(*(w.gauge_metric(f"m{i}", i) for i in range(5)))
    decoded = decode_metrics_data(payload, max_points=2)
    assert [p.name for p in decoded.points] == ["m0", "m1"] and decoded.dropped == 3


def test_unknown_fields_are_skipped_and_wrong_wire_types_refused():
    unknown = w.tag(15, 0) + w.varint(7) + w.metrics_data(w.gauge_metric("m", 1))
    assert [p.name for p in decode_metrics_data(unknown).points] == ["m"]
    with pytest.raises(ProtobufError):
        decode_metrics_data(w.tag(1, 0) + w.varint(1))  # ResourceMetrics as a varint
    with pytest.raises(ProtobufError):
        decode_metrics_data(b"\xff\xff")


def test_empty_payload_has_no_points():
    assert decode_metrics_data(b"").points == []
