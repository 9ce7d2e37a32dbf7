"""Share group membership (KIP-932) in the group coordinator: ShareGroupHeartbeat and
ShareGroupDescribe, as Kafka's GroupMetadataManager serves them.

A share group lives where a classic group of the same id would (its __consumer_offsets
partition's leader: the GroupCoordinator says whether that is this broker). A member joins with
epoch 0 and the member id it generated, heartbeats with the epoch it was given, and leaves with
-1. Every change of membership or of the subscribed topics' partitions bumps the group epoch;
the assignment is Kafka's simple assignor's for a homogeneous group: every member gets every
partition of the topics it subscribes to (share groups share partitions, no revocation is
needed), so a member's epoch is the group epoch as soon as it heartbeats. A member that does not
heartbeat for ``group.share.session.timeout.ms`` is removed, and the listeners told
(``on_member_removed``: the share partitions release its records).

Membership is kept in memory: after a coordinator move or restart a member is answered
UNKNOWN_MEMBER_ID and rejoins with epoch 0 (the share-partition state, which is what must
survive, is in __share_group_state).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import trio

from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.groups.coordinator import GroupCoordinator
    from kafkacompat.services import MetadataView

log = logging.getLogger("kafkacompat.shares")

LEAVE_GROUP_MEMBER_EPOCH = -1
ASSIGNOR_NAME = "simple"

Assignment = dict[uuid.UUID, tuple[int, ...]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    deadline: float = 0.0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.subscribed_topics}


@dataclass(slots=True)
class HeartbeatResult:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class ShareGroupCoordinator:
    def __init__(self, config: "BrokerConfig", groups: "GroupCoordinator", metadata: "MetadataView") -> None:
        self.config = config
        self.classic = groups
        self.metadata = metadata
        self.groups: dict[str, ShareGroup] = {}
        self.member_removed_listeners: list[Callable[[str, str], None]] = []

    @staticmethod
    def now() -> float:
        return trio.current_time()

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def _check_coordinator(self, group_id: str) -> int:
        if not self.classic.is_coordinator_for(group_id):
            return ErrorCode.NOT_COORDINATOR
        if self.classic.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    # ---- heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str = "", client_host: str = "") -> HeartbeatResult:
        try:
            self._validate(group_id, member_id, member_epoch, subscribed)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(group_id, member_id)
            group = self._group_for_heartbeat(group_id, member_epoch)
            member = self._member_for_heartbeat(group, member_id, member_epoch)
        except KafkaError as exc:
            return HeartbeatResult(exc.code, exc.message, member_id or None)
        member.rack_id = rack_id
        member.client_id, member.client_host = client_id, client_host
        if subscribed is not None and tuple(subscribed) != member.subscribed_topics:
            if member.subscribed_topics:  # a new member's subscription came with its join's bump
                group.group_epoch += 1
            member.subscribed_topics = tuple(subscribed)
        settings = self.classic.group_configs.of(group_id)
        member.deadline = self.now() + settings.share_session_timeout_ms / 1000
        sent = self._reconcile(group, member, full=member_epoch == 0)
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               settings.share_heartbeat_interval_ms, sent)

    def _validate(self, group_id: str, member_id: str, member_epoch: int, subscribed: list[str] | None) -> None:
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"MemberEpoch is {member_epoch}, but must be >= -1.")
        if member_epoch == 0 and not subscribed:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "SubscribedTopicNames must be set in first request.")
        error = self._check_coordinator(group_id)
        if error:
            raise KafkaError(error)
        if group_id in self.classic.groups:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")

    def _group_for_heartbeat(self, group_id: str, member_epoch: int) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            if member_epoch != 0:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Share group {group_id} has no member with that id.")
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def _member_for_heartbeat(self, group: ShareGroup, member_id: str, member_epoch: int) -> ShareMember:
        member = group.members.get(member_id)
        if member_epoch == 0:
            if member is None:
                if len(group.members) >= self.config.group_share_max_size:
                    raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                     f"The share group has reached its maximum size of "
                                     f"{self.config.group_share_max_size} members.")
                member = group.members[member_id] = ShareMember(member_id)
                group.group_epoch += 1
                log.info("Member %s joined share group %s (epoch %d)", member_id, group.group_id, group.group_epoch)
            return member
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of share group {group.group_id}.")
        if member_epoch != member.member_epoch:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The share group member has a member epoch ({member_epoch}) different from the "
                             f"one of the coordinator ({member.member_epoch}).")
        return member

    def _reconcile(self, group: ShareGroup, member: ShareMember, *, full: bool) -> Assignment | None:
        """The simple assignor: every partition of the member's subscribed topics. The assignment
        is sent when it changed (or on joining); a metadata change bumps the group epoch."""
        target = self._target_assignment(member.subscribed_topics)
        if target != member.assignment:
            if not full and member.member_epoch == group.group_epoch:
                group.group_epoch += 1
            member.assignment = target
            full = True
        group.assignment_epoch = group.group_epoch
        member.member_epoch = group.group_epoch
        return member.assignment if full else None

    def _target_assignment(self, topics: tuple[str, ...]) -> Assignment:
        assignment: Assignment = {}
        for name in topics:
            topic = self.metadata.topic(name)
            if topic is not None and topic.partitions > 0:
                assignment[topic.topic_id] = tuple(range(topic.partitions))
        return assignment

    def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            # Kafka answers a leave of an unknown member with its epoch -1, no error.
            return HeartbeatResult(ErrorCode.NONE, None, member_id, LEAVE_GROUP_MEMBER_EPOCH)
        self._remove(group, member_id, "left the group")
        return HeartbeatResult(ErrorCode.NONE, None, member_id, LEAVE_GROUP_MEMBER_EPOCH)

    def _remove(self, group: ShareGroup, member_id: str, reason: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        log.info("Member %s %s; share group %s is at epoch %d", member_id, reason, group.group_id, group.group_epoch)
        for listener in self.member_removed_listeners:
            listener(group.group_id, member_id)

    # ---- session timeouts -----------------------------------------------------------------------

    def expire_members(self) -> int:
        now = self.now()
        expired = 0
        for group in list(self.groups.values()):
            for member in [m for m in group.members.values() if m.deadline <= now]:
                self._remove(group, member.member_id, "was removed: no heartbeat within its share.session.timeout.ms")
                expired += 1
        return expired

    async def run(self) -> None:
        interval = max(min(self.config.group_share_session_timeout_ms / 4000, 1.0), 0.01)
        while True:
            await trio.sleep(interval)
            try:
                self.expire_members()
            except Exception:
                log.exception("Expiring share group members failed; retrying")

    def list_groups(self, states: list[str] | None, types: list[str] | None) -> list[ShareGroup]:
        """ListGroups' share groups (type "share"; states Empty and Stable), on this coordinator."""
        if types and "share" not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states} if states else None
        return [g for g in self.groups.values()
                if self.classic.is_coordinator_for(g.group_id) and (wanted is None or g.state.lower() in wanted)]

    def empty_group_for_offsets(self, group_id: str, *, create: bool) -> ShareGroup:
        """The share group whose offsets AlterShareGroupOffsets / DeleteShareGroupOffsets change:
        it must have no members (NON_EMPTY_GROUP); an alter creates it when it does not exist."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID)
        error = self._check_coordinator(group_id)
        if error:
            raise KafkaError(error)
        if group_id in self.classic.groups:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            group = self.groups[group_id] = ShareGroup(group_id)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                             f"The share group {group_id} has members: its offsets can only be changed while it is "
                             f"empty.")
        return group

    # ---- describe / delete ------------------------------------------------------------------------

    def describe(self, group_id: str) -> tuple[int, str | None, ShareGroup | None]:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, None, None
        error = self._check_coordinator(group_id)
        if error:
            return error, None, None
        group = self.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a share group." if group_id in self.classic.groups
                       else f"Group {group_id} not found.")
            return ErrorCode.GROUP_ID_NOT_FOUND, message, None
        return ErrorCode.NONE, None, group
