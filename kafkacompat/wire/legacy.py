"""Up-conversion of legacy message sets (magic 0 and 1, Produce v0-v2) to one RecordBatch v2.

Kafka 3.x with message format 3.0 stores only magic 2, converting what old producers send
(LogValidator). Old clients are rare and this is their path alone, so decoding each message here
is fine; magic-2 data never comes through this module. A legacy message is offset (int64), size
(int32), CRC32 (of what follows it), magic, attributes (low 3 bits: codec), a timestamp (magic 1
only), key and value (int32-length bytes); a compressed message's value is a whole inner
message set.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator

from kafkacompat.wire import validation
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import MAGIC_OFFSET, new_batch

NO_TIMESTAMP = -1
LZ4 = 3
_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LOG_APPEND_TIME = 0x08
_ENTRY_OVERHEAD = 12  # offset + size


def is_legacy(records: memoryview) -> bool:
    return len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] in (0, 1)


def upconvert(records: memoryview) -> memoryview:
    """One uncompressed-or-same-codec v2 batch holding every record of a v0/v1 message set.

    Raises KafkaError(CORRUPT_MESSAGE) for a bad CRC (each inner message's too, as Kafka's
    LogValidator checks them) or framing, INVALID_RECORD when mixed magics or no records are
    found, or when the compressed messages inflate past the validator's bound (as v2 batches).
    """
    entries: list[tuple[int, bytes | None, bytes | None]] = []
    codec = 0
    budget = validation.MAX_DECOMPRESSED_BYTES
    try:
        for magic, attributes, timestamp, key, value in _messages(bytes(records)):
            if attributes & 0x07:
                codec = attributes & 0x07
                inner = _decompress(codec, magic, value or b"", budget)
                budget -= len(inner)
                for _, _, inner_timestamp, inner_key, inner_value in _messages(inner):
                    shared = magic == 1 and attributes & _LOG_APPEND_TIME
                    entries.append((timestamp if shared else inner_timestamp, inner_key, inner_value))
            else:
                entries.append((timestamp, key, value))
    except KafkaError:
        raise
    except Exception as exc:  # struct.error, a codec's own errors...
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"unreadable legacy message set: {exc}") from exc
    if not entries:
        raise KafkaError(ErrorCode.INVALID_RECORD, "the message set holds no complete message")
    return memoryview(new_batch(entries, codec))


def _messages(data: bytes) -> Iterator[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, attributes, timestamp, key, value) of each whole message; a partial last one (a
    fetch-size cut) is ignored, as Kafka's readers do."""
    pos = 0
    while pos + _ENTRY_OVERHEAD <= len(data):
        _, size, crc, magic, attributes = _ENTRY.unpack_from(data, pos)
        end = pos + _ENTRY_OVERHEAD + size
        if end > len(data):
            return
        if magic not in (0, 1):
            raise KafkaError(ErrorCode.INVALID_RECORD, "a message set mixes magic 2 with legacy magic 0/1 messages")
        if zlib.crc32(data[pos + 16:end]) != crc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "legacy message CRC does not match its contents")
        field = pos + 18
        timestamp = NO_TIMESTAMP
        if magic == 1:
            timestamp = _TIMESTAMP.unpack_from(data, field)[0]
            field += 8
        key, field = _bytes(data, field, end)
        value, field = _bytes(data, field, end)
        yield magic, attributes, timestamp, key, value
        pos = end


def _bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    (size,) = _LENGTH.unpack_from(data, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > end:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a legacy message's key or value runs past the message")
    return data[pos:pos + size], pos + size


def _decompress(codec: int, magic: int, payload: bytes, limit: int) -> bytes:
    if codec == LZ4 and magic == 0:
        payload = _fixed_lz4_header(payload)
    try:
        return bytes(validation.decompress_bounded(codec, payload, limit))
    except validation.DecompressedTooLarge:
        raise KafkaError(ErrorCode.INVALID_RECORD, "a compressed legacy message set decompresses to more than "
                         f"{validation.MAX_DECOMPRESSED_BYTES} bytes") from None


def _fixed_lz4_header(frame: bytes) -> bytes:
    """Kafka 0.8-0.9 wrote magic-0 LZ4 frames with a wrong header checksum (computed over the
    frame's magic number too); put the right one (xxh32 of the descriptor, second byte) back."""
    import xxhash

    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)  # FLG, BD, optional content size
    checksum = (xxhash.xxh32(frame[4:descriptor_end]).intdigest() >> 8) & 0xFF
    return frame[:descriptor_end] + bytes((checksum,)) + frame[descriptor_end + 1:]
