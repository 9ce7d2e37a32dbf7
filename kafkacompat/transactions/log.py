"""__transaction_state records in Kafka's own formats (transaction-coordinator's TransactionLogKey
and TransactionLogValue), so a data dir written here reads in Kafka and the other way round.

    TransactionLogKey v0     transactionalId string
    TransactionLogValue v0   producerId int64, producerEpoch int16, transactionTimeoutMs int32,
                             transactionStatus int8, transactionPartitions nullable
                             [topic string, partitionIds [int32]], lastUpdateTimestampMs int64,
                             startTimestampMs int64
    TransactionLogValue v1   the same fields, flexible (compact strings and arrays, tagged fields),
                             with tagged previousProducerId (0), nextProducerId (1) and
                             clientTransactionVersion (2)

Each key and value is an int16 version followed by the struct. A null value is a tombstone (an
expired transactional id). Version 1 is written, as Kafka 4 does once transaction.version >= 1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafkacompat.groups.storage import _Reader, partition_for  # noqa: F401  (re-exported: same hash)
from kafkacompat.wire.message_runtime import write_uvarint

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 1
NO_PRODUCER_ID = -1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


def _uvarint(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _uvarint(len(data) + 1) + data


def key_bytes(transactional_id: str) -> bytes:
    data = transactional_id.encode("utf-8")
    return _I16.pack(KEY_VERSION) + _I16.pack(len(data)) + data


def decode_key(data: bytes | memoryview) -> str | None:
    """The transactional id of a key, None for a key version this broker does not know."""
    reader = _Reader(data)
    if reader.int16() != KEY_VERSION:
        return None
    return reader.string()


def value_bytes(value: TransactionLogValue) -> bytes:
    out = [_I16.pack(VALUE_VERSION), _I64.pack(value.producer_id), _I16.pack(value.producer_epoch),
           _I32.pack(value.timeout_ms), _I8.pack(value.status)]
    if value.partitions is None:
        out.append(_uvarint(0))
    else:
        out.append(_uvarint(len(value.partitions) + 1))
        for topic in sorted(value.partitions):
            ids = sorted(value.partitions[topic])
            out.append(_compact_string(topic))
            out.append(_uvarint(len(ids) + 1))
            out.extend(_I32.pack(index) for index in ids)
            out.append(b"\x00")  # the element's tagged fields
    out.append(_I64.pack(value.last_update_ms))
    out.append(_I64.pack(value.start_ms))
    tags = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tags.append((0, _I64.pack(value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tags.append((1, _I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((2, _I16.pack(value.client_transaction_version)))
    out.append(_uvarint(len(tags)))
    for tag, payload in tags:
        out.append(_uvarint(tag) + _uvarint(len(payload)) + payload)
    return b"".join(out)


def decode_value(data: bytes | memoryview) -> TransactionLogValue:
    reader = _Reader(data)
    version = reader.int16()
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = _I8.unpack_from(reader.data, reader.pos)[0]
    reader.pos += 1
    partitions: dict[str, list[int]] = {}
    for _ in range(max(reader.array_length(flexible), 0)):
        topic = reader.string(flexible) or ""
        ids = [reader.int32() for _ in range(max(reader.array_length(flexible), 0))]
        if flexible:
            reader.skip_tags()
        partitions.setdefault(topic, []).extend(ids)
    value = TransactionLogValue(producer_id, producer_epoch, timeout_ms, status, partitions,
                                reader.int64(), reader.int64())
    if flexible:
        for _ in range(reader.uvarint()):
            tag = reader.uvarint()
            size = reader.uvarint()
            end = reader.pos + size
            if tag == 0:
                value.previous_producer_id = reader.int64()
            elif tag == 1:
                value.next_producer_id = reader.int64()
            elif tag == 2:
                value.client_transaction_version = reader.int16()
            reader.pos = end
    return value
