"""Network partitions in a replicated cluster, with real processes: a real ZooKeeper, three
kafkacompat brokers and confluent_kafka (librdkafka) clients, each process on a host of its own
(a Linux network namespace, netns.py), partitioned with nftables rules that silently drop the
packets between two hosts. Every test runs an idempotent acks=all producer on a topic with
replication factor 3 and min.insync.replicas=2, records every acknowledgement, heals the
partition, then reads everything back and compares the replicas' logs byte for byte.

- The partition leader cut off from ZooKeeper (not from its clients or followers): its session
  expires, the controller elects a follower; the old leader, which has heard nothing, still
  believes it leads, and an acks=all write sent to it is never acknowledged (REQUEST_TIMED_OUT:
  its followers stopped fetching and it cannot write a smaller ISR). Clients that ask it for
  metadata keep trying it until the network heals (as with Kafka in ZooKeeper mode, where no
  one tells a broker whose session expired); a producer that knows only the other brokers goes
  on with the new leader meanwhile. Healed, the old leader follows the new leader and
  truncates what it wrote in its stale epoch (the diverging epoch of Fetch v12+, as Kafka's
  followers). Once with the controller elsewhere, once with the leader being the controller
  (another broker takes over; the old one steps down when it hears).
- The leader cut off from its followers (not from its clients or ZooKeeper): after
  replica.lag.time.max.ms its ISR is itself alone, so with min.insync.replicas=2 acks=all writes
  are refused (NOT_ENOUGH_REPLICAS; one appended before the shrink answers
  NOT_ENOUGH_REPLICAS_AFTER_APPEND), and every message acknowledged is on a follower too.
  Healed, the followers catch up and rejoin the ISR.

Why namespaces rather than loopback proxies: a broker's clients and its followers reach it at
the same advertised address, and kafkacompat has a single listener (no separate
inter.broker.listener.name), so no proxy in front of a broker can cut one and not the other
without a test-only hook in the broker. On hosts of their own the cut is made where a real one
happens, in the network, between two addresses; ZooKeeper gets the same treatment so that both
kinds of partition are one mechanism. A blackhole rather than a reset: real partitions drop
packets, so connects hang and established connections stall until their timeouts.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

import pytest

pytest.register_assert_rewrite("clients")

from cluster import ZooKeeperCluster  # noqa: E402
from clients import RawConnection  # noqa: E402
from netns import Network, netns_available  # noqa: E402
from test_replication_failover import (  # noqa: E402
    BROKERS, ContinuousProducer, assert_acknowledged_messages_are_there, deadline_loop, partition_log_bytes,
    set_args,
)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20

# Followers out of the ISR after 3 s, and a replica socket timeout of 5 s so that a fetcher
# stalled by the partition reconnects soon after. ZooKeeper sessions of 4 s when a broker is to
# lose its session (short, yet not so short that a loaded machine makes one expire by itself),
# 10 s when none is.
ARGS = set_args(replica_lag_time_max_ms=3000, replica_fetch_backoff_ms=100, replica_socket_timeout_ms=5000)
SHORT_SESSIONS = set_args(zookeeper_session_timeout_ms=4000)
LONG_SESSIONS = set_args(zookeeper_session_timeout_ms=10000)
# The producer's requests time out after 5 s (librdkafka's default is 30 s): a batch parked on a
# leader that can no longer commit is retried on the new one sooner.
PRODUCER = {"request.timeout.ms": 5000}


@pytest.fixture
def network():
    missing = netns_available()
    if missing:
        pytest.fail(f"network partition tests need network namespaces: {missing}")
    return Network()


def create_topic(bootstrap: str, name: str, replicas: list[int]) -> None:
    """One partition on ``replicas`` (the first leads), min.insync.replicas=2."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
    admin.create_topics([topic], operation_timeout=20)[name].result(timeout=30)


@dataclass(frozen=True)
class View:
    """What one broker believes: live brokers, controller, and partition 0's leader and ISR."""
    brokers: frozenset[int]
    controller: int
    leader: int
    isr: frozenset[int]


def own_view(cluster: ZooKeeperCluster, broker_id: int, topic: str) -> View:
    """One broker's own metadata, from a Metadata request on a socket of its own (a client library
    may ask whichever broker it likes, even through a bootstrap naming one)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
    with RawConnection(cluster.brokers[broker_id].bootstrap) as conn:
        response = conn.call(request, MetadataResponse, 9)
    (answer,) = response.topics
    (partition,) = answer.partitions
    return View(frozenset(b.node_id for b in response.brokers), response.controller_id, partition.leader_id,
                frozenset(partition.isr_nodes))


def wait_for_view(cluster: ZooKeeperCluster, broker_id: int, topic: str, predicate, what: str,
                  timeout: float = 30) -> View:
    for _ in deadline_loop(timeout, f"broker {broker_id} to see {what}", interval=0.2):
        try:
            view = own_view(cluster, broker_id, topic)
        except (OSError, ValueError):  # a broker starting, or the topic not there yet
            continue
        if predicate(view):
            return view


def probe_produce(bootstrap: str, topic: str, value: bytes, *, timeout_ms: int) -> int:
    """One acks=all Produce (v9, no producer id) straight to one broker, over a socket of its
    own so no metadata can send it elsewhere; returns the partition's error code."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=timeout_ms, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=bytes(builder.build()))])])
    with RawConnection(bootstrap, timeout=timeout_ms / 1000 + 30) as conn:
        response = conn.call(request, ProduceResponse, 9)
    return response.responses[0].partition_responses[0].error_code


def log_end_offset_on_disk(cluster: ZooKeeperCluster, broker_id: int, topic: str) -> int:
    """The end offset of a running broker's replica, from its segment files (appends are plain
    writes, so the files are current): one past the last offset of the last whole batch."""
    data = partition_log_bytes(cluster, broker_id, topic, 0)
    position = end = 0
    while position + 61 <= len(data):  # a v2 batch header is 61 bytes
        base_offset, length = struct.unpack_from(">qi", data, position)
        if position + 12 + length > len(data):
            break
        (last_offset_delta,) = struct.unpack_from(">i", data, position + 23)
        end = base_offset + last_offset_delta + 1
        position += 12 + length
    return end


def merged(*acked: dict[int, list[tuple[int, bytes]]]) -> dict[int, list[tuple[int, bytes]]]:
    """The acknowledgements of several producers, in offset order (implicit ones, without an offset, last)."""
    return {p: sorted((a for acks in acked for a in acks.get(p, [])), key=lambda a: (a[0] is None, a[0] or 0))
            for p in acked[0]}


def stop_and_compare_replicas(cluster: ZooKeeperCluster, topic: str) -> dict[int, bytes]:
    """Stop every broker cleanly; the three replicas must hold the same bytes."""
    for b in BROKERS:
        cluster.brokers[b].stop()
    logs = {b: partition_log_bytes(cluster, b, topic, 0) for b in BROKERS}
    assert logs[0] == logs[1] == logs[2] and logs[0], "the replicas diverged"
    return logs


# ---- 1. the leader (and maybe the controller) cut off from ZooKeeper ---------------------------


@pytest.mark.parametrize("leader_is_controller", [False, True], ids=["leader", "leader-and-controller"])
def test_leader_cut_off_from_zookeeper_is_replaced_and_truncates_after_healing(tmp_path, topic_name, network,
                                                                               leader_is_controller):
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=ARGS + SHORT_SESSIONS, network=network) as cluster:
        md = cluster.wait_for(lambda md: len(md.brokers) == 3 and md.controller_id in BROKERS)
        controller = md.controller_id
        old = controller if leader_is_controller else next(b for b in BROKERS if b != controller)
        followers = [b for b in BROKERS if b != old]
        create_topic(cluster.bootstrap, topic_name, [old, *followers])
        for b in BROKERS:
            wait_for_view(cluster, b, topic_name, lambda view: view.leader == old and view.isr == set(BROKERS)
                          and view.controller == controller, f"leader {old} with the ISR {BROKERS}")

        with ContinuousProducer(cluster.bootstrap, topic_name, 1, **PRODUCER) as producer:
            producer.wait_for_new_acks(0, count=20)
            cluster.network.cut(cluster.hosts[old], cluster.zookeeper_host)

            # Its session expires; a follower takes over (and the controller role, if it had it).
            elected = wait_for_view(cluster, followers[0], topic_name, lambda view: old not in view.brokers
                                    and view.controller in followers and view.leader in followers,
                                    f"broker {old} gone and a new leader", timeout=60)
            new = elected.leader
            for b in followers:  # both have applied it: the new leader leads, the other follows it
                wait_for_view(cluster, b, topic_name, lambda view: view.leader == new, f"leader {new}")
            # The old leader has heard nothing of it.
            stale = own_view(cluster, old, topic_name)
            assert stale.leader == old and stale.brokers == set(BROKERS)
            if leader_is_controller:
                assert stale.controller == old

            # It takes the write, but can never commit it: its followers fetch from the new leader,
            # and it cannot write a smaller ISR without ZooKeeper.
            probe = b"stale-leader-probe"
            assert probe_produce(cluster.brokers[old].bootstrap, topic_name, probe, timeout_ms=3000) \
                == REQUEST_TIMED_OUT
            assert probe in partition_log_bytes(cluster, old, topic_name, 0)

            # Clients that reach the new leader go on with acks=all. (Those that ask the old leader
            # for metadata stay with it until the partition heals: nobody can tell it, as in
            # Kafka's ZooKeeper mode, where the controller sends nothing to a broker it sees dead.)
            survivors = ",".join(cluster.brokers[b].bootstrap for b in followers)
            with ContinuousProducer(survivors, topic_name, 1, prefix=b"survivor", **PRODUCER) as during:
                during.wait_for_new_acks(0, count=20, timeout=60)
            cluster.network.heal(cluster.hosts[old], cluster.zookeeper_host)

            # The old leader hears, follows, truncates its stale epoch and rejoins the ISR.
            healed = wait_for_view(cluster, old, topic_name, lambda view: view.brokers == set(BROKERS)
                                   and view.leader == new and view.isr == set(BROKERS),
                                   f"leader {new} with the ISR {BROKERS}", timeout=90)
            if leader_is_controller:
                assert healed.controller in followers
            producer.wait_for_new_acks(0, count=10, timeout=60)
        assert not producer.failed and not during.failed, (producer.failed + during.failed)[:5]
        assert_acknowledged_messages_are_there(cluster.bootstrap, topic_name, merged(producer.acked, during.acked))
        assert "log diverged from the leader" in cluster.brokers[old].output()
        logs = stop_and_compare_replicas(cluster, topic_name)
        assert probe not in logs[old]


# ---- 2. the leader cut off from its followers ---------------------------------------------------


def test_leader_cut_off_from_its_followers_stops_acknowledging_and_they_rejoin_after_healing(
        tmp_path, topic_name, network):
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=ARGS + LONG_SESSIONS, network=network) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3 and md.controller_id in BROKERS)
        leader, *followers = BROKERS
        create_topic(cluster.bootstrap, topic_name, BROKERS)
        wait_for_view(cluster, leader, topic_name, lambda view: view.leader == leader and view.isr == set(BROKERS),
                      f"the ISR {BROKERS}")

        with ContinuousProducer(cluster.bootstrap, topic_name, 1, **PRODUCER) as producer:
            producer.wait_for_new_acks(0, count=20)
            for b in followers:
                cluster.network.cut(cluster.hosts[leader], cluster.hosts[b])
            # A write appended now waits for followers that no longer fetch: when the ISR shrinks
            # below min.insync.replicas it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's
            # DelayedProduce) - or, should this thread be so slow that the shrink comes first,
            # refused before the append. Either way it is not acknowledged.
            early: list[int] = []
            sender = threading.Thread(target=lambda: early.append(probe_produce(
                cluster.brokers[leader].bootstrap, topic_name, b"probe-during-the-lag", timeout_ms=60000)))
            sender.start()

            # Within replica.lag.time.max.ms the ISR is the leader alone (it still reaches ZooKeeper).
            wait_for_view(cluster, leader, topic_name, lambda view: view.leader == leader and view.isr == {leader},
                          "an ISR of itself alone")
            sender.join(60)
            assert early and early[0] in (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_ENOUGH_REPLICAS), early
            assert probe_produce(cluster.brokers[leader].bootstrap, topic_name, b"probe-after-the-shrink",
                                 timeout_ms=3000) == NOT_ENOUGH_REPLICAS
            # Every acknowledged message is on the leader and at least one follower (the ISR may
            # have lost one follower first and gone on committing with the other, as Kafka's).
            # The followers cannot fetch: their logs end now where they did when the cut began.
            replicated = max(log_end_offset_on_disk(cluster, b, topic_name) for b in followers)
            acked_while_cut = list(producer.acked[0])
            assert max(offset for offset, _ in acked_while_cut if offset is not None) < replicated
            if early[0] == NOT_ENOUGH_REPLICAS_AFTER_APPEND:  # appended, and there only
                assert log_end_offset_on_disk(cluster, leader, topic_name) > replicated

            for b in followers:
                cluster.network.heal(cluster.hosts[leader], cluster.hosts[b])
            # The followers catch up and rejoin; the waiting writes are acknowledged.
            wait_for_view(cluster, leader, topic_name, lambda view: view.isr == set(BROKERS), f"the ISR {BROKERS}",
                          timeout=60)
            producer.wait_for_new_acks(0, count=20, timeout=60)
        assert not producer.failed, producer.failed[:5]
        assert_acknowledged_messages_are_there(cluster.bootstrap, topic_name, producer.acked)
        stop_and_compare_replicas(cluster, topic_name)
