"""What a listener's connections need to authenticate, built once per listener at start-up from
Kafka's keys (each also settable per listener, ``listener.name.<listener>.<key>``): the TLS
context and the principal mapping rules for SSL / SASL_SSL, the SASL mechanisms and their users
for SASL_PLAINTEXT / SASL_SSL."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkacompat.config import StartupError
from kafkacompat.security.authenticator import SaslSettings
from kafkacompat.security.jaas import JaasConfigError, LoginModule, parse_jaas_config
from kafkacompat.security.mechanisms import GSSAPI, OAUTHBEARER, PLAIN, SUPPORTED_MECHANISMS, CredentialLookup
from kafkacompat.security.principal_mapping import PrincipalMapper
from kafkacompat.security.scram import MECHANISMS as SCRAM_MECHANISMS

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig, ServedListener
    from kafkacompat.security.gssapi_sasl import KerberosService

log = logging.getLogger("kafkacompat.security")

# TLS handshakes and SASL exchanges that take longer are closed (a client that connects and says
# nothing holds no more than this).
HANDSHAKE_TIMEOUT_SECONDS = 10.0
USER_OPTION_PREFIX = "user_"


@dataclass
class ListenerSecurity:
    listener: "ServedListener"
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: PrincipalMapper | None = None
    sasl: SaslSettings | None = None


def listener_security(config: "BrokerConfig", listener: "ServedListener",
                      scram_lookup: CredentialLookup | None) -> ListenerSecurity:
    security = ListenerSecurity(listener)
    if listener.uses_tls:
        from kafkacompat.security.tls import server_context

        security.ssl_context = server_context(config, listener.name, listener.protocol)
        try:
            security.principal_mapper = PrincipalMapper(config.listener_value(listener.name, "ssl.principal.mapping.rules"))
        except ValueError as exc:
            raise StartupError(f"ssl.principal.mapping.rules (listener {listener.name}): {exc}") from None
    if listener.uses_sasl:
        security.sasl = _sasl_settings(config, listener, scram_lookup)
    return security


def _sasl_settings(config: "BrokerConfig", listener: "ServedListener",
                   scram_lookup: CredentialLookup | None) -> SaslSettings:
    name = listener.name
    configured = [m.strip() for m in config.listener_value(name, "sasl.enabled.mechanisms") or [] if m.strip()]
    unsupported = [m for m in configured if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        log.warning("Listener %s: SASL mechanism %s is not supported by kafkacompat and is not offered "
                    "(supported: %s)", name, ", ".join(unsupported), ", ".join(SUPPORTED_MECHANISMS))
    mechanisms = [m for m in configured if m in SUPPORTED_MECHANISMS]
    if not mechanisms:
        raise StartupError(f"Listener {name} is {listener.protocol} but offers no SASL mechanism kafkacompat serves: "
                           f"set sasl.enabled.mechanisms (or listener.name.{name.lower()}.sasl.enabled.mechanisms) to "
                           f"some of {', '.join(SUPPORTED_MECHANISMS)}")
    settings = SaslSettings(
        name, mechanisms, scram_lookup=scram_lookup,
        failure_delay_ms=config.connection_failed_authentication_delay_ms,
        max_receive_size=config.listener_value(name, "sasl.server.max.receive.size"),
        max_reauth_ms={m: config.listener_value(name, "connections.max.reauth.ms", m) for m in mechanisms},
    )
    if PLAIN in mechanisms:
        module = _login_module(config, name, PLAIN)
        if module is None:
            raise StartupError(f"Listener {name} offers PLAIN but has no users: set "
                               f"listener.name.{name.lower()}.plain.sasl.jaas.config (or sasl.jaas.config) to "
                               'org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>="<password>";')
        settings.plain_users = {key[len(USER_OPTION_PREFIX):]: value for key, value in module.options.items()
                                if key.startswith(USER_OPTION_PREFIX)}
    if OAUTHBEARER in mechanisms:
        module = _login_module(config, name, OAUTHBEARER)
        settings.oauth_options = dict(module.options) if module is not None else {}
    if GSSAPI in mechanisms:
        settings.kerberos = _kerberos_service(config, name)
    if any(m in SCRAM_MECHANISMS for m in mechanisms) and scram_lookup is None:
        raise StartupError(f"Listener {name} offers SCRAM but this broker has no credential store")
    return settings


def _kerberos_service(config: "BrokerConfig", listener: str) -> "KerberosService":
    """The service principal and keytab of the listener's Krb5LoginModule JAAS entry, as Kafka's
    broker logs in with them (useKeyTab=true storeKey=true keyTab="..." principal="...")."""
    from kafkacompat.security.gssapi_sasl import KRB5_LOGIN_MODULE, GssapiUnavailable, KerberosService

    jaas_key = f"listener.name.{listener.lower()}.gssapi.sasl.jaas.config"
    module = _login_module(config, listener, GSSAPI)
    if module is None or "principal" not in module.options:
        raise StartupError(f"Listener {listener} offers GSSAPI but has no Kerberos principal: set {jaas_key} (or "
                           f'sasl.jaas.config) to {KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true '
                           'keyTab="/path/kafka.keytab" principal="kafka/<host>@<REALM>";')
    if module.class_name != KRB5_LOGIN_MODULE:
        log.warning("Listener %s: GSSAPI login module %s is read as %s", listener, module.class_name, KRB5_LOGIN_MODULE)
    principal, keytab = module.options["principal"], module.options.get("keyTab")
    service_name = _kerberos_service_name(config, listener, module)
    primary = principal.split("/", 1)[0].split("@", 1)[0]
    if service_name != primary:
        log.warning("Listener %s: the Kerberos service name is %s but the GSSAPI principal %s is service %s: "
                    "clients asking for %s/<host> get a ticket this broker has no key for", listener,
                    service_name, principal, primary, service_name)
    try:
        return KerberosService.load(principal, keytab, config.listener_value(
            listener, "sasl.kerberos.principal.to.local.rules", GSSAPI))
    except GssapiUnavailable as exc:
        raise StartupError(f"Listener {listener}: {exc}") from None
    except ValueError as exc:
        raise StartupError(f"Listener {listener} (GSSAPI, principal {principal}): {exc}") from None


def _kerberos_service_name(config: "BrokerConfig", listener: str, module: LoginModule) -> str:
    """Kafka's rule (KerberosLogin): the JAAS serviceName option or sasl.kerberos.service.name,
    which must agree when both are set; one of them is required."""
    in_jaas = module.options.get("serviceName")
    in_config = config.listener_value(listener, "sasl.kerberos.service.name", GSSAPI)
    if in_jaas and in_config and in_jaas != in_config:
        raise StartupError(f"Listener {listener}: Conflicting serviceName values found in JAAS and Kafka configs "
                           f"value in JAAS file {in_jaas}, value in Kafka config {in_config}")
    if not (in_jaas or in_config):
        raise StartupError(f"Listener {listener}: No serviceName defined in either JAAS or Kafka config: set "
                           "sasl.kerberos.service.name (e.g. kafka, the primary of the broker's principal)")
    return in_jaas or in_config


def _login_module(config: "BrokerConfig", listener: str, mechanism: str) -> LoginModule | None:
    text = config.listener_value(listener, "sasl.jaas.config", mechanism)
    if not text:
        return None
    try:
        return parse_jaas_config(text)[0]
    except JaasConfigError as exc:
        raise StartupError(f"sasl.jaas.config of listener {listener} (mechanism {mechanism}) does not parse: {exc}") from None


def inter_broker_credentials(config: "BrokerConfig") -> tuple[str, str, str] | None:
    """(mechanism, username, password) the replica fetchers authenticate with on the
    inter-broker listener, for GSSAPI (GSSAPI, principal, keytab); None when it is not a SASL
    listener."""
    listener = config.inter_broker_listener
    if not listener.uses_sasl:
        return None
    mechanism = config.sasl_mechanism_inter_broker_protocol
    if mechanism == GSSAPI:
        module = _login_module(config, listener.name, GSSAPI)
        if module is None or "principal" not in module.options:
            raise StartupError(f"The inter-broker listener {listener.name} uses SASL GSSAPI: its sasl.jaas.config "
                               f"(listener.name.{listener.name.lower()}.gssapi.sasl.jaas.config) needs the broker's "
                               'Krb5LoginModule principal="..." and keyTab="..."')
        return GSSAPI, module.options["principal"], module.options.get("keyTab", "")
    if mechanism not in (PLAIN, *SCRAM_MECHANISMS):
        raise StartupError(f"sasl.mechanism.inter.broker.protocol is {mechanism}: the inter-broker listener "
                           f"{listener.name} needs GSSAPI, PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    module = _login_module(config, listener.name, mechanism)
    if module is None or "username" not in module.options or "password" not in module.options:
        raise StartupError(f"The inter-broker listener {listener.name} uses SASL {mechanism}: its sasl.jaas.config "
                           f"(listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config) needs "
                           'username="..." password="..." for the broker itself')
    return mechanism, module.options["username"], module.options["password"]
