"""The listener's TLS context from Kafka's ssl.* keys, proven with real handshakes in memory
(ssl.MemoryBIO) against certificates made by openssl for the test: PEM key stores from a file or
inline with an encrypted PKCS#8 key, ssl.client.auth, ssl.enabled.protocols, ssl.cipher.suites,
the principal of a client certificate, and start-up errors that say what to fix."""

from __future__ import annotations

import ssl

import pytest

from kafkacompat.config import BrokerConfig, StartupError
from kafkacompat.security.principal import ANONYMOUS, KafkaPrincipal
from kafkacompat.security.principal_mapping import PrincipalMapper
from kafkacompat.security.tls import certificate_principal, server_context
from kafkacompat.testing.certs import CertificateAuthority, java_key_store, java_trust_store


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    authority = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    server = authority.issue("server", "/CN=localhost", server=True, key_password="kp")
    client = authority.issue("client", "/O=Example/CN=svc")
    return authority, server, client


def _config(authority, server, **settings) -> BrokerConfig:
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(server.keystore()), "ssl.key.password": "kp",
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(authority.cert)}
    base.update(settings)
    return BrokerConfig.load(overrides={k: v for k, v in base.items() if v is not None})


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext):
    """Run a TLS handshake between the two contexts in memory; the server's SSLObject, or the
    error either side raised."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, side, out, peer_in in (("client", client, c_out, s_in), ("server", server, s_out, c_in)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                peer_in.write(data)
        if all(done.values()):
            return server
    raise AssertionError("the handshake did not finish")


def _client(authority, identity=None, **versions) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(authority.cert))
    if identity is not None:
        context.load_cert_chain(str(identity.cert), str(identity.key))
    for attribute, value in versions.items():
        setattr(context, attribute, value)
    return context


def test_encrypted_pem_key_store_and_no_client_auth(pki):
    authority, server, _ = pki
    obj = _handshake(server_context(_config(authority, server), "SSL"), _client(authority))
    assert certificate_principal(obj, PrincipalMapper("DEFAULT")) is ANONYMOUS


def test_inline_key_store_as_one_line_each(pki):
    authority, server, _ = pki
    one_line = lambda path: " ".join(path.read_text().split("\n"))  # noqa: E731 (as a properties file has it)
    config = _config(authority, server, **{"ssl.keystore.location": None,
                                          "ssl.keystore.certificate.chain": one_line(server.cert),
                                          "ssl.keystore.key": one_line(server.key)})
    _handshake(server_context(config, "SSL"), _client(authority))


def test_required_client_auth_gives_the_mapped_principal(pki):
    authority, server, client = pki
    context = server_context(_config(authority, server, **{"ssl.client.auth": "required"}), "SSL")
    obj = _handshake(context, _client(authority, client))
    assert certificate_principal(obj, PrincipalMapper(r"RULE:^CN=([^,]+),O=.*$/$1/U")) == KafkaPrincipal("User", "SVC")
    with pytest.raises(ssl.SSLError):
        _handshake(context, _client(authority))


def test_requested_client_auth_allows_clients_without_a_certificate(pki):
    authority, server, client = pki
    context = server_context(_config(authority, server, **{"ssl.client.auth": "requested"}), "SSL")
    assert certificate_principal(_handshake(context, _client(authority)), PrincipalMapper(None)) is ANONYMOUS
    obj = _handshake(context, _client(authority, client))
    assert certificate_principal(obj, PrincipalMapper(None)) == KafkaPrincipal("User", "CN=svc,O=Example")


def test_enabled_protocols_and_cipher_suites(pki):
    authority, server, _ = pki
    only_13 = server_context(_config(authority, server, **{"ssl.enabled.protocols": "TLSv1.3"}), "SSL")
    with pytest.raises(ssl.SSLError):
        _handshake(only_13, _client(authority, maximum_version=ssl.TLSVersion.TLSv1_2))
    suite = server_context(_config(authority, server, **{"ssl.enabled.protocols": "TLSv1.2",
                                                       "ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"}), "SSL")
    assert _handshake(suite, _client(authority)).cipher()[0] == "ECDHE-RSA-AES128-GCM-SHA256"


@pytest.mark.parametrize("settings, says", [
    ({"ssl.keystore.location": None}, "has no certificate"),
    ({"ssl.keystore.type": "JKS"}, "cannot read the JKS key store .*it is not a JKS store"),
    ({"ssl.keystore.type": "JCEKS"}, "reads JKS, PKCS12 and PEM key stores"),
    ({"ssl.key.password": "wrong"}, "cannot load the key store"),
    ({"ssl.client.auth": "required", "ssl.truststore.location": None}, "has no trust store"),
    ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
    ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "ssl.cipher.suites"),
])
def test_unusable_settings_stop_the_start_with_a_reason(pki, settings, says):
    authority, server, _ = pki
    with pytest.raises(StartupError, match=says):
        server_context(_config(authority, server, **settings), "SSL")


def test_sasl_ssl_listeners_take_client_auth_only_from_their_prefix(pki, caplog):
    authority, server, client = pki
    config = _config(authority, server, **{"listeners": "SASL_SSL://127.0.0.1:0", "ssl.client.auth": "required"})
    assert server_context(config, "SASL_SSL", "SASL_SSL").verify_mode == ssl.CERT_NONE
    assert "listener.name.sasl_ssl.ssl.client.auth" in caplog.text
    prefixed = _config(authority, server, **{"listeners": "SASL_SSL://127.0.0.1:0",
                                             "listener.name.sasl_ssl.ssl.client.auth": "required"})
    assert server_context(prefixed, "SASL_SSL", "SASL_SSL").verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("store_type", ["JKS", "PKCS12"])
def test_java_key_and_trust_stores_made_by_keytool(pki, tmp_path, store_type):
    """Kafka's default store type is JKS; keytool's is PKCS12. Both, made by Java's keytool, serve
    the listener's certificate and its trust store verifies client certificates."""
    authority, server, client = pki
    key_store = java_key_store(server, authority, store_type, "store-secret", identity_key_password="kp",
                               key_password="key-secret" if store_type == "JKS" else None)
    trust_store = java_trust_store([authority.cert], tmp_path / f"trust.{store_type.lower()}", store_type, "trust-secret")
    context = server_context(_config(authority, server, **{
        "ssl.keystore.type": store_type, "ssl.keystore.location": str(key_store),
        "ssl.keystore.password": "store-secret",
        "ssl.key.password": "key-secret" if store_type == "JKS" else "store-secret",
        "ssl.truststore.type": store_type, "ssl.truststore.location": str(trust_store),
        "ssl.truststore.password": "trust-secret", "ssl.client.auth": "required"}), "SSL")
    server_side = _handshake(context, _client(authority, client))
    assert certificate_principal(server_side, PrincipalMapper("DEFAULT")) == KafkaPrincipal("User", "CN=svc,O=Example")
    with pytest.raises(ssl.SSLError):
        _handshake(context, _client(authority))  # ssl.client.auth=required, no client certificate


def test_a_jks_key_password_defaults_to_the_store_password(pki):
    authority, server, client = pki
    key_store = java_key_store(server, authority, "JKS", "same-secret", identity_key_password="kp")
    context = server_context(_config(authority, server, **{
        "ssl.keystore.type": "JKS", "ssl.keystore.location": str(key_store),
        "ssl.keystore.password": "same-secret", "ssl.key.password": None}), "SSL")
    assert _handshake(context, _client(authority)).version()


@pytest.mark.parametrize("store_type, settings, says", [
    ("JKS", {"ssl.keystore.password": "wrong"}, "integrity check failed: the store password is wrong"),
    ("JKS", {"ssl.key.password": "wrong"}, "does not open with the key password"),
    ("PKCS12", {"ssl.keystore.password": "wrong"}, "the store password is wrong"),
    ("PKCS12", {"ssl.keystore.location": "/nonexistent/store.p12"}, "cannot read the PKCS12 key store"),
])
def test_unreadable_java_key_stores_say_why(pki, store_type, settings, says):
    authority, server, _ = pki
    key_store = java_key_store(server, authority, store_type, "store-secret", identity_key_password="kp",
                               key_password="key-secret" if store_type == "JKS" else None)
    base = {"ssl.keystore.type": store_type, "ssl.keystore.location": str(key_store),
            "ssl.keystore.password": "store-secret",
            "ssl.key.password": "key-secret" if store_type == "JKS" else "store-secret"}
    base.update(settings)
    with pytest.raises(StartupError, match=says):
        server_context(_config(authority, server, **base), "SSL")
