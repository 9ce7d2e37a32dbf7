"""WriteTxnMarkers (v1-2 as Kafka 4.x: v0 went in 4.0, v2 carries the transaction version): the
transaction coordinator asks this broker, as leader of the partitions, to end a producer's
transaction on them with a COMMIT or ABORT marker (replication/txn_markers.py). Markers of one
request are written concurrently; each partition is answered once its marker is replicated, or
with its error."""

from __future__ import annotations

import trio

from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

WRITE_TXN_MARKERS = 27


@handles(WRITE_TXN_MARKERS, 1, 2)
async def handle_write_txn_markers(request, ctx: RequestContext):
    results: list[dict[tuple[str, int], int]] = [{} for _ in request.markers]
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):   # from transaction coordinators only
        results = [{(topic.name, index): ErrorCode.CLUSTER_AUTHORIZATION_FAILED for topic in marker.topics
                    for index in topic.partition_indexes} for marker in request.markers]
    else:
        async with trio.open_nursery() as nursery:
            for slot, marker in enumerate(request.markers):
                nursery.start_soon(_write_one, ctx, marker, results, slot)
    result_class = response_class(WRITE_TXN_MARKERS).WritableTxnMarkerResult
    topic_class = result_class.WritableTxnMarkerTopicResult
    partition_class = topic_class.WritableTxnMarkerPartitionResult
    markers = [
        result_class(marker.producer_id, [
            topic_class(topic.name, [partition_class(index, errors[(topic.name, index)])
                                     for index in topic.partition_indexes])
            for topic in marker.topics
        ])
        for marker, errors in zip(request.markers, results)
    ]
    return response_for(WRITE_TXN_MARKERS, ctx, markers=markers)


async def _write_one(ctx: RequestContext, marker, results: list[dict[tuple[str, int], int]], slot: int) -> None:
    partitions = [(topic.name, index) for topic in marker.topics for index in topic.partition_indexes]
    results[slot] = await ctx.replicas.write_txn_markers(
        marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.transaction_result, partitions,
        transaction_version=marker.transaction_version,
    )
