"""The sans-IO parts of authentication: SCRAM against RFC 7677's example exchange, PLAIN,
Kafka's unsecured OAUTHBEARER validation, JAAS text, ssl.principal.mapping.rules and the RFC 2253
names of certificates, and the SASL state machine's gate."""

from __future__ import annotations

import base64
import json
import time

import pytest
import trio

from kafkacompat.security import scram
from kafkacompat.security.authenticator import RequestBeforeAuthentication, SaslAuthenticator, SaslSettings, State
from kafkacompat.security.jaas import JaasConfigError, parse_jaas_config
from kafkacompat.security.mechanisms import AuthenticationFailed, PlainServer, UnsecuredOAuthBearerServer
from kafkacompat.security.principal import KafkaPrincipal
from kafkacompat.security.principal_mapping import NoMatchingRule, PrincipalMapper, distinguished_name

# RFC 7677 section 3
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE_TAIL = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_credential() -> scram.ScramCredential:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    return scram.credential_from_salted("sha256", scram.salted_password("sha256", b"pencil", salt, 4096), salt, 4096)


def test_scram_server_follows_rfc_7677(monkeypatch):
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda _: SERVER_NONCE_TAIL)

    async def lookup(mechanism, user, token=False):
        return _rfc_credential() if (mechanism, user) == ("SCRAM-SHA-256", "user") else None

    async def main():
        server = scram.ScramServer("SCRAM-SHA-256", lookup)
        assert await server.evaluate(CLIENT_FIRST) == SERVER_FIRST
        assert await server.evaluate(CLIENT_FINAL) == SERVER_FINAL
        assert server.complete and server.username == "user"

    trio.run(main)


def test_scram_client_follows_rfc_7677(monkeypatch):
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda _: "rOprNGfwEbeRWgbNEkqO")
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil")
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


def test_scram_unknown_user_and_wrong_password_fail_alike():
    stored = scram.new_credential("SCRAM-SHA-512", "right", 4096)

    async def lookup(mechanism, user, token=False):
        return stored if user == "known" else None

    async def attempt(user: str) -> tuple[bytes, str]:
        server = scram.ScramServer("SCRAM-SHA-512", lookup)
        client = scram.ScramClient("SCRAM-SHA-512", user, "wrong")
        server_first = await server.evaluate(client.first())
        with pytest.raises(scram.ScramError) as caught:
            await server.evaluate(client.final(server_first))
        return server_first.split(b",")[2], str(caught.value)

    known, unknown = trio.run(attempt, "known"), trio.run(attempt, "unknown")
    assert known == (b"i=4096", "invalid credentials") == unknown


def test_scram_credential_text_is_kafkas():
    credential = scram.new_credential("SCRAM-SHA-256", "pw", 8192)
    text = credential.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_text(text) == credential


def test_plain_checks_users_and_authorization_ids():
    async def main():
        assert await PlainServer({"alice": "pw"}).evaluate(b"\x00alice\x00pw") == b""
        server = PlainServer({"alice": "pw"})
        await server.evaluate(b"alice\x00alice\x00pw")
        assert server.complete and server.username == "alice"
        messages = []
        for token in (b"\x00alice\x00nope", b"\x00bob\x00pw", b"carol\x00alice\x00pw", b"\x00alice", b"\x00\x00pw"):
            with pytest.raises(AuthenticationFailed) as caught:
                await PlainServer({"alice": "pw"}).evaluate(token)
            messages.append(caught.value.client_message)
        assert messages[0] == messages[1] == "Authentication failed: Invalid username or password"
        assert "authorization id" in messages[2] and "invalid credentials" in messages[3]
        assert messages[4] == "Authentication failed: username not specified"

    trio.run(main)


def _jws(claims: dict, header: dict | None = None) -> str:
    encode = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{encode(header or {'alg': 'none'})}.{encode(claims)}."


def _bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_unsecured_oauthbearer_accepts_a_valid_token_and_reports_its_lifetime():
    async def main():
        server = UnsecuredOAuthBearerServer()
        expires = time.time() + 60
        assert await server.evaluate(_bearer(_jws({"sub": "svc", "exp": expires, "iat": time.time()}))) == b""
        assert server.complete and server.username == "svc"
        assert server.credential_lifetime_ms == int(expires * 1000)

    trio.run(main)


@pytest.mark.parametrize("token", [
    _jws({"sub": "svc", "exp": 1}),
    _jws({"sub": "svc"}),
    _jws({"exp": 4102444800}),
    _jws({"sub": "svc", "exp": 4102444800}, {"alg": "HS256"}),
    "not-a-jws",
])
def test_unsecured_oauthbearer_refuses_bad_tokens_with_the_error_challenge(token):
    async def main():
        server = UnsecuredOAuthBearerServer()
        assert json.loads(await server.evaluate(_bearer(token))) == {"status": "invalid_token"}
        with pytest.raises(AuthenticationFailed):
            await server.evaluate(b"\x01")
        assert not server.complete

    trio.run(main)


def test_jaas_config_parsing():
    (module,) = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="admin" password="a;b \\"q\\"" user_admin="x";')
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": 'a;b "q"', "user_admin": "x"}
    for bad in ("", "Module required user=\"x\"", "Module sometimes;", "Module required user;"):
        with pytest.raises(JaasConfigError):
            parse_jaas_config(bad)


def test_principal_mapping_rules_as_kafka():
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                             r"RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                             r"RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("OU=x,cn=abc,O=y") == "ABC"
    assert PrincipalMapper("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper(r"RULE:^CN=admin$/root/").name("CN=other")
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:broken")


def test_certificate_subjects_read_as_rfc_2253():
    certificate = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                               (("organizationalUnitName", "Eng"), ("commonName", "a+b")),
                               (("emailAddress", "a@x.io"),))}
    assert distinguished_name(certificate) == \
        "1.2.840.113549.1.9.1=#16066140782e696f,OU=Eng+CN=a\\+b,O=Acme\\, Inc,C=US"


def _authenticator(**settings) -> tuple[SaslAuthenticator, list]:
    principals: list = []
    authenticator = SaslAuthenticator(SaslSettings("SASL", ["PLAIN"], plain_users={"alice": "pw", "bob": "pw"},
                                                   failure_delay_ms=0, **settings),
                                      lambda: "test connection", principals.append)
    return authenticator, principals


def test_the_gate_admits_what_each_state_allows():
    authenticator, principals = _authenticator()
    authenticator.admit(18, "ApiVersions")
    with pytest.raises(RequestBeforeAuthentication, match="Metadata during SASL handshake"):
        authenticator.admit(3, "Metadata")
    authenticator.admit(17, "SaslHandshake")
    assert authenticator.handshake("PLAIN", 1).error is None
    with pytest.raises(RequestBeforeAuthentication, match="during SASL authentication"):
        authenticator.admit(3, "Metadata")
    result = trio.run(authenticator.authenticate, b"\x00alice\x00pw", 1)
    assert (result.error, result.session_lifetime_ms) == (None, 0)
    assert principals == [KafkaPrincipal("User", "alice")] and authenticator.state is State.COMPLETE
    authenticator.admit(3, "Metadata")


def test_reauthentication_keeps_mechanism_and_principal():
    authenticator, _ = _authenticator(max_reauth_ms={"PLAIN": 60000})
    authenticator.handshake("PLAIN", 1)
    assert trio.run(authenticator.authenticate, b"\x00alice\x00pw", 2).session_lifetime_ms == 60000
    authenticator.admit(17, "SaslHandshake")
    authenticator.handshake("PLAIN", 1)
    result = trio.run(authenticator.authenticate, b"\x00bob\x00pw", 2)
    assert result.error == "SASL_AUTHENTICATION_FAILED" and "Cannot change principals" in result.message
    assert authenticator.close_after_response


def test_unsupported_mechanism_closes_after_the_answer():
    authenticator, _ = _authenticator()
    result = authenticator.handshake("GSSAPI", 1)
    assert (result.error, result.mechanisms) == ("UNSUPPORTED_SASL_MECHANISM", ["PLAIN"])
    assert authenticator.close_after_response
