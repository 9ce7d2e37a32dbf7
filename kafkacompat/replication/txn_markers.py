"""Transaction markers on the partition leader (Kafka's handleWriteTxnMarkersRequest and the
COORDINATOR-origin append): a COMMIT or ABORT control batch appended to each named partition as
its leader, checked against the producer state first (ProducerAppendInfo's marker checks), then
replicated like any acks=-1 append. Answers per partition with Kafka's error codes."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.records import TxnMarker, new_marker_batch, read_header

if TYPE_CHECKING:
    from kafkacompat.replication.partition import Partition
    from kafkacompat.services import TopicLookup

log = logging.getLogger("kafkacompat.transactions")


def append_marker(partition: "Partition", producer_id: int, producer_epoch: int, marker: TxnMarker,
                  transaction_version: int) -> int:
    """Append the marker to ``partition`` as its leader; returns its offset or raises KafkaError."""
    partition.check_leader()
    partition.log.producer_state.check_marker(producer_id, producer_epoch, marker.coordinator_epoch,
                                              transaction_version)
    partition.check_enough_replicas()  # written with acks=-1, as Kafka's coordinator append
    batch = new_marker_batch(producer_id, producer_epoch, marker, int(time.time() * 1000))
    records = memoryview(batch)
    try:
        info = partition.append(records, [read_header(records)])
    except OSError as error:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"could not write the marker to {partition}: {error}") from error
    return info.first_offset


async def write_markers(partitions: "dict[tuple[str, int], Partition]", topics: "TopicLookup",
                        producer_id: int, producer_epoch: int, marker: TxnMarker,
                        targets: list[tuple[str, int]], transaction_version: int,
                        timeout_ms: int) -> dict[tuple[str, int], int]:
    """One WriteTxnMarkers entry: the error code per partition (0: written and replicated)."""
    results: dict[tuple[str, int], int] = {}
    written: list[tuple[tuple[str, int], Partition, int, int]] = []
    for key in targets:
        partition = partitions.get(key)
        if partition is None or topics.get(key[0]) is None:
            results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # Kafka's getMagic finds no local log
            continue
        try:
            offset = append_marker(partition, producer_id, producer_epoch, marker, transaction_version)
        except KafkaError as error:
            log.info("%s marker for producer %d (epoch %d, coordinator epoch %d) refused on %s-%d: %s",
                     _kind(marker), producer_id, producer_epoch, marker.coordinator_epoch, key[0], key[1], error)
            results[key] = error.code
            continue
        written.append((key, partition, offset + 1, partition.leader_epoch))
    if written:
        async with trio.open_nursery() as nursery:
            for key, partition, required, epoch in written:
                nursery.start_soon(_await_replicated, results, key, partition, required, epoch, timeout_ms)
    return {key: results[key] for key in targets}


async def _await_replicated(results: dict[tuple[str, int], int], key: tuple[str, int], partition: "Partition",
                            required_offset: int, leader_epoch: int, timeout_ms: int) -> None:
    results[key] = await partition.wait_replicated(required_offset, leader_epoch, timeout_ms)


def _kind(marker: TxnMarker) -> str:
    return "COMMIT" if marker.committed else "ABORT"
