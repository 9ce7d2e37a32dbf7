"""A KIP-1071 streams group across a coordinator crash: real ZooKeeper, three kafkacompat broker
processes. The StreamsGroupHeartbeat is answered once the ISR of the group's __consumer_offsets
partition has its StreamsGroup* records, so after the coordinator is SIGKILLed the new one knows
the member, its epoch, the topology and the tasks, and the member carries on without rejoining."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import ZooKeeperCluster

pytest.register_assert_rewrite("clients")

from clients import RawConnection  # noqa: E402
from test_groups_replication import RETRIABLE, find_coordinator, retry  # noqa: E402
from test_streams_groups import DESCRIBE, HEARTBEAT, REQ, call  # noqa: E402

from kafkacompat.groups.storage import OFFSETS_TOPIC, partition_for  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402

ARGS = ["--set", "offsets.topic.replication.factor=3", "--set", "replica.fetch.wait.max.ms=200"]
BROKERS = [0, 1, 2]


def heartbeat(bootstrap: str, **fields):
    fields = {"group_id": "streams-replicated", "member_id": "m1", "topology": None, "user_endpoint": None,
              "client_tags": None, "task_offsets": None, "task_end_offsets": None, **fields}
    with RawConnection(bootstrap, timeout=30) as conn:
        return call(conn, HEARTBEAT, **fields)


def test_streams_group_survives_a_coordinator_crash(tmp_path):
    group, topic = "streams-replicated", "streams-input"
    topology = REQ.Topology(epoch=1, subtopologies=[REQ.Topology.Subtopology(subtopology_id="0",
                                                                             source_topics=[topic])])
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=ARGS) as cluster:
        cluster.wait_until_every_broker_sees(3)
        any_broker = cluster.brokers[0].bootstrap
        admin = AdminClient({"bootstrap.servers": any_broker})
        admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
        coordinator = retry("a coordinator", lambda: find_coordinator(any_broker, group))
        md = cluster.wait_for(lambda md: OFFSETS_TOPIC in md.topics)
        index = partition_for(group, len(md.topics[OFFSETS_TOPIC].partitions))
        cluster.wait_for(lambda md: set(md.topics[OFFSETS_TOPIC].partitions[index].isrs) == set(BROKERS))
        cluster.wait_for(lambda md: topic in md.topics and len(md.topics[topic].partitions) == 2,
                         broker_id=coordinator)
        bootstrap = cluster.brokers[coordinator].bootstrap

        def joined():
            response = heartbeat(bootstrap, member_epoch=0, rebalance_timeout_ms=30000, topology=topology,
                                 process_id="process-1", active_tasks=[], standby_tasks=[], warmup_tasks=[])
            return None if response.error_code in RETRIABLE else response

        first = retry("the join", joined)
        assert first.error_code == ErrorCode.NONE and first.member_epoch >= 1, first
        assert [(t.subtopology_id, sorted(t.partitions)) for t in first.active_tasks] == [("0", [0, 1])]
        cluster.brokers[coordinator].kill()

        followers = [b for b in BROKERS if b != coordinator]
        cluster.wait_for(lambda md: md.topics[OFFSETS_TOPIC].partitions[index].leader in followers,
                         broker_id=followers[0], timeout=60)
        survivor = cluster.brokers[followers[0]].bootstrap

        def moved() -> int | None:  # FindCoordinator may name the killed broker for a moment
            found = find_coordinator(survivor, group)
            return found if found in followers else None

        new_coordinator = retry("the new coordinator", moved)
        new_bootstrap = cluster.brokers[new_coordinator].bootstrap

        def described():
            with RawConnection(new_bootstrap, timeout=30) as conn:
                (found,) = call(conn, DESCRIBE, group_ids=[group]).groups
            return None if found.error_code in RETRIABLE else found

        found = retry("the group on the new coordinator", described)
        assert found.error_code == ErrorCode.NONE
        assert [s.source_topics for s in found.topology.subtopologies] == [[topic]]
        (member,) = found.members
        assert (member.member_id, member.member_epoch, member.process_id) == ("m1", first.member_epoch, "process-1")
        assert [(t.subtopology_id, sorted(t.partitions)) for t in member.assignment.active_tasks] == [("0", [0, 1])]
        again = heartbeat(new_bootstrap, member_epoch=first.member_epoch,
                          active_tasks=[REQ.TaskIds(subtopology_id="0", partitions=[0, 1])], standby_tasks=[],
                          warmup_tasks=[])
        assert (again.error_code, again.member_epoch) == (ErrorCode.NONE, first.member_epoch), again
