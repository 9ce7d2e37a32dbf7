"""TLS, mTLS and SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) against one real broker process
with every kind of listener at once, with certificates made for the test (openssl) and real
clients: confluent-kafka, kafka-python, aiokafka, kafkajs and kcat. Requests no client sends
(before authentication, raw v0 tokens, wrong mechanisms) are written by hand."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest

from kafkacompat.testing.certs import CertificateAuthority
from kafkacompat.testing.process import BrokerProcess, distinct_free_ports

pytest.register_assert_rewrite("clients")

from clients import Msg  # noqa: E402
from test_sarama import produce as sarama_produce, run_cli, sarama_cli  # noqa: E402,F401 (a fixture)

JS = Path(__file__).parent / "js"
PLAIN_USERS = {"alice": "alice-secret", "broker": "broker-secret"}
SCRAM_PASSWORD = "scram-secret"
KEY_PASSWORD = "key-secret"

# Kafka error codes
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
RESOURCE_NOT_FOUND = 91
UNACCEPTABLE_CREDENTIAL = 93


class Secure:
    """The broker and how to reach each listener."""

    def __init__(self, broker: BrokerProcess, ports: dict[str, int], certs: Path, ca: Path, client, other_ca: Path):
        self.broker, self.ports, self.certs, self.ca, self.client, self.other_ca = (
            broker, ports, certs, ca, client, other_ca)

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def confluent(self, listener: str, **extra) -> dict:
        conf = {"bootstrap.servers": self.address(listener), "socket.timeout.ms": 10000}
        protocol = PROTOCOLS[listener]
        conf["security.protocol"] = protocol
        if "SSL" in protocol:
            conf["ssl.ca.location"] = str(self.ca)
        if listener == "MTLS":
            conf["ssl.certificate.location"] = str(self.client.cert)
            conf["ssl.key.location"] = str(self.client.key)
        conf.update(extra)
        return conf


PROTOCOLS = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
             "SASL_SSL": "SASL_SSL", "REAUTH": "SASL_PLAINTEXT"}


def _jaas(users: dict[str, str]) -> str:
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Secure:
    base = tmp_path_factory.mktemp("security")
    certs = base / "certs"
    authority = CertificateAuthority(certs)
    server = authority.issue("server", "/CN=localhost", server=True, key_password=KEY_PASSWORD)
    client = authority.issue("client", "/C=US/O=Example/OU=Apps/CN=alice")
    other = CertificateAuthority(base / "other", "untrusted CA")
    *listener_ports, broker_port = distinct_free_ports(len(PROTOCOLS))
    ports = dict(zip([name for name in PROTOCOLS if name != "PLAINTEXT"], listener_ports))
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    properties = base / "server.properties"
    properties.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:0,{listeners}",
        "listener.security.protocol.map=" + ",".join(f"{n}:{p}" for n, p in PROTOCOLS.items()),
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={server.keystore()}",
        f"ssl.key.password={KEY_PASSWORD}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={authority.cert}",
        "listener.name.mtls.ssl.client.auth=required",
        r"ssl.principal.mapping.rules=RULE:^CN=([^,]+),OU=Apps,.*$/app-$1/L,DEFAULT",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        f"sasl.jaas.config={_jaas(PLAIN_USERS)}",
        "listener.name.reauth.sasl.enabled.mechanisms=PLAIN",
        "listener.name.reauth.plain.connections.max.reauth.ms=1000",
        "group.initial.rebalance.delay.ms=0",
        "connection.failed.authentication.delay.ms=50",
        "delegation.token.secret.key=token-signing-secret",
    ]) + "\n")
    broker = BrokerProcess(base / "data", port=broker_port, extra_args=["--config", str(properties)])
    broker.start()
    ports["PLAINTEXT"] = broker.port
    secure = Secure(broker, ports, certs, authority.cert, client, other.cert)
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(mechanism, 8192), SCRAM_PASSWORD.encode())
               for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(10)
    yield secure
    broker.kill()


def _topic(name: str) -> str:
    return f"sec-{name}-{time.monotonic_ns() % 10**9}"


def confluent_roundtrip(conf: dict, topic: str, count: int = 3) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(conf)
    for i in range(count):
        producer.produce(topic, f"m{i}".encode() * 200)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


# -- confluent-kafka (librdkafka) over every listener and mechanism -------------------------------

@pytest.mark.parametrize("listener, mechanism, username, password", [
    ("SSL", None, None, None),
    ("MTLS", None, None, None),
    ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", SCRAM_PASSWORD),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", SCRAM_PASSWORD),
    ("SASL_SSL", "PLAIN", "alice", "alice-secret"),
    ("SASL_SSL", "SCRAM-SHA-512", "alice", SCRAM_PASSWORD),
])
def test_confluent_produces_and_consumes(secure, listener, mechanism, username, password):
    extra = {"sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password} if mechanism else {}
    topic = _topic(listener.lower())
    values = confluent_roundtrip(secure.confluent(listener, **extra), topic)
    assert values == [f"m{i}".encode() * 200 for i in range(3)]
    if mechanism:
        secure.broker.wait_for_output(f"as User:alice with SASL mechanism {mechanism}")


def test_metadata_advertises_the_listener_the_client_came_in_on(secure):
    from confluent_kafka.admin import AdminClient

    for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
        extra = {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"} \
            if listener == "SASL_SSL" else {}
        brokers = AdminClient(secure.confluent(listener, **extra)).list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secure.ports[listener])]


def test_mtls_principal_comes_from_the_certificate_through_the_mapping_rules(secure):
    confluent_roundtrip(secure.confluent("MTLS"), _topic("mtls-principal"), count=1)
    secure.broker.wait_for_output("on listener MTLS: User:app-alice")


def test_oauthbearer_with_an_unsecured_token(secure):
    conf = secure.confluent("SASL_PLAINTEXT", **{"sasl.mechanism": "OAUTHBEARER",
                                                 "sasl.oauthbearer.config": "principal=oauth-user scope=test",
                                                 "enable.sasl.oauthbearer.unsecure.jwt": True})
    assert len(confluent_roundtrip(conf, _topic("oauth"), count=1)) == 1
    secure.broker.wait_for_output("as User:oauth-user with SASL mechanism OAUTHBEARER")


def _confluent_error(conf: dict) -> str:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda error: errors.append(str(error))})
    producer.produce(_topic("refused"), b"x")
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    return "\n".join(errors)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_and_unknown_user_get_the_same_answer(secure, mechanism):
    wrong = _confluent_error(secure.confluent("SASL_PLAINTEXT", **{
        "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "not-it"}))
    unknown = _confluent_error(secure.confluent("SASL_PLAINTEXT", **{
        "sasl.mechanism": mechanism, "sasl.username": "nobody", "sasl.password": "not-it"}))
    assert "Authentication failed" in wrong and "Authentication failed" in unknown
    first_line = lambda text: text.splitlines()[0].split(": SASL authentication error: ")[1].split(" (after")[0]  # noqa: E731
    assert first_line(wrong) == first_line(unknown)
    secure.broker.wait_for_output("(user 'nobody')")
    output = secure.broker.output()
    assert f"with SASL mechanism {mechanism}: invalid" in output and "from 127.0.0.1:" in output
    assert "not-it" not in output


def test_an_untrusted_ca_is_refused_and_logged(secure):
    error = _confluent_error(secure.confluent("SSL", **{"ssl.ca.location": str(secure.other_ca)}))
    assert "certificate verify failed" in error
    # and a client certificate from another CA on the mTLS listener
    other = CertificateAuthority(secure.certs.parent / "other-client", "other client CA").issue("c", "/CN=mallory")
    error = _confluent_error(secure.confluent("MTLS", **{"ssl.certificate.location": str(other.cert),
                                                         "ssl.key.location": str(other.key)}))
    assert error
    secure.broker.wait_for_output("on listener MTLS: TLS handshake failed")


def test_mtls_without_a_client_certificate_is_refused(secure):
    conf = secure.confluent("MTLS")
    del conf["ssl.certificate.location"], conf["ssl.key.location"]
    assert _confluent_error(conf)


# -- other clients --------------------------------------------------------------------------------

def UnsecuredToken(subject: str):  # noqa: N802 (a class made once kafka-python is imported)
    """A kafka-python token provider giving an unsecured JWS (alg none) for ``subject``."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(_UnsecuredToken, AbstractTokenProvider):
        pass

    return Provider(subject)


class _UnsecuredToken:
    def __init__(self, subject: str) -> None:
        self.subject = subject

    def token(self) -> str:
        encode = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()  # noqa: E731
        now = time.time()
        return f"{encode({'alg': 'none'})}.{encode({'sub': self.subject, 'iat': now, 'exp': now + 600})}."

    def extensions(self) -> dict:
        return {}


def test_kafka_python_over_scram_and_ssl(secure):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    for listener, extra in [
        ("SASL_PLAINTEXT", {"sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
                            "sasl_plain_password": SCRAM_PASSWORD}),
        ("SASL_PLAINTEXT", {"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                            "sasl_plain_password": "alice-secret"}),
        ("SSL", {"ssl_cafile": str(secure.ca)}),
        ("MTLS", {"ssl_cafile": str(secure.ca), "ssl_certfile": str(secure.client.cert),
                  "ssl_keyfile": str(secure.client.key)}),
        ("SASL_SSL", {"ssl_cafile": str(secure.ca), "sasl_mechanism": "SCRAM-SHA-512",
                      "sasl_plain_username": "alice", "sasl_plain_password": SCRAM_PASSWORD}),
        ("SASL_PLAINTEXT", {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": UnsecuredToken("kp-user")}),
    ]:
        topic = _topic("kafka-python")
        conf = {"bootstrap_servers": secure.address(listener), "security_protocol": PROTOCOLS[listener], **extra}
        producer = KafkaProducer(**conf)
        producer.send(topic, b"kafka-python").get(20)
        producer.close()
        consumer = KafkaConsumer(**conf)
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        records: list = []
        deadline = time.monotonic() + 20
        while not records and time.monotonic() < deadline:
            records = [r.value for batch in consumer.poll(timeout_ms=1000).values() for r in batch]
        assert records == [b"kafka-python"]
        consumer.close()
    secure.broker.wait_for_output("on listener MTLS: User:app-alice")
    secure.broker.wait_for_output("as User:kp-user with SASL mechanism OAUTHBEARER")


def test_aiokafka_over_sasl_ssl_and_mtls(secure):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    async def main(listener: str, **extra) -> list[bytes]:
        topic = _topic("aiokafka")
        certificate = {"certfile": str(secure.client.cert), "keyfile": str(secure.client.key)} \
            if listener == "MTLS" else {}
        conf = dict(bootstrap_servers=secure.address(listener), security_protocol=PROTOCOLS[listener],
                    ssl_context=create_ssl_context(cafile=str(secure.ca), **certificate), **extra)
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek(TopicPartition(topic, 0), 0)
            record = await asyncio.wait_for(consumer.getone(), 20)
            return [record.value]
        finally:
            await consumer.stop()

    sasl = dict(sasl_plain_username="alice")
    assert asyncio.run(main("SASL_SSL", sasl_mechanism="PLAIN", sasl_plain_password="alice-secret", **sasl)) == [
        b"aiokafka"]
    assert asyncio.run(main("SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_plain_password=SCRAM_PASSWORD,
                            **sasl)) == [b"aiokafka"]
    assert asyncio.run(main("MTLS")) == [b"aiokafka"]


@pytest.mark.parametrize("listener, sasl", [
    ("SSL", None),
    ("SASL_PLAINTEXT", {"mechanism": "scram-sha-256", "username": "alice", "password": SCRAM_PASSWORD}),
    ("SASL_SSL", {"mechanism": "plain", "username": "alice", "password": "alice-secret"}),
    ("SASL_SSL", {"mechanism": "plain", "username": "alice", "password": "wrong"}),
])
def test_kafkajs(secure, listener, sasl):
    assert (JS / "node_modules" / "kafkajs").is_dir(), f"run: cd {JS} && npm install --no-audit --no-fund"
    options = {"ca": str(secure.ca) if "SSL" in PROTOCOLS[listener] else None, "sasl": sasl}
    done = subprocess.run(["node", str(JS / "secure.js"), secure.address(listener), _topic("kafkajs"),
                           json.dumps(options)], capture_output=True, text=True, timeout=90)
    result = json.loads(done.stdout)
    if sasl and sasl["password"] == "wrong":
        assert result["error"] == "KafkaJSSASLAuthenticationError"
        assert "Authentication failed: Invalid username or password" in result["message"]
    else:
        assert result == {"values": ["one", "two"]}, done.stderr[-2000:]


@pytest.mark.parametrize("listener, options", [
    ("MTLS", ["-X", "security.protocol=ssl"]),
    ("SASL_SSL", ["-X", "security.protocol=sasl_ssl", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                  "-X", "sasl.username=alice", "-X", f"sasl.password={SCRAM_PASSWORD}"]),
])
def test_kcat(secure, listener, options):
    topic = _topic("kcat")
    tls = ["-X", f"ssl.ca.location={secure.ca}"]
    if listener == "MTLS":
        tls += ["-X", f"ssl.certificate.location={secure.client.cert}", "-X", f"ssl.key.location={secure.client.key}"]
    common = ["kcat", "-b", secure.address(listener), *options, *tls]
    done = subprocess.run([*common, "-P", "-t", topic, "-p", "0"], input="from kcat\n", text=True, capture_output=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    out = subprocess.run([*common, "-C", "-t", topic, "-p", "0", "-e", "-o", "beginning"], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    assert out.splitlines()[0] == "from kcat"


# -- SCRAM credentials ------------------------------------------------------------------------------

def test_scram_credentials_are_described_and_validated(secure):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": secure.broker.bootstrap})
    described = {user: future.result(10) for user, future in admin.describe_user_scram_credentials(["alice"]).items()}
    assert sorted((i.mechanism, i.iterations) for i in described["alice"].scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 8192)]
    with pytest.raises(KafkaException) as unknown:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    assert unknown.value.args[0].code() == RESOURCE_NOT_FOUND
    too_few = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw")])["bob"]
    with pytest.raises(KafkaException) as caught:
        too_few.result(10)
    assert caught.value.args[0].code() == UNACCEPTABLE_CREDENTIAL and "Too few iterations" in str(caught.value)
    missing = admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(KafkaException) as caught:
        missing["bob"].result(10)
    assert caught.value.args[0].code() == RESOURCE_NOT_FOUND
    # a user created, logging in, then deleted and refused
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw")])["carol"].result(10)
    conf = secure.confluent("SASL_PLAINTEXT", **{"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
                                                 "sasl.password": "carol-pw"})
    assert len(confluent_roundtrip(conf, _topic("carol"), count=1)) == 1
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)])[
        "carol"].result(10)
    assert "Authentication failed" in _confluent_error(conf)


def test_scram_credentials_are_stored_in_kafkas_format(secure):
    raw = (secure.broker.data_dir / "metadata-store.json").read_text()
    assert "/config/users/alice" in raw
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert re.search(mechanism + r'\\?":\s*\\?"salt=[^,]+,stored_key=[^,]+,server_key=[^,]+,iterations=8192', raw)


# -- requests no client sends ------------------------------------------------------------------------

def _header(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    client = b"raw-tests"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


class Raw:
    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def send(self, payload: bytes) -> None:
        self.sock.sendall(_frame(payload))

    def receive(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def handshake(self, mechanism: str, version: int = 1) -> tuple[int, list[str]]:
        self.send(_header(17, version) + _string(mechanism))
        body = self.receive()[4:]
        error, count = struct.unpack_from(">hi", body)
        position, mechanisms = 6, []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", body, position)
            mechanisms.append(body[position + 2:position + 2 + length].decode())
            position += 2 + length
        return error, mechanisms

    def authenticate(self, token: bytes, version: int = 1) -> tuple[int, str | None, bytes, int]:
        self.send(_header(36, version) + struct.pack(">i", len(token)) + token)
        body = self.receive()[4:]
        (error, length) = struct.unpack_from(">hh", body)
        message = body[4:4 + length].decode() if length >= 0 else None
        position = 4 + max(length, 0)
        (size,) = struct.unpack_from(">i", body, position)
        auth = body[position + 4:position + 4 + size]
        lifetime = struct.unpack_from(">q", body, position + 4 + size)[0] if version >= 1 else 0
        return error, message, auth, lifetime

    def metadata(self) -> bytes:
        self.send(_header(3, 1) + struct.pack(">i", -1))
        return self.receive()


def test_a_request_before_authentication_closes_the_connection(secure):
    raw = Raw(secure.address("SASL_PLAINTEXT"))
    raw.send(_header(3, 1) + struct.pack(">i", -1))
    assert raw.closed()
    secure.broker.wait_for_output("Unexpected Kafka request of type Metadata during SASL handshake")


def test_a_large_frame_before_authentication_closes_the_connection(secure):
    raw = Raw(secure.address("SASL_PLAINTEXT"))
    raw.sock.sendall(struct.pack(">i", 600_000) + b"\x00" * 1024)  # above sasl.server.max.receive.size
    assert raw.closed()
    secure.broker.wait_for_output("request size 600000 is outside 0..524288 (sasl.server.max.receive.size")


def test_an_unsupported_mechanism_is_refused_with_the_enabled_ones(secure):
    raw = Raw(secure.address("SASL_PLAINTEXT"))
    assert raw.handshake("GSSAPI") == (UNSUPPORTED_SASL_MECHANISM,
                                       ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
    assert raw.closed()


def test_v0_handshake_then_raw_plain_token(secure):
    raw = Raw(secure.address("SASL_PLAINTEXT"))
    assert raw.handshake("PLAIN", version=0)[0] == 0
    raw.sock.sendall(_frame(b"\x00alice\x00alice-secret"))
    assert raw.receive() == b""
    assert raw.metadata()[:4] == struct.pack(">i", 1)
    wrong = Raw(secure.address("SASL_PLAINTEXT"))
    assert wrong.handshake("PLAIN", version=0)[0] == 0
    wrong.sock.sendall(_frame(b"\x00alice\x00nope"))
    assert wrong.closed()


def test_sasl_requests_on_a_listener_without_sasl_are_illegal(secure):
    raw = Raw(secure.address("PLAINTEXT"))
    assert raw.handshake("PLAIN")[0] == ILLEGAL_SASL_STATE
    assert raw.authenticate(b"\x00alice\x00alice-secret")[0] == ILLEGAL_SASL_STATE


def test_authenticate_twice_is_illegal_and_a_wrong_request_in_authenticate_state_closes(secure):
    raw = Raw(secure.address("SASL_PLAINTEXT"))
    raw.handshake("PLAIN")
    assert raw.authenticate(b"\x00alice\x00alice-secret")[0] == 0
    assert raw.authenticate(b"\x00alice\x00alice-secret")[:2] == (
        ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication")
    waiting = Raw(secure.address("SASL_PLAINTEXT"))
    waiting.handshake("PLAIN")
    waiting.send(_header(3, 1) + struct.pack(">i", -1))
    assert waiting.closed()


def test_failed_authentication_message_does_not_tell_unknown_users_apart(secure):
    answers = []
    for token in (b"\x00alice\x00wrong", b"\x00nobody\x00wrong"):
        raw = Raw(secure.address("SASL_PLAINTEXT"))
        raw.handshake("PLAIN")
        answers.append(raw.authenticate(token)[:3])
        assert raw.closed()
    assert answers[0] == answers[1] == (SASL_AUTHENTICATION_FAILED,
                                        "Authentication failed: Invalid username or password", b"")


def test_session_lifetime_and_reauthentication(secure):
    raw = Raw(secure.address("REAUTH"))
    raw.handshake("PLAIN")
    assert raw.authenticate(b"\x00alice\x00alice-secret")[::3] == (0, 1000)
    time.sleep(1.1)  # the session runs out: re-authenticating keeps the connection
    assert raw.handshake("PLAIN")[0] == 0
    assert raw.authenticate(b"\x00alice\x00alice-secret")[0] == 0
    assert raw.metadata()[:4] == struct.pack(">i", 1)
    expired = Raw(secure.address("REAUTH"))
    expired.handshake("PLAIN")
    expired.authenticate(b"\x00alice\x00alice-secret")
    time.sleep(1.1)
    expired.send(_header(3, 1) + struct.pack(">i", -1))
    assert expired.closed()
    secure.broker.wait_for_output("its SASL session expired")
    # a re-authentication may not change the principal
    switching = Raw(secure.address("REAUTH"))
    switching.handshake("PLAIN")
    switching.authenticate(b"\x00alice\x00alice-secret")
    switching.handshake("PLAIN")
    assert switching.authenticate(b"\x00broker\x00broker-secret")[0] == SASL_AUTHENTICATION_FAILED


def _read_until_closed(sock: socket.socket) -> int:
    received = 0
    try:
        while chunk := sock.recv(4096):
            received += len(chunk)
    except ConnectionResetError:
        pass
    return received


def test_librdkafka_reauthenticates_before_its_session_runs_out(secure):
    from confluent_kafka import Producer

    conf = secure.confluent("REAUTH", **{"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                         "sasl.password": "alice-secret", "client.id": "reauth-client"})
    producer = Producer(conf)
    topic = _topic("reauth")
    producer.produce(topic, b"before")
    assert producer.flush(20) == 0
    time.sleep(1.5)  # past the 1000 ms session: librdkafka re-authenticates (KIP-368) on the same connection
    producer.produce(topic, b"after")
    assert producer.flush(20) == 0
    sentinel = _logged_in(secure.address("SASL_PLAINTEXT"), "alice", "alice-secret")
    secure.broker.wait_for_output(f"from {sentinel.sock.getsockname()[0]}:{sentinel.sock.getsockname()[1]}")
    assert "(client id 'reauth-client'): its SASL session expired" not in secure.broker.output()


def test_a_garbage_tls_handshake_is_logged_and_closed(secure):
    for garbage in (b"\x16\x03\x01\x00\x10" + b"not a client hello" * 3, _frame(_header(18, 0))):
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as sock:
            sock.sendall(garbage)  # a damaged ClientHello, then plaintext Kafka on the TLS port
            assert _read_until_closed(sock) < 4096  # at most a TLS alert, then the broker closes
    secure.broker.wait_for_output("on listener SSL: TLS handshake failed")
    context = ssl.create_default_context(cafile=str(secure.ca))
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as sock:
        with context.wrap_socket(sock, server_hostname="localhost") as tls:
            tls.sendall(_frame(_header(18, 0)))
            assert struct.unpack(">i", tls.recv(4))[0] > 0  # still serving


# -- delegation tokens (no client library sends these here: written by hand) --------------------------

DELEGATION_TOKEN_NOT_FOUND = 62
DELEGATION_TOKEN_OWNER_MISMATCH = 63
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
INVALID_PRINCIPAL_TYPE = 67


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.position)
        self.position += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        length = self.take(">h")
        text = self.data[self.position:self.position + length].decode()
        self.position += length
        return text

    def blob(self) -> bytes:
        length = self.take(">i")
        data = self.data[self.position:self.position + length]
        self.position += length
        return data


def create_token(raw: Raw, renewers=(), max_lifetime_ms: int = -1) -> tuple[int, str, str, bytes]:
    body = struct.pack(">i", len(renewers)) + b"".join(_string(t) + _string(n) for t, n in renewers)
    raw.send(_header(38, 1) + body + struct.pack(">q", max_lifetime_ms))
    reader = _Reader(raw.receive()[4:])
    error = reader.take(">h")
    owner = f"{reader.string()}:{reader.string()}"
    reader.take(">qqq")
    return error, owner, reader.string(), reader.blob()


def change_token(raw: Raw, api_key: int, token_hmac: bytes, period_ms: int) -> tuple[int, int]:
    raw.send(_header(api_key, 1) + _bytes(token_hmac) + struct.pack(">q", period_ms))
    return _Reader(raw.receive()[4:]).take(">hq")


def describe_tokens(raw: Raw) -> tuple[int, list[tuple[str, str, list[str]]]]:
    raw.send(_header(41, 1) + struct.pack(">i", -1))
    reader = _Reader(raw.receive()[4:])
    error, count = reader.take(">h"), reader.take(">i")
    tokens = []
    for _ in range(count):
        owner = f"{reader.string()}:{reader.string()}"
        reader.take(">qqq")
        token_id = reader.string()
        reader.blob()
        renewers = [f"{reader.string()}:{reader.string()}" for _ in range(reader.take(">i"))]
        tokens.append((owner, token_id, renewers))
    return error, tokens


def _logged_in(address: str, user: str, password: str) -> Raw:
    raw = Raw(address)
    raw.handshake("PLAIN")
    assert raw.authenticate(f"\x00{user}\x00{password}".encode())[0] == 0
    return raw


def _token_login(secure, token_id: str, token_hmac: bytes) -> tuple[Raw, int]:
    from kafkacompat.security.scram import ScramClient

    raw = Raw(secure.address("SASL_PLAINTEXT"))
    raw.handshake("SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", token_id, base64.b64encode(token_hmac).decode(), token=True)
    error, _, server_first, _ = raw.authenticate(client.first())
    if error:
        return raw, error
    error, _, server_final, _ = raw.authenticate(client.final(server_first))
    if not error:
        client.verify(server_final)
    return raw, error


def test_delegation_tokens_are_created_used_renewed_and_expired(secure):
    assert create_token(Raw(secure.address("PLAINTEXT")))[0] == DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    alice = _logged_in(secure.address("SASL_PLAINTEXT"), "alice", "alice-secret")
    assert create_token(alice, [("Group", "ops")])[0] == INVALID_PRINCIPAL_TYPE
    error, owner, token_id, token_hmac = create_token(alice, [("User", "broker")])
    assert (error, owner) == (0, "User:alice") and token_id and len(token_hmac) == 64
    assert describe_tokens(alice) == (0, [("User:alice", token_id, ["User:broker"])])

    # SCRAM with tokenauth=true: the connection acts as the token's owner, and may not create tokens
    with_token, error = _token_login(secure, token_id, token_hmac)
    assert error == 0
    secure.broker.wait_for_output("as User:alice with SASL mechanism SCRAM-SHA-256")
    assert create_token(with_token)[0] == DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert _token_login(secure, token_id, b"\x00" * 64)[1] == SASL_AUTHENTICATION_FAILED

    # renewed by its owner or a renewer, not by others; expired at once with a negative period
    error, expiry = change_token(alice, 39, token_hmac, 60_000)
    assert error == 0 and abs(expiry - time.time() * 1000 - 60_000) < 30_000
    renewer = _logged_in(secure.address("SASL_PLAINTEXT"), "broker", "broker-secret")
    assert change_token(renewer, 39, token_hmac, 60_000)[0] == 0
    other, _, other_id, other_hmac = create_token(renewer)
    assert other == 0 and change_token(alice, 39, other_hmac, 1000)[0] == DELEGATION_TOKEN_OWNER_MISMATCH
    assert change_token(alice, 40, token_hmac, -1)[0] == 0
    assert change_token(alice, 39, token_hmac, 1000)[0] == DELEGATION_TOKEN_NOT_FOUND
    assert _token_login(secure, token_id, token_hmac)[1] == SASL_AUTHENTICATION_FAILED
    assert [t[1] for t in describe_tokens(alice)[1]] == [other_id]
    raw = (secure.broker.data_dir / "metadata-store.json").read_text()
    assert f"/delegation_token/tokens/{other_id}" in raw and "User%3Abroker" in raw


# -- Sarama (Go): SASL/PLAIN with the v0 handshake and raw tokens -------------------------------------

@pytest.mark.parametrize("listener", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_sarama(secure, sarama_cli, listener):  # noqa: F811 (the fixture)
    extra = {}
    if "SSL" in PROTOCOLS[listener]:
        extra["tlsCa"] = str(secure.ca)
    if "SASL" in PROTOCOLS[listener]:
        extra.update(saslUser="alice", saslPassword="alice-secret")
    topic = _topic("sarama")
    sarama_produce(sarama_cli, None, topic, [Msg(b"from sarama")], bootstrap=secure.address(listener), **extra)
    (result,) = run_cli(sarama_cli, "consume", {
        "brokers": [secure.address(listener)], "version": "2.2.0", "topic": topic, "partition": 0, "offset": -2,
        "count": 1, "timeoutMs": 20000, "fetchDefault": 0, **extra})
    assert "error" not in result and result["errors"] == [], result
    assert [base64.b64decode(m["value"]) for m in result["messages"]] == [b"from sarama"]


@pytest.mark.parametrize("store_type", ["JKS", "PKCS12"])
def test_a_broker_with_java_key_stores_serves_mtls(tmp_path, store_type):
    """server.properties as a Kafka user writes it: JKS (Kafka's default type) or PKCS12 key and
    trust stores made with keytool, ssl.client.auth=required; a confluent-kafka client with a
    client certificate produces and consumes over it."""
    from kafkacompat.testing.certs import java_key_store, java_trust_store

    authority = CertificateAuthority(tmp_path / "certs")
    server = authority.issue("server", "/CN=localhost", server=True)
    client = authority.issue("client", "/O=Example/CN=bob")
    key_store = java_key_store(server, authority, store_type, "store-secret")
    trust_store = java_trust_store([authority.cert], tmp_path / f"trust.{store_type.lower()}", store_type,
                                   "trust-secret")
    ssl_port, plain_port = distinct_free_ports(2)
    properties = tmp_path / "server.properties"
    properties.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port}",
        f"ssl.keystore.type={store_type}", f"ssl.keystore.location={key_store}",
        "ssl.keystore.password=store-secret", "ssl.key.password=store-secret",
        f"ssl.truststore.type={store_type}", f"ssl.truststore.location={trust_store}",
        "ssl.truststore.password=trust-secret", "ssl.client.auth=required",
    ]) + "\n")
    broker = BrokerProcess(tmp_path / "data", port=plain_port, extra_args=["--config", str(properties)]).start()
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(authority.cert), "ssl.certificate.location": str(client.cert),
                "ssl.key.location": str(client.key), "socket.timeout.ms": 10000}
        topic = _topic(f"jks-{store_type.lower()}")
        assert confluent_roundtrip(conf, topic) == [f"m{i}".encode() * 200 for i in range(3)]
        assert "store-secret" not in broker.output() and "trust-secret" not in broker.output()
    finally:
        broker.kill()
