"""Writing OTLP MetricsData for tests (the broker only reads it: kafkacompat/wire/otlp.py)."""

from __future__ import annotations

import struct

from kafkacompat.wire.message_runtime import write_uvarint


def varint(value: int) -> bytes:
    """Protobuf's varint (a negative int64 as its two's complement, ten bytes)."""
    out = bytearray()
    write_uvarint(out, value & 0xFFFFFFFFFFFFFFFF)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def message(number: int, body: bytes) -> bytes:
    return tag(number, 2) + varint(len(body)) + body


def string(number: int, text: str) -> bytes:
    return message(number, text.encode())


def double(number: int, value: float) -> bytes:
    return tag(number, 1) + struct.pack("<d", value)


def fixed64(number: int, value: int) -> bytes:
    return tag(number, 1) + struct.pack("<Q", value)


def key_value(number: int, key: str, value: str) -> bytes:
    return message(number, string(1, key) + message(2, string(1, value)))


def gauge_metric(name: str, value: float, attributes: dict[str, str] | None = None, *, as_int: bool = False) -> bytes:
    point = b"".join(key_value(7, k, v) for k, v in (attributes or {}).items())
    point += fixed64(3, 1_700_000_000_000_000_000)
    point += (tag(6, 1) + struct.pack("<q", int(value))) if as_int else double(4, value)
    return string(1, name) + message(5, message(1, point))


def histogram_metric(name: str, count: int, total: float) -> bytes:
    point = fixed64(3, 1) + fixed64(4, count) + double(5, total)
    return string(1, name) + message(9, message(1, point) + tag(2, 0) + varint(1))


def metrics_data(*metrics: bytes, resource: dict[str, str] | None = None) -> bytes:
    resource_body = b"".join(key_value(1, k, v) for k, v in (resource or {}).items())
    scope = b"".join(message(2, metric) for metric in metrics)
    return message(1, message(1, resource_body) + message(2, scope))
