"""Follower fetch sessions (KIP-227) with real processes: three kafkacompat brokers on a real
ZooKeeper, an acks=all idempotent confluent_kafka producer, and every broker's /metrics.

- followers open a session on each leader and then fetch incrementally (the leaders' session
  cache holds them; the followers count far more incremental than full requests); a leader
  SIGKILLed and restarted under load loses its sessions: the followers fetching from it start
  new ones, and every acknowledged message is read back, the replicas byte-identical;
- with one session slot (``max.incremental.fetch.session.cache.slots=1``), a short eviction
  time and fetch waits of different lengths, the two followers of each leader evict each
  other's session again and again (FETCH_SESSION_ID_NOT_FOUND, then a full fetch; a full fetch
  that finds no slot is answered with session id 0 and the next one asks again), the leader
  never holding more than one: replication stays correct;
- a topic deleted and made again under the same name while another one is produced to: both
  replicate through the followers' sessions, every acknowledged message there, replicas equal.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from cluster import ZooKeeperCluster
from kafkacompat.testing.http import http_request
from test_replication_failover import (
    BROKERS,
    FAST,
    ContinuousProducer,
    all_led_with_isr,
    assert_acknowledged_messages_are_there,
    create_topic,
    deadline_loop,
    partition_log_bytes,
    set_args,
    wait_in_isr,
)


def scrape(cluster: ZooKeeperCluster, broker_id: int) -> dict[tuple[str, frozenset], float]:
    answer = http_request("GET", cluster.http_base(broker_id) + "/metrics")
    assert answer.status == 200, answer
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(answer.body.decode()) for s in family.samples}


def replica_fetches(cluster: ZooKeeperCluster, broker_id: int, leader: int, kind: str) -> float:
    """Fetch requests ``broker_id``'s fetcher sent to ``leader``, full or incremental."""
    return scrape(cluster, broker_id).get(
        ("kafkacompat_replica_fetch_requests_total", frozenset({"leader": str(leader), "kind": kind}.items())), 0)


def leader_counter(cluster: ZooKeeperCluster, broker_id: int, name: str, **labels: str) -> float:
    return scrape(cluster, broker_id).get((name, frozenset(labels.items())), 0)


def wait_for_incremental_fetches(cluster: ZooKeeperCluster, follower: int, leader: int, more_than: float,
                                 timeout: float = 60) -> None:
    for _ in deadline_loop(timeout, f"broker {follower}'s incremental fetches from broker {leader}", interval=0.5):
        if replica_fetches(cluster, follower, leader, "incremental") > more_than:
            return


def assert_replicas_identical(cluster: ZooKeeperCluster, topic: str, partitions: int) -> None:
    for b in BROKERS:  # stopped cleanly, the three replicas of every partition hold the same bytes
        cluster.brokers[b].stop()
    for p in range(partitions):
        logs = [partition_log_bytes(cluster, b, topic, p) for b in BROKERS]
        assert logs[0] == logs[1] == logs[2], f"replicas of partition {p} differ"


def test_followers_fetch_incrementally_and_start_over_when_their_leader_restarts(tmp_path, topic_name):
    partitions = 12
    args = FAST + set_args(leader_imbalance_check_interval_seconds=1)  # the preferred leader takes over again
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=args, http=True) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, partitions, 3, min_insync_replicas=2)
        md = cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)))
        with ContinuousProducer(cluster.bootstrap, topic_name, partitions) as producer:
            for p in range(partitions):
                producer.wait_for_new_acks(p)
            leaders = {p.leader for p in md.topics[topic_name].partitions.values()}
            for leader in leaders:
                for follower in (b for b in BROKERS if b != leader):
                    wait_for_incremental_fetches(cluster, follower, leader, more_than=20)
                    assert replica_fetches(cluster, follower, leader, "full") < \
                        replica_fetches(cluster, follower, leader, "incremental")
                sessions = leader_counter(cluster, leader, "kafka_server_fetchsessioncache_numincrementalfetchsessions")
                assert sessions >= 1
                assert leader_counter(cluster, leader, "kafkacompat_fetch_session_requests_total",
                                      fetcher="follower", kind="incremental") > 20

            victim = md.topics[topic_name].partitions[0].leader
            followers = [b for b in BROKERS if b != victim]
            cluster.brokers[victim].kill()
            cluster.wait_for(lambda md: all(p.leader in followers for p in md.topics[topic_name].partitions.values()),
                             broker_id=followers[0])
            for p in range(partitions):  # new leaders: acks=all through the survivors' sessions
                producer.wait_for_new_acks(p)
            full_before = {b: replica_fetches(cluster, b, victim, "full") for b in followers}
            cluster.start_broker(victim)
            wait_in_isr(cluster, topic_name, victim, view_from=victim, timeout=60)
            # the restarted broker follows everything; its fetchers open sessions on the new leaders
            for leader in followers:
                wait_for_incremental_fetches(cluster, victim, leader, more_than=5)
            # the preferred leader takes its partitions back: its followers fetch from it in
            # sessions opened anew (its cache went with the old process)
            cluster.wait_for(lambda md: md.topics[topic_name].partitions[0].leader == victim
                             and all_led_with_isr(md, topic_name, partitions, set(BROKERS)), timeout=60)
            for b in followers:
                for _ in deadline_loop(60, f"broker {b}'s new session on the restarted broker {victim}", interval=0.5):
                    if replica_fetches(cluster, b, victim, "full") > full_before[b]:
                        break
                wait_for_incremental_fetches(cluster, b, victim, more_than=replica_fetches(cluster, b, victim,
                                                                                           "incremental") + 5)
            for p in range(partitions):
                producer.wait_for_new_acks(p)
        assert not producer.failed, producer.failed[:5]
        total = assert_acknowledged_messages_are_there(cluster.bootstrap, topic_name, producer.acked)
        assert total > 100
        assert_replicas_identical(cluster, topic_name, partitions)


def test_followers_evicting_each_others_session_replicate_correctly(tmp_path, topic_name):
    partitions = 6
    args = FAST + set_args(max_incremental_fetch_session_cache_slots=1,
                           min_incremental_fetch_session_eviction_ms=50)
    # Two followers' sessions of one size may push each other out only when the one in the slot
    # has been unused for the 50 ms (Kafka's tryEvict: it is touched when its fetch arrives, the
    # newcomer's full fetch asks for a slot when it is answered). Idle, every fetch waits
    # replica.fetch.wait.max.ms in the leader: with one wait for all, the followers' fetch loops
    # keep the phase they started with, often under 50 ms apart, and evictions may never come.
    # Waits of different lengths make the phases drift, so each follower's full fetch is answered
    # in turn while the other's session has been unused for longer.
    waits = {0: 500, 1: 230, 2: 370}
    per_broker = {b: set_args(replica_fetch_wait_max_ms=wait) for b, wait in waits.items()}
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=args, http=True, broker_extra_args=per_broker) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        create_topic(cluster.bootstrap, topic_name, partitions, 3, min_insync_replicas=2)
        md = cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)))
        leader = md.topics[topic_name].partitions[0].leader
        for _ in deadline_loop(60, f"sessions evicted on broker {leader}", interval=0.5):
            assert leader_counter(cluster, leader, "kafka_server_fetchsessioncache_numincrementalfetchsessions") <= 1
            if leader_counter(cluster, leader,
                              "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total") >= 3:
                break
        for _ in deadline_loop(60, "a follower's fetch in an evicted session", interval=0.5):
            if leader_counter(cluster, leader, "kafkacompat_fetch_session_requests_total",
                              fetcher="follower", kind="error") >= 1:
                break
        with ContinuousProducer(cluster.bootstrap, topic_name, partitions) as producer:
            for p in range(partitions):
                producer.wait_for_new_acks(p, count=20)
        assert not producer.failed, producer.failed[:5]
        assert_acknowledged_messages_are_there(cluster.bootstrap, topic_name, producer.acked)
        cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)), timeout=60)
        assert_replicas_identical(cluster, topic_name, partitions)


def test_a_topic_deleted_and_made_again_replicates_in_the_followers_sessions(tmp_path, topic_name):
    """The deleted topic's partitions leave the followers' sessions (forgotten by the old topic
    id), the new topic's join them: the new topic's acknowledged messages are all there, and a
    second topic replicated all along by the same sessions loses nothing."""
    from confluent_kafka.admin import AdminClient

    partitions = 3
    other = f"{topic_name}-other"
    with ZooKeeperCluster(tmp_path, brokers=3, extra_args=FAST, http=True) as cluster:
        cluster.wait_for(lambda md: len(md.brokers) == 3)
        for name in (topic_name, other):
            create_topic(cluster.bootstrap, name, partitions, 3, min_insync_replicas=2)
        cluster.wait_for(lambda md: all(all_led_with_isr(md, name, partitions, set(BROKERS))
                                        for name in (topic_name, other)))
        with ContinuousProducer(cluster.bootstrap, other, partitions, prefix=b"o") as steady:
            with ContinuousProducer(cluster.bootstrap, topic_name, partitions, prefix=b"old") as first:
                for p in range(partitions):
                    first.wait_for_new_acks(p)
            assert not first.failed, first.failed[:5]
            # Destroyed now: a live producer of the topic would ask for its metadata again once it
            # is deleted, and auto.create.topics.enable would make it anew (RF 1) before the test does.
            first.producer = None
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.delete_topics([topic_name], operation_timeout=20)[topic_name].result(timeout=30)
            for broker in BROKERS:
                cluster.wait_for(lambda md: topic_name not in md.topics, broker_id=broker)
            create_topic(cluster.bootstrap, topic_name, partitions, 3, min_insync_replicas=2)
            cluster.wait_for(lambda md: all_led_with_isr(md, topic_name, partitions, set(BROKERS)), timeout=60)
            with ContinuousProducer(cluster.bootstrap, topic_name, partitions, prefix=b"new") as second:
                for p in range(partitions):
                    second.wait_for_new_acks(p, count=20)
            for p in range(partitions):
                steady.wait_for_new_acks(p)
        assert not second.failed and not steady.failed, (second.failed[:5], steady.failed[:5])
        assert_acknowledged_messages_are_there(cluster.bootstrap, topic_name, second.acked)
        assert_acknowledged_messages_are_there(cluster.bootstrap, other, steady.acked)
        md = cluster.wait_for(lambda md: all(all_led_with_isr(md, name, partitions, set(BROKERS))
                                             for name in (topic_name, other)), timeout=60)
        leader = md.topics[other].partitions[0].leader
        follower = next(b for b in BROKERS if b != leader)
        wait_for_incremental_fetches(cluster, follower, leader,
                                     more_than=replica_fetches(cluster, follower, leader, "incremental") + 5)
        cluster.brokers[follower].stop()
        cluster.brokers[leader].stop()
        for p in range(partitions):
            for name in (topic_name, other):
                assert partition_log_bytes(cluster, follower, name, p) == partition_log_bytes(cluster, leader, name, p)
