"""Up-conversion of legacy message sets (magic 0 and 1, Produce v0-v2) to one RecordBatch v2.

Kafka 3.x with message format 3.0 stores only magic 2, converting what old producers send
(LogValidator). Old clients are rare and this is their path alone, so decoding each record here
is fine; magic-2 data never comes through this module. Decoding and building use kafka-python's
record classes (legacy CRC32, gzip/snappy/lz4 framings).
"""

from __future__ import annotations

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import MAGIC_OFFSET

NO_TIMESTAMP = -1


def is_legacy(records: memoryview) -> bool:
    return len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] in (0, 1)


def upconvert(records: memoryview) -> memoryview:
    """One uncompressed-or-same-codec v2 batch holding every record of a v0/v1 message set.

    Raises KafkaError(CORRUPT_MESSAGE) for a bad CRC or framing, INVALID_RECORD when mixed
    magics or no records are found.
    """
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

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
