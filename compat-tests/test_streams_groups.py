"""KIP-1071 streams groups (StreamsGroupHeartbeat 88, StreamsGroupDescribe 89) against a real
broker process. There is no Kafka Streams client here: simulated members speak the protocol with
the project's generated codecs over a plain socket, each reporting as owned exactly the active
tasks it was last given (as a Streams client does once it has revoked or started them)."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.register_assert_rewrite("clients")
from clients import RawConnection, create_topic, frame, request_header  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402
from kafkacompat.wire import codec  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402
from kafkacompat.wire.frame import is_flexible  # noqa: E402

HEARTBEAT, DESCRIBE = 88, 89
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS, CONSUMER_HEARTBEAT = 8, 9, 16, 15, 68
JOIN_GROUP, DELETE_GROUPS = 11, 42
METADATA, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, API_VERSIONS = 3, 32, 44, 18
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS, MISSING_INTERNAL_TOPICS = 0, 1, 2, 3
SHUTDOWN_APPLICATION = 4
SESSION_TIMEOUT_MS = 8000
MAX_SIZE = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("streams-groups") / "data", extra_args=[
        "--set", f"group.streams.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "--set", f"group.streams.min.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "--set", "group.streams.heartbeat.interval.ms=1000", "--set", "group.streams.min.heartbeat.interval.ms=1000",
        "--set", f"group.streams.max.size={MAX_SIZE}"]).start()
    yield proc
    proc.kill()


@pytest.fixture
def conn(broker):
    with RawConnection(broker.bootstrap, timeout=30) as connection:
        yield connection


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def call(conn: RawConnection, api_key: int, version: int = 0, **fields):
    request = codec.request_class(api_key)(**fields)
    header = request_header(api_key, version, 77, flexible=is_flexible(api_key, version))
    conn.send(frame(header + codec.encode_request(request, version)))
    payload = conn.recv_frame()
    assert int.from_bytes(payload[:4], "big") == 77
    # ApiVersions answers with response header v0 at every version
    flexible_header = is_flexible(api_key, version) and api_key != API_VERSIONS
    return codec.decode_response(api_key, version, payload[5 if flexible_header else 4:])


REQ = codec.request_class(HEARTBEAT)


def topic_info(name: str, partitions: int = 0, **configs: str):
    return REQ.Topology.Subtopology.TopicInfo(
        name=name, partitions=partitions, replication_factor=0,
        topic_configs=[REQ.Topology.Subtopology.TopicInfo.KeyValue(key=k, value=v) for k, v in configs.items()])


def two_step_topology(app: str, source: str, epoch: int = 1):
    """Subtopology 0 reads ``source`` into a store and repartitions; 1 reads the repartition topic."""
    sub = REQ.Topology.Subtopology
    return REQ.Topology(epoch=epoch, subtopologies=[
        sub(subtopology_id="0", source_topics=[source], repartition_sink_topics=[f"{app}-rekey-repartition"],
            state_changelog_topics=[topic_info(f"{app}-store-changelog")]),
        sub(subtopology_id="1", repartition_source_topics=[topic_info(f"{app}-rekey-repartition")],
            state_changelog_topics=[topic_info(f"{app}-agg-changelog")]),
    ])


class Member:
    """One simulated Streams client."""

    def __init__(self, conn: RawConnection, group: str, topology, process: str | None = None, **extra) -> None:
        self.conn, self.group, self.topology = conn, group, topology
        self.member_id = str(uuid.uuid4())
        self.process_id = process or str(uuid.uuid4())
        self.epoch = 0
        self.active: dict[str, list[int]] = {}
        self.standby: dict[str, list[int]] = {}
        self.extra = extra
        self.last = None

    def join(self, rebalance_timeout_ms: int = 30000):
        return self._send(member_epoch=0, rebalance_timeout_ms=rebalance_timeout_ms, topology=self.topology,
                          process_id=self.process_id, active_tasks=[], standby_tasks=[], warmup_tasks=[],
                          **self.extra)

    def heartbeat(self, **fields):
        tasks = [REQ.TaskIds(subtopology_id=s, partitions=ps) for s, ps in sorted(self.active.items())]
        standby = [REQ.TaskIds(subtopology_id=s, partitions=ps) for s, ps in sorted(self.standby.items())]
        return self._send(**{"member_epoch": self.epoch, "topology": None, "active_tasks": tasks,
                             "standby_tasks": standby, "warmup_tasks": [], **fields})

    def leave(self):
        response = self._send(member_epoch=-1, topology=None, active_tasks=None, standby_tasks=None,
                              warmup_tasks=None)
        self.active, self.epoch = {}, -1
        return response

    def _send(self, **fields):
        for name in ("user_endpoint", "client_tags", "task_offsets", "task_end_offsets"):
            fields.setdefault(name, None)
        response = call(self.conn, HEARTBEAT, group_id=self.group, member_id=self.member_id, **fields)
        self.last = response
        if response.error_code == 0:
            self.epoch = response.member_epoch
            if response.active_tasks is not None:
                self.active = {t.subtopology_id: sorted(t.partitions) for t in response.active_tasks}
            if response.standby_tasks is not None:
                self.standby = {t.subtopology_id: sorted(t.partitions) for t in response.standby_tasks}
        return response

    def tasks(self) -> set[tuple[str, int]]:
        return {(s, p) for s, ps in self.active.items() for p in ps}


def statuses(response) -> list[int]:
    return [s.status_code for s in response.status or []]


def settle(members: list[Member], rounds: int = 30) -> None:
    """Heartbeat round after round until the group is stable, checking after every heartbeat
    that no active task is held by two members."""
    for _ in range(rounds):
        for member in members:
            response = member.heartbeat()
            assert response.error_code == 0, response
            owners: dict[tuple[str, int], str] = {}
            for other in members:
                for task in other.tasks():
                    assert task not in owners, f"task {task} held by {owners.get(task)} and {other.member_id}"
                    owners[task] = other.member_id
        epochs = {m.epoch for m in members}
        describe = call(members[0].conn, DESCRIBE, group_ids=[members[0].group]).groups[0]
        if describe.group_state == "Stable" and epochs == {describe.assignment_epoch}:
            return
    raise AssertionError(f"group {members[0].group} did not settle: {describe}")


def joined_and_ready(conn, group: str, source: str, app: str, partitions: int = 4,
                     rebalance_timeout_ms: int = 30000) -> Member:
    create_topic(conn.bootstrap, source, partitions)
    member = Member(conn, group, two_step_topology(app, source))
    first = member.join(rebalance_timeout_ms)
    assert first.error_code == 0, first
    assert statuses(first) == [MISSING_INTERNAL_TOPICS]
    assert first.active_tasks == [] and first.member_epoch >= 1
    deadline = time.monotonic() + 30
    while statuses(member.heartbeat()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert statuses(member.last) == [] and member.last.error_code == 0
    return member


def test_join_creates_internal_topics_and_assigns_every_task(conn, broker):
    app, source = unique("app"), unique("input")
    member = joined_and_ready(conn, app, source, app)
    assert member.last.heartbeat_interval_ms == 1000
    assert member.active == {"0": [0, 1, 2, 3], "1": [0, 1, 2, 3]}
    metadata = call(conn, METADATA, 12, topics=[
        codec.request_class(METADATA).MetadataRequestTopic(name=n) for n in (
            f"{app}-rekey-repartition", f"{app}-store-changelog", f"{app}-agg-changelog")],
        allow_auto_topic_creation=False)
    assert [(t.error_code, len(t.partitions)) for t in metadata.topics] == [(0, 4)] * 3
    configs = call(conn, DESCRIBE_CONFIGS, 4, resources=[codec.request_class(DESCRIBE_CONFIGS).DescribeConfigsResource(
        resource_type=2, resource_name=f"{app}-store-changelog", configuration_keys=["cleanup.policy"])])
    assert [(c.name, c.value) for c in configs.results[0].configs] == [("cleanup.policy", "compact")]


def test_tasks_are_balanced_sticky_and_never_owned_twice(conn, broker):
    app, source = unique("app"), unique("input")
    first = joined_and_ready(conn, app, source, app)
    topology = two_step_topology(app, source)
    second = Member(conn, app, topology)
    joined = second.join()
    assert joined.error_code == 0 and joined.active_tasks == []  # the tasks are first revoked from `first`
    settle([first, second])
    assert len(first.tasks()) == len(second.tasks()) == 4
    kept = first.tasks()
    third = Member(conn, app, topology)
    assert third.join().error_code == 0
    settle([first, second, third])
    assert sorted(len(m.tasks()) for m in (first, second, third)) == [2, 3, 3]
    assert first.tasks() <= kept  # sticky: the first member gave tasks up, it took none
    assert first.tasks() | second.tasks() | third.tasks() == {(s, p) for s in "01" for p in range(4)}
    before = first.tasks()
    left = second.leave()
    assert (left.error_code, left.member_epoch) == (0, -1)
    settle([first, third])
    assert len(first.tasks()) == len(third.tasks()) == 4
    assert before <= first.tasks()


def test_describe_members_topology_and_assignments(conn, broker):
    app, source = unique("app"), unique("input")
    create_topic(conn.bootstrap, source, 2)
    tags = [REQ.KeyValue(key="zone", value="a")]
    member = Member(conn, app, two_step_topology(app, source), process="process-1",
                    user_endpoint=REQ.Endpoint(host="app-host", port=8080), client_tags=tags)
    assert member.join().error_code == 0
    deadline = time.monotonic() + 30
    while statuses(member.heartbeat()) and time.monotonic() < deadline:
        time.sleep(0.2)
    member.heartbeat()
    response = call(conn, DESCRIBE, group_ids=[app, unique("nope")], include_authorized_operations=False)
    described, missing = response.groups
    assert (described.error_code, described.group_state) == (0, "Stable")
    assert described.group_epoch == described.assignment_epoch >= 1
    assert [s.subtopology_id for s in described.topology.subtopologies] == ["0", "1"]
    assert described.topology.subtopologies[0].source_topics == [source]
    assert [t.name for t in described.topology.subtopologies[1].repartition_source_topics] == \
        [f"{app}-rekey-repartition"]
    (m,) = described.members
    assert (m.member_id, m.process_id, m.member_epoch, m.topology_epoch) == \
        (member.member_id, "process-1", member.epoch, 1)
    assert (m.user_endpoint.host, m.user_endpoint.port) == ("app-host", 8080)
    assert [(t.key, t.value) for t in m.client_tags] == [("zone", "a")]
    active = {t.subtopology_id: t.partitions for t in m.assignment.active_tasks}
    assert active == {t.subtopology_id: t.partitions for t in m.target_assignment.active_tasks} == \
        {"0": [0, 1], "1": [0, 1]}
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # the endpoint map: which source partitions the member with an endpoint serves
    response = member.heartbeat(endpoint_information_epoch=0)
    (endpoint,) = response.partitions_by_user_endpoint
    assert (endpoint.user_endpoint.host, endpoint.user_endpoint.port) == ("app-host", 8080)
    assert {t.topic: t.partitions for t in endpoint.active_partitions} == {
        source: [0, 1], f"{app}-rekey-repartition": [0, 1]}


def test_heartbeat_errors_as_kafka(conn, broker):
    app, source = unique("app"), unique("input")
    member = joined_and_ready(conn, app, source, app, partitions=1)
    topology = two_step_topology(app, source)

    def send(**fields):
        base = dict(group_id=app, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=1000,
                    topology=topology, process_id="p", active_tasks=[], standby_tasks=[], warmup_tasks=[],
                    user_endpoint=None, client_tags=None, task_offsets=None, task_end_offsets=None)
        response = call(conn, HEARTBEAT, **{**base, **fields})
        return response.error_code, response.error_message

    assert send(member_id="") == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    # what Kafka 4.2 does not support yet, refused before anything else
    assert send(member_id="", instance_id="i-1") == (ErrorCode.INVALID_REQUEST,
                                                     "Static membership is not yet supported.")
    assert send(task_offsets=[]) == (ErrorCode.INVALID_REQUEST, "TaskOffsets are not supported yet.")
    assert send(warmup_tasks=[REQ.TaskIds(subtopology_id="0", partitions=[0])]) == (
        ErrorCode.INVALID_REQUEST, "WarmupTasks are not supported yet.")
    regex = REQ.Topology(epoch=1, subtopologies=[REQ.Topology.Subtopology(subtopology_id="0",
                                                                          source_topic_regex=["in.*"])])
    assert send(topology=regex) == (ErrorCode.INVALID_REQUEST,
                                    "Regular expressions for source topics are not supported yet.")
    assert send(member_epoch=-3, topology=None) == (
        ErrorCode.INVALID_REQUEST, "MemberEpoch is -3, but must be greater than or equal to -2.")
    assert send(member_epoch=-2, topology=None) == (ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
    assert send(member_epoch=1, topology=None, standby_tasks=None) == (
        ErrorCode.INVALID_REQUEST, "If one task-type is non-null, all must be non-null.")
    sized = REQ.Topology(epoch=1, subtopologies=[REQ.Topology.Subtopology(
        subtopology_id="0", source_topics=[source], state_changelog_topics=[topic_info(f"{app}-c", 3)])])
    assert send(topology=sized) == (ErrorCode.STREAMS_INVALID_TOPOLOGY, f"Changelog topic {app}-c must have an "
                                    "undefined partition count, but it is set to 3.")
    assert send(rebalance_timeout_ms=-1)[0] == ErrorCode.INVALID_REQUEST
    assert send(topology=None) == (ErrorCode.INVALID_REQUEST, "Topology must be non-null when (re-)joining.")
    assert send(member_epoch=1, topology=None)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert send(member_id=member.member_id, member_epoch=member.epoch + 5, topology=None)[0] == \
        ErrorCode.FENCED_MEMBER_EPOCH
    assert send(member_id=member.member_id, member_epoch=member.epoch, topology=topology)[0] == \
        ErrorCode.INVALID_REQUEST  # a topology only on a join
    sub = REQ.Topology.Subtopology
    duplicate = REQ.Topology(epoch=1, subtopologies=[sub(subtopology_id="0", source_topics=[source])] * 2)
    assert send(topology=duplicate)[0] == ErrorCode.STREAMS_INVALID_TOPOLOGY
    bad_copartition = REQ.Topology(epoch=1, subtopologies=[sub(
        subtopology_id="0", source_topics=[source],
        copartition_groups=[sub.CopartitionGroup(source_topics=[3])])])
    assert send(topology=bad_copartition)[0] == ErrorCode.STREAMS_INVALID_TOPOLOGY
    assert send(topology=two_step_topology(app, source, epoch=2)) == (
        ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
    # an older topology epoch joins with the group's topology and is told STALE_TOPOLOGY
    stale = Member(conn, app, two_step_topology(app, source, epoch=0))
    assert stale.join().error_code == 0 and STALE_TOPOLOGY in statuses(stale.last)
    assert STALE_TOPOLOGY in statuses(stale.heartbeat())
    assert stale.leave().error_code == 0
    other = REQ.Topology(epoch=1, subtopologies=[sub(subtopology_id="0", source_topics=[source])])
    assert send(topology=other) == (ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
    # a task the topology does not have
    response = member.heartbeat(active_tasks=[REQ.TaskIds(subtopology_id="0", partitions=[7])])
    assert response.error_code == ErrorCode.INVALID_REQUEST
    # a consumer-protocol heartbeat for the streams group
    consumer = call(conn, CONSUMER_HEARTBEAT, 1, group_id=app, member_id=str(uuid.uuid4()), member_epoch=0,
                    rebalance_timeout_ms=1000, subscribed_topic_names=[source], topic_partitions=[])
    assert consumer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # and a classic JoinGroup
    join_cls = codec.request_class(JOIN_GROUP)
    classic = call(conn, JOIN_GROUP, 9, group_id=app, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                   member_id="", group_instance_id=None, protocol_type="consumer", reason=None,
                   protocols=[join_cls.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert classic.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # fenced members rejoin with epoch 0 and get their tasks back
    assert member.heartbeat().error_code == 0


def test_missing_source_topics_and_copartitioning_statuses(conn, broker):
    app, missing = unique("app"), unique("absent")
    member = Member(conn, app, two_step_topology(app, missing))
    response = member.join()
    assert response.error_code == 0 and statuses(response) == [MISSING_SOURCE_TOPICS]
    assert call(conn, DESCRIBE, group_ids=[app]).groups[0].group_state == "NotReady"
    left, right = unique("left"), unique("right")
    create_topic(conn.bootstrap, left, 2)
    create_topic(conn.bootstrap, right, 3)
    sub = REQ.Topology.Subtopology
    join = REQ.Topology(epoch=1, subtopologies=[sub(
        subtopology_id="0", source_topics=[left, right],
        copartition_groups=[sub.CopartitionGroup(source_topics=[0, 1])])])
    joiner = Member(conn, unique("app"), join)
    response = joiner.join()
    assert statuses(response) == [INCORRECTLY_PARTITIONED_TOPICS] and response.active_tasks == []


def test_offsets_committed_with_member_epochs_and_listed_as_streams(conn, broker):
    app, source = unique("app"), unique("input")
    member = joined_and_ready(conn, app, source, app, partitions=1)
    commit_cls = codec.request_class(OFFSET_COMMIT)

    def commit(member_id: str, epoch: int, offset: int) -> int:
        response = call(conn, OFFSET_COMMIT, 9, group_id=app, generation_id_or_member_epoch=epoch,
                        member_id=member_id, topics=[commit_cls.OffsetCommitRequestTopic(name=source, partitions=[
                            commit_cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=offset)])])
        return response.topics[0].partitions[0].error_code

    assert commit(member.member_id, member.epoch, 42) == 0
    assert commit(member.member_id, member.epoch - 1, 43) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit("someone-else", member.epoch, 44) == ErrorCode.UNKNOWN_MEMBER_ID
    fetch_cls = codec.request_class(OFFSET_FETCH)
    fetched = call(conn, OFFSET_FETCH, 9, groups=[fetch_cls.OffsetFetchRequestGroup(
        group_id=app, member_id=member.member_id, member_epoch=member.epoch,
        topics=[fetch_cls.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=source, partition_indexes=[0])])])
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 42
    listed = call(conn, LIST_GROUPS, 5, states_filter=[], types_filter=["streams"])
    assert [(g.group_type, g.protocol_type, g.group_state) for g in listed.groups if g.group_id == app] == \
        [("streams", "streams", "Stable")]
    described = call(conn, DESCRIBE_GROUPS, 6, groups=[app], include_authorized_operations=False).groups[0]
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert member.leave().error_code == 0
    # an empty group takes commits from outside the group (an admin client's reset)
    assert commit("", -1, 7) == 0
    deleted = call(conn, DELETE_GROUPS, 2, groups_names=[app])
    assert [r.error_code for r in deleted.results] == [0]
    assert call(conn, DESCRIBE, group_ids=[app]).groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_silent_member_is_removed_after_its_session_timeout(conn, broker):
    app, source = unique("app"), unique("input")
    first = joined_and_ready(conn, app, source, app, partitions=2)
    second = Member(conn, app, two_step_topology(app, source))
    assert second.join().error_code == 0
    settle([first, second])
    assert len(second.tasks()) == 2
    deadline = time.monotonic() + SESSION_TIMEOUT_MS / 1000 * 4
    while len(first.tasks()) < 4 and time.monotonic() < deadline:  # only `first` heartbeats
        assert first.heartbeat().error_code == 0
        time.sleep(0.5)
    assert first.tasks() == {(s, p) for s in "01" for p in range(2)}
    assert second.heartbeat().error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_standby_tasks_on_another_process_with_a_group_config(conn, broker):
    app, source = unique("app"), unique("input")
    alter_cls = codec.request_class(INCREMENTAL_ALTER_CONFIGS)
    resource = alter_cls.AlterConfigsResource
    altered = call(conn, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[resource(
        resource_type=32, resource_name=app,
        configs=[resource.AlterableConfig(name="streams.num.standby.replicas", config_operation=0, value="1")])])
    assert altered.responses[0].error_code == 0, altered.responses[0].error_message
    deadline = time.monotonic() + 30
    first = None
    while time.monotonic() < deadline:  # the broker applies group configs it follows from the store
        first = joined_and_ready(conn, app, source, app, partitions=2) if first is None else first
        second = Member(conn, app, two_step_topology(app, source))
        assert second.join().error_code == 0
        settle([first, second])
        if second.standby or first.standby:
            break
        second.leave()
        time.sleep(1)
    for one, other in ((first, second), (second, first)):
        standby = {(s, p) for s, ps in one.standby.items() for p in ps}
        assert standby == other.tasks()  # each holds a standby of every task the other runs


@pytest.mark.parametrize("name, value, message", [
    ("streams.num.standby.replicas", "3",
     "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ("streams.session.timeout.ms", "7000",
     "streams.session.timeout.ms must be greater than or equal to group.streams.min.session.timeout.ms"),
    ("streams.session.timeout.ms", "61000",
     "streams.session.timeout.ms must be less than or equal to group.streams.max.session.timeout.ms"),
    ("streams.heartbeat.interval.ms", "16000",
     "streams.heartbeat.interval.ms must be less than or equal to group.streams.max.heartbeat.interval.ms"),
])
def test_streams_group_configs_outside_the_brokers_bounds_are_refused(conn, name, value, message):
    alter_cls = codec.request_class(INCREMENTAL_ALTER_CONFIGS)
    resource = alter_cls.AlterConfigsResource
    altered = call(conn, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[resource(
        resource_type=32, resource_name=unique("bounds"),
        configs=[resource.AlterableConfig(name=name, config_operation=0, value=value)])])
    assert (altered.responses[0].error_code, altered.responses[0].error_message) == (ErrorCode.INVALID_CONFIG, message)


def test_a_full_streams_group_refuses_a_new_member(conn, broker):
    app, source = unique("app"), unique("input")
    members = [joined_and_ready(conn, app, source, app, partitions=4)]
    for _ in range(MAX_SIZE - 1):
        member = Member(conn, app, two_step_topology(app, source))
        assert member.join().error_code == 0
        members.append(member)
    extra = Member(conn, app, two_step_topology(app, source))
    refused = extra.join()
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED, f"The streams group has reached its maximum capacity of {MAX_SIZE} members.")
    assert members[0].heartbeat().error_code == 0  # the members already in are not affected
    members[-1].leave()
    assert extra.join().error_code == 0  # a place came free


def test_shutdown_application_reaches_every_member(conn, broker):
    app, source = unique("app"), unique("input")
    first = joined_and_ready(conn, app, source, app, partitions=1)
    second = Member(conn, app, two_step_topology(app, source))
    assert second.join().error_code == 0
    assert SHUTDOWN_APPLICATION in statuses(first.heartbeat(shutdown_application=True))
    assert SHUTDOWN_APPLICATION in statuses(second.heartbeat())


def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(conn, broker):
    app, source = unique("app"), unique("input")
    stubborn = joined_and_ready(conn, app, source, app, partitions=2, rebalance_timeout_ms=2000)
    held = {s: list(ps) for s, ps in stubborn.active.items()}
    newcomer = Member(conn, app, two_step_topology(app, source))
    assert newcomer.join().error_code == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # it keeps heartbeating but keeps reporting every task as owned
        stubborn.active = held
        if stubborn.heartbeat().error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            break
        assert stubborn.last.error_code == 0
        assert newcomer.heartbeat().error_code == 0
        assert not newcomer.tasks() & {(s, p) for s, ps in held.items() for p in ps}
        time.sleep(0.3)
    assert stubborn.last.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    settle([newcomer])
    assert newcomer.tasks() == {(s, p) for s in "01" for p in range(2)}


def test_api_versions_advertises_the_streams_apis_and_streams_version(conn, broker):
    response = call(conn, API_VERSIONS, 3, client_software_name="compat-tests", client_software_version="1")
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys[HEARTBEAT] == keys[DESCRIBE] == (0, 0)
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    assert finalized["streams.version"] == 1


def test_a_streams_group_survives_a_restart(broker_factory):
    """The group's StreamsGroup* records in __consumer_offsets are replayed by the restarted
    broker: the same epochs, topology, members and assignments, and the members carry on with
    their epochs. A member that left and a group deleted before the restart stay gone."""
    proc = broker_factory("--set", "group.streams.session.timeout.ms=60000",
                          "--set", "group.streams.heartbeat.interval.ms=1000",
                          "--set", "group.streams.min.heartbeat.interval.ms=1000")
    app, source, deleted_app = unique("app"), unique("input"), unique("app")
    with RawConnection(proc.bootstrap, timeout=30) as conn:
        first = joined_and_ready(conn, app, source, app)
        topology = two_step_topology(app, source)
        second, leaving = Member(conn, app, topology), Member(conn, app, topology)
        assert second.join().error_code == 0 and leaving.join().error_code == 0
        settle([first, second, leaving])
        assert leaving.leave().error_code == 0
        settle([first, second])
        gone = Member(conn, deleted_app, two_step_topology(deleted_app, source))
        assert gone.join().error_code == 0 and gone.leave().error_code == 0
        assert [r.error_code for r in call(conn, DELETE_GROUPS, 2, groups_names=[deleted_app]).results] == [0]
        before = call(conn, DESCRIBE, group_ids=[app]).groups[0]
    assert len(before.members) == 2 and before.group_state == "Stable"
    proc.kill()  # SIGKILL: what was answered must have been written
    proc.start()
    with RawConnection(proc.bootstrap, timeout=30) as conn:
        # its records say the topology was validated: Stable before anyone heartbeats
        listed = call(conn, LIST_GROUPS, 5, states_filter=[], types_filter=["streams"])
        assert [(g.group_id, g.group_state) for g in listed.groups] == [(app, "Stable")]
        after = call(conn, DESCRIBE, group_ids=[app, deleted_app]).groups
        assert after[0] == before
        assert after[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        for member in (first, second):
            member.conn = conn
            epoch, tasks = member.epoch, member.tasks()
            response = member.heartbeat()
            assert response.error_code == ErrorCode.NONE, response
            assert (member.epoch, member.tasks()) == (epoch, tasks)
        leaving.conn = conn
        leaving.epoch = before.group_epoch
        assert leaving.heartbeat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert call(conn, DESCRIBE, group_ids=[app]).groups[0].group_epoch == before.group_epoch
