"""Fetch: whole batches from the log as file regions (sent with sendfile), long-poll woken by new
data, Kafka's byte limits (KIP-74: the first batch goes out even when it is larger).

Fetch sessions (KIP-227, kafkacompat/fetch_sessions.py): a v7+ fetch opens, continues or closes
a session; an incremental one reads every partition of its session and answers only those with
something new.

Fetch v0-3 (old consumers) read the same batches, then get them down-converted to the legacy
message format their version can carry (magic 0 for v0-1, magic 1 for v2-3; wire/downconvert.py),
as Kafka's KafkaApis.maybeConvertFetchedData does, lazily (LazyDownConversionRecords): the
response carries a StreamedChunk per partition that converts a piece at a time while it is sent.
That path is separate: v4+ never converts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from kafkacompat.handlers.offset_for_leader_epoch import check_current_leader_epoch
from kafkacompat.handlers.registry import RequestContext, handles
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.chunks import FileRegion, StreamedChunk, close_chunks
from kafkacompat.wire.downconvert import (
    OVERFLOW_MARKER,
    down_converted_size,
    fetch_magic,
    stored_pieces,
    stream_down_converted,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.fetch import (
    FetchPartitionResult,
    FetchRequestData,
    FetchTopicResult,
    NodeEndpoint,
    decode_fetch_request,
    encode_fetch_response,
)

log = logging.getLogger("kafkacompat.fetch")

FETCH = 1
READ_COMMITTED = 1
TOPIC_IDS_SINCE = 13
ZSTD_SINCE_FETCH_VERSION = 10  # KIP-110: older fetchers cannot read zstd
MAGIC_2_SINCE_FETCH_VERSION = 4  # older fetchers read legacy message sets (magic 0/1) only
HARD_LIMIT_UNTIL_FETCH_VERSION = 2  # v0-2: partition_max_bytes is a hard limit (before KIP-74)
THROTTLED_BY_CLIENT_SINCE = 8  # KIP-219: from Fetch v8 the client honours throttle_time_ms
STORAGE_ERROR_SINCE_FETCH_VERSION = 6  # older clients get NOT_LEADER_OR_FOLLOWER instead


@dataclass(slots=True)
class FetchResponseData:
    topics: list[FetchTopicResult]
    error_code: int = 0
    session_id: int = 0
    node_endpoints: list[NodeEndpoint] | None = None
    throttle_time_ms: int = 0


def _decode(version: int, body: memoryview) -> FetchRequestData:
    return decode_fetch_request(body, version)


def _encode(response: FetchResponseData, version: int):
    return encode_fetch_response(
        response.topics, version=version, error_code=response.error_code, session_id=response.session_id,
        node_endpoints=response.node_endpoints, throttle_time_ms=response.throttle_time_ms,
    )


def _error_response(request: FetchRequestData, code: int) -> FetchResponseData:
    """An injected fault's answer (faults.py): ``code`` at the top and in every partition."""
    return FetchResponseData([
        FetchTopicResult(topic.name, topic.topic_id, [FetchPartitionResult(p.partition, code)
                                                      for p in topic.partitions])
        for topic in request.topics
    ], code)


def _count_bytes_out(ctx: RequestContext, request: FetchRequestData, topics: list[FetchTopicResult]) -> None:
    """Kafka's BytesOutPerSec counts consumers' fetches (a follower's are replication bytes)."""
    metrics = ctx.services.metrics
    if metrics.enabled and request.replica_id < 0:
        for topic in topics:
            size = sum(result.records_size for result in topic.partitions)
            if size:
                metrics.fetched(topic.name or _topic_name(ctx)(topic.topic_id) or str(topic.topic_id), size)


def _record_throttled_replication(ctx: RequestContext, request: FetchRequestData,
                                  topics: list[FetchTopicResult]) -> None:
    """Kafka's sizeOfThrottledPartitions: a follower's answer counts against the leader's
    replication throttle with the bytes of its throttled partitions (those of in-sync replicas too)."""
    if request.replica_id < 0:
        return
    quota = ctx.replicas.leader_quota
    size = 0
    for topic in topics:
        sizes = [(result.index, result.records_size) for result in topic.partitions if result.records_size]
        if not sizes:
            continue
        info = ctx.metadata.topic(topic.name) if topic.name else ctx.metadata.topic_by_id(topic.topic_id)
        size += sum(records for index, records in sizes if quota.is_throttled(info, index))
    if size:
        quota.record(size, trio.current_time())


@handles(FETCH, 0, 18, decode=_decode, encode=_encode, error_response=_error_response)
async def handle_fetch(request: FetchRequestData, ctx: RequestContext) -> FetchResponseData:
    if ctx.version < MAGIC_2_SINCE_FETCH_VERSION:
        return await _handle_old_fetch(request, ctx)
    session = ctx.fetch_sessions.new_context(ctx.version, request, _topic_name(ctx))
    if session.error:
        return FetchResponseData([], session.error)
    request.topics = session.topics
    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    while True:
        topics, total_bytes, has_error, partitions = _read_all(request, ctx)
        if _answer_now(request, total_bytes, has_error, partitions, deadline):
            throttle_ms = _over_quota(request, ctx, total_bytes)
            if throttle_ms:
                _close_records(topics)
                error, session_id = session.throttled()
                await ctx.throttle_for_quota(throttle_ms, THROTTLED_BY_CLIENT_SINCE)
                return FetchResponseData([], error, session_id, throttle_time_ms=throttle_ms)
            _count_bytes_out(ctx, request, topics)
            _record_throttled_replication(ctx, request, topics)
            error, session_id, topics = session.respond(topics)
            return FetchResponseData(topics, error, session_id, node_endpoints=_leader_endpoints(ctx, topics))
        await _wait_for_data(partitions, deadline)
        _close_records(topics)


def _topic_name(ctx: RequestContext):
    def name(topic_id) -> str | None:
        topic = ctx.metadata.topic_by_id(topic_id)
        return topic.name if topic is not None else None
    return name


async def _handle_old_fetch(request: FetchRequestData, ctx: RequestContext) -> FetchResponseData:
    """Fetch v0-3: the v4+ reads, down-converted; min_bytes counts the converted bytes, so a
    consumer parked on what converts to nothing (a transaction marker) waits for data."""
    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    while True:
        topics, total_bytes, has_error, partitions = await _read_all_old(request, ctx)
        if _answer_now(request, total_bytes, has_error, partitions, deadline):
            throttle_ms = _over_quota(request, ctx, total_bytes)
            if throttle_ms:
                _close_records(topics)
                await ctx.throttle_for_quota(throttle_ms, THROTTLED_BY_CLIENT_SINCE)
                return FetchResponseData([], throttle_time_ms=throttle_ms)
            _count_bytes_out(ctx, request, topics)
            return FetchResponseData(topics)
        _close_records(topics)
        await _wait_for_data(partitions, deadline)


def _over_quota(request: FetchRequestData, ctx: RequestContext, total_bytes: int) -> int:
    """A consumer's consumer_byte_rate quota (followers are not throttled by it): the throttle
    time when these bytes take it over, and then they are not counted, as the fetch is answered
    empty (Kafka's handleFetchRequest)."""
    if request.replica_id >= 0:
        return 0
    throttle_ms = ctx.record_fetch_bytes(total_bytes)
    if throttle_ms > 0:
        ctx.unrecord_fetch_bytes(total_bytes)
    return throttle_ms


def _denied(ctx: RequestContext, request: FetchRequestData, name: str | None) -> bool:
    """Kafka's checks: a follower's fetch needs CLUSTER_ACTION on the cluster, a consumer's READ
    on each topic (TOPIC_AUTHORIZATION_FAILED for every partition of a topic it may not read)."""
    if ctx.services.authorizer is None or name is None:
        return False
    if request.replica_id >= 0:
        return not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    return not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)


def _close_records(topics: list[FetchTopicResult]) -> None:
    for topic in topics:
        for result in topic.partitions:
            close_chunks(result.records)


async def _read_all_old(request: FetchRequestData, ctx: RequestContext):
    """Kafka's limits before v4: v0-2 have no response limit and partition_max_bytes is hard (a
    first batch larger than it is not sent: an overflow marker tells the client); v3 has max_bytes
    with KIP-74's first batch. Both count the stored (unconverted) bytes, as Kafka's
    ReplicaManager does; the converted records are cut to that size or the first batch's."""
    hard_limit = ctx.version <= HARD_LIMIT_UNTIL_FETCH_VERSION
    remaining = request.max_bytes
    read_bytes = 0
    waiting_on = []
    topics = []
    to_convert = []
    for wanted in request.topics:
        topic = ctx.metadata.topic(wanted.name)
        results = []
        if _denied(ctx, request, wanted.name):
            topics.append(FetchTopicResult(wanted.name, None, [
                FetchPartitionResult(p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in wanted.partitions]))
            continue
        for wanted_partition in wanted.partitions:
            # v0-2 read a first batch larger than the limit only to answer with the overflow
            # marker; a limit of 0 reads nothing (Kafka's LogSegment.read).
            first = wanted_partition.partition_max_bytes > 0 if hard_limit else read_bytes == 0
            result, partition = _read_partition(
                ctx, request, topic, wanted_partition, remaining, min_one_batch=first, use_ids=False,
            )
            read_bytes += result.records_size
            remaining -= result.records_size
            if result.records:
                to_convert.append((results, len(results), wanted_partition))
            results.append(result)
            if partition is not None:
                waiting_on.append(partition)
        topics.append(FetchTopicResult(wanted.name, None, results))
    try:
        for results, index, wanted_partition in to_convert:
            results[index] = await _down_convert(results[index], fetch_magic(ctx.version), wanted_partition, hard_limit)
    except BaseException:  # cancelled while converting: nothing is sent, the descriptors go now
        _close_records(topics)
        raise
    converted_bytes = sum(result.records_size for topic in topics for result in topic.partitions)
    has_error = any(result.error_code != 0 for topic in topics for result in topic.partitions)
    return topics, converted_bytes, has_error, waiting_on


async def _down_convert(result: FetchPartitionResult, to_magic: int, wanted, hard_limit: bool) -> FetchPartitionResult:
    """Replace the read's file regions with a StreamedChunk of their converted messages (or an
    error). Only the size is computed here (the first batch converted and counted, in a worker
    thread: a large compressed batch takes a while, and the event loop keeps its turns); the
    conversion itself happens while the response is sent."""
    regions, size = result.records, result.records_size
    if hard_limit and size > wanted.partition_max_bytes:
        # Only a first batch larger than the limit gets here (it was read for this check).
        close_chunks(regions)
        result.records, result.records_size = [OVERFLOW_MARKER], len(OVERFLOW_MARKER)
        return result
    try:
        converted_size = await trio.to_thread.run_sync(
            down_converted_size, _stored_pieces(regions), to_magic, wanted.fetch_offset, size)
    except KafkaError as exc:
        close_chunks(regions)
        log.debug("Down-conversion of partition %d at %d failed: %s", result.index, wanted.fetch_offset, exc)
        return FetchPartitionResult(result.index, exc.code)
    except OSError as exc:  # the log file could not be read: KAFKA_STORAGE_ERROR, as these versions see it
        close_chunks(regions)
        log.warning("Reading partition %d at %d for down-conversion failed: %s", result.index, wanted.fetch_offset, exc)
        return FetchPartitionResult(result.index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    except BaseException:
        close_chunks(regions)
        raise
    if not converted_size:
        close_chunks(regions)
        result.records, result.records_size = [], 0
        return result
    pieces = stream_down_converted(_stored_pieces(regions), to_magic, wanted.fetch_offset, converted_size)
    result.records, result.records_size = [StreamedChunk(converted_size, pieces, regions)], converted_size
    return result


def _answer_now(request: FetchRequestData, total_bytes: int, has_error: bool, partitions: list,
                deadline: float) -> bool:
    """Kafka's ReplicaManager.fetchMessages answers at once when min_bytes are there, a read
    failed, the wait is over, or the fetch asks for no partition at all (``partitions`` is empty
    only then: every partition that was read without an error is in it) - nothing could wake it."""
    return (total_bytes >= request.min_bytes or has_error or not partitions
            or trio.current_time() >= deadline)


def _stored_pieces(regions: list[FileRegion]):
    for region in regions:
        yield from stored_pieces(region.read, region.length)


async def _wait_for_data(partitions: list, deadline: float) -> None:
    arrived = trio.Event()
    for partition in partitions:
        partition.add_waiter(arrived)
    try:
        with trio.move_on_at(deadline):
            await arrived.wait()
    finally:
        for partition in partitions:
            partition.remove_waiter(arrived)


def _read_all(request: FetchRequestData, ctx: RequestContext):
    use_ids = ctx.version >= TOPIC_IDS_SINCE
    remaining = request.max_bytes
    total = 0
    has_error = False
    waiting_on = []
    topics = []
    for wanted in request.topics:
        topic = ctx.metadata.topic_by_id(wanted.topic_id) if use_ids else ctx.metadata.topic(wanted.name)
        results = []
        name = (topic.name if topic is not None else None) if use_ids else wanted.name
        if _denied(ctx, request, name):
            has_error = True
            topics.append(FetchTopicResult(wanted.name if not use_ids else "", wanted.topic_id, [
                FetchPartitionResult(p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in wanted.partitions]))
            continue
        for wanted_partition in wanted.partitions:
            result, partition = _read_partition(
                ctx, request, topic, wanted_partition, remaining, min_one_batch=total == 0, use_ids=use_ids
            )
            results.append(result)
            total += result.records_size
            remaining -= result.records_size
            has_error = has_error or result.error_code != 0 or result.diverging_epoch is not None
            if partition is not None:
                waiting_on.append(partition)
        topics.append(FetchTopicResult(wanted.name if not use_ids else "", wanted.topic_id, results))
    return topics, total, has_error, waiting_on


def _read_partition(ctx, request, topic, wanted, remaining: int, *, min_one_batch: bool, use_ids: bool):
    result = FetchPartitionResult(wanted.partition)
    partition = ctx.replicas.partition(topic.name, wanted.partition) if topic is not None else None
    if partition is None:
        if topic is None and use_ids:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
        elif topic is not None and 0 <= wanted.partition < topic.partitions:
            result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # Kafka: it exists, hosted elsewhere
            state = ctx.metadata.partition_state(topic.name, wanted.partition)
            if ctx.version >= 12 and state is not None and state.leader >= 0:
                result.current_leader = (state.leader, state.leader_epoch)
        else:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return result, None
    replica_id = request.replica_id
    if ctx.version < ZSTD_SINCE_FETCH_VERSION:
        refused = _refused_for_old_fetcher(ctx, topic, replica_id)
        if refused:
            result.error_code = refused
            return result, None
    try:
        check_current_leader_epoch(partition, wanted.current_leader_epoch)
        partition.check_leader()
        if wanted.last_fetched_epoch >= 0 and _diverging(partition, wanted, result):
            return result, None
        partition.check_fetch_offset(wanted.fetch_offset)
        if replica_id >= 0:
            expand = partition.update_follower_fetch(replica_id, wanted.fetch_offset, wanted.log_start_offset)
            if expand is not None:
                ctx.replicas.propose_isr(partition, expand)
        limit = max(0, min(wanted.partition_max_bytes, remaining))
        read = None
        aborted = None
        if replica_id >= 0 and ctx.replicas.should_leader_throttle(partition, topic, replica_id):
            limit, min_one_batch = 0, False   # answered without data: the leader's replication throttle
        if limit > 0 or min_one_batch:
            if replica_id >= 0:
                read = partition.read_for_replica(wanted.fetch_offset, limit, min_one_batch=min_one_batch)
            elif request.isolation_level == READ_COMMITTED:
                read, aborted = partition.read_committed(wanted.fetch_offset, limit, min_one_batch=min_one_batch)
            else:
                read = partition.read(wanted.fetch_offset, limit, min_one_batch=min_one_batch)
    except KafkaError as exc:
        result.error_code = exc.code
        if exc.code == ErrorCode.KAFKA_STORAGE_ERROR and ctx.version < STORAGE_ERROR_SINCE_FETCH_VERSION:
            # Kafka's maybeDownConvertStorageError: such clients do not know the code and would
            # not retry; this one makes them refresh their metadata.
            result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and ctx.version >= 12 and partition.leader_id >= 0:
            result.current_leader = (partition.leader_id, partition.leader_epoch)
        elif exc.code == ErrorCode.OFFSET_OUT_OF_RANGE and replica_id >= 0:
            # Our followers truncate to the high watermark or restart at the log start.
            result.high_watermark = partition.high_watermark
            result.log_start_offset = partition.log_start_offset
        log.debug("Fetch of %s at %d for %s failed: %s", partition, wanted.fetch_offset, ctx.client_id, exc)
        return result, None
    result.high_watermark = partition.high_watermark
    result.last_stable_offset = partition.last_stable_offset
    result.log_start_offset = partition.log_start_offset
    if request.isolation_level == READ_COMMITTED:
        result.aborted_transactions = aborted or []
    if read is not None:
        result.records = read.chunks
        result.records_size = read.size
    return result, partition


def _refused_for_old_fetcher(ctx: RequestContext, topic, replica_id: int) -> int:
    """Kafka's maybeConvertFetchedData for Fetch < v10, before any data is looked at: a topic
    configured to store zstd gets UNSUPPORTED_COMPRESSION_TYPE, whatever its batches hold (for
    followers too); below v4, where the records would need down-conversion, a consumer (not a
    follower) gets UNSUPPORTED_VERSION when the topic's message.downconversion.enable is false."""
    config = ctx.config.effective_topic_config(topic.configs)
    if config.get("compression.type", "producer") == "zstd":
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if (ctx.version < MAGIC_2_SINCE_FETCH_VERSION and replica_id < 0
            and str(config.get("message.downconversion.enable", "true")).strip().lower() == "false"):
        return ErrorCode.UNSUPPORTED_VERSION
    return ErrorCode.NONE


def _diverging(partition, wanted, result: FetchPartitionResult) -> bool:
    """Fetch v12+ (KIP-595 style): the fetcher's last fetched epoch ends earlier on this leader
    than where it fetches from, so its log has diverged; tell it where that epoch ends here."""
    epoch, end_offset = partition.end_offset_for_epoch(wanted.last_fetched_epoch)
    if epoch < wanted.last_fetched_epoch or end_offset < wanted.fetch_offset:
        result.diverging_epoch = (epoch, end_offset)
        result.high_watermark = partition.high_watermark
        result.last_stable_offset = partition.last_stable_offset
        result.log_start_offset = partition.log_start_offset
        return True
    return False


def _leader_endpoints(ctx: RequestContext, topics: list[FetchTopicResult]) -> list[NodeEndpoint] | None:
    """KIP-951: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers."""
    if ctx.version < 16:
        return None
    leaders = {p.current_leader[0] for t in topics for p in t.partitions if p.current_leader is not None}
    return ctx.replicas.node_endpoints(leaders, ctx.listener_name) if leaders else None
