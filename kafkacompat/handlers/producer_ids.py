"""InitProducerId (v0-5) and DescribeProducers (v0): idempotent producers.

InitProducerId follows Kafka's KafkaApis.handleInitProducerIdRequest and
TransactionCoordinator.handleInitProducerId:

- no transactional id: a new producer id from the cluster-wide block allocator, epoch 0. Any
  producer id/epoch the request carries (v3+, KIP-360) is checked for consistency (both or
  neither, else INVALID_REQUEST) and otherwise not used: Kafka hands out a fresh id too. An
  idempotent Java producer bumps its epoch locally; librdkafka asks for a new id.
- an empty transactional id: INVALID_REQUEST.
- a transactional id: the transaction coordinator's answer (handlers/transactions.py): the id's
  producer id with its epoch bumped, fencing the producer that had it (KIP-360 recovery with the
  producer's current id and epoch), INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms,
  CONCURRENT_TRANSACTIONS while its previous transaction completes.

v6 (KIP-939 two-phase commit) is still marked unstable in Kafka, which serves 0-5.
"""

from __future__ import annotations

import logging

from kafkacompat.controller.producer_ids import ProducerIdsExhaustedError
from kafkacompat.controller.store import StoreError
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.handlers.transactions import init_transactional_producer
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode

log = logging.getLogger("kafkacompat.producer_ids")

INIT_PRODUCER_ID = 22
DESCRIBE_PRODUCERS = 61
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _init_response(ctx: RequestContext, error: ErrorCode, producer_id: int = NO_PRODUCER_ID,
                   producer_epoch: int = NO_PRODUCER_EPOCH):
    return response_for(INIT_PRODUCER_ID, ctx, throttle_time_ms=0, error_code=error,
                        producer_id=producer_id, producer_epoch=producer_epoch)


@handles(INIT_PRODUCER_ID, 0, 5)
async def handle_init_producer_id(request, ctx: RequestContext):
    transactional_id = request.transactional_id
    if ctx.version >= 3:
        given_id, given_epoch = request.producer_id, request.producer_epoch
        if (given_id == NO_PRODUCER_ID) != (given_epoch == NO_PRODUCER_EPOCH):
            return _init_response(ctx, ErrorCode.INVALID_REQUEST)
    if transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return _init_response(ctx, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if transactional_id == "":
            return _init_response(ctx, ErrorCode.INVALID_REQUEST)
        try:
            error, producer_id, epoch = await init_transactional_producer(request, ctx)
        except (OSError, StoreError, ValueError) as exc:
            log.error("Could not allocate a producer id block: %s; transactional producers will retry", exc)
            return _init_response(ctx, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        except ProducerIdsExhaustedError as exc:
            log.error("InitProducerId from client %s: %s", ctx.client_id, exc)
            return _init_response(ctx, ErrorCode.UNKNOWN_SERVER_ERROR)
        return _init_response(ctx, error, producer_id, epoch)
    elif not (ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE, log_denied=False)
              or ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC)):
        return _init_response(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await ctx.producer_ids.generate()
    except (OSError, StoreError, ValueError) as error:
        log.error("Could not allocate a producer id block: %s; idempotent producers will retry", error)
        return _init_response(ctx, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    except ProducerIdsExhaustedError as error:
        # Kafka's "Have exhausted all producerIds" reaches the client as UNKNOWN_SERVER_ERROR.
        log.error("InitProducerId from client %s: %s; no idempotent producer can start on this cluster",
                  ctx.client_id, error)
        return _init_response(ctx, ErrorCode.UNKNOWN_SERVER_ERROR)
    log.debug("Producer id %d (epoch 0) for client %s", producer_id, ctx.client_id)
    return _init_response(ctx, ErrorCode.NONE, producer_id, 0)


@handles(DESCRIBE_PRODUCERS, 0, 0)
async def handle_describe_producers(request, ctx: RequestContext):
    topic_cls = response_class(DESCRIBE_PRODUCERS).TopicResponse
    partition_cls = topic_cls.PartitionResponse
    state_cls = partition_cls.ProducerState
    topics = []
    for topic in request.topics:
        partitions = []
        readable = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            if not readable:
                partitions.append(partition_cls(partition_index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                error_message=None, active_producers=[]))
                continue
            partition = ctx.replicas.partition(topic.name, index)
            if partition is None:
                partitions.append(partition_cls(
                    partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"this broker has no partition {topic.name}-{index}", active_producers=[],
                ))
                continue
            producers = [
                state_cls(
                    producer_id=entry.producer_id, producer_epoch=entry.producer_epoch, last_sequence=entry.last_seq,
                    last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=entry.current_txn_first_offset,
                )
                for entry in partition.log.producer_state.active_producers()
            ]
            partitions.append(partition_cls(partition_index=index, error_code=ErrorCode.NONE, error_message=None,
                                            active_producers=producers))
        topics.append(topic_cls(name=topic.name, partitions=partitions))
    return response_for(DESCRIBE_PRODUCERS, ctx, throttle_time_ms=0, topics=topics)
