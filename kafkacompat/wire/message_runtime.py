"""The few primitives the generated message codecs (kafkacompat/wire/messages/) call.

Fixed-width fields are packed inline by the generated code; what is here is the variable-length
part (varints, strings, bytes, arrays of primitives, tagged-field sections) and the errors.
Readers take ``(data, pos)`` and return ``(value, new_pos)``; ``data`` is any buffer
(bytes, bytearray, memoryview).
"""

from __future__ import annotations

import struct
import uuid

ZERO_UUID = uuid.UUID(int=0)
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class DecodeError(ValueError):
    """The request body does not parse at the version its header names."""


class UnsupportedFieldError(ValueError):
    """A message holds a non-default value in a field its version cannot carry (and the field is
    not ``ignorable`` in Kafka's spec): Kafka's writers refuse it rather than drop it silently."""


def unsupported(message: str, field: str, versions: str) -> UnsupportedFieldError:
    return UnsupportedFieldError(f"{message} has a non-default {field}, which only versions {versions} carry")


def null_error(field: str) -> DecodeError:
    return DecodeError(f"non-nullable field {field} was serialized as null")


def truncated(field: str) -> DecodeError:
    return DecodeError(f"field {field} runs past the end of the message")


def write_uvarint(buf: bytearray, value: int) -> None:
    while value >= 0x80:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def read_uvarint(data, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise DecodeError("varint is longer than 5 bytes")


def read_length(data, pos: int, compact: bool) -> tuple[int, int]:
    """A string/bytes/array length: -1 is null; compact lengths are stored plus one."""
    if compact:
        value, pos = read_uvarint(data, pos)
        return value - 1, pos
    return _INT32.unpack_from(data, pos)[0], pos + 4


def read_string(data, pos: int, compact: bool, nullable: bool, field: str) -> tuple[str | None, int]:
    if compact:
        size, pos = read_uvarint(data, pos)
        size -= 1
    else:
        size = _INT16.unpack_from(data, pos)[0]
        pos += 2
    if size < 0:
        if size == -1 and nullable:
            return None, pos
        raise null_error(field) if size == -1 else DecodeError(f"string field {field} had invalid length {size}")
    end = pos + size
    if end > len(data):
        raise truncated(field)
    return str(data[pos:end], "utf-8"), end


def read_bytes(data, pos: int, compact: bool, nullable: bool, field: str, copy: bool = True):
    size, pos = read_length(data, pos, compact)
    if size < 0:
        if size == -1 and nullable:
            return None, pos
        raise null_error(field) if size == -1 else DecodeError(f"bytes field {field} had invalid length {size}")
    end = pos + size
    if end > len(data):
        raise truncated(field)
    return (bytes(data[pos:end]) if copy else data[pos:end]), end


def read_array_length(data, pos: int, compact: bool, nullable: bool, field: str) -> tuple[int, int]:
    """The element count; -1 for a null array (only where nullable). A count larger than the
    bytes left is refused before anything is allocated, as Kafka's readers do."""
    size, pos = read_length(data, pos, compact)
    if size < 0:
        if size == -1 and nullable:
            return -1, pos
        raise null_error(field) if size == -1 else DecodeError(f"array field {field} had invalid length {size}")
    if size > len(data) - pos:
        raise DecodeError(f"array field {field} claims {size} elements but only {len(data) - pos} bytes remain")
    return size, pos


def read_fixed_array(data, pos: int, code: str, width: int, count: int, field: str) -> tuple[list, int]:
    end = pos + width * count
    if end > len(data):
        raise truncated(field)
    return list(struct.unpack_from(f">{count}{code}", data, pos)), end


def read_uuid(data, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(data):
        raise truncated("uuid")
    return uuid.UUID(bytes=bytes(data[pos:end])), end


def skip_tagged_field(data, pos: int) -> int:
    size, pos = read_uvarint(data, pos)
    end = pos + size
    if end > len(data):
        raise truncated("tagged field")
    return end


def write_string(buf: bytearray, value: str | None, compact: bool) -> None:
    """Used for string array elements; single string fields are written inline."""
    if value is None:
        buf += b"\x00" if compact else b"\xff\xff"
        return
    encoded = value.encode()
    if compact:
        write_uvarint(buf, len(encoded) + 1)
    else:
        buf += _INT16.pack(len(encoded))
    buf += encoded


def write_length(buf: bytearray, size: int, compact: bool) -> None:
    """A bytes/array length (size -1 for null)."""
    if compact:
        write_uvarint(buf, size + 1)
    else:
        buf += _INT32.pack(size)


def write_tagged(buf: bytearray, fields: list[tuple[int, bytearray]]) -> None:
    write_uvarint(buf, len(fields))
    for tag, payload in fields:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(payload))
        buf += payload


def uuid_bytes(value: uuid.UUID | None) -> bytes:
    return value.bytes if value is not None else b"\x00" * 16
