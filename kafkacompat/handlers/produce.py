"""Produce: validate each batch header and CRC, then its records as Kafka's LogValidator
(wire/validation.py: one pass over the bytes, in C when built), check idempotent producers' epoch
and sequence (log/producer_state.py), assign offsets in place, append. A transactional batch
that would start a transaction on a partition is first verified with the transaction
coordinator (KIP-890, ``_verify_transactions``). Batches are rebuilt only
in the rare cases Kafka's LogValidator rebuilds them (``_reworked``): a topic whose
compression.type is not the batch's codec, a topic with timestamp limits."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from kafkacompat.handlers.registry import RequestContext, handles
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.frame import ProtocolViolation
from kafkacompat.wire.produce import (
    NodeEndpoint,
    ProducePartitionData,
    ProducePartitionResult,
    ProduceRequestData,
    ProduceTopicResult,
    decode_produce_request,
    encode_produce_response,
)
from kafkacompat.wire.legacy import is_legacy, upconvert
from kafkacompat.wire.records import (
    ATTRIBUTES_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE,
    MAGIC_OFFSET,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    iter_batches,
    read_header,
    recompress_batch,
    require_record_keys,
    timestamp_errors,
    validate_batches,
    validate_produce_records,
)
from kafkacompat.wire.validation import RecordErrors, validate_client_batch

if TYPE_CHECKING:
    from kafkacompat.log.config import LogConfig
    from kafkacompat.log.partition_log import PartitionLog
    from kafkacompat.replication.partition import Partition

log = logging.getLogger("kafkacompat.produce")

PRODUCE = 0
VALID_ACKS = (0, 1, -1)


THROTTLED_BY_CLIENT_SINCE = 6  # KIP-219: from Produce v6 the client honours throttle_time_ms


@dataclass(slots=True)
class ProduceResponseData:
    topics: list[ProduceTopicResult]
    node_endpoints: list[NodeEndpoint] | None = None
    throttle_time_ms: int = 0


def _decode(version: int, body: memoryview) -> ProduceRequestData:
    return decode_produce_request(body, version)


def _encode(response: ProduceResponseData, version: int) -> bytes:
    return encode_produce_response(response.topics, response.throttle_time_ms, version, response.node_endpoints)


def _error_response(request: ProduceRequestData, code: int) -> ProduceResponseData | None:
    """An injected fault's answer (faults.py): ``code`` in every partition, nothing appended."""
    if request.acks == 0:
        return None
    return ProduceResponseData([
        ProduceTopicResult(topic.name, topic.topic_id, [ProducePartitionResult(data.index, code)
                                                        for data in topic.partitions])
        for topic in request.topics
    ])


@handles(PRODUCE, 0, 13, decode=_decode, encode=_encode, error_response=_error_response)
async def handle_produce(request: ProduceRequestData, ctx: RequestContext) -> ProduceResponseData | None:
    if (ctx.services.authorizer is not None and _has_transactional_batch(request)
            and not (request.transactional_id is not None
                     and ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id))):
        refused = _failed_everywhere(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if request.acks == 0:
            _close_if_failed(ctx, request, refused.topics)
        return refused
    waits: list[_Wait] = []
    flushes: list[_Flush] = []
    refusals = await _verify_transactions(ctx, request) if _has_transactional_batch(request) else {}
    results = [
        ProduceTopicResult(topic.name, topic.topic_id, [
            _produce_partition(ctx, request, topic.name, topic.topic_id, data, waits, flushes,
                               refusals.get((t, p)) if refusals else None)
            for p, data in enumerate(topic.partitions)
        ] if _may_write(ctx, topic) else [
            ProducePartitionResult(data.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for data in topic.partitions
        ])
        for t, topic in enumerate(request.topics)
    ]
    if request.acks == 0:
        _close_if_failed(ctx, request, results)
        await ctx.throttle_for_quota(ctx.record_produce_bytes(), THROTTLED_BY_CLIENT_SINCE)
        return None
    if flushes:
        await _await_flushes(flushes)
    if waits:
        await _await_replication(waits, request.timeout_ms)
    throttle_ms = ctx.record_produce_bytes()
    await ctx.throttle_for_quota(throttle_ms, THROTTLED_BY_CLIENT_SINCE)
    return ProduceResponseData(results, _leader_endpoints(ctx, results), throttle_ms)


def _may_write(ctx: RequestContext, topic) -> bool:
    """WRITE on the topic (Kafka's filterByAuthorized); a topic id this broker does not know is
    left to the partition's UNKNOWN_TOPIC_ID."""
    if ctx.services.authorizer is None:
        return True
    name = topic.name
    if not name and topic.topic_id is not None:
        known = ctx.metadata.topic_by_id(topic.topic_id)
        if known is None:
            return True
        name = known.name
    return ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)


def _failed_everywhere(request: ProduceRequestData, code: int) -> ProduceResponseData:
    return ProduceResponseData([
        ProduceTopicResult(topic.name, topic.topic_id,
                           [ProducePartitionResult(data.index, code) for data in topic.partitions])
        for topic in request.topics
    ])


@dataclass(slots=True)
class _Wait:
    """An acks=all write waiting for the high watermark to pass ``required_offset``."""
    partition: "Partition"
    result: ProducePartitionResult
    required_offset: int
    leader_epoch: int


async def _await_replication(waits: list[_Wait], timeout_ms: int) -> None:
    """Kafka's DelayedProduce: answer when the high watermark covers every write (or with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas meanwhile,
    NOT_LEADER_OR_FOLLOWER when leadership moved), or REQUEST_TIMED_OUT at the timeout."""
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    while True:
        pending = []
        for wait in waits:
            status = wait.partition.replication_status(wait.required_offset, wait.leader_epoch)
            if status is None:
                pending.append(wait)
            elif status:
                _fail(wait.result, status)
        if not pending:
            return
        if trio.current_time() >= deadline:
            for wait in pending:
                _fail(wait.result, ErrorCode.REQUEST_TIMED_OUT)
            return
        waits = pending
        event = trio.Event()
        for wait in waits:
            wait.partition.add_waiter(event)
        try:
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            for wait in waits:
                wait.partition.remove_waiter(event)


@dataclass(slots=True)
class _Flush:
    """An append that reached flush.messages: acknowledged once the fsync queued for it is done."""
    done: "trio.Event"
    log: "PartitionLog"
    required_offset: int
    result: ProducePartitionResult


async def _await_flushes(flushes: list[_Flush]) -> None:
    """Kafka fsyncs inside the append that reaches flush.messages, so its answer waits for the disk;
    the fsync runs in the log manager's worker thread here. A failed fsync answers
    KAFKA_STORAGE_ERROR (the producer retries; an idempotent one is deduplicated)."""
    for flush in flushes:
        await flush.done.wait()
        if flush.log.recovery_point < flush.required_offset:
            _fail(flush.result, ErrorCode.KAFKA_STORAGE_ERROR)


def _fail(result: ProducePartitionResult, code: int) -> None:
    result.error_code = code
    result.error_message = ErrorCode(code).name
    result.base_offset = -1
    result.log_append_time_ms = -1


def _leader_endpoints(ctx: RequestContext, results: list[ProduceTopicResult]) -> list[NodeEndpoint] | None:
    """KIP-951: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers (v10+)."""
    if ctx.version < 10:
        return None
    leaders = {p.current_leader[0] for t in results for p in t.partitions if p.current_leader is not None}
    return ctx.replicas.node_endpoints(leaders, ctx.listener_name) if leaders else None


def _produce_partition(ctx: RequestContext, request: ProduceRequestData, name: str, topic_id,
                       data: ProducePartitionData, waits: list[_Wait], flushes: list[_Flush],
                       refusal: KafkaError | None) -> ProducePartitionResult:
    result = ProducePartitionResult(data.index)
    partition = None
    try:
        if request.acks not in VALID_ACKS:
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={request.acks} is not one of 0, 1, -1")
        if refusal is not None:
            raise refusal
        partition = _find_partition(ctx, name, topic_id, data.index)
        partition.check_leader()
        records = data.records if data.records is not None else memoryview(bytearray())
        config = partition.log.config
        records, headers, has_keyless = _validated(records, ctx.version, config, partition.log)
        if config.compacts and has_keyless:  # compaction: every record needs a key
            require_record_keys(records, headers, partition.log.name)
        if config.reworks_batches:
            records, headers = _reworked(records, headers, config, partition.log.name)
        if request.acks == -1:
            partition.check_enough_replicas()
        if headers[0].producer_id >= 0:
            duplicate = partition.log.producer_state.check_client_batch(headers[0])
            if duplicate is not None:
                if request.acks == -1:
                    waits.append(_Wait(partition, result, duplicate.last_offset + 1, partition.leader_epoch))
                return _acknowledge_duplicate(partition, result, duplicate, name, ctx)
        info = partition.append(records, headers)
        ctx.services.metrics.produced(partition.topic, info.last_offset - info.first_offset + 1, len(records))
        if headers[0].is_transactional:
            partition.log.producer_state.verification_guards.pop(headers[0].producer_id, None)
    except KafkaError as exc:
        result.error_code = exc.code
        result.error_message = exc.message
        if isinstance(exc, RecordErrors):
            result.record_errors = exc.record_errors
        if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            result.current_leader = _current_leader(ctx, partition, name, topic_id, data.index)
        log.debug("Produce to %s-%d from %s failed: %s", name, data.index, ctx.client_id, exc)
        return result
    except OSError as exc:
        log.error("Writing to %s-%d failed: %s; the producer will retry", name, data.index, exc)
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return result
    result.base_offset = info.first_offset
    result.log_append_time_ms = info.log_append_time
    result.log_start_offset = info.log_start_offset
    if partition.log.pending_flush is not None:
        flushes.append(_Flush(partition.log.pending_flush, partition.log, info.last_offset + 1, result))
    if request.acks == -1:
        waits.append(_Wait(partition, result, info.last_offset + 1, partition.leader_epoch))
    return result


_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1  # attributes are a big-endian int16

# Coordinator answers a producer cannot act on, as Kafka's ReplicaManager translates them: retriable.
_VERIFICATION_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def _first_header(records: memoryview | None) -> BatchHeader | None:
    if records is None or len(records) < HEADER_SIZE or records[MAGIC_OFFSET] != CURRENT_MAGIC:
        return None
    return read_header(records)


def _has_transactional_batch(request: ProduceRequestData) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of some partition (one byte
    of its attributes looked at)."""
    for topic in request.topics:
        for data in topic.partitions:
            records = data.records
            if (records is not None and len(records) >= HEADER_SIZE and records[MAGIC_OFFSET] == CURRENT_MAGIC
                    and records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_FLAG):
                return True
    return False


async def _verify_transactions(ctx: RequestContext, request: ProduceRequestData) -> dict[tuple[int, int], KafkaError]:
    """The refusals, by (topic, partition) position in the request, of transactional batches:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED without a transactional id (Kafka's handleProduceRequest),
    and for a batch that would start a transaction on its partition, what the transaction
    coordinator answers when asked whether the partition is in the producer's transaction
    (KIP-890; Produce v12+ clients let it add the partition: transaction version 2; older ones
    only with transaction.partition.verification.enable, the default). A marker
    written while the question is out ends the transaction, so the batch is then refused
    (Kafka's verification guard)."""
    refusals: dict[tuple[int, int], KafkaError] = {}
    pending: list[tuple[tuple[int, int], "Partition", BatchHeader]] = []
    verify = ctx.version >= 12 or ctx.config.transaction_partition_verification_enable
    for t, topic in enumerate(request.topics):
        for p, data in enumerate(topic.partitions):
            header = _first_header(data.records)
            if header is None or not header.is_transactional:
                continue
            if request.transactional_id is None:
                refusals[(t, p)] = KafkaError(
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "a transactional record batch came in a produce request without a transactional id")
                continue
            try:
                partition = _find_partition(ctx, topic.name, topic.topic_id, data.index)
            except KafkaError:
                continue  # answered by the append path
            if verify and partition.is_leader and partition.log.producer_state.needs_verification(
                    header.producer_id, header.producer_epoch):
                pending.append(((t, p), partition, header))
    if pending:
        await _ask_coordinator(ctx, request.transactional_id or "", pending, refusals, request.timeout_ms)
    return refusals


async def _ask_coordinator(ctx: RequestContext, transactional_id: str,
                           pending: list[tuple[tuple[int, int], "Partition", BatchHeader]],
                           refusals: dict[tuple[int, int], KafkaError], timeout_ms: int) -> None:
    producers = {(header.producer_id, header.producer_epoch) for _, _, header in pending}
    if len(producers) > 1:
        for position, _, _ in pending:
            refusals[position] = KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                            "transactional records contained more than one producer id")
        return
    producer_id, producer_epoch = producers.pop()
    guards = [(position, partition, partition.log.producer_state.verification_guards.setdefault(producer_id, object()))
              for position, partition, _ in pending]
    asked = [(partition.topic, partition.index) for _, partition, _ in pending]
    answers = await _verifier_answers(ctx, transactional_id, producer_id, producer_epoch, asked, timeout_ms)
    for position, partition, guard in guards:
        code = _client_verification_error(answers.get((partition.topic, partition.index), ErrorCode.INVALID_TXN_STATE),
                                          ctx.version)
        state = partition.log.producer_state
        if code == ErrorCode.NONE and state.verification_guards.get(producer_id) is not guard \
                and state.needs_verification(producer_id, producer_epoch):
            code = ErrorCode.INVALID_TXN_STATE  # a marker ended the transaction while we asked
        if code == ErrorCode.INVALID_TXN_STATE:
            refusals[position] = KafkaError(code, f"Partition {partition} was not added to the transaction "
                                                  f"{transactional_id!r} of producer {producer_id}")
        elif code in _VERIFICATION_RETRIABLE:
            refusals[position] = KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the transaction. "
                                               f"Underlying error: {ErrorCode(code).name}")
        elif code != ErrorCode.NONE:
            refusals[position] = KafkaError(code, f"the transaction coordinator answered {ErrorCode(code).name} for "
                                                  f"{partition} in transaction {transactional_id!r}")


async def _verifier_answers(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
                            partitions: list[tuple[str, int]], timeout_ms: int) -> dict[tuple[str, int], int]:
    """The verifier's answers within the produce's timeout (REQUEST_TIMED_OUT after it); a
    verifier that fails is logged and answered as an unavailable coordinator (retriable)."""
    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        try:
            return await ctx.services.txn_verifier.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, ctx.version < 12)
        except Exception:
            log.exception("Verifying %s in transaction %r of producer %d failed; the producer will retry",
                          partitions, transactional_id, producer_id)
            return {partition: ErrorCode.COORDINATOR_NOT_AVAILABLE for partition in partitions}
    log.info("The transaction coordinator did not verify %s in transaction %r of producer %d within the "
             "produce's timeout of %d ms", partitions, transactional_id, producer_id, timeout_ms)
    return {partition: ErrorCode.REQUEST_TIMED_OUT for partition in partitions}


def _client_verification_error(code: int, version: int) -> int:
    """What the producer can handle (Kafka's AddPartitionsToTxnManager): INVALID_PRODUCER_EPOCH for
    PRODUCER_FENCED; TRANSACTION_ABORTABLE only from Produce v11, INVALID_TXN_STATE before."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE and version <= 10:
        return ErrorCode.INVALID_TXN_STATE
    return code


def _acknowledge_duplicate(partition, result: ProducePartitionResult, duplicate, name: str,
                           ctx: RequestContext) -> ProducePartitionResult:
    """A retry of one of the producer's last five batches: Kafka answers with the offset it was
    written at and writes nothing (idempotence). Kafka puts the batch's max timestamp in
    log_append_time even for CreateTime topics; this broker only does so for LogAppendTime
    topics (-1 otherwise, as for the original append). With replication, an acks=-1 answer must
    wait until the high watermark passes the duplicate's last offset, as Kafka's DelayedProduce
    does; on one node the high watermark is the log end offset, so the answer is immediate."""
    result.base_offset = duplicate.first_offset
    result.log_append_time_ms = duplicate.timestamp if partition.log.config.uses_log_append_time else -1
    result.log_start_offset = partition.log_start_offset
    log.debug("Produce to %s-%d from %s: duplicate batch (sequences %d-%d) acknowledged at offset %d",
              name, result.index, ctx.client_id, duplicate.first_seq, duplicate.last_seq, duplicate.first_offset)
    return result


def _validated(records: memoryview, version: int, config: "LogConfig",
               log_: "PartitionLog") -> tuple[memoryview, list[BatchHeader], bool]:
    """Kafka's checks per version, then every batch's records (validate_client_batch). v0-v2
    (old clients) may carry several batches, and legacy magic 0/1 message sets, which are
    converted to one v2 batch as Kafka 3.x stores them. Also returns whether a record has no
    key (which compacted topics refuse)."""
    if version >= 3:
        headers = validate_produce_records(records, version, config.max_message_bytes)
    else:
        if is_legacy(records):
            records = upconvert(records)
        headers = validate_batches(records, config.max_message_bytes)
    has_keyless = False
    for header in headers:
        keyless = validate_client_batch(records, header, log_.name,
                                        log_append_time_topic=config.uses_log_append_time)
        has_keyless = has_keyless or keyless >= 0
    if len(headers) > 1 and not config.reworks_batches:
        # The caller looks at the first batch only; the others of an old request are checked here.
        records, headers = _reworked(records, headers, config, log_.name)
    return records, headers, has_keyless


def _reworked(records: memoryview, headers: list[BatchHeader], config: "LogConfig",
              partition: str) -> tuple[memoryview, list[BatchHeader]]:
    """What Kafka's LogValidator changes in a client's batches, for the batches that need it:

    - a batch whose codec is not the topic's compression.type (unless "producer") is rebuilt with
      it ("uncompressed": none), at the topic's compression level; control batches sent
      uncompressed stay so (Kafka never compresses them);
    - on a CreateTime topic with message.timestamp.before.max.ms / after.max.ms (or the deprecated
      difference.max.ms), a batch with a record outside [now - before, now + after] is refused
      with INVALID_TIMESTAMP, naming the records (Produce v8+ record_errors).

    A rebuilt batch can grow: it must still fit max.message.bytes (MESSAGE_TOO_LARGE), as Kafka
    re-checks after recompression. (A CreateTime batch's maxTimestamp was already set to its
    records' largest by validate_client_batch, as LogValidator does for every batch.)"""
    target = config.target_codec
    pieces: list[bytes | memoryview] | None = None
    try:
        for index, header in enumerate(headers):
            if target >= 0 and header.compression != target and (header.compression or not header.is_control):
                rebuilt = recompress_batch(records, header, target, config.target_level)
                if pieces is None:
                    pieces = [records[h.position:h.position + h.size] for h in headers[:index]]
                pieces.append(rebuilt)
                continue
            if pieces is not None:
                pieces.append(records[header.position:header.position + header.size])
    except KafkaError:
        raise
    except Exception as error:  # noqa: BLE001 - a malformed or undecompressable batch
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch does not decode: {error}") from None
    if pieces is not None:
        records = memoryview(bytearray().join(pieces))
        headers = list(iter_batches(records))
        for header in headers:
            if header.size > config.max_message_bytes:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"Message batch size is {header.size} bytes in append to partition {partition} which exceeds "
                    f"the maximum configured size of {config.max_message_bytes}.",
                )
    if config.checks_timestamps:
        _check_timestamps(records, headers, config)
    return records, headers


def _check_timestamps(records: memoryview, headers: list[BatchHeader], config: "LogConfig") -> None:
    now = int(time.time() * 1000)
    low, high = now - config.timestamp_before_max_ms, now + config.timestamp_after_max_ms
    try:
        errors = [error for header in headers for error in timestamp_errors(records, header, low, high)]
    except Exception as error:  # noqa: BLE001 - a malformed or undecompressable batch
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch does not decode: {error}") from None
    if errors:
        raise RecordErrors(ErrorCode.INVALID_TIMESTAMP,
                           "One or more records have been rejected due to invalid timestamp", errors)


def _current_leader(ctx: RequestContext, partition, name: str, topic_id, index: int) -> tuple[int, int] | None:
    """KIP-951: where the leader is, from the partition hosted here or else the metadata."""
    if partition is not None:
        return (partition.leader_id, partition.leader_epoch) if partition.leader_id >= 0 else None
    topic = ctx.metadata.topic(name) if name else ctx.metadata.topic_by_id(topic_id)
    state = ctx.metadata.partition_state(topic.name, index) if topic is not None else None
    return (state.leader, state.leader_epoch) if state is not None and state.leader >= 0 else None


def _find_partition(ctx: RequestContext, name: str, topic_id, index: int):
    if name:
        topic = ctx.metadata.topic(name)
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    else:
        topic = ctx.metadata.topic_by_id(topic_id) if topic_id is not None else None
        unknown = ErrorCode.UNKNOWN_TOPIC_ID
    if topic is None:
        raise KafkaError(unknown, f"this broker has no topic {name or topic_id}")
    if topic.is_internal:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"clients cannot produce to internal topic {topic.name}")
    partition = ctx.replicas.partition(topic.name, index)
    if partition is None:
        if 0 <= index < topic.partitions:  # Kafka: the partition exists, this broker is not its leader
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"this broker is not a replica of {topic.name}-{index} (it moved or is moving)")
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name} has no partition {index}")
    return partition


def _close_if_failed(ctx: RequestContext, request: ProduceRequestData, results: list[ProduceTopicResult]) -> None:
    """With acks=0 there is no response to carry an error, so Kafka closes the connection."""
    for topic in results:
        for partition in topic.partitions:
            if partition.error_code:
                raise ProtocolViolation(
                    f"acks=0 produce to {topic.name or topic.topic_id}-{partition.index} failed with "
                    f"{ErrorCode(partition.error_code).name}: {partition.error_message}"
                )
