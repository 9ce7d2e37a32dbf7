"""CreateTopics, DeleteTopics and CreatePartitions.

The checks, their order and their messages follow Kafka's KRaft controller (ControllerApis and
ReplicationControlManager): duplicate names, name validity and '.'/'_' collisions, existence,
configs, then partition count, replication factor and manual assignments. A validate-only
request runs every check and creates nothing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Iterable

from kafkacompat.controller.topics import TopicInfo, validate_topic_name
from kafkacompat.handlers.configs import creation_config_entries, validate_creation_configs
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import DEFAULT_MESSAGES, ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.topics")

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
ZERO_UUID = uuid.UUID(int=0)


@dataclass
class TopicPlan:
    """What a valid CreateTopics entry will create."""

    partitions: int
    replication_factor: int
    configs: dict[str, str]
    assignment: dict[int, list[int]] | None = None  # manual replica assignment, if any


THROTTLED_MESSAGE = "The throttling quota has been exceeded."


def _duplicates(names: Iterable[str | None]) -> set[str | None]:
    seen: set[str | None] = set()
    duplicates: set[str | None] = set()
    for name in names:
        (duplicates if name in seen else seen).add(name)
    return duplicates


# ---- replica placement checks (shared by CreateTopics and CreatePartitions) -------------------


def _check_replication_factor(ctx: RequestContext, replication_factor: int) -> None:
    brokers = len(ctx.metadata.brokers())
    if replication_factor > brokers:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
            f"of {replication_factor} cannot be reached because only {brokers} broker(s) are registered.",
        )


def _check_manual_replicas(ctx: RequestContext, broker_ids: list[int], replication_factor: int | None) -> None:
    """Kafka's validateManualPartitionAssignment: non-empty, registered brokers, no repeats, same size."""
    if not broker_ids:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
        )
    live = set(sorted(ctx.metadata.brokers()))
    previous = None
    for broker_id in sorted(broker_ids):
        if broker_id not in live:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.",
            )
        if broker_id == previous:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker_id} more than once.",
            )
        previous = broker_id
    if replication_factor is not None and len(broker_ids) != replication_factor:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes a partition with {len(broker_ids)} replica(s), but this "
            f"is not consistent with previous partitions, which have {replication_factor} replica(s).",
        )


# ---- CreateTopics ------------------------------------------------------------------------------


def _check_new_name(ctx: RequestContext, name: str) -> None:
    if ctx.metadata.topic(name) is not None:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    validate_topic_name(name)
    colliding = ctx.metadata.colliding_topic(name)
    if colliding is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {colliding}")


def _plan_from_assignments(ctx: RequestContext, topic) -> tuple[int, int]:
    if topic.replication_factor != -1:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        )
    if topic.num_partitions != -1:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    replication_factor: int | None = None
    indexes: set[int] = set()
    for assignment in topic.assignments:
        if assignment.partition_index in indexes:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Found multiple manual partition assignments for partition {assignment.partition_index}",
            )
        _check_manual_replicas(ctx, list(assignment.broker_ids), replication_factor)
        replication_factor = len(assignment.broker_ids)
        indexes.add(assignment.partition_index)
    if indexes != set(range(len(indexes))):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"
        )
    return len(indexes), replication_factor or 0


def _plan_from_counts(ctx: RequestContext, topic) -> tuple[int, int]:
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
        )
    config = ctx.config
    partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    replication_factor = (
        config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
    )
    _check_replication_factor(ctx, replication_factor)
    return partitions, replication_factor


def _plan_topic(ctx: RequestContext, topic) -> TopicPlan:
    _check_new_name(ctx, topic.name)
    configs = validate_creation_configs(topic.configs)
    if topic.assignments:
        partitions, replication_factor = _plan_from_assignments(ctx, topic)
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        return TopicPlan(partitions, replication_factor, configs, assignment)
    partitions, replication_factor = _plan_from_counts(ctx, topic)
    return TopicPlan(partitions, replication_factor, configs)


def _created_result(ctx: RequestContext, topic_cls, name: str, topic_id: uuid.UUID | None, plan: TopicPlan):
    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name, log_denied=False):
        # Kafka leaves out the configs and the layout of a topic the client may not describe.
        return topic_cls(name=name, topic_id=topic_id or ZERO_UUID, error_code=ErrorCode.NONE, error_message=None,
                         num_partitions=-1, replication_factor=-1, configs=[],
                         topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if ctx.version >= 5 else 0)
    config_cls = topic_cls.CreatableTopicConfigs
    configs = [
        config_cls(name=entry.name, value=entry.value, read_only=entry.read_only,
                   config_source=entry.source, is_sensitive=entry.is_sensitive)
        for entry in creation_config_entries(ctx.config, plan.configs)
    ]
    return topic_cls(
        name=name, topic_id=topic_id or ZERO_UUID, error_code=ErrorCode.NONE, error_message=None,
        num_partitions=plan.partitions, replication_factor=plan.replication_factor, configs=configs,
    )


def _error_result(topic_cls, name: str | None, code: int, message: str | None):
    return topic_cls(
        name=name, topic_id=ZERO_UUID, error_code=code, error_message=message,
        num_partitions=-1, replication_factor=-1, configs=[],
    )


def _may_create(ctx: RequestContext, name: str) -> bool:
    """CREATE on the cluster, or else on the topic (Kafka's CreateTopics and auto-creation)."""
    return (ctx.authorize_cluster(AclOperation.CREATE, log_denied=False)
            or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name))


@handles(CREATE_TOPICS, 0, 7)
async def handle_create_topics(request, ctx: RequestContext):
    topic_cls = response_class(CREATE_TOPICS).CreatableTopicResult
    validate_only = bool(request.validate_only)
    unavailable: KafkaError | None = None
    try:
        await ctx.admin.refresh()  # check names and live brokers against the store, not a cache a beat behind
    except KafkaError as exc:
        unavailable = exc  # every topic gets it (REQUEST_TIMED_OUT while the store is unreachable)
    duplicates = _duplicates(topic.name for topic in request.topics)
    budget = ctx.mutation_budget(strict_since=6)
    results = []
    for topic in request.topics:
        if topic.name in duplicates:
            continue
        if topic.name == CLUSTER_METADATA_TOPIC:
            results.append(_error_result(
                topic_cls, topic.name, ErrorCode.INVALID_REQUEST,
                f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
            ))
            continue
        if not _may_create(ctx, topic.name):
            results.append(_error_result(topic_cls, topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                         "Authorization failed."))
            continue
        try:
            if unavailable is not None:
                raise unavailable
            plan = _plan_topic(ctx, topic)
            topic_id = None
            if not validate_only and not budget.admit(plan.partitions):
                raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
            if not validate_only:
                created = await ctx.admin.create_topic(
                    topic.name, plan.partitions, plan.replication_factor, plan.configs, plan.assignment,
                    timeout_ms=request.timeout_ms)
                topic_id = created.topic_id
        except KafkaError as exc:
            log.info("CreateTopics %s: %s (%s)", topic.name, exc.code.name, exc.message)
            results.append(_error_result(topic_cls, topic.name, exc.code, exc.message))
            continue
        results.append(_created_result(ctx, topic_cls, topic.name, topic_id, plan))
    for name in duplicates:
        results.append(_error_result(topic_cls, name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
    response = response_for(CREATE_TOPICS, ctx, throttle_time_ms=0, topics=results)
    ctx.throttle_for_mutations(budget, response)
    return response


# ---- DeleteTopics ------------------------------------------------------------------------------


def _deletion_targets(request, version: int) -> list[tuple[str | None, uuid.UUID]]:
    if version >= 6:
        return [(topic.name, topic.topic_id or ZERO_UUID) for topic in request.topics]
    return [(name, ZERO_UUID) for name in request.topic_names]


def _delete_result(result_cls, name: str | None, topic_id: uuid.UUID, code: int, message: str | None = None):
    return result_cls(name=name, topic_id=topic_id, error_code=code, error_message=message)


def _resolve_for_deletion(
    ctx: RequestContext, targets: list[tuple[str | None, uuid.UUID]], result_cls
) -> tuple[list[TopicInfo], list]:
    """Topics to delete, and the error results for the rest (ControllerApis.deleteTopics)."""
    errors = []
    names = [name for name, topic_id in targets if name is not None and topic_id == ZERO_UUID]
    ids = [topic_id for name, topic_id in targets if name is None and topic_id != ZERO_UUID]
    duplicate_names, duplicate_ids = _duplicates(names), _duplicates(ids)
    for name, topic_id in targets:
        if name is None and topic_id == ZERO_UUID:
            errors.append(_delete_result(result_cls, None, ZERO_UUID, ErrorCode.INVALID_REQUEST,
                                         "Neither topic name nor id were specified."))
        elif name is not None and topic_id != ZERO_UUID:
            errors.append(_delete_result(result_cls, name, topic_id, ErrorCode.INVALID_REQUEST,
                                         "You may not specify both topic name and topic id."))
    errors += [_delete_result(result_cls, name, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
               for name in duplicate_names]
    errors += [_delete_result(result_cls, None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
               for topic_id in duplicate_ids]

    chosen: dict[uuid.UUID, TopicInfo] = {}
    for topic_id in dict.fromkeys(ids):
        if topic_id in duplicate_ids:
            continue
        topic = ctx.metadata.topic_by_id(topic_id)
        if topic is None:
            errors.append(_delete_result(result_cls, None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID,
                                         DEFAULT_MESSAGES[ErrorCode.UNKNOWN_TOPIC_ID]))
        else:
            chosen[topic_id] = topic
    for name in dict.fromkeys(names):
        if name in duplicate_names:
            continue
        topic = ctx.metadata.topic(name)
        if topic is None:
            errors.append(_delete_result(result_cls, name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         DEFAULT_MESSAGES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]))
        elif topic.topic_id in chosen:
            errors.append(_delete_result(result_cls, name, topic.topic_id, ErrorCode.INVALID_REQUEST,
                                         "The provided topic name maps to an ID that was already supplied."))
        else:
            chosen[topic.topic_id] = topic
    return list(chosen.values()), errors


def _authorized_deletions(ctx: RequestContext, targets, to_delete: list[TopicInfo], results: list, result_cls):
    """Kafka checks DELETE before existence (an unknown topic the client may not delete is
    TOPIC_AUTHORIZATION_FAILED), and a topic named by id only to a client that may not DESCRIBE
    it is answered without its name."""
    by_id = {topic_id for name, topic_id in targets if name is None}
    allowed, denied = [], []
    for topic in to_delete:
        if ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, topic.name):
            allowed.append(topic)
            continue
        hidden = topic.topic_id in by_id and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        denied.append(_delete_result(result_cls, None if hidden else topic.name, topic.topic_id,
                                     ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    for result in results:
        if (result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and result.name is not None
                and not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, result.name)):
            result.error_code, result.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    return allowed, results + denied


@handles(DELETE_TOPICS, 0, 6)
async def handle_delete_topics(request, ctx: RequestContext):
    result_cls = response_class(DELETE_TOPICS).DeletableTopicResult
    targets = _deletion_targets(request, ctx.version)
    if not ctx.config.delete_topic_enable:
        # Kafka answers every topic with the same error: INVALID_REQUEST before v3.
        code = ErrorCode.TOPIC_DELETION_DISABLED if ctx.version >= 3 else ErrorCode.INVALID_REQUEST
        log.info("DeleteTopics refused: delete.topic.enable=false")
        results = [_delete_result(result_cls, name, topic_id, code) for name, topic_id in targets]
        return response_for(DELETE_TOPICS, ctx, throttle_time_ms=0, responses=results)
    to_delete, results = _resolve_for_deletion(ctx, targets, result_cls)
    if ctx.services.authorizer is not None:
        to_delete, results = _authorized_deletions(ctx, targets, to_delete, results, result_cls)
    budget = ctx.mutation_budget(strict_since=5)
    for topic in to_delete:
        if not budget.admit(topic.partitions):
            results.append(_delete_result(result_cls, topic.name, topic.topic_id,
                                          ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE))
            continue
        try:
            await ctx.admin.delete_topic(topic, timeout_ms=request.timeout_ms)
        except KafkaError as exc:
            log.info("DeleteTopics %s: %s (%s)", topic.name, exc.code.name, exc.message)
            results.append(_delete_result(result_cls, topic.name, topic.topic_id, exc.code, exc.message))
            continue
        results.append(_delete_result(result_cls, topic.name, topic.topic_id, ErrorCode.NONE))
    response = response_for(DELETE_TOPICS, ctx, throttle_time_ms=0, responses=results)
    ctx.throttle_for_mutations(budget, response)
    return response


# ---- CreatePartitions --------------------------------------------------------------------------


def _check_partition_increase(ctx: RequestContext, request_topic) -> TopicInfo:
    topic = ctx.metadata.topic(request_topic.name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    current, wanted = topic.partitions, request_topic.count
    if wanted == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if wanted < current:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"The topic {topic.name} currently has {current} partition(s); {wanted} would not be an increase.",
        )
    additional = wanted - current
    assignments = request_topic.assignments
    if assignments is not None:
        if len(assignments) != additional:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified.",
            )
        for assignment in assignments:
            _check_manual_replicas(ctx, list(assignment.broker_ids), topic.replication_factor)
    else:
        _check_replication_factor(ctx, topic.replication_factor)
    return topic


@handles(CREATE_PARTITIONS, 0, 3)
async def handle_create_partitions(request, ctx: RequestContext):
    result_cls = response_class(CREATE_PARTITIONS).CreatePartitionsTopicResult
    duplicates = _duplicates(topic.name for topic in request.topics)
    results = [result_cls(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
               for name in duplicates]
    budget = ctx.mutation_budget(strict_since=3)
    for request_topic in request.topics:
        if request_topic.name in duplicates:
            continue
        if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, request_topic.name):
            results.append(result_cls(name=request_topic.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                      error_message="The topic authorization is failed."))
            continue
        try:
            topic = _check_partition_increase(ctx, request_topic)
            if not request.validate_only and not budget.admit(request_topic.count - topic.partitions):
                raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
            if not request.validate_only:
                assignment = ([list(a.broker_ids) for a in request_topic.assignments]
                              if request_topic.assignments is not None else None)
                await ctx.admin.add_partitions(topic, request_topic.count, assignment, timeout_ms=request.timeout_ms)
        except KafkaError as exc:
            message = None if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else exc.message
            results.append(result_cls(name=request_topic.name, error_code=exc.code, error_message=message))
            continue
        results.append(result_cls(name=request_topic.name, error_code=ErrorCode.NONE, error_message=None))
    response = response_for(CREATE_PARTITIONS, ctx, throttle_time_ms=0, results=results)
    ctx.throttle_for_mutations(budget, response)
    return response
