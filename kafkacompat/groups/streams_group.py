"""A KIP-1071 streams group's state: the topology its members run, the tasks it derives from
the topics that exist (Kafka's streams/topics/InternalTopicManager.configureTopics), the sticky
task assignor (streams/assignor/StickyTaskAssignor, simplified) and the members.

The members, epochs and reconciliation are the consumer group's (consumer_group.py): an active
task is keyed (subtopology id, partition) where a consumer group keys (topic id, partition), so
ConsumerGroupState.reconcile gives a task to its new owner only after the previous owner revoked
it. Standby tasks are not exclusive and follow the target as soon as the member reaches its
epoch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Mapping

from kafkacompat.groups.assignors import Assignment
from kafkacompat.groups.consumer_group import ConsumerGroupState, ConsumerMember, MemberState, compile_regex
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.controller.topics import TopicInfo

STREAMS_PROTOCOL_TYPE = "streams"
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class Status(IntEnum):
    """StreamsGroupHeartbeatResponse's Status codes."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    partitions: int = 0  # 0: derived from the topology
    replication_factor: int = 0  # 0: the broker's default.replication.factor
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[InternalTopic, ...] = ()
    state_changelog_topics: tuple[InternalTopic, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsTopology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def validate(self) -> None:
        """Kafka's throwIfInvalidTopology: STREAMS_INVALID_TOPOLOGY for a topology that cannot run."""
        seen: set[str] = set()
        repartition_sources = {t.name for s in self.subtopologies for t in s.repartition_source_topics}
        for sub in self.subtopologies:
            if sub.subtopology_id in seen:
                raise _invalid_topology(f"Subtopology {sub.subtopology_id} is defined more than once.")
            seen.add(sub.subtopology_id)
            for name in (*sub.source_topics, *sub.repartition_sink_topics,
                         *(t.name for t in (*sub.repartition_source_topics, *sub.state_changelog_topics))):
                if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
                    raise _invalid_topology(f"Topic name {name!r} of subtopology {sub.subtopology_id} is invalid.")
            for pattern in sub.source_topic_regex:
                try:
                    compile_regex(pattern)
                except KafkaError as exc:
                    raise _invalid_topology(f"Source topic regex of subtopology {sub.subtopology_id}: "
                                            f"{exc.message}") from None
            for changelog in sub.state_changelog_topics:
                if changelog.partitions != 0:
                    raise _invalid_topology(f"Changelog topic {changelog.name} must have an undefined partition "
                                            f"count, but it is set to {changelog.partitions}.")
            for sink in sub.repartition_sink_topics:
                if sink not in repartition_sources and sink not in _all_source_topics(self):
                    raise _invalid_topology(f"Repartition sink topic {sink} of subtopology {sub.subtopology_id} "
                                            "is not a source topic of any subtopology.")
            for group in sub.copartition_groups:
                for indexes, listed in ((group.source_topics, sub.source_topics),
                                        (group.source_topic_regex, sub.source_topic_regex),
                                        (group.repartition_source_topics, sub.repartition_source_topics)):
                    if any(not 0 <= i < len(listed) for i in indexes):
                        raise _invalid_topology(f"Copartition group of subtopology {sub.subtopology_id} refers to "
                                                "a topic index out of range.")


def _all_source_topics(topology: StreamsTopology) -> set[str]:
    return {name for s in topology.subtopologies for name in s.source_topics}


def _invalid_topology(message: str) -> KafkaError:
    return KafkaError(ErrorCode.STREAMS_INVALID_TOPOLOGY, message)


@dataclass(slots=True)
class ConfiguredTopology:
    """The topology against the topics that exist: the task count of every subtopology (when
    ready), why it is not ready, and the internal topics the broker must create."""

    tasks: dict[str, int] = field(default_factory=dict)
    statuses: list[tuple[int, str]] = field(default_factory=list)
    to_create: list[InternalTopic] = field(default_factory=list)
    source_partitions: dict[str, dict[str, int]] = field(default_factory=dict)  # subtopology -> topic -> count

    @property
    def ready(self) -> bool:
        return not self.statuses


def _sources(sub: Subtopology, by_name: Mapping[str, "TopicInfo"]) -> list[str]:
    names = list(sub.source_topics)
    for pattern in sub.source_topic_regex:
        compiled = compile_regex(pattern)
        names.extend(sorted(n for n in by_name if compiled.fullmatch(n) and n not in names))
    return names


def configure(topology: StreamsTopology, by_name: Mapping[str, "TopicInfo"]) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics, in its order: missing source topics, the
    partition counts of the repartition topics (explicit, else the most partitions of what feeds
    them), copartitioning, then the internal topics that are missing or wrongly partitioned."""
    result = ConfiguredTopology()
    missing = sorted({n for s in topology.subtopologies for n in s.source_topics if n not in by_name})
    if missing:
        result.statuses.append((Status.MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing."))
        return result
    counts: dict[str, int] = {t.name: t.partitions for s in topology.subtopologies
                              for t in s.repartition_source_topics if t.partitions > 0}
    repartition_names = {t.name for s in topology.subtopologies for t in s.repartition_source_topics}
    for _ in range(len(topology.subtopologies) + 1):
        for sub in topology.subtopologies:
            upstream = [by_name[n].partitions for n in _sources(sub, by_name)]
            upstream += [counts[t.name] for t in sub.repartition_source_topics if t.name in counts]
            if not upstream:
                continue
            for sink in sub.repartition_sink_topics:
                if sink in repartition_names and not _explicit(topology, sink):
                    counts[sink] = max(counts.get(sink, 0), max(upstream))
    for sub in topology.subtopologies:
        for group in sub.copartition_groups:
            sources = [_sources(sub, by_name)[i] for i in group.source_topics if i < len(_sources(sub, by_name))]
            source_counts = {by_name[n].partitions for n in sources}
            if len(source_counts) > 1:
                result.statuses.append((Status.INCORRECTLY_PARTITIONED_TOPICS,
                                        f"Following topics do not have the same number of partitions: "
                                        f"[{', '.join(sorted(sources))}]"))
                return result
            repartitions = [sub.repartition_source_topics[i] for i in group.repartition_source_topics]
            wanted = next(iter(source_counts), None) or max((counts.get(t.name, 0) for t in repartitions), default=0)
            for topic in repartitions:
                if topic.partitions <= 0 and wanted:
                    counts[topic.name] = wanted
    unknown = sorted(t.name for s in topology.subtopologies for t in s.repartition_source_topics
                     if counts.get(t.name, 0) <= 0)
    if unknown:
        raise _invalid_topology(f"Failed to compute the number of partitions of repartition topics "
                                f"{', '.join(unknown)}.")
    wrong: list[str] = []
    for sub in topology.subtopologies:
        partitions = {n: by_name[n].partitions for n in _sources(sub, by_name)}
        partitions.update({t.name: counts[t.name] for t in sub.repartition_source_topics})
        result.source_partitions[sub.subtopology_id] = partitions
        result.tasks[sub.subtopology_id] = max(partitions.values(), default=0)
        internal = [InternalTopic(t.name, counts[t.name], t.replication_factor, t.configs)
                    for t in sub.repartition_source_topics]
        internal += [InternalTopic(t.name, t.partitions if t.partitions > 0 else result.tasks[sub.subtopology_id],
                                   t.replication_factor, _compacted(t.configs))
                     for t in sub.state_changelog_topics]
        for topic in internal:
            existing = by_name.get(topic.name)
            if existing is None:
                result.to_create.append(topic)
            elif existing.partitions != topic.partitions:
                wrong.append(f"Existing internal topic {topic.name} has invalid number of partitions: "
                             f"expected {topic.partitions}, actual {existing.partitions}")
    if wrong:
        result.statuses.append((Status.INCORRECTLY_PARTITIONED_TOPICS, "; ".join(wrong)))
    elif result.to_create:
        names = ", ".join(sorted(t.name for t in result.to_create))
        result.statuses.append((Status.MISSING_INTERNAL_TOPICS, f"Internal topics are missing: [{names}]"))
    if not result.ready:
        result.tasks = {}
    return result


def _explicit(topology: StreamsTopology, name: str) -> bool:
    return any(t.name == name and t.partitions > 0 for s in topology.subtopologies for t in s.repartition_source_topics)


def _compacted(configs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A changelog is compacted unless its topology says otherwise (Kafka Streams' default)."""
    if any(key == "cleanup.policy" for key, _ in configs):
        return configs
    return (("cleanup.policy", "compact"), *configs)


# ---- members ----------------------------------------------------------------------------------


@dataclass(slots=True)
class StreamsMember(ConsumerMember):
    """A consumer group member (its epochs, ``assigned`` = the active tasks it holds and
    ``pending_revocation``) plus what a streams member tells: its process, endpoint and tags."""

    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    standby: Assignment = field(default_factory=dict)

    def assignment_config(self) -> tuple:
        """What the assignor reads of a member: a change bumps the group epoch."""
        return (self.process_id, self.rack_id, self.client_tags, self.topology_epoch)


class StreamsGroupState(ConsumerGroupState):
    """The streams side of a group, in ``Group.consumer`` (so committed offsets, OffsetCommit's
    member epoch checks and the classic protocol's exclusion are the consumer group's)."""

    group_type = STREAMS_PROTOCOL_TYPE

    def __init__(self, group_id: str) -> None:
        super().__init__(group_id)
        self.topology: StreamsTopology | None = None
        self.configured: ConfiguredTopology | None = None
        self.standby_target: dict[str, Assignment] = {}
        self.shutdown_requested: str | None = None  # the member that asked the application to shut down
        self.endpoint_information_epoch = 0
        # What its records in __consumer_offsets hold: the hash of the task counts the group's
        # epoch was last bumped for, the assignment configs of its target, and the records as
        # last written (key -> value: the next change writes the difference, streams_records).
        self.metadata_hash = 0
        self.validated_topology_epoch = -1  # as last read back (the configured topology decides once known)
        self.assignment_configs: tuple[tuple[str, str], ...] = ()
        self.persisted: dict[bytes, bytes] = {}

    def __repr__(self) -> str:
        return (f"StreamsGroup({self.group_id!r}, {self.state_name()}, epoch {self.group_epoch}, "
                f"{len(self.members)} members)")

    def snapshot(self) -> "StreamsGroupState":
        copy = super().snapshot()
        copy.standby_target = dict(self.standby_target)
        return copy  # type: ignore[return-value]

    def state_name(self) -> str:
        """Kafka's StreamsGroupState."""
        if not self.members:
            return "Empty"
        if self.configured is None:  # loaded, not heartbeated yet: what its records say
            if self.topology is None or self.validated_topology_epoch != self.topology.epoch:
                return "NotReady"
        elif not self.configured.ready:
            return "NotReady"
        return super().state_name()

    def subscribed_topic_names(self) -> set[str]:
        """The topics the group reads (Kafka's StreamsGroup.isSubscribedToTopic): their offsets
        are not expired while it has members, and OffsetDelete refuses them."""
        if self.topology is None:
            return set()
        names = {n for s in self.topology.subtopologies for n in s.source_topics}
        names.update(t.name for s in self.topology.subtopologies for t in s.repartition_source_topics)
        if self.configured is not None:
            names.update(n for partitions in self.configured.source_partitions.values() for n in partitions)
        return names

    def member_topic_names(self, member: ConsumerMember) -> set[str]:
        return self.subscribed_topic_names()

    def supports_classic_protocols(self, protocol_type: str, names: list[str], consumer_type: str) -> bool:
        return False


# ---- the sticky task assignor ----------------------------------------------------------------


def assign_tasks(members: Mapping[str, StreamsMember], tasks: Mapping[str, int],
                 previous: Mapping[str, Assignment], num_standby: int) -> tuple[dict[str, Assignment],
                                                                                 dict[str, Assignment]]:
    """Active tasks spread evenly over the members (no member has two more than another), each
    kept by its previous owner where that stays balanced; then ``num_standby`` standby copies of
    each task on members of other processes. Returns (active, standby) per member."""
    all_tasks = [(sub, p) for sub in sorted(tasks) for p in range(tasks[sub])]
    ids = sorted(members)
    if not ids:
        return {}, {}
    base, extra = divmod(len(all_tasks), len(ids))
    active: dict[str, list[tuple[str, int]]] = {m: [] for m in ids}
    owner_of = {(sub, p): m for m in ids for sub, ps in previous.get(m, {}).items() for p in ps}
    unplaced = []
    for task in all_tasks:
        owner = owner_of.get(task)
        if owner is not None and len(active[owner]) < base:
            active[owner].append(task)
        else:
            unplaced.append(task)
    leftovers = []
    for task in unplaced:  # a previous owner at its quota keeps one more while the spread allows
        owner = owner_of.get(task)
        full = sum(1 for m in ids if len(active[m]) > base)
        if owner is not None and len(active[owner]) == base and full < extra:
            active[owner].append(task)
        else:
            leftovers.append(task)
    for task in leftovers:
        full = sum(1 for m in ids if len(active[m]) > base)
        candidates = [m for m in ids if len(active[m]) < base] or \
            [m for m in ids if len(active[m]) == base and full < extra]
        chosen = min(candidates, key=lambda m: (len(active[m]), m))
        active[chosen].append(task)
    standby: dict[str, list[tuple[str, int]]] = {m: [] for m in ids}
    if num_standby > 0:
        holder = {task: m for m in ids for task in active[m]}
        had = {(sub, p): m for m in ids for sub, ps in members[m].standby.items() for p in ps}
        for task in all_tasks:
            used = {members[holder[task]].process_id}
            for _ in range(num_standby):
                candidates = [m for m in ids if members[m].process_id not in used]
                if not candidates:
                    break
                chosen = min(candidates, key=lambda m: (had.get(task) != m, len(standby[m]) + len(active[m]), m))
                standby[chosen].append(task)
                used.add(members[chosen].process_id)
    return {m: _grouped(active[m]) for m in ids}, {m: _grouped(standby[m]) for m in ids}


def _grouped(tasks: list[tuple[str, int]]) -> Assignment:
    result: dict[str, set[int]] = {}
    for sub, partition in tasks:
        result.setdefault(sub, set()).add(partition)
    return {sub: frozenset(ps) for sub, ps in result.items()}  # type: ignore[misc]


__all__ = ["MemberState", "StreamsGroupState", "StreamsMember", "StreamsTopology", "assign_tasks", "configure"]
