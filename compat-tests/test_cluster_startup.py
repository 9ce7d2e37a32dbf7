"""Two broker processes started at the same moment on fresh data dirs against one real ZooKeeper:
InitProducerId sent on the very first connection each accepts never hands out the same producer
id twice. (A broker that answered before joining took its ids from its own data dir, where a fresh
broker starts at 0 like every other: two producers with one id and epoch on one partition have
each other's batches dropped as duplicates.)"""

from __future__ import annotations

import threading
import time

from clients import RawConnection, init_producer_id
from cluster import ZooKeeperCluster
from kafkacompat.testing.process import BrokerProcess

REQUESTS_PER_BROKER = 3


def _first_producer_ids(port: int, out: dict, stop: threading.Event) -> None:
    """Connect as soon as the port accepts and ask for producer ids at once."""
    while not stop.is_set():
        try:
            conn = RawConnection(f"127.0.0.1:{port}", timeout=30)
        except OSError:
            time.sleep(0.001)
            continue
        with conn:
            out[port] = [init_producer_id(conn, 4) for _ in range(REQUESTS_PER_BROKER)]
        return


def test_brokers_starting_together_never_share_a_producer_id(tmp_path):
    with ZooKeeperCluster(tmp_path, brokers=0) as cluster:
        brokers = [BrokerProcess(tmp_path / f"broker-{i}", broker_id=i, extra_args=cluster.broker_args(i))
                   for i in range(2)]
        cluster.brokers.update(enumerate(brokers))  # closed (killed) with the cluster
        answers: dict[int, list] = {}
        stop = threading.Event()
        clients = [threading.Thread(target=_first_producer_ids, args=(b.port, answers, stop)) for b in brokers]
        starters = [threading.Thread(target=b.start) for b in brokers]
        try:
            for thread in clients + starters:
                thread.start()
            for thread in starters + clients:
                thread.join(60)
        finally:
            stop.set()
        assert sorted(answers) == sorted(b.port for b in brokers), "\n".join(b.output() for b in brokers)
        responses = [r for port in answers for r in answers[port]]
        assert [r.error_code for r in responses] == [0] * len(responses)
        ids = [r.producer_id for r in responses]
        assert len(set(ids)) == len(ids), f"producer ids handed out twice: {answers}"
