"""SASL authentication of one connection on a SASL_PLAINTEXT / SASL_SSL listener, as Kafka's
SaslServerAuthenticator: its states, which requests each admits, and re-authentication (KIP-368).

Before authentication a connection may send ApiVersions and SaslHandshake; after a v1 handshake
only SaslAuthenticate, after a v0 handshake raw size-prefixed SASL tokens. Anything else closes the
connection without an answer (RequestBeforeAuthentication). A failed authentication answers
SASL_AUTHENTICATION_FAILED after ``connection.failed.authentication.delay.ms``, then closes. Once
authenticated, the connection's principal is ``User:<name>``; with a session lifetime
(``connections.max.reauth.ms``, or an OAUTHBEARER token's expiry) a request after it ran out
closes the connection unless it starts a re-authentication (SaslHandshake), which must keep the
mechanism and the principal.
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from kafkacompat.security.mechanisms import (
    GSSAPI,
    OAUTHBEARER,
    PLAIN,
    AuthenticationFailed,
    CredentialLookup,
    PlainServer,
    SaslServer,
    ScramMechanismServer,
    UnsecuredOAuthBearerServer,
    invalid_credentials,
)
from kafkacompat.security.principal import KafkaPrincipal
from kafkacompat.security.scram import MECHANISMS as SCRAM_MECHANISMS

if TYPE_CHECKING:
    from kafkacompat.security.gssapi_sasl import KerberosService

log = logging.getLogger("kafkacompat.security")

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class RequestBeforeAuthentication(Exception):
    """A request the authentication state does not admit: the connection is closed."""


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "waiting for ApiVersions or SaslHandshake"
    AUTHENTICATE = "waiting for SaslAuthenticate"
    RAW_TOKENS = "waiting for a raw SASL token (after SaslHandshake v0)"
    COMPLETE = "authenticated"
    FAILED = "failed"


@dataclass
class SaslSettings:
    """A SASL listener's mechanisms and what each needs: the PLAIN users (JAAS user_<name>
    options), the SCRAM credential lookup, OAUTHBEARER validator options, session lifetimes."""

    listener: str
    mechanisms: list[str]
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_lookup: CredentialLookup | None = None
    oauth_options: dict[str, str] = field(default_factory=dict)
    kerberos: "KerberosService | None" = None
    max_reauth_ms: dict[str, int] = field(default_factory=dict)
    failure_delay_ms: int = 100
    max_receive_size: int = 524288

    def new_server(self, mechanism: str) -> SaslServer:
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        if mechanism in SCRAM_MECHANISMS:
            assert self.scram_lookup is not None
            return ScramMechanismServer(mechanism, self.scram_lookup)
        if mechanism == OAUTHBEARER:
            return UnsecuredOAuthBearerServer(self.oauth_options)
        if mechanism == GSSAPI:
            from kafkacompat.security.gssapi_sasl import GssapiServer

            assert self.kerberos is not None
            return GssapiServer(self.kerberos)
        raise ValueError(mechanism)


@dataclass
class HandshakeResult:
    error: str | None  # None, "UNSUPPORTED_SASL_MECHANISM" or "ILLEGAL_SASL_STATE"
    mechanisms: list[str]


@dataclass
class AuthenticateResult:
    error: str | None  # None, "SASL_AUTHENTICATION_FAILED" or "ILLEGAL_SASL_STATE"
    message: str | None
    token: bytes
    session_lifetime_ms: int = 0


class SaslAuthenticator:
    def __init__(self, settings: SaslSettings, describe: Callable[[], str],
                 set_principal: Callable[[KafkaPrincipal], None]) -> None:
        self.settings = settings
        self.state = State.HANDSHAKE_OR_VERSIONS
        self._describe = describe
        self._set_principal = set_principal
        self._server: SaslServer | None = None
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.session_expires: float | None = None  # time.monotonic()
        self.close_after_response = False
        self.client_supports_reauth = False

    @property
    def reauthenticating(self) -> bool:
        return self.principal is not None

    # -- the gate in front of dispatch ----------------------------------------------------------

    def admit(self, api_key: int, api_name: str) -> None:
        """Raise RequestBeforeAuthentication unless this request may be handled now."""
        state = self.state
        if state is State.COMPLETE:
            if api_key == SASL_HANDSHAKE:
                self.state = State.HANDSHAKE_OR_VERSIONS  # KIP-368 re-authentication
                return
            if self.session_expires is not None and time.monotonic() >= self.session_expires:
                raise RequestBeforeAuthentication(
                    f"its SASL session expired (connections.max.reauth.ms) and it sent {api_name} "
                    "instead of re-authenticating")
            return
        if state is State.HANDSHAKE_OR_VERSIONS and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return
        if state is State.AUTHENTICATE and api_key == SASL_AUTHENTICATE:
            return
        during = "SASL handshake" if state is State.HANDSHAKE_OR_VERSIONS else "SASL authentication"
        raise RequestBeforeAuthentication(f"Unexpected Kafka request of type {api_name} during {during}")

    # -- SaslHandshake ----------------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> HandshakeResult:
        enabled = self.settings.mechanisms
        if self.state is not State.HANDSHAKE_OR_VERSIONS:
            self.close_after_response = True
            return HandshakeResult("ILLEGAL_SASL_STATE", enabled)
        if mechanism not in enabled or (self.reauthenticating and mechanism != self.mechanism):
            why = (f"it changed mechanism from {self.mechanism} on re-authentication" if mechanism in enabled
                   else f"this listener serves {', '.join(enabled)} (sasl.enabled.mechanisms)")
            log.warning("Closing %s: SASL mechanism %r refused: %s", self._describe(), mechanism[:64], why)
            self.state = State.FAILED
            self.close_after_response = True
            return HandshakeResult("UNSUPPORTED_SASL_MECHANISM", enabled)
        self.mechanism = mechanism
        self._server = self.settings.new_server(mechanism)
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKENS
        return HandshakeResult(None, enabled)

    # -- SaslAuthenticate and raw tokens ----------------------------------------------------------

    async def authenticate(self, token: bytes, version: int) -> AuthenticateResult:
        if self.state is not State.AUTHENTICATE:
            return AuthenticateResult("ILLEGAL_SASL_STATE", _illegal_state_message(self.state), b"")
        self.client_supports_reauth = self.client_supports_reauth or version > 0
        try:
            response = await self._evaluate(token)
        except AuthenticationFailed as failure:
            return AuthenticateResult("SASL_AUTHENTICATION_FAILED", failure.client_message, b"")
        lifetime = self._complete() if self._server is not None and self._server.complete else 0
        return AuthenticateResult(None, None, response, lifetime)

    async def raw_token(self, token: bytes) -> bytes | None:
        """A token after a v0 handshake: the response token, or None when it failed (close)."""
        try:
            response = await self._evaluate(token)
        except AuthenticationFailed:
            return None
        if self._server is not None and self._server.complete:
            self._complete()
        return response

    async def _evaluate(self, token: bytes) -> bytes:
        assert self._server is not None and self.mechanism is not None
        limit = self.settings.max_receive_size
        try:
            if len(token) > limit:
                raise AuthenticationFailed(invalid_credentials(self.mechanism, self.reauthenticating),
                                           f"a SASL token of {len(token)} bytes exceeds sasl.server.max.receive.size")
            response = await self._server.evaluate(token)
            if self._server.complete:
                self._check_principal(self._authenticated_principal())
            return response
        except AuthenticationFailed as failure:
            self.state = State.FAILED
            self.close_after_response = True
            what = "re-authentication" if self.reauthenticating else "authentication"
            log.warning("Failed %s of %s with SASL mechanism %s: %s", what, self._describe(), self.mechanism,
                        failure.reason)
            raise

    def _check_principal(self, principal: KafkaPrincipal) -> None:
        if self.principal is not None and principal != self.principal:
            raise AuthenticationFailed(
                f"Cannot change principals during re-authentication from {self.principal}: {principal}",
                f"re-authentication as {principal} instead of {self.principal}")

    def _authenticated_principal(self) -> KafkaPrincipal:
        assert self._server is not None
        return getattr(self._server, "principal", None) or KafkaPrincipal("User", self._server.username or "")

    @property
    def token_authenticated(self) -> bool:
        """Authenticated with a delegation token (which may not create or renew tokens)."""
        return bool(getattr(self._server, "token_authenticated", False))

    def _complete(self) -> int:
        """Authenticated: set the principal; the session lifetime in ms (0 = unlimited)."""
        assert self._server is not None and self.mechanism is not None
        principal = self._authenticated_principal()
        first = self.principal is None
        self.principal = principal
        self._set_principal(principal)
        self.state = State.COMPLETE
        lifetime = self._session_lifetime_ms()
        self.session_expires = time.monotonic() + lifetime / 1000 if lifetime else None
        if first:
            log.info("Authenticated %s as %s with SASL mechanism %s", self._describe(), principal, self.mechanism)
        else:
            log.debug("Re-authenticated %s as %s", self._describe(), principal)
        return lifetime

    def _session_lifetime_ms(self) -> int:
        assert self._server is not None and self.mechanism is not None
        max_reauth = self.settings.max_reauth_ms.get(self.mechanism, 0)
        expiry = self._server.credential_lifetime_ms
        if expiry is None:
            return max(max_reauth, 0)
        remaining = max(int(expiry - time.time() * 1000), 0)
        return min(remaining, max_reauth) if max_reauth > 0 else remaining


def _illegal_state_message(state: State) -> str:
    if state is State.COMPLETE:
        return "SaslAuthenticate request received after successful authentication"
    return f"Unexpected SaslAuthenticate request: the connection is {state.value}"

