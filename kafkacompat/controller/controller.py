"""The replicated cluster's control plane, on the MetadataStore interface (one code path for
ZooKeeper and the embedded store).

Layout of the store, as Kafka's ZooKeeper mode (ZkData.scala), JSON values:

  /cluster/id                                    {"version":"1","id":...}
  /brokers/ids/<id>                   ephemeral  {"version":5,"host","port","rack","endpoints",...}
  /controller                         ephemeral  {"version":1,"brokerid","timestamp"}
  /controller_epoch                              "<n>", bumped by every newly elected controller
  /brokers/topics/<t>                            {"version":3,"partitions":{"0":[1,2]},"topic_id":...}
  /brokers/topics/<t>/partitions/<p>/state       {"version":1,"leader","leader_epoch","isr",
                                                  "controller_epoch"}; its node version is the
                                                  partition epoch (compare-and-set)
  /config/topics/<t>                             {"version":1,"config":{...}}
  /admin/delete_topics/<t>                       deletion requested (the controller does it)
  /kafkacompat/shutting_down/<id>     ephemeral  controlled shutdown in progress (Kafka: an RPC)

Every broker runs a ``ClusterMember``: it registers itself, takes part in the controller
election, and keeps a ``MetadataCache`` (the TopicRegistry the handlers read, plus brokers,
controller and partition states) by re-reading the store whenever a watch nudges it. The member
that holds /controller also reconciles: partition states for new partitions, leader election
when a leader dies or shuts down (from the ISR; from any live replica only with
unclean.leader.election.enable), dead replicas out of the ISR, topic deletion. Every write of a
partition state is a compare-and-set on its version, so a stale writer (an old controller, a
fenced leader) fails instead of overwriting newer state. Brokers apply the states of the
partitions they host through a PartitionStateSink (the ReplicaManager).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, TypeVar

import trio

from kafkacompat.controller import reassignment
from kafkacompat.controller.reassignment import Reassignment
from kafkacompat.controller.state import BrokerInfo, PartitionState
from kafkacompat.controller.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    StoreError,
    StoreUnavailableError,
    encode_json,
)
from kafkacompat.controller.topics import TopicInfo, decode_topic_id, encode_topic_id, new_cluster_id, topic_collision
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.identity import BrokerIdentity
    from kafkacompat.services import PartitionStateSink

log = logging.getLogger("kafkacompat.controller")

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
SHUTTING_DOWN = "/kafkacompat/shutting_down"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


# ---- replica assignment (Kafka's AdminUtils.assignReplicasToBrokers) -------------------------


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(brokers: dict[int, str]) -> list[int]:
    """Brokers ordered so that consecutive ones are on different racks: one from each rack in
    turn (racks and brokers sorted), as Kafka's getRackAlternatedBrokerList."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in sorted(brokers.items()):
        by_rack.setdefault(rack, []).append(broker_id)
    iterators = [iter(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    while len(result) < len(brokers):
        for it in iterators:
            nxt = next(it, None)
            if nxt is not None:
                result.append(nxt)
    return result


def assign_replicas(
    brokers: dict[int, str | None], partitions: int, replication_factor: int, *,
    start_index: int = -1, replica_shift: int = -1, start_partition: int = 0,
) -> dict[int, list[int]]:
    """Partition -> replicas (preferred leader first). Round-robin from a (random by default) start
    broker, each further replica shifted; rack-aware when every broker has a rack."""
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    racks = {b: r for b, r in brokers.items() if r}
    rack_aware = bool(racks) and len(racks) == len(brokers)
    ordered = rack_alternated(racks) if rack_aware else sorted(brokers)
    n = len(ordered)
    num_racks = len(set(racks.values())) if rack_aware else 1
    start = start_index if start_index >= 0 else random.randrange(n)
    shift = replica_shift if replica_shift >= 0 else random.randrange(n)
    result: dict[int, list[int]] = {}
    for partition in range(start_partition, start_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ordered[first]]
        if not rack_aware:
            replicas += [ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            racks_used = {racks[ordered[first]]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    candidate = ordered[_replica_index(first, shift * num_racks, k, n)]
                    k += 1
                    if ((racks[candidate] not in racks_used or len(racks_used) == num_racks)
                            and (candidate not in replicas or len(replicas) == n)):
                        replicas.append(candidate)
                        racks_used.add(racks[candidate])
                        break
        result[partition] = replicas
    return result


# ---- the cluster as read from the store --------------------------------------------------------


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    assignment: dict[int, tuple[int, ...]]
    configs: dict[str, str] = field(default_factory=dict)
    reassigning: dict[int, Reassignment] = field(default_factory=dict)  # partitions being moved


@dataclass
class ClusterView:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, TopicRecord] = field(default_factory=dict)
    # (topic, partition) -> (state JSON, node version)
    raw_states: dict[tuple[str, int], tuple[dict, int]] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    shutting_down: set[int] = field(default_factory=set)
    # path -> why it does not parse; topics and partitions that have no readable version
    malformed: dict[str, str] = field(default_factory=dict)
    unreadable_topics: set[str] = field(default_factory=set)
    unreadable: set[tuple[str, int]] = field(default_factory=set)

    def state(self, topic: str, partition: int) -> PartitionState | None:
        record = self.topics.get(topic)
        raw = self.raw_states.get((topic, partition))
        if record is None or raw is None or partition not in record.assignment:
            return None
        data, version = raw
        replicas = record.assignment[partition]
        return PartitionState(
            topic=topic, partition=partition, replicas=tuple(replicas), isr=tuple(data.get("isr", ())),
            leader=int(data.get("leader", -1)), leader_epoch=int(data.get("leader_epoch", 0)),
            partition_epoch=version, offline_replicas=tuple(r for r in replicas if r not in self.brokers),
        )

    def all_states(self) -> Iterable[PartitionState]:
        for topic, record in self.topics.items():
            for partition in sorted(record.assignment):
                state = self.state(topic, partition)
                if state is not None:
                    yield state


def broker_info_json(info: BrokerInfo, protocols: dict[str, str] | None = None) -> dict:
    """Kafka's /brokers/ids/<id> document: every listener in ``endpoints`` (``protocols`` maps
    listener names to security protocols); host/port are the first listener's."""
    endpoints = info.endpoints or (("PLAINTEXT", info.host, info.port),)
    return {
        "version": 5, "host": info.host, "port": info.port, "rack": info.rack, "jmx_port": -1,
        "endpoints": [f"{name}://{_bracketed(host)}:{port}" for name, host, port in endpoints],
        "listener_security_protocol_map": {name: (protocols or {}).get(name, "PLAINTEXT") for name, _, _ in endpoints},
        "timestamp": str(int(time.time() * 1000)),
    }


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


_ENDPOINT = re.compile(r"(?P<name>[^:/]+)://(?:\[(?P<ipv6>[^\]]*)\]|(?P<host>[^:]*)):(?P<port>[0-9]+)")


def _registered_broker(broker_id: int, data: dict) -> BrokerInfo:
    endpoints = []
    for text in data.get("endpoints") or ():
        match = _ENDPOINT.fullmatch(str(text))
        if match is None:
            raise MalformedNodeError(f"unreadable endpoint {text!r}")
        endpoints.append((match["name"], match["ipv6"] if match["ipv6"] is not None else match["host"],
                          int(match["port"])))
    return BrokerInfo(broker_id, str(data["host"]), int(data["port"]), data.get("rack"), tuple(endpoints))


class MalformedNodeError(ValueError):
    pass


_MALFORMED = (ValueError, TypeError, KeyError, AttributeError)


def _decode(found: tuple[bytes, int] | None) -> tuple[dict, int] | None:
    if found is None:
        return None
    data, version = found
    value = json.loads(data) if data else {}
    if not isinstance(value, dict):
        raise MalformedNodeError(f"expected a JSON object, found {type(value).__name__}")
    return value, version


def _config_values(config: dict) -> dict[str, str]:
    values = config.get("config", {})
    if not isinstance(values, dict):
        raise MalformedNodeError("'config' is not an object")
    return {str(k): str(v) for k, v in values.items()}


def _topic_record(name: str, topic: dict, configs: dict[str, str]) -> TopicRecord:
    partitions = topic.get("partitions", {})
    if not isinstance(partitions, dict):
        raise MalformedNodeError("'partitions' is not an object")
    assignment = {int(p): tuple(int(r) for r in replicas) for p, replicas in partitions.items()}
    topic_id = decode_topic_id(topic["topic_id"]) if topic.get("topic_id") else uuid.UUID(int=0)
    moving = {p: r for p in assignment if (r := reassignment.ongoing(topic, p)) is not None}
    return TopicRecord(name, topic_id, assignment, configs, moving)


def _checked_state(data: dict) -> dict:
    int(data["leader"]), int(data["leader_epoch"])
    if not isinstance(data["isr"], list):
        raise MalformedNodeError("'isr' is not a list")
    [int(r) for r in data["isr"]]
    return data


Changed = set[tuple[str, bool]]  # (path, children): what a watch said changed


async def read_cluster(store: MetadataStore, previous: ClusterView | None = None) -> ClusterView:
    """The whole cluster as the store has it: a few listings, then the nodes in two batched reads
    (topics and configs, then partition states). Used at start, after a reconnection or session
    loss (watches may have been missed) and as a periodic safety net; every other change is read
    with ``read_changes``.

    A node that does not parse (garbage written by hand or by a broken tool) is skipped and named
    in ``malformed``; a topic or partition state known from ``previous`` keeps its last good
    version, so a damaged node never makes a broker drop (and delete) what it hosts. Topics and
    partitions with no good version at all are listed as unreadable."""
    return await read_changes(store, previous or ClusterView(), None)


def _copy_view(view: ClusterView) -> ClusterView:
    return ClusterView(dict(view.brokers), view.controller_id, dict(view.topics), dict(view.raw_states),
                       set(view.deleting), set(view.shutting_down), dict(view.malformed),
                       set(view.unreadable_topics), set(view.unreadable))


def _forget_topic(view: ClusterView, name: str) -> None:
    view.topics.pop(name, None)
    view.unreadable_topics.discard(name)
    view.malformed.pop(topic_path(name), None)
    view.malformed.pop(f"{CONFIG_TOPICS}/{name}", None)
    for key in [k for k in view.raw_states if k[0] == name] + [k for k in view.unreadable if k[0] == name]:
        view.raw_states.pop(key, None)
        view.unreadable.discard(key)
        view.malformed.pop(state_path(*key), None)


async def read_changes(store: MetadataStore, previous: ClusterView, changed: Changed | None) -> ClusterView:
    """``previous`` with the nodes in ``changed`` read again (None: everything, as ``read_cluster``).
    A listing that changed reads the nodes it gained (a new topic: its node, config and every
    partition state) and drops those it lost; a topic node that changed reads the states of the
    partitions it gained; a partition state that changed reads that node only."""
    full = changed is None

    def dirty(path: str, children: bool = False) -> bool:
        return full or (path, children) in changed  # type: ignore[operator]

    view = ClusterView() if full else _copy_view(previous)
    known_topics = set(previous.topics) | previous.unreadable_topics
    if dirty(BROKER_IDS, True):
        broker_names = await store.children_or_empty(BROKER_IDS)
        for path in [p for p in view.malformed if p.startswith(BROKER_IDS + "/")]:
            del view.malformed[path]
        view.brokers = {}
    else:
        broker_names = []
    topic_names = set(await store.children_or_empty(TOPICS)) if dirty(TOPICS, True) else set(known_topics)
    if dirty(DELETE_TOPICS, True):
        view.deleting = set(await store.children_or_empty(DELETE_TOPICS))
    if dirty(SHUTTING_DOWN, True):
        view.shutting_down = {int(b) for b in await store.children_or_empty(SHUTTING_DOWN) if b.isdigit()}
    if not full:
        for name in known_topics - topic_names:
            _forget_topic(view, name)
    reread = sorted(name for name in topic_names if full or name not in known_topics
                    or dirty(topic_path(name)) or dirty(f"{CONFIG_TOPICS}/{name}"))
    first = await store.get_many(
        ([CONTROLLER] if dirty(CONTROLLER) else []) + [f"{BROKER_IDS}/{b}" for b in broker_names]
        + [topic_path(t) for t in reread] + [f"{CONFIG_TOPICS}/{t}" for t in reread]
    )

    def malformed(path: str, found: tuple[bytes, int] | None, exc: Exception) -> None:
        version = found[1] if found else -1
        view.malformed[path] = f"version {version}: {type(exc).__name__}: {exc}"

    if dirty(CONTROLLER):
        view.malformed.pop(CONTROLLER, None)
        try:
            controller = _decode(first[CONTROLLER])
            view.controller_id = int(controller[0]["brokerid"]) if controller else -1
        except _MALFORMED as exc:
            malformed(CONTROLLER, first[CONTROLLER], exc)
    for name in broker_names:
        path = f"{BROKER_IDS}/{name}"
        try:
            found = _decode(first[path])
            if found is not None:
                data = found[0]
                view.brokers[int(name)] = _registered_broker(int(name), data)
        except _MALFORMED as exc:
            malformed(path, first[path], exc)
    keys: list[tuple[str, int]] = []
    for name in reread:
        path, config_path = topic_path(name), f"{CONFIG_TOPICS}/{name}"
        before = view.topics.get(name)
        view.malformed.pop(path, None)
        view.malformed.pop(config_path, None)
        failing = path
        try:
            found = _decode(first[path])
            if found is None:
                _forget_topic(view, name)  # deleted between the listing and the read
                continue
            failing = config_path
            config = _decode(first[config_path])
            configs = _config_values(config[0] if config else {})
            failing = path
            record = _topic_record(name, found[0], configs)
        except _MALFORMED as exc:
            malformed(failing, first[failing], exc)
            if name in previous.topics:
                view.topics[name] = previous.topics[name]
            else:
                view.unreadable_topics.add(name)
            continue
        view.unreadable_topics.discard(name)
        if before is not None and before.topic_id != record.topic_id:
            _forget_topic(view, name)  # deleted and created again: nothing of the old one is kept
            before = None
        view.topics[name] = record
        for partition in set(before.assignment if before else ()) - set(record.assignment):
            view.raw_states.pop((name, partition), None)
            view.unreadable.discard((name, partition))
        keys += [(name, p) for p in record.assignment if full or before is None or p not in before.assignment]
    if not full:
        fresh = set(keys)
        keys += [(name, p) for name, record in view.topics.items() for p in record.assignment
                 if (name, p) not in fresh and dirty(state_path(name, p))]
    states = await store.get_many([state_path(name, p) for name, p in keys])
    for name, partition in keys:
        path = state_path(name, partition)
        view.malformed.pop(path, None)
        try:
            raw = _decode(states[path])
            view.unreadable.discard((name, partition))
            if raw is not None:
                view.raw_states[(name, partition)] = (_checked_state(raw[0]), raw[1])
            else:
                view.raw_states.pop((name, partition), None)
        except _MALFORMED as exc:
            malformed(path, states[path], exc)
            kept = previous.raw_states.get((name, partition))
            if kept is not None:
                view.raw_states[(name, partition)] = kept
            else:
                view.unreadable.add((name, partition))
    return view


# ---- the cache the handlers read ---------------------------------------------------------------


class MetadataCache:
    """The broker's view of the cluster, as last read from the store (never written to the data
    dir: the store is the truth): topics, live brokers, the controller and the state of every
    partition."""

    def __init__(self) -> None:
        self.by_name: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id = -1
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.shutting_down: set[int] = set()

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.by_id.get(topic_id)

    def colliding_topic(self, name: str) -> str | None:
        return topic_collision(name, self.by_name)

    def update_from(self, view: ClusterView) -> None:
        self.brokers = dict(view.brokers)
        self.controller_id = view.controller_id
        self.shutting_down = set(view.shutting_down)
        by_name: dict[str, TopicInfo] = {}
        for name, record in view.topics.items():
            if name in view.deleting:
                continue
            existing = self.by_name.get(name)
            rf = len(record.assignment.get(0, ())) if record.assignment else 0
            if existing is not None and existing.topic_id == record.topic_id:
                existing.partitions = len(record.assignment)
                existing.replication_factor = rf
                existing.configs = dict(record.configs)
                by_name[name] = existing
            else:
                by_name[name] = TopicInfo(name, record.topic_id, len(record.assignment), rf, dict(record.configs))
        self.by_name = by_name
        self.by_id = {t.topic_id: t for t in by_name.values()}
        self.states = {(s.topic, s.partition): s for s in view.all_states() if s.topic in by_name}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.states.get((topic, partition))


# ---- the controller's decisions (pure functions of a state and the live brokers) ---------------


def decide_state(
    state: PartitionState, alive: set[int], shutting_down: set[int], unclean: bool
) -> tuple[int, list[int]] | None:
    """The (leader, isr) a controller should write for a partition, or None when it is fine.

    Kafka's rules: a leader that is dead or shutting down is replaced by the first replica (in
    assignment order) that is in the ISR, alive and not shutting down (OfflinePartitionLeader /
    ControlledShutdownLeader selection); with none, by the first live replica when unclean
    leader election is enabled (its ISR then is just itself); otherwise the partition goes
    offline (leader -1, the ISR kept, so its last members can lead again when they return), except
    that a shutting-down leader with no successor keeps leading. Dead and shutting-down followers
    leave the ISR."""
    eligible = alive - shutting_down
    leader_ok = state.leader in eligible
    if leader_ok:
        isr = [r for r in state.isr if r in eligible or r == state.leader]
        if isr != list(state.isr):
            return state.leader, isr
        return None
    candidates = [r for r in state.replicas if r in state.isr and r in eligible]
    if candidates:
        leader = candidates[0]
        return leader, [r for r in state.isr if r in eligible]
    if state.leader in alive:  # shutting down, nobody to take over: keep leading for now
        isr = [r for r in state.isr if r in eligible or r == state.leader]
        return (state.leader, isr) if isr != list(state.isr) else None
    if unclean:
        live = [r for r in state.replicas if r in eligible]
        if live:
            return live[0], [live[0]]
    if state.leader == -1:
        return None
    return -1, list(state.isr)


# ---- one broker's membership -------------------------------------------------------------------


_T = TypeVar("_T")


def _answered_as_kafka_error(action: str):
    """A request path's failure as the Kafka error its client can act on, logged with what the
    broker was doing (``action``, formatted with the call's arguments): the store unreachable is
    REQUEST_TIMED_OUT (retriable: the change may or may not have been made), anything else
    UNKNOWN_SERVER_ERROR, as Kafka's ApiError.fromThrowable. It never escapes to the connection."""
    def decorate(method: Callable[..., Awaitable[_T]]) -> Callable[..., Awaitable[_T]]:
        @functools.wraps(method)
        async def wrapper(self, *args, **kwargs) -> _T:
            try:
                return await method(self, *args, **kwargs)
            except KafkaError:
                raise
            except StoreUnavailableError as exc:
                doing = action.format(*args)
                log.warning("Broker %d: %s failed: %s", self.node_id, doing, exc)
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"{doing} failed: the metadata store is unavailable ({exc}); retry later") from exc
            except Exception as exc:
                doing = action.format(*args)
                log.exception("Broker %d: %s failed", self.node_id, doing)
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"{doing} failed: {type(exc).__name__}: {exc}") from exc
        return wrapper
    return decorate


class _Nudge:
    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


class AlterPartitionClient:
    """A leader's side of AlterPartition, straight to the store (the IsrClient of a cluster
    member's ReplicaManager)."""

    def __init__(self, store: MetadataStore, cache: MetadataCache, node_id: int) -> None:
        self.store = store
        self.cache = cache
        self.node_id = node_id

    async def alter_partition(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int] | tuple[int, ...]) -> PartitionState:
        """A leader's ISR change, compare-and-set on the partition epoch (Kafka's AlterPartition;
        in ZooKeeper mode leaders wrote the ISR the same way, conditioned on the znode version)."""
        path = state_path(topic, partition)
        found = await self.store.get_json(path)
        record = self.cache.by_name.get(topic)
        if found is None or record is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} has no state")
        data, version = found
        if int(data["leader"]) != self.node_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{topic}-{partition}: leader is {data['leader']}, not {self.node_id}")
        current_epoch = int(data["leader_epoch"])
        if leader_epoch < current_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"{topic}-{partition}: leader epoch {leader_epoch} < {current_epoch}")
        if leader_epoch > current_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                             f"{topic}-{partition}: leader epoch {leader_epoch} > {current_epoch}")
        if partition_epoch != version:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION,
                             f"{topic}-{partition}: partition epoch {partition_epoch}, store has {version}")
        known = self.cache.partition_state(topic, partition)
        replicas = known.replicas if known else ()
        isr = [int(r) for r in new_isr]
        if self.node_id not in isr or any(r not in replicas for r in isr):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{topic}-{partition}: bad ISR {isr} for replicas {replicas}")
        added = set(isr) - {int(r) for r in data["isr"]}
        ineligible = [r for r in added if r not in self.cache.brokers or r in self.cache.shutting_down]
        if ineligible:
            raise KafkaError(ErrorCode.INELIGIBLE_REPLICA, f"{topic}-{partition}: replicas {ineligible} are not eligible")
        payload = dict(data, isr=isr)
        try:
            new_version = await self.store.set(path, encode_json(payload), version)
        except BadVersionError:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"{topic}-{partition}: changed concurrently") from None
        except NoNodeError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} was deleted") from None
        return PartitionState(topic, partition, tuple(replicas), tuple(isr), self.node_id, current_epoch, new_version,
                              tuple(r for r in replicas if r not in self.cache.brokers))


class ClusterMember:
    """Registration, controller election, the metadata cache and the controller's reconciliation
    for one broker. The partition states of this broker go to ``sink``; ``endpoint`` is the
    advertised (host, port) it registers."""

    SYNC_COALESCE_SECONDS = 0.005
    RETRY_SECONDS = 0.5
    # A full re-read of the store now and then, as a safety net under the watches (which are
    # what keeps the view current; the full read after every reconnection covers missed ones).
    FULL_RESYNC_SECONDS = 600.0
    # Partition states per multi(): far under ZooKeeper's 1 MB request limit, and small enough to be
    # answered well within a session timeout on a loaded machine (a larger batch gains little).
    WRITE_BATCH = 100
    DEFAULT_TIMEOUT_SECONDS = 10.0

    def __init__(self, identity: "BrokerIdentity", config: "BrokerConfig", store: MetadataStore,
                 cache: MetadataCache, sink: "PartitionStateSink", endpoint: Callable[[], tuple[str, int]],
                 endpoints: Callable[[], tuple[tuple[str, str, int], ...]] = tuple) -> None:
        self.identity = identity
        self.endpoints = endpoints
        self.config = config
        self.store = store
        self.sink = sink
        self.endpoint = endpoint
        self.node_id = identity.node_id
        self.cache = cache
        self.isr = AlterPartitionClient(store, cache, self.node_id)
        self.view = ClusterView()
        self.is_controller = False
        self.controller_epoch = 0
        self._epoch_version = -1  # /controller_epoch's node version after our bump (the fence)
        self._nudge = _Nudge()
        self._watched: set[tuple[str, bool]] = set()
        self._changed: Changed = set()  # what the watches reported since the last step
        self._full = True  # the next step re-reads everything (start, reconnection, session loss)
        self.reads = 0  # steps that re-read everything (tests and logs)
        self._applied: dict[tuple[str, int], PartitionState] = {}
        self._apply_failures: dict[tuple[str, int], str] = {}  # partition -> why its state is not applied
        self._synced = trio.Event()
        self._step_lock = trio.Lock()
        self._stopping = False
        self._malformed: dict[str, str] = {}

    # ---- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        for path in (BROKER_IDS, TOPICS, DELETE_TOPICS, SHUTTING_DOWN, CONFIG_TOPICS):
            await self.store.ensure_path(path)
        self.identity.adopt_cluster_id(await self._cluster_id())
        self.store.add_session_listener(self._resync)
        self.store.add_reconnect_listener(self._resync)
        await self._watch(BROKER_IDS, children=True)
        await self._watch(TOPICS, children=True)
        await self._watch(DELETE_TOPICS, children=True)
        await self._watch(SHUTTING_DOWN, children=True)
        await self._watch(CONTROLLER)
        await self._register()
        await self._step()
        if self.view.unreadable_topics:
            log.warning("Broker %d: not deleting stray logs at start-up: the metadata of topics %s does not "
                        "parse, so which partitions this broker hosts is not known", self.node_id,
                        sorted(self.view.unreadable_topics))
        else:
            self.sink.delete_stray_logs(self._assigned_here(self.view))
        task_status.started()
        async with trio.open_nursery() as nursery:
            if self.config.auto_leader_rebalance_enable:
                nursery.start_soon(self._run_leader_rebalance)
            nursery.start_soon(self._run_periodic_resync)
            await self._run_sync()

    async def _run_sync(self) -> None:
        """Re-read the store whenever nudged. A failure (the store unreachable, a write refused, a
        bug) is logged once, with what it was, and retried after a pause until a sync succeeds: it
        never stops the broker, which keeps serving from the cache it has."""
        failure: str | None = None
        while True:
            await self._nudge.wait()
            await trio.sleep(self.SYNC_COALESCE_SECONDS)
            try:
                await self._step()
            except Exception as exc:
                described = f"{type(exc).__name__}: {exc}"
                if described != failure:
                    if isinstance(exc, StoreError):
                        log.warning("Broker %d: syncing the cluster metadata failed (%s); serving from the last "
                                    "known metadata and retrying every %g s", self.node_id, exc, self.RETRY_SECONDS)
                    else:
                        log.exception("Broker %d: syncing the cluster metadata failed; serving from the last "
                                      "known metadata and retrying every %g s", self.node_id, self.RETRY_SECONDS)
                failure = described
                await trio.sleep(self.RETRY_SECONDS)
                self._nudge.set()
                continue
            if failure is not None:
                log.info("Broker %d: cluster metadata in sync with the store again", self.node_id)
                failure = None
            if self._apply_failures:  # e.g. a full disk: try again without waiting for a change
                await trio.sleep(self.RETRY_SECONDS)
                self._nudge.set()

    def _resync(self) -> None:
        """After a session loss or a reconnection: watches may have missed changes, so the next
        step re-reads everything (as Kafka's controller and brokers do on a new session)."""
        self._full = True
        self._nudge.set()

    async def _run_periodic_resync(self) -> None:
        while True:
            await trio.sleep(self.FULL_RESYNC_SECONDS)
            self._resync()

    def _mark(self, path: str, *, children: bool = False) -> None:
        """A watch fired (or a write of ours changed ``path``): read it again at the next step."""
        self._changed.add((path, children))
        self._nudge.set()

    def settled(self) -> bool:
        """Nothing recorded to read and no step running (tests wait for it)."""
        return not self._changed and not self._full and not self._step_lock.locked()

    def _assigned_here(self, view: ClusterView) -> set[tuple[str, int]]:
        return {(name, partition) for name, record in view.topics.items()
                for partition, replicas in record.assignment.items() if self.node_id in replicas}

    async def _cluster_id(self) -> str:
        found = await self.store.get_json(CLUSTER_ID)
        if found is None:
            proposed = self.identity.cluster_id or new_cluster_id()
            try:
                await self.store.create(CLUSTER_ID, encode_json({"version": "1", "id": proposed}))
                return proposed
            except NodeExistsError:
                found = await self.store.get_json(CLUSTER_ID)
        assert found is not None
        return found[0]["id"]

    async def _watch(self, path: str, *, children: bool = False) -> bool:
        """Watch ``path`` (once); a new watch marks the path changed, so that it is read again
        after the watch is in place: a change between the last read and the watch is not lost."""
        if (path, children) in self._watched:
            return False
        await self.store.watch(path, functools.partial(self._mark, path, children=children), children=children)
        self._watched.add((path, children))  # only once registered: a failed one is tried again
        self._mark(path, children=children)
        return True

    async def _watch_nodes(self, paths: list[str]) -> None:
        """``_watch`` for many data nodes at once (a new topic's states): one batch for the store."""
        new = [path for path in paths if (path, False) not in self._watched]
        if not new:
            return
        await self.store.watch_many([(path, functools.partial(self._mark, path)) for path in new])
        for path in new:
            self._watched.add((path, False))
            self._mark(path)

    def broker_info(self) -> BrokerInfo:
        host, port = self.endpoint()
        return BrokerInfo(self.node_id, host, port, self.config.broker_rack, self.endpoints())

    async def _register(self) -> None:
        path = f"{BROKER_IDS}/{self.node_id}"
        try:
            await self.store.create(path, encode_json(broker_info_json(
                self.broker_info(), {listener.name: listener.protocol for listener in self.config.served_listeners})), ephemeral=True)
            log.info("Registered broker %d at %s", self.node_id, path)
        except NodeExistsError:
            owner = await self.store.ephemeral_owner(path)
            if owner != self.store.session_id:
                # Kafka refuses a second broker with the same id; after our own session expired
                # the old node may linger until the server notices, so retry.
                log.warning("Broker id %d is registered by another session; retrying", self.node_id)
                await trio.sleep(self.RETRY_SECONDS)
                self._mark(BROKER_IDS, children=True)

    async def _elect(self) -> None:
        found = await self.store.get_json(CONTROLLER)
        if found is None:
            payload = {"version": 1, "brokerid": self.node_id, "timestamp": str(int(time.time() * 1000))}
            try:
                await self.store.create(CONTROLLER, encode_json(payload), ephemeral=True)
            except NodeExistsError:
                self.is_controller = False
                return
            self.controller_epoch, self._epoch_version = await self._bump_controller_epoch()
            self.is_controller = True
            log.info("Broker %d is the controller (epoch %d)", self.node_id, self.controller_epoch)
            return
        mine = int(found[0]["brokerid"]) == self.node_id
        if mine:
            try:
                mine = await self.store.ephemeral_owner(CONTROLLER) == self.store.session_id
            except NoNodeError:
                mine = False
        if self.is_controller and not mine:
            log.info("Broker %d is no longer the controller", self.node_id)
        if mine and await self.store.exists(CONTROLLER_EPOCH) != self._epoch_version:
            # We hold /controller but the epoch moved (or we were fenced): take a new epoch.
            self.controller_epoch, self._epoch_version = await self._bump_controller_epoch()
            log.info("Broker %d is the controller (epoch %d)", self.node_id, self.controller_epoch)
        self.is_controller = mine

    async def _bump_controller_epoch(self) -> tuple[int, int]:
        """(new epoch, its node version)."""
        while True:
            found = await self.store.get_or_none(CONTROLLER_EPOCH)
            if found is None:
                try:
                    await self.store.create(CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            data, version = found
            epoch = int(data or b"0") + 1
            try:
                return epoch, await self.store.set(CONTROLLER_EPOCH, str(epoch).encode(), version)
            except BadVersionError:
                continue

    def _fence(self, ops: list[Op]) -> list[Op]:
        """A controller's writes carry a check of /controller_epoch's version (Kafka's ZooKeeper
        mode does the same multi-op check), so a deposed controller that has not noticed yet
        cannot overwrite what its successor decided."""
        if self.is_controller:
            return [Op.check(CONTROLLER_EPOCH, self._epoch_version), *ops]
        return ops

    async def _check_fenced(self) -> None:
        if self.is_controller and await self.store.exists(CONTROLLER_EPOCH) != self._epoch_version:
            log.warning("Broker %d was fenced: a newer controller epoch exists", self.node_id)
            self.is_controller = False

    async def _step(self) -> None:
        """One round: registration and election (both idempotent), read the store, reconcile if
        controller, then apply to this broker."""
        async with self._step_lock:
            await self._step_locked()

    async def _step_locked(self) -> None:
        full, changed = self._full, self._changed
        self._full, self._changed = False, set()
        try:
            view = await self._read(full, changed)
        except BaseException:
            self._full |= full  # not read: the next step tries again
            self._changed |= changed
            raise
        self.view = view  # kept even if a watch below cannot be set: what was read is not read again
        self._report_malformed(view)
        await self._watch_nodes([path for name, record in view.topics.items()
                                 for path in (topic_path(name), f"{CONFIG_TOPICS}/{name}",
                                              *(state_path(name, p) for p in record.assignment))])
        self.cache.update_from(view)
        await self._apply(view)
        self._synced.set()
        self._synced = trio.Event()

    async def _read(self, full: bool, changed: Changed) -> ClusterView:
        """Registration and election when they may have changed, the store's changes read into
        the view, and, on the controller, the reconciliation's writes read back."""
        if full or (BROKER_IDS, True) in changed:
            if await self.store.exists(f"{BROKER_IDS}/{self.node_id}") is None and not self._stopping:
                await self._register()
        was_controller = self.is_controller
        if full or (CONTROLLER, False) in changed:
            await self._elect()
        if self.is_controller and not was_controller:
            full = True  # a new controller starts from everything the store has, as Kafka's does
        if full:
            self.reads += 1
        view = await read_changes(self.store, self.view, None if full else changed)
        if self.is_controller:
            written = await self._reconcile(view)
            if written:
                try:
                    view = await read_changes(self.store, view, written)
                except BaseException:
                    self._changed |= written  # our writes are read back at the next step
                    raise
        return view

    def _report_malformed(self, view: ClusterView) -> None:
        """Each damaged node is logged once (again if it changes), not at every sync."""
        for path, reason in view.malformed.items():
            if self._malformed.get(path) != reason:
                log.error("Broker %d: ignoring the metadata node %s, which does not parse (%s); its last good "
                          "version is used if this broker has one. Fix or delete the node with a ZooKeeper "
                          "client.", self.node_id, path, reason)
        self._malformed = dict(view.malformed)

    async def wait_for_sync(self) -> None:
        """Wait until the next full sync has completed."""
        await self._synced.wait()

    @_answered_as_kafka_error("reading the cluster metadata from the store")
    async def refresh(self, changed: Changed | None = None) -> None:
        """Sync now, reading ``changed`` (after a write of ours, so the answer reflects it; the
        watch may not have fired yet) or by default the listings (brokers, topics, deletions,
        the controller): what a request checks names and live brokers against."""
        self._changed |= changed if changed is not None else {
            (BROKER_IDS, True), (TOPICS, True), (DELETE_TOPICS, True), (SHUTTING_DOWN, True), (CONTROLLER, False)}
        await self._step()

    # ---- the controller's reconciliation -------------------------------------------------------

    def _unclean_allowed(self, record: TopicRecord) -> bool:
        value = record.configs.get("unclean.leader.election.enable")
        if value is None:
            return bool(self.config.unclean_leader_election_enable)
        return value.strip().lower() == "true"

    async def _reconcile(self, view: ClusterView) -> Changed:
        """The controller's decisions for every partition, written in batches; returns the
        nodes written (or found changed under us), to be read back."""
        written: Changed = set()
        for name in sorted(view.deleting):
            await self._delete_topic_now(name)
            written |= {(TOPICS, True), (DELETE_TOPICS, True), (topic_path(name), False)}
        alive = set(view.brokers)
        creations: list[tuple[str, int, dict]] = []
        changes: list[tuple[PartitionState, dict, int, list[int]]] = []
        moves: list[tuple[PartitionState, dict, Reassignment]] = []
        for name, record in view.topics.items():
            if name in view.deleting:
                continue
            for partition, replicas in sorted(record.assignment.items()):
                raw = view.raw_states.get((name, partition))
                if (name, partition) in view.unreadable:
                    continue  # a state node that does not parse: neither overwritten nor acted on
                if raw is None:
                    live = [r for r in replicas if r in alive and r not in view.shutting_down]
                    if live:
                        creations.append((name, partition, {"version": 1, "leader": live[0], "leader_epoch": 0,
                                                            "isr": live, "controller_epoch": self.controller_epoch}))
                    continue
                state = view.state(name, partition)
                assert state is not None
                decision = decide_state(state, alive, view.shutting_down, self._unclean_allowed(record))
                if decision is not None:
                    changes.append((state, raw[0], *decision))
                elif partition in record.reassigning:
                    moves.append((state, raw[0], record.reassigning[partition]))
        written |= await self._create_states(creations)
        written |= (await self._write_states(changes))[0]
        for state, raw, moving in moves:
            if self.is_controller:
                written |= await self._advance_reassignment(state, raw, moving, alive - view.shutting_down)
        return written

    async def _create_states(self, creations: list[tuple[str, int, dict]]) -> Changed:
        """The first state of new partitions, a batch per multi() (fenced); a batch that fails
        (a node there already) is done one partition at a time."""
        written: Changed = set()
        for name in sorted({name for name, _, _ in creations}):
            await self.store.ensure_path(f"{topic_path(name)}/partitions")
        for start in range(0, len(creations), self.WRITE_BATCH):
            batch = creations[start:start + self.WRITE_BATCH]
            paths = {(state_path(name, p), False) for name, p, _ in batch}
            ops = [op for name, p, payload in batch
                   for op in (Op.create(state_path(name, p).rsplit("/", 1)[0]),
                              Op.create(state_path(name, p), encode_json(payload)))]
            try:
                await self.store.multi(self._fence(ops))
                written |= paths
                continue
            except (NodeExistsError, NoNodeError):
                pass
            except BadVersionError:
                await self._check_fenced()
                return written | paths
            for name, p, payload in batch:
                path = state_path(name, p)
                await self.store.ensure_path(path.rsplit("/", 1)[0])
                try:
                    await self.store.multi(self._fence([Op.create(path, encode_json(payload))]))
                except (NodeExistsError, NoNodeError):
                    pass
                except BadVersionError:
                    await self._check_fenced()
                    return written | paths
                written.add((path, False))
        return written

    async def _write_states(self, changes: list[tuple[PartitionState, dict, int, list[int]]]
                            ) -> tuple[Changed, set[tuple[str, int]]]:
        """New (leader, isr) of many partitions: a batch per multi(), each state compare-and-set on
        its version and the batch fenced by the controller epoch (Kafka's updateLeaderAndIsr).
        A batch refused because one of its partitions changed under us is written again one
        partition at a time. Returns the nodes to read back and the partitions written."""
        written: Changed = set()
        done: set[tuple[str, int]] = set()
        as_controller = self.is_controller

        def deposed() -> bool:  # fenced on the way: nothing more is written, unfenced least of all
            return as_controller and not self.is_controller

        for start in range(0, len(changes), self.WRITE_BATCH):
            batch = changes[start:start + self.WRITE_BATCH]
            paths = {(state_path(state.topic, state.partition), False) for state, _, _, _ in batch}
            written |= paths
            ops = [Op.set(state_path(state.topic, state.partition), self._state_payload(state, raw, leader, isr),
                          state.partition_epoch) for state, raw, leader, isr in batch]
            try:
                await self.store.multi(self._fence(ops))
            except (BadVersionError, NoNodeError):
                await self._check_fenced()
                if deposed():
                    break
                for state, raw, leader, isr in batch:
                    if deposed():
                        break
                    if await self._write_state(state, raw, leader, isr):
                        done.add((state.topic, state.partition))
                continue
            for state, _, leader, isr in batch:
                done.add((state.topic, state.partition))
                self._log_leader_change(state, leader, isr)
        return written, done

    def _state_payload(self, state: PartitionState, raw: dict, leader: int, isr: list[int]) -> bytes:
        epoch = state.leader_epoch + 1 if leader != state.leader else state.leader_epoch
        return encode_json(dict(raw, leader=leader, leader_epoch=epoch, isr=list(isr),
                                controller_epoch=self.controller_epoch))

    def _log_leader_change(self, state: PartitionState, leader: int, isr: list[int]) -> None:
        if leader != state.leader:
            log.info("%s-%d: leader %d -> %d (epoch %d), isr %s", state.topic, state.partition,
                     state.leader, leader, state.leader_epoch + 1, isr)

    async def _advance_reassignment(self, state: PartitionState, raw: dict, moving: Reassignment,
                                    eligible: set[int]) -> Changed:
        """Finish a reassignment whose target replicas have all joined the ISR: leadership into the
        target, then the replica list shrunk to it (Kafka's phase B)."""
        decision = reassignment.next_leadership(moving, state.leader, state.isr, eligible)
        if decision is None:
            return set()
        leader, isr = decision
        written: Changed = set()
        if (leader, isr) != (state.leader, list(state.isr)):
            written.add((state_path(state.topic, state.partition), False))
            if not await self._write_state(state, raw, leader, isr):
                return written
        found = await self.store.get_json(topic_path(state.topic))
        if found is None:
            return written
        written.add((topic_path(state.topic), False))
        data, version = found
        reassignment.complete(data, state.partition)
        try:
            await self.store.multi(self._fence([Op.set(topic_path(state.topic), encode_json(data), version)]))
        except (BadVersionError, NoNodeError):
            await self._check_fenced()
            self._nudge.set()
            return written
        log.info("%s-%d: reassignment to %s completed (leader %d)", state.topic, state.partition,
                 list(moving.target), leader)
        return written

    async def _write_state(self, state: PartitionState, raw: dict, leader: int, isr: list[int]) -> bool:
        path = state_path(state.topic, state.partition)
        try:
            await self.store.multi(self._fence([Op.set(path, self._state_payload(state, raw, leader, isr),
                                                       state.partition_epoch)]))
        except (BadVersionError, NoNodeError):
            await self._check_fenced()
            self._mark(path)  # somebody wrote first: re-read and decide again
            return False
        self._log_leader_change(state, leader, isr)
        return True

    async def _delete_topic_now(self, name: str) -> None:
        for path in (topic_path(name), f"{CONFIG_TOPICS}/{name}", f"{DELETE_TOPICS}/{name}"):
            try:
                await self.store.delete(path, recursive=True)
            except NoNodeError:
                pass
        log.info("Deleted topic %s", name)

    # ---- automatic preferred leader election (auto.leader.rebalance.enable) --------------------

    async def _run_leader_rebalance(self) -> None:
        interval = max(self.config.leader_imbalance_check_interval_seconds, 0.1)
        while True:
            await trio.sleep(interval)
            if not self.is_controller:
                continue
            try:
                await self.rebalance_leaders()
            except StoreError as exc:
                log.warning("Broker %d: automatic leader rebalance failed (%s); trying again in %g s",
                            self.node_id, exc, interval)
            except Exception:
                log.exception("Broker %d: automatic leader rebalance failed; trying again in %g s",
                              self.node_id, interval)

    async def rebalance_leaders(self) -> int:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for every broker whose share of partitions
        it should lead (first replica) but does not is above leader.imbalance.per.broker.percentage,
        move those partitions' leadership back to it when it is alive and in the ISR. Returns the
        number of partitions moved."""
        view = self.view
        eligible = set(view.brokers) - view.shutting_down
        by_preferred: dict[int, list[PartitionState]] = {}
        for state in view.all_states():
            if state.topic not in view.deleting and state.replicas:
                by_preferred.setdefault(state.replicas[0], []).append(state)
        ratio = self.config.leader_imbalance_per_broker_percentage / 100
        changes: list[tuple[PartitionState, dict, int, list[int]]] = []
        for preferred, states in by_preferred.items():
            if preferred not in eligible:
                continue
            imbalanced = [s for s in states if s.leader != preferred]
            if not imbalanced or len(imbalanced) / len(states) <= ratio:
                continue
            changes += [(state, view.raw_states[(state.topic, state.partition)][0], preferred, list(state.isr))
                        for state in imbalanced if preferred in state.isr]
        written, done = await self._write_states(changes)
        for path, children in written:
            self._mark(path, children=children)
        if done:
            log.info("Moved leadership of %d partition(s) back to their preferred replicas", len(done))
        return len(done)

    # ---- applying the view to this broker ------------------------------------------------------

    async def _apply(self, view: ClusterView) -> None:
        hosted: set[tuple[str, int]] = set()
        for state in list(self.cache.states.values()):
            if self.node_id not in state.replicas:
                continue
            key = (state.topic, state.partition)
            hosted.add(key)
            if self._applied.get(key) == state:
                continue
            self._applied[key] = state
            try:
                await self.sink.apply_partition_state(state)
            except Exception as exc:
                self._applied.pop(key, None)
                described = f"{type(exc).__name__}: {exc}"
                if self._apply_failures.get(key) != described:
                    log.exception("Applying %s-%d failed; retrying every %g s", state.topic, state.partition,
                                  self.RETRY_SECONDS)
                self._apply_failures[key] = described
                continue
            if self._apply_failures.pop(key, None) is not None:
                log.info("Applied %s-%d after all", state.topic, state.partition)
        unknown = view.unreadable | {k for k in self._applied if k[0] in view.unreadable_topics}
        for key in [k for k in self._apply_failures if k not in hosted]:
            del self._apply_failures[key]  # no longer this broker's to apply
        for key in [k for k in self._applied if k not in hosted and k not in unknown]:
            del self._applied[key]
            topic, partition = key
            await self.sink.remove_partition(topic, partition)
        for topic in self.cache.by_name.values():
            self.sink.refresh_topic_config(topic)

    # ---- requests from brokers and admin APIs --------------------------------------------------

    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self.cache.brokers)

    def _rack_map(self) -> dict[int, str | None]:
        return {b: info.rack for b, info in self.cache.brokers.items()}

    @_answered_as_kafka_error("creating topic {0}")
    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, list[int]] | None = None, *,
                           timeout: float = DEFAULT_TIMEOUT_SECONDS) -> TopicInfo:
        """Write the topic, then wait up to ``timeout`` seconds until every partition has a
        state: REQUEST_TIMED_OUT when it passes, as Kafka answers (the topic exists; its
        partitions get leaders when their replicas are alive)."""
        if await self.store.exists(f"{DELETE_TOPICS}/{name}") is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' is marked for deletion.")
        if assignment is None:
            assignment = assign_replicas(self._rack_map(), partitions, replication_factor)
        topic_id = uuid.uuid4()
        await self._write_config(name, configs)
        payload = {"version": 3, "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
                   "topic_id": encode_topic_id(topic_id), "adding_replicas": {}, "removing_replicas": {}}
        try:
            await self.store.create(topic_path(name), encode_json(payload))
        except NodeExistsError:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        log.info("Created topic %s (%d partitions, assignment %s)", name, len(assignment), assignment)
        self._mark(TOPICS, children=True)  # read at once, not when the watch's event comes
        await self._wait_or_time_out(
            lambda: all(self.cache.partition_state(name, p) for p in assignment), timeout,
            f"Topic '{name}' was created, but not all of its partitions had a leader within {timeout:g}s "
            f"(are the assigned brokers alive?)")
        return self.cache.get(name) or TopicInfo(name, topic_id, len(assignment), replication_factor, dict(configs))

    async def _write_config(self, name: str, configs: dict[str, str]) -> None:
        data = encode_json({"version": 1, "config": dict(configs)})
        path = f"{CONFIG_TOPICS}/{name}"
        try:
            await self.store.create(path, data)
        except NodeExistsError:
            await self.store.set(path, data)

    @_answered_as_kafka_error("changing the configs of topic {0}")
    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Write the topic's config overrides, then sync so that this broker's logs have them
        when the client is answered."""
        await self._write_config(name, configs)
        await self.refresh({(f"{CONFIG_TOPICS}/{name}", False)})

    @_answered_as_kafka_error("deleting topic {0}")
    async def delete_topic(self, name: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        try:
            await self.store.create(f"{DELETE_TOPICS}/{name}", b"")
        except NodeExistsError:
            pass
        self._mark(DELETE_TOPICS, children=True)
        await self._wait_or_time_out(
            lambda: self.cache.get(name) is None, timeout,
            f"Deletion of topic '{name}' was requested, but the controller had not completed it within {timeout:g}s")

    @_answered_as_kafka_error("adding partitions to topic {0}")
    async def add_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None, *,
                             timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        found = await self.store.get_json(topic_path(name))
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        data, version = found
        existing = {int(p): list(r) for p, r in data["partitions"].items()}
        current = len(existing)
        if assignment is None:
            rf = len(existing[0])
            ordered = sorted(self.cache.brokers)
            first = existing[0][0]
            start = ordered.index(first) if first in ordered else -1
            new = assign_replicas(self._rack_map(), total - current, rf, start_index=start,
                                  start_partition=current)
        else:
            new = {current + i: list(r) for i, r in enumerate(assignment)}
        data["partitions"] = {str(p): r for p, r in sorted({**existing, **new}.items())}
        try:
            await self.store.set(topic_path(name), encode_json(data), version)
        except BadVersionError:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "The topic changed concurrently; retry.") from None
        self._mark(topic_path(name))
        await self._wait_or_time_out(
            lambda: all(self.cache.partition_state(name, p) for p in range(total)), timeout,
            f"Topic '{name}' now has {total} partitions, but not all of them had a leader within {timeout:g}s")

    async def _wait_or_time_out(self, predicate, timeout: float, message: str) -> None:
        """REQUEST_TIMED_OUT when ``predicate`` is not true within ``timeout``. A request with no
        timeout (<= 0), which Kafka answers at once, still waits a bounded time here, so that its
        client finds the leaders right away, but is answered with success."""
        if timeout <= 0:
            await self._wait_until(predicate, self.DEFAULT_TIMEOUT_SECONDS)
        elif not await self._wait_until(predicate, timeout):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, message)

    async def _wait_until(self, predicate, timeout: float = 10.0) -> bool:
        with trio.move_on_after(timeout):
            while True:
                await self._step()
                if predicate():
                    return True
                self._nudge.set()
                await trio.sleep(0.02)
        return False

    @_answered_as_kafka_error("changing the ISR of {0}-{1}")
    async def alter_partition(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int] | tuple[int, ...]) -> PartitionState:
        return await self.isr.alter_partition(topic, partition, leader_epoch, partition_epoch, new_isr)

    @_answered_as_kafka_error("electing leaders")
    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None
                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders: 0 = preferred (the first replica, when alive and in the ISR), 1 = unclean
        (only for partitions with no leader: any live replica). Written by compare-and-set, as the
        controller would; returns per partition (error code, message)."""
        await self.refresh()
        if partitions is None:
            partitions = [(s.topic, s.partition) for s in self.cache.states.values()]
        alive = set(self.cache.brokers) - self.cache.shutting_down
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        changes: list[tuple[PartitionState, dict, int, list[int]]] = []
        for topic, partition in partitions:
            state = self.view.state(topic, partition)
            if state is None or topic not in self.cache.by_name:
                results[(topic, partition)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            if election_type == 0:
                preferred = state.replicas[0]
                if state.leader == preferred:
                    results[(topic, partition)] = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                    continue
                if preferred not in alive or preferred not in state.isr:
                    results[(topic, partition)] = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                                   f"Failed to elect leader for partition {topic}-{partition} under strategy PreferredReplicaPartitionLeaderElectionStrategy")
                    continue
                leader, isr = preferred, list(state.isr)
            else:
                if state.leader in alive:
                    results[(topic, partition)] = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                    continue
                live = [r for r in state.replicas if r in alive]
                in_isr = [r for r in live if r in state.isr]
                if in_isr:
                    leader, isr = in_isr[0], [r for r in state.isr if r in alive]
                elif live:
                    leader, isr = live[0], [live[0]]
                else:
                    results[(topic, partition)] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                                   f"Failed to elect leader for partition {topic}-{partition} under strategy UncleanPartitionLeaderElectionStrategy")
                    continue
            changes.append((state, self.view.raw_states[(topic, partition)][0], leader, isr))
        written, done = await self._write_states(changes)
        for state, _, _, _ in changes:
            key = (state.topic, state.partition)
            results[key] = ((ErrorCode.NONE, None) if key in done
                            else (ErrorCode.NOT_CONTROLLER, "The partition changed concurrently; retry."))
        await self.refresh(written)
        return results

    @_answered_as_kafka_error("reassigning partitions")
    async def alter_partition_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], *,
                                            allow_replication_factor_change: bool = True
                                            ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments: a target replica list starts (or replaces) a move, None
        cancels one; per partition (error code, message). Recorded in the topic nodes by
        compare-and-set; the controller then drives each move to its end."""
        await self.refresh()
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        by_topic: dict[str, dict[int, list[int] | None]] = {}
        for (topic, partition), target in wanted.items():
            by_topic.setdefault(topic, {})[partition] = target
        brokers = set(self.cache.brokers)
        for topic, partitions in sorted(by_topic.items()):
            for _ in range(5):  # compare-and-set on the topic node; a concurrent change retries
                found = await self.store.get_json(topic_path(topic))
                if found is None or topic in self.view.deleting:
                    results.update({(topic, p): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None) for p in partitions})
                    break
                data, version = found
                outcome = {p: _reassign_one(data, p, target, brokers, allow_replication_factor_change)
                           for p, target in partitions.items()}
                try:
                    await self.store.set(topic_path(topic), encode_json(data), version)
                except BadVersionError:
                    continue
                results.update({(topic, p): r for p, r in outcome.items()})
                break
            else:
                results.update({(topic, p): (ErrorCode.REQUEST_TIMED_OUT, "The topic kept changing; retry.")
                                for p in partitions})
        await self.refresh({(topic_path(topic), False) for topic in by_topic})
        return results

    def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                     ) -> dict[tuple[str, int], Reassignment]:
        """The partitions being moved (of those asked, or all): replicas, adding, removing."""
        moving = {(name, p): r for name, record in self.view.topics.items() for p, r in record.reassigning.items()}
        if partitions is None:
            return moving
        return {key: moving[key] for key in partitions if key in moving}

    async def controlled_shutdown(self, *, max_retries: int = 3, retry_backoff: float = 5.0,
                                  timeout: float = 30.0) -> bool:
        """Move leadership away before stopping (Kafka's KafkaServer.controlledShutdown): up to
        ``max_retries`` attempts (controlled.shutdown.max.retries), ``retry_backoff`` seconds apart
        (controlled.shutdown.retry.backoff.ms), each bounded by ``timeout``. An attempt marks this
        broker as shutting down and waits until it leads no partition another ISR member could
        lead. True when one succeeded; False when all failed (the store unreachable, leaders that
        would not move): the broker then shuts down anyway, as Kafka does."""
        self._stopping = True
        for attempt in range(1, max(max_retries, 1) + 1):
            try:
                with trio.move_on_after(timeout):
                    if await self._controlled_shutdown_attempt(timeout):
                        log.info("Controlled shutdown of broker %d succeeded", self.node_id)
                        return True
                log.warning("Controlled shutdown of broker %d: attempt %d of %d timed out after %g s with "
                            "partitions still led here", self.node_id, attempt, max_retries, timeout)
            except Exception as exc:
                log.warning("Controlled shutdown of broker %d: attempt %d of %d failed: %s: %s",
                            self.node_id, attempt, max_retries, type(exc).__name__, exc)
            if attempt < max_retries:
                await trio.sleep(retry_backoff)
                log.info("Retrying controlled shutdown of broker %d after the previous attempt failed", self.node_id)
        log.warning("Proceeding to an unclean shutdown of broker %d: all %d controlled shutdown attempts failed "
                    "(its partitions' leadership moves when its ZooKeeper session ends)", self.node_id, max_retries)
        return False

    async def _controlled_shutdown_attempt(self, timeout: float) -> bool:
        try:
            await self.store.create(f"{SHUTTING_DOWN}/{self.node_id}", b"", ephemeral=True)
        except NodeExistsError:
            pass
        self._mark(SHUTTING_DOWN, children=True)

        def done() -> bool:
            alive = set(self.cache.brokers) - self.cache.shutting_down
            for state in self.cache.states.values():
                if state.leader == self.node_id and any(r in alive for r in state.isr if r != self.node_id):
                    return False
            return True

        return await self._wait_until(done, timeout)

    async def close(self) -> None:
        await self.store.close()


def _reassign_one(data: dict, partition: int, target: list[int] | None, brokers: set[int],
                  allow_replication_factor_change: bool) -> tuple[int, str | None]:
    """Apply one partition's request to the topic node (in place): (error code, message)."""
    current = data.get("partitions", {}).get(str(partition))
    if current is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if target is None:
        code = reassignment.cancel(data, partition)
        return code, None if code == ErrorCode.NONE else "No reassignment is in progress for this partition."
    moving = reassignment.ongoing(data, partition)
    size = len(moving.origin) if moving else len(current)
    why = reassignment.invalid_target(list(target), brokers, size, allow_replication_factor_change)
    if why is not None:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, why
    if moving is None and list(target) == [int(r) for r in current]:
        return ErrorCode.NONE, None  # already there
    reassignment.start(data, partition, list(target))
    return ErrorCode.NONE, None
