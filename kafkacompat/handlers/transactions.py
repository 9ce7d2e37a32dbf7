"""Transaction coordinator APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions, and the transactional side of FindCoordinator and InitProducerId. The work is
in kafkacompat.transactions.coordinator; these follow KafkaApis' handling (validation, which
error codes older versions get).

Versions are Kafka 4.2's, capped by the codecs this build has."""

from __future__ import annotations

import logging

from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.transactions.coordinator import TV0, TV2, TransactionCoordinator
from kafkacompat.transactions.log import TRANSACTION_STATE_TOPIC
from kafkacompat.wire.codec import response_class, valid_versions
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.transactions")

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


def _kafka_max(api_key: int, kafka_max: int) -> int:
    versions = valid_versions(api_key)
    return min(kafka_max, versions[1]) if versions else kafka_max


def coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.services.transactions


def fenced_error(error: int, version: int, first_fenced_version: int) -> int:
    """KIP-588: versions before ``first_fenced_version`` know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


# ---- FindCoordinator (key type 1) ------------------------------------------------------------


async def _create_state_topic(ctx: RequestContext) -> None:
    """__transaction_state, created on the first lookup of a transaction coordinator with
    transaction.state.log.replication.factor capped by the live brokers."""
    config = ctx.config
    txn = coordinator(ctx)
    replication_factor = max(1, min(config.transaction_state_log_replication_factor, len(ctx.metadata.brokers())))
    try:
        await ctx.admin.create_topic(TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
                                     replication_factor, txn.topic_configs(replication_factor))
    except KafkaError as exc:
        log.info("Could not create %s yet: %s (%s); FindCoordinator answers COORDINATOR_NOT_AVAILABLE",
                 TRANSACTION_STATE_TOPIC, exc.code.name, exc.message)
    except Exception:
        log.exception("Creating %s failed; FindCoordinator answers COORDINATOR_NOT_AVAILABLE", TRANSACTION_STATE_TOPIC)
    txn.on_topic_created()


async def find_transaction_coordinator(ctx: RequestContext, key: str) -> tuple[int, int, str, int]:
    """The coordinator of a transactional id leads its __transaction_state partition."""
    txn = coordinator(ctx)
    if not key:
        return ErrorCode.INVALID_REQUEST, -1, "", -1
    if txn.topic() is None:
        await _create_state_topic(ctx)
        if txn.topic() is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    state = ctx.metadata.partition_state(TRANSACTION_STATE_TOPIC, txn.partition_for(key))
    info = ctx.metadata.brokers().get(state.leader) if state is not None else None
    if info is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, info.broker_id, *info.address(ctx.listener_name)   # the listener the client uses


# ---- InitProducerId (transactional) ------------------------------------------------------------


async def init_transactional_producer(request, ctx: RequestContext) -> tuple[int, int, int]:
    expected = None
    if ctx.version >= 3 and request.producer_id != -1:
        expected = (request.producer_id, request.producer_epoch)
    result = await coordinator(ctx).init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                                     expected)
    return fenced_error(result.error, ctx.version, 4), result.producer_id, result.producer_epoch


# ---- AddPartitionsToTxn ----------------------------------------------------------------------


def _unknown_partitions(ctx: RequestContext, topics) -> set[tuple[str, int]]:
    unknown = set()
    for topic in topics:
        info = ctx.metadata.topic(topic.name)
        for index in topic.partitions:
            if info is None or not 0 <= index < info.partitions:
                unknown.add((topic.name, index))
    return unknown


def _may_write_transaction(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def _add_one(ctx: RequestContext, txn, version: int) -> dict[tuple[str, int], int]:
    """One transaction of the request: an error for each of its partitions."""
    wanted = {(topic.name, index) for topic in txn.topics for index in topic.partitions}
    if version < 4:   # from the client: WRITE on the transactional id and on each topic (Kafka's checks)
        if not _may_write_transaction(ctx, txn.transactional_id):
            return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = {topic.name for topic in txn.topics
                  if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic.name)}
        if denied:
            return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
                    for tp in wanted}
    if getattr(txn, "verify_only", False):
        return coordinator(ctx).verify_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
    unknown = _unknown_partitions(ctx, txn.topics)
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in wanted}
    # v5 from a partition leader: transaction version 2 adds partitions implicitly (KIP-890).
    transaction_version = TV2 if version >= 5 else TV0
    error = await coordinator(ctx).add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted,
                                                  transaction_version)
    return {tp: fenced_error(error, version, 2) for tp in wanted}


def _topic_results(errors: dict[tuple[str, int], int]):
    topic_cls = response_class(ADD_PARTITIONS_TO_TXN).AddPartitionsToTxnTopicResult
    partition_cls = topic_cls.AddPartitionsToTxnPartitionResult
    by_topic: dict[str, list] = {}
    for (topic, index), error in sorted(errors.items()):
        by_topic.setdefault(topic, []).append(partition_cls(partition_index=index, partition_error_code=error))
    return [topic_cls(name=name, results_by_partition=results) for name, results in by_topic.items()]


@handles(ADD_PARTITIONS_TO_TXN, 0, _kafka_max(ADD_PARTITIONS_TO_TXN, 5))
async def handle_add_partitions_to_txn(request, ctx: RequestContext):
    if ctx.version < 4:
        errors = await _add_one(ctx, _V3Transaction(request), ctx.version)
        return response_for(ADD_PARTITIONS_TO_TXN, ctx, throttle_time_ms=0,
                            results_by_topic_v3_and_below=_topic_results(errors))
    result_cls = response_class(ADD_PARTITIONS_TO_TXN).AddPartitionsToTxnResult
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):   # v4+: from partition leaders only
        return response_for(ADD_PARTITIONS_TO_TXN, ctx, throttle_time_ms=0,
                            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    results = []
    for txn in request.transactions:
        errors = await _add_one(ctx, txn, ctx.version)
        results.append(result_cls(transactional_id=txn.transactional_id, topic_results=_topic_results(errors)))
    return response_for(ADD_PARTITIONS_TO_TXN, ctx, throttle_time_ms=0, error_code=ErrorCode.NONE,
                        results_by_transaction=results)


class _V3Transaction:
    """A v0-3 request's single transaction, read like a v4+ entry."""

    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "topics")

    def __init__(self, request) -> None:
        self.transactional_id = request.v3_and_below_transactional_id
        self.producer_id = request.v3_and_below_producer_id
        self.producer_epoch = request.v3_and_below_producer_epoch
        self.topics = request.v3_and_below_topics


# ---- AddOffsetsToTxn / EndTxn --------------------------------------------------------------------


@handles(ADD_OFFSETS_TO_TXN, 0, _kafka_max(ADD_OFFSETS_TO_TXN, 4))
async def handle_add_offsets_to_txn(request, ctx: RequestContext):
    if not _may_write_transaction(ctx, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not request.group_id:
        error = ErrorCode.INVALID_GROUP_ID
    else:
        offsets = ctx.groups.offsets_topic()
        partitions = offsets.partitions if offsets is not None else ctx.config.offsets_topic_num_partitions
        error = await coordinator(ctx).add_offsets(request.transactional_id, request.producer_id,
                                                   request.producer_epoch, request.group_id, partitions)
    return response_for(ADD_OFFSETS_TO_TXN, ctx, throttle_time_ms=0, error_code=fenced_error(error, ctx.version, 2))


@handles(END_TXN, 0, _kafka_max(END_TXN, 5))
async def handle_end_txn(request, ctx: RequestContext):
    # EndTxn v5+ is sent by transaction version 2 clients: the answer carries the bumped epoch.
    transaction_version = TV2 if ctx.version >= 5 else TV0
    if not _may_write_transaction(ctx, request.transactional_id):
        return response_for(END_TXN, ctx, throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            producer_id=-1, producer_epoch=-1)
    error, producer_id, epoch = await coordinator(ctx).end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
        transaction_version)
    return response_for(END_TXN, ctx, throttle_time_ms=0, error_code=fenced_error(error, ctx.version, 2),
                        producer_id=producer_id, producer_epoch=epoch)


# ---- DescribeTransactions / ListTransactions -----------------------------------------------------


@handles(DESCRIBE_TRANSACTIONS, 0, _kafka_max(DESCRIBE_TRANSACTIONS, 0))
async def handle_describe_transactions(request, ctx: RequestContext):
    state_cls = response_class(DESCRIBE_TRANSACTIONS).TransactionState
    topic_cls = state_cls.TopicData
    states = []
    for tid in request.transactional_ids:
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            error, metadata = coordinator(ctx).describe(tid)
        else:
            error, metadata = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if metadata is None:
            states.append(state_cls(error_code=error, transactional_id=tid, transaction_state="",
                                    transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                    producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(metadata.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append(state_cls(
            error_code=ErrorCode.NONE, transactional_id=tid, transaction_state=metadata.state.kafka_name,
            transaction_timeout_ms=metadata.timeout_ms, transaction_start_time_ms=metadata.start_ms,
            producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
            topics=[topic_cls(topic=name, partitions=ids) for name, ids in by_topic.items()]))
    return response_for(DESCRIBE_TRANSACTIONS, ctx, throttle_time_ms=0, transaction_states=states)


@handles(LIST_TRANSACTIONS, 0, _kafka_max(LIST_TRANSACTIONS, 2))
async def handle_list_transactions(request, ctx: RequestContext):
    duration = request.duration_filter if ctx.version >= 1 else -1
    pattern = request.transactional_id_pattern if ctx.version >= 2 else None
    error, unknown, matches = coordinator(ctx).list_transactions(
        set(request.state_filters), set(request.producer_id_filters), duration, pattern)
    state_cls = response_class(LIST_TRANSACTIONS).TransactionState
    states = [state_cls(transactional_id=m.transactional_id, producer_id=m.producer_id,
                        transaction_state=m.state.kafka_name) for m in matches
              if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id,
                               log_denied=False)]
    return response_for(LIST_TRANSACTIONS, ctx, throttle_time_ms=0, error_code=error, unknown_state_filters=unknown,
                        transaction_states=states)



# ---- TxnOffsetCommit -----------------------------------------------------------------------------

TXN_OFFSET_COMMIT = 28


@handles(TXN_OFFSET_COMMIT, 0, _kafka_max(TXN_OFFSET_COMMIT, 5))
async def handle_txn_offset_commit(request, ctx: RequestContext):
    from kafkacompat.groups.coordinator import CommitPartition

    version = ctx.version
    shape = [(topic.name, [p.partition_index for p in topic.partitions]) for topic in request.topics]
    partitions = [CommitPartition(topic.name, p.partition_index, p.committed_offset,
                                  p.committed_leader_epoch if version >= 2 else -1, p.committed_metadata)
                  for topic in request.topics for p in topic.partitions]
    denied = {name for name, _ in shape if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)}
    if not _may_write_transaction(ctx, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        error = await _verify_offsets_partition(request, ctx)
    if error:
        errors = [error] * len(partitions)
    else:
        allowed = [p for p in partitions if p.topic not in denied]
        committed = iter(await ctx.groups.txn_commit_offsets(
            request.group_id, request.producer_id, request.producer_epoch,
            request.generation_id if version >= 3 else -1, (request.member_id or "") if version >= 3 else "",
            request.group_instance_id if version >= 3 else None, allowed) if allowed else [])
        errors = [ErrorCode.TOPIC_AUTHORIZATION_FAILED if p.topic in denied else next(committed) for p in partitions]
    errors = [fenced_error(e, version, 3) for e in errors]
    topic_cls = response_class(TXN_OFFSET_COMMIT).TxnOffsetCommitResponseTopic
    partition_cls = topic_cls.TxnOffsetCommitResponsePartition
    it = iter(errors)
    topics = [topic_cls(name=name, partitions=[partition_cls(partition_index=i, error_code=next(it)) for i in ids])
              for name, ids in shape]
    return response_for(TXN_OFFSET_COMMIT, ctx, throttle_time_ms=0, topics=topics)


async def _verify_offsets_partition(request, ctx: RequestContext) -> int:
    """The group's __consumer_offsets partition must be in the producer's transaction: verified
    with its coordinator (AddOffsetsToTxn added it), or added by v5 (transaction version 2)."""
    if not request.group_id:
        return ErrorCode.INVALID_GROUP_ID
    if not ctx.groups.is_coordinator_for(request.group_id):
        return ErrorCode.NOT_COORDINATOR
    partition = (OFFSETS_TOPIC, ctx.groups.partition_for(request.group_id))
    answers = await ctx.services.txn_verifier.add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch, [partition], ctx.version < 5)
    error = answers.get(partition, ErrorCode.INVALID_TXN_STATE)
    if error == ErrorCode.TRANSACTION_ABORTABLE and ctx.version < 5:
        return ErrorCode.INVALID_TXN_STATE  # clients before KIP-890 do not know TRANSACTION_ABORTABLE
    return error
