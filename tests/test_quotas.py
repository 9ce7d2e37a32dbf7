"""Client quota enforcement (quotas.py): Kafka's entity precedence and shared sensors, its Rate
over quota.window.num samples, and the KIP-219 throttle time, with explicit clock values; the
replication throttles' SimpleRate, throttled-replica lists and the follower's holding back."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
import trio
from trio.testing import MockClock

from kafkacompat.config import BrokerConfig
from kafkacompat.controller.client_quotas import QuotaEntity
from kafkacompat.controller.topics import TopicInfo
from kafkacompat.quotas import (
    DEFAULT,
    ClientQuotaManager,
    QuotaType,
    Rate,
    ReplicationQuota,
    SimpleRate,
    throttled_partitions,
)
from kafkacompat.replication.fetcher import ReplicaFetcher


def manager(stored: dict) -> ClientQuotaManager:
    quotas = ClientQuotaManager(BrokerConfig(), lambda: None)
    quotas.apply({QuotaEntity(entity): values for entity, values in stored.items()})
    return quotas


def test_the_first_matching_entity_wins_in_kafkas_order():
    quotas = manager({
        (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 1.0},
        (("user", "alice"), ("client-id", None)): {"producer_byte_rate": 2.0},
        (("user", "alice"),): {"producer_byte_rate": 3.0},
        (("user", None), ("client-id", "app")): {"producer_byte_rate": 4.0},
        (("user", None),): {"producer_byte_rate": 6.0},
        (("client-id", "tool"),): {"producer_byte_rate": 7.0},
        (("client-id", None),): {"producer_byte_rate": 8.0, "consumer_byte_rate": 9.0},
        (("ip", None),): {"connection_creation_rate": 10.0},
    })
    resolve = quotas.produce.resolve
    assert resolve("alice", "app") == (("alice", "app"), 1.0)
    assert resolve("alice", "other") == (("alice", "other"), 2.0)      # <user>/clients/<default>
    assert resolve("bob", "app") == (("bob", "app"), 4.0)              # <default>/clients/<client-id>
    assert resolve("bob", "other") == (("bob", ""), 6.0)               # <default> user: one sensor per user
    assert quotas.fetch.resolve("bob", "other") == (("", "other"), 9.0)  # only a client default for fetch
    assert quotas.request.resolve("alice", "app") is None


def test_user_only_quotas_share_one_sensor_across_client_ids():
    quotas = manager({(("user", "alice"),): {"producer_byte_rate": 1000.0}})
    quotas.produce.record("alice", "a", 500, now=0.0)
    quotas.produce.record("alice", "b", 500, now=0.1)
    assert list(quotas.produce.sensors) == [("alice", "")]
    assert quotas.produce.record("carol", "a", 10**9, now=0.2) == 0   # no quota applies to carol


def test_the_rate_spans_at_least_samples_minus_one_windows_and_expires_old_samples():
    rate = Rate(samples=3, window=1.0)
    rate.record(1000, 0.0)
    assert rate.span(0.0) == 2.0 and rate.measure(0.0) == 500
    rate.record(1000, 1.5)            # a second sample
    assert rate.span(2.5) == 2.5 and rate.measure(2.5) == 800
    rate.record(1000, 4.0)            # the first sample (started at 0) has expired at 3
    assert rate.starts == [1.5, 4.0] and rate.measure(4.0) == 2000 / 2.5


def test_the_throttle_time_brings_the_rate_back_to_the_quota():
    produce = QuotaType("producer_byte_rate", samples=11, window=1.0)
    produce.set_quotas({(None, DEFAULT): 1000.0})
    assert produce.record("u", "c", 10_000, now=0.0) == 0     # 10 windows' worth is within the quota
    # 15,000 bytes over a 10 s span is 1,500 B/s: (1500 - 1000) / 1000 x 10 s.
    assert produce.record("u", "c", 5_000, now=0.0) == 5000
    produce.unrecord("u", "c", 5_000, now=0.0)
    assert produce.record("u", "c", 0, now=0.0) == 0


@pytest.mark.parametrize("samples", [1, 2, 11])
def test_a_steady_client_at_its_quota_is_not_throttled(samples):
    produce = QuotaType("producer_byte_rate", samples=samples, window=1.0)
    produce.set_quotas({("u", None): 1000.0})
    throttles = [produce.record("u", "c", 100, now=t / 10) for t in range(1, 200)]
    assert max(throttles) <= 100


def test_a_rate_measured_after_a_quiet_spell_leaves_out_its_expired_samples():
    rate = Rate(samples=3, window=1.0)
    rate.record(3000, 0.0)
    rate.record(1000, 2.5)
    assert rate.measure(3.5) == 1000 / 2.0   # the sample started at 0 expired at 3: only 1000 is left
    assert rate.measure(10.0) == 0.0


def test_a_simple_rate_counts_the_first_bytes_at_their_full_weight():
    rate = SimpleRate(samples=11, window=1.0)
    rate.record(1000, 0.0)
    assert rate.measure(0.0) == 1000 / 1.0    # at least one window, not samples - 1 of them
    assert rate.measure(4.0) == 1000 / 4.0    # the time since the oldest sample began
    assert rate.measure(11.0) == 0.0          # expired


def test_throttled_replicas_name_partitions_of_this_broker_or_all():
    assert throttled_partitions("*", 1) is None
    assert throttled_partitions("0:1, 1:2,2:1", 1) == {0, 2}
    assert throttled_partitions("0:2", 1) == frozenset()


def test_a_replication_quota_holds_back_only_named_partitions_over_its_bound():
    bound = [10_000]
    quota = ReplicationQuota("LeaderReplication", "leader.replication.throttled.replicas", 1,
                             lambda: bound[0], samples=11, window=1.0)
    named = TopicInfo("moving", uuid.uuid4(), 3, configs={"leader.replication.throttled.replicas": "0:1,1:2"})
    everything = TopicInfo("all", uuid.uuid4(), 2, configs={"leader.replication.throttled.replicas": "*"})
    plain = TopicInfo("plain", uuid.uuid4(), 1)
    assert quota.is_throttled(named, 0) and not quota.is_throttled(named, 1) and not quota.is_throttled(named, 2)
    assert quota.is_throttled(everything, 1) and not quota.is_throttled(plain, 0) and not quota.is_throttled(None, 0)
    assert not quota.exceeded(0.0)
    quota.record(20_000, 0.0)
    assert quota.exceeded(1.0)                 # 20 000 bytes in 1 s
    assert not quota.exceeded(2.0)             # 10 000 / s: at the bound
    bound[0] = 1_000
    assert quota.exceeded(2.0)                 # a lowered rate applies at once
    named.configs["leader.replication.throttled.replicas"] = "1:1"
    assert quota.is_throttled(named, 1) and not quota.is_throttled(named, 0)   # so does a changed topic config


def test_a_follower_leaves_out_throttled_partitions_not_caught_up_while_over_its_rate():
    topic = TopicInfo("moving", uuid.uuid4(), 2, configs={"follower.replication.throttled.replicas": "0:3"})
    quota = ReplicationQuota("FollowerReplication", "follower.replication.throttled.replicas", 3,
                             lambda: 1000, samples=11, window=1.0)
    partitions = {("moving", i): SimpleNamespace(topic="moving", index=i, is_leader=False, leader_id=1,
                                                 log_end_offset=0, leader_epoch=0) for i in range(2)}
    host = SimpleNamespace(node_id=3, config=BrokerConfig(replica_fetch_backoff_ms=250), partitions=partitions,
                           follower_quota=quota, topic=lambda name: topic)
    fetcher = ReplicaFetcher(host, leader_id=1)
    for key in partitions:
        fetcher.add(key)

    def fetched() -> list[int]:
        return [f.partition.index for f in fetcher._fetchable()[0]]

    async def main():
        assert fetched() == [0, 1]               # within the rate
        quota.record(5000, trio.current_time())
        ready, next_time = fetcher._fetchable()
        assert [f.partition.index for f in ready] == [1]   # only the throttled one waits...
        assert next_time == trio.current_time() + 0.25     # ...and is looked at again after the back-off
        fetcher.caught_up.add(("moving", 0))
        assert fetched() == [0, 1]               # a caught-up replica is never held back

    trio.run(main, clock=MockClock())   # a clock that stands still unless told
