"""Replication with the real controller (embedded store, InProcessCluster) in one process: the
leader dies, an ISR member takes over, acks=all goes on with two in-sync replicas, the old leader
returns, catches up byte for byte and rejoins the ISR."""
import trio
from kafkacompat.dev_cluster import InProcessCluster
from tests.support import produce, log_bytes, wait_until, TOPIC


def test_failover_with_the_real_controller(tmp_path):
    async def main():
        async with trio.open_nursery() as nursery:
            cluster = InProcessCluster(nursery, tmp_path, overrides={
                "replica.lag.time.max.ms": "2000", "replica.fetch.wait.max.ms": "100",
                "replica.fetch.backoff.ms": "100", "log.cleaner.enable": "false"})
            for i in range(3):
                await cluster.start_broker(i)
            await wait_until(lambda: all(len(b.metadata.brokers()) == 3 for b in cluster.brokers.values()), 15)
            await cluster.brokers[0].admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
            await wait_until(lambda: all(b.partition(TOPIC, 0) is not None for b in cluster.brokers.values()), 15)
            await wait_until(lambda: any(b.partition(TOPIC, 0).is_leader for b in cluster.brokers.values()), 15)
            leader = next(b for b in cluster.brokers.values() if b.partition(TOPIC, 0).is_leader)
            for i in range(5):
                assert (await produce(leader, [b"a%d" % i]))[0] == 0
            victim = leader.node_id
            await cluster.stop_broker(victim, controlled=False)
            await wait_until(lambda: any(b.partition(TOPIC, 0).is_leader for b in cluster.brokers.values()), 15)
            new = next(b for b in cluster.brokers.values() if b.partition(TOPIC, 0).is_leader)
            assert new.partition(TOPIC, 0).leader_epoch == 1
            for i in range(5):
                code, off = await produce(new, [b"b%d" % i])
                assert code == 0, code
            back = await cluster.start_broker(victim)
            await wait_until(lambda: back.partition(TOPIC, 0) is not None and log_bytes(back) == log_bytes(new), 15)
            await wait_until(lambda: sorted(new.partition(TOPIC, 0).isr) == [0, 1, 2], 15)
            assert new.partition(TOPIC, 0).high_watermark == 10
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    trio.run(main)
