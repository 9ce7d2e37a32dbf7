"""OTLP's MetricsData (opentelemetry/proto/metrics/v1/metrics.proto), what KIP-714 clients push,
read into flat data points with the sans-IO protobuf reader (wire/protobuf.py).

Each gauge and sum data point becomes one MetricPoint (its as_double or as_int); a histogram,
exponential histogram or summary point becomes two, ``<name>.count`` and ``<name>.sum``.
Attributes are kept as strings (string, bool, int and double values; arrays, key-value lists and
bytes are dropped). ``max_points`` bounds what one payload may make the broker keep: the points
past it are counted in ``MetricsData.dropped``, not kept. A payload that does not decode raises
ProtobufError.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkacompat.wire.protobuf import (
    ProtobufError, Value, as_bool, as_double, as_fixed64, as_int64, as_message,
    as_sfixed64, as_string, fields,
)

GAUGE, SUM, HISTOGRAM, EXPONENTIAL_HISTOGRAM, SUMMARY = "gauge", "sum", "histogram", "exponential_histogram", "summary"
# Metric's data oneof: field number -> kind
_METRIC_DATA = {5: GAUGE, 7: SUM, 9: HISTOGRAM, 10: EXPONENTIAL_HISTOGRAM, 11: SUMMARY}
# the attributes' field number in each kind's data point message
_POINT_ATTRIBUTES = {GAUGE: 7, SUM: 7, HISTOGRAM: 9, EXPONENTIAL_HISTOGRAM: 1, SUMMARY: 7}
DEFAULT_MAX_POINTS = 10_000

Attributes = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MetricPoint:
    name: str
    kind: str
    value: float
    attributes: Attributes = ()
    time_unix_nano: int = 0


@dataclass(slots=True)
class MetricsData:
    resource: dict[str, str] = field(default_factory=dict)  # the first resource's attributes
    points: list[MetricPoint] = field(default_factory=list)
    dropped: int = 0


def decode_metrics_data(data: bytes | memoryview, max_points: int = DEFAULT_MAX_POINTS) -> MetricsData:
    out = MetricsData()
    for number, wire_type, value in fields(data):
        if number == 1:
            _resource_metrics(as_message(value, wire_type, "ResourceMetrics"), out, max_points)
    return out


def _resource_metrics(data: memoryview, out: MetricsData, max_points: int) -> None:
    for number, wire_type, value in fields(data):
        if number == 1:
            attributes = _attributes_of(as_message(value, wire_type, "Resource"), 1)
            for key, text in attributes:
                out.resource.setdefault(key, text)
        elif number == 2:
            _scope_metrics(as_message(value, wire_type, "ScopeMetrics"), out, max_points)


def _scope_metrics(data: memoryview, out: MetricsData, max_points: int) -> None:
    for number, wire_type, value in fields(data):
        if number == 2:
            _metric(as_message(value, wire_type, "Metric"), out, max_points)


def _metric(data: memoryview, out: MetricsData, max_points: int) -> None:
    name, kind, body = "", None, None
    for number, wire_type, value in fields(data):
        if number == 1:
            name = as_string(value, wire_type, "Metric.name")
        elif number in _METRIC_DATA:
            kind, body = _METRIC_DATA[number], as_message(value, wire_type, "Metric data")
    if kind is None or body is None:
        return  # a metric without data (or of a kind newer than this reader): nothing to keep
    if not name:
        raise ProtobufError("a metric without a name")
    for number, wire_type, value in fields(body):
        if number == 1:
            for point in _points(name, kind, as_message(value, wire_type, "data point")):
                if len(out.points) < max_points:
                    out.points.append(point)
                else:
                    out.dropped += 1


def _points(name: str, kind: str, data: memoryview) -> list[MetricPoint]:
    attributes_field = _POINT_ATTRIBUTES[kind]
    attributes: list[tuple[str, str]] = []
    number_value: float | None = None
    count, total, time_unix_nano = 0, 0.0, 0
    for number, wire_type, value in fields(data):
        if number == attributes_field:
            pair = _key_value(as_message(value, wire_type, "KeyValue"))
            if pair is not None:
                attributes.append(pair)
        elif number == 3:
            time_unix_nano = as_fixed64(value, wire_type, "time_unix_nano")
        elif kind in (GAUGE, SUM):
            if number == 4:
                number_value = as_double(value, wire_type, "as_double")
            elif number == 6:
                number_value = float(as_sfixed64(value, wire_type, "as_int"))
        elif number == 4:
            count = as_fixed64(value, wire_type, "count")
        elif number == 5:
            total = as_double(value, wire_type, "sum")
    labels = tuple(attributes)
    if kind in (GAUGE, SUM):
        return [] if number_value is None else [MetricPoint(name, kind, number_value, labels, time_unix_nano)]
    return [MetricPoint(f"{name}.count", kind, float(count), labels, time_unix_nano),
            MetricPoint(f"{name}.sum", kind, total, labels, time_unix_nano)]


def _attributes_of(data: memoryview, field_number: int) -> list[tuple[str, str]]:
    pairs = []
    for number, wire_type, value in fields(data):
        if number == field_number:
            pair = _key_value(as_message(value, wire_type, "KeyValue"))
            if pair is not None:
                pairs.append(pair)
    return pairs


def _key_value(data: memoryview) -> tuple[str, str] | None:
    key, text = "", None
    for number, wire_type, value in fields(data):
        if number == 1:
            key = as_string(value, wire_type, "KeyValue.key")
        elif number == 2:
            text = _any_value(as_message(value, wire_type, "AnyValue"))
    return (key, text) if key and text is not None else None


def _any_value(data: memoryview) -> str | None:
    text = None
    for number, wire_type, value in fields(data):
        text = _scalar(number, wire_type, value)
    return text


def _scalar(number: int, wire_type: int, value: Value) -> str | None:
    if number == 1:
        return as_string(value, wire_type, "string_value")
    if number == 2:
        return "true" if as_bool(value, wire_type, "bool_value") else "false"
    if number == 3:
        return str(as_int64(value, wire_type, "int_value"))
    if number == 4:
        return repr(as_double(value, wire_type, "double_value"))
    return None  # arrays, key-value lists, bytes
