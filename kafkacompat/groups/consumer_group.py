"""A KIP-848 consumer group's state: members with their epochs, the group epoch, the target
assignment and each member's reconciliation towards it.

Mirrors Kafka's ConsumerGroup, ConsumerGroupMember and CurrentAssignmentBuilder: a member's
epoch moves to the target assignment's epoch only once it has revoked what it must give up, and
a partition reaches its new owner only after the previous owner revoked it (until then the new
owner waits in UNRELEASED_PARTITIONS).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from enum import IntEnum

from kafkacompat.groups.assignors import Assignment
from kafkacompat.wire.errors import ErrorCode, KafkaError

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(IntEnum):
    """Kafka's MemberState, with its record codes."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMembership:
    """A member of a consumer group that speaks the classic protocol (JoinGroup/SyncGroup/
    Heartbeat), after an online upgrade: its session timeout and JoinGroup protocols."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMembership | None = None

    def owned(self) -> set[tuple[uuid.UUID, int]]:
        """Partitions this member holds: assigned, or still to be revoked."""
        return {(t, p) for a in (self.assigned, self.pending_revocation) for t, ps in a.items() for p in ps}

    def subscription(self) -> tuple:
        return (self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor, self.rack_id)


def compile_regex(pattern: str) -> re.Pattern[str]:
    """A SubscribedTopicRegex (Kafka compiles it with RE2J and matches whole topic names).
    Constructs RE2 refuses (lookarounds, backreferences, atomic groups, possessive quantifiers)
    are refused here too, so a regex Kafka rejects is not accepted."""
    try:
        compiled = re.compile(pattern)
        unsupported = _re2_unsupported(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex {pattern!r} is not a valid regular expression: {exc}") from None
    if unsupported:
        why = "its matching could take exponential time" if unsupported == _NESTED else \
            "Kafka uses RE2 syntax"
        raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex {pattern!r} is not a valid regular expression: {unsupported} "
                         f"is not supported ({why})")
    return compiled


_RE2_UNSUPPORTED = {"ASSERT": "a lookaround", "ASSERT_NOT": "a lookaround", "GROUPREF": "a backreference",
                    "GROUPREF_EXISTS": "a conditional group", "ATOMIC_GROUP": "an atomic group",
                    "POSSESSIVE_REPEAT": "a possessive quantifier"}
_NESTED = "a nested unbounded quantifier"


def _re2_unsupported(pattern: str) -> str | None:
    """What RE2 would refuse in ``pattern``, or a nested unbounded quantifier (``(a+)+``): RE2
    matches those in linear time, Python's backtracking engine in exponential time, so a
    heartbeat could stall the broker; they are refused instead."""
    try:
        from re import _parser  # type: ignore[attr-defined]  # Python 3.11+: the parser re compiles with
    except ImportError:  # Python 3.10
        import sre_parse as _parser  # type: ignore[no-redef]
    unbounded = _parser.MAXREPEAT

    def walk(node, in_repeat: bool) -> str | None:
        if isinstance(node, _parser.SubPattern):
            node = node.data
        if not isinstance(node, (list, tuple)):
            return None
        for item in node:
            if isinstance(item, tuple) and len(item) == 2 and not isinstance(item[0], (list, tuple)):
                op, argument = item
                name = str(op)
                if name in _RE2_UNSUPPORTED:
                    return _RE2_UNSUPPORTED[name]
                if name in ("MAX_REPEAT", "MIN_REPEAT"):
                    low, high, body = argument
                    if high == unbounded and in_repeat:
                        return _NESTED
                    found = walk(body, in_repeat or high == unbounded or high > 1)
                else:
                    found = walk(argument, in_repeat)
            else:
                found = walk(item, in_repeat)
            if found:
                return found
        return None

    return walk(_parser.parse(pattern), False)


def _without_empty(assignment: dict[uuid.UUID, set[int] | frozenset[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


class ConsumerGroupState:
    """The consumer-protocol side of a group (``Group.consumer``); its committed offsets stay in
    the Group, which both protocols share."""

    group_type = "consumer"  # ListGroups' GroupType (a streams group's state is a subclass)

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, Assignment] = {}
        # Which member holds each partition (assigned or pending revocation): Kafka's partition epochs.
        self.owners: dict[tuple[uuid.UUID, int], str] = {}
        # Topic name -> metadata of every topic some member subscribes to (by name or regex).
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.resolved_regexes: dict[str, frozenset[str]] = {}

    def __repr__(self) -> str:
        return (f"ConsumerGroup({self.group_id!r}, {self.state_name()}, epoch {self.group_epoch}, "
                f"{len(self.members)} members)")

    def snapshot(self) -> "ConsumerGroupState":
        """A copy to go back to if a change cannot be stored. Members and assignments are never
        changed in place (a change replaces them), so copying the containers is enough."""
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        for name in ("members", "static_members", "target", "owners"):
            setattr(copy, name, dict(getattr(self, name)))
        return copy

    # ---- state ------------------------------------------------------------------------------

    def state_name(self) -> str:
        """Kafka's ConsumerGroupState as DescribeGroups and ListGroups show it."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.state != MemberState.STABLE or m.member_epoch != self.assignment_epoch
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def is_empty(self) -> bool:
        return not self.members

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's computePreferredServerAssignor)."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])

    # ---- members ----------------------------------------------------------------------------

    def put_member(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping the partition owners in step with what it holds."""
        previous = self.members.get(member.member_id)
        if previous is not None:
            self._release(previous)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for tp in member.owned():
            self.owners[tp] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def _release(self, member: ConsumerMember) -> None:
        for tp in member.owned():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                names.update(self.resolved_regexes.get(member.subscribed_topic_regex, ()))
        return names

    def member_topic_names(self, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names.update(self.resolved_regexes.get(member.subscribed_topic_regex, ()))
        return names

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    # ---- offsets (Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch) ----------

    def validate_offset_commit(self, member_id: str, member_epoch: int, version: int, *,
                               transactional: bool = False, instance_id: str | None = None) -> int:
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        if transactional and member_epoch == -1 and member_id == "" and instance_id is None:
            return ErrorCode.NONE  # TxnOffsetCommit without group membership fields
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:
            return ErrorCode.ILLEGAL_GENERATION if member_epoch != member.member_epoch else ErrorCode.NONE
        if not transactional and version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def supports_classic_protocols(self, protocol_type: str, names: list[str], consumer_type: str) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: a classic member may join if it speaks
        the consumer embedded protocol and shares a protocol (assignor) with every classic member."""
        if protocol_type != consumer_type or not names:
            return False
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        return any(all(any(name == p for p, _ in c.protocols) for c in classic) for name in names)

    def classic_only_without(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` uses the classic protocol."""
        return all(m.classic is not None for mid, m in self.members.items() if mid != member_id)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target is still held by another member."""
        for topic_id, indexes in self.target.get(member.member_id, {}).items():
            for index in indexes - member.assigned.get(topic_id, frozenset()):
                holder = self.owners.get((topic_id, index))
                if holder is not None and holder != member.member_id:
                    return True
        return False

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        if member_epoch < 0 and member_id is None:
            return ErrorCode.NONE  # an admin client's fetch
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # ---- reconciliation (Kafka's CurrentAssignmentBuilder) ----------------------------------

    def reconcile(self, member: ConsumerMember, owned: list[tuple[uuid.UUID, list[int]]] | None) -> ConsumerMember:
        """The member's next state towards its target assignment. ``owned``: the partitions the
        member says it holds (None when the heartbeat did not say)."""
        target_epoch = self.assignment_epoch
        target = self.target.get(member.member_id, {})
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if _still_owns(owned, member.pending_revocation):
                return member
            return self._next_assignment(member, target_epoch, target, owned)
        if member.state == MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
            return self._next_assignment(member, target_epoch, target, owned)
        return member

    def _next_assignment(self, member: ConsumerMember, target_epoch: int, target: Assignment,
                         owned: list[tuple[uuid.UUID, list[int]]] | None) -> ConsumerMember:
        keep: dict[uuid.UUID, set[int]] = {}
        revoke: dict[uuid.UUID, set[int]] = {}
        free: dict[uuid.UUID, set[int]] = {}
        unreleased = False
        for topic_id in set(target) | set(member.assigned):
            wanted = target.get(topic_id, frozenset())
            current = member.assigned.get(topic_id, frozenset())
            keep[topic_id] = set(current & wanted)
            revoke[topic_id] = set(current - wanted)
            for index in wanted - current:
                holder = self.owners.get((topic_id, index))
                if holder is None or holder == member.member_id:
                    free.setdefault(topic_id, set()).add(index)
                else:
                    unreleased = True
        revoke_assignment = _without_empty(revoke)
        if revoke_assignment and _still_owns(owned, revoke_assignment):
            return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=_without_empty(keep),
                           pending_revocation=revoke_assignment)
        for topic_id, indexes in free.items():
            keep.setdefault(topic_id, set()).update(indexes)
        return replace(
            member, state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
            previous_member_epoch=member.member_epoch if member.member_epoch != target_epoch
            else member.previous_member_epoch,
            member_epoch=target_epoch,
            assigned=_without_empty(keep), pending_revocation={},
        )


def _still_owns(owned: list[tuple[uuid.UUID, list[int]]] | None, partitions: Assignment) -> bool:
    """Whether the member still holds any of ``partitions`` (Kafka's ownsRevokedPartitions: a
    heartbeat that does not list its partitions is taken as still holding them)."""
    if owned is None:
        return True
    for topic_id, indexes in owned:
        pending = partitions.get(topic_id)
        if pending and any(index in pending for index in indexes):
            return True
    return False


def is_subset(owned: list[tuple[uuid.UUID, list[int]]] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    for topic_id, indexes in owned:
        partitions = assigned.get(topic_id)
        if partitions is None or any(index not in partitions for index in indexes):
            return False
    return True
