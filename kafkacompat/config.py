"""Broker configuration: Kafka's server.properties keys, topic-level configs, and one BrokerConfig.

Three data-driven tables describe what this broker understands, one entry per key, with Kafka's
names, types, defaults (as Kafka 3.9 reports them in DescribeConfigs, except the few Kafka 4.x
changed: ``KAFKA_4_DEFAULTS``) and validation:

- ``BROKER_CONFIGS``: broker keys (``server.properties``), each with the topic-level config it
  supplies the default for, if any (``log.segment.bytes`` -> ``segment.bytes``).
- ``TOPIC_CONFIGS``: topic-level keys, each with its broker synonyms in Kafka's precedence order
  (``retention.ms`` <- ``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``).

Everything else is derived from them: BrokerConfig's attributes (one per broker key), LogConfig's
defaults and parsing (log/config.py), CleanerConfig's defaults (log/cleaner.py). A key marked
``applied=False`` is accepted and reported for compatibility but has no effect in kafkacompat; the
broker names those set to a non-default value in one warning at start-up.

``BrokerConfig.load`` reads a Kafka ``server.properties`` (Java properties syntax), applies
``--set key=value`` overrides, then the explicit CLI flags. Kafka's own precedence applies to the
result: file < --set < flags. Unknown keys are logged as warnings and ignored; malformed values
raise ``ConfigError`` naming the key, the value and what was expected, worded like Kafka's
``ConfigException``.

kafkacompat deliberately differs from Kafka's defaults in two places (see
``KAFKACOMPAT_DEFAULTS``): ``broker.id`` is 0 (Kafka: -1, meaning "generate one in ZooKeeper", which
we do not do) and ``log.dir`` is ``./data`` (Kafka: ``/tmp/kafka-logs``).

This module is imported by the CLI before anything else, so it must stay cheap: standard library
only, no trio, no kafka-python.
"""

from __future__ import annotations

import enum
import logging
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

logger = logging.getLogger("kafkacompat.config")

# Config sources as DescribeConfigs reports them (DescribeConfigsResponse ConfigSource ids).
DEFAULT_CONFIG = "DEFAULT_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
TOPIC_CONFIG = "TOPIC_CONFIG"
CONFIG_SOURCE_IDS: Mapping[str, int] = MappingProxyType(
    {
        "UNKNOWN_CONFIG": 0,
        TOPIC_CONFIG: 1,
        DYNAMIC_BROKER_CONFIG: 2,
        DYNAMIC_DEFAULT_BROKER_CONFIG: 3,
        STATIC_BROKER_CONFIG: 4,
        DEFAULT_CONFIG: 5,
        "DYNAMIC_BROKER_LOGGER_CONFIG": 6,
        "CLIENT_METRICS_CONFIG": 7,
        "GROUP_CONFIG": 8,
    }
)

INT_MAX = "2147483647"
LONG_MAX = "9223372036854775807"
DOUBLE_MAX = "1.7976931348623157E308"  # Java's Double.toString(Double.MAX_VALUE)

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class StartupError(Exception):
    """The broker refuses to start for a reason the user must fix (the message says how)."""


class ConfigError(ValueError):
    """A configuration key or value that cannot be used.

    ``key`` is the offending config name (or CLI flag), ``value`` the bad value (None when the key
    itself is the problem). The message is worded like Kafka's ConfigException so that it can be
    returned as the error message of an INVALID_CONFIG response.
    """

    def __init__(self, message: str, *, key: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.key = key
        self.value = value

    @classmethod
    def invalid(cls, key: str, value: object, expected: str) -> ConfigError:
        return cls(f"Invalid value {value} for configuration {key}: {expected}", key=key, value=value)


class ConfigType(enum.Enum):
    """Kafka's ConfigDef types; the value is the DescribeConfigs (v3+) configType id."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_INTEGER_BOUNDS = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_INTEGER_PATTERN = re.compile(r"[+-]?[0-9]+")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")


def parse_value(key: str, config_type: ConfigType, raw: str | None) -> Any:
    """Parse a config string the way Kafka's ConfigDef.parseType does (after trimming).

    None stays None (an unset nullable config). Integers are int, doubles float, booleans bool,
    lists list[str]; strings, classes and passwords stay str.
    """
    if raw is None:
        return None
    text = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        return _parse_boolean(key, text)
    if config_type in _INTEGER_BOUNDS:
        return _parse_integer(key, config_type, text)
    if config_type is ConfigType.DOUBLE:
        return _parse_double(key, text)
    if config_type is ConfigType.LIST:
        return [] if not text else _LIST_SEPARATOR.split(text)
    return text


def _parse_boolean(key: str, text: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ConfigError.invalid(key, text, "Expected value to be either true or false")


def _parse_integer(key: str, config_type: ConfigType, text: str) -> int:
    low, high = _INTEGER_BOUNDS[config_type]
    if not _INTEGER_PATTERN.fullmatch(text) or not low <= int(text) <= high:
        raise ConfigError.invalid(key, text, f"Not a number of type {config_type.name}")
    return int(text)


def _parse_double(key: str, text: str) -> float:
    try:
        if "_" in text:
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise ConfigError.invalid(key, text, "Not a number of type DOUBLE") from None


def format_value(value: Any) -> str | None:
    """The string form of a typed config value, as Kafka would print it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Validators: each returns None when the parsed value is fine, or Kafka's wording of the problem.
# ---------------------------------------------------------------------------------------------

Validator = Callable[[Any], "str | None"]


def at_least(minimum: float) -> Validator:
    def check(value: Any) -> str | None:
        if value is not None and value < minimum:
            return f"Value must be at least {minimum}"
        return None

    check.__doc__ = f"[{minimum},...]"
    return check


def between(minimum: float, maximum: float) -> Validator:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if value < minimum:
            return f"Value must be at least {minimum}"
        if value > maximum:
            return f"Value must be no more than {maximum}"
        return None

    check.__doc__ = f"[{minimum},...,{maximum}]"
    return check


def one_of(*allowed: str) -> Validator:
    """Kafka's ValidString.in (case-sensitive), applied to every element when the value is a list."""

    def check(value: Any) -> str | None:
        items = value if isinstance(value, list) else [value]
        if value is None or all(item in allowed for item in items):
            return None
        return "String must be one of: " + ", ".join(allowed)

    check.__doc__ = "[" + ", ".join(allowed) + "]"
    return check


def level_between(minimum: int, maximum: int, default: int) -> Validator:
    """Compression levels: a range, plus the codec's own 'default' sentinel (gzip's -1)."""

    def check(value: Any) -> str | None:
        if value is None or value == default or minimum <= value <= maximum:
            return None
        return f"Value must be between {minimum} and {maximum}, or {default}"

    check.__doc__ = f"[{minimum},...,{maximum}]"
    return check


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def throttled_replica_list(value: Any) -> str | None:
    if value is None or value == ["*"] or all(_THROTTLED_REPLICA.fullmatch(item) for item in value):
        return None
    return (
        "Must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


_METADATA_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)*(-IV[0-9]+)?")


def metadata_version(value: Any) -> str | None:
    if value is None or _METADATA_VERSION.fullmatch(value):
        return None
    return "Not a valid MetadataVersion, e.g. 2.8 or 3.0-IV1"


# ---------------------------------------------------------------------------------------------
# The tables.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerConfigKey:
    """One broker config key: Kafka's name, type, default (None = unset) and documentation.

    ``read_only`` mirrors Kafka's "Dynamic Update Mode": False for keys Kafka can update without a
    restart (per-broker or cluster-wide). ``topic_config`` names the topic-level config this key
    supplies the default for (filled in from TOPIC_CONFIGS). ``applied`` is False for keys that are
    accepted (and reported by DescribeConfigs) for compatibility but have no effect here; a broker
    started with one of them set to another value than its default says so in a warning.
    """

    name: str
    type: ConfigType
    default: str | None
    importance: str
    doc: str
    validator: Validator | None = None
    read_only: bool = True
    topic_config: str | None = None
    applied: bool = True

    @property
    def attribute(self) -> str:
        """The BrokerConfig attribute holding the parsed value (num.partitions -> num_partitions)."""
        return self.name.replace(".", "_")

    def parse(self, raw: str | None) -> Any:
        return _parse_and_validate(self.name, self.type, self.validator, raw)


@dataclass(frozen=True)
class TopicConfigKey:
    """One topic-level config key.

    ``default`` is Kafka's LogConfig default, used only when no broker synonym has a value.
    ``synonyms`` are (broker key, multiplier) pairs in Kafka's precedence order; the multiplier
    converts the broker value to the topic's unit (log.retention.hours -> ms). ``applied`` as for
    broker keys; a broker key that supplies a topic config's default shares its ``applied``.
    """

    name: str
    type: ConfigType
    default: str | None
    importance: str
    doc: str
    validator: Validator | None = None
    synonyms: tuple[tuple[str, int], ...] = ()
    applied: bool = True

    @property
    def broker_keys(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.synonyms)

    def parse(self, raw: str | None) -> Any:
        return _parse_and_validate(self.name, self.type, self.validator, raw)


def _parse_and_validate(key: str, config_type: ConfigType, validator: Validator | None, raw: str | None) -> Any:
    value = parse_value(key, config_type, raw)
    problem = validator(value) if validator is not None else None
    if problem is not None:
        raise ConfigError.invalid(key, raw.strip() if raw is not None else raw, problem)
    return value


HIGH, MEDIUM, LOW = "high", "medium", "low"
_BOOL, _STR, _INT, _SHORT, _LONG, _DOUBLE, _LIST = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)
_CLASS, _PASSWORD = ConfigType.CLASS, ConfigType.PASSWORD


# Where Kafka 4.x changed a default from 3.x (KIP-1030), the 4.x value (the README names each).
# Kafka 4.0 also raised segment.bytes' minimum to 1 MiB; kafkacompat keeps 3.x's 14 bytes (small
# segments are how its tests reach segment rolls, compaction and retention quickly).
KAFKA_4_DEFAULTS: Mapping[str, str] = MappingProxyType({
    "log.message.timestamp.after.max.ms": str(MS_PER_HOUR),  # 3.x: Long.MAX_VALUE
    "num.recovery.threads.per.data.dir": "2",  # 3.x: 1
})


def _broker(
    name: str,
    config_type: ConfigType,
    default: str | None,
    importance: str,
    doc: str,
    validator: Validator | None = None,
    *,
    dynamic: bool = False,
    applied: bool = True,
) -> BrokerConfigKey:
    return BrokerConfigKey(name, config_type, default, importance, doc, validator, read_only=not dynamic,
                           applied=applied)


_BROKER_CONFIG_LIST: tuple[BrokerConfigKey, ...] = (
    # --- identity and cluster membership ---
    _broker("broker.id", _INT, "-1", HIGH, "The broker id for this server."),
    _broker("node.id", _INT, "-1", HIGH, "The node id (KRaft name); a synonym of broker.id here."),
    _broker("broker.rack", _STR, None, MEDIUM, "Rack of the broker, used for rack-aware replica assignment."),
    _broker("zookeeper.connect", _STR, None, HIGH,
            "ZooKeeper connection string host:port[,host:port...][/chroot]; unset = embedded metadata store."),
    _broker("zookeeper.session.timeout.ms", _INT, "18000", HIGH, "ZooKeeper session timeout."),
    _broker("zookeeper.connection.timeout.ms", _INT, None, HIGH,
            "Max time to establish a ZooKeeper connection, and that an operation waits for one while "
            "ZooKeeper is unreachable; unset = zookeeper.session.timeout.ms."),
    _broker("zookeeper.max.in.flight.requests", _INT, "10", HIGH,
            "Max unacknowledged requests sent to ZooKeeper before blocking.", at_least(1), applied=False),
    # --- listeners and the socket server ---
    _broker("listeners", _STR, "PLAINTEXT://:9092", HIGH,
            "Comma-separated NAME://host:port listeners; an empty host binds all interfaces.", dynamic=True),
    _broker("advertised.listeners", _STR, None, HIGH,
            "Listeners published to clients in Metadata, if different from listeners.", dynamic=True),
    _broker("listener.security.protocol.map", _STR,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", LOW,
            "Map between listener names and security protocols.", dynamic=True),
    _broker("controller.listener.names", _STR, None, HIGH,
            "Listener names used by the KRaft controller; never served to clients here."),
    _broker("inter.broker.listener.name", _STR, None, MEDIUM,
            "Name of the listener used between brokers (replica fetchers connect to it)."),
    _broker("security.inter.broker.protocol", _STR, "PLAINTEXT", MEDIUM,
            "Security protocol used between brokers: names the inter-broker listener when "
            "inter.broker.listener.name is unset.", one_of(*SECURITY_PROTOCOLS)),
    # --- TLS (every key may also be set per listener: listener.name.<listener>.<key>) ---
    _broker("ssl.keystore.type", _STR, "JKS", MEDIUM, "File format of the key store: JKS, PKCS12 or PEM."),
    _broker("ssl.keystore.location", _STR, None, HIGH, "The key store file (JKS, PKCS12, or a PEM private key and certificate chain)."),
    _broker("ssl.keystore.password", _PASSWORD, None, HIGH, "The key store's password (JKS, PKCS12; PEM key stores have none)."),
    _broker("ssl.keystore.certificate.chain", _PASSWORD, None, HIGH,
            "The certificate chain in PEM, inline (ssl.keystore.type=PEM)."),
    _broker("ssl.keystore.key", _PASSWORD, None, HIGH, "The private key in PEM, inline (ssl.keystore.type=PEM)."),
    _broker("ssl.key.password", _PASSWORD, None, HIGH, "The password of the key in the key store (JKS: the store password when unset; PEM: of an encrypted PKCS#8 key)."),
    _broker("ssl.truststore.type", _STR, "JKS", MEDIUM, "File format of the trust store: JKS, PKCS12 or PEM."),
    _broker("ssl.truststore.location", _STR, None, HIGH, "The trust store file (JKS, PKCS12, or PEM CA certificates)."),
    _broker("ssl.truststore.password", _PASSWORD, None, HIGH, "The trust store's password (JKS: its integrity is checked only with it; PEM has none)."),
    _broker("ssl.truststore.certificates", _PASSWORD, None, HIGH, "Trusted certificates in PEM, inline."),
    _broker("ssl.client.auth", _STR, "none", MEDIUM, "Client certificates: required, requested or none.",
            one_of("required", "requested", "none")),
    _broker("ssl.enabled.protocols", _LIST, "TLSv1.2,TLSv1.3", MEDIUM, "The TLS versions served."),
    _broker("ssl.protocol", _STR, "TLSv1.3", MEDIUM, "The TLS protocol of the SSLContext."),
    _broker("ssl.cipher.suites", _LIST, "", LOW, "Cipher suites (OpenSSL or IANA names); empty = the defaults."),
    _broker("ssl.endpoint.identification.algorithm", _STR, "https", LOW,
            "Host name verification of the inter-broker client; empty turns it off."),
    _broker("ssl.principal.mapping.rules", _STR, "DEFAULT", LOW,
            "Rules mapping a client certificate's distinguished name to a principal name."),
    _broker("ssl.engine.factory.class", _CLASS, None, LOW, "Accepted for compatibility.", applied=False),
    _broker("ssl.keymanager.algorithm", _STR, "SunX509", LOW, "Accepted for compatibility.", applied=False),
    _broker("ssl.trustmanager.algorithm", _STR, "PKIX", LOW, "Accepted for compatibility.", applied=False),
    _broker("ssl.secure.random.implementation", _STR, None, LOW, "Accepted for compatibility.", applied=False),
    # --- SASL ---
    _broker("sasl.enabled.mechanisms", _LIST, "GSSAPI", MEDIUM,
            "SASL mechanisms served: GSSAPI (pip install 'kafkacompat[gssapi]'), PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512, OAUTHBEARER."),
    _broker("sasl.mechanism.inter.broker.protocol", _STR, "GSSAPI", MEDIUM,
            "SASL mechanism the inter-broker client uses: GSSAPI, PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."),
    _broker("sasl.jaas.config", _PASSWORD, None, MEDIUM,
            "JAAS login context: PlainLoginModule user_<name>=\"<password>\" entries, the inter-broker "
            "client's username/password, Krb5LoginModule's keyTab and principal for GSSAPI."),
    _broker("sasl.kerberos.service.name", _STR, None, MEDIUM,
            "The Kerberos service name (primary) of the broker's principal, e.g. kafka."),
    _broker("sasl.kerberos.principal.to.local.rules", _LIST, "DEFAULT", MEDIUM,
            "Rules mapping a Kerberos principal to the short name of its User: principal."),
    _broker("sasl.kerberos.kinit.cmd", _STR, "/usr/bin/kinit", LOW, "Accepted for compatibility.", applied=False),
    _broker("sasl.kerberos.min.time.before.relogin", _LONG, "60000", LOW, "Accepted for compatibility.",
            applied=False),
    _broker("sasl.kerberos.ticket.renew.jitter", _DOUBLE, "0.05", LOW, "Accepted for compatibility.", applied=False),
    _broker("sasl.kerberos.ticket.renew.window.factor", _DOUBLE, "0.8", LOW, "Accepted for compatibility.",
            applied=False),
    _broker("sasl.server.max.receive.size", _INT, "524288", LOW,
            "The largest SASL token accepted before authentication."),
    _broker("connections.max.reauth.ms", _LONG, "0", MEDIUM,
            "Session lifetime of a SASL authentication (KIP-368); 0 = unlimited."),
    _broker("connection.failed.authentication.delay.ms", _INT, "100", LOW,
            "Delay before the answer to a failed authentication is sent and the connection closed.", at_least(0)),
    _broker("principal.builder.class", _CLASS, None, MEDIUM, "Accepted for compatibility.", applied=False),
    # --- delegation tokens ---
    _broker("delegation.token.secret.key", _PASSWORD, None, MEDIUM,
            "Secret that signs delegation tokens (the same on every broker); unset = tokens disabled."),
    _broker("delegation.token.master.key", _PASSWORD, None, MEDIUM,
            "Deprecated name of delegation.token.secret.key (used when that is unset)."),
    _broker("delegation.token.max.lifetime.ms", _LONG, "604800000", MEDIUM,
            "A token's maximum lifetime, beyond which it cannot be renewed.", at_least(1)),
    _broker("delegation.token.expiry.time.ms", _LONG, "86400000", MEDIUM,
            "A token's validity before it must be renewed.", at_least(1)),
    _broker("delegation.token.expiry.check.interval.ms", _LONG, "3600000", LOW,
            "Expired tokens are removed when next read here, not on a timer.", at_least(1), applied=False),
    _broker("socket.send.buffer.bytes", _INT, "102400", HIGH, "SO_SNDBUF of server sockets; -1 = OS default.",
            applied=False),
    _broker("socket.receive.buffer.bytes", _INT, "102400", HIGH, "SO_RCVBUF of server sockets; -1 = OS default.",
            applied=False),
    _broker("socket.request.max.bytes", _INT, "104857600", HIGH,
            "The maximum number of bytes in a socket request.", at_least(1)),
    _broker("max.request.partition.size.limit", _INT, "2000", MEDIUM,
            "Max partitions in one DescribeTopicPartitions response (KIP-966).", at_least(1)),
    _broker("socket.listen.backlog.size", _INT, "50", MEDIUM, "Max pending connections on the socket.", at_least(1),
            applied=False),
    _broker("max.connections", _INT, INT_MAX, MEDIUM, "Max connections allowed in the broker.", at_least(0),
            dynamic=True),
    _broker("max.connections.per.ip", _INT, INT_MAX, MEDIUM, "Max connections allowed from each IP address.",
            at_least(0), dynamic=True),
    _broker("max.connection.creation.rate", _INT, INT_MAX, MEDIUM,
            "New connections accepted per second, broker-wide (the inter-broker listener is exempt when there are "
            "others) or, with the listener.name.<listener>. prefix, on one listener; beyond it the acceptor waits.",
            at_least(0), dynamic=True),
    _broker("connections.max.idle.ms", _LONG, "600000", MEDIUM, "Idle connections are closed after this many ms."),
    _broker("queued.max.requests", _INT, "500", HIGH,
            "Queued requests allowed per connection before reading blocks.", at_least(1), applied=False),
    _broker("request.timeout.ms", _INT, "30000", HIGH,
            "Timeout of the broker's own requests (transaction markers to other brokers, their replication wait)."),
    _broker("num.network.threads", _INT, "3", HIGH,
            "Network threads (accepted for compatibility; kafkacompat runs one event loop).", at_least(1),
            dynamic=True, applied=False),
    _broker("num.io.threads", _INT, "8", HIGH,
            "Request handler threads (accepted for compatibility; kafkacompat runs one event loop).",
            at_least(1), dynamic=True, applied=False),
    _broker("background.threads", _INT, "10", HIGH, "Threads for background tasks.", at_least(1), dynamic=True,
            applied=False),
    _broker("controlled.shutdown.enable", _BOOL, "true", MEDIUM, "Enable controlled shutdown of the server."),
    _broker("controlled.shutdown.max.retries", _INT, "3", MEDIUM,
            "Attempts at a controlled shutdown before the broker shuts down without it."),
    _broker("controlled.shutdown.retry.backoff.ms", _LONG, "5000", MEDIUM,
            "Time to wait between controlled shutdown attempts."),
    # --- topics ---
    _broker("num.partitions", _INT, "1", MEDIUM, "The default number of log partitions per topic.", at_least(1)),
    _broker("default.replication.factor", _INT, "1", MEDIUM,
            "The default replication factor for automatically created topics."),
    _broker("auto.create.topics.enable", _BOOL, "true", HIGH, "Enable auto creation of topics on the server."),
    _broker("delete.topic.enable", _BOOL, "true", HIGH, "Allow topics to be deleted through the admin API."),
    _broker("message.max.bytes", _INT, "1048588", HIGH,
            "The largest record batch size allowed (topic: max.message.bytes).", at_least(0), dynamic=True),
    _broker("min.insync.replicas", _INT, "1", HIGH,
            "Minimum in-sync replicas that must acknowledge an acks=all write.", at_least(1), dynamic=True),
    _broker("unclean.leader.election.enable", _BOOL, "false", HIGH,
            "Allow out-of-sync replicas to become leader as a last resort.", dynamic=True),
    _broker("compression.type", _STR, "producer", HIGH,
            "Final compression type of topics; 'producer' keeps the producer's codec.",
            one_of(*COMPRESSION_TYPES), dynamic=True),
    _broker("compression.gzip.level", _INT, "-1", MEDIUM, "Compression level used with compression.type=gzip.",
            level_between(1, 9, -1), dynamic=True),
    _broker("compression.lz4.level", _INT, "9", MEDIUM, "Compression level used with compression.type=lz4.",
            level_between(1, 17, 9), dynamic=True),
    _broker("compression.zstd.level", _INT, "3", MEDIUM, "Compression level used with compression.type=zstd.",
            level_between(-131072, 22, 3), dynamic=True),
    # --- logs ---
    _broker("log.dirs", _STR, None, HIGH, "Comma-separated log directories; if unset, log.dir is used."),
    _broker("log.dir", _STR, "/tmp/kafka-logs", HIGH, "The log directory (supplemental for log.dirs)."),
    _broker("log.segment.bytes", _INT, "1073741824", HIGH, "The maximum size of a single log segment file.",
            at_least(14), dynamic=True),
    _broker("log.roll.ms", _LONG, None, HIGH, "Max time before a new segment is rolled; if unset, log.roll.hours.",
            dynamic=True),
    _broker("log.roll.hours", _INT, "168", HIGH, "Max time before a new segment is rolled, in hours.", at_least(1),
            dynamic=True),
    _broker("log.roll.jitter.ms", _LONG, None, HIGH,
            "Max jitter subtracted from the roll time; if unset, log.roll.jitter.hours.", dynamic=True),
    _broker("log.roll.jitter.hours", _INT, "0", HIGH, "Max jitter subtracted from the roll time, in hours.",
            at_least(0), dynamic=True),
    _broker("log.retention.ms", _LONG, None, HIGH,
            "Time to keep a log segment; if unset, log.retention.minutes. -1 = no limit.", dynamic=True),
    _broker("log.retention.minutes", _INT, None, HIGH,
            "Time to keep a log segment in minutes; if unset, log.retention.hours.", dynamic=True),
    _broker("log.retention.hours", _INT, "168", HIGH, "Time to keep a log segment in hours.", dynamic=True),
    _broker("log.retention.bytes", _LONG, "-1", HIGH, "Max size of a partition's log before deleting old segments.",
            dynamic=True),
    _broker("log.retention.check.interval.ms", _LONG, "300000", MEDIUM,
            "How often logs are checked for segments eligible for deletion.", at_least(1)),
    _broker("log.cleanup.policy", _LIST, "delete", MEDIUM, "Default cleanup policy: delete, compact or both.",
            one_of(*CLEANUP_POLICIES), dynamic=True),
    _broker("log.index.size.max.bytes", _INT, "10485760", MEDIUM, "The maximum size in bytes of the offset index.",
            at_least(4), dynamic=True),
    _broker("log.index.interval.bytes", _INT, "4096", MEDIUM, "Bytes between entries of the offset index.",
            at_least(0), dynamic=True),
    _broker("log.flush.interval.messages", _LONG, LONG_MAX, HIGH, "Messages accumulated before a log is fsynced.",
            at_least(1), dynamic=True),
    _broker("log.flush.interval.ms", _LONG, None, HIGH,
            "Max time a message waits before fsync; if unset, log.flush.scheduler.interval.ms.", dynamic=True),
    _broker("log.flush.scheduler.interval.ms", _LONG, LONG_MAX, HIGH,
            "How often the flusher checks whether a log needs an fsync."),
    _broker("log.flush.offset.checkpoint.interval.ms", _INT, "60000", HIGH,
            "How often the recovery point checkpoint is written.", at_least(0)),
    _broker("log.flush.start.offset.checkpoint.interval.ms", _INT, "60000", HIGH,
            "How often the log start offset checkpoint is written.", at_least(0), applied=False),
    _broker("log.segment.delete.delay.ms", _LONG, "60000", HIGH, "Delay before a deleted segment file is removed.",
            at_least(0), dynamic=True),
    _broker("log.preallocate", _BOOL, "false", MEDIUM, "Preallocate segment files when they are created.",
            dynamic=True),
    _broker("log.message.timestamp.type", _STR, "CreateTime", MEDIUM,
            "Record timestamps: CreateTime (producer's) or LogAppendTime (broker's).",
            one_of(*TIMESTAMP_TYPES), dynamic=True),
    _broker("log.message.timestamp.before.max.ms", _LONG, LONG_MAX, MEDIUM,
            "Max allowed age of a CreateTime timestamp relative to the broker's clock.", at_least(0),
            dynamic=True),
    _broker("log.message.timestamp.after.max.ms", _LONG, KAFKA_4_DEFAULTS["log.message.timestamp.after.max.ms"], MEDIUM,
            "Max allowed lead of a CreateTime timestamp over the broker's clock.", at_least(0), dynamic=True),
    _broker("log.message.timestamp.difference.max.ms", _LONG, LONG_MAX, MEDIUM,
            "Deprecated: max difference between record and broker timestamps.", at_least(0), dynamic=True),
    _broker("log.message.format.version", _STR, "3.0-IV1", MEDIUM, "Deprecated: message format version.",
            metadata_version),
    _broker("log.message.downconversion.enable", _BOOL, "true", LOW,
            "Allow down-conversion of record formats for old consumers.", dynamic=True),
    _broker("log.local.retention.ms", _LONG, "-2", MEDIUM,
            "Tiered storage: local retention time; -2 = log.retention.ms.", at_least(-2), dynamic=True),
    _broker("log.local.retention.bytes", _LONG, "-2", MEDIUM,
            "Tiered storage: local retention size; -2 = log.retention.bytes.", at_least(-2), dynamic=True),
    _broker("num.recovery.threads.per.data.dir", _INT, KAFKA_4_DEFAULTS["num.recovery.threads.per.data.dir"], HIGH,
            "Threads per data directory for log recovery at startup.", at_least(1), dynamic=True, applied=False),
    _broker("log.cleaner.enable", _BOOL, "true", MEDIUM, "Run the log cleaner (needed for compacted topics)."),
    _broker("log.cleaner.threads", _INT, "1", MEDIUM, "Background threads for log cleaning.", at_least(0),
            dynamic=True),
    _broker("log.cleaner.backoff.ms", _LONG, "15000", MEDIUM, "Sleep time when there are no logs to clean.",
            at_least(0), dynamic=True),
    _broker("log.cleaner.dedupe.buffer.size", _LONG, "134217728", MEDIUM,
            "Total memory for log deduplication across cleaner threads.", dynamic=True),
    _broker("log.cleaner.io.buffer.size", _INT, "524288", MEDIUM, "Total memory for cleaner I/O buffers.",
            at_least(0), dynamic=True, applied=False),
    _broker("log.cleaner.io.buffer.load.factor", _DOUBLE, "0.9", MEDIUM, "Load factor of the dedupe buffer.",
            dynamic=True),
    _broker("log.cleaner.io.max.bytes.per.second", _DOUBLE, DOUBLE_MAX, MEDIUM, "Throttle of the log cleaner's I/O.",
            dynamic=True, applied=False),
    _broker("log.cleaner.delete.retention.ms", _LONG, "86400000", MEDIUM,
            "How long tombstones are kept in compacted topics.", at_least(0), dynamic=True),
    _broker("log.cleaner.min.compaction.lag.ms", _LONG, "0", MEDIUM,
            "Minimum time a record stays uncompacted.", at_least(0), dynamic=True),
    _broker("log.cleaner.max.compaction.lag.ms", _LONG, LONG_MAX, MEDIUM,
            "Maximum time a record stays ineligible for compaction.", at_least(1), dynamic=True),
    _broker("log.cleaner.min.cleanable.ratio", _DOUBLE, "0.5", MEDIUM,
            "Minimum dirty/total ratio for a log to be cleaned.", between(0, 1), dynamic=True),
    # --- replication ---
    _broker("replica.lag.time.max.ms", _LONG, "30000", HIGH,
            "A follower that has not caught up for this long is removed from the ISR."),
    _broker("replica.socket.timeout.ms", _INT, "30000", HIGH, "Socket timeout of follower fetch requests."),
    _broker("replica.socket.receive.buffer.bytes", _INT, "65536", HIGH, "Socket receive buffer of followers.",
            applied=False),
    _broker("replica.fetch.max.bytes", _INT, "1048576", MEDIUM, "Bytes per partition a follower tries to fetch.",
            at_least(0)),
    _broker("replica.alter.log.dirs.io.max.bytes.per.second", _LONG, LONG_MAX, MEDIUM,
            "Bytes per second copied by moves between this broker's log directories (AlterReplicaLogDirs).",
            at_least(1), dynamic=True),
    # Kafka defines these two in DynamicConfig.Broker only (set per broker or cluster-wide with
    # IncrementalAlterConfigs, as kafka-reassign-partitions --throttle does).
    _broker("leader.replication.throttled.rate", _LONG, LONG_MAX, MEDIUM,
            "Bytes per second this broker sends, as a leader, of the replicas its topics' "
            "leader.replication.throttled.replicas name.", at_least(0), dynamic=True),
    _broker("follower.replication.throttled.rate", _LONG, LONG_MAX, MEDIUM,
            "Bytes per second this broker fetches, as a follower, of the replicas its topics' "
            "follower.replication.throttled.replicas name.", at_least(0), dynamic=True),
    _broker("replication.quota.window.num", _INT, "11", LOW,
            "The number of samples kept for the replication throttles' rates.", at_least(1)),
    _broker("replication.quota.window.size.seconds", _INT, "1", LOW,
            "The time span of each replication throttle sample.", at_least(1)),
    _broker("replica.fetch.wait.max.ms", _INT, "500", MEDIUM, "Max wait of a follower fetch request."),
    _broker("replica.fetch.min.bytes", _INT, "1", HIGH, "Minimum bytes of a follower fetch response."),
    _broker("replica.fetch.backoff.ms", _INT, "1000", MEDIUM, "Sleep after a follower fetch error.", at_least(0)),
    _broker("replica.fetch.response.max.bytes", _INT, "10485760", MEDIUM,
            "Max bytes of a whole follower fetch response.", at_least(0)),
    _broker("num.replica.fetchers", _INT, "1", HIGH, "Fetcher tasks per source broker.", dynamic=True, applied=False),
    _broker("replica.high.watermark.checkpoint.interval.ms", _LONG, "5000", HIGH,
            "How often the high watermark checkpoint is written.", applied=False),
    _broker("fetch.purgatory.purge.interval.requests", _INT, "1000", MEDIUM, "Purge interval of the fetch purgatory.",
            applied=False),
    _broker("producer.purgatory.purge.interval.requests", _INT, "1000", MEDIUM,
            "Purge interval of the producer purgatory.", applied=False),
    _broker("fetch.max.bytes", _INT, "57671680", MEDIUM, "Max bytes returned for one fetch request.", at_least(1024),
            applied=False),
    _broker("max.incremental.fetch.session.cache.slots", _INT, "1000", MEDIUM,
            "Max incremental fetch sessions kept.", at_least(0)),
    _broker("min.incremental.fetch.session.eviction.ms", _INT, "120000", MEDIUM,
            "How long a fetch session is kept before a new one may evict it (an unused one for this long "
            "goes first).", at_least(0)),
    _broker("auto.leader.rebalance.enable", _BOOL, "true", HIGH, "Move leadership back to preferred replicas."),
    _broker("leader.imbalance.per.broker.percentage", _INT, "10", HIGH,
            "Leader imbalance per broker (percent) that triggers a rebalance."),
    _broker("leader.imbalance.check.interval.seconds", _LONG, "300", HIGH, "How often leader balance is checked.",
            at_least(1)),
    _broker("controller.socket.timeout.ms", _INT, "30000", MEDIUM,
            "Socket timeout of controller-to-broker channels; here the bound of each controlled shutdown attempt."),
    # --- consumer groups and offsets ---
    _broker("group.min.session.timeout.ms", _INT, "6000", MEDIUM, "Minimum session timeout of group members."),
    _broker("group.max.session.timeout.ms", _INT, "1800000", MEDIUM, "Maximum session timeout of group members."),
    _broker("group.initial.rebalance.delay.ms", _INT, "3000", MEDIUM,
            "Wait for more members before the first rebalance of an empty group."),
    _broker("group.max.size", _INT, INT_MAX, MEDIUM, "Maximum number of members in one group.", at_least(1)),
    # KIP-848 consumer groups (group.protocol=consumer)
    _broker("group.consumer.heartbeat.interval.ms", _INT, "5000", MEDIUM,
            "Heartbeat interval given to consumer-protocol members.", at_least(1)),
    _broker("group.consumer.min.heartbeat.interval.ms", _INT, "5000", MEDIUM,
            "Minimum heartbeat interval of consumer-protocol members.", at_least(1)),
    _broker("group.consumer.max.heartbeat.interval.ms", _INT, "15000", MEDIUM,
            "Maximum heartbeat interval of consumer-protocol members.", at_least(1)),
    _broker("group.consumer.session.timeout.ms", _INT, "45000", MEDIUM,
            "A consumer-protocol member is removed when it has not heartbeated for this long.", at_least(1)),
    _broker("group.consumer.min.session.timeout.ms", _INT, "45000", MEDIUM,
            "Minimum session timeout of consumer-protocol members.", at_least(1)),
    _broker("group.consumer.max.session.timeout.ms", _INT, "60000", MEDIUM,
            "Maximum session timeout of consumer-protocol members.", at_least(1)),
    _broker("group.consumer.assignors", _LIST, "uniform,range", MEDIUM,
            "Server-side assignors of consumer groups (uniform, range or their Kafka class names); "
            "the first is the default.",
            one_of("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                   "org.apache.kafka.coordinator.group.assignor.RangeAssignor")),
    _broker("group.consumer.max.size", _INT, INT_MAX, MEDIUM, "Maximum number of members in one consumer group.",
            at_least(1)),
    _broker("group.consumer.migration.policy", _STR, "bidirectional", MEDIUM,
            "Online migration between the classic and the consumer protocol: disabled, downgrade, upgrade or "
            "bidirectional.", one_of("disabled", "downgrade", "upgrade", "bidirectional")),
    # KIP-1071 streams groups (StreamsGroupHeartbeat)
    _broker("group.streams.heartbeat.interval.ms", _INT, "5000", MEDIUM,
            "Heartbeat interval given to the members of streams groups.", at_least(1)),
    _broker("group.streams.session.timeout.ms", _INT, "45000", MEDIUM,
            "A streams group member is removed when it has not heartbeated for this long.", at_least(1)),
    _broker("group.streams.num.standby.replicas", _INT, "0", MEDIUM,
            "Standby replicas of each task of a streams group.", at_least(0)),
    _broker("group.streams.min.session.timeout.ms", _INT, "45000", MEDIUM,
            "The least streams.session.timeout.ms a streams group may be configured with.", at_least(1)),
    _broker("group.streams.max.session.timeout.ms", _INT, "60000", MEDIUM,
            "The most streams.session.timeout.ms a streams group may be configured with.", at_least(1)),
    _broker("group.streams.min.heartbeat.interval.ms", _INT, "5000", MEDIUM,
            "The least streams.heartbeat.interval.ms a streams group may be configured with.", at_least(1)),
    _broker("group.streams.max.heartbeat.interval.ms", _INT, "15000", MEDIUM,
            "The most streams.heartbeat.interval.ms a streams group may be configured with.", at_least(1)),
    _broker("group.streams.max.standby.replicas", _INT, "2", MEDIUM,
            "The most streams.num.standby.replicas a streams group may be configured with.", at_least(0)),
    _broker("group.streams.max.size", _INT, INT_MAX, MEDIUM, "Maximum number of members in one streams group.",
            at_least(1)),
    _broker("offset.metadata.max.bytes", _INT, "4096", HIGH, "Max size of the metadata of an offset commit."),
    _broker("offsets.load.buffer.size", _INT, "5242880", HIGH, "Read batch size when loading offsets.", at_least(1)),
    _broker("offsets.topic.replication.factor", _SHORT, "3", HIGH, "Replication factor of __consumer_offsets.",
            at_least(1)),
    _broker("offsets.topic.num.partitions", _INT, "50", HIGH, "Number of partitions of __consumer_offsets.",
            at_least(1)),
    _broker("offsets.topic.segment.bytes", _INT, "104857600", HIGH, "Segment size of __consumer_offsets.",
            at_least(1)),
    _broker("offsets.topic.compression.codec", _INT, "0", HIGH, "Compression codec of __consumer_offsets."),
    _broker("offsets.retention.minutes", _INT, "10080", HIGH,
            "Committed offsets of an empty group are kept this long.", at_least(1)),
    _broker("offsets.retention.check.interval.ms", _LONG, "600000", HIGH, "How often stale offsets are looked for.",
            at_least(1)),
    _broker("offsets.commit.timeout.ms", _INT, "5000", HIGH,
            "Max wait for the offsets topic to acknowledge a commit.", at_least(1)),
    _broker("offsets.commit.required.acks", _SHORT, "-1", HIGH, "Deprecated: acks required for an offset commit.",
            applied=False),
    # --- share groups (KIP-932) ---
    _broker("group.share.record.lock.duration.ms", _INT, "30000", MEDIUM,
            "How long a share-group member holds an acquired record before it is released.", between(1000, 3600000)),
    _broker("group.share.min.record.lock.duration.ms", _INT, "15000", MEDIUM,
            "The least share.record.lock.duration.ms a share group may be configured with.", between(1000, 30000)),
    _broker("group.share.max.record.lock.duration.ms", _INT, "60000", MEDIUM,
            "The most share.record.lock.duration.ms a share group may be configured with.", between(30000, 3600000)),
    _broker("group.share.min.session.timeout.ms", _INT, "45000", MEDIUM,
            "The least share.session.timeout.ms a share group may be configured with.", at_least(1)),
    _broker("group.share.max.session.timeout.ms", _INT, "60000", MEDIUM,
            "The most share.session.timeout.ms a share group may be configured with.", at_least(1)),
    _broker("group.share.min.heartbeat.interval.ms", _INT, "5000", MEDIUM,
            "The least share.heartbeat.interval.ms a share group may be configured with.", at_least(1)),
    _broker("group.share.max.heartbeat.interval.ms", _INT, "15000", MEDIUM,
            "The most share.heartbeat.interval.ms a share group may be configured with.", at_least(1)),
    _broker("group.share.min.delivery.count.limit", _INT, "2", MEDIUM,
            "The least share.delivery.count.limit a share group may be configured with.", between(2, 5)),
    _broker("group.share.max.delivery.count.limit", _INT, "10", MEDIUM,
            "The most share.delivery.count.limit a share group may be configured with.", between(5, 25)),
    _broker("group.share.delivery.count.limit", _INT, "5", MEDIUM,
            "Deliveries of a record to a share group before it is archived.", between(2, 10)),
    _broker("group.share.partition.max.record.locks", _INT, "2000", MEDIUM,
            "In-flight (delivered, not yet acknowledged) records per share partition.", between(100, 10000)),
    _broker("group.share.max.size", _SHORT, "200", MEDIUM, "Maximum number of members in one share group.",
            between(1, 1000)),
    _broker("group.share.session.timeout.ms", _INT, "45000", MEDIUM,
            "A share-group member that does not heartbeat for this long is removed.", at_least(1)),
    _broker("group.share.heartbeat.interval.ms", _INT, "5000", MEDIUM,
            "The heartbeat interval given to share-group members.", at_least(1)),
    _broker("group.share.max.share.sessions", _INT, "2000", MEDIUM,
            "Share sessions kept by this broker (share fetch sessions).", at_least(1)),
    _broker("share.coordinator.state.topic.num.partitions", _INT, "50", HIGH,
            "Number of partitions of __share_group_state.", at_least(1)),
    _broker("share.coordinator.state.topic.replication.factor", _SHORT, "3", HIGH,
            "Replication factor of __share_group_state (capped by the live brokers).", at_least(1)),
    _broker("share.coordinator.state.topic.segment.bytes", _INT, "104857600", HIGH,
            "Segment size of __share_group_state.", at_least(1)),
    _broker("share.coordinator.write.timeout.ms", _INT, "5000", HIGH,
            "Max wait for __share_group_state to acknowledge a share-state write.", at_least(1)),
    # --- transactions and idempotent producers ---
    _broker("transactional.id.expiration.ms", _INT, "604800000", HIGH,
            "An idle transactional id expires after this long.", at_least(1)),
    _broker("transaction.max.timeout.ms", _INT, "900000", HIGH, "Maximum allowed transaction timeout.", at_least(1)),
    _broker("transaction.state.log.min.isr", _INT, "2", HIGH, "min.insync.replicas of __transaction_state.",
            at_least(1)),
    _broker("transaction.state.log.load.buffer.size", _INT, "5242880", HIGH,
            "Read batch size when loading transaction state.", at_least(1)),
    _broker("transaction.state.log.replication.factor", _SHORT, "3", HIGH,
            "Replication factor of __transaction_state.", at_least(1)),
    _broker("transaction.state.log.num.partitions", _INT, "50", HIGH, "Number of partitions of __transaction_state.",
            at_least(1)),
    _broker("transaction.state.log.segment.bytes", _INT, "104857600", HIGH, "Segment size of __transaction_state.",
            at_least(1)),
    _broker("transaction.abort.timed.out.transaction.cleanup.interval.ms", _INT, "10000", LOW,
            "How often timed-out transactions are rolled back.", at_least(1)),
    _broker("transaction.remove.expired.transaction.cleanup.interval.ms", _INT, "3600000", LOW,
            "How often expired transactional ids are removed.", at_least(1)),
    _broker("transaction.partition.verification.enable", _BOOL, "true", LOW,
            "Verify that a partition was added to the transaction before appending (KIP-890; Produce v12+ "
            "clients, which let the broker add it, are verified whatever this says).", dynamic=True),
    _broker("producer.id.expiration.ms", _INT, "86400000", LOW,
            "Producer state of an idle producer id expires after this long.", at_least(1), dynamic=True),
    _broker("producer.id.expiration.check.interval.ms", _INT, "600000", LOW,
            "How often expired producer ids are removed.", at_least(1)),
    # --- authorizer (security/authorizer.py) and client quotas (quotas.py) ---
    _broker("authorizer.class.name", _STR, "", LOW,
            "The authorizer: Kafka's StandardAuthorizer or AclAuthorizer class name (both select kafkacompat's "
            "ACL authorizer); empty = none, every client may do everything.",
            one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                   "kafka.security.authorizer.AclAuthorizer")),
    _broker("super.users", _STR, "", LOW,
            "Principals allowed everything by the authorizer, ';'-separated (User:admin;User:broker)."),
    _broker("allow.everyone.if.no.acl.found", _BOOL, "false", LOW,
            "Whether the authorizer allows an operation on a resource that has no ACL at all."),
    _broker("quota.window.num", _INT, "11", LOW, "The number of samples kept for client quota rates.",
            at_least(1)),
    _broker("quota.window.size.seconds", _INT, "1", LOW, "The time span of each client quota sample.",
            at_least(1)),
    # --- client telemetry (KIP-714, telemetry.py) ---
    _broker("telemetry.max.bytes", _INT, "1048576", LOW,
            "The largest metrics payload a client may push (PushTelemetry), compressed or not; a larger one "
            "is TELEMETRY_TOO_LARGE.", at_least(1)),
)


def _topic(
    name: str,
    config_type: ConfigType,
    default: str | None,
    doc: str,
    validator: Validator | None = None,
    *synonyms: str | tuple[str, int],
    applied: bool = True,
) -> TopicConfigKey:
    pairs = tuple(s if isinstance(s, tuple) else (s, 1) for s in synonyms)
    return TopicConfigKey(name, config_type, default, MEDIUM, doc, validator, pairs, applied)


_TOPIC_CONFIG_LIST: tuple[TopicConfigKey, ...] = (
    _topic("cleanup.policy", _LIST, "delete", "Retention policy for old segments: delete, compact or both.",
           one_of(*CLEANUP_POLICIES), "log.cleanup.policy"),
    _topic("compression.type", _STR, "producer", "Final compression type; 'producer' keeps the producer's codec.",
           one_of(*COMPRESSION_TYPES), "compression.type"),
    _topic("compression.gzip.level", _INT, "-1", "Compression level used with compression.type=gzip.",
           level_between(1, 9, -1), "compression.gzip.level"),
    _topic("compression.lz4.level", _INT, "9", "Compression level used with compression.type=lz4.",
           level_between(1, 17, 9), "compression.lz4.level"),
    _topic("compression.zstd.level", _INT, "3", "Compression level used with compression.type=zstd.",
           level_between(-131072, 22, 3), "compression.zstd.level"),
    _topic("delete.retention.ms", _LONG, "86400000", "How long tombstones are kept in a compacted topic.",
           at_least(0), "log.cleaner.delete.retention.ms"),
    _topic("file.delete.delay.ms", _LONG, "60000", "Delay before a deleted segment file is removed.",
           at_least(0), "log.segment.delete.delay.ms", applied=False),
    _topic("flush.messages", _LONG, LONG_MAX, "Messages accumulated before the log is fsynced.",
           at_least(1), "log.flush.interval.messages"),
    _topic("flush.ms", _LONG, LONG_MAX, "Max time a message waits before the log is fsynced.",
           at_least(0), "log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    _topic("follower.replication.throttled.replicas", _LIST, "", "Replicas whose follower fetches are throttled.",
           throttled_replica_list),
    _topic("index.interval.bytes", _INT, "4096", "Bytes between entries of the offset index.",
           at_least(0), "log.index.interval.bytes"),
    _topic("leader.replication.throttled.replicas", _LIST, "", "Replicas whose leader side is throttled.",
           throttled_replica_list),
    _topic("local.retention.bytes", _LONG, "-2", "Tiered storage: local retention size; -2 = retention.bytes.",
           at_least(-2), "log.local.retention.bytes", applied=False),
    _topic("local.retention.ms", _LONG, "-2", "Tiered storage: local retention time; -2 = retention.ms.",
           at_least(-2), "log.local.retention.ms", applied=False),
    _topic("max.compaction.lag.ms", _LONG, LONG_MAX, "Maximum time a record stays ineligible for compaction.",
           at_least(1), "log.cleaner.max.compaction.lag.ms"),
    _topic("max.message.bytes", _INT, "1048588", "The largest record batch size allowed.",
           at_least(0), "message.max.bytes"),
    _topic("message.downconversion.enable", _BOOL, "true", "Allow down-conversion for old consumers.",
           None, "log.message.downconversion.enable"),
    _topic("message.format.version", _STR, "3.0-IV1", "Deprecated: message format version.",
           metadata_version, "log.message.format.version", applied=False),
    _topic("message.timestamp.after.max.ms", _LONG, KAFKA_4_DEFAULTS["log.message.timestamp.after.max.ms"], "Max lead of a CreateTime timestamp over the broker.",
           at_least(0), "log.message.timestamp.after.max.ms"),
    _topic("message.timestamp.before.max.ms", _LONG, LONG_MAX, "Max age of a CreateTime timestamp at append.",
           at_least(0), "log.message.timestamp.before.max.ms"),
    _topic("message.timestamp.difference.max.ms", _LONG, LONG_MAX, "Deprecated: max record/broker timestamp gap.",
           at_least(0), "log.message.timestamp.difference.max.ms"),
    _topic("message.timestamp.type", _STR, "CreateTime", "CreateTime (producer's) or LogAppendTime (broker's).",
           one_of(*TIMESTAMP_TYPES), "log.message.timestamp.type"),
    _topic("min.cleanable.dirty.ratio", _DOUBLE, "0.5", "Minimum dirty/total ratio for the log to be cleaned.",
           between(0, 1), "log.cleaner.min.cleanable.ratio"),
    _topic("min.compaction.lag.ms", _LONG, "0", "Minimum time a record stays uncompacted.",
           at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _topic("min.insync.replicas", _INT, "1", "Minimum in-sync replicas that must acknowledge an acks=all write.",
           at_least(1), "min.insync.replicas"),
    _topic("preallocate", _BOOL, "false", "Preallocate segment files when they are created.",
           None, "log.preallocate", applied=False),
    _topic("remote.log.copy.disable", _BOOL, "false", "Tiered storage: stop copying segments to remote storage.",
           applied=False),
    _topic("remote.log.delete.on.disable", _BOOL, "false", "Tiered storage: delete remote data when disabled.",
           applied=False),
    _topic("remote.storage.enable", _BOOL, "false", "Tiered storage: enable remote storage for the topic.",
           applied=False),
    _topic("retention.bytes", _LONG, "-1", "Max size of a partition's log before old segments are deleted.",
           None, "log.retention.bytes"),
    _topic("retention.ms", _LONG, "604800000", "Time a segment is kept before deletion; -1 = no limit.",
           at_least(-1), "log.retention.ms", ("log.retention.minutes", MS_PER_MINUTE),
           ("log.retention.hours", MS_PER_HOUR)),
    _topic("segment.bytes", _INT, "1073741824", "The maximum size of a single log segment file.",
           at_least(14), "log.segment.bytes"),
    _topic("segment.index.bytes", _INT, "10485760", "The maximum size in bytes of the offset index.",
           at_least(4), "log.index.size.max.bytes"),
    _topic("segment.jitter.ms", _LONG, "0", "Max random jitter subtracted from segment.ms.",
           at_least(0), "log.roll.jitter.ms", ("log.roll.jitter.hours", MS_PER_HOUR), applied=False),
    _topic("segment.ms", _LONG, "604800000", "Time after which a segment is rolled even if not full.",
           at_least(1), "log.roll.ms", ("log.roll.hours", MS_PER_HOUR)),
    _topic("unclean.leader.election.enable", _BOOL, "false", "Allow out-of-sync replicas to become leader.",
           None, "unclean.leader.election.enable"),
)

TOPIC_CONFIGS: Mapping[str, TopicConfigKey] = MappingProxyType({key.name: key for key in _TOPIC_CONFIG_LIST})


def _with_topic_links(keys: Iterable[BrokerConfigKey]) -> dict[str, BrokerConfigKey]:
    topic_for_broker_key = {broker_key: topic for topic in _TOPIC_CONFIG_LIST for broker_key in topic.broker_keys}
    linked = {}
    for key in keys:
        topic = topic_for_broker_key.get(key.name)
        if topic is not None:
            key = replace(key, topic_config=topic.name, applied=key.applied and topic.applied)
        linked[key.name] = key
    return linked


BROKER_CONFIGS: Mapping[str, BrokerConfigKey] = MappingProxyType(_with_topic_links(_BROKER_CONFIG_LIST))

# Where kafkacompat's default differs from Kafka's (BROKER_CONFIGS keeps Kafka's), and why:
KAFKACOMPAT_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "broker.id": "0",  # Kafka: -1 = generate an id in ZooKeeper, which kafkacompat does not do.
        "node.id": "0",  # a synonym of broker.id (as in Kafka), so it follows broker.id's default.
        "log.dir": "./data",  # Kafka: /tmp/kafka-logs; a relative default suits a dev broker better.
    }
)


def default_broker_values() -> dict[str, str | None]:
    """Every broker key's value when nothing is configured (kafkacompat's defaults)."""
    return {name: KAFKACOMPAT_DEFAULTS.get(name, key.default) for name, key in BROKER_CONFIGS.items()}


def broker_default(name: str) -> Any:
    """A broker key's parsed default (kafkacompat's, see KAFKACOMPAT_DEFAULTS)."""
    key = BROKER_CONFIGS[name]
    return key.parse(KAFKACOMPAT_DEFAULTS.get(name, key.default))


def default_broker_sources() -> dict[str, str]:
    return {name: DEFAULT_CONFIG for name in BROKER_CONFIGS}


def broker_config_synonyms(broker_key: str) -> list[str]:
    """The broker keys Kafka lists as synonyms of ``broker_key`` in DescribeConfigs, in precedence
    order starting at ``broker_key`` itself (log.retention.minutes -> [minutes, hours])."""
    topic_key = BROKER_CONFIGS[broker_key].topic_config
    group = list(TOPIC_CONFIGS[topic_key].broker_keys) if topic_key else [broker_key]
    return group[group.index(broker_key):] if broker_key in group else [broker_key]


# ---------------------------------------------------------------------------------------------
# Java properties files.
# ---------------------------------------------------------------------------------------------

_PROPERTY_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text exactly as java.util.Properties.load does.

    Comments start with ``#`` or ``!`` (first non-blank character of a line); the key ends at the
    first unescaped ``=``, ``:`` or whitespace; a line ending in an odd number of backslashes
    continues on the next line (whose leading whitespace is dropped); ``\\t \\n \\r \\f \\uXXXX``
    and ``\\<any>`` escapes are decoded in keys and values. The last duplicate key wins.
    """
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        properties[_unescape(raw_key)] = _unescape(raw_value)
    return properties


def _natural_lines(text: str) -> Iterator[str]:
    return iter(re.split(r"\r\n|\r|\n", text))


def _logical_lines(text: str) -> Iterator[str]:
    lines = _natural_lines(text)
    for line in lines:
        stripped = line.lstrip(_PROPERTY_WHITESPACE)
        if not stripped or stripped[0] in "#!":
            continue
        logical = stripped
        while _ends_with_continuation(logical):
            logical = logical[:-1]
            following = next(lines, None)
            if following is None:
                break
            logical += following.lstrip(_PROPERTY_WHITESPACE)
        yield logical


def _ends_with_continuation(line: str) -> bool:
    trailing_backslashes = len(line) - len(line.rstrip("\\"))
    return trailing_backslashes % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    escaped = False
    for index, char in enumerate(line):
        if not escaped and char in "=:":
            key_end, value_start, has_separator = index, index + 1, True
            break
        if not escaped and char in _PROPERTY_WHITESPACE:
            key_end, value_start = index, index + 1
            break
        escaped = char == "\\" and not escaped
    while value_start < len(line):
        char = line[value_start]
        if char not in _PROPERTY_WHITESPACE:
            if has_separator or char not in "=:":
                break
            has_separator = True
        value_start += 1
    return line[:key_end], line[value_start:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\":
            out.append(char)
            continue
        if index >= len(text):
            break  # a lone trailing backslash is dropped, as Java does at end of input
        escaped = text[index]
        index += 1
        if escaped == "u":
            digits = text[index:index + 4]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(f"Malformed \\uxxxx encoding in properties: \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    return "".join(out)


def load_properties(path: Path | str) -> dict[str, str]:
    """Read a properties file. UTF-8 is tried first; Java's ISO-8859-1 is the fallback."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror or exc}", key=str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text)


# ---------------------------------------------------------------------------------------------
# Listeners.
# ---------------------------------------------------------------------------------------------

_LISTENER_PATTERN = re.compile(r"(?P<name>[^:/]+)://(?:\[(?P<ipv6>[0-9a-zA-Z:.%]*)\]|(?P<host>[^:\[\]]*)):(?P<port>-?[0-9]+)")


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` entry of listeners / advertised.listeners (name upper-cased)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class ServedListener:
    """A listener this broker serves: where it binds, its security protocol, and what Metadata
    tells the clients that connect to it (advertised.listeners' entry, else the bind address)."""

    name: str
    host: str
    port: int
    protocol: str
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def advertised(self, bound_port: int) -> tuple[str, int]:
        """(host, port) for Metadata; port 0 stands for the bound port, a wildcard host for
        ``localhost`` (what Kafka's shipped server.properties advertises)."""
        port = self.advertised_port or bound_port
        if self.advertised_host:
            return self.advertised_host, port
        return (self.host if self.host not in WILDCARD_HOSTS else "localhost"), port


# Per-listener keys: listener.name.<listener, lower case>.[<sasl mechanism, lower case>.]<key>
LISTENER_PREFIX = "listener.name."


def parse_listeners(key: str, value: str | None) -> list[Listener]:
    """Parse a comma-separated listener list; names must be unique, ports in 0..65535."""
    if value is None or not value.strip():
        return []
    listeners = [_parse_listener(key, item) for item in _LIST_SEPARATOR.split(value.strip())]
    names = [listener.name for listener in listeners]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError.invalid(key, value, f"Each listener must have a different name, repeated: {duplicates}")
    if key == "listeners":
        ports = [(listener.port, ":" in listener.host) for listener in listeners if listener.port]
        repeated = sorted({port for port, ipv6 in ports if ports.count((port, ipv6)) > 1})
        if repeated:
            raise ConfigError.invalid(key, value, f"Each listener must have a different port, repeated: {repeated}")
    return listeners


def _parse_listener(key: str, text: str) -> Listener:
    match = _LISTENER_PATTERN.fullmatch(text)
    if match is None:
        raise ConfigError.invalid(key, text, "Expected NAME://host:port, e.g. PLAINTEXT://0.0.0.0:9092")
    port = int(match["port"])
    if not 0 <= port <= 65535:
        raise ConfigError.invalid(key, text, "port must be between 0 and 65535")
    host = match["ipv6"] if match["ipv6"] is not None else match["host"]
    return Listener(match["name"].upper(), host, port)


def format_listeners(listeners: Iterable[Listener]) -> str:
    return ",".join(str(listener) for listener in listeners)


def _parse_protocol_map(value: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    protocols: dict[str, str] = {}
    for entry in _LIST_SEPARATOR.split(value.strip()) if value.strip() else []:
        name, _, protocol = entry.partition(":")
        if not name or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid(
                key, value, "Expected NAME:PROTOCOL entries with PROTOCOL in " + ", ".join(SECURITY_PROTOCOLS)
            )
        protocols[name.strip().upper()] = protocol.upper()
    return protocols


def _served_listener_index(listeners: Sequence[Listener], controller_names: Sequence[str]) -> int:
    for index, listener in enumerate(listeners):
        if listener.name not in controller_names:
            return index
    raise ConfigError.invalid("listeners", format_listeners(listeners), "no listener left to serve clients on")


def _controller_listener_names(value: str | None) -> list[str]:
    return [name.upper() for name in parse_value("controller.listener.names", _LIST, value or "")]


# ---------------------------------------------------------------------------------------------
# Topic configs.
# ---------------------------------------------------------------------------------------------


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config overrides (CreateTopics, AlterConfigs) and return them as a plain dict.

    Raises ConfigError (-> INVALID_CONFIG) for unknown names ("Unknown topic config name: x"),
    null values, values that do not parse or fail Kafka's validation, and
    min.compaction.lag.ms > max.compaction.lag.ms.
    """
    unknown = [name for name in configs if name not in TOPIC_CONFIGS]
    if unknown:
        raise ConfigError(f"Unknown topic config name: {unknown[0]}", key=unknown[0])
    nulls = [name for name, value in configs.items() if value is None]
    if nulls:
        raise ConfigError(f"Null value not supported for topic configs: {','.join(nulls)}", key=nulls[0])
    validated = {name: str(value) for name, value in configs.items()}
    typed = parse_topic_configs(validated)
    _check_compaction_lags(typed)
    return validated


def parse_topic_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of topic configs (int, float, bool, list[str], str); raises ConfigError."""
    typed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ConfigError(f"Unknown topic config name: {name}", key=name)
        typed[name] = key.parse(raw)
    return typed


def _check_compaction_lags(typed: Mapping[str, Any]) -> None:
    min_lag = typed.get("min.compaction.lag.ms", int(TOPIC_CONFIGS["min.compaction.lag.ms"].default or 0))
    max_lag = typed.get("max.compaction.lag.ms", int(TOPIC_CONFIGS["max.compaction.lag.ms"].default or 0))
    if min_lag > max_lag:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})",
            key="min.compaction.lag.ms",
            value=min_lag,
        )


# ---------------------------------------------------------------------------------------------
# Dynamic broker configs.
# ---------------------------------------------------------------------------------------------


# Dynamic in Kafka (per broker) but bound at start-up here: the listeners are opened once.
STATIC_HERE = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})


def _dynamic_here(key: str) -> bool:
    known = BROKER_CONFIGS.get(key)
    return (known is not None and not known.read_only and key not in STATIC_HERE
            and known.type is not ConfigType.PASSWORD)  # never stored in the clear


def validate_dynamic_broker_configs(props: Mapping[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validate: keys that need a restart ("Cannot update these configs
    dynamically: Set(...)"), then each value as the key's type and validator would read it.
    Raises ConfigError. Unlike Kafka, which stores unknown keys for custom reconfigurables (and
    listener-prefixed ones, encrypted), an unknown key is refused: it could be a secret."""
    unknown = [key for key in props if key not in BROKER_CONFIGS]
    if unknown:
        raise ConfigError(f"Unknown broker configs, not stored: Set({', '.join(unknown)})")
    static_only = [key for key in props if not _dynamic_here(key)]
    if static_only:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(static_only)})")
    for key, value in props.items():
        BROKER_CONFIGS[key].parse(value)


def _usable_dynamic(props: Mapping[str, str]) -> dict[str, str]:
    usable = {}
    for key, value in props.items():
        known = BROKER_CONFIGS.get(key)
        if known is None or not _dynamic_here(key):
            continue
        try:
            known.parse(value)
        except ConfigError as exc:
            logger.warning("Ignoring the dynamic broker config %s=%s from the metadata store: %s", key, value, exc)
            continue
        usable[key] = value
    return usable


# ---------------------------------------------------------------------------------------------
# BrokerConfig.
# ---------------------------------------------------------------------------------------------

_NO_OVERRIDES: Mapping[str, str] = MappingProxyType({})


class BrokerConfig:
    """Everything the broker is configured with.

    Every broker key's parsed value is an attribute named after it (``num_partitions`` <-
    ``num.partitions``), derived from BROKER_CONFIGS; besides, ``host``/``port``/``listener_name``/
    ``security_protocol`` come from the served listener, ``advertised_host``/``advertised_port`` from
    advertised.listeners, ``data_dirs`` from log.dirs / log.dir (``data_dir``: the first, which also
    holds the broker's own files: meta.properties' cluster, the single node's topics), and ``broker_id`` is broker.id and
    node.id reconciled. ``values`` holds every broker key's effective value as a string (None for
    unset nullable keys) and ``sources`` whether it came from defaults ('DEFAULT_CONFIG') or from
    the file, --set or CLI flags ('STATIC_BROKER_CONFIG') -- what DescribeConfigs reports.

    Build it with ``BrokerConfig.load(...)``, or directly with keyword arguments named like the
    attributes (``BrokerConfig(num_partitions=3, port=0)``, e.g. in tests): they are static configs
    exactly as the same keys given with ``--set`` (host, port, data_dir, broker_id, advertised_host
    and advertised_port act as the CLI flags do), so DescribeConfigs never disagrees with what the
    broker uses.
    """

    host: str
    port: int
    listener_name: str
    security_protocol: str
    advertised_host: str | None
    advertised_port: int | None
    data_dir: Path
    data_dirs: list[Path]
    broker_id: int
    zookeeper_connect: str | None
    values: dict[str, str | None]
    sources: dict[str, str]

    if TYPE_CHECKING:  # the attributes of the other keys are set from the table

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **settings: Any) -> None:
        flags = {name: settings.pop(name) for name in _FLAG_SETTINGS if name in settings}
        listener_settings = settings.pop("listener_settings", _NO_OVERRIDES)
        unknown = sorted(set(settings) - set(_KEY_OF_ATTRIBUTE))
        if unknown:
            raise TypeError(f"BrokerConfig() got unknown settings: {', '.join(unknown)}")
        static = {_KEY_OF_ATTRIBUTE[name]: format_value(value) for name, value in settings.items() if value is not None}
        _apply_cli_flags(static, **flags)
        self._configure(static, listener_settings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokerConfig) and vars(self) == vars(other)

    def __repr__(self) -> str:
        hidden = lambda key: BROKER_CONFIGS[key].type is ConfigType.PASSWORD  # noqa: E731 (never printed)
        static = ", ".join(f"{key}={'[hidden]' if hidden(key) else self.values[key]}" for key in sorted(self.values)
                           if self.sources[key] == STATIC_BROKER_CONFIG)
        return f"BrokerConfig({static})"

    # -- loading --------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        config_file: Path | str | None = None,
        overrides: Mapping[str, str] = _NO_OVERRIDES,
        *,
        host: str | None = None,
        port: int | None = None,
        data_dir: Path | str | None = None,
        broker_id: int | None = None,
        advertised_host: str | None = None,
    ) -> BrokerConfig:
        """Read ``config_file`` (Kafka server.properties), apply ``overrides`` (--set), then the
        explicit CLI flags, which win. Unknown keys are warned about and ignored; bad values raise
        ConfigError."""
        configured: dict[str, str] = {}
        if config_file is not None:
            configured.update(load_properties(config_file))
        configured.update({str(key): str(value) for key, value in overrides.items()})
        listener_settings = {key: value.strip() for key, value in configured.items() if key.startswith(LISTENER_PREFIX)}
        static: dict[str, str | None] = {
            key: value.strip() for key, value in _known_keys_only(configured).items()}
        _apply_cli_flags(
            static, host=host, port=port, data_dir=data_dir, broker_id=broker_id, advertised_host=advertised_host
        )
        config = cls.__new__(cls)
        config._configure(static, listener_settings)
        return config

    def _configure(self, static: Mapping[str, str | None],
                   listener_settings: Mapping[str, str] = _NO_OVERRIDES) -> None:
        values = default_broker_values()
        sources = default_broker_sources()
        for key, value in static.items():
            values[key] = value
            sources[key] = STATIC_BROKER_CONFIG
        typed = {key: BROKER_CONFIGS[key].parse(value) for key, value in values.items()}
        broker_id = _reconcile_broker_and_node_id(values, sources, typed)
        typed["_inter_broker_protocol_set"] = sources["security.inter.broker.protocol"] == STATIC_BROKER_CONFIG
        served, inter_broker = _resolve_listeners(typed)
        del typed["_inter_broker_protocol_set"]
        _check_retention_ms(typed)
        _check_consumer_group_timeouts(typed)
        self.__dict__.update({attribute: typed[key] for attribute, key in _ATTRIBUTE_KEYS.items()})
        first = served[0]
        self.served_listeners = tuple(served)
        self.inter_broker_listener = inter_broker
        self.host = first.host
        self.port = first.port
        self.listener_name = first.name
        self.security_protocol = first.protocol
        self.advertised_host = first.advertised_host
        self.advertised_port = first.advertised_port
        self.listener_settings = _checked_listener_settings(listener_settings, served)
        self.data_dirs = _resolve_log_dirs(typed)
        self.data_dir = self.data_dirs[0]
        self.broker_id = broker_id
        self.zookeeper_connect = typed["zookeeper.connect"] or None
        self.values = values
        self.sources = sources
        self.static_values = dict(values)  # before any dynamic config (server.properties, --set, defaults)
        self.static_sources = dict(sources)
        self.dynamic_broker: dict[str, str] = {}  # /config/brokers/<this id>
        self.dynamic_default: dict[str, str] = {}  # /config/brokers/<default>

    # -- dynamic broker configs -----------------------------------------------------------------

    def apply_dynamic(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> list[str]:
        """Take the dynamic broker configs (AlterConfigs on BROKER resources): for a dynamic key
        the per-broker value wins over the cluster default, which wins over server.properties.
        Keys Kafka cannot change without a restart, unknown keys and bad values are ignored with
        a warning (validate_dynamic_broker_configs refuses them before they are stored). Returns
        the keys whose effective value changed."""
        per_broker, cluster_default = _usable_dynamic(per_broker), _usable_dynamic(cluster_default)
        changed = []
        for key in set(self.dynamic_broker) | set(self.dynamic_default) | set(per_broker) | set(cluster_default):
            if key in per_broker:
                value, source = per_broker[key], DYNAMIC_BROKER_CONFIG
            elif key in cluster_default:
                value, source = cluster_default[key], DYNAMIC_DEFAULT_BROKER_CONFIG
            else:
                value, source = self.static_values[key], self.static_sources[key]
            if self.values[key] != value:
                changed.append(key)
            self.values[key], self.sources[key] = value, source
            setattr(self, BROKER_CONFIGS[key].attribute, BROKER_CONFIGS[key].parse(value))
        self.dynamic_broker, self.dynamic_default = per_broker, cluster_default
        return sorted(changed)

    # -- settings without effect ----------------------------------------------------------------

    def settings_without_effect(self) -> dict[str, str | None]:
        """The keys configured to another value than their default that kafkacompat accepts for
        compatibility but does not act on (``applied=False`` in the table), with their values."""
        defaults = default_broker_values()
        return {
            name: self.values[name]
            for name, key in sorted(BROKER_CONFIGS.items())
            if not key.applied
            and self.sources[name] == STATIC_BROKER_CONFIG
            and key.parse(self.values[name]) != key.parse(defaults[name])
        }

    def warn_about_settings_without_effect(self) -> None:
        """One start-up warning naming what is configured but not done (nothing is silently ignored)."""
        ignored = self.settings_without_effect()
        if ignored:
            logger.warning(
                "These settings are accepted for compatibility but have no effect in kafkacompat: %s",
                ", ".join(f"{name}={value}" for name, value in ignored.items()),
            )

    # -- topic defaults -------------------------------------------------------------------------

    def topic_defaults(self) -> dict[str, str]:
        """Every topic config's default on this broker, as a string (broker synonyms applied with
        Kafka's precedence and unit conversion, e.g. retention.ms from log.retention.*)."""
        return {name: self._topic_default(key)[0] for name, key in TOPIC_CONFIGS.items()}

    def effective_topic_config(self, overrides: Mapping[str, str | None]) -> dict[str, str]:
        """A topic's full config: topic_defaults() with the topic's (validated) overrides on top.
        A None override means 'no override'."""
        effective = self.topic_defaults()
        effective.update({name: value for name, value in overrides.items() if value is not None})
        return effective

    def topic_default_origin(self, topic_key: str) -> tuple[str | None, str]:
        """(broker key that supplied the default or None, its source), for DescribeConfigs of a
        topic config without an override."""
        _, broker_key = self._topic_default(TOPIC_CONFIGS[topic_key])
        if broker_key is None:
            return None, DEFAULT_CONFIG
        return broker_key, self.sources[broker_key]

    def config_synonyms(self, broker_keys: Sequence[str]) -> list[tuple[str, str | None, str]]:
        """DescribeConfigs synonyms, as Kafka orders them: (name, value, source) for every key in
        ``broker_keys`` set statically, then every one with a non-null default."""
        static = [(k, self.values[k], STATIC_BROKER_CONFIG) for k in broker_keys if self.sources[k] != DEFAULT_CONFIG]
        defaults = [
            (k, self.values[k], DEFAULT_CONFIG)
            for k in broker_keys
            if self.sources[k] == DEFAULT_CONFIG and self.values[k] is not None
        ]
        return static + defaults

    def topic_config_synonyms(self, topic_key: str) -> list[tuple[str, str | None, str]]:
        """Broker synonyms of a topic config (add the topic's own override in front yourself)."""
        return self.config_synonyms(TOPIC_CONFIGS[topic_key].broker_keys)

    def _topic_default(self, key: TopicConfigKey) -> tuple[str, str | None]:
        for broker_key, multiplier in key.synonyms:
            raw = self.values.get(broker_key)
            if raw is None:
                continue
            if key.name == "retention.ms":  # Kafka: any negative log.retention.* means unlimited (-1)
                millis = int(raw) * multiplier
                return str(millis if millis >= 0 else -1), broker_key
            return (raw if multiplier == 1 else str(int(raw) * multiplier)), broker_key
        return key.default or "", None

    # -- per-listener settings -----------------------------------------------------------------

    def listener_value(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """The typed value of a security ``key`` on ``listener``, with Kafka's precedence:
        listener.name.<listener>.<mechanism>.<key>, listener.name.<listener>.<key>, then <key>."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        candidates = [f"{prefix}{mechanism.lower()}.{key}"] if mechanism else []
        candidates.append(prefix + key)
        for candidate in candidates:
            if candidate in self.listener_settings:
                return BROKER_CONFIGS[key].parse(self.listener_settings[candidate])
        return BROKER_CONFIGS[key].parse(self.values[key])

    def set_for_listener(self, listener: str, key: str) -> bool:
        """Whether ``key`` is set with the listener.name.<listener>. prefix."""
        return f"{LISTENER_PREFIX}{listener.lower()}.{key}" in self.listener_settings

    # -- addresses ------------------------------------------------------------------------------

    def advertised_endpoint(self) -> tuple[str, int]:
        """(host, port) to publish in Metadata: advertised.listeners, else the listen address, with
        a wildcard listen host replaced by ``localhost``, which is what Kafka's own shipped
        server.properties advertises (the canonical host name Kafka falls back to without it often
        does not resolve on a developer's machine). An advertised port of 0 (from --port 0) means
        "whatever port was bound": ``self.port``."""
        port = self.advertised_port or self.port
        if self.advertised_host:
            return self.advertised_host, port
        if self.host not in WILDCARD_HOSTS:
            return self.host, port
        return "localhost", port


# BrokerConfig keyword arguments that stand for the CLI flags (and advertised.listeners' port).
_FLAG_SETTINGS = ("host", "port", "data_dir", "broker_id", "advertised_host", "advertised_port")
_KEY_OF_ATTRIBUTE: Mapping[str, str] = MappingProxyType({key.attribute: name for name, key in BROKER_CONFIGS.items()})
# Attributes that are more than their key's parse: broker.id with node.id, zookeeper.connect ("" = None).
_RECONCILED_ATTRIBUTES = ("broker_id", "zookeeper_connect")
_ATTRIBUTE_KEYS: Mapping[str, str] = MappingProxyType(
    {attribute: name for attribute, name in _KEY_OF_ATTRIBUTE.items() if attribute not in _RECONCILED_ATTRIBUTES}
)


def _known_keys_only(configured: Mapping[str, str]) -> dict[str, str]:
    known = {}
    for key, value in configured.items():
        if key.startswith(LISTENER_PREFIX):
            continue  # per-listener settings: _checked_listener_settings
        if key in BROKER_CONFIGS:
            known[key] = value
        else:
            logger.warning("Ignoring unknown broker config %r: kafkacompat does not support it", key)
    return known


def _apply_cli_flags(
    static: dict[str, str | None],
    *,
    host: str | None = None,
    port: int | None = None,
    data_dir: Path | str | None = None,
    broker_id: int | None = None,
    advertised_host: str | None = None,
    advertised_port: int | None = None,
) -> None:
    """Write explicit CLI flags over the configured keys they stand for."""
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"Invalid value {port} for --port: port must be between 0 and 65535", key="port", value=port)
    if broker_id is not None:
        static["broker.id"] = str(broker_id)
        if "node.id" in static:
            static["node.id"] = str(broker_id)
    if data_dir is not None:
        static["log.dirs"] = str(data_dir)
    if host is not None or port is not None:
        _override_served_listener(static, host, port)
    if advertised_host is not None or advertised_port is not None:
        _override_advertised(static, advertised_host, advertised_port)


def _served_listener(static: Mapping[str, str | None]) -> tuple[list[Listener], int]:
    listeners = parse_listeners("listeners", static.get("listeners", BROKER_CONFIGS["listeners"].default))
    controller_names = _controller_listener_names(static.get("controller.listener.names"))
    return listeners, _served_listener_index(listeners, controller_names)


def _override_served_listener(static: dict[str, str | None], host: str | None, port: int | None) -> None:
    listeners, index = _served_listener(static)
    current = listeners[index]
    listeners[index] = Listener(
        current.name, current.host if host is None else host, current.port if port is None else port
    )
    static["listeners"] = format_listeners(listeners)


def _override_advertised(static: dict[str, str | None], host: str | None, port: int | None) -> None:
    """The served listener's advertised.listeners entry gets ``host`` and/or ``port`` (added when
    missing: then the other one defaults to the listen port, or to no host, as without it)."""
    listeners, index = _served_listener(static)
    served = listeners[index]
    advertised = parse_listeners("advertised.listeners", static.get("advertised.listeners"))
    for position, listener in enumerate(advertised):
        if listener.name == served.name:
            advertised[position] = Listener(listener.name, listener.host if host is None else host,
                                            listener.port if port is None else port)
            break
    else:
        advertised.append(Listener(served.name, host or "", served.port if port is None else port))
    static["advertised.listeners"] = format_listeners(advertised)


def _reconcile_broker_and_node_id(
    values: dict[str, str | None], sources: dict[str, str], typed: dict[str, Any]
) -> int:
    """broker.id and node.id are synonyms (as in Kafka): one set fills the other; both must agree."""
    broker_id_set = sources["broker.id"] == STATIC_BROKER_CONFIG
    node_id_set = sources["node.id"] == STATIC_BROKER_CONFIG
    if broker_id_set and node_id_set and typed["broker.id"] != typed["node.id"]:
        raise ConfigError.invalid(
            "node.id", values["node.id"], f"must be equal to broker.id ({values['broker.id']}) when both are set"
        )
    source_key = "node.id" if node_id_set and not broker_id_set else "broker.id"
    broker_id = typed[source_key]
    if broker_id < 0:
        raise ConfigError.invalid(
            source_key, broker_id, "kafkacompat does not generate broker ids; set a value of at least 0"
        )
    for key in ("broker.id", "node.id"):
        if typed[key] != broker_id:
            values[key], sources[key], typed[key] = str(broker_id), STATIC_BROKER_CONFIG, broker_id
    return broker_id


def _resolve_listeners(typed: Mapping[str, Any]) -> tuple[list[ServedListener], ServedListener]:
    """(the served listeners, first one first; the inter-broker listener). Listeners named in
    controller.listener.names are not served: kafkacompat has no KRaft controller."""
    listeners = parse_listeners("listeners", typed["listeners"])
    if not listeners:
        raise ConfigError.invalid("listeners", typed["listeners"], "at least one listener is required")
    controller_names = _controller_listener_names(typed["controller.listener.names"])
    _served_listener_index(listeners, controller_names)  # at least one left to serve
    not_served = [str(listener) for listener in listeners if listener.name in controller_names]
    if not_served:
        logger.warning("kafkacompat has no KRaft controller: not serving %s (controller.listener.names)",
                       ", ".join(not_served))
    protocols = _parse_protocol_map(typed["listener.security.protocol.map"])
    served = []
    for listener in listeners:
        if listener.name in controller_names:
            continue
        protocol = protocols.get(listener.name)
        if protocol is None:
            raise ConfigError.invalid(
                "listener.security.protocol.map",
                typed["listener.security.protocol.map"],
                f"No security protocol defined for listener {listener.name}",
            )
        advertised = _advertised_for(listener, listeners, typed["advertised.listeners"])
        served.append(ServedListener(listener.name, listener.host or "0.0.0.0", listener.port, protocol,
                                     (advertised.host or None) if advertised else None,
                                     advertised.port if advertised else None))
    return served, _inter_broker_listener(typed, served)


def _inter_broker_listener(typed: Mapping[str, Any], served: Sequence[ServedListener]) -> ServedListener:
    """inter.broker.listener.name, else the listener named like security.inter.broker.protocol
    (Kafka's rule); with neither set nor a PLAINTEXT listener, the first listener."""
    by_name = {listener.name: listener for listener in served}
    name = typed["inter.broker.listener.name"]
    if name:
        if typed.get("_inter_broker_protocol_set"):
            raise ConfigError.invalid("inter.broker.listener.name", name,
                                      "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                                      "should be set.")
        if name.upper() not in by_name:
            raise ConfigError.invalid(
                "inter.broker.listener.name", name,
                "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
                f"options based on currently configured listeners are {','.join(by_name)}")
        return by_name[name.upper()]
    protocol = typed["security.inter.broker.protocol"]
    if protocol in by_name:
        return by_name[protocol]
    if typed.get("_inter_broker_protocol_set"):
        raise ConfigError.invalid(
            "security.inter.broker.protocol", protocol,
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
            f"options based on currently configured listeners are {','.join(by_name)}")
    return served[0]


def _advertised_for(served: Listener, listeners: Sequence[Listener], value: str | None) -> Listener | None:
    advertised = parse_listeners("advertised.listeners", value)
    names = {listener.name for listener in listeners}
    for listener in advertised:
        if listener.name not in names:
            raise ConfigError.invalid(
                "advertised.listeners", value, f"listener {listener.name} is not defined in listeners"
            )
        if listener.host == "0.0.0.0":
            raise ConfigError.invalid(
                "advertised.listeners", value, "cannot use the nonroutable meta-address 0.0.0.0"
            )
    return next((listener for listener in advertised if listener.name == served.name), None)


_MECHANISM_PREFIX = re.compile(r"(?:gssapi|plain|scram-sha-256|scram-sha-512|oauthbearer)\.")


def _checked_listener_settings(settings: Mapping[str, str], served: Sequence[ServedListener]) -> dict[str, str]:
    """The listener.name.<listener>.[<mechanism>.]<key> settings whose listener is served and whose
    key is a broker key (each value validated as that key); others are warned about and ignored."""
    names = {listener.name.lower() for listener in served}
    checked = {}
    for setting, value in settings.items():
        listener, _, key = setting[len(LISTENER_PREFIX):].partition(".")
        mechanism = _MECHANISM_PREFIX.match(key)
        base_key = key[mechanism.end():] if mechanism else key
        if listener not in names or base_key not in BROKER_CONFIGS:
            logger.warning("Ignoring %r: %s", setting, f"no listener {listener.upper()} is served"
                           if listener not in names else f"{base_key!r} is not a broker config kafkacompat knows")
            continue
        try:
            BROKER_CONFIGS[base_key].parse(value)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace(base_key, setting, 1), key=setting, value=value) from None
        checked[setting] = value
    return checked


def _resolve_log_dirs(typed: Mapping[str, Any]) -> list[Path]:
    """log.dirs (comma-separated), else log.dir; as Kafka, the same directory twice is refused."""
    key = "log.dirs" if typed["log.dirs"] is not None else "log.dir"
    directories = [d.strip() for d in parse_value(key, _LIST, typed[key]) if d.strip()]
    if not directories:
        raise ConfigError.invalid(key, typed[key], "at least one log directory is required")
    seen: dict[str, str] = {}
    for directory in directories:
        canonical = os.path.realpath(directory)
        if canonical in seen:
            raise ConfigError.invalid(key, typed[key], f"duplicate log directory: {seen[canonical]} and "
                                                       f"{directory} are the same directory")
        seen[canonical] = directory
    return [Path(directory) for directory in directories]


def _check_consumer_group_timeouts(typed: Mapping[str, Any]) -> None:
    """Kafka's GroupCoordinatorConfig checks: each consumer group interval within its min/max,
    and the heartbeat interval below the session timeout."""
    for kind in ("heartbeat.interval", "session.timeout"):
        value = typed[f"group.consumer.{kind}.ms"]
        low, high = typed[f"group.consumer.min.{kind}.ms"], typed[f"group.consumer.max.{kind}.ms"]
        if high < low:
            raise ConfigError.invalid(f"group.consumer.max.{kind}.ms", high,
                                      f"must be greater than or equal to group.consumer.min.{kind}.ms ({low})")
        if not low <= value <= high:
            raise ConfigError.invalid(f"group.consumer.{kind}.ms", value,
                                      f"must be between group.consumer.min.{kind}.ms ({low}) and "
                                      f"group.consumer.max.{kind}.ms ({high})")
    if typed["group.consumer.heartbeat.interval.ms"] >= typed["group.consumer.session.timeout.ms"]:
        raise ConfigError.invalid("group.consumer.heartbeat.interval.ms", typed["group.consumer.heartbeat.interval.ms"],
                                  "must be less than group.consumer.session.timeout.ms")


def _check_retention_ms(typed: Mapping[str, Any]) -> None:
    """Kafka: the effective log retention must be -1 (unlimited) or at least 1 ms."""
    for key, multiplier in TOPIC_CONFIGS["retention.ms"].synonyms:
        if typed[key] is not None:
            if typed[key] * multiplier == 0:
                raise ConfigError.invalid(key, typed[key], "log retention must be unlimited (-1) or at least 1 ms")
            return

