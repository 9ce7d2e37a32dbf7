"""For the transaction tests: raw transactional traffic (transactional batches from a producer id
of InitProducerId, and the WriteTxnMarkers requests a transaction coordinator sends, encoded with
kafkacompat's generated codecs: no client sends them), and readers that take a partition up to an
END record with confluent-kafka, kafka-python and aiokafka at either isolation level."""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from dataclasses import dataclass

from clients import RawConnection, frame, init_producer_id, request_header

WRITE_TXN_MARKERS = 27
END = b"end"
TIMEOUT = 30.0
_correlation_ids = itertools.count(1_000_000)


def records(producer_id: int, epoch: int, sequence: int, values: list[bytes], *, transactional: bool = True) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                        batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


def produce(conn: RawConnection, topic: str, partition: int, batch: bytes, *,
            transactional_id: str | None = "txn", version: int = 9) -> tuple[int, int]:
    """(error code, base offset) of one batch produced with acks=-1."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=partition, records=batch)])])
    response = conn.call(request, ProduceResponse, version)
    result = response.responses[0].partition_responses[0]
    return result.error_code, result.base_offset


@dataclass
class Producer:
    """A transactional producer's view on the wire: its id, epoch and next sequence per partition."""

    conn: RawConnection
    producer_id: int
    epoch: int = 0
    transactional_id: str = "txn"

    def __post_init__(self) -> None:
        self.sequences: dict[tuple[str, int], int] = {}

    @classmethod
    def start(cls, conn: RawConnection, transactional_id: str = "txn") -> "Producer":
        response = init_producer_id(conn, 4)
        assert response.error_code == 0, response
        return cls(conn, response.producer_id, response.producer_epoch, transactional_id)

    def send(self, topic: str, partition: int, *values: bytes, transactional: bool = True) -> int:
        """Produce the values in one batch; returns its base offset (asserting no error)."""
        error, offset = self.try_send(topic, partition, *values, transactional=transactional)
        assert error == 0, f"produce to {topic}-{partition} failed with error {error}"
        return offset

    def try_send(self, topic: str, partition: int, *values: bytes, transactional: bool = True) -> tuple[int, int]:
        key = (topic, partition)
        sequence = self.sequences.get(key, 0)
        batch = records(self.producer_id, self.epoch, sequence, list(values), transactional=transactional)
        error, offset = produce(self.conn, topic, partition, batch, transactional_id=self.transactional_id)
        if error == 0:
            self.sequences[key] = sequence + len(values)
        return error, offset

    def end(self, committed: bool, partitions: dict[str, list[int]], *, coordinator_epoch: int = 0,
            epoch: int | None = None, transaction_version: int | None = None) -> dict[tuple[str, int], int]:
        return write_markers(self.conn, self.producer_id, self.epoch if epoch is None else epoch, committed,
                             partitions, coordinator_epoch=coordinator_epoch, transaction_version=transaction_version)


def write_markers(conn: RawConnection, producer_id: int, epoch: int, committed: bool,
                  partitions: dict[str, list[int]], *, coordinator_epoch: int = 0,
                  transaction_version: int | None = None) -> dict[tuple[str, int], int]:
    """One WriteTxnMarkers request with one marker (v1, or v2 with a transaction version); the
    error code per partition."""
    version = 1 if transaction_version is None else 2
    from kafkacompat.wire.messages.write_txn_markers_request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )
    from kafkacompat.wire.messages.write_txn_markers_response import WriteTxnMarkersResponse

    request = WriteTxnMarkersRequest([WritableTxnMarker(
        producer_id, epoch, committed, [WritableTxnMarkerTopic(t, list(p)) for t, p in partitions.items()],
        coordinator_epoch, transaction_version or 0)])
    correlation_id = next(_correlation_ids)
    conn.send(frame(request_header(WRITE_TXN_MARKERS, version, correlation_id, flexible=True)
                    + bytes(request.encode(version))))
    payload = conn.recv_frame()
    assert struct.unpack_from(">i", payload)[0] == correlation_id
    response = WriteTxnMarkersResponse.decode(payload[5:], version)  # response header v1: tagged fields
    [marker] = response.markers
    assert marker.producer_id == producer_id
    return {(t.name, p.partition_index): p.error_code for t in marker.topics for p in t.partitions}


def confluent_values(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    """Every value up to the END record, in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txnlog", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while END not in got and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.2):
                assert message.error() is None, message.error()
                got.append(message.value())
    finally:
        consumer.close()
    return got


def kafka_python_values(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while END not in got and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in batch)
    finally:
        consumer.close()
    return got


def aiokafka_values(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    async def run() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    isolation_level=isolation, auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + TIMEOUT
            while END not in got and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in batch)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


READERS = {"confluent-kafka": confluent_values, "kafka-python": kafka_python_values, "aiokafka": aiokafka_values}


def latest(bootstrap: str, topic: str, partition: int = 0, *, committed: bool) -> int:
    """ListOffsets latest through confluent-kafka's AdminClient, read_committed: the LSO."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result(timeout=TIMEOUT).offset


def send_end(conn: RawConnection, topic: str, partition: int = 0) -> int:
    error, offset = produce(conn, topic, partition, records(-1, -1, -1, [END], transactional=False),
                            transactional_id=None)
    assert error == 0
    return offset
