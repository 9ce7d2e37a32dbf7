"""Up-conversion of legacy message sets (magic 0 and 1, Produce v0-v2) to one RecordBatch v2.

Kafka 3.x with message format 3.0 stores only magic 2, converting what old producers send
(LogValidator). Old clients are rare and this is their path alone, so decoding each record here
is fine; magic-2 data never comes through this module. Decoding and building use kafka-python's
record classes (legacy CRC32, gzip/snappy/lz4 framings).
"""

from __future__ import annotations

import struct

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import MAGIC_OFFSET

NO_TIMESTAMP = -1


def is_legacy(records: memoryview) -> bool:
    return len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] in (0, 1)


def upconvert(records: memoryview) -> memoryview:
    """One uncompressed-or-same-codec v2 batch holding every record of a v0/v1 message set.

    Raises KafkaError(CORRUPT_MESSAGE) for a bad CRC (the wrapper's, or, as Kafka's
    LogValidator checks them, each inner message's of a compressed wrapper) or framing,
    INVALID_RECORD when mixed magics or no records are found, or when a compressed wrapper
    inflates past the validator's limit.
    """
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

    _check_inflated_sizes(records)
    try:
        source = MemoryRecords(bytes(records))
        entries = []
        codec = 0
        while (batch := source.next_batch()) is not None:
            if batch.magic not in (0, 1):
                raise KafkaError(ErrorCode.INVALID_RECORD, "a message set mixes magic 2 with legacy magic 0/1 messages")
            if not batch.validate_crc():
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "legacy message CRC does not match its contents")
            codec = batch.compression_type or codec
            for record in batch:
                if batch.compression_type and not record.validate_crc():
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                     f"legacy message at offset {record.offset} inside a compressed message set: "
                                     "its CRC does not match its contents")
                timestamp = record.timestamp if batch.magic == 1 else NO_TIMESTAMP
                entries.append((timestamp, record.key, record.value))
    except KafkaError:
        raise
    except Exception as exc:  # kafka-python raises CorruptRecordError, struct.error, ...
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"unreadable legacy message set: {exc}") from exc
    if not entries:
        raise KafkaError(ErrorCode.INVALID_RECORD, "the message set holds no complete message")
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 31,
    )
    for offset, (timestamp, key, value) in enumerate(entries):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=[])
    return memoryview(bytearray(builder.build()))


_MESSAGE_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


def _check_inflated_sizes(records: memoryview) -> None:
    """Before kafka-python inflates the compressed wrappers of a legacy message set (with no
    bound), inflate each with the validator's bound: a bomb is refused as for a v2 batch.
    Magic-0 lz4 (Kafka 0.8-0.9's broken frame checksum) is left to kafka-python."""
    from kafkacompat.wire.validation import MAX_DECOMPRESSED_BYTES, DecompressedTooLarge, decompress_bounded

    position, total, budget = 0, len(records), MAX_DECOMPRESSED_BYTES
    while total - position >= _MESSAGE_HEAD.size:
        _, size, _, magic, attributes = _MESSAGE_HEAD.unpack_from(records, position)
        end = position + 12 + size
        codec = attributes & 0x07
        if size < 0 or end > total:
            return  # a torn tail: kafka-python stops there, as Kafka does
        if codec in (1, 2) or (codec == 3 and magic == 1):
            value = _legacy_value(records, position + _MESSAGE_HEAD.size + (8 if magic == 1 else 0), end)
            if value is not None:
                try:
                    budget -= len(decompress_bounded(codec, value, budget))
                except DecompressedTooLarge:
                    raise KafkaError(ErrorCode.INVALID_RECORD, "a compressed legacy message set decompresses to "
                                     f"more than {MAX_DECOMPRESSED_BYTES} bytes") from None
                except Exception:  # noqa: BLE001 - unreadable: kafka-python reports it below
                    return
        position = end


def _legacy_value(records: memoryview, position: int, end: int) -> memoryview | None:
    """The value of the legacy message whose key length is at ``position``."""
    if position + 4 > end:
        return None
    (key_size,) = struct.unpack_from(">i", records, position)
    position += 4 + max(key_size, 0)
    if position + 4 > end:
        return None
    (value_size,) = struct.unpack_from(">i", records, position)
    position += 4
    if value_size < 0 or position + value_size > end:
        return None
    return records[position:position + value_size]
