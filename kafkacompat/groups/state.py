"""The classic group's in-memory state: members, generation, selected protocol, committed offsets.

Mirrors Kafka's ClassicGroup / ClassicGroupMember: the same states and transitions, the same
member bookkeeping (pending members, static members, supported-protocol counts).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

import trio

from kafkacompat.groups.consumer_group import ConsumerGroupState
from kafkacompat.groups.storage import OffsetCommitValue


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's ClassicGroupState.validPreviousStates
VALID_PREVIOUS_STATES = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                      GroupState.EMPTY, GroupState.DEAD},
}

CONSUMER_PROTOCOL_TYPE = "consumer"


class Waiter:
    """A parked JoinGroup or SyncGroup response: completed once, awaited by the request handler."""

    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result = None

    def complete(self, result) -> bool:
        if self.event.is_set():
            return False
        self.result = result
        self.event.set()
        return True

    async def wait(self):
        await self.event.wait()
        return self.result


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Waiter | None = None
    sync_waiter: Waiter | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols)
        )

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} does not support any of the candidate protocols")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


class Group:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state: GroupState | None = None
        self.state_timestamp: int | None = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.pending_members: set[str] = set()
        self.static_members: dict[str, str] = {}
        self.supported_protocols: Counter[str] = Counter()
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], OffsetCommitValue] = {}
        # Where in __consumer_offsets each cached offset was appended (an older commit that
        # completes later must not overwrite a newer one), and commits waiting for the ISR.
        self.offset_positions: dict[tuple[str, int], int] = {}
        self.pending_commits: Counter[tuple[str, int]] = Counter()
        # Set while the group is a KIP-848 consumer group (groups/consumer_coordinator.py); the
        # classic fields above are then unused but for the committed offsets.
        self.consumer: ConsumerGroupState | None = None

    def __repr__(self) -> str:
        if self.consumer is not None:
            return repr(self.consumer)
        return f"Group({self.group_id!r}, {self.state.value}, generation {self.generation_id}, {len(self.members)} members)"

    # ---- committed offsets ----------------------------------------------------------------

    def apply_commits(self, values: "list[tuple[tuple[str, int], OffsetCommitValue]]", position: int) -> None:
        """Offsets whose commit record ends at ``position`` in __consumer_offsets are durable:
        they replace the cached ones unless a newer commit of that partition got there first."""
        for tp, value in values:
            if position >= self.offset_positions.get(tp, -1):
                self.offsets[tp] = value
                self.offset_positions[tp] = position

    def begin_pending_commits(self, tps: "list[tuple[str, int]]") -> None:
        self.pending_commits.update(tps)

    def end_pending_commits(self, tps: "list[tuple[str, int]]") -> None:
        self.pending_commits.subtract(tps)
        for tp in tps:
            if self.pending_commits[tp] <= 0:
                del self.pending_commits[tp]

    def has_pending_commit(self, tp: tuple[str, int]) -> bool:
        return tp in self.pending_commits

    # ---- state ----------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise RuntimeError(f"group {self.group_id} cannot go from {self.state.value} to {state.value}")
        self.previous_state = self.state
        self.state = state
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # ---- members --------------------------------------------------------------------------

    def has_consumer_members(self) -> bool:
        return self.consumer is not None and not self.consumer.is_empty()

    def type_name(self) -> str:
        """ListGroups' GroupType."""
        return self.consumer.group_type if self.consumer is not None else "classic"

    def state_name(self) -> str:
        return self.consumer.state_name() if self.consumer is not None else self.state.value

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and self.num_awaiting_join() == len(self.members)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: Member, waiter: Waiter | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        member.join_waiter = waiter

    def remove(self, member_id: str) -> Member | None:
        """Drop a member (or a pending member); the caller completes its waiters and timers."""
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.supported_protocols.subtract(member.protocol_names())
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, waiter: Waiter | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        previous = member.join_waiter
        member.join_waiter = waiter
        if previous is not None and previous is not waiter:
            # A client that re-sent JoinGroup while its first one was parked: the first request
            # gets an answer too, so no handler waits forever.
            from kafkacompat.wire.errors import ErrorCode

            previous.complete(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        from kafkacompat.wire.errors import ErrorCode

        member = self.members.pop(old_member_id)
        if member.join_waiter is not None:
            member.join_waiter.complete(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
            member.join_waiter = None
        if member.sync_waiter is not None:
            member.sync_waiter.complete(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
            member.sync_waiter = None
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[instance_id] = new_member_id
        return member

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if self.state == GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported_protocols[n] == size for n in names)

    def select_protocol(self) -> str:
        """Kafka's way: among protocols every member supports, the one most members list first."""
        size = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == size}
        votes: Counter[str] = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        # Ties: the first member's preference among the most voted (deterministic).
        for member in self.members.values():
            choice = member.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    def current_members(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    # ---- consumer protocol ------------------------------------------------------------------

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (ConsumerProtocolSubscription v0 prefix), or None if unknown."""
        if not self.protocol_type or self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                data = member.metadata(self.protocol_name)
                pos = 2  # version
                (count,) = struct.unpack_from(">i", data, pos)
                pos += 4
                for _ in range(count):
                    (length,) = struct.unpack_from(">h", data, pos)
                    pos += 2
                    topics.add(bytes(data[pos:pos + length]).decode("utf-8"))
                    pos += length
        except (struct.error, UnicodeDecodeError):
            return None
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.consumer is not None:
            return self.consumer.is_subscribed_to(topic)
        topics = self.subscribed_topics()
        return topic in topics if topics is not None else self.uses_consumer_protocol()
