"""KIP-714 client telemetry, as Kafka's ClientMetricsManager and ClientMetricsConfigs serve it.

Subscriptions are ``client-metrics`` config resources (``metrics``, ``interval.ms``, ``match``),
stored at ``/config/client-metrics/<name>`` (controller/broker_config_store.py) so every broker of
a cluster serves the same ones; ClientMetricsManager re-reads them when the store says something
changed (and every REFRESH_SECONDS). It owns the per-client state: GetTelemetrySubscriptions
assigns a client instance id (when the client sent the zero one) and works out which
subscriptions match the client (its id, software name and version from ApiVersions, address and
port), the union of their metric prefixes, the shortest interval and a subscription id hashing
them; PushTelemetry is checked against that (Kafka's order and codes), decompressed (bounded by
telemetry.max.bytes) and decoded (wire/otlp.py). The latest snapshot of each client instance is
kept for the metrics endpoint (http/metrics.py); an instance not heard from for
max(60 s, 3 push intervals) is forgotten, and at most MAX_INSTANCES are kept (least recently used
dropped first).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import crc32c
import trio

from kafkacompat.controller.store_follower import StoreFollower
from kafkacompat.wire import validation
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.otlp import MetricPoint, decode_metrics_data
from kafkacompat.wire.protobuf import ProtobufError

if TYPE_CHECKING:
    from kafkacompat.controller.broker_config_store import ClientMetricsConfigStore

log = logging.getLogger("kafkacompat.telemetry")

METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
CONFIG_NAMES = (METRICS, INTERVAL_MS, MATCH)
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
ALL_METRICS = "*"
MATCH_PARAMS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
                "client_source_address", "client_source_port")
# zstd first: what Kafka prefers (clients pick the first one they support)
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
KNOWN_COMPRESSION_TYPES = (0, 1, 2, 3, 4)
MAX_INSTANCES = 16_384
MAX_KEPT_POINTS = 200_000  # data points kept over all snapshots (the oldest clients' are dropped first)
MIN_EXPIRY_MS = 60_000
# Pushes this large, or compressed, are decompressed and decoded in a worker thread: a 1 MiB
# payload takes a few hundred ms of Python, which the event loop must not wait for.
OFF_LOOP_BYTES = 16 * 1024
REFRESH_SECONDS = 5.0
# after these push errors the client may ask for its subscription again at once
RETRY_AT_ONCE = (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
_LIST_SPLIT = re.compile(r"\s*,\s*")


# ---- the client-metrics config resource (ClientMetricsConfigs) ---------------------------------


def parse_list(value: str | None) -> list[str]:
    """Kafka's LIST parsing: trimmed, comma separated, "" is the empty list."""
    text = (value or "").strip()
    return _LIST_SPLIT.split(text) if text else []


def _parse_interval(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {INTERVAL_MS}: "
                                                   "Not a number of type INT") from None


def _check_no_duplicates(name: str, values: list[str]) -> None:
    if len(values) != len(set(values)):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Configuration '{name}' values must not be duplicated.")


def _split_pattern(pattern: str) -> tuple[str, str]:
    param, equals, value = pattern.partition("=")
    if not equals or param.strip() not in MATCH_PARAMS:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
    return param.strip(), value.strip()


def _compile(param: str, value: str) -> re.Pattern:
    try:
        return re.compile(value)
    except re.error as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Client match pattern `{param}={value}` is not a valid "
                                                   f"regular expression: {exc}.") from None


def match_patterns(patterns: list[str]) -> dict[str, re.Pattern]:
    return {param: _compile(param, value) for param, value in map(_split_pattern, patterns)}


def validate_client_metrics_configs(name: str, props: Mapping[str, str]) -> dict[str, str]:
    """A subscription's complete new configs, checked as Kafka's ClientMetricsConfigs.validate:
    an empty name and unknown keys are INVALID_REQUEST, an interval outside 100..3600000 too; a
    malformed value, duplicated list items or a bad match pattern are INVALID_CONFIG."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in props:
        if key not in CONFIG_NAMES:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in props:
        interval = _parse_interval(props[INTERVAL_MS])
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for {INTERVAL_MS}, interval "
                                                        "must be between 100 and 3600000 (1 hour)")
    for key in (METRICS, MATCH):
        if key in props:
            _check_no_duplicates(key, parse_list(props[key]))
    if MATCH in props:
        match_patterns(parse_list(props[MATCH]))
    return dict(props)


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    patterns: Mapping[str, re.Pattern]

    @classmethod
    def from_configs(cls, name: str, props: Mapping[str, str]) -> "Subscription":
        interval = props.get(INTERVAL_MS)
        return cls(name, frozenset(parse_list(props.get(METRICS))),
                   DEFAULT_INTERVAL_MS if interval is None else _parse_interval(interval),
                   match_patterns(parse_list(props.get(MATCH))))


CONFIG_DOCS = {METRICS: "Telemetry metric name prefix list", INTERVAL_MS: "Metrics push interval in milliseconds",
               MATCH: "Client match criteria"}


def subscription_entries(props: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    """DescribeConfigs of a subscription: (key, value as Kafka prints it parsed, is it set) for
    every key."""
    interval = props.get(INTERVAL_MS)
    values = {METRICS: ",".join(parse_list(props.get(METRICS))), MATCH: ",".join(parse_list(props.get(MATCH))),
              INTERVAL_MS: str(DEFAULT_INTERVAL_MS if interval is None else _parse_interval(interval))}
    return [(key, values[key], key in props) for key in sorted(CONFIG_NAMES)]


# ---- client instances --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientMetadata:
    """What a subscription's match patterns are matched against."""

    client_instance_id: uuid.UUID
    client_id: str
    software_name: str
    software_version: str
    source_address: str
    source_port: str

    def attributes(self) -> dict[str, str]:
        return {"client_instance_id": str(self.client_instance_id), "client_id": self.client_id,
                "client_software_name": self.software_name, "client_software_version": self.software_version,
                "client_source_address": self.source_address, "client_source_port": self.source_port}

    def matches(self, patterns: Mapping[str, re.Pattern]) -> bool:
        attributes = self.attributes()
        return all(pattern.fullmatch(attributes[param]) for param, pattern in patterns.items())


@dataclass(frozen=True)
class Snapshot:
    """A client instance's latest push."""

    received: float  # time.time()
    points: tuple[MetricPoint, ...]
    resource: Mapping[str, str]
    dropped: int = 0


@dataclass
class ClientInstance:
    metadata: ClientMetadata
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: float = float("-inf")
    last_push_ms: float = float("-inf")
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    expires_ms: float = 0.0
    snapshot: Snapshot | None = None

    def may_get(self, now_ms: float) -> bool:
        """Kafka's maybeUpdateGetRequestTimestamp: a push interval since the last request."""
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def may_push(self, now_ms: float) -> bool:
        """Kafka's maybeUpdatePushRequestTimestamp: the first push after a get is always accepted
        (clients jitter the interval), later ones a push interval apart."""
        if self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.push_interval_ms:
            self.last_push_ms = now_ms
            return True
        return False


def subscription_id(metrics: tuple[str, ...], interval_ms: int, instance_id: uuid.UUID) -> int:
    """A signed 32-bit hash of what the client is asked for, mixed with its instance id (as
    Kafka: a change of subscriptions changes it, and two clients' ids differ)."""
    digest = crc32c.crc32c(("[" + ", ".join(metrics) + "]" + str(interval_ms)).encode())
    mixed = digest ^ (instance_id.int >> 96) ^ ((instance_id.int >> 64) & 0xFFFFFFFF)
    return mixed - (1 << 32) if mixed >= 1 << 31 else mixed


@dataclass(frozen=True)
class Subscribed:
    """GetTelemetrySubscriptions' answer."""

    client_instance_id: uuid.UUID
    subscription_id: int
    push_interval_ms: int
    telemetry_max_bytes: int
    requested_metrics: list[str]
    accepted_compression_types: list[int] = field(default_factory=lambda: list(ACCEPTED_COMPRESSION_TYPES))


@dataclass(frozen=True)
class Push:
    client_instance_id: uuid.UUID
    subscription_id: int
    terminating: bool
    compression_type: int
    metrics: bytes


class ClientMetricsManager:
    def __init__(self, telemetry_max_bytes: int, store: "Callable[[], ClientMetricsConfigStore] | None" = None,
                 *, clock: Callable[[], float] = time.monotonic, max_instances: int = MAX_INSTANCES) -> None:
        self.telemetry_max_bytes = telemetry_max_bytes
        self._follower = StoreFollower(store, self.set_subscriptions, "Client metrics subscriptions", REFRESH_SECONDS)
        self._clock = clock
        self.max_instances = max_instances
        self.subscriptions: dict[str, Subscription] = {}
        self.version = 0  # bumped whenever the subscriptions change
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()

    def _now_ms(self) -> float:
        return self._clock() * 1000

    # -- subscriptions --

    def set_subscriptions(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        subscriptions = {}
        for name, props in stored.items():
            try:
                subscriptions[name] = Subscription.from_configs(name, props)
            except KafkaError as exc:
                log.warning("Ignoring client metrics subscription %r: %s", name, exc.message)
        if subscriptions != self.subscriptions:
            self.subscriptions = subscriptions
            self.version += 1
            log.info("Client metrics subscriptions now: %s", ", ".join(sorted(subscriptions)) or "none")

    def changed(self) -> None:
        """Something changed the stored subscriptions: re-read them now."""
        self._follower.changed()

    async def refresh(self) -> None:
        await self._follower.refresh()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep the subscriptions in step with the store (loaded before the broker accepts
        clients), forget clients gone quiet."""
        await self._follower.run(every_round=self.expire, task_status=task_status)

    # -- instances --

    def _matching(self, metadata: ClientMetadata) -> tuple[tuple[str, ...], int]:
        metrics: set[str] = set()
        interval = DEFAULT_INTERVAL_MS
        for subscription in self.subscriptions.values():
            if metadata.matches(subscription.patterns):
                metrics |= subscription.metrics
                interval = min(interval, subscription.interval_ms)
        if ALL_METRICS in metrics:
            metrics = {ALL_METRICS}
        return tuple(sorted(metrics)), interval

    def _new_instance(self, metadata: ClientMetadata, previous: ClientInstance | None) -> ClientInstance:
        metrics, interval = self._matching(metadata)
        instance = ClientInstance(metadata, subscription_id(metrics, interval, metadata.client_instance_id),
                                  self.version, metrics, interval)
        if previous is not None:
            # As Kafka, re-evaluating the subscriptions starts the instance afresh (its request
            # times, terminating flag and last error); only its latest metrics are kept.
            instance.snapshot = previous.snapshot
        return instance

    def _instance(self, metadata: ClientMetadata, now_ms: float) -> ClientInstance:
        instance_id = metadata.client_instance_id
        instance = self.instances.get(instance_id)
        if instance is None or instance.subscription_version < self.version:
            instance = self._new_instance(metadata, instance)
            self.instances[instance_id] = instance
        self.instances.move_to_end(instance_id)
        while len(self.instances) > self.max_instances:
            self.instances.popitem(last=False)
        instance.expires_ms = now_ms + max(MIN_EXPIRY_MS, 3 * instance.push_interval_ms)
        return instance

    def _new_instance_id(self) -> uuid.UUID:
        while True:
            candidate = uuid.uuid4()
            if candidate not in self.instances and candidate.int != 0 and candidate.int != 1:
                return candidate

    def expire(self) -> None:
        now_ms = self._now_ms()
        for instance_id in [i for i, instance in self.instances.items() if instance.expires_ms <= now_ms]:
            del self.instances[instance_id]

    # -- the two requests --

    def get_subscriptions(self, metadata: ClientMetadata) -> Subscribed:
        """Raises KafkaError(THROTTLING_QUOTA_EXCEEDED) when asked again within the push
        interval (unless the last push failed on the subscription or its compression)."""
        if metadata.client_instance_id.int == 0:
            metadata = _with_instance_id(metadata, self._new_instance_id())
        now_ms = self._now_ms()
        instance = self._instance(metadata, now_ms)
        retry_allowed = instance.last_error in RETRY_AT_ONCE
        if not instance.may_get(now_ms) and not retry_allowed:
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                             f"Request from the client [{metadata.client_instance_id}] arrived before the next push "
                             "interval time")
        instance.last_error = ErrorCode.NONE
        return Subscribed(metadata.client_instance_id, instance.subscription_id, instance.push_interval_ms,
                          self.telemetry_max_bytes, list(instance.metrics))

    async def push(self, metadata: ClientMetadata, push: Push) -> None:
        """Accept a push (its metrics become the instance's snapshot) or raise KafkaError."""
        if push.client_instance_id.int in (0, 1):  # Kafka's reserved ids (ZERO_UUID, METADATA_TOPIC_ID)
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid request from the client [{push.client_instance_id}], "
                                                        "invalid client instance id")
        now_ms = self._now_ms()
        instance = self._instance(metadata, now_ms)
        try:
            self._check_push(instance, push, now_ms)
        except KafkaError as exc:
            instance.last_error = exc.code
            raise
        finally:
            instance.terminating = push.terminating
        if push.metrics:
            try:
                instance.snapshot = await self._decoded(push)
                self._trim_snapshots()
            except KafkaError as exc:
                instance.last_error = exc.code
                log.warning("Telemetry pushed by client instance %s (client id %r) not accepted: %s",
                            push.client_instance_id, metadata.client_id, exc.message)
                raise
        instance.last_error = ErrorCode.NONE

    def _check_push(self, instance: ClientInstance, push: Push, now_ms: float) -> None:
        client = push.client_instance_id
        if instance.terminating:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Client [{client}] sent the previous request with state "
                                                        "terminating to TRUE, can not accept any requests after that")
        if not instance.may_push(now_ms) and not push.terminating:
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                             f"Request from the client [{client}] arrived before the next push interval time")
        if push.subscription_id != instance.subscription_id:
            raise KafkaError(ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                             f"Unknown client subscription id for the client [{client}]")
        if push.compression_type not in KNOWN_COMPRESSION_TYPES:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                             f"Unknown compression type [{push.compression_type}] is received in telemetry request "
                             f"from [{client}]")
        if len(push.metrics) > self.telemetry_max_bytes:
            raise KafkaError(ErrorCode.TELEMETRY_TOO_LARGE, f"Telemetry request from [{client}] is larger than the "
                                                            f"maximum allowed size [{self.telemetry_max_bytes}]")

    async def _decoded(self, push: Push) -> Snapshot:
        if push.compression_type == 0 and len(push.metrics) < OFF_LOOP_BYTES:
            return self._snapshot(push)
        return await trio.to_thread.run_sync(self._snapshot, push)

    def _snapshot(self, push: Push) -> Snapshot:
        payload = self._decompressed(push)
        try:
            decoded = decode_metrics_data(payload)
        except ProtobufError as exc:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"The pushed metrics are not OTLP MetricsData: {exc}") from None
        return Snapshot(time.time(), tuple(decoded.points), decoded.resource, decoded.dropped)

    def _decompressed(self, push: Push) -> bytes | bytearray:
        if push.compression_type == 0:
            return push.metrics
        try:
            return validation.decompress_bounded(push.compression_type, push.metrics, self.telemetry_max_bytes)
        except validation.DecompressedTooLarge:
            raise KafkaError(ErrorCode.TELEMETRY_TOO_LARGE, f"The pushed metrics decompress to more than "
                             f"telemetry.max.bytes ({self.telemetry_max_bytes})") from None
        except Exception as exc:  # each codec library raises its own errors for corrupt data
            raise KafkaError(ErrorCode.INVALID_RECORD, f"The pushed metrics do not decompress: {exc}") from None

    def _trim_snapshots(self) -> None:
        kept = sum(len(i.snapshot.points) for i in self.instances.values() if i.snapshot is not None)
        for instance in list(self.instances.values()):
            if kept <= MAX_KEPT_POINTS:
                return
            if instance.snapshot is not None:
                kept -= len(instance.snapshot.points)
                instance.snapshot = None

    def snapshots(self) -> list[tuple[ClientMetadata, Snapshot]]:
        """The latest push of every client instance still known, oldest client first."""
        self.expire()
        return [(instance.metadata, instance.snapshot) for instance in self.instances.values()
                if instance.snapshot is not None]


def _with_instance_id(metadata: ClientMetadata, instance_id: uuid.UUID) -> ClientMetadata:
    return ClientMetadata(instance_id, metadata.client_id, metadata.software_name, metadata.software_version,
                          metadata.source_address, metadata.source_port)
