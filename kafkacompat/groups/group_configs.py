"""Per-group configs (Kafka 4's GroupConfig, ConfigResource type GROUP): a group's own session
timeout and heartbeat interval (consumer and share groups), and a share group's record lock
duration, delivery count limit, auto offset reset and isolation level. Stored in the metadata store under
``/config/groups/<group>`` (controller/broker_config_store.py's GroupConfigStore) and kept here
in memory, re-read when any broker changes one (the store's watch); a key a group does not set
is the broker's ``group.*`` value of the moment, so a dynamic broker change applies to it too.
Validation follows GroupConfig.validate: known names, typed values, and the broker's
``group.consumer.min/max.*`` and ``group.share.min/max.*`` bounds.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import trio

from kafkacompat.controller.store_follower import StoreFollower
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.broker_config_store import GroupConfigStore

log = logging.getLogger("kafkacompat.groups")

CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"

# key -> (the broker config it defaults to, or its fixed default; the least value of an INT key)
INT_KEYS: Mapping[str, tuple[str, int]] = {
    CONSUMER_SESSION_TIMEOUT: ("group.consumer.session.timeout.ms", 1),
    CONSUMER_HEARTBEAT_INTERVAL: ("group.consumer.heartbeat.interval.ms", 1),
    SHARE_SESSION_TIMEOUT: ("group.share.session.timeout.ms", 1),
    SHARE_HEARTBEAT_INTERVAL: ("group.share.heartbeat.interval.ms", 1),
    SHARE_RECORD_LOCK_DURATION: ("group.share.record.lock.duration.ms", 1000),
    SHARE_DELIVERY_COUNT_LIMIT: ("group.share.delivery.count.limit", 2),
    STREAMS_SESSION_TIMEOUT: ("group.streams.session.timeout.ms", 1),
    STREAMS_HEARTBEAT_INTERVAL: ("group.streams.heartbeat.interval.ms", 1),
    STREAMS_NUM_STANDBY_REPLICAS: ("group.streams.num.standby.replicas", 0),
}
# key -> (default, the values allowed; share.auto.offset.reset also takes by_duration:<ISO 8601>)
STRING_KEYS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    SHARE_AUTO_OFFSET_RESET: ("latest", ("latest", "earliest")),
    SHARE_ISOLATION_LEVEL: ("read_uncommitted", ("read_committed", "read_uncommitted")),
}
BY_DURATION = "by_duration:"
# java.time.Duration.parse's format: [-+]PnDTnHnMn.nS, every number signed, letters in either case
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)
NAMES = tuple(INT_KEYS) + tuple(STRING_KEYS)
DOCS: Mapping[str, str] = {
    CONSUMER_SESSION_TIMEOUT: "The timeout to detect client failures when using the consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a consumer group.",
    SHARE_SESSION_TIMEOUT: "The timeout to detect client failures when using the share group protocol.",
    SHARE_HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a share group.",
    SHARE_RECORD_LOCK_DURATION: "The record acquisition lock duration in milliseconds for share groups.",
    SHARE_DELIVERY_COUNT_LIMIT: "The maximum number of delivery attempts for a record delivered to a share group.",
    SHARE_AUTO_OFFSET_RESET: "The strategy to initialize the share-partition start offset.",
    SHARE_ISOLATION_LEVEL: "Controls how to read records written transactionally.",
    STREAMS_SESSION_TIMEOUT: "The timeout to detect client failures when using the streams group protocol.",
    STREAMS_HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a streams group.",
    STREAMS_NUM_STANDBY_REPLICAS: "The number of standby replicas for each task of a streams group.",
}
# (key, the broker configs of its low bound (None: only INT_KEYS' least) and of its high bound)
BOUNDS = (
    (CONSUMER_HEARTBEAT_INTERVAL, "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    (CONSUMER_SESSION_TIMEOUT, "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    (SHARE_HEARTBEAT_INTERVAL, "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    (SHARE_SESSION_TIMEOUT, "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    (SHARE_RECORD_LOCK_DURATION, "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
    (SHARE_DELIVERY_COUNT_LIMIT, "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    (STREAMS_HEARTBEAT_INTERVAL, "group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms"),
    (STREAMS_SESSION_TIMEOUT, "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
    (STREAMS_NUM_STANDBY_REPLICAS, None, "group.streams.max.standby.replicas"),
)


def _broker_value(config: "BrokerConfig", key: str) -> int:
    return int(getattr(config, key.replace(".", "_")))


def defaults(config: "BrokerConfig") -> dict[str, str]:
    """Every group config key at its default: the broker's value, or GroupConfig's own."""
    found = {key: str(_broker_value(config, broker_key)) for key, (broker_key, _) in INT_KEYS.items()}
    found.update({key: default for key, (default, _) in STRING_KEYS.items()})
    return found


def iso_duration_ms(text: str) -> int | None:
    """An ISO 8601 duration as java.time.Duration.parse reads it, in milliseconds; None if it
    does not parse."""
    match = _ISO_DURATION.fullmatch(text)
    if match is None:
        return None
    sign, days, time_part, hours, minutes, seconds, fraction = match.groups()
    if (days is None and time_part is None) or time_part in ("T", "t"):
        return None
    nanos = int(((fraction or "") + "000000000")[:9])
    whole_seconds = int(seconds or 0)
    total_ns = ((int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + whole_seconds)
                * 1_000_000_000 + (-nanos if whole_seconds < 0 or (seconds or "").startswith("-") else nanos))
    return (-total_ns if sign == "-" else total_ns) // 1_000_000


def share_reset_lookback_ms(value: str) -> int | None:
    """How far back a ``by_duration:<ISO 8601>`` share.auto.offset.reset looks; None for
    earliest/latest or a value that does not parse (validate() refuses those)."""
    if not value.startswith(BY_DURATION):
        return None
    lookback = iso_duration_ms(value[len(BY_DURATION):])
    return lookback if lookback is not None and lookback >= 0 else None


def _valid_share_auto_offset_reset(value: str) -> bool:
    return value in STRING_KEYS[SHARE_AUTO_OFFSET_RESET][1] or share_reset_lookback_ms(value) is not None


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG, message)


def validate(config: "BrokerConfig", props: Mapping[str, str]) -> dict[str, str]:
    """``props`` (a group's own configs) checked as Kafka's GroupConfig.validate checks them,
    against the broker's defaults for the keys left out; returns them."""
    for name in props:
        if name not in NAMES:
            raise _invalid(f"Unknown group config name: {name}")
    merged = {**defaults(config), **props}
    values: dict[str, int] = {}
    for key, (_, least) in INT_KEYS.items():
        try:
            values[key] = int(merged[key].strip())
        except ValueError:
            raise _invalid(f"Invalid value {merged[key]} for configuration {key}: Not a number of type INT") from None
        if not -(1 << 31) <= values[key] < (1 << 31):
            raise _invalid(f"Invalid value {merged[key]} for configuration {key}: Not a number of type INT")
        if values[key] < least:
            raise _invalid(f"Invalid value {values[key]} for configuration {key}: Value must be at least {least}")
    if not _valid_share_auto_offset_reset(merged[SHARE_AUTO_OFFSET_RESET]):
        value = merged[SHARE_AUTO_OFFSET_RESET]
        raise _invalid(f"Invalid value {value} for configuration {SHARE_AUTO_OFFSET_RESET}: Invalid value `{value}` "
                       f"for configuration {SHARE_AUTO_OFFSET_RESET}. The value must be either 'earliest', 'latest' "
                       "or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
    for key, (_, allowed) in STRING_KEYS.items():
        if key != SHARE_AUTO_OFFSET_RESET and merged[key] not in allowed:
            raise _invalid(f"Invalid value {merged[key]} for configuration {key}: String must be one of: "
                           f"{', '.join(allowed)}")
    for key, low, high in BOUNDS:
        if low is not None and values[key] < _broker_value(config, low):
            raise _invalid(f"{key} must be greater than or equal to {low}")
        if values[key] > _broker_value(config, high):
            raise _invalid(f"{key} must be less than or equal to {high}")
    if values[CONSUMER_SESSION_TIMEOUT] <= values[CONSUMER_HEARTBEAT_INTERVAL]:
        raise _invalid(f"{CONSUMER_SESSION_TIMEOUT} must be greater than {CONSUMER_HEARTBEAT_INTERVAL}")
    if values[SHARE_SESSION_TIMEOUT] <= values[SHARE_HEARTBEAT_INTERVAL]:
        raise _invalid(f"{SHARE_SESSION_TIMEOUT} must be greater than {SHARE_HEARTBEAT_INTERVAL}")
    if values[STREAMS_SESSION_TIMEOUT] <= values[STREAMS_HEARTBEAT_INTERVAL]:
        raise _invalid(f"{STREAMS_SESSION_TIMEOUT} must be greater than {STREAMS_HEARTBEAT_INTERVAL}")
    return dict(props)


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """A group's effective configs: its own where set, else the broker's."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_auto_offset_reset: str
    share_isolation_level: str
    streams_session_timeout_ms: int = 45000
    streams_heartbeat_interval_ms: int = 5000
    streams_num_standby_replicas: int = 0


class GroupConfigs:
    def __init__(self, config: "BrokerConfig", store: "Callable[[], GroupConfigStore] | None" = None) -> None:
        self.config = config
        self.overrides: dict[str, dict[str, str]] = {}
        self._follower = StoreFollower(store, self.set_overrides, "Group configs", REFRESH_SECONDS)

    def of(self, group_id: str) -> GroupSettings:
        merged = {**defaults(self.config), **self.overrides.get(group_id, {})}

        def number(key: str) -> int:
            try:
                return int(merged[key])
            except ValueError:  # stored by hand: the broker's value
                return _broker_value(self.config, INT_KEYS[key][0])

        return GroupSettings(number(CONSUMER_SESSION_TIMEOUT), number(CONSUMER_HEARTBEAT_INTERVAL),
                             number(SHARE_SESSION_TIMEOUT), number(SHARE_HEARTBEAT_INTERVAL),
                             number(SHARE_RECORD_LOCK_DURATION), number(SHARE_DELIVERY_COUNT_LIMIT),
                             merged[SHARE_AUTO_OFFSET_RESET],
                             merged[SHARE_ISOLATION_LEVEL], number(STREAMS_SESSION_TIMEOUT),
                             number(STREAMS_HEARTBEAT_INTERVAL), number(STREAMS_NUM_STANDBY_REPLICAS))

    def set_overrides(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        overrides = {group: {k: v for k, v in props.items() if k in NAMES} for group, props in stored.items()}
        if overrides != self.overrides:
            self.overrides = overrides
            log.info("Group configs now set for: %s", ", ".join(sorted(overrides)) or "no group")

    def changed(self) -> None:
        self._follower.changed()

    async def refresh(self) -> None:
        await self._follower.refresh()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep the group configs in step with the store (loaded before the broker accepts clients)."""
        await self._follower.run(task_status=task_status)


REFRESH_SECONDS = 30.0
