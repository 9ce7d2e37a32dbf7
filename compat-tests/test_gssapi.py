"""SASL GSSAPI (Kerberos) against a real MIT KDC on loopback (k5test builds a throwaway realm
with Debian's krb5-kdc) and one broker process: kafka-python (python-gssapi) and kcat
(librdkafka with Cyrus SASL's GSSAPI plugin) produce and consume; a hand-written client with
python-gssapi drives the SaslAuthenticate and v0 raw-token exchanges, re-authentication and
the failures; the principal is User:<short name> for the ACLs."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

import gssapi  # noqa: E402  (scripts/test.sh installs it, with Debian's Kerberos packages)
import k5test  # noqa: E402

from kafkacompat.testing.certs import CertificateAuthority  # noqa: E402
from kafkacompat.testing.process import BrokerProcess, distinct_free_ports  # noqa: E402

pytest.register_assert_rewrite("clients")
from clients import first_produce_error  # noqa: E402
from test_security import Raw, _frame, _header  # noqa: E402

HOST = "127.0.0.1"
SERVICE = "kafka"
SASL_AUTHENTICATION_FAILED = 58
TOPIC_AUTHORIZATION_FAILED = 29
TIMEOUT = 20
REAUTH_MS = 3000


class Kerberized:
    def __init__(self, realm, broker: BrokerProcess, ports: dict[str, int], bob_ccache: str, ca: Path) -> None:
        self.realm, self.broker, self.bob_ccache, self.ca = realm, broker, bob_ccache, ca
        self.sasl_port, self.reauth_port, self.ssl_port = ports["SASL_PLAINTEXT"], ports["REAUTH"], ports["SASL_SSL"]

    @property
    def sasl_address(self) -> str:
        return f"{HOST}:{self.sasl_port}"


@pytest.fixture(scope="module")
def kerberized(tmp_path_factory):
    base = tmp_path_factory.mktemp("gssapi")
    kdc_port, sasl_port, reauth_port, ssl_port, broker_port = distinct_free_ports(5)
    authority = CertificateAuthority(base / "certs")
    server = authority.issue("server", f"/CN={HOST}", server=True)
    with realm_on_loopback(kdc_port) as realm:
        ports = {"SASL_PLAINTEXT": sasl_port, "REAUTH": reauth_port, "SASL_SSL": ssl_port}
        yield from _kerberized_broker(base, realm, authority, server, ports, broker_port)


@contextlib.contextmanager
def realm_on_loopback(kdc_port: int):
    """k5test's realm KRBTEST.COM (user@KRBTEST.COM kinit'ed), its KDC on loopback, host names
    taken as given (no DNS); its KRB5_CONFIG, KRB5CCNAME... in the environment of the clients
    and the brokers started meanwhile."""
    realm = k5test.K5Realm(portbase=kdc_port, create_host=False, krb5_conf={
        "libdefaults": {"rdns": "false", "dns_canonicalize_hostname": "false", "udp_preference_limit": "1"},
        "realms": {"$realm": {"kdc": f"{HOST}:$port0"}},
    })
    try:
        with pytest.MonkeyPatch.context() as env:
            for key, value in realm.env.items():
                env.setenv(key, value)
            yield realm
    finally:
        realm.stop()


def service_keytab(realm, path: Path) -> str:
    """kafka/127.0.0.1's keys in ``path``: the principal."""
    principal = f"{SERVICE}/{HOST}@{realm.realm}"
    realm.addprinc(principal)
    realm.extract_keytab(principal, str(path))
    return principal


def krb5_jaas(keytab: Path | str, principal: str) -> str:
    return ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
            f'keyTab="{keytab}" principal="{principal}";')


def _kerberized_broker(base: Path, realm, authority: CertificateAuthority, server, ports: dict[str, int],
                       broker_port: int):
    sasl_port, reauth_port, ssl_port = ports["SASL_PLAINTEXT"], ports["REAUTH"], ports["SASL_SSL"]
    keytab = base / "kafka.keytab"
    service_principal = service_keytab(realm, keytab)
    realm.addprinc(f"other/{HOST}@{realm.realm}")   # a service the broker has no key for
    realm.addprinc(f"bob@{realm.realm}", "bob-password")
    bob_ccache = str(base / "bob.ccache")
    realm.kinit(f"bob@{realm.realm}", "bob-password", env=dict(realm.env, KRB5CCNAME=bob_ccache))
    jaas = krb5_jaas(keytab, service_principal)
    properties = base / "server.properties"
    properties.write_text("\n".join([
        f"listeners=PLAINTEXT://{HOST}:0,SASL_PLAINTEXT://{HOST}:{sasl_port},REAUTH://{HOST}:{reauth_port},"
        f"SASL_SSL://{HOST}:{ssl_port}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={server.keystore()}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={authority.cert}",
        "sasl.enabled.mechanisms=GSSAPI",
        f"sasl.kerberos.service.name={SERVICE}",
        f"listener.name.sasl_plaintext.gssapi.sasl.jaas.config={jaas}",
        f"sasl.jaas.config={jaas}",
        # bob@KRBTEST.COM is User:robert, everyone else in the realm their first component
        rf"sasl.kerberos.principal.to.local.rules=RULE:[1:$1@$0](bob@KRBTEST\.COM)s/.*/robert/,DEFAULT",
        # 3 s: kafka-python re-authenticates at 85-95% of it, a margin a busy machine keeps
        f"listener.name.reauth.gssapi.connections.max.reauth.ms={REAUTH_MS}",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        "super.users=User:ANONYMOUS;User:user",
        "allow.everyone.if.no.acl.found=false",
        "group.initial.rebalance.delay.ms=0",
        "connection.failed.authentication.delay.ms=50",
    ]) + "\n")
    broker = BrokerProcess(base / "data", port=broker_port, extra_args=["--config", str(properties)]).start()
    try:
        yield Kerberized(realm, broker, ports, bob_ccache, authority.cert)
    finally:
        broker.kill()


def _topic(name: str) -> str:
    return f"krb-{name}-{time.monotonic_ns() % 10**9}"


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kafka_python_produces_and_consumes(kerberized, protocol):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic("kafka-python")
    port = kerberized.ssl_port if protocol == "SASL_SSL" else kerberized.sasl_port
    conf = {"bootstrap_servers": f"{HOST}:{port}", "security_protocol": protocol,
            "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": SERVICE}
    if protocol == "SASL_SSL":
        conf["ssl_cafile"] = str(kerberized.ca)
    producer = KafkaProducer(**conf)
    producer.send(topic, b"kerberos").get(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(**conf)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    records: list = []
    deadline = time.monotonic() + TIMEOUT
    while not records and time.monotonic() < deadline:
        records = [r.value for batch in consumer.poll(timeout_ms=1000).values() for r in batch]
    consumer.close()
    assert records == [b"kerberos"]
    kerberized.broker.wait_for_output("as User:user with SASL mechanism GSSAPI")


def _kcat(kerberized, *args: str, ccache: str | None = None, service: str = SERVICE, tls: bool = False, **kwargs):
    env = dict(os.environ, KRB5CCNAME=ccache or kerberized.realm.env["KRB5CCNAME"])
    where = (["-b", f"{HOST}:{kerberized.ssl_port}", "-X", "security.protocol=SASL_SSL", "-X",
              f"ssl.ca.location={kerberized.ca}"] if tls
             else ["-b", kerberized.sasl_address, "-X", "security.protocol=SASL_PLAINTEXT"])
    return subprocess.run(["kcat", *where,
                           "-X", "sasl.mechanisms=GSSAPI", "-X", f"sasl.kerberos.service.name={service}",
                           "-X", "sasl.kerberos.min.time.before.relogin=0", *args],
                          env=env, capture_output=True, text=True, timeout=60, **kwargs)


def _kcat_has_gssapi() -> bool:
    listed = subprocess.run(["kcat", "-X", "list"], capture_output=True, text=True).stdout
    return any(line.startswith("builtin.features") and "sasl_gssapi" in line for line in listed.splitlines())


@pytest.mark.parametrize("tls", [False, True], ids=["SASL_PLAINTEXT", "SASL_SSL"])
def test_kcat_produces_and_consumes(kerberized, tls):
    assert _kcat_has_gssapi()
    topic = _topic("kcat")
    done = _kcat(kerberized, "-P", "-t", topic, "-p", "0", input="from kcat\n", tls=tls)
    assert done.returncode == 0, done.stderr
    out = _kcat(kerberized, "-C", "-t", topic, "-p", "0", "-e", "-o", "beginning", tls=tls)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "from kcat"


def test_an_acl_on_the_short_name_is_enforced(kerberized):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic
    from confluent_kafka.admin import ResourcePatternType, ResourceType

    admin = AdminClient({"bootstrap.servers": kerberized.broker.bootstrap})
    topic = _topic("acl")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT)
    # bob (User:robert through the RULE) has no ACL yet
    refused = _kcat(kerberized, "-P", "-t", topic, "-p", "0", ccache=kerberized.bob_ccache, input="bob\n")
    assert refused.returncode != 0 and "authoriz" in refused.stderr.lower(), refused.stderr
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:robert", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(timeout=TIMEOUT)
    allowed = _kcat(kerberized, "-P", "-t", topic, "-p", "0", ccache=kerberized.bob_ccache, input="bob\n")
    assert allowed.returncode == 0, allowed.stderr
    kerberized.broker.wait_for_output("as User:robert with SASL mechanism GSSAPI")
    # a PLAINTEXT client is User:ANONYMOUS, here a super user
    assert first_produce_error({"bootstrap.servers": kerberized.broker.bootstrap}, topic) is None


# -- a client written by hand with python-gssapi --------------------------------------------------

class GssClient:
    """RFC 4752's client side: context tokens, then the security-layer reply."""

    def __init__(self, service: str = SERVICE, ccache: str | None = None) -> None:
        name = gssapi.Name(f"{service}@{HOST}", gssapi.NameType.hostbased_service)
        store = {"ccache": ccache} if ccache else None
        creds = gssapi.Credentials(usage="initiate", store=store) if store else None
        self.context = gssapi.SecurityContext(name=name, usage="initiate", creds=creds,
                                              flags=gssapi.RequirementFlag.mutual_authentication)
        self.done = False

    def first(self) -> bytes:
        return self.context.step()

    def answer(self, token: bytes) -> bytes:
        if not self.context.complete:
            return self.context.step(token) or b""
        offer = self.context.unwrap(token).message
        assert offer[0] & 1, offer   # "no security layer" is offered
        self.done = True
        return self.context.wrap(b"\x01" + offer[1:4], False).message


def _authenticate(raw: Raw, client: GssClient) -> tuple[int, str | None, int]:
    """SaslAuthenticate v1 rounds until the exchange ends: (error, message, session lifetime)."""
    token = client.first()
    while True:
        error, message, response, lifetime = raw.authenticate(token)
        if error or client.done:
            return error, message, lifetime
        token = client.answer(response)


def test_sasl_authenticate_and_reauthentication(kerberized):
    raw = Raw(f"{HOST}:{kerberized.reauth_port}")
    assert raw.handshake("GSSAPI")[0] == 0
    assert _authenticate(raw, GssClient()) == (0, None, REAUTH_MS)
    time.sleep(REAUTH_MS / 1000 + 0.1)   # the session runs out: re-authenticating keeps the connection
    assert raw.handshake("GSSAPI")[0] == 0
    assert _authenticate(raw, GssClient())[0] == 0
    assert raw.metadata()[:4] == struct.pack(">i", 1)
    # a re-authentication may not change the principal
    assert raw.handshake("GSSAPI")[0] == 0
    error, message, _ = _authenticate(raw, GssClient(ccache=kerberized.bob_ccache))
    assert error == SASL_AUTHENTICATION_FAILED
    assert message == "Cannot change principals during re-authentication from User:user: User:robert"


def test_v0_handshake_then_raw_tokens(kerberized):
    raw = Raw(kerberized.sasl_address)
    assert raw.handshake("GSSAPI", version=0)[0] == 0
    client = GssClient()
    token = client.first()
    while not client.done:
        raw.sock.sendall(_frame(token))
        token = client.answer(raw.receive())
    raw.sock.sendall(_frame(token))
    assert raw.receive() == b""
    assert raw.metadata()[:4] == struct.pack(">i", 1)


def test_a_ticket_for_another_service_is_refused(kerberized):
    raw = Raw(kerberized.sasl_address)
    assert raw.handshake("GSSAPI")[0] == 0
    error, message, _ = _authenticate(raw, GssClient(service="other"))
    assert error == SASL_AUTHENTICATION_FAILED
    assert message.startswith("Authentication failed during authentication due to invalid credentials with "
                              "SASL mechanism GSSAPI: ")
    assert "sasl.kerberos.service.name" in message
    assert raw.closed()
    kerberized.broker.wait_for_output("Failed authentication of")


def test_a_garbage_token_is_refused(kerberized):
    raw = Raw(kerberized.sasl_address)
    assert raw.handshake("GSSAPI")[0] == 0
    error, message, _, _ = raw.authenticate(b"\x60\x03not a kerberos token")
    assert error == SASL_AUTHENTICATION_FAILED and "GSSAPI" in message
    assert raw.closed()


def test_kcat_with_a_ticket_for_another_service_is_refused(kerberized):
    before = kerberized.broker.output().count("The ticket isn't for us")
    done = _kcat(kerberized, "-L", "-m", "5", service="other")
    assert done.returncode != 0
    assert "SASL authentication error" in done.stderr and "GSSAPI" in done.stderr, done.stderr
    assert kerberized.broker.output().count("The ticket isn't for us") > before


def test_aiokafka_produces_and_consumes(kerberized):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = _topic("aiokafka")
    conf = {"bootstrap_servers": kerberized.sasl_address, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": SERVICE}

    async def roundtrip() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            batches = await consumer.getmany(timeout_ms=TIMEOUT * 1000, max_records=1)
        finally:
            await consumer.stop()
        return [record.value for records in batches.values() for record in records]

    assert asyncio.run(asyncio.wait_for(roundtrip(), 60)) == [b"from aiokafka"]


def test_kafka_python_reauthenticates_before_its_session_runs_out(kerberized):
    """connections.max.reauth.ms on the REAUTH listener: kafka-python re-authenticates (KIP-368) on
    the connection it has; a client that did not would be closed and connect anew."""
    import re

    from kafka import KafkaProducer

    client_id = f"krb-reauth-{time.monotonic_ns() % 10**6}"
    topic = _topic("reauth")
    producer = KafkaProducer(bootstrap_servers=f"{HOST}:{kerberized.reauth_port}", security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="GSSAPI", sasl_kerberos_service_name=SERVICE, client_id=client_id)
    try:
        producer.send(topic, b"before").get(TIMEOUT)

        def connections() -> set[str]:
            return set(re.findall(rf"Authenticated connection (\d+) from \S+ \(client id '{client_id}'\)",
                                  kerberized.broker.output()))

        first = connections()
        for i in range(5):   # over three session lifetimes
            time.sleep(REAUTH_MS / 1000 * 0.7)
            producer.send(topic, f"during {i}".encode()).get(TIMEOUT)
        assert connections() == first
        assert not re.search(rf"client id '{client_id}'\): its SASL session expired", kerberized.broker.output())
    finally:
        producer.close()


# -- start-up errors -------------------------------------------------------------------------------

def _serve(tmp_path: Path, *settings: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A broker that must refuse to start: its exit status and output."""
    import sys

    (port,) = distinct_free_ports(1)
    properties = tmp_path / "server.properties"
    properties.write_text("\n".join([f"listeners=SASL_PLAINTEXT://{HOST}:{port}", "sasl.enabled.mechanisms=GSSAPI",
                                     *settings]) + "\n")
    return subprocess.run([sys.executable, "-m", "kafkacompat", "serve", "--port", "0", "--data-dir",
                           str(tmp_path / "data"), "--config", str(properties)],
                          capture_output=True, text=True, timeout=60, env=env)


SERVICE_SETTING = f"sasl.kerberos.service.name={SERVICE}"


def _jaas_setting(keytab: Path | str, principal: str) -> str:
    return f"sasl.jaas.config={krb5_jaas(keytab, principal)}"


def _keytab(kerberized) -> Path:
    return Path(kerberized.broker.data_dir).parent / "kafka.keytab"


def test_start_up_errors_say_what_to_fix(kerberized, tmp_path):
    realm = kerberized.realm.realm
    missing = _serve(tmp_path, SERVICE_SETTING, _jaas_setting(tmp_path / "nope.keytab", f"kafka/{HOST}@{realm}"))
    assert missing.returncode != 0 and "nope.keytab does not exist" in missing.stderr, missing.stderr
    no_principal = _serve(tmp_path)
    assert no_principal.returncode != 0 and "has no Kerberos principal" in no_principal.stderr
    keytab = _keytab(kerberized)
    no_service = _serve(tmp_path, _jaas_setting(keytab, f"kafka/{HOST}@{realm}"))
    assert "No serviceName defined in either JAAS or Kafka config" in no_service.stderr, no_service.stderr
    conflict = _serve(tmp_path, "sasl.kerberos.service.name=kafka",
                      _jaas_setting(keytab, f"kafka/{HOST}@{realm}").replace("required", 'required serviceName="kfk"'))
    assert "Conflicting serviceName values found in JAAS and Kafka configs" in conflict.stderr, conflict.stderr
    not_in_keytab = _serve(tmp_path, SERVICE_SETTING, _jaas_setting(keytab, f"other/{HOST}@{realm}"))
    assert f"no key for other/{HOST}@{realm} in the keytab" in not_in_keytab.stderr, not_in_keytab.stderr
    bad_rule = _serve(tmp_path, SERVICE_SETTING, _jaas_setting(keytab, f"kafka/{HOST}@{realm}"),
                      "sasl.kerberos.principal.to.local.rules=RULE:[1:$1]oops")
    assert "Invalid rule: `RULE:[1:$1]oops`" in bad_rule.stderr, bad_rule.stderr


def test_without_python_gssapi_the_broker_says_what_to_install(kerberized, tmp_path):
    # python-gssapi made unimportable for this one broker process
    blocker = tmp_path / "block"
    (blocker / "gssapi").mkdir(parents=True)
    (blocker / "gssapi" / "__init__.py").write_text("raise ImportError('No module named gssapi')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]))
    jaas = _jaas_setting(_keytab(kerberized), f"kafka/{HOST}@{kerberized.realm.realm}")
    done = _serve(tmp_path, SERVICE_SETTING, jaas, env=env)
    assert done.returncode != 0
    assert "pip install 'kafkacompat[gssapi]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def _skewed_ccache(source: str, target: Path, offset_seconds: int) -> str:
    """A copy of a ccache whose header says the KDC's clock is ``offset_seconds`` ahead (the
    time offset MIT Kerberos keeps with kdc_timesync): the client then dates its authenticators
    that far in the future, as a client with a wrong clock does."""
    data = Path(source).read_bytes()
    assert data[:2] == b"\x05\x04", "a version 4 file ccache"
    (header_length,) = struct.unpack_from(">H", data, 2)
    header = struct.pack(">HHii", 1, 8, offset_seconds, 0)   # tag 1: KDC time offset (seconds, microseconds)
    target.write_bytes(b"\x05\x04" + struct.pack(">H", len(header)) + header + data[4 + header_length:])
    return str(target)


def test_clock_skew_is_named(kerberized, tmp_path):
    # the service ticket first (the KDC would refuse a skewed request for it), then the skew
    fetched = tmp_path / "with-service-ticket.ccache"
    fetched.write_bytes(Path(kerberized.realm.env["KRB5CCNAME"]).read_bytes())
    subprocess.run(["kvno", f"{SERVICE}/{HOST}@{kerberized.realm.realm}"], check=True, capture_output=True,
                   env=dict(os.environ, KRB5CCNAME=str(fetched)), timeout=30)
    ccache = _skewed_ccache(str(fetched), tmp_path / "skewed.ccache", 3600)
    raw = Raw(kerberized.sasl_address)
    assert raw.handshake("GSSAPI")[0] == 0
    error, message, _ = _authenticate(raw, GssClient(ccache=ccache))
    assert error == SASL_AUTHENTICATION_FAILED
    assert "Clock skew too great" in message and "clocks differ" in message, message
