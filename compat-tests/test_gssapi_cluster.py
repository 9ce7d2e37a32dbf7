"""A 2-broker ZooKeeper cluster whose brokers replicate over a SASL_PLAINTEXT inter-broker listener
with GSSAPI (sasl.mechanism.inter.broker.protocol=GSSAPI): each broker's fetchers get a ticket for
kafka/127.0.0.1 from the broker's keytab, and an acks=all write with min.insync.replicas=2
succeeds only once the follower fetched it that way."""

from __future__ import annotations

import pytest

from cluster import ZooKeeperCluster  # noqa: E402
from kafkacompat.testing.process import BrokerProcess, distinct_free_ports  # noqa: E402
from test_gssapi import HOST, krb5_jaas, realm_on_loopback, service_keytab  # noqa: E402


class KerberosCluster(ZooKeeperCluster):
    def __init__(self, tmp_path, keytab, principal: str) -> None:
        super().__init__(tmp_path, brokers=2)
        self.jaas = krb5_jaas(keytab, principal)
        ports = distinct_free_ports(4)
        self.internal = {0: ports[0], 1: ports[1]}
        self.client_ports = ports[2:]

    def start_broker(self, broker_id: int) -> BrokerProcess:
        if broker_id not in self.brokers:
            self.brokers[broker_id] = BrokerProcess(self.tmp_path / f"broker-{broker_id}", broker_id=broker_id,
                                                    port=self.client_ports[broker_id],
                                                    extra_args=self.broker_args(broker_id))
        return self.brokers[broker_id].start()

    def broker_args(self, broker_id: int) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://{HOST}:0,INTERNAL://{HOST}:{self.internal[broker_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "GSSAPI",
            "sasl.enabled.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "listener.name.internal.gssapi.sasl.jaas.config": self.jaas,
            "min.insync.replicas": "2",
        }
        args = super().broker_args(broker_id)
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        return args


@pytest.fixture(scope="module")
def kerberos_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("gssapi-cluster")
    with realm_on_loopback(distinct_free_ports(1)[0]) as realm:
        principal = service_keytab(realm, base / "kafka.keytab")
        with KerberosCluster(base, base / "kafka.keytab", principal) as cluster:
            cluster.wait_until_every_broker_sees(2)
            yield cluster


def test_replication_authenticates_with_gssapi(kerberos_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kerberos_cluster.bootstrap})
    admin.create_topics([NewTopic("kerberized", 1, 2)])["kerberized"].result(20)
    producer = Producer({"bootstrap.servers": kerberos_cluster.bootstrap, "acks": "all"})
    delivered = []
    for i in range(5):
        producer.produce("kerberized", f"r{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 5
    leader = kerberos_cluster.metadata(topic="kerberized").topics["kerberized"].partitions[0].leader
    kerberos_cluster.brokers[leader].wait_for_output("as User:kafka with SASL mechanism GSSAPI")
