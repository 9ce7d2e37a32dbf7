"""A KIP-848 consumer group across a coordinator crash: real ZooKeeper, three kafkacompat broker
processes. Heartbeats are answered once the ISR of the group's __consumer_offsets partition has
their records, so after the coordinator is SIGKILLed the new one knows the member, its epoch and
its assignment, and the member carries on without rejoining."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import ZooKeeperCluster

pytest.register_assert_rewrite("clients")

from kafkacompat.groups.storage import OFFSETS_TOPIC, partition_for  # noqa: E402
from kafkacompat.wire.errors import ErrorCode  # noqa: E402
from kafkacompat.wire.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest  # noqa: E402
from kafkacompat.wire.messages.consumer_group_describe_response import ConsumerGroupDescribeResponse  # noqa: E402
from kafkacompat.wire.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest  # noqa: E402
from kafkacompat.wire.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse  # noqa: E402
from test_consumer_protocol import _call  # noqa: E402
from test_groups_replication import RETRIABLE, find_coordinator, retry  # noqa: E402

ARGS = ["--set", "offsets.topic.replication.factor=3", "--set", "replica.fetch.wait.max.ms=200"]
BROKERS = [0, 1, 2]


class Address:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def heartbeat(bootstrap: str, **fields) -> ConsumerGroupHeartbeatResponse:
    return _call(Address(bootstrap), 68, 1, ConsumerGroupHeartbeatRequest(**fields), ConsumerGroupHeartbeatResponse)


def test_consumer_group_survives_a_coordinator_crash(tmp_path):
    group, topic = "kip848-replicated", "kip848-topic"
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=ARGS) as cluster:
        cluster.wait_until_every_broker_sees(3)
        any_broker = cluster.brokers[0].bootstrap
        admin = AdminClient({"bootstrap.servers": any_broker})
        admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
        coordinator = retry("a coordinator", lambda: find_coordinator(any_broker, group))
        md = cluster.wait_for(lambda md: OFFSETS_TOPIC in md.topics)
        index = partition_for(group, len(md.topics[OFFSETS_TOPIC].partitions))
        cluster.wait_for(lambda md: set(md.topics[OFFSETS_TOPIC].partitions[index].isrs) == set(BROKERS))
        # The coordinator's own metadata must have the topic, or the first heartbeat assigns nothing.
        cluster.wait_for(lambda md: topic in md.topics and len(md.topics[topic].partitions) == 2,
                         broker_id=coordinator)
        bootstrap = cluster.brokers[coordinator].bootstrap

        def joined():
            response = heartbeat(bootstrap, group_id=group, member_id="m1", member_epoch=0,
                                 rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
            return None if response.error_code in RETRIABLE else response

        first = retry("the join", joined)
        assert first.error_code == ErrorCode.NONE and first.member_epoch >= 1
        assert sorted(p for t in first.assignment.topic_partitions for p in t.partitions) == [0, 1]
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
            response = _call(Address(new_bootstrap), 69, 0, ConsumerGroupDescribeRequest(group_ids=[group]),
                             ConsumerGroupDescribeResponse)
            (found,) = response.groups
            return None if found.error_code in RETRIABLE else found

        found = retry("the group on the new coordinator", described)
        assert found.error_code == ErrorCode.NONE
        (member,) = found.members
        assert (member.member_id, member.member_epoch) == ("m1", first.member_epoch)
        assert sorted(p for t in member.assignment.topic_partitions for p in t.partitions) == [0, 1]
        again = heartbeat(new_bootstrap, group_id=group, member_id="m1", member_epoch=first.member_epoch)
        assert (again.error_code, again.member_epoch) == (ErrorCode.NONE, first.member_epoch)
