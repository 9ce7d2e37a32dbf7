"""KIP-848 consumer groups in the group coordinator: ConsumerGroupHeartbeat and
ConsumerGroupDescribe, session and rebalance timeouts, and the group's records in
__consumer_offsets.

Follows Kafka's GroupMetadataManager.consumerGroupHeartbeat: (1) the member is created or
updated and the group epoch bumped when a subscription, a resolved regex or the subscribed
topics' metadata changed; (2) the target assignment is recomputed when the group epoch is ahead
of it; (3) the member is reconciled towards its target (consumer_group.py). The records of the
change are appended to the group's __consumer_offsets partition before the heartbeat is
answered; if that fails the group goes back to its state before the heartbeat.

The consumer state hangs off the classic ``Group`` (``Group.consumer``) so committed offsets,
their retention and deletion are shared by both protocols. Everything runs between two awaits,
as the classic coordinator does.
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from kafkacompat.groups import consumer_records, storage
from kafkacompat.groups.assignors import ASSIGNORS, MemberSpec, configured_assignors
from kafkacompat.groups.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ClassicMembership,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    TopicMetadata,
    compile_regex,
    is_subset,
)
from kafkacompat.groups.consumer_protocol import (
    MalformedProtocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from kafkacompat.groups.state import CONSUMER_PROTOCOL_TYPE, Group, GroupState, JoinResult, SyncResult, Waiter
from kafkacompat.groups.state import Member as ClassicMember
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.groups.group_configs import GroupConfigs
    import re

    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.topics import TopicInfo

log = logging.getLogger("kafkacompat.groups")

MAX_COMPILED_REGEXES = 1024


class GroupsHost(Protocol):
    """What the consumer protocol uses of the group coordinator that hosts it."""

    config: "BrokerConfig"
    group_configs: "GroupConfigs"
    groups: dict[str, Group]

    def wall_clock(self) -> int: ...

    def check_group_id(self, group_id: str | None) -> int: ...

    def schedule_timer(self, key: object, delay_ms: float, callback: Callable[[], None]) -> None: ...

    def cancel_timer(self, key: object) -> None: ...

    def append_records(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> object: ...

    def when_replicated(self, group_id: str, appended: object, on_done: Callable[[int], None]) -> None: ...

    def release_classic_members(self, group: Group) -> None: ...

    def adopt_classic_group(self, group: Group, reason: str) -> None: ...

    def classic_group_record(self, group: Group) -> tuple[bytes, bytes | None]: ...


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: list[tuple[uuid.UUID, list[int]]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(slots=True)
class HeartbeatResult:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _to_ids(partitions: list[tuple[str, list[int]]], by_name: dict[str, "TopicInfo"]) -> Assignment:
    """Topic names to ids (partitions of topics that no longer exist are dropped)."""
    result: dict[uuid.UUID, frozenset[int]] = {}
    for name, indexes in partitions:
        topic = by_name.get(name)
        if topic is not None and indexes:
            result[topic.topic_id] = result.get(topic.topic_id, frozenset()) | frozenset(indexes)
    return result


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


class ConsumerGroupCoordinator:
    def __init__(self, host: GroupsHost) -> None:
        self.host = host
        self.config = host.config
        self.assignors = configured_assignors(list(self.config.group_consumer_assignors))
        self._regexes: dict[str, "re.Pattern[str]"] = {}
        # The appends of the operation under way (operations run between two awaits): what its
        # answer waits for, as Kafka's runtime answers a write once it is committed.
        self._appended: list[object] = []

    def _when_replicated(self, group_id: str, on_done: Callable[[int], None]) -> bool:
        """Call ``on_done(error code)`` once the ISR has this operation's appends; False (and no
        call) when it appended nothing."""
        appended, self._appended = self._appended, []
        if not appended:
            return False
        self.host.when_replicated(group_id, appended[-1], on_done)
        return True

    # ---- validation (Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid) --------------------

    def _validate(self, req: HeartbeatRequest) -> None:
        if req.version >= 1 or req.member_epoch > 0 or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if req.member_id == "":
                raise _invalid("MemberId can't be empty.")
        if req.group_id == "":
            raise _invalid("GroupId can't be empty.")
        if req.instance_id == "":
            raise _invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            raise _invalid("RackId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise _invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                               "(re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.assignors:
            raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                             f"{', '.join(self.assignors)}.")

    # ---- ConsumerGroupHeartbeat -----------------------------------------------------------------

    async def heartbeat(self, req: HeartbeatRequest, topics: Callable[[], "Iterable[TopicInfo]"]) -> HeartbeatResult:
        """ConsumerGroupHeartbeat, answered once its records are replicated."""
        self._appended = []
        result = self._heartbeat_now(req, topics)
        stored = Waiter()
        if self._when_replicated(req.group_id, stored.complete):
            error = await stored.wait()
            if error and not result.error:
                log.warning("The state of consumer group %s was not replicated: %s", req.group_id, error)
                return HeartbeatResult(error, "The group's state could not be stored.")
        return result

    def _heartbeat_now(self, req: HeartbeatRequest, topics: Callable[[], "Iterable[TopicInfo]"]) -> HeartbeatResult:
        try:
            self._validate(req)
            error = self.host.check_group_id(req.group_id)
            if error:
                return HeartbeatResult(error)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req)
            return self._heartbeat(req, topics)
        except KafkaError as exc:
            return HeartbeatResult(exc.code, exc.message)

    def _consumer_group(self, group_id: str, create: bool, by_name: dict[str, "TopicInfo"] | None = None) -> Group:
        """Kafka's getOrMaybeCreateConsumerGroup: an empty classic group becomes a consumer group
        when a member joins; a classic group with members is not a consumer group."""
        group = self.host.groups.get(group_id)
        if group is not None and group.consumer is not None and group.type_name() != "consumer":
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if group is not None and group.consumer is not None:
            return group
        if group is None:
            if not create:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            group = Group(group_id, self.host.wall_clock())
        elif group.members and create and by_name is not None and self._can_upgrade(group):
            group.consumer = self._upgraded_state(group, by_name)
            return group
        elif not create or group.members or group.pending_members:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        group.consumer = ConsumerGroupState(group_id)
        return group

    # ---- online migration between the protocols (group.consumer.migration.policy) -----------------

    def _can_upgrade(self, group: Group) -> bool:
        """Kafka's validateOnlineUpgrade."""
        if self.config.group_consumer_migration_policy not in ("upgrade", "bidirectional"):
            log.info("Classic group %s is not upgraded: group.consumer.migration.policy is %s",
                     group.group_id, self.config.group_consumer_migration_policy)
            return False
        if not group.uses_consumer_protocol() or group.protocol_name is None:
            log.info("Classic group %s is not upgraded: it does not use the consumer embedded protocol",
                     group.group_id)
            return False
        if len(group.members) > self.config.group_consumer_max_size:
            return False
        return True

    def _upgraded_state(self, group: Group, by_name: dict[str, "TopicInfo"]) -> ConsumerGroupState:
        """Kafka's ConsumerGroup.fromClassicGroup: the classic members as members of a consumer
        group at the classic generation, keeping their assignments (nothing changes until the
        heartbeat that upgrades the group is stored: ``_finish_upgrade``)."""
        state = ConsumerGroupState(group.group_id)
        state.group_epoch = state.assignment_epoch = group.generation_id
        try:
            for classic in group.members.values():
                subscription = decode_subscription(classic.metadata(group.protocol_name))
                assigned = _to_ids(decode_assignment(classic.assignment), by_name)
                member = ConsumerMember(
                    classic.member_id, instance_id=classic.group_instance_id, rack_id=subscription.rack_id,
                    rebalance_timeout_ms=classic.rebalance_timeout_ms, client_id=classic.client_id,
                    client_host=classic.client_host, subscribed_topic_names=tuple(subscription.topics),
                    member_epoch=group.generation_id, previous_member_epoch=group.generation_id,
                    assigned=assigned,
                    classic=ClassicMembership(classic.session_timeout_ms, tuple(
                        (name, bytes(metadata)) for name, metadata in classic.protocols)),
                )
                state.put_member(member)
                state.target[member.member_id] = assigned
        except MalformedProtocol as exc:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Cannot upgrade the classic group {group.group_id} to consumer group because the "
                             f"embedded consumer protocol is malformed: {exc}") from None
        self._refresh_subscriptions(state, by_name, group.group_id, [])
        return state

    def _upgrade_records(self, group: Group) -> list[tuple[bytes, bytes | None]]:
        """Kafka's convertToConsumerGroup records: the classic group's tombstone, then the
        consumer group as converted."""
        assert group.consumer is not None
        return [(storage.group_metadata_key(group.group_id), None), *consumer_records.group_records(group.consumer)]

    def _finish_upgrade(self, group: Group) -> None:
        """The upgrade is stored: parked classic JoinGroup/SyncGroup requests are answered
        REBALANCE_IN_PROGRESS (their members rejoin, now into the consumer group), and the
        converted members' session timeouts start."""
        state = group.consumer
        assert state is not None
        self.host.release_classic_members(group)
        for member in state.members.values():
            if member.classic is not None:
                self._schedule_session_timeout(group.group_id, member.member_id)
        log.info("Classic group %s is upgraded to a consumer group (group epoch %d, %d member(s))",
                 group.group_id, state.group_epoch, len(state.members))

    def _maybe_downgrade(self, group: Group, leaving_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember and convertToClassicGroup: when the last
        consumer-protocol member leaves a group of classic members, it becomes a classic group
        again (Stable at the group epoch, with the target assignment) and rebalances."""
        state = group.consumer
        assert state is not None
        leaving = state.members.get(leaving_id)
        if leaving is None or leaving.classic is not None or not state.classic_only_without(leaving_id):
            return False
        if len(state.members) <= 1:
            return False
        if self.config.group_consumer_migration_policy not in ("downgrade", "bidirectional"):
            log.info("Consumer group %s is not downgraded: group.consumer.migration.policy is %s",
                     group.group_id, self.config.group_consumer_migration_policy)
            return False
        if len(state.members) - 1 > self.config.group_max_size:
            return False
        names = {m.topic_id: m.name for m in state.subscription_metadata.values()}
        classic_group = Group(group.group_id, self.host.wall_clock(), GroupState.STABLE)
        classic_group.generation_id = state.group_epoch
        classic_group.protocol_type = CONSUMER_PROTOCOL_TYPE
        for member in state.members.values():
            if member.member_id == leaving_id or member.classic is None:
                continue
            classic_group.add(ClassicMember(
                member.member_id, member.instance_id, member.client_id, member.client_host,
                member.rebalance_timeout_ms, member.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE,
                list(member.classic.protocols)), None)
        classic_group.protocol_name = classic_group.select_protocol()
        for classic in classic_group.members.values():
            target = state.target.get(classic.member_id, {})
            partitions = [(names[t], sorted(ps)) for t, ps in sorted(target.items()) if t in names]
            classic.assignment = encode_assignment(
                partitions, protocol_version(classic.metadata(classic_group.protocol_name)))
        records = [*consumer_records.member_tombstones(group.group_id, leaving_id)]
        for member_id in state.members:
            if member_id != leaving_id:
                records.extend(consumer_records.member_tombstones(group.group_id, member_id))
        records.extend(consumer_records.group_tombstones(group.group_id))
        records.append(self.host.classic_group_record(classic_group))
        self._append(group, records)
        for member_id in list(state.members):
            self.host.cancel_timer(("consumer-session", group.group_id, member_id))
            self.host.cancel_timer(("consumer-rebalance", group.group_id, member_id))
        offsets = (group.offsets, group.offset_positions, group.pending_commits)
        classic_group.offsets, classic_group.offset_positions, classic_group.pending_commits = offsets
        self.host.groups[group.group_id] = classic_group
        self.host.adopt_classic_group(classic_group, f"downgrade of group {group.group_id} from consumer to classic")
        log.info("Consumer group %s is downgraded to a classic group: its last consumer-protocol member %s left",
                 group.group_id, leaving_id)
        return True

    def _heartbeat(self, req: HeartbeatRequest, topics: Callable[[], "Iterable[TopicInfo]"]) -> HeartbeatResult:
        by_name = {t.name: t for t in topics()}
        upgrading = self._upgrade_candidate(req.group_id, req.member_epoch == 0)
        group = self._consumer_group(req.group_id, create=req.member_epoch == 0, by_name=by_name)
        state = group.consumer
        assert state is not None
        snapshot = None if upgrading else state.snapshot()
        try:
            max_size = self.config.group_consumer_max_size
            if len(state.members) >= max_size and (not req.member_id or req.member_id not in state.members):
                raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {max_size} members.")
            member_id = req.member_id or new_member_id()
            member, replaced_id = self._member_for(state, req, member_id)
            prefix = self._upgrade_records(group) if upgrading else []
            result = self._apply_heartbeat(group, state, req, member, replaced_id, by_name, prefix)
        except KafkaError:
            group.consumer = snapshot  # an upgrade that did not happen leaves the classic group as it was
            raise
        if upgrading:
            self._finish_upgrade(group)
        return result

    def _upgrade_candidate(self, group_id: str, joining: bool) -> bool:
        group = self.host.groups.get(group_id)
        return joining and group is not None and group.consumer is None and bool(group.members)

    def _member_for(self, state: ConsumerGroupState, req: HeartbeatRequest,
                    member_id: str) -> tuple[ConsumerMember, str | None]:
        """The member the heartbeat is from (new on a join), and the id of the static member it
        replaces, if any (Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember)."""
        joining = req.member_epoch == 0
        if req.instance_id is None:
            member = state.members.get(member_id)
            if member is None:
                if not joining:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {state.group_id}.")
                member = ConsumerMember(member_id)
                log.info("Member %s joins consumer group %s", member_id, state.group_id)
            self._check_epoch(member, req)
            return member, None
        existing = state.static_member(req.instance_id)
        if joining:
            if existing is None:
                log.info("Static member %s (instance %s) joins consumer group %s", member_id, req.instance_id,
                         state.group_id)
                return state.members.get(member_id) or ConsumerMember(member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} cannot join the group because "
                    f"the instance id is owned by {existing.member_id} member.")
            log.info("Static member with instance id %s rejoins consumer group %s as %s, replacing %s",
                     req.instance_id, state.group_id, member_id, existing.member_id)
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing.member_id
        if existing is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                             f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                             f"{existing.member_id}.")
        self._check_epoch(existing, req)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: the previous epoch is accepted with a
        subset of the assignment, in case the answer that bumped the epoch was lost."""
        received = req.member_epoch
        if received > member.member_epoch:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a greater member epoch ({received}) than the one "
                             f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                             "all its partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch or not is_subset(req.owned, member.assigned)):
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a smaller member epoch ({received}) than the one "
                             f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                             "all its partitions and rejoin.")

    def _apply_heartbeat(self, group: Group, state: ConsumerGroupState, req: HeartbeatRequest,
                         member: ConsumerMember, replaced_id: str | None,
                         by_name: dict[str, "TopicInfo"],
                         prefix: list[tuple[bytes, bytes | None]] | None = None) -> HeartbeatResult:
        records: list[tuple[bytes, bytes | None]] = list(prefix or [])
        if replaced_id is not None:
            target = state.target.get(replaced_id)
            self._remove_member(group, replaced_id, records)
            if target is not None:
                state.target[member.member_id] = target
                records.append(consumer_records.target_member(group.group_id, member.member_id, target))
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=req.client_id, client_host=req.client_host,
        )
        if updated.subscribed_topic_regex and updated.subscribed_topic_regex != member.subscribed_topic_regex:
            self._compiled(updated.subscribed_topic_regex)  # INVALID_REGULAR_EXPRESSION
        bump = state.group_epoch == 0 or updated.subscription()[:2] != member.subscription()[:2]
        if updated != member or replaced_id is not None or member.member_id not in state.members:
            records.append(consumer_records.member_metadata(group.group_id, updated))
        state.put_member(updated)
        bump |= self._refresh_subscriptions(state, by_name, group.group_id, records)
        if bump:
            state.group_epoch += 1
            records.append(consumer_records.group_epoch(group.group_id, state.group_epoch))
            log.info("Consumer group %s: group epoch bumped to %d", group.group_id, state.group_epoch)
        if state.group_epoch > state.assignment_epoch:
            self._update_target_assignment(group.group_id, state, records)
        reconciled = state.reconcile(state.members[updated.member_id], req.owned)
        moved = reconciled != state.members[updated.member_id]
        if moved:
            state.put_member(reconciled)
            records.append(consumer_records.current_assignment(group.group_id, reconciled))
        self._append(group, records)
        self._after_heartbeat(group, reconciled, moved)
        full_request = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None and req.owned is not None)
        send_assignment = full_request or reconciled.assigned != member.assigned
        return HeartbeatResult(
            member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.host.group_configs.of(group.group_id).consumer_heartbeat_interval_ms,
            assignment=dict(reconciled.assigned) if send_assignment else None,
        )

    def _after_heartbeat(self, group: Group, member: ConsumerMember, moved: bool) -> None:
        """Register a new group, then re-arm the member's session timeout. Its rebalance timeout
        is armed when reconciliation leaves it partitions to revoke and cancelled when it moves on
        (as Kafka's maybeReconcile): heartbeats in between do not push the deadline back, so a
        member that keeps heartbeating without revoking is still removed."""
        self.host.groups.setdefault(group.group_id, group)
        self._schedule_session_timeout(group.group_id, member.member_id)
        if not moved:
            return
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            self._schedule_rebalance_timeout(group.group_id, member)
        else:
            self.host.cancel_timer(("consumer-rebalance", group.group_id, member.member_id))

    def _append(self, group: Group, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        try:
            self._appended.append(self.host.append_records(group.group_id, records))
        except KafkaError as exc:
            log.warning("Could not store the state of consumer group %s: %s", group.group_id, exc.message)
            raise

    # ---- subscriptions, regexes and the target assignment -----------------------------------------

    def _compiled(self, pattern: str) -> "re.Pattern[str]":
        compiled = self._regexes.get(pattern)
        if compiled is None:
            compiled = compile_regex(pattern)
            if len(self._regexes) >= MAX_COMPILED_REGEXES:
                self._regexes.pop(next(iter(self._regexes)))
            self._regexes[pattern] = compiled
        return compiled

    def _refresh_subscriptions(self, state: ConsumerGroupState, by_name: dict[str, "TopicInfo"], group_id: str,
                               records: list[tuple[bytes, bytes | None]]) -> bool:
        """Resolve the group's regexes against the topics that exist now and recompute the
        subscribed topics' metadata; True when either changed (the group epoch must be bumped)."""
        changed = False
        regexes = {m.subscribed_topic_regex for m in state.members.values() if m.subscribed_topic_regex}
        resolved: dict[str, frozenset[str]] = {}
        for pattern in regexes:
            try:
                compiled = self._compiled(pattern)
            except KafkaError:
                resolved[pattern] = frozenset()
                continue
            resolved[pattern] = frozenset(name for name in by_name if compiled.fullmatch(name))
        if resolved != state.resolved_regexes:
            state.resolved_regexes = resolved
            changed = True
        metadata = {
            name: TopicMetadata(by_name[name].topic_id, name, by_name[name].partitions)
            for name in sorted(state.subscribed_topic_names()) if name in by_name
        }
        if metadata != state.subscription_metadata:
            state.subscription_metadata = metadata
            records.append(consumer_records.partition_metadata(group_id, metadata))
            changed = True
        return changed

    def _update_target_assignment(self, group_id: str, state: ConsumerGroupState,
                                  records: list[tuple[bytes, bytes | None]]) -> None:
        name = state.preferred_assignor(self.assignors[0])
        metadata = state.subscription_metadata
        specs = {
            member_id: MemberSpec(
                frozenset(metadata[n].topic_id for n in state.member_topic_names(member) if n in metadata),
                state.target.get(member_id, {}), member.rack_id,
            )
            for member_id, member in state.members.items()
        }
        target = ASSIGNORS[name](specs, {m.topic_id: m.partitions for m in metadata.values()})
        for member_id, assignment in target.items():
            if state.target.get(member_id) != assignment:
                records.append(consumer_records.target_member(group_id, member_id, assignment))
        state.target = target
        state.assignment_epoch = state.group_epoch
        records.append(consumer_records.target_metadata(group_id, state.assignment_epoch))
        log.info("Consumer group %s: target assignment of epoch %d computed by the %s assignor for %d member(s)",
                 group_id, state.assignment_epoch, name, len(target))

    # ---- classic members in a consumer group (after an online upgrade) ---------------------------

    def classic_join(self, group: Group, member_id: str, instance_id: str | None, protocol_type: str,
                     protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                     client_id: str, client_host: str, version: int,
                     topics: Callable[[], "Iterable[TopicInfo]"]) -> JoinResult | Waiter:
        """The answer, or a Waiter that has it once the join's records are replicated."""
        self._appended = []
        result = self._classic_join_now(group, member_id, instance_id, protocol_type, protocols, session_timeout_ms,
                                        rebalance_timeout_ms, client_id, client_host, version, topics)
        answer = Waiter()

        def on_stored(error: int) -> None:
            answer.complete(result if not error or result.error else JoinResult(error, result.member_id))

        return answer if self._when_replicated(group.group_id, on_stored) else result

    def _classic_join_now(self, group: Group, member_id: str, instance_id: str | None, protocol_type: str,
                          protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                          client_id: str, client_host: str, version: int,
                          topics: Callable[[], "Iterable[TopicInfo]"]) -> JoinResult:
        """Kafka's classicGroupJoinToConsumerGroup: the member's subscription comes from its
        protocol metadata; the answer carries its member epoch as the generation, and no leader
        work (the coordinator assigns); SyncGroup then hands out its partitions."""
        state = group.consumer
        assert state is not None
        unknown = not member_id
        member_id = member_id or new_member_id()
        max_size = self.config.group_consumer_max_size
        if len(state.members) >= max_size and member_id not in state.members:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
        if not state.supports_classic_protocols(protocol_type, [name for name, _ in protocols], CONSUMER_PROTOCOL_TYPE):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if unknown and version >= 4 and instance_id is None:
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        try:
            subscription = decode_subscription(protocols[0][1])
        except MalformedProtocol:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        replaced_id = None
        existing = state.static_member(instance_id) if instance_id is not None else None
        if existing is not None and existing.member_id != member_id:
            member = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            replaced_id = existing.member_id
        else:
            member = state.members.get(member_id) or ConsumerMember(member_id)
        by_name = {t.name: t for t in topics()}
        req = HeartbeatRequest(
            group.group_id, member_id, member.member_epoch, instance_id=instance_id,
            rack_id=subscription.rack_id, rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics,
            owned=[(by_name[t].topic_id, ps) for t, ps in subscription.owned if t in by_name],
            client_id=client_id, client_host=client_host,
        )
        snapshot = state.snapshot()
        classic = ClassicMembership(session_timeout_ms, tuple((n, bytes(m)) for n, m in protocols))
        try:
            result = self._apply_heartbeat(group, state, req, replace(member, classic=classic), replaced_id,
                                           by_name)
        except KafkaError as exc:
            group.consumer = snapshot
            return JoinResult(exc.code, member_id)
        self._schedule_session_timeout(group.group_id, member_id, session_timeout_ms)
        return JoinResult(ErrorCode.NONE, member_id, result.member_epoch, CONSUMER_PROTOCOL_TYPE, protocols[0][0])

    def _classic_member(self, state: ConsumerGroupState, member_id: str,
                        instance_id: str | None) -> ConsumerMember | int:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = state.members.get(member_id)
        else:
            member = state.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return member

    def classic_sync(self, group: Group, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        state = group.consumer
        assert state is not None
        member = self._classic_member(state, member_id, instance_id)
        if isinstance(member, int):
            return SyncResult(member)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        name = member.classic.protocols[0][0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if member.member_epoch < state.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self._schedule_session_timeout(group.group_id, member.member_id, member.classic.session_timeout_ms)
        names = {m.topic_id: m.name for m in state.subscription_metadata.values()}
        partitions = [(names[t], sorted(ps)) for t, ps in sorted(member.assigned.items()) if t in names]
        assignment = encode_assignment(partitions, protocol_version(member.classic.protocols[0][1]))
        return SyncResult(ErrorCode.NONE, assignment, CONSUMER_PROTOCOL_TYPE, name)

    def classic_heartbeat(self, group: Group, member_id: str, instance_id: str | None, generation_id: int) -> int:
        """Kafka's classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS while the member
        must rejoin to catch up with the group epoch, revoke, or collect freed partitions."""
        state = group.consumer
        assert state is not None
        member = self._classic_member(state, member_id, instance_id)
        if isinstance(member, int):
            return member
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_session_timeout(group.group_id, member.member_id, member.classic.session_timeout_ms)
        if member.member_epoch < state.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS or (
                member.state == MemberState.UNRELEASED_PARTITIONS and not state.waiting_on_unreleased(member)):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, group: Group, identities: list[tuple[str, str | None]]) -> list[int]:
        """Kafka's classicGroupLeaveToConsumerGroup: per member, its error code."""
        state = group.consumer
        assert state is not None
        errors = []
        for member_id, instance_id in identities:
            if instance_id is None:
                member = state.members.get(member_id)
                error = ErrorCode.UNKNOWN_MEMBER_ID if member is None or member.classic is None else ErrorCode.NONE
            else:
                member = state.static_member(instance_id)
                if member is None or member.classic is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and member.member_id != member_id:
                    error = ErrorCode.FENCED_INSTANCE_ID
                else:
                    error = ErrorCode.NONE
            if error == ErrorCode.NONE:
                assert member is not None
                snapshot = state.snapshot()
                try:
                    self._fence(group, member.member_id, "left the group (LeaveGroup)", [])
                except KafkaError as exc:
                    group.consumer = state = snapshot
                    error = exc.code
            errors.append(error)
        self._appended = []  # LeaveGroup is answered once the records are appended
        return errors

    # ---- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self._consumer_group(req.group_id, create=False)
        state = group.consumer
        assert state is not None
        records: list[tuple[bytes, bytes | None]] = []
        if req.instance_id is None:
            member = state.members.get(req.member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {req.group_id}.")
        else:
            member = state.static_member(req.instance_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                                 f"member {member.member_id}.")
        snapshot = state.snapshot()
        try:
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # The static member keeps its partitions until it rejoins or its session times out.
                left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
                state.put_member(left)
                records.append(consumer_records.current_assignment(group.group_id, left))
                self._append(group, records)
                self.host.cancel_timer(("consumer-rebalance", group.group_id, member.member_id))
                self._schedule_session_timeout(group.group_id, member.member_id)
                log.info("Static member %s (instance %s) of consumer group %s leaves for now",
                         member.member_id, req.instance_id, group.group_id)
            else:
                self._fence(group, member.member_id, "left the group", records)
        except KafkaError:
            group.consumer = snapshot
            self._schedule_session_timeout(group.group_id, member.member_id)
            raise
        return HeartbeatResult(member_id=member.member_id, member_epoch=req.member_epoch,
                               heartbeat_interval_ms=0)

    def _remove_member(self, group: Group, member_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        state = group.consumer
        assert state is not None
        state.remove_member(member_id)
        records.extend(consumer_records.member_tombstones(group.group_id, member_id))
        self.host.cancel_timer(("consumer-session", group.group_id, member_id))
        self.host.cancel_timer(("consumer-rebalance", group.group_id, member_id))

    def _fence(self, group: Group, member_id: str, reason: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Remove a member and bump the group epoch; the others get the new target assignment
        at their next heartbeat (Kafka's consumerGroupFenceMember)."""
        state = group.consumer
        assert state is not None
        if self._maybe_downgrade(group, member_id):
            return
        self._remove_member(group, member_id, records)
        names = state.subscribed_topic_names()
        metadata = {n: m for n, m in state.subscription_metadata.items() if n in names}
        if metadata != state.subscription_metadata:
            state.subscription_metadata = metadata
            records.append(consumer_records.partition_metadata(group.group_id, metadata))
        state.group_epoch += 1
        records.append(consumer_records.group_epoch(group.group_id, state.group_epoch))
        self._append(group, records)
        log.info("Member %s of consumer group %s is removed (%s); group epoch %d", member_id, group.group_id,
                 reason, state.group_epoch)

    def _schedule_session_timeout(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        if timeout_ms is None:
            group = self.host.groups.get(group_id)
            member = group.consumer.members.get(member_id) if group is not None and group.consumer else None
            classic = member.classic if member is not None else None
            timeout_ms = classic.session_timeout_ms if classic is not None else \
                self.host.group_configs.of(group_id).consumer_session_timeout_ms
        self.host.schedule_timer(("consumer-session", group_id, member_id), timeout_ms,
                                 lambda: self._expire(group_id, member_id, None, "its session timed out"))

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerMember) -> None:
        key = ("consumer-rebalance", group_id, member.member_id)
        epoch = member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else \
            self.config.group_consumer_session_timeout_ms
        self.host.schedule_timer(key, timeout, lambda: self._expire(
            group_id, member.member_id, epoch, "it did not revoke its partitions within its rebalance timeout"))

    def _expire(self, group_id: str, member_id: str, unrevoked_at_epoch: int | None, reason: str) -> None:
        group = self.host.groups.get(group_id)
        state = group.consumer if group is not None else None
        if group is None or state is None or member_id not in state.members:
            return
        member = state.members[member_id]
        if unrevoked_at_epoch is not None and (
                member.state != MemberState.UNREVOKED_PARTITIONS or member.member_epoch != unrevoked_at_epoch):
            return
        snapshot = state.snapshot()
        try:
            self._fence(group, member_id, reason, [])
            self._appended = []  # a timer: nobody waits for its records
        except KafkaError as exc:
            group.consumer = snapshot
            self._schedule_session_timeout(group_id, member_id)  # tried again a session timeout later
            log.warning("Consumer group %s keeps member %s for now: %s", group_id, member_id, exc.message)

    def on_loaded(self, group: Group) -> None:
        """A group read back from __consumer_offsets: its members must heartbeat within a
        session timeout from now."""
        if group.consumer is None or group.consumer.group_type != "consumer":  # streams: its own coordinator
            return
        for member_id in group.consumer.members:
            self._schedule_session_timeout(group.group_id, member_id)

    def on_unloaded(self, group: Group) -> None:
        if group.consumer is None or group.consumer.group_type != "consumer":
            return
        for member_id in group.consumer.members:
            self.host.cancel_timer(("consumer-session", group.group_id, member_id))
            self.host.cancel_timer(("consumer-rebalance", group.group_id, member_id))

    # ---- ConsumerGroupDescribe ------------------------------------------------------------------

    def describe(self, group_id: str) -> tuple[int, str | None, ConsumerGroupState | None]:
        error = self.host.check_group_id(group_id)
        if error:
            return error, None, None
        group = self.host.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if group.consumer is None or group.type_name() != "consumer":
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return ErrorCode.NONE, None, group.consumer

    def default_assignor(self) -> str:
        return self.assignors[0]

