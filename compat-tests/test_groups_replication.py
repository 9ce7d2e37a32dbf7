"""A completed rebalance survives a coordinator crash: real ZooKeeper, three kafkacompat broker
processes, and the group protocol spoken request by request (RawConnection) so the test knows
exactly when the group became Stable.

As Kafka's group coordinator, the leader's SyncGroup stores the group with its assignments in
__consumer_offsets with acks=-1 and answers (every member) only once the ISR has the record. The
offsets partition's followers are stopped (still in the ISR: long sessions and lag time) while
the leader syncs, so no SyncGroup may be answered; once they resume, the group is Stable and its
coordinator is SIGKILLed at once: the new coordinator must know that generation and its
assignments.
"""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

from cluster import ZooKeeperCluster

pytest.register_assert_rewrite("clients")

from clients import RawConnection  # noqa: E402
from kafkacompat.groups.storage import OFFSETS_TOPIC, partition_for  # noqa: E402
from clients import request_class, response_class  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, SYNC_GROUP, DESCRIBE_GROUPS = 10, 11, 12, 14, 15
BROKERS = [0, 1, 2]
SESSION_TIMEOUT_MS = 30000  # members: no heartbeats are sent while the test looks
# ZooKeeper sessions (6 s) and replica.lag.time.max.ms (20 s) outlive the followers' stop, so they
# stay registered and in the ISR: only the acks=-1 wait can hold the SyncGroup back.
ARGS = [
    "--set", "offsets.topic.replication.factor=3",
    "--set", "replica.lag.time.max.ms=20000",
    "--set", "replica.fetch.backoff.ms=100",
    "--set", "replica.fetch.wait.max.ms=200",
    "--set", "zookeeper.session.timeout.ms=6000",
    "--set", "offsets.commit.timeout.ms=60000",
    # both members' JoinGroups (sent back to back) land in the first generation
    "--set", "group.initial.rebalance.delay.ms=3000",
]
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def call(address: str, api_key: int, version: int, **fields):
    with RawConnection(address) as conn:
        return conn.call(request_class(api_key)(version=version, **fields), response_class(api_key), version)


def retry(what: str, attempt, timeout: float = 60.0):
    """Call ``attempt`` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = attempt()
        except OSError as exc:  # a broker coming or going
            last = exc
            result = None
        if result is not None:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")


def find_coordinator(bootstrap: str, group: str) -> int | None:
    response = call(bootstrap, FIND_COORDINATOR, 3, key=group, key_type=0)
    if response.error_code in RETRIABLE:
        return None
    assert response.error_code == 0, response
    return response.node_id


def join_request(group: str, member_id: str):
    cls = request_class(JOIN_GROUP)
    return cls(version=5, group_id=group, session_timeout_ms=SESSION_TIMEOUT_MS,
               rebalance_timeout_ms=SESSION_TIMEOUT_MS, member_id=member_id, group_instance_id=None,
               protocol_type="consumer", protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=b"sub")])


def sync_request(group: str, generation: int, member_id: str, assignments: dict[str, bytes]):
    cls = request_class(SYNC_GROUP)
    return cls(version=3, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
               assignments=[cls.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()])


def new_member(conn: RawConnection, group: str) -> str:
    """JoinGroup v5's first round trip: MEMBER_ID_REQUIRED with the member id to join with."""
    response = conn.call(join_request(group, ""), response_class(JOIN_GROUP), 5)
    assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED and response.member_id, response
    return response.member_id


def answered_within(conn: RawConnection, seconds: float) -> bool:
    readable, _, _ = select.select([conn.sock], [], [], seconds)
    return bool(readable)


def describe(bootstrap: str, group: str):
    response = call(bootstrap, DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False)
    (described,) = response.groups
    return None if described.error_code in RETRIABLE else described


def heartbeat(bootstrap: str, group: str, generation: int, member_id: str) -> int:
    return call(bootstrap, HEARTBEAT, 3, group_id=group, generation_id=generation, member_id=member_id,
                group_instance_id=None).error_code


def test_stable_generation_and_assignments_survive_a_coordinator_crash(tmp_path):
    group = "replicated-group"
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=ARGS) as cluster:
        cluster.wait_until_every_broker_sees(3)
        any_broker = cluster.brokers[0].bootstrap
        coordinator = retry("a coordinator", lambda: find_coordinator(any_broker, group))
        md = cluster.wait_for(lambda md: OFFSETS_TOPIC in md.topics)
        index = partition_for(group, len(md.topics[OFFSETS_TOPIC].partitions))
        md = cluster.wait_for(lambda md: set(md.topics[OFFSETS_TOPIC].partitions[index].isrs) == set(BROKERS))
        assert md.topics[OFFSETS_TOPIC].partitions[index].leader == coordinator
        followers = [b for b in BROKERS if b != coordinator]
        bootstrap = cluster.brokers[coordinator].bootstrap

        with RawConnection(bootstrap, timeout=90) as first, RawConnection(bootstrap, timeout=90) as second:
            conns = {new_member(first, group): first, new_member(second, group): second}
            sent = {member_id: conn.send_request(join_request(group, member_id), 5)
                    for member_id, conn in conns.items()}
            joined = {member_id: conn.read_response(response_class(JOIN_GROUP), 5, sent[member_id])
                      for member_id, conn in conns.items()}
            assert {(r.error_code, r.generation_id, r.leader) for r in joined.values()} == {
                (0, 1, joined[next(iter(conns))].leader)}
            generation = 1
            leader_id = joined[next(iter(conns))].leader  # whichever JoinGroup the coordinator took first
            (follower_id,) = set(conns) - {leader_id}
            assert sorted(m.member_id for m in joined[leader_id].members) == sorted(conns)
            leader, follower = conns[leader_id], conns[follower_id]
            assignments = {member_id: f"assignment-of-{member_id}".encode() for member_id in conns}

            follower_sync = follower.send_request(sync_request(group, generation, follower_id, {}), 3)
            for b in followers:
                os.kill(cluster.brokers[b].pid(), signal.SIGSTOP)
            try:
                leader_sync = leader.send_request(sync_request(group, generation, leader_id, assignments), 3)
                # Neither SyncGroup is answered while the ISR lacks the group's record.
                assert not answered_within(leader, 1.5) and not answered_within(follower, 0)
            finally:
                for b in followers:
                    os.kill(cluster.brokers[b].pid(), signal.SIGCONT)
            synced = {
                leader_id: leader.read_response(response_class(SYNC_GROUP), 3, leader_sync),
                follower_id: follower.read_response(response_class(SYNC_GROUP), 3, follower_sync),
            }
            cluster.brokers[coordinator].kill()  # SIGKILL, right after the group became Stable
        for member_id, response in synced.items():
            assert (response.error_code, response.assignment) == (0, assignments[member_id])

        cluster.wait_for(lambda md: md.topics[OFFSETS_TOPIC].partitions[index].leader in followers,
                         broker_id=followers[0], timeout=60)
        survivor = cluster.brokers[followers[0]].bootstrap
        new_coordinator = retry("the new coordinator", lambda: find_coordinator(survivor, group))
        assert new_coordinator in followers
        new_bootstrap = cluster.brokers[new_coordinator].bootstrap
        described = retry("the group on the new coordinator", lambda: describe(new_bootstrap, group))
        assert described.error_code == 0
        assert (described.group_state, described.protocol_type, described.protocol_data) == (
            "Stable", "consumer", "range")
        assert {m.member_id: m.member_assignment for m in described.members} == assignments
        # The members carry on in their generation: heartbeats and a SyncGroup (Stable: the
        # stored assignment) are accepted; any other generation is not.
        for member_id in assignments:
            assert heartbeat(new_bootstrap, group, generation, member_id) == ErrorCode.NONE
        assert heartbeat(new_bootstrap, group, generation + 1, follower_id) == ErrorCode.ILLEGAL_GENERATION
        with RawConnection(new_bootstrap) as conn:
            again = conn.call(sync_request(group, generation, follower_id, {}), response_class(SYNC_GROUP), 3)
        assert (again.error_code, again.assignment) == (0, assignments[follower_id])
