"""Leader CPU per follower Fetch with many replicated partitions, with and without follower
fetch sessions.

    python benchmarks/bench_follower_fetch_sessions.py [--partitions 1000] [--seconds 15] [--rounds 2]

Two real broker processes on a real ZooKeeper (compat-tests/cluster.py); one topic of N
partitions, replicas [0, 1] (broker 0 leads all, broker 1 follows all), one record each. With
``replica.fetch.wait.max.ms=0`` the caught-up follower fetches back to back, so the figure is
what one follower Fetch costs the leader. Two clusters:

- sessions: the defaults: the follower opens a session, then sends incremental fetches naming
  only what changed (nothing, once caught up);
- no sessions: the leader has no session slot (``max.incremental.fetch.session.cache.slots=0``),
  so every follower fetch is a full one naming all N partitions, as before follower sessions.

It prints the leader's and the follower's CPU time per follower fetch (psutil, user + system),
counted from the leader's /metrics; the leader's own CPU with the follower stopped (SIGSTOP, its
housekeeping) is measured first and taken out of its figure. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "compat-tests"))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from cluster import ZooKeeperCluster  # noqa: E402
from kafkacompat.testing.http import http_request  # noqa: E402


def follower_fetches(cluster: ZooKeeperCluster) -> float:
    answer = http_request("GET", cluster.http_base(0) + "/metrics")
    return sum(s.value for family in text_string_to_metric_families(answer.body.decode()) for s in family.samples
               if s.name == "kafkacompat_fetch_session_requests_total" and s.labels.get("fetcher") == "follower")


def setup(cluster: ZooKeeperCluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replica_assignment=[[0, 1]] * partitions)])[topic].result(60)
    cluster.wait_for(lambda md: topic in md.topics and len(md.topics[topic].partitions) == partitions
                     and all(set(p.isrs) == {0, 1} for p in md.topics[topic].partitions.values()), timeout=120)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "acks": 1})
    for p in range(partitions):
        producer.produce(topic, b"x" * 100, partition=p)
    assert producer.flush(300) == 0


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def idle_rate(leader: psutil.Process, follower: psutil.Process, seconds: float) -> float:
    """The leader's CPU per second with no follower fetching (its own housekeeping), taken out
    of the per-fetch figures."""
    follower.suspend()
    try:
        time.sleep(1)  # the fetch in flight ends
        before = cpu(leader)
        time.sleep(seconds)
        return (cpu(leader) - before) / seconds
    finally:
        follower.resume()


def run(tmp: Path, partitions: int, seconds: float, rounds: int, sessions: bool) -> None:
    settings = {"replica.fetch.wait.max.ms": "0", "replica.lag.time.max.ms": "30000"}
    if not sessions:
        settings["max.incremental.fetch.session.cache.slots"] = "0"
    args = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    kind = "sessions" if sessions else "no sessions"
    with ZooKeeperCluster(tmp, brokers=2, extra_args=args, http=True) as cluster:
        cluster.wait_until_every_broker_sees(2)
        started = time.monotonic()
        setup(cluster, f"followers-{uuid.uuid4().hex[:6]}", partitions)
        print(f"{kind}: {partitions} partitions replicated in {time.monotonic() - started:.1f} s", flush=True)
        time.sleep(5)  # the follower catches up the records
        leader, follower = (psutil.Process(cluster.brokers[b].pid()) for b in (0, 1))
        idle = idle_rate(leader, follower, seconds)
        print(f"{kind}: the leader's CPU with the follower stopped: {idle * 1000:.1f} ms per second", flush=True)
        for round_ in range(1, rounds + 1):
            fetches, leader_cpu, follower_cpu = follower_fetches(cluster), cpu(leader), cpu(follower)
            time.sleep(seconds)
            fetches = follower_fetches(cluster) - fetches
            leader_cpu, follower_cpu = cpu(leader) - leader_cpu - idle * seconds, cpu(follower) - follower_cpu
            print(f"round {round_} {kind:11s}: {fetches:6.0f} follower fetches in {seconds:.0f} s; "
                  f"leader CPU {leader_cpu / fetches * 1e6:8.0f} us per fetch, "
                  f"follower CPU {follower_cpu / fetches * 1e6:8.0f} us per fetch", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for sessions in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            run(Path(tmp), args.partitions, args.seconds, args.rounds, sessions)


if __name__ == "__main__":
    main()
