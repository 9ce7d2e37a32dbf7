"""TLS for SSL and SASL_SSL listeners with Python's ssl module: the server SSLContext built from
Kafka's ssl.* keys (PEM key stores and trust stores, from files or inline), the client context of
the inter-broker connections, and the principal of a client certificate.

Key and trust stores as Kafka's: JKS (Kafka's default type) and PKCS12 files opened with
``ssl.keystore.password`` / ``ssl.key.password`` / ``ssl.truststore.password`` (keystores.py), or
PEM (``ssl.keystore.type=PEM``): a file with the private key and the certificate chain, or the two
inline in ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``; an encrypted PKCS#8 key is
opened with ``ssl.key.password``.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from typing import TYPE_CHECKING, Callable

from kafkacompat.config import StartupError
from kafkacompat.security.keystores import KeyStoreError, key_store_pem, trust_store_pem
from kafkacompat.security.principal import ANONYMOUS, KafkaPrincipal
from kafkacompat.security.principal_mapping import PrincipalMapper, distinguished_name

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig

log = logging.getLogger("kafkacompat.security")

_PROTOCOL_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
JAVA_STORE_TYPES = ("JKS", "PKCS12")


def server_context(config: "BrokerConfig", listener: str, protocol: str = "SSL") -> ssl.SSLContext:
    """The listener's server context; a StartupError says what is missing or unreadable."""
    value = lambda key: config.listener_value(listener, key)  # noqa: E731
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_key_store(context, value, listener)
    client_auth = _client_auth(config, listener, protocol)
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_trust_store(context, value, listener, required=True)
    _restrict(context, value, listener)
    return context


def _client_auth(config: "BrokerConfig", listener: str, protocol: str) -> str:
    """Kafka (ChannelBuilders): on a SASL_SSL listener ssl.client.auth applies only when set with
    the listener's prefix."""
    client_auth = config.listener_value(listener, "ssl.client.auth")
    if protocol != "SASL_SSL" or config.set_for_listener(listener, "ssl.client.auth"):
        return client_auth
    if client_auth != "none":
        log.warning("ssl.client.auth=%s applies to SSL listeners only; for the SASL_SSL listener %s set "
                    "listener.name.%s.ssl.client.auth", client_auth, listener, listener.lower())
    return "none"


def client_context(config: "BrokerConfig", listener: str) -> ssl.SSLContext:
    """What a broker's replica fetcher uses to reach another broker's ``listener``."""
    value = lambda key: config.listener_value(listener, key)  # noqa: E731
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not _load_trust_store(context, value, listener, required=False):
        context.load_default_certs()
    context.check_hostname = bool(value("ssl.endpoint.identification.algorithm"))
    if value("ssl.keystore.location") or value("ssl.keystore.certificate.chain"):
        _load_key_store(context, value, listener)
    _restrict(context, value, listener)
    return context


def _key(listener: str, key: str) -> str:
    return f"{key} (listener {listener})"


def _load_key_store(context: ssl.SSLContext, value: Callable, listener: str) -> None:
    store_type = (value("ssl.keystore.type") or "").upper()
    location, chain, key = value("ssl.keystore.location"), value("ssl.keystore.certificate.chain"), value("ssl.keystore.key")
    if not (location or chain):
        raise StartupError(f"Listener {listener} serves TLS but has no certificate: set ssl.keystore.type=PEM and "
                           "ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key), also "
                           f"as listener.name.{listener.lower()}.<key>")
    password = value("ssl.key.password")
    if store_type in JAVA_STORE_TYPES:
        if not location:
            raise StartupError(f"{_key(listener, 'ssl.keystore.type')} is {store_type}: set ssl.keystore.location "
                               "(inline certificates need ssl.keystore.type=PEM)")
        try:
            key_pem, chain_pem = key_store_pem(location, store_type, value("ssl.keystore.password"), password)
        except (OSError, KeyStoreError) as exc:
            raise StartupError(f"Listener {listener}: cannot read the {store_type} key store {location}: "
                               f"{_reason(exc)}") from None
        _load_inline_chain(context, chain_pem, key_pem, None)
        return
    if store_type != "PEM":
        raise StartupError(f"{_key(listener, 'ssl.keystore.type')} is {store_type or 'unset'}: kafkacompat reads JKS, "
                           "PKCS12 and PEM key stores")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        else:
            if not key:
                raise StartupError(f"{_key(listener, 'ssl.keystore.certificate.chain')} is set but ssl.keystore.key is not")
            _load_inline_chain(context, chain, key, password)
    except (OSError, ssl.SSLError) as exc:
        where = location or "ssl.keystore.certificate.chain/ssl.keystore.key"
        raise StartupError(f"Listener {listener}: cannot load the key store {where}: {_reason(exc)} (a wrong or "
                           "missing ssl.key.password for an encrypted key reads as a bad key)") from None


def _load_inline_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """ssl loads certificate chains from files only: write both to a private temporary file
    that is removed at once."""
    descriptor, path = tempfile.mkstemp(prefix="kafkacompat-keystore-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(_pem(key) + "\n" + _pem(chain) + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _pem(text: str) -> str:
    """Inline PEM in a properties file often has its line breaks turned to spaces or '\\n'."""
    text = text.replace("\\n", "\n").strip()
    if "\n" in text:
        return text
    out = []
    for block in text.split("-----END "):
        if "-----BEGIN " not in block:
            continue
        head, _, rest = block.partition("-----BEGIN ")[2].partition("-----")
        label = head
        body = rest.strip()
        out.append(f"-----BEGIN {label}-----\n" + "\n".join(body.split()) + f"\n-----END {label}-----")
    return "\n".join(out)


def _load_trust_store(context: ssl.SSLContext, value: Callable, listener: str, *, required: bool) -> bool:
    location, inline = value("ssl.truststore.location"), value("ssl.truststore.certificates")
    if not (location or inline):
        if required:
            raise StartupError(f"Listener {listener} asks for client certificates (ssl.client.auth="
                               f"{value('ssl.client.auth')}) but has no trust store: set ssl.truststore.type=PEM and "
                               "ssl.truststore.location or ssl.truststore.certificates")
        return False
    store_type = (value("ssl.truststore.type") or "").upper()
    if store_type in JAVA_STORE_TYPES and location:
        try:
            context.load_verify_locations(cadata=trust_store_pem(location, store_type,
                                                                 value("ssl.truststore.password")))
        except (OSError, KeyStoreError, ssl.SSLError) as exc:
            raise StartupError(f"Listener {listener}: cannot read the {store_type} trust store {location}: "
                               f"{_reason(exc)}") from None
        return True
    if store_type != "PEM":
        raise StartupError(f"{_key(listener, 'ssl.truststore.type')} is {store_type or 'unset'}: kafkacompat reads JKS, "
                           "PKCS12 and PEM trust stores")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=_pem(inline))
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"Listener {listener}: cannot load the trust store {location or 'ssl.truststore.certificates'}: "
                           f"{_reason(exc)}") from None
    return True


def _restrict(context: ssl.SSLContext, value: Callable, listener: str) -> None:
    protocols = value("ssl.enabled.protocols") or []
    unknown = [p for p in protocols if p not in _PROTOCOL_VERSIONS]
    if unknown or not protocols:
        raise StartupError(f"{_key(listener, 'ssl.enabled.protocols')}: {', '.join(unknown) or 'empty'} is not one of "
                           + ", ".join(_PROTOCOL_VERSIONS))
    versions = sorted(_PROTOCOL_VERSIONS[p] for p in protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    suites = value("ssl.cipher.suites") or []
    if suites:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise StartupError(f"{_key(listener, 'ssl.cipher.suites')}: none of {', '.join(suites)} is available "
                               "(OpenSSL names, e.g. ECDHE-RSA-AES128-GCM-SHA256)") from None


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def certificate_principal(ssl_object: ssl.SSLObject, mapper: PrincipalMapper) -> KafkaPrincipal:
    """User:<mapped DN> of a verified client certificate, ANONYMOUS without one."""
    certificate = ssl_object.getpeercert()
    if not certificate:
        return ANONYMOUS
    return KafkaPrincipal("User", mapper.name(distinguished_name(certificate)))
