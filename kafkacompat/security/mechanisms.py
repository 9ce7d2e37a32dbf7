"""The server side of the SASL mechanisms (GSSAPI is in gssapi_sasl.py): PLAIN, SCRAM-SHA-256/512
(scram.py) and OAUTHBEARER with Kafka's unsecured-JWS validator. Each is
``await evaluate(token) -> response token`` until ``complete``; a failure raises
AuthenticationFailed with the message the client may see."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Awaitable, Callable, Protocol

from kafkacompat.security.principal import KafkaPrincipal
from kafkacompat.security.scram import MECHANISMS as SCRAM_MECHANISMS, ScramCredential, ScramError, ScramServer

GSSAPI = "GSSAPI"  # served by gssapi_sasl.py (the optional python-gssapi)
PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED_MECHANISMS = (GSSAPI, PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)

# (mechanism, user name or token id, whether it is a delegation token) -> the credential or None
CredentialLookup = Callable[[str, str, bool], Awaitable["ScramCredential | None"]]


class AuthenticationFailed(Exception):
    """``client_message`` goes to the client; ``reason`` is for the broker's log (never a secret)."""

    def __init__(self, client_message: str, reason: str) -> None:
        super().__init__(reason)
        self.client_message = client_message
        self.reason = reason


class SaslServer(Protocol):
    mechanism: str
    username: str | None
    complete: bool
    credential_lifetime_ms: int | None

    async def evaluate(self, token: bytes) -> bytes: ...


def invalid_credentials(mechanism: str, reauthenticating: bool = False) -> str:
    """Kafka's answer when a mechanism fails without its own message (SaslServerAuthenticator)."""
    what = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


def _digest(text: bytes) -> bytes:
    return hashlib.sha256(text).digest()


class PlainServer:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``, checked against the JAAS ``user_<name>``
    options. An unknown user is compared against a dummy password: same work, same answer."""

    mechanism = PLAIN
    _UNKNOWN = _digest(b"\x00unknown user\x00")

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {name: _digest(password.encode()) for name, password in users.items()}
        self.username: str | None = None
        self.complete = False
        self.credential_lifetime_ms: int | None = None

    async def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed(invalid_credentials(PLAIN),
                                       f"invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username_bytes, password = parts
        try:
            username = username_bytes.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed(invalid_credentials(PLAIN), "the SASL/PLAIN user name is not UTF-8") from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified", "no user name given")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified",
                                       f"no password given for user {username!r}")
        expected = self._users.get(username, self._UNKNOWN)
        matches = hmac.compare_digest(_digest(password), expected)
        if not matches or username not in self._users:
            raise AuthenticationFailed("Authentication failed: Invalid username or password",
                                       f"invalid user name or password (user {username!r})")
        if authzid and authzid != username_bytes:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username",
                f"user {username!r} asked for another authorization id")
        self.username = username
        self.complete = True
        return b""


class ScramMechanismServer:
    """scram.ScramServer with its errors as AuthenticationFailed."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._server = ScramServer(mechanism, lookup)
        self.credential_lifetime_ms: int | None = None

    @property
    def username(self) -> str | None:
        return self._server.username if self._server.complete else None

    @property
    def complete(self) -> bool:
        return self._server.complete

    @property
    def principal(self) -> KafkaPrincipal | None:
        """A delegation token's owner; None: User:<username>."""
        owner = self._server.owner
        return KafkaPrincipal.parse(owner) if owner else None

    @property
    def token_authenticated(self) -> bool:
        return self._server.complete and self._server.token_authenticated

    async def evaluate(self, token: bytes) -> bytes:
        try:
            return await self._server.evaluate(token)
        except ScramError as exc:
            user = f" (user {self._server.username!r})" if self._server.username else ""
            raise AuthenticationFailed(invalid_credentials(self.mechanism), f"{exc}{user}") from None


class UnsecuredOAuthBearerServer:
    """RFC 7628 with Kafka's OAuthBearerUnsecuredValidatorCallbackHandler defaults: an unsigned
    JWS (``alg`` "none"), principal claim ``sub``, an ``exp`` claim in the future (no clock skew
    allowed), ``iat`` not in the future. A rejected token gets the ``{"status":"invalid_token"}``
    challenge; the client's ``%x01`` reply then fails the exchange, as in Kafka."""

    mechanism = OAUTHBEARER

    def __init__(self, options: dict[str, str] | None = None) -> None:
        options = options or {}
        self._principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self._skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
        self._required_scope = [s for s in options.get("unsecuredValidatorRequiredScope", "").split(" ") if s]
        self.username: str | None = None
        self.complete = False
        self.credential_lifetime_ms: int | None = None
        self._failure: str | None = None

    async def evaluate(self, token: bytes) -> bytes:
        if self._failure is not None:
            if token != b"\x01":
                raise AuthenticationFailed(invalid_credentials(OAUTHBEARER), "unexpected reply after the error challenge")
            raise AuthenticationFailed(f"Authentication failed: {self._failure}", self._failure)
        try:
            bearer = self._bearer(token.decode())
            self._validate(bearer)
        except (UnicodeDecodeError, ValueError) as exc:
            self._failure = str(exc)
            return json.dumps({"status": "invalid_token"}).encode()
        self.complete = True
        return b""

    @staticmethod
    def _bearer(message: str) -> str:
        header, sep, rest = message.partition("\x01")
        if not sep or not header.startswith(("n,", "y,")):
            raise ValueError("the client message is not an RFC 7628 initial response")
        for item in rest.split("\x01"):
            key, _, value = item.partition("=")
            if key == "auth":
                scheme, _, bearer = value.partition(" ")
                if scheme.lower() != "bearer" or not bearer:
                    raise ValueError("the auth value is not 'Bearer <token>'")
                return bearer.strip()
        raise ValueError("the client message carries no auth=Bearer token")

    def _validate(self, bearer: str) -> None:
        pieces = bearer.split(".")
        if len(pieces) != 3:
            raise ValueError("the token is not a JWS compact serialization (3 dot-separated parts)")
        header, claims = (json.loads(_b64url(piece)) for piece in pieces[:2])
        if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
            raise ValueError("an unsecured token must have the header {\"alg\":\"none\"}")
        now_ms = time.time() * 1000
        expiration = claims.get("exp")
        if not isinstance(expiration, (int, float)) or isinstance(expiration, bool):
            raise ValueError("the token has no numeric 'exp' claim")
        if expiration * 1000 <= now_ms - self._skew_ms:
            raise ValueError(f"the token expired at {int(expiration * 1000)} ms")
        issued = claims.get("iat")
        if isinstance(issued, (int, float)) and issued * 1000 > now_ms + self._skew_ms:
            raise ValueError("the token's 'iat' is in the future")
        principal = claims.get(self._principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise ValueError(f"the token has no '{self._principal_claim}' claim")
        scope = claims.get("scope", [])
        scopes = scope.split(" ") if isinstance(scope, str) else list(scope or [])
        missing = [s for s in self._required_scope if s not in scopes]
        if missing:
            raise ValueError(f"the token lacks the required scope {missing}")
        self.username = principal
        self.credential_lifetime_ms = int(expiration * 1000)


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
