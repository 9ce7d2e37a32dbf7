"""A 2-broker ZooKeeper cluster whose brokers replicate over a SASL_SSL inter-broker listener
(inter.broker.listener.name=INTERNAL, PLAIN), while clients use a PLAINTEXT one and a SCRAM
SASL_PLAINTEXT one: an acks=all write with min.insync.replicas=2 succeeds only once the follower
fetched it through TLS and SASL, and SCRAM credentials created through one broker log in at the
other (they live in ZooKeeper's /config/users)."""

from __future__ import annotations

import time

import pytest

from cluster import ZooKeeperCluster
from kafkacompat.testing.certs import CertificateAuthority
from kafkacompat.testing.process import BrokerProcess, distinct_free_ports

BROKER_PASSWORD = "inter-broker-secret"


class SecureCluster(ZooKeeperCluster):
    def __init__(self, tmp_path, certs_dir) -> None:
        super().__init__(tmp_path, brokers=2)
        authority = CertificateAuthority(certs_dir)
        self.keystore = authority.issue("server", "/CN=localhost", server=True).keystore()
        self.ca = authority.cert
        ports = distinct_free_ports(9)  # broker 2 joins later, with a wrong inter-broker password
        self.ports = {b: {"INTERNAL": ports[2 * b], "SCRAM": ports[2 * b + 1]} for b in range(3)}
        self.client_ports = ports[6:]
        self.passwords = {0: BROKER_PASSWORD, 1: BROKER_PASSWORD, 2: "not-the-password"}

    def start_broker(self, broker_id: int) -> BrokerProcess:
        if broker_id not in self.brokers:  # every port of every listener distinct
            self.brokers[broker_id] = BrokerProcess(self.tmp_path / f"broker-{broker_id}", broker_id=broker_id,
                                                    port=self.client_ports[broker_id],
                                                    extra_args=self.broker_args(broker_id))
        return self.brokers[broker_id].start()

    def broker_args(self, broker_id: int) -> list[str]:
        ports = self.ports[broker_id]
        password = self.passwords[broker_id]
        jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="broker" password="{password}" user_broker="{password}";')
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:{ports['INTERNAL']},"
                         f"SCRAM://127.0.0.1:{ports['SCRAM']}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,SCRAM:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": jaas,
            "listener.name.scram.sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "min.insync.replicas": "2",
        }
        args = super().broker_args(broker_id)
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        return args


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure-cluster")
    with SecureCluster(base, base / "certs") as cluster:
        cluster.wait_until_every_broker_sees(2)
        yield cluster


def test_replication_goes_through_the_sasl_ssl_inter_broker_listener(secure_cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": secure_cluster.bootstrap})
    admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(20)
    producer = Producer({"bootstrap.servers": secure_cluster.bootstrap, "acks": "all"})
    delivered = []
    for i in range(5):
        producer.produce("replicated", f"r{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 5
    leader = secure_cluster.metadata(topic="replicated").topics["replicated"].partitions[0].leader
    follower = 1 - leader
    secure_cluster.brokers[leader].wait_for_output("as User:broker with SASL mechanism PLAIN")
    assert f"127.0.0.1:{secure_cluster.ports[leader]['INTERNAL']}" in secure_cluster.brokers[follower].output()
    # the follower's copy is whole: read it from the follower once the leader is gone
    secure_cluster.brokers[leader].kill()
    consumer = Consumer({"bootstrap.servers": secure_cluster.brokers[follower].bootstrap, "group.id": "g",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("replicated", 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 5 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [f"r{i}".encode() for i in range(5)]
    secure_cluster.start_broker(leader)
    secure_cluster.wait_until_every_broker_sees(2)


def test_scram_credentials_created_on_one_broker_log_in_at_the_other(secure_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": secure_cluster.brokers[0].bootstrap})
    upsert = UserScramCredentialUpsertion("dana", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dana-pw")
    admin.alter_user_scram_credentials([upsert])["dana"].result(10)
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{secure_cluster.ports[1]['SCRAM']}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": "dana", "sasl.password": "dana-pw", "acks": 1})
    producer.produce("scram-cluster", b"x")
    assert producer.flush(30) == 0
    secure_cluster.brokers[1].wait_for_output("as User:dana with SASL mechanism SCRAM-SHA-256")


def test_a_broker_with_a_wrong_inter_broker_password_is_refused(secure_cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    intruder = secure_cluster.start_broker(2)
    secure_cluster.wait_until_every_broker_sees(3)
    admin = AdminClient({"bootstrap.servers": secure_cluster.brokers[0].bootstrap})
    admin.create_topics([NewTopic("guarded", 1, replica_assignment=[[0, 2]])])["guarded"].result(20)
    secure_cluster.brokers[0].wait_for_output("(user 'broker')")  # broker 0 refused broker 2's fetcher
    intruder.wait_for_output("cannot authenticate to broker 0 on the inter-broker listener INTERNAL")
    assert "not-the-password" not in secure_cluster.brokers[0].output() + intruder.output()
    intruder.kill()


def test_transactions_commit_across_the_secure_inter_broker_listener(secure_cluster):
    """The coordinator's WriteTxnMarkers (and the leader's AddPartitionsToTxn checks) go to the
    other broker's INTERNAL listener, through TLS and SASL."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": secure_cluster.bootstrap})
    admin.create_topics([NewTopic("txn-secure", 2, replica_assignment=[[0, 1], [1, 0]])])["txn-secure"].result(20)
    producer = Producer({"bootstrap.servers": secure_cluster.bootstrap, "transactional.id": "secure-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce("txn-secure", f"p{partition}".encode(), partition=partition)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": secure_cluster.bootstrap, "group.id": "txn-secure",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("txn-secure", 0, 0), TopicPartition("txn-secure", 1, 0)])
    values = set()
    deadline = time.monotonic() + 30
    while len(values) < 2 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.add(message.value())
    consumer.close()
    assert values == {b"p0", b"p1"}
