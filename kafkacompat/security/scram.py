"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server's exchange.

Credentials are stored as Kafka stores them (ScramCredentialUtils), one entry per mechanism in a
user's config node ``/config/users/<sanitized name>`` of the metadata store (the single node's
embedded store or ZooKeeper)::

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

An unknown user goes through the same exchange as a known one with a wrong password, with a
made-up salt that is stable per user name: the answer, its timing and its message never tell
whether the user exists (Kafka's own server fails an unknown user at the first message).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# ScramMechanism ids of Describe/AlterUserScramCredentials
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_FAKE_SALT_KEY = secrets.token_bytes(32)  # per process: makes unknown users' salts stable, unguessable


class ScramError(Exception):
    """The client's messages are malformed or its proof is wrong; the text is safe to log."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    owner: str | None = None  # a delegation token's owner principal ("User:alice"); never stored

    def to_text(self) -> str:
        encode = lambda data: base64.b64encode(data).decode()  # noqa: E731
        return (f"salt={encode(self.salt)},stored_key={encode(self.stored_key)},"
                f"server_key={encode(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        fields = dict(item.split("=", 1) for item in text.split(","))
        return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                   base64.b64decode(fields["server_key"]), int(fields["iterations"]))


def salted_password(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def credential_from_salted(hash_name: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    return ScramCredential(salt, hashlib.new(hash_name, client_key).digest(), server_key, iterations)


def new_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    hash_name = MECHANISMS[mechanism]
    salt = os.urandom(32 if hash_name == "sha256" else 64)
    return credential_from_salted(hash_name, salted_password(hash_name, password.encode(), salt, iterations),
                                  salt, iterations)


def _fake_credential(mechanism: str, username: str) -> ScramCredential:
    hash_name = MECHANISMS[mechanism]
    salt = hmac.digest(_FAKE_SALT_KEY, f"{mechanism}:{username}".encode(), hash_name)
    return ScramCredential(salt, secrets.token_bytes(len(salt)), secrets.token_bytes(len(salt)), MIN_ITERATIONS)


def _attributes(message: str) -> dict[str, str]:
    attributes = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ScramError(f"malformed SCRAM attribute {key[:20]!r}")
        attributes[key] = value
    return attributes


def _decode_username(text: str) -> str:
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return text.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One server side of a SCRAM exchange: client-first -> server-first, client-final ->
    server-final. ``lookup`` gives the stored credential of a user (None when unknown)."""

    def __init__(self, mechanism: str, lookup) -> None:
        self.mechanism = mechanism
        self.hash_name = MECHANISMS[mechanism]
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False
        self.credential_lifetime_ms: int | None = None
        self._known = False
        self.token_authenticated = False
        self._credential: ScramCredential | None = None
        self._client_first_bare = self._server_first = self._nonce = self._gs2_header = ""

    @property
    def owner(self) -> str | None:
        """The owner principal of the delegation token that authenticated, if one did."""
        return self._credential.owner if self.complete and self._credential is not None else None

    async def evaluate(self, token: bytes) -> bytes:
        if self._credential is None:
            return await self._first(token)
        return self._final(token)

    async def _first(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise ScramError("the client-first message is not UTF-8") from None
        flag, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("unsupported GS2 header (channel binding is not supported)")
        attributes = _attributes(bare)
        if "n" not in attributes or "r" not in attributes or not attributes["r"]:
            raise ScramError("the client-first message lacks the user name or nonce")
        username = _decode_username(attributes["n"])
        if authzid and _decode_username(authzid[2:]) != username:
            raise ScramError("the authorization id differs from the user name")
        if attributes.get("m"):
            raise ScramError("mandatory SCRAM extensions are not supported")
        self.username = username
        # Kafka's extension: the user name is a delegation token id, the password its HMAC
        self.token_authenticated = attributes.get("tokenauth", "").lower() == "true"
        stored = await self._lookup(self.mechanism, username, self.token_authenticated)
        self._known = stored is not None
        self._credential = stored if stored is not None else _fake_credential(self.mechanism, username)
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attributes["r"] + secrets.token_urlsafe(24)
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        if self.complete:
            raise ScramError("the SCRAM exchange is already complete")
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise ScramError("the client-final message is not UTF-8") from None
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise ScramError("the client-final message has no proof")
        attributes = _attributes(without_proof)
        # endswith, as Kafka: librdkafka before 2.2 sends the client nonce twice in front
        if not attributes.get("r", "").endswith(self._nonce):
            raise ScramError("invalid client nonce in the final client message")
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("the channel binding differs from the client-first message's header")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise ScramError("the client proof is not base64") from None
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, self.hash_name)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        matches = hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), credential.stored_key)
        if not (matches and self._known):
            raise ScramError("invalid credentials")
        self.complete = True
        server_signature = hmac.digest(credential.server_key, auth_message, self.hash_name)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side, for the inter-broker connections."""

    def __init__(self, mechanism: str, username: str, password: str, *, token: bool = False) -> None:
        self.hash_name = MECHANISMS[mechanism]
        self.username, self.password = username, password
        self._nonce = secrets.token_urlsafe(24)
        self._client_first_bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={self._nonce}"
        if token:
            self._client_first_bare += ",tokenauth=true"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attributes = _attributes(server_first.decode())
        nonce, salt, iterations = attributes["r"], base64.b64decode(attributes["s"]), int(attributes["i"])
        if not nonce.startswith(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        salted = salted_password(self.hash_name, self.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self.hash_name)
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self.hash_name)
        server_key = hmac.digest(salted, b"Server Key", self.hash_name)
        self._server_signature = hmac.digest(server_key, auth_message, self.hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        if server_final != b"v=" + base64.b64encode(self._server_signature):
            raise ScramError("the server's signature is wrong")
