"""SASL GSSAPI (Kerberos V5, RFC 4752) with python-gssapi (the optional extra
``kafkacompat[gssapi]``), as Kafka's broker serves it: the service principal and keytab come from
the listener's ``Krb5LoginModule`` JAAS entry, the client's principal becomes ``User:<short
name>`` through ``sasl.kerberos.principal.to.local.rules``.

The exchange: the client's context tokens until the security context is established (the last
answer is the AP-REP of mutual authentication, to which the client replies with an empty token);
then the server offers its security layers in a wrapped 4-octet message (only "no security
layer", as Kafka), and the client's wrapped reply chooses it. GSSAPI calls read keytabs and
replay caches, so they run in a worker thread. ``gssapi_login`` is the same exchange from the
client's end, for the broker's own inter-broker connections.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio

from kafkacompat.security.kerberos import KerberosName, KerberosShortNamer, NoMatchingRule
from kafkacompat.security.mechanisms import GSSAPI, AuthenticationFailed, invalid_credentials

KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
INSTALL_HINT = "SASL mechanism GSSAPI needs python-gssapi and the Kerberos libraries: pip install 'kafkacompat[gssapi]'"
NO_SECURITY_LAYER = 1
_MAX_BUFFER = 0xFFFFFF


class GssapiUnavailable(Exception):
    pass


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as exc:
        raise GssapiUnavailable(f"{INSTALL_HINT} ({exc})") from None
    return gssapi


@dataclass
class KerberosService:
    """The broker's acceptor credentials for one listener, acquired from its keytab at start-up."""

    principal: str
    keytab: str | None
    short_namer: KerberosShortNamer
    credentials: Any = None

    @classmethod
    def load(cls, principal: str, keytab: str | None, rules: list[str] | None) -> "KerberosService":
        """Raises GssapiUnavailable or ValueError (the message says what to fix)."""
        gssapi = _gssapi()
        if keytab is not None and not os.path.isfile(keytab):
            raise ValueError(f"the keytab {keytab} does not exist (keyTab in the Krb5LoginModule JAAS entry)")
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal)
        store = {"keytab": keytab} if keytab else None
        try:
            credentials = gssapi.Credentials(name=name, usage="accept", store=store)
            credentials.inquire()  # fails now, not at the first client, when the keytab lacks the principal
        except gssapi.exceptions.GSSError as exc:
            where = f"the keytab {keytab}" if keytab else "the default keytab (KRB5_KTNAME)"
            raise ValueError(f"no key for {principal} in {where}: {_gss_message(exc)}") from None
        return cls(principal, keytab, KerberosShortNamer(rules, default_realm()), credentials)


def default_realm() -> str | None:
    """krb5.conf's default_realm (KRB5_CONFIG), which the DEFAULT rule compares names with."""
    gssapi = _gssapi()
    try:
        name = gssapi.Name("kafkacompat", gssapi.NameType.kerberos_principal)
        canonical = str(name.canonicalize(gssapi.MechType.kerberos))
    except gssapi.exceptions.GSSError:
        return None
    return canonical.partition("@")[2] or None


def _gss_message(exc: Exception) -> str:
    """The GSS major status (unless it is the "see the minor code" one) and the mechanism's words."""
    try:
        major = exc.get_all_statuses(exc.maj_code, True)  # type: ignore[attr-defined]
        minor = exc.get_all_statuses(exc.min_code, False) if exc.min_code else []  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 (not a GSSError: its own words)
        return " ".join(str(exc).split())
    parts = [text for text in major if "Minor code may provide" not in text] + list(minor)
    return "; ".join(" ".join(text.split()) for text in parts if text) or " ".join(str(exc).split())


def _explain(message: str) -> str:
    """A hint for the failures Kerberos users meet most."""
    lowered = message.lower()
    if "skew" in lowered:
        return f"{message} (the client's and the broker's clocks differ by more than krb5.conf's clockskew)"
    if any(words in lowered for words in ("wrong principal", "isn't for us", "not found in keytab",
                                          "no key table entry")):
        return (f"{message} (the client asked for a service principal this broker has no key for: check the "
                "client's sasl.kerberos.service.name and the host name it connects to)")
    return message


class GssapiServer:
    """One connection's exchange; ``username`` is the short name of the client's principal."""

    mechanism = GSSAPI

    def __init__(self, service: KerberosService) -> None:
        self._service = service
        self._gssapi = _gssapi()
        self._context = self._gssapi.SecurityContext(creds=service.credentials, usage="accept")
        self._stage = "context"  # -> "empty reply" (after the AP-REP) -> "layer offered"
        self.username: str | None = None
        self.complete = False
        self.credential_lifetime_ms: int | None = None
        self.principal = None  # the authenticator's User:<username>
        self.client_principal: str | None = None

    async def evaluate(self, token: bytes) -> bytes:
        try:
            if self._stage == "context":
                return await self._accept(token)
            if self._stage == "empty reply":
                return await self._offer_layers()
            return await self._choose_layer(token)
        except self._gssapi.exceptions.GSSError as exc:
            reason = _explain(_gss_message(exc))
            raise AuthenticationFailed(f"{invalid_credentials(GSSAPI)}: {reason}", reason) from None

    async def _accept(self, token: bytes) -> bytes:
        response = await trio.to_thread.run_sync(self._context.step, token)
        if not self._context.complete:
            return response or b""
        self.client_principal = str(self._context.initiator_name)
        if response:
            self._stage = "empty reply"  # RFC 4752: the client answers the last context token with nothing
            return response
        return await self._offer_layers()

    async def _offer_layers(self) -> bytes:
        offer = struct.pack(">I", (NO_SECURITY_LAYER << 24) | _MAX_BUFFER)
        wrapped = await trio.to_thread.run_sync(self._context.wrap, offer, False)
        self._stage = "layer offered"
        return wrapped.message

    async def _choose_layer(self, token: bytes) -> bytes:
        unwrapped = await trio.to_thread.run_sync(self._context.unwrap, token)
        message = unwrapped.message
        if len(message) < 4 or not message[0] & NO_SECURITY_LAYER:
            reason = "the client did not choose 'no security layer', the only one Kafka offers"
            raise AuthenticationFailed(f"{invalid_credentials(GSSAPI)}: {reason}", reason)
        # an authorization id after the 4 octets is ignored: Kafka's SaslServerCallbackHandler
        # authorizes the authenticated principal whatever the client asks for
        assert self.client_principal is not None
        try:
            self.username = self._service.short_namer.short_name(KerberosName.parse(self.client_principal))
        except (NoMatchingRule, ValueError) as exc:
            raise AuthenticationFailed(f"{invalid_credentials(GSSAPI)}: {exc}", str(exc)) from None
        self.complete = True
        return b""


async def gssapi_login(send_token: Callable[[bytes], Awaitable[bytes]], principal: str, keytab: str | None,
                       service: str, host: str) -> None:
    """The client side, for the broker's own inter-broker connections: a ticket for
    ``service/host`` from the broker's keytab (kept in a memory credential cache), the context
    tokens, then "no security layer". Raises GssapiUnavailable or ValueError."""
    gssapi = _gssapi()

    def start() -> tuple[Any, bytes]:
        store = {"ccache": f"MEMORY:kafkacompat-{os.getpid()}"}
        if keytab:
            store["client_keytab"] = keytab
        credentials = gssapi.Credentials(name=gssapi.Name(principal, gssapi.NameType.kerberos_principal),
                                         usage="initiate", store=store)
        target = gssapi.Name(f"{service}@{host}", gssapi.NameType.hostbased_service)
        context = gssapi.SecurityContext(name=target, creds=credentials, usage="initiate",
                                         flags=gssapi.RequirementFlag.mutual_authentication)
        return context, context.step()

    try:
        context, token = await trio.to_thread.run_sync(start)
        while True:
            response = await send_token(token)
            if not context.complete:
                token = await trio.to_thread.run_sync(context.step, response) or b""
                continue
            offer = (await trio.to_thread.run_sync(context.unwrap, response)).message
            if len(offer) < 4 or not offer[0] & NO_SECURITY_LAYER:
                raise ValueError("the broker offers no 'no security layer'")
            choice = struct.pack(">I", NO_SECURITY_LAYER << 24)
            await send_token((await trio.to_thread.run_sync(context.wrap, choice, False)).message)
            return
    except gssapi.exceptions.GSSError as exc:
        raise ValueError(f"GSSAPI as {principal} to {service}/{host}: {_explain(_gss_message(exc))}") from None
