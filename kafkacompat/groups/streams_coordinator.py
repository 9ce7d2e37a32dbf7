"""KIP-1071 streams groups in the group coordinator: StreamsGroupHeartbeat and
StreamsGroupDescribe, the members' session and rebalance timeouts.

Follows Kafka's GroupMetadataManager.streamsGroupHeartbeat: (1) the member is created or updated
and the group epoch bumped when it is new, its assignment configuration changed or the
topology's tasks changed (topics created, partitions added); (2) the target assignment is
recomputed by the sticky task assignor when the group epoch is ahead of it; (3) the member is
reconciled towards its target as a consumer group member is (a task reaches its new owner only
once its previous owner revoked it).

Every change is written to the group's __consumer_offsets partition as Kafka's StreamsGroup*
records (streams_records.py: the difference from what was last written, tombstones for what
went) with acks=-1, and the heartbeat is answered once the ISR has them; if the append fails the
group goes back to its state before the heartbeat. A restarted or new coordinator replays them
(coordinator.py's load), so members carry on with their epochs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable

from kafkacompat.groups.consumer_coordinator import GroupsHost
from kafkacompat.groups.consumer_group import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, \
    Assignment, MemberState, is_subset
from kafkacompat.groups import streams_records
from kafkacompat.groups.state import Group, GroupState, Waiter
from kafkacompat.groups.streams_group import (
    ConfiguredTopology,
    InternalTopic,
    Status,
    StreamsGroupState,
    StreamsMember,
    StreamsTopology,
    assign_tasks,
    configure,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.controller.topics import TopicInfo

log = logging.getLogger("kafkacompat.groups")

Owned = list[tuple[str, list[int]]]


@dataclass(slots=True)
class StreamsHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: StreamsTopology | None = None
    active: Owned | None = None
    standby: Owned | None = None
    warmup: Owned | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    endpoint_information_epoch: int = 0
    task_offsets: list | None = None
    task_end_offsets: list | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class StreamsHeartbeatResult:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    statuses: list[tuple[int, str]] = field(default_factory=list)
    active: Assignment | None = None
    standby: Assignment | None = None
    to_create: list[InternalTopic] = field(default_factory=list)
    endpoints: list[tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]]] | None = None
    endpoint_information_epoch: int = 0


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


class StreamsGroupCoordinator:
    def __init__(self, host: GroupsHost) -> None:
        self.host = host
        self.config = host.config

    # ---- validation (Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid) ---------------------

    @staticmethod
    def _refuse_unsupported(req: StreamsHeartbeat) -> None:
        """Kafka 4.2's throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures, checked first."""
        if req.instance_id is not None:
            raise _invalid("Static membership is not yet supported.")
        if req.task_offsets is not None:
            raise _invalid("TaskOffsets are not supported yet.")
        if req.task_end_offsets is not None:
            raise _invalid("TaskEndOffsets are not supported yet.")
        if req.warmup:
            raise _invalid("WarmupTasks are not supported yet.")
        if req.topology is not None and any(s.source_topic_regex for s in req.topology.subtopologies):
            raise _invalid("Regular expressions for source topics are not supported yet.")

    @staticmethod
    def _validate(req: StreamsHeartbeat) -> None:
        """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid, then its topology checks."""
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
            for name, tasks in (("ActiveTasks", req.active), ("StandbyTasks", req.standby),
                                ("WarmupTasks", req.warmup)):
                if tasks:
                    raise _invalid(f"{name} must be empty when (re-)joining.")
            if req.topology is None:
                raise _invalid("Topology must be non-null when (re-)joining.")
            req.topology.validate()
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid(f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2.")
        tasks = (req.active, req.standby, req.warmup)
        if any(t is not None for t in tasks) and any(t is None for t in tasks):
            raise _invalid("If one task-type is non-null, all must be non-null.")
        if req.member_epoch != 0 and req.topology is not None:
            raise _invalid("Topology can only be provided when (re-)joining.")

    # ---- StreamsGroupHeartbeat -----------------------------------------------------------------

    async def heartbeat(self, req: StreamsHeartbeat,
                        topics: Callable[[], "Iterable[TopicInfo]"]) -> StreamsHeartbeatResult:
        """StreamsGroupHeartbeat, answered once its records are replicated; a heartbeat that
        fails changes nothing."""
        existing = self.host.groups.get(req.group_id)
        before = existing.consumer if existing is not None else None
        if isinstance(before, StreamsGroupState):
            before = before.snapshot()
        result = self._heartbeat_now(req, topics)
        group = self.host.groups.get(req.group_id)
        if result.error:
            if existing is not None:
                existing.consumer = before
            return result
        if group is None or not isinstance(group.consumer, StreamsGroupState):
            return result
        try:
            appended = self._persist(group)
        except KafkaError as exc:
            self._undo(group, existing, before, req.member_id)
            return StreamsHeartbeatResult(exc.code, exc.message, member_id=req.member_id)
        if appended is not None:
            stored = Waiter()
            self.host.when_replicated(group.group_id, appended, stored.complete)
            error = await stored.wait()
            if error:
                log.warning("The state of streams group %s was not replicated: %s", req.group_id, error)
                return StreamsHeartbeatResult(error, "The group's state could not be stored.",
                                              member_id=req.member_id)
        return result

    def _persist(self, group: Group) -> object | None:
        """Append the records of the group's change since its last write (acks=-1); returns what
        ``when_replicated`` waits for, None when nothing changed. Raises KafkaError."""
        state = group.consumer
        assert isinstance(state, StreamsGroupState)
        after = streams_records.group_records(state)
        records = streams_records.changes(state.persisted, after)
        if not records:
            return None
        try:
            appended = self.host.append_records(group.group_id, records)
        except KafkaError as exc:
            log.warning("Could not store the state of streams group %s: %s", group.group_id, exc.message)
            raise
        state.persisted = after
        return appended

    def _undo(self, group: Group, existing: Group | None, before: object, member_id: str) -> None:
        """A heartbeat whose records could not be appended: back to the group before it."""
        if existing is None:  # a group this heartbeat created
            self.host.groups.pop(group.group_id, None)
        else:
            existing.consumer = before  # type: ignore[assignment]
        if not isinstance(before, StreamsGroupState) or member_id not in before.members:
            self.host.cancel_timer(("streams-session", group.group_id, member_id))
            self.host.cancel_timer(("streams-rebalance", group.group_id, member_id))

    def _heartbeat_now(self, req: StreamsHeartbeat,
                       topics: Callable[[], "Iterable[TopicInfo]"]) -> StreamsHeartbeatResult:
        try:
            self._refuse_unsupported(req)
            self._validate(req)
            error = self.host.check_group_id(req.group_id)
            if error:
                return StreamsHeartbeatResult(error)
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:  # -2 is static membership: refused above
                return self._leave(req)
            return self._heartbeat(req, {t.name: t for t in topics()})
        except KafkaError as exc:
            return StreamsHeartbeatResult(exc.code, exc.message, member_id=req.member_id)

    def _streams_group(self, group_id: str, create: bool) -> Group:
        group = self.host.groups.get(group_id)
        if group is not None and isinstance(group.consumer, StreamsGroupState):
            return group
        if group is None or group.is_in(GroupState.DEAD):
            if not create:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
            group = Group(group_id, self.host.wall_clock())
        elif group.consumer is not None or group.members or group.pending_members or not create:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        group.consumer = StreamsGroupState(group_id)
        return group

    def _heartbeat(self, req: StreamsHeartbeat, by_name: dict[str, "TopicInfo"]) -> StreamsHeartbeatResult:
        group = self._streams_group(req.group_id, create=req.member_epoch == 0)
        state = group.consumer
        assert isinstance(state, StreamsGroupState)
        member = state.members.get(req.member_id)
        if member is None:
            if req.member_epoch != 0:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {req.group_id}.")
            max_size = self.config.group_streams_max_size
            if len(state.members) >= max_size:
                raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The streams group has reached its maximum capacity of {max_size} members.")
            member = StreamsMember(req.member_id)
            log.info("Member %s joins streams group %s", req.member_id, req.group_id)
        assert isinstance(member, StreamsMember)
        if req.member_epoch != 0:
            self._check_epoch(member, req)
        statuses: list[tuple[int, str]] = []
        if req.topology is not None:
            self._check_topology(state, req.topology)
        bump = state.group_epoch == 0 or member.member_id not in state.members
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            topology_epoch=req.topology.epoch if req.topology is not None else member.topology_epoch,
            process_id=req.process_id if req.process_id is not None else member.process_id,
            user_endpoint=req.user_endpoint if req.user_endpoint is not None else member.user_endpoint,
            client_tags=req.client_tags if req.client_tags is not None else member.client_tags,
            client_id=req.client_id, client_host=req.client_host,
        )
        bump |= updated.assignment_config() != member.assignment_config()
        state.put_member(updated)
        configured = configure(state.topology, by_name) if state.topology is not None else ConfiguredTopology()
        # The task counts against those the epoch was bumped for (kept across a restart).
        metadata_hash = streams_records.tasks_hash(configured.tasks)
        if metadata_hash != state.metadata_hash:
            bump = True
            state.metadata_hash = metadata_hash
        state.configured = configured
        if state.topology is not None and updated.topology_epoch < state.topology.epoch:
            statuses.append((Status.STALE_TOPOLOGY,
                             f"The member's topology epoch {updated.topology_epoch} is behind the group's topology "
                             f"epoch {state.topology.epoch}."))
        if bump:
            state.group_epoch += 1
            log.info("Streams group %s: group epoch bumped to %d", group.group_id, state.group_epoch)
        if state.group_epoch > state.assignment_epoch:
            self._update_target_assignment(group.group_id, state)
        if configured.ready:
            self._check_owned_tasks(configured, req)
        if req.shutdown_application:
            state.shutdown_requested = req.member_id
            log.info("Member %s asks streams group %s to shut down", req.member_id, req.group_id)
        statuses.extend(configured.statuses)
        if state.shutdown_requested:
            statuses.append((Status.SHUTDOWN_APPLICATION,
                             f"Streams group member {state.shutdown_requested} encountered a fatal error and "
                             "requested a shutdown for the entire application."))
        reconciled = state.reconcile(state.members[updated.member_id], req.active)
        assert isinstance(reconciled, StreamsMember)
        if reconciled.member_epoch == state.assignment_epoch and reconciled.state != MemberState.UNREVOKED_PARTITIONS:
            reconciled = replace(reconciled, standby=state.standby_target.get(reconciled.member_id, {}))
        state.put_member(reconciled)
        self._after_heartbeat(group, member, reconciled)
        # Kafka sends the assignment on a join and when it changed; a member with an endpoint
        # that is sent its tasks bumps the endpoint information epoch.
        send = req.member_epoch == 0 or (reconciled.assigned, reconciled.standby) != (member.assigned, member.standby)
        if send and reconciled.user_endpoint is not None:
            state.endpoint_information_epoch += 1
        endpoints = None
        if req.endpoint_information_epoch != state.endpoint_information_epoch:
            endpoints = self._endpoints(state)
        return StreamsHeartbeatResult(
            member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.host.group_configs.of(group.group_id).streams_heartbeat_interval_ms,
            statuses=statuses, active=dict(reconciled.assigned) if send else None,
            standby=dict(reconciled.standby) if send else None, to_create=configured.to_create,
            endpoints=endpoints, endpoint_information_epoch=state.endpoint_information_epoch,
        )

    @staticmethod
    def _check_epoch(member: StreamsMember, req: StreamsHeartbeat) -> None:
        """Kafka's throwIfStreamsGroupMemberEpochIsInvalid: the previous epoch is accepted with a
        subset of the active tasks, in case the answer that bumped the epoch was lost."""
        received = req.member_epoch
        relation = None
        if received > member.member_epoch:
            relation = "greater"
        elif received < member.member_epoch and (
                received != member.previous_member_epoch
                or not is_subset(req.active, member.assigned)):  # type: ignore[arg-type]
            relation = "smaller"
        if relation is not None:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The streams group member has a {relation} member epoch ({received}) than the one "
                             f"known by the group coordinator ({member.member_epoch}). The member must abandon all "
                             "its partitions and rejoin.")

    @staticmethod
    def _check_topology(state: StreamsGroupState, topology: StreamsTopology) -> None:
        """Kafka's maybeUpdateTopology: the first topology initializes the group's; an older one
        is answered STALE_TOPOLOGY (by the caller); any other change is refused."""
        current = state.topology
        if current is None or not state.members:  # an empty group takes a new topology
            state.topology = topology
        elif topology.epoch >= current.epoch and topology != current:
            raise _invalid("Topology updates are not supported yet.")

    @staticmethod
    def _check_owned_tasks(configured: ConfiguredTopology, req: StreamsHeartbeat) -> None:
        for tasks in (req.active, req.standby, req.warmup):
            for subtopology_id, partitions in tasks or []:
                count = configured.tasks.get(subtopology_id)
                if count is None:
                    raise _invalid(f"Subtopology {subtopology_id} does not exist in the topology.")
                for partition in partitions:
                    if not 0 <= partition < count:
                        raise _invalid(f"Task {partition} for subtopology {subtopology_id} is invalid. Number of "
                                       f"tasks for this subtopology: {count}")

    def _update_target_assignment(self, group_id: str, state: StreamsGroupState) -> None:
        tasks = state.configured.tasks if state.configured is not None else {}
        members = {m: v for m, v in state.members.items() if isinstance(v, StreamsMember)}
        standby_replicas = self.host.group_configs.of(group_id).streams_num_standby_replicas
        active, standby = assign_tasks(members, tasks, state.target, standby_replicas)
        state.target = active
        state.standby_target = standby
        state.assignment_epoch = state.group_epoch
        state.assignment_configs = (("num.standby.replicas", str(standby_replicas)),)
        log.info("Streams group %s: target assignment of epoch %d: %d task(s) over %d member(s)",
                 group_id, state.assignment_epoch, sum(tasks.values()), len(members))

    @staticmethod
    def _endpoints(state: StreamsGroupState) -> list:
        """Which source topic partitions every member with a user endpoint holds (active, standby)."""
        sources = state.configured.source_partitions if state.configured is not None else {}
        found = []
        for member in state.members.values():
            if not isinstance(member, StreamsMember) or member.user_endpoint is None:
                continue
            by_kind = []
            for tasks in (member.assigned, member.standby):
                partitions: dict[str, set[int]] = {}
                for subtopology_id, indexes in tasks.items():
                    for topic, count in sources.get(subtopology_id, {}).items():
                        partitions.setdefault(topic, set()).update(i for i in indexes if i < count)
                by_kind.append({t: sorted(ps) for t, ps in sorted(partitions.items())})
            found.append((member.user_endpoint, by_kind[0], by_kind[1]))
        return found

    def _after_heartbeat(self, group: Group, before: StreamsMember, member: StreamsMember) -> None:
        """Register a new group, re-arm the member's session timeout and, when it has just been
        asked to revoke tasks, its rebalance timeout (not re-armed by later heartbeats: a member
        that keeps its tasks is fenced once it runs out, as Kafka does)."""
        self.host.groups.setdefault(group.group_id, group)
        self._schedule_session_timeout(group.group_id, member.member_id)
        key = ("streams-rebalance", group.group_id, member.member_id)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if before.state == MemberState.UNREVOKED_PARTITIONS and before.member_epoch == member.member_epoch \
                    and before.member_id in group.consumer.members:  # type: ignore[union-attr]
                return
            epoch = member.member_epoch
            timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else \
                self.host.group_configs.of(group.group_id).streams_session_timeout_ms
            self.host.schedule_timer(key, timeout, lambda: self._expire(
                group.group_id, member.member_id, epoch, "it did not revoke its tasks within its rebalance timeout"))
        else:
            self.host.cancel_timer(key)

    # ---- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, req: StreamsHeartbeat) -> StreamsHeartbeatResult:
        group = self._streams_group(req.group_id, create=False)
        state = group.consumer
        assert state is not None
        if req.member_id not in state.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {req.group_id}.")
        self._fence(group, req.member_id, "left the group")
        return StreamsHeartbeatResult(member_id=req.member_id, member_epoch=req.member_epoch)

    def _fence(self, group: Group, member_id: str, reason: str) -> None:
        """Remove a member and bump the group epoch; the others get the new target assignment
        at their next heartbeat (Kafka's streamsGroupFenceMember)."""
        state = group.consumer
        assert isinstance(state, StreamsGroupState)
        state.remove_member(member_id)
        state.standby_target.pop(member_id, None)
        self.host.cancel_timer(("streams-session", group.group_id, member_id))
        self.host.cancel_timer(("streams-rebalance", group.group_id, member_id))
        state.group_epoch += 1
        if not state.members:
            state.shutdown_requested = None
        log.info("Member %s of streams group %s is removed (%s); group epoch %d", member_id, group.group_id,
                 reason, state.group_epoch)

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        timeout_ms = self.host.group_configs.of(group_id).streams_session_timeout_ms
        self.host.schedule_timer(("streams-session", group_id, member_id), timeout_ms,
                                 lambda: self._expire(group_id, member_id, None, "its session timed out"))

    def _expire(self, group_id: str, member_id: str, unrevoked_at_epoch: int | None, reason: str) -> None:
        group = self.host.groups.get(group_id)
        state = group.consumer if group is not None else None
        if group is None or not isinstance(state, StreamsGroupState) or member_id not in state.members:
            return
        member = state.members[member_id]
        if unrevoked_at_epoch is not None and (
                member.state != MemberState.UNREVOKED_PARTITIONS or member.member_epoch != unrevoked_at_epoch):
            return
        snapshot = state.snapshot()
        self._fence(group, member_id, reason)
        try:
            self._persist(group)  # a timer: nobody waits for its records
        except KafkaError as exc:
            group.consumer = snapshot
            self._schedule_session_timeout(group_id, member_id)  # tried again a session timeout later
            log.warning("Streams group %s keeps member %s for now: %s", group_id, member_id, exc.message)

    def on_loaded(self, group: Group) -> None:
        """A group read back from __consumer_offsets: its members must heartbeat within a
        session timeout from now."""
        if not isinstance(group.consumer, StreamsGroupState):
            return
        for member_id in group.consumer.members:
            self._schedule_session_timeout(group.group_id, member_id)

    def on_unloaded(self, group: Group) -> None:
        if not isinstance(group.consumer, StreamsGroupState):
            return
        for member_id in group.consumer.members:
            self.host.cancel_timer(("streams-session", group.group_id, member_id))
            self.host.cancel_timer(("streams-rebalance", group.group_id, member_id))

    # ---- StreamsGroupDescribe --------------------------------------------------------------------

    def describe(self, group_id: str, topics: Callable[[], "Iterable[TopicInfo]"] | None = None,
                 ) -> tuple[int, str | None, StreamsGroupState | None]:
        error = self.host.check_group_id(group_id)
        if error:
            return error, None, None
        group = self.host.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if not isinstance(group.consumer, StreamsGroupState):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.", None
        state = group.consumer
        if state.configured is None and state.topology is not None and topics is not None:
            try:  # a group loaded from its records: its topology against the topics, as a heartbeat does
                state.configured = configure(state.topology, {t.name: t for t in topics()})
            except KafkaError:
                pass
        return ErrorCode.NONE, None, state
