"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Describe follows Kafka's ConfigHelper: a topic lists every topic config with its effective value;
its source and synonyms are the topic override (TOPIC_CONFIG), then the broker keys it derives
from as set in server.properties (STATIC_BROKER_CONFIG), then their defaults (DEFAULT_CONFIG),
with Kafka's quirk of dropping leading synonyms not named like the primary broker key (so
retention.ms reports no synonyms unless log.retention.ms itself is set). A broker lists every
broker key; BROKER_LOGGER lists the Python loggers with log4j level names.

Alter follows ConfigAdminManager (the broker's pre-checks) and ConfigurationControlManager (the
controller): duplicate keys and null values are INVALID_REQUEST, the resulting topic overrides
are validated as a whole (INVALID_CONFIG), and only then is the topic's existence checked. New
overrides are persisted in the topic registry and applied to the partitions' logs at once.
BROKER resources (one broker's id, or "" for the cluster default) store dynamic broker configs in
the metadata store (controller/broker_config_store.py, ZooKeeper mode's /config/brokers layout),
applied without a restart (dynamic_config.py); keys Kafka cannot change dynamically are
INVALID_REQUEST "Cannot update these configs dynamically". Log levels (BROKER_LOGGER) can be
changed too. GROUP resources are Kafka 4's per-group configs (groups/group_configs.py), stored
in the metadata store and validated against the broker's group bounds. CLIENT_METRICS resources are KIP-714 telemetry subscriptions (telemetry.py's
ClientMetricsConfigs rules), stored under /config/client-metrics/<name>; a subscription whose
configs are all deleted no longer exists.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

from kafkacompat.config import (
    BROKER_CONFIGS,
    CONFIG_SOURCE_IDS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIG,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    broker_config_synonyms,
    default_broker_values,
    format_value,
    validate_dynamic_broker_configs,
    validate_topic_configs,
)
from kafkacompat.controller.store import StoreError
from kafkacompat.controller.topics import validate_topic_name
from kafkacompat.dynamic_config import apply_broker_configs
from kafkacompat.groups import group_configs
from kafkacompat.groups.group_configs import GroupConfigs
from kafkacompat.handlers.registry import RequestContext, handles, response_for
from kafkacompat.security.acl import AclOperation, ResourceType
from kafkacompat.telemetry import CONFIG_DOCS as CLIENT_METRICS_DOCS
from kafkacompat.telemetry import subscription_entries, validate_client_metrics_configs
from kafkacompat.wire.codec import response_class
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.configs")

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

# ConfigResource.Type ids
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
RESOURCE_TYPE_NAMES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER",
                       CLIENT_METRICS: "CLIENT_METRICS", GROUP: "GROUP"}

# AlterConfigOp.OpType ids
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

DYNAMIC_BROKER_LOGGER_CONFIG = CONFIG_SOURCE_IDS["DYNAMIC_BROKER_LOGGER_CONFIG"]
CLIENT_METRICS_CONFIG = CONFIG_SOURCE_IDS["CLIENT_METRICS_CONFIG"]
CLIENT_METRICS_TYPES = {"metrics": ConfigType.LIST, "interval.ms": ConfigType.INT, "match": ConfigType.LIST}
GROUP_CONFIG = CONFIG_SOURCE_IDS["GROUP_CONFIG"]
GROUP_CONFIG_TYPES = {key: ConfigType.INT for key in group_configs.INT_KEYS}
UNKNOWN_CONFIG_TYPE = 0


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    config_type: int = UNKNOWN_CONFIG_TYPE
    documentation: str | None = None
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[Synonym] = field(default_factory=list)


# ---- what a topic's and the broker's configs look like -----------------------------------------


@functools.cache
def _broker_defaults() -> Mapping[str, str | None]:
    return MappingProxyType(default_broker_values())


def _broker_key_synonyms(config: BrokerConfig, keys: list[str] | tuple[str, ...], sensitive: bool,
                         *, per_broker: bool = True) -> list[Synonym]:
    """Kafka's configSynonyms: the keys set dynamically for this broker, then as the cluster
    default, then statically, then those with a default, each in key order; leading entries not
    named like the first key are dropped (Kafka's dropWhile). Describing the cluster default
    (``per_broker=False``) keeps only the cluster-default synonyms."""
    if not keys:
        return []
    defaults = _broker_defaults()
    layers = [(config.dynamic_broker, DYNAMIC_BROKER_CONFIG), (config.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG)]
    dynamic = [Synonym(k, values[k], CONFIG_SOURCE_IDS[source]) for values, source in layers for k in keys
               if k in values]
    static = [Synonym(k, config.static_values.get(k), CONFIG_SOURCE_IDS[STATIC_BROKER_CONFIG])
              for k in keys if config.static_sources.get(k) == STATIC_BROKER_CONFIG]
    default = [Synonym(k, defaults[k], CONFIG_SOURCE_IDS[DEFAULT_CONFIG])
               for k in keys if defaults.get(k) is not None]
    synonyms = dynamic + static + default
    if not per_broker:
        synonyms = [s for s in synonyms if s.source == CONFIG_SOURCE_IDS[DYNAMIC_DEFAULT_BROKER_CONFIG]]
    while synonyms and synonyms[0].name != keys[0]:
        synonyms.pop(0)
    if sensitive:
        synonyms = [Synonym(s.name, None, s.source) for s in synonyms]
    return synonyms


def normalized_topic_value(name: str, raw: str) -> str:
    """A topic config value as Kafka prints it after parsing ("compact, delete" -> "compact,delete")."""
    try:
        return format_value(TOPIC_CONFIGS[name].parse(raw)) or ""
    except (ConfigError, KeyError):
        return raw


def topic_config_entries(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    effective = config.effective_topic_config(overrides)
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        key = TOPIC_CONFIGS[name]
        value = normalized_topic_value(name, effective[name]) if name in overrides else effective[name]
        synonyms = _broker_key_synonyms(config, key.broker_keys, sensitive=False)
        if name in overrides:
            synonyms.insert(0, Synonym(name, value, CONFIG_SOURCE_IDS[TOPIC_CONFIG]))
        source = synonyms[0].source if synonyms else CONFIG_SOURCE_IDS[DEFAULT_CONFIG]
        entries.append(ConfigEntry(name, value, source, key.type.value, key.doc, synonyms=synonyms))
    return entries


def broker_config_entries(config: BrokerConfig) -> list[ConfigEntry]:
    entries = []
    for name in sorted(BROKER_CONFIGS):
        key = BROKER_CONFIGS[name]
        sensitive = key.type is ConfigType.PASSWORD
        synonyms = _broker_key_synonyms(config, broker_config_synonyms(name), sensitive)
        source = synonyms[0].source if synonyms else CONFIG_SOURCE_IDS[DEFAULT_CONFIG]
        value = None if sensitive else config.values.get(name)
        entries.append(ConfigEntry(name, value, source, key.type.value, key.doc, key.read_only, sensitive, synonyms))
    return entries


def cluster_default_entries(config: BrokerConfig) -> list[ConfigEntry]:
    """The BROKER resource "": only the keys set as the cluster-wide dynamic default (Kafka's
    currentDynamicDefaultConfigs), with the cluster-default synonyms."""
    entries = []
    for name in sorted(config.dynamic_default):
        key = BROKER_CONFIGS[name]
        sensitive = key.type is ConfigType.PASSWORD
        synonyms = _broker_key_synonyms(config, broker_config_synonyms(name), sensitive, per_broker=False)
        value = None if sensitive else config.dynamic_default[name]
        entries.append(ConfigEntry(name, value, CONFIG_SOURCE_IDS[DYNAMIC_DEFAULT_BROKER_CONFIG], key.type.value,
                                   key.doc, key.read_only, sensitive, synonyms))
    return entries


# Python logging levels <-> the log4j level names Kafka reports and accepts.
LOG4J_LEVELS = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
                "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": 5}
ROOT_LOGGER = "root"


def _log4j_level(level: int) -> str:
    for name, threshold in LOG4J_LEVELS.items():  # from the most severe down
        if level >= threshold:
            return name
    return "TRACE"


def _existing_logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    existing = logging.Logger.manager.loggerDict.get(name)
    return existing if isinstance(existing, logging.Logger) else None


def logger_entries() -> list[ConfigEntry]:
    names = [ROOT_LOGGER] + sorted(
        name for name, logger in logging.Logger.manager.loggerDict.items() if isinstance(logger, logging.Logger)
    )
    return [
        ConfigEntry(name, _log4j_level(_existing_logger(name).getEffectiveLevel()), DYNAMIC_BROKER_LOGGER_CONFIG)
        for name in names
    ]


# ---- CreateTopics support (used by handlers.topics) --------------------------------------------


def validate_creation_configs(configs: Iterable) -> dict[str, str]:
    """The configs of a CreateTopics entry, validated; raises KafkaError(INVALID_CONFIG)."""
    given: dict[str, str | None] = {}
    for config in configs:
        given[config.name] = config.value
    nulls = [name for name, value in given.items() if value is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))
    try:
        return validate_topic_configs(given)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None


def creation_config_entries(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    return topic_config_entries(config, overrides)


# ---- DescribeConfigs ---------------------------------------------------------------------------


def _broker_id_from(name: str, what: str = "Broker") -> int:
    try:
        return int(name)
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{what} id must be an integer, but it is: {name}") from None


def _describe_topic(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    validate_topic_name(name)
    topic = ctx.metadata.topic(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    return topic_config_entries(ctx.config, topic.configs)


def _describe_broker(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    if not name:
        return cluster_default_entries(ctx.config)
    if _broker_id_from(name) != ctx.metadata.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {ctx.metadata.node_id} or empty string, but received {name}",
        )
    return broker_config_entries(ctx.config)


def _describe_broker_logger(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    if _broker_id_from(name) != ctx.metadata.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.metadata.node_id} but received {name}"
        )
    return logger_entries()


def _store_unavailable(exc: StoreError) -> KafkaError:
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                      f"The client metrics subscriptions are not readable: the metadata store is not available "
                      f"({exc}); retry")


async def _describe_client_metrics(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    """Every subscription key, as set or its default (Kafka describes a subscription that does
    not exist with the defaults)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
    try:
        props = await ctx.admin.client_metrics_store().read(name)
    except StoreError as exc:
        raise _store_unavailable(exc) from None
    try:
        entries = subscription_entries(props)
    except KafkaError:  # a value stored by hand that does not parse: shown as stored
        entries = [(key, value, True) for key, value in sorted(props.items())]
    return [ConfigEntry(key, value, CLIENT_METRICS_CONFIG if is_set else CONFIG_SOURCE_IDS[DEFAULT_CONFIG],
                        CLIENT_METRICS_TYPES[key].value if key in CLIENT_METRICS_TYPES else UNKNOWN_CONFIG_TYPE,
                        CLIENT_METRICS_DOCS.get(key),
                        synonyms=[Synonym(key, value, CLIENT_METRICS_CONFIG)] if is_set else [])
            for key, value, is_set in entries]


def _group_configs(ctx: RequestContext) -> GroupConfigs:
    assert ctx.services.group_configs is not None
    return ctx.services.group_configs


def _check_group_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name can't be empty")


async def _describe_group(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    """Every group config key: the group's own value (GROUP_CONFIG) or the broker's default
    (Kafka describes a group that sets nothing, or does not exist, with the defaults)."""
    _check_group_name(name)
    try:
        props = await ctx.admin.group_config_store().read(name)
    except StoreError as exc:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"The configs of group {name} are not readable: the metadata store is not available "
                         f"({exc}); retry") from None
    entries = []
    for key, default in group_configs.defaults(ctx.config).items():
        config_type = ConfigType.INT if key in group_configs.INT_KEYS else ConfigType.STRING
        if key in props:
            entries.append(ConfigEntry(key, props[key], GROUP_CONFIG, config_type.value, group_configs.DOCS[key],
                                       synonyms=[Synonym(key, props[key], GROUP_CONFIG)]))
        else:
            entries.append(ConfigEntry(key, default, CONFIG_SOURCE_IDS[DEFAULT_CONFIG], config_type.value,
                                       group_configs.DOCS[key]))
    return entries


DESCRIBERS = {TOPIC: _describe_topic, BROKER: _describe_broker, BROKER_LOGGER: _describe_broker_logger,
              CLIENT_METRICS: _describe_client_metrics, GROUP: _describe_group}


def _described_entry(entry_cls, entry: ConfigEntry, include_synonyms: bool, include_documentation: bool,
                     version: int):
    synonym_cls = entry_cls.DescribeConfigsSynonym
    synonyms = [synonym_cls(name=s.name, value=s.value, source=s.source) for s in entry.synonyms]
    return entry_cls(
        name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
        # v0 only (its config source replaces it; the field is not ignorable)
        is_default=version == 0 and entry.source == CONFIG_SOURCE_IDS[DEFAULT_CONFIG], is_sensitive=entry.is_sensitive,
        synonyms=synonyms if include_synonyms else [], config_type=entry.config_type,
        documentation=entry.documentation if include_documentation else None,
    )


def check_config_access(ctx: RequestContext, operation: AclOperation, resource_type: int, name: str) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on what the config resource belongs to (Kafka's
    configsAuthorizationApiError): the cluster for broker, broker logger and client-metrics
    configs, else the topic or group; raises KafkaError with the matching code."""
    if resource_type == TOPIC:
        allowed, code = ctx.authorize(operation, ResourceType.TOPIC, name), ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif resource_type == GROUP:
        allowed, code = ctx.authorize(operation, ResourceType.GROUP, name), ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        allowed, code = ctx.authorize_cluster(operation), ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if not allowed:
        raise KafkaError(code, None)


async def _describe_resource(ctx: RequestContext, resource, result_cls, include_synonyms: bool, include_docs: bool):
    entry_cls = result_cls.DescribeConfigsResourceResult
    try:
        check_config_access(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
        describe = DESCRIBERS.get(resource.resource_type)
        if describe is None:
            kind = RESOURCE_TYPE_NAMES[resource.resource_type]
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"kafkacompat does not support {kind} configs")
        entries = describe(ctx, resource.resource_name)
        if inspect.isawaitable(entries):
            entries = await entries
    except KafkaError as exc:
        message = None if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else exc.message
        return result_cls(error_code=exc.code, error_message=message, resource_type=resource.resource_type,
                          resource_name=resource.resource_name, configs=[])
    wanted = set(resource.configuration_keys) if resource.configuration_keys else None
    configs = [_described_entry(entry_cls, entry, include_synonyms, include_docs, ctx.version)
               for entry in entries if wanted is None or entry.name in wanted]
    return result_cls(error_code=ErrorCode.NONE, error_message=None, resource_type=resource.resource_type,
                      resource_name=resource.resource_name, configs=configs)


@handles(DESCRIBE_CONFIGS, 0, 4)
async def handle_describe_configs(request, ctx: RequestContext):
    result_cls = response_class(DESCRIBE_CONFIGS).DescribeConfigsResult
    unknown = next((r for r in request.resources if r.resource_type not in RESOURCE_TYPE_NAMES), None)
    if unknown is not None:
        # Kafka fails the whole request when any resource type is unknown.
        message = f"Unexpected resource type UNKNOWN for resource {unknown.resource_name}"
        results = [result_cls(error_code=ErrorCode.INVALID_REQUEST, error_message=message,
                              resource_type=r.resource_type, resource_name=r.resource_name, configs=[])
                   for r in request.resources]
        return response_for(DESCRIBE_CONFIGS, ctx, throttle_time_ms=0, results=results)
    results = [await _describe_resource(ctx, resource, result_cls, request.include_synonyms,
                                        request.include_documentation)
               for resource in request.resources]
    return response_for(DESCRIBE_CONFIGS, ctx, throttle_time_ms=0, results=results)


# ---- altering ----------------------------------------------------------------------------------


def _check_no_duplicate_keys(configs) -> None:
    names = [config.name for config in configs]
    if len(names) != len(set(names)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")


def _check_no_null_values(configs, *, allow_for_delete: bool) -> None:
    nulls = [c.name for c in configs
             if c.value is None and not (allow_for_delete and getattr(c, "config_operation", SET) == DELETE)]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))


def _list_parts(value: str | None) -> list[str]:
    return [part for part in (value or "").split(",") if part]


def _edited_list(current: str | None, op: int, value: str) -> str:
    """A LIST config after IncrementalAlterConfigs' APPEND (items not there yet) or SUBTRACT."""
    parts = _list_parts(current)
    for item in value.split(","):
        if op == APPEND and item not in parts:
            parts.append(item)
        elif op == SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


def _apply_operation(values: dict[str, str], config, list_defaults: dict[str, str | None]) -> None:
    """One IncrementalAlterConfigs operation on a resource's ``values``; ``list_defaults``: the
    resource type's LIST keys (the only ones APPEND and SUBTRACT take) and their defaults."""
    name, op, value = config.name, config.config_operation, config.value
    if op == SET:
        values[name] = value
    elif op == DELETE:
        values.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        if name not in list_defaults:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Can't {OP_NAMES[op]} to key {name} because its type is not LIST."
            )
        values[name] = _edited_list(values.get(name, list_defaults[name]), op, value)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}")


def _operations_editor(configs, list_defaults: dict[str, str | None]):
    """The edit a store applies to an entity's current configs: the request's operations in order."""
    def edit(props: dict[str, str]) -> dict[str, str]:
        for config in configs:
            _apply_operation(props, config, list_defaults)
        return props
    return edit


_TOPIC_LIST_DEFAULTS = {name: key.default for name, key in TOPIC_CONFIGS.items() if key.type is ConfigType.LIST}
_CLIENT_METRICS_LIST_DEFAULTS = {name: None for name, kind in CLIENT_METRICS_TYPES.items() if kind is ConfigType.LIST}
_GROUP_LIST_DEFAULTS = {name: None for name, kind in GROUP_CONFIG_TYPES.items() if kind is ConfigType.LIST}


async def _change_topic_configs(ctx: RequestContext, name: str, new_overrides: dict[str, str],
                                validate_only: bool) -> None:
    """Validate the topic's complete new overrides, check it exists, then persist and apply them."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    validate_topic_name(name)
    try:
        validated = validate_topic_configs(new_overrides)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    topic = ctx.metadata.topic(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    if not validate_only:
        await ctx.admin.alter_topic_configs(topic, validated)
        log.info("Topic %s configs are now %s", name, validated or "the broker defaults")


def _current_overrides(ctx: RequestContext, name: str) -> dict[str, str]:
    topic = ctx.metadata.topic(name)
    return dict(topic.configs) if topic is not None else {}


def _check_broker_resource(ctx: RequestContext, resource) -> None:
    if resource.resource_name and _broker_id_from(resource.resource_name, "Node") != ctx.metadata.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {ctx.metadata.node_id}, but received {resource.resource_name}",
        )


def _validated_broker_configs(props: dict[str, str]) -> dict[str, str]:
    """Kafka's ConfigAdminManager.validateBrokerConfigChange: what fails validation is
    INVALID_REQUEST (KAFKA-13609), with DynamicBrokerConfig's message."""
    try:
        validate_dynamic_broker_configs(props)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    return props


def _apply_broker_operation(props: dict[str, str], config) -> None:
    name, op, value = config.name, config.config_operation, config.value
    if op == SET:
        props[name] = value
    elif op == DELETE:
        props.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        key = BROKER_CONFIGS.get(name)
        if key is None or key.type is not ConfigType.LIST:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Can't {OP_NAMES[op]} to key {name} because its type is not LIST."
            )
        parts = _list_parts(props[name] if name in props else key.default)
        for item in value.split(","):
            if op == APPEND and item not in parts:
                parts.append(item)
            elif op == SUBTRACT and item in parts:
                parts.remove(item)
        props[name] = ",".join(parts)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}")


async def _change_broker_configs(ctx: RequestContext, resource, edit, validate_only: bool) -> None:
    """Store the BROKER resource's new dynamic configs (validated as a whole), then apply them here
    at once; the other brokers apply them when their watch fires."""
    _check_broker_resource(ctx, resource)
    store = ctx.admin.broker_config_store()
    try:
        if validate_only:
            _validated_broker_configs(edit(await store.read(resource.resource_name)))
            return
        updated = await store.change(resource.resource_name, lambda current: _validated_broker_configs(edit(current)))
        per_broker, cluster_default = await store.read(str(ctx.metadata.node_id)), await store.read("")
    except StoreError as exc:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Changing broker configs failed: the metadata store is "
                                                         f"not available ({exc}); retry") from None
    log.warning("Dynamic configs of broker %s changed by %s; set now: %s", resource.resource_name or "<default>",
                ctx.client_id, ", ".join(sorted(updated)) or "none")
    apply_broker_configs(ctx.config, ctx.replicas, ctx.metadata, per_broker, cluster_default)


def _alter_broker_loggers(ctx: RequestContext, resource, validate_only: bool) -> None:
    """Kafka's RuntimeLoggerManager: SET or DELETE a logger's level; levels do not survive a restart."""
    _broker_id_from(resource.resource_name, "Node")
    if int(resource.resource_name) != ctx.metadata.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected node id. Expected {ctx.metadata.node_id}, but received {resource.resource_name}",
        )
    for config in resource.configs:
        _check_logger_change(config)
    if validate_only:
        return
    for config in resource.configs:
        logger = _existing_logger(config.name)
        if config.config_operation == SET:
            logger.setLevel(LOG4J_LEVELS[config.value])
            log.warning("Updated the log level of %s to %s", config.name, config.value)
        else:
            logger.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", config.name)


def _check_logger_change(config) -> None:
    op = config.config_operation
    if op in (APPEND, SUBTRACT):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"{OP_NAMES[op]} operation is not allowed for the BROKER_LOGGER resource"
        )
    if op not in (SET, DELETE):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource")
    if _existing_logger(config.name) is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {config.name} does not exist!")
    if op == SET and config.value not in LOG4J_LEVELS:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Cannot set the log level of {config.name} to {config.value} as it is not a supported log level. "
            f"Valid log levels are {', '.join(sorted(LOG4J_LEVELS))}",
        )
    if op == DELETE and config.name == ROOT_LOGGER:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
        )


async def _change_client_metrics(ctx: RequestContext, name: str, edit, validate_only: bool) -> None:
    """Store the subscription's new configs (validated as a whole by ClientMetricsConfigs' rules),
    then re-read the subscriptions here at once; the other brokers follow the change notification."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    store = ctx.admin.client_metrics_store()
    try:
        if validate_only:
            validate_client_metrics_configs(name, edit(await store.read(name)))
            return
        updated = await store.change(name, lambda current: validate_client_metrics_configs(name, edit(current)))
    except StoreError as exc:
        raise _store_unavailable(exc) from None
    log.info("Client metrics subscription %s changed by %s: %s", name, ctx.client_id,
             ", ".join(f"{k}={v}" for k, v in sorted(updated.items())) or "deleted")
    ctx.services.telemetry.changed()
    try:
        await ctx.services.telemetry.refresh()
    except StoreError as exc:
        log.warning("Client metrics subscriptions not reloaded after the change (%s); retrying", exc)


async def _change_group_configs(ctx: RequestContext, name: str, edit, validate_only: bool) -> None:
    """Store the group's new configs (validated as a whole by GroupConfig's rules against this
    broker's bounds), then re-read them here at once; the other brokers follow the notification."""
    _check_group_name(name)
    store = ctx.admin.group_config_store()
    try:
        if validate_only:
            group_configs.validate(ctx.config, edit(await store.read(name)))
            return
        updated = await store.change(name, lambda current: group_configs.validate(ctx.config, edit(current)))
    except StoreError as exc:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"The configs of group {name} were not changed: the metadata store is not available "
                         f"({exc}); retry") from None
    log.info("Configs of group %s changed by %s: %s", name, ctx.client_id,
             ", ".join(f"{k}={v}" for k, v in sorted(updated.items())) or "all defaults")
    configs = _group_configs(ctx)
    configs.changed()
    try:
        await configs.refresh()
    except StoreError as exc:
        log.warning("Group configs not reloaded after the change (%s); retrying", exc)


async def _alter_incrementally(ctx: RequestContext, resource, validate_only: bool) -> None:
    _check_no_duplicate_keys(resource.configs)
    _check_no_null_values(resource.configs, allow_for_delete=True)
    if resource.resource_type == BROKER_LOGGER:
        _alter_broker_loggers(ctx, resource, validate_only)
    elif resource.resource_type == BROKER:
        def edit(props: dict[str, str]) -> dict[str, str]:
            for config in resource.configs:
                _apply_broker_operation(props, config)
            return props

        await _change_broker_configs(ctx, resource, edit, validate_only)
    elif resource.resource_type == TOPIC:
        overrides = _current_overrides(ctx, resource.resource_name)
        for config in resource.configs:
            _apply_operation(overrides, config, _TOPIC_LIST_DEFAULTS)
        await _change_topic_configs(ctx, resource.resource_name, overrides, validate_only)
    elif resource.resource_type == CLIENT_METRICS:
        await _change_client_metrics(ctx, resource.resource_name,
                                     _operations_editor(resource.configs, _CLIENT_METRICS_LIST_DEFAULTS), validate_only)
    elif resource.resource_type == GROUP:
        await _change_group_configs(ctx, resource.resource_name,
                                    _operations_editor(resource.configs, _GROUP_LIST_DEFAULTS), validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")


async def _alter_replacing(ctx: RequestContext, resource, validate_only: bool) -> None:
    _check_no_duplicate_keys(resource.configs)
    _check_no_null_values(resource.configs, allow_for_delete=False)
    if resource.resource_type == BROKER:
        replacement = {config.name: config.value for config in resource.configs}
        await _change_broker_configs(ctx, resource, lambda _current: dict(replacement), validate_only)
    elif resource.resource_type == TOPIC:
        overrides = {config.name: config.value for config in resource.configs}
        await _change_topic_configs(ctx, resource.resource_name, overrides, validate_only)
    elif resource.resource_type == CLIENT_METRICS:
        replacement = {config.name: config.value for config in resource.configs}
        await _change_client_metrics(ctx, resource.resource_name, lambda _current: dict(replacement), validate_only)
    elif resource.resource_type == GROUP:
        replacement = {config.name: config.value for config in resource.configs}
        await _change_group_configs(ctx, resource.resource_name, lambda _current: dict(replacement), validate_only)
    else:
        # Legacy AlterConfigs never supported BROKER_LOGGER (KIP-412).
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")


async def _alter_results(ctx: RequestContext, request, api_key: int, alter) -> list:
    result_cls = response_class(api_key).AlterConfigsResourceResponse
    seen: dict[tuple[int, str], int] = {}
    for resource in request.resources:
        key = (resource.resource_type, resource.resource_name)
        seen[key] = seen.get(key, 0) + 1
    results = []
    for resource in request.resources:
        code, message = ErrorCode.NONE, None
        try:
            if seen[(resource.resource_type, resource.resource_name)] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            check_config_access(ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name)
            await alter(ctx, resource, bool(request.validate_only))
        except KafkaError as exc:
            code, message = exc.code, exc.message
            log.info("%s on %s %r: %s (%s)", "AlterConfigs" if api_key == ALTER_CONFIGS else "IncrementalAlterConfigs",
                     RESOURCE_TYPE_NAMES.get(resource.resource_type, resource.resource_type),
                     resource.resource_name, exc.code.name, exc.message)
        results.append(result_cls(error_code=code, error_message=message, resource_type=resource.resource_type,
                                  resource_name=resource.resource_name))
    return results


@handles(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(request, ctx: RequestContext):
    results = await _alter_results(ctx, request, INCREMENTAL_ALTER_CONFIGS, _alter_incrementally)
    return response_for(INCREMENTAL_ALTER_CONFIGS, ctx, throttle_time_ms=0, responses=results)


@handles(ALTER_CONFIGS, 0, 2)
async def handle_alter_configs(request, ctx: RequestContext):
    results = await _alter_results(ctx, request, ALTER_CONFIGS, _alter_replacing)
    return response_for(ALTER_CONFIGS, ctx, throttle_time_ms=0, responses=results)
