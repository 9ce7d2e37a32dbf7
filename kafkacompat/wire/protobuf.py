"""A small sans-IO reader of the protobuf wire format (what OTLP's MetricsData is written in).

``fields(data)`` yields each (field number, wire type, value) of one message: an int for a varint,
the 8 or 4 raw bytes of a fixed64 / fixed32 (``as_double``, ``as_fixed64``... read them), a
memoryview of a length-delimited field (a nested message, a string, bytes or a packed array).
Malformed input (a truncated field, a varint over 10 bytes, the deprecated groups, field number 0)
raises ProtobufError; nothing is read past the data given.
"""

from __future__ import annotations

import struct
from typing import Iterator

VARINT, FIXED64, LENGTH_DELIMITED, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_SFIXED64 = struct.Struct("<q")
_FIXED_WIDTHS = {FIXED64: 8, FIXED32: 4}

Value = int | memoryview


class ProtobufError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise ProtobufError("truncated varint")
        if shift >= 70:
            raise ProtobufError("varint longer than 10 bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


def fields(data: bytes | memoryview) -> Iterator[tuple[int, int, Value]]:
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = read_varint(view, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire_type == VARINT:
            value, pos = read_varint(view, pos)
            yield number, wire_type, value
        elif wire_type == LENGTH_DELIMITED:
            size, pos = read_varint(view, pos)
            if pos + size > end:
                raise ProtobufError(f"field {number} of {size} bytes runs past the message")
            yield number, wire_type, view[pos:pos + size]
            pos += size
        elif wire_type in _FIXED_WIDTHS:
            width = _FIXED_WIDTHS[wire_type]
            if pos + width > end:
                raise ProtobufError(f"truncated fixed-width field {number}")
            yield number, wire_type, view[pos:pos + width]
            pos += width
        else:
            raise ProtobufError(f"unsupported wire type {wire_type} (field {number})")


def _expect(value: Value, wire_type: int, wanted: int, what: str) -> None:
    if wire_type != wanted:
        raise ProtobufError(f"{what} has wire type {wire_type}, expected {wanted}")


def as_message(value: Value, wire_type: int, what: str = "message") -> memoryview:
    _expect(value, wire_type, LENGTH_DELIMITED, what)
    return value  # type: ignore[return-value]


def as_string(value: Value, wire_type: int, what: str = "string") -> str:
    try:
        return bytes(as_message(value, wire_type, what)).decode()
    except UnicodeDecodeError:
        raise ProtobufError(f"{what} is not UTF-8") from None


def as_double(value: Value, wire_type: int, what: str = "double") -> float:
    _expect(value, wire_type, FIXED64, what)
    return _DOUBLE.unpack(value)[0]  # type: ignore[arg-type]


def as_fixed64(value: Value, wire_type: int, what: str = "fixed64") -> int:
    _expect(value, wire_type, FIXED64, what)
    return _FIXED64.unpack(value)[0]  # type: ignore[arg-type]


def as_sfixed64(value: Value, wire_type: int, what: str = "sfixed64") -> int:
    _expect(value, wire_type, FIXED64, what)
    return _SFIXED64.unpack(value)[0]  # type: ignore[arg-type]


def as_int64(value: Value, wire_type: int, what: str = "int64") -> int:
    """An int64 / uint64 varint as a signed 64-bit number (two's complement, as protobuf writes it)."""
    _expect(value, wire_type, VARINT, what)
    number: int = value  # type: ignore[assignment]
    return number - (1 << 64) if number >= 1 << 63 else number


def as_bool(value: Value, wire_type: int, what: str = "bool") -> bool:
    _expect(value, wire_type, VARINT, what)
    return bool(value)
