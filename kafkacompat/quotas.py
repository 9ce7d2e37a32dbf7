"""Enforced client quotas (KIP-13 byte rates, KIP-124 request percentage, KIP-219 throttling).

The quotas are those AlterClientQuotas stores (controller/client_quotas.py: ``producer_byte_rate``,
``consumer_byte_rate``, ``request_percentage`` per user / client id and their defaults). Each
quota type resolves a request's (user, client id) as Kafka's DefaultQuotaCallback does, first
match wins, and the match decides which requests share one rate sensor::

    1 /config/users/<user>/clients/<client-id>   sensor (user, client-id)
    2 /config/users/<user>/clients/<default>     sensor (user, client-id)
    3 /config/users/<user>                       sensor (user)
    4 /config/users/<default>/clients/<client-id>
    5 /config/users/<default>/clients/<default>  sensor (user, client-id)
    6 /config/users/<default>                    sensor (user)
    7 /config/clients/<client-id>
    8 /config/clients/<default>                  sensor (client-id)

A sensor is Kafka's Rate over ``quota.window.num`` samples of ``quota.window.size.seconds``: the
sum of the live samples divided by the time they span, which is never taken as less than
``quota.window.num - 1`` whole windows. A request that takes the rate over its quota is throttled
for (rate - quota) / quota x that time span (QuotaUtils.throttleTime): the response carries
``throttle_time_ms`` at once and the connection reads nothing more from the client until the
time has passed (KIP-219); a client too old to honour throttle_time_ms (Produce < v6, Fetch < v8,
other APIs before their KIP-219 version) gets its response only after the throttle time, as Kafka.
A throttled Fetch is answered empty and its bytes are not counted, as Kafka's.

``request_percentage`` (KIP-124) is the share of one thread a client's requests use: Kafka counts
each request's time on a request-handler thread; here it is the time the event loop spends running
the request's handler, its task steps between suspensions (a long-polling Fetch or an acks=all
Produce counts only while it runs, as Kafka's purgatory time does not count), measured by a Trio
instrument (``RequestTimer``) installed only while some request quota exists. The throttle time
of a request quota is at most one window (ClientRequestQuotaManager).

``controller_mutation_rate`` (KIP-599) limits the partitions a client creates, adds or deletes per
second (CreateTopics, CreatePartitions, DeleteTopics). Its sensor is Kafka's TokenBucket: a burst of
quota x ``quota.window.num`` x ``quota.window.size.seconds`` mutations, refilled at the quota.
From CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 the quota is strict: a topic is
refused with THROTTLING_QUOTA_EXCEEDED while the bucket is empty (the one that empties it is
allowed, so a large topic is never refused forever); older versions are recorded and throttled
only. The throttle time is what the bucket owes, over the quota.

Replication throttles (``ReplicationQuota``, Kafka's ReplicationQuotaManager, one for the leader
side and one for the follower side of this broker) hold back the copying of chosen replicas, so a
partition reassignment does not starve clients. A topic's ``leader.replication.throttled.replicas``
/ ``follower.replication.throttled.replicas`` name them (``*``: every partition of the topic, or
``partition:brokerId`` entries, of which a broker takes those naming itself); the dynamic broker
configs ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` bound the
bytes per second of all of them together, measured by a SimpleRate over
``replication.quota.window.num`` windows of ``replication.quota.window.size.seconds``. A leader
answers a follower's fetch of a throttled partition empty while its rate is over the bound, and a
follower leaves such partitions out of its fetches while its own is; a replica in the ISR is never
held back (Kafka: it would thrash the ISR), and partitions not named are never held back at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import trio

from kafkacompat.controller.client_quotas import CLIENT_ID, IP, USER, QuotaEntity
from kafkacompat.controller.store import StoreError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.controller.client_quotas import ClientQuotaStore

log = logging.getLogger("kafkacompat.quotas")

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"
CONNECTION_CREATION = "connection_creation_rate"
QUOTA_TYPES = (PRODUCE, FETCH, REQUEST)
DEFAULT = object()            # the <default> entity name
REFRESH_SECONDS = 1.0         # how often the stored quotas are re-read (other brokers may change them)
SENSOR_EXPIRY_SECONDS = 3600  # Kafka drops a client's quota sensors after an hour without use


@dataclass(slots=True)
class Rate:
    """Kafka's Rate over a SampledStat: ``samples`` windows of ``window`` seconds each."""

    samples: int
    window: float
    starts: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    last_used: float = 0.0

    def _purge(self, now: float) -> None:
        expire = self.samples * self.window
        while self.starts and now - self.starts[0] >= expire:
            self.starts.pop(0)
            self.values.pop(0)

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        self.last_used = now
        if not self.starts or now - self.starts[-1] >= self.window:
            self.starts.append(now)
            self.values.append(0.0)
            if len(self.starts) > self.samples:
                self.starts.pop(0)
                self.values.pop(0)
        self.values[-1] += value

    def span(self, now: float) -> float:
        """Rate.windowSize: the time the samples cover, at least samples - 1 whole windows."""
        self._purge(now)
        elapsed = now - (self.starts[0] if self.starts else now)
        full_windows = int(elapsed / self.window)
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window
        return max(elapsed, 0.001)   # Kafka's 1 ms floor: one sample, at its very start, spans nothing

    def measure(self, now: float) -> float:
        span = self.span(now)   # purges the expired samples first: they must not be summed
        return sum(self.values) / span


class SimpleRate(Rate):
    """Kafka's SimpleRate (the replication quotas' stat): the samples divided by the time since
    the oldest one started, at least one window. Unlike Rate it assumes no quiet history, so
    the first bytes of a throttled copy already count at their full weight."""

    __slots__ = ()

    def span(self, now: float) -> float:
        self._purge(now)
        return max(now - (self.starts[0] if self.starts else now), self.window)


def throttled_partitions(value: str, node_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas value names for this broker; None for ``*`` (all)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == ["*"]:
        return None
    partitions = set()
    for item in items:
        partition, _, broker = item.partition(":")
        try:
            if int(broker) == node_id:
                partitions.add(int(partition))
        except ValueError:
            continue   # refused when altered (config.throttled_replica_list); a stray entry throttles nothing
    return frozenset(partitions)


class ReplicationQuota:
    """One side's replication throttle (see the module docstring). ``bound`` is read at each
    check, so a changed dynamic rate applies at once; so is the topic's config."""

    def __init__(self, name: str, replicas_key: str, node_id: int, bound: Callable[[], int],
                 samples: int, window: float) -> None:
        self.name = name   # "LeaderReplication" / "FollowerReplication", as Kafka's metrics group
        self.replicas_key = replicas_key
        self.node_id = node_id
        self.bound = bound
        self.rate = SimpleRate(samples, window)
        self._parsed: dict[str, tuple[str, frozenset[int] | None]] = {}   # topic -> (value, its partitions)

    def is_throttled(self, topic: "TopicInfo | None", index: int) -> bool:
        value = topic.configs.get(self.replicas_key) if topic is not None else None
        if not value:
            return False
        cached = self._parsed.get(topic.name)
        if cached is None or cached[0] != value:
            cached = self._parsed[topic.name] = (value, throttled_partitions(value, self.node_id))
        return cached[1] is None or index in cached[1]

    def exceeded(self, now: float) -> bool:
        return self.rate.measure(now) > self.bound()

    def record(self, size: int, now: float) -> None:
        self.rate.record(size, now)

    def measure(self, now: float) -> float:
        return self.rate.measure(now)


def rate_throttle_ms(rate: Rate, bound: float, now: float, max_throttle_ms: int | None = None) -> int:
    """QuotaUtils.throttleTime: how long to wait for the rate to come back to ``bound`` (0 within it)."""
    observed = rate.measure(now)
    if observed <= bound:
        return 0
    throttle_ms = round((observed - bound) / bound * rate.span(now) * 1000)
    return throttle_ms if max_throttle_ms is None else min(throttle_ms, max_throttle_ms)


def _name(entries: dict, kind: str):
    if kind not in entries:
        return None
    return DEFAULT if entries[kind] is None else entries[kind]


class QuotaType:
    """One quota type's configured quotas and its clients' sensors (Kafka's ClientQuotaManager)."""

    def __init__(self, key: str, samples: int, window: float, max_throttle_ms: int | None = None) -> None:
        self.key = key
        self.samples = samples
        self.window = window
        self.max_throttle_ms = max_throttle_ms
        self.quotas: dict[tuple, float] = {}
        self.sensors: dict[tuple[str, str], Rate] = {}

    def set_quotas(self, quotas: dict[tuple, float]) -> None:
        if quotas != self.quotas:
            log.info("%s quotas now: %s", self.key, {_describe(k): v for k, v in quotas.items()} or "none")
        self.quotas = quotas

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(the sensor's tags, the quota) of the first matching entity, None when none applies."""
        quotas = self.quotas
        if not quotas:
            return None
        for key, tags in (((user, client_id), (user, client_id)), ((user, DEFAULT), (user, client_id)),
                          ((user, None), (user, "")), ((DEFAULT, client_id), (user, client_id)),
                          ((DEFAULT, DEFAULT), (user, client_id)), ((DEFAULT, None), (user, "")),
                          ((None, client_id), ("", client_id)), ((None, DEFAULT), ("", client_id))):
            bound = quotas.get(key)
            if bound is not None:
                return tags, bound
        return None

    def record(self, user: str, client_id: str, value: float, now: float) -> int:
        """Record the value and return the throttle time in ms (0 within the quota)."""
        resolved = self.resolve(user, client_id)
        if resolved is None:
            return 0
        tags, bound = resolved
        rate = self.sensors.get(tags)
        if rate is None:
            rate = self.sensors[tags] = Rate(self.samples, self.window)
        rate.record(value, now)
        return rate_throttle_ms(rate, bound, now, self.max_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now: float) -> None:
        resolved = self.resolve(user, client_id)
        if resolved is not None and resolved[0] in self.sensors:
            self.sensors[resolved[0]].record(-value, now)

    def expire_sensors(self, now: float) -> None:
        for tags in [t for t, rate in self.sensors.items() if now - rate.last_used > SENSOR_EXPIRY_SECONDS]:
            del self.sensors[tags]


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket stat: ``tokens`` refill at ``rate`` per second up to ``burst``; a
    recording takes tokens and may leave the bucket owing (negative)."""

    rate: float
    burst: float
    tokens: float
    updated: float
    last_used: float = 0.0

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def take(self, value: float, now: float) -> None:
        self.refill(now)
        self.last_used = now
        self.tokens -= value

    def throttle_ms(self, now: float) -> int:
        self.refill(now)
        return 0 if self.tokens >= 0 else round(-self.tokens / self.rate * 1000)


class MutationQuotaType(QuotaType):
    """``controller_mutation_rate``: one TokenBucket per resolved client (ControllerMutationQuotaManager)."""

    def bucket(self, user: str, client_id: str, now: float) -> TokenBucket | None:
        resolved = self.resolve(user, client_id)
        if resolved is None:
            return None
        tags, bound = resolved
        burst = bound * self.samples * self.window
        bucket = self.sensors.get(tags)
        if bucket is None:
            bucket = self.sensors[tags] = TokenBucket(bound, burst, burst, now, now)
        elif bucket.rate != bound:   # the quota changed: refill at the new rate from here on
            bucket.refill(now)
            bucket.rate, bucket.burst, bucket.tokens = bound, burst, min(bucket.tokens, burst)
        return bucket


class MutationBudget:
    """One admin request's view of its client's mutation quota: ``admit`` says whether a topic's
    mutations may go ahead (recording them), ``throttle_ms`` what the request is throttled."""

    def __init__(self, bucket: TokenBucket | None, strict: bool) -> None:
        self.bucket = bucket
        self.strict = strict

    def admit(self, mutations: int) -> bool:
        if self.bucket is None or mutations <= 0:
            return True
        now = trio.current_time()
        if self.strict and self.bucket.throttle_ms(now) > 0:
            return False
        self.bucket.take(mutations, now)
        return True

    def throttle_ms(self) -> int:
        return 0 if self.bucket is None else self.bucket.throttle_ms(trio.current_time())


class ConnectionRateQuotas:
    """Kafka's connection creation rates (KIP-612, ConnectionQuotas): ``max.connection.creation.rate``
    for the broker (the inter-broker listener is exempt when there are others) and per listener
    (``listener.name.<listener>.max.connection.creation.rate``) delay the acceptor, so new clients
    wait in the listen backlog; ``connection_creation_rate`` per client address (AlterClientQuotas
    on an ``ip`` entity or the default ip) refuses a connection over it, which is closed after the
    throttle time so that the client does not reconnect at once. A refused connection is not
    counted in any rate. Delays are at most one quota window, as Kafka's."""

    def __init__(self, samples: int, window: float) -> None:
        self.samples, self.window = samples, window
        self.max_throttle_ms = round(window * 1000)
        self.broker = Rate(samples, window)
        self.listeners: dict[str, Rate] = {}
        self.ip_quotas: dict[object, float] = {}   # address or DEFAULT -> connections per second
        self.ip_sensors: dict[str, Rate] = {}

    def set_ip_quotas(self, quotas: dict[object, float]) -> None:
        if quotas != self.ip_quotas:
            log.info("connection_creation_rate quotas now: %s",
                     {("<default>" if ip is DEFAULT else ip): v for ip, v in quotas.items()} or "none")
            for ip in [ip for ip in self.ip_sensors if self._ip_quota(ip, quotas) is None]:
                del self.ip_sensors[ip]
        self.ip_quotas = quotas

    @staticmethod
    def _ip_quota(ip: str, quotas: dict[object, float]) -> float | None:
        return quotas.get(ip, quotas.get(DEFAULT))

    def accept_delay_ms(self, listener: str, listener_bound: float, broker_bound: float, exempt: bool,
                        now: float) -> int:
        """Record a new connection on ``listener``; the time the acceptor waits before taking it."""
        delay = 0
        if not exempt:
            self.broker.record(1.0, now)
            delay = rate_throttle_ms(self.broker, broker_bound, now, self.max_throttle_ms)
        rate = self.listeners.get(listener)
        if rate is None:
            rate = self.listeners[listener] = Rate(self.samples, self.window)
        rate.record(1.0, now)
        return max(delay, rate_throttle_ms(rate, listener_bound, now, self.max_throttle_ms))

    def ip_throttle_ms(self, ip: str, listener: str, exempt: bool, now: float) -> int:
        """Record a connection from ``ip``; over its quota, the throttle time, and the connection is
        taken out of every rate again (it is refused)."""
        bound = self._ip_quota(ip, self.ip_quotas)
        if bound is None:
            return 0
        rate = self.ip_sensors.get(ip)
        if rate is None:
            rate = self.ip_sensors[ip] = Rate(self.samples, self.window)
        rate.record(1.0, now)
        throttle = rate_throttle_ms(rate, bound, now, self.max_throttle_ms)
        if throttle:
            rate.record(-1.0, now)
            self.listeners[listener].record(-1.0, now)
            if not exempt:
                self.broker.record(-1.0, now)
        return throttle

    def expire_sensors(self, now: float) -> None:
        for ip in [ip for ip, rate in self.ip_sensors.items() if now - rate.last_used > SENSOR_EXPIRY_SECONDS]:
            del self.ip_sensors[ip]


def _describe(key: tuple) -> str:
    user, client = key
    parts = []
    if user is not None:
        parts.append(f"user={'<default>' if user is DEFAULT else user}")
    if client is not None:
        parts.append(f"client-id={'<default>' if client is DEFAULT else client}")
    return ",".join(parts)


class RequestTimer(trio.abc.Instrument):
    """Adds up the time each timed task runs (its steps between suspensions): what a request's
    handler costs the event loop, as Kafka's request-handler thread time."""

    def __init__(self) -> None:
        self.running: dict[trio.lowlevel.Task, float] = {}   # the timed tasks' time so far
        self._step_start = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self.running:
            self._step_start = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self.running:
            self.running[task] += time.perf_counter() - self._step_start

    def start(self) -> trio.lowlevel.Task:
        """Time the current task from here on (called inside its step: that step counts from now;
        one task runs at a time, so the step start is this task's)."""
        task = trio.lowlevel.current_task()
        self.running[task] = 0.0
        self._step_start = time.perf_counter()
        return task

    def stop(self, task: trio.lowlevel.Task) -> float:
        """The seconds the task ran since ``start`` (called inside its step, which counts so far)."""
        return self.running.pop(task, 0.0) + time.perf_counter() - self._step_start


class ClientQuotaManager:
    """The produce, fetch and request quota types, fed from the metadata store's quotas."""

    def __init__(self, config: "BrokerConfig", store: "Callable[[], ClientQuotaStore]") -> None:
        self.store = store   # called at each refresh: the single node's store exists once its data dir is open
        samples, window = config.quota_window_num, float(config.quota_window_size_seconds)
        self.types = {key: QuotaType(key, samples, window, max_throttle_ms=round(window * 1000) if key == REQUEST
                                     else None) for key in QUOTA_TYPES}
        self.produce, self.fetch, self.request = (self.types[k] for k in QUOTA_TYPES)
        self.mutation = self.types[MUTATION] = MutationQuotaType(MUTATION, samples, window)
        self.connections = ConnectionRateQuotas(samples, window)
        self.timer: RequestTimer | None = None   # installed while a request_percentage quota exists
        self._nudge = trio.Event()

    def apply(self, stored: dict[QuotaEntity, dict[str, float]]) -> None:
        by_type: dict[str, dict[tuple, float]] = {key: {} for key in self.types}
        ip_quotas: dict[object, float] = {}
        for entity, values in stored.items():
            entries = entity.entries
            if IP in entries:
                if CONNECTION_CREATION in values:
                    ip_quotas[_name(entries, IP)] = values[CONNECTION_CREATION]
                continue
            if USER not in entries and CLIENT_ID not in entries:
                continue
            key = (_name(entries, USER), _name(entries, CLIENT_ID))
            for quota_key, value in values.items():
                if quota_key in by_type:
                    by_type[quota_key][key] = value
        for key, quotas in by_type.items():
            self.types[key].set_quotas(quotas)
        self.connections.set_ip_quotas(ip_quotas)
        self._time_requests(bool(by_type[REQUEST]))

    def _time_requests(self, wanted: bool) -> None:
        if wanted and self.timer is None:
            self.timer = RequestTimer()
            trio.lowlevel.add_instrument(self.timer)
        elif not wanted and self.timer is not None:
            trio.lowlevel.remove_instrument(self.timer)
            self.timer = None

    async def refresh(self) -> None:
        self.apply(await self.store().read_all())

    def changed(self) -> None:
        """This broker altered quotas: re-read them now rather than at the next refresh."""
        self._nudge.set()

    async def run(self) -> None:
        """Re-read the stored quotas every REFRESH_SECONDS (or when nudged); expire idle sensors."""
        warned = False
        while True:
            try:
                await self.refresh()
                warned = False
            except Exception as exc:   # a store outage, or a bug: the quotas stay as they were
                if not warned:
                    log.warning("Could not read the client quotas from the metadata store (%s); retrying", exc,
                                exc_info=not isinstance(exc, StoreError))
                    warned = True
            now = trio.current_time()
            for quota_type in self.types.values():
                quota_type.expire_sensors(now)
            self.connections.expire_sensors(now)
            with trio.move_on_after(REFRESH_SECONDS):
                await self._nudge.wait()
            self._nudge = trio.Event()
