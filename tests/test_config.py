"""Tests for kafkacompat.config (server.properties, BrokerConfig, topic configs) and kafkacompat.cli."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kafkacompat import cli
from kafkacompat.config import (
    BROKER_CONFIGS,
    DEFAULT_CONFIG,
    KAFKACOMPAT_DEFAULTS,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    Listener,
    broker_config_synonyms,
    parse_listeners,
    parse_properties,
    parse_topic_configs,
    validate_topic_configs,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def write_properties(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text(text, encoding="utf-8")
    return path


# -- Java properties syntax ---------------------------------------------------------------------


def test_properties_comments_and_blank_lines_are_skipped() -> None:
    text = "# a comment\n! another comment\n   # indented comment\n\n   \nkey=value\n"
    assert parse_properties(text) == {"key": "value"}


@pytest.mark.parametrize(
    "line, expected",
    [
        ("key=value", {"key": "value"}),
        ("key = value", {"key": "value"}),
        ("key:value", {"key": "value"}),
        ("key : value", {"key": "value"}),
        ("key value", {"key": "value"}),
        ("key \t  value", {"key": "value"}),
        ("   key=value", {"key": "value"}),
        ("key=", {"key": ""}),
        ("key", {"key": ""}),
        ("key==value", {"key": "=value"}),
        ("key = :value", {"key": ":value"}),
        ("key=a=b:c d", {"key": "a=b:c d"}),
        ("key=value with trailing space  ", {"key": "value with trailing space  "}),
        ("listeners=PLAINTEXT://:9092", {"listeners": "PLAINTEXT://:9092"}),
    ],
)
def test_properties_key_value_separators(line: str, expected: dict[str, str]) -> None:
    assert parse_properties(line) == expected


def test_properties_line_continuations() -> None:
    text = "listeners=PLAINTEXT://a:1,\\\n          PLAINTEXT2://b:2\nnext=1\n"
    assert parse_properties(text) == {"listeners": "PLAINTEXT://a:1,PLAINTEXT2://b:2", "next": "1"}


def test_properties_continuation_edge_cases() -> None:
    # An even number of trailing backslashes is an escaped backslash, not a continuation.
    assert parse_properties("path=c:\\\\\nnext=1") == {"path": "c:\\", "next": "1"}
    # A comment line ending in a backslash does not swallow the next line.
    assert parse_properties("# comment \\\nkey=value") == {"key": "value"}
    # A continued line starting with '#' is value text, not a comment.
    assert parse_properties("key=a\\\n  #b") == {"key": "a#b"}
    # A trailing backslash at end of input is dropped.
    assert parse_properties("key=value\\") == {"key": "value"}
    # Windows and old-Mac line endings.
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_properties_escapes() -> None:
    text = (
        "tab=a\\tb\n"
        "newline=a\\nb\n"
        "unicode=caf\\u00e9\n"
        "key\\ with\\ spaces=1\n"
        "key\\=with\\:separators=2\n"
        "backslash=a\\\\b\n"
        "other=\\q\\#\n"
    )
    assert parse_properties(text) == {
        "tab": "a\tb",
        "newline": "a\nb",
        "unicode": "café",
        "key with spaces": "1",
        "key=with:separators": "2",
        "backslash": "a\\b",
        "other": "q#",
    }


def test_properties_malformed_unicode_escape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="uxxxx"):
        parse_properties("key=\\u12G4")


def test_properties_last_duplicate_wins() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


# -- defaults -----------------------------------------------------------------------------------

KAFKA_BROKER_DEFAULTS = {
    "broker.id": "-1",
    "node.id": "-1",
    "listeners": "PLAINTEXT://:9092",
    "advertised.listeners": None,
    "log.dirs": None,
    "log.dir": "/tmp/kafka-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "socket.request.max.bytes": "104857600",
    "message.max.bytes": "1048588",
    "replica.fetch.max.bytes": "1048576",
    "log.segment.bytes": "1073741824",
    "log.roll.ms": None,
    "log.roll.hours": "168",
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": "9223372036854775807",
    "log.segment.delete.delay.ms": "60000",
    "log.cleanup.policy": "delete",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.message.timestamp.type": "CreateTime",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.retention.minutes": "10080",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.max.size": "2147483647",
    "transactional.id.expiration.ms": "604800000",
    "producer.id.expiration.ms": "86400000",
    "replica.lag.time.max.ms": "30000",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "compression.type": "producer",
    "zookeeper.connect": None,
    "zookeeper.session.timeout.ms": "18000",
    "broker.rack": None,
    "queued.max.requests": "500",
    "connections.max.idle.ms": "600000",
    "transaction.state.log.min.isr": "2",
    "fetch.max.bytes": "57671680",
}


@pytest.mark.parametrize("key, kafka_default", sorted(KAFKA_BROKER_DEFAULTS.items()))
def test_broker_table_defaults_are_kafkas(key: str, kafka_default: str | None) -> None:
    assert BROKER_CONFIGS[key].default == kafka_default


def test_only_documented_defaults_differ_from_kafka() -> None:
    config = BrokerConfig.load()
    differing = {key for key, value in config.values.items() if value != BROKER_CONFIGS[key].default}
    assert differing == set(KAFKACOMPAT_DEFAULTS) == {"broker.id", "node.id", "log.dir"}
    assert config.broker_id == 0
    assert config.data_dir == Path("data")


def test_loaded_defaults() -> None:
    config = BrokerConfig.load()
    assert (config.host, config.port) == ("0.0.0.0", 9092)
    assert (config.advertised_host, config.advertised_port) == (None, None)
    assert config.listener_name == config.security_protocol == "PLAINTEXT"
    assert config.num_partitions == 1
    assert config.default_replication_factor == 1
    assert config.auto_create_topics_enable is True
    assert config.delete_topic_enable is True
    assert config.socket_request_max_bytes == 104857600
    assert config.message_max_bytes == 1048588
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_topic_replication_factor == 3
    assert config.offsets_retention_minutes == 10080
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.zookeeper_connect is None
    assert set(config.sources.values()) == {DEFAULT_CONFIG}
    assert set(config.values) == set(BROKER_CONFIGS)


def test_dataclass_defaults_equal_loaded_defaults() -> None:
    assert BrokerConfig() == BrokerConfig.load()


KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "3600000",  # Kafka 4.x (KIP-1030); 3.x: Long.MAX_VALUE
}


def test_topic_defaults_from_default_broker_config_are_kafkas() -> None:
    defaults = BrokerConfig.load().topic_defaults()
    assert set(defaults) == set(TOPIC_CONFIGS)
    for key, kafka_default in KAFKA_TOPIC_DEFAULTS.items():
        assert defaults[key] == kafka_default, key
    # Kafka keeps LogConfig's own defaults in step with the broker's; so do we.
    assert defaults == {name: key.default for name, key in TOPIC_CONFIGS.items()}


def test_tables_are_consistent() -> None:
    for name, key in BROKER_CONFIGS.items():
        assert key.name == name
        key.parse(key.default)  # every default parses and passes its own validation
        assert key.importance in ("high", "medium", "low") and key.doc
    for name, key in TOPIC_CONFIGS.items():
        assert key.name == name
        key.parse(key.default)
        for broker_key in key.broker_keys:
            assert BROKER_CONFIGS[broker_key].topic_config == name
    assert BROKER_CONFIGS["log.retention.minutes"].topic_config == "retention.ms"
    assert BROKER_CONFIGS["log.roll.hours"].topic_config == "segment.ms"
    assert BROKER_CONFIGS["message.max.bytes"].topic_config == "max.message.bytes"
    assert BROKER_CONFIGS["num.partitions"].topic_config is None
    assert BROKER_CONFIGS["log.segment.bytes"].read_only is False
    assert BROKER_CONFIGS["broker.id"].read_only is True
    assert BROKER_CONFIGS["log.cleanup.policy"].type is ConfigType.LIST
    assert ConfigType.LONG.value == 5  # DescribeConfigs configType id


def test_every_typed_attribute_default_matches_the_table() -> None:
    from kafkacompat.config import _ATTRIBUTE_KEYS

    config = BrokerConfig()
    assert len(_ATTRIBUTE_KEYS) > 60
    for attribute, key in _ATTRIBUTE_KEYS.items():
        expected = BROKER_CONFIGS[key].parse(KAFKACOMPAT_DEFAULTS.get(key, BROKER_CONFIGS[key].default))
        assert getattr(config, attribute) == expected, attribute


# -- precedence: file < --set < CLI flags ---------------------------------------------------------


def test_file_values_are_loaded_and_marked_static(tmp_path: Path) -> None:
    path = write_properties(tmp_path, "num.partitions=4\nauto.create.topics.enable = false\n")
    config = BrokerConfig.load(path)
    assert config.num_partitions == 4
    assert config.auto_create_topics_enable is False
    assert config.values["num.partitions"] == "4"
    assert config.sources["num.partitions"] == STATIC_BROKER_CONFIG
    assert config.sources["default.replication.factor"] == DEFAULT_CONFIG


def test_set_overrides_the_file_and_flags_override_both(tmp_path: Path) -> None:
    path = write_properties(
        tmp_path,
        "num.partitions=4\nlisteners=PLAINTEXT://127.0.0.1:9000\nbroker.id=1\nlog.dirs=/from/file\n",
    )
    overrides = {"num.partitions": "5", "listeners": "PLAINTEXT://127.0.0.1:9001", "broker.id": "2"}
    assert BrokerConfig.load(path).port == 9000
    with_set = BrokerConfig.load(path, overrides)
    assert (with_set.num_partitions, with_set.port, with_set.broker_id) == (5, 9001, 2)
    with_flags = BrokerConfig.load(path, overrides, port=9002, broker_id=3, data_dir=tmp_path / "d", host="::1")
    assert with_flags.num_partitions == 5
    assert (with_flags.host, with_flags.port) == ("::1", 9002)
    assert with_flags.broker_id == 3
    assert with_flags.data_dir == tmp_path / "d"
    assert with_flags.values["listeners"] == "PLAINTEXT://[::1]:9002"
    assert with_flags.values["broker.id"] == "3"
    assert with_flags.values["log.dirs"] == str(tmp_path / "d")
    assert with_flags.sources["listeners"] == STATIC_BROKER_CONFIG


def test_flags_alone_are_static_configs() -> None:
    config = BrokerConfig.load(port=19092, broker_id=4)
    assert config.port == 19092 and config.host == "0.0.0.0"
    assert config.values["listeners"] == "PLAINTEXT://:19092"
    assert config.sources["listeners"] == config.sources["broker.id"] == STATIC_BROKER_CONFIG
    assert config.values["node.id"] == "4"


def test_values_are_trimmed(tmp_path: Path) -> None:
    config = BrokerConfig.load(write_properties(tmp_path, "num.partitions=7   \n"))
    assert config.num_partitions == 7
    assert config.values["num.partitions"] == "7"


# -- listeners ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "listeners, host, port",
    [
        ("PLAINTEXT://0.0.0.0:9092", "0.0.0.0", 9092),
        ("PLAINTEXT://:9093", "0.0.0.0", 9093),
        ("PLAINTEXT://localhost:0", "localhost", 0),
        ("plaintext://10.1.2.3:9094", "10.1.2.3", 9094),
        ("PLAINTEXT://[::1]:9095", "::1", 9095),
    ],
)
def test_listeners_give_host_and_port(listeners: str, host: str, port: int) -> None:
    config = BrokerConfig.load(overrides={"listeners": listeners})
    assert (config.host, config.port, config.listener_name) == (host, port, "PLAINTEXT")


def test_advertised_listeners_give_advertised_host_and_port() -> None:
    config = BrokerConfig.load(
        overrides={"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://kafka.example:19092"}
    )
    assert (config.advertised_host, config.advertised_port) == ("kafka.example", 19092)
    assert config.advertised_endpoint() == ("kafka.example", 19092)


def test_advertised_endpoint_falls_back_to_the_listen_address() -> None:
    assert BrokerConfig.load(host="127.0.0.1", port=9500).advertised_endpoint() == ("127.0.0.1", 9500)
    host, port = BrokerConfig.load().advertised_endpoint()
    assert host not in ("", "0.0.0.0") and port == 9092


def test_advertised_host_flag() -> None:
    config = BrokerConfig.load(port=9100, advertised_host="public.example")
    assert (config.advertised_host, config.advertised_port) == ("public.example", 9100)
    assert config.values["advertised.listeners"] == "PLAINTEXT://public.example:9100"
    # The flag keeps an explicitly advertised port (e.g. behind NAT) and replaces only the host.
    config = BrokerConfig.load(
        overrides={"advertised.listeners": "PLAINTEXT://inside:29092"}, advertised_host="outside"
    )
    assert (config.advertised_host, config.advertised_port) == ("outside", 29092)


def test_named_listeners_with_a_controller_listener(caplog: pytest.LogCaptureFixture) -> None:
    overrides = {
        "listeners": "CONTROLLER://:9093,CLIENT://127.0.0.1:9092",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        "advertised.listeners": "CLIENT://broker1:9092",
    }
    with caplog.at_level(logging.WARNING, logger="kafkacompat.config"):
        config = BrokerConfig.load(overrides=overrides, port=9300)
    assert (config.listener_name, config.security_protocol) == ("CLIENT", "SASL_PLAINTEXT")
    assert (config.host, config.port) == ("127.0.0.1", 9300)
    assert config.values["listeners"] == "CONTROLLER://:9093,CLIENT://127.0.0.1:9300"
    assert config.advertised_host == "broker1"
    assert "CONTROLLER://:9093" in caplog.text


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"listeners": "PLAINTEXT:/localhost:9092"}, "listeners"),
        ({"listeners": "PLAINTEXT://localhost"}, "listeners"),
        ({"listeners": "PLAINTEXT://localhost:99999"}, "listeners"),
        ({"listeners": "PLAINTEXT://localhost:-1"}, "listeners"),
        ({"listeners": ""}, "listeners"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listeners"),
        ({"listeners": "PLAINTEXT://:9092,SSL://127.0.0.1:9092"}, "listeners"),
        ({"listeners": "INTERNAL://:9092"}, "listener.security.protocol.map"),
        ({"advertised.listeners": "OTHER://host:1"}, "advertised.listeners"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners"),
    ],
)
def test_bad_listeners_are_config_errors(overrides: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.load(overrides=overrides)
    assert caught.value.key == key
    assert key in str(caught.value)


def test_parse_listeners_round_trip() -> None:
    listeners = parse_listeners("listeners", "PLAINTEXT://:9092, SSL://[fe80::1]:9093")
    assert listeners == [Listener("PLAINTEXT", "", 9092), Listener("SSL", "fe80::1", 9093)]
    assert [str(listener) for listener in listeners] == ["PLAINTEXT://:9092", "SSL://[fe80::1]:9093"]


# -- log dirs -----------------------------------------------------------------------------------


def test_log_dirs_wins_over_log_dir_and_every_dir_is_used() -> None:
    assert BrokerConfig.load(overrides={"log.dir": "/one"}).data_dirs == [Path("/one")]
    config = BrokerConfig.load(overrides={"log.dir": "/one", "log.dirs": "/two, /three"})
    assert config.data_dirs == [Path("/two"), Path("/three")]
    assert config.data_dir == Path("/two")  # the broker's own files (meta.properties' cluster, topics)


def test_the_same_log_dir_twice_is_a_config_error(tmp_path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="duplicate log directory"):
        BrokerConfig.load(overrides={"log.dirs": f"{tmp_path / 'real'},{tmp_path / 'link'}"})


def test_empty_log_dirs_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="log.dirs"):
        BrokerConfig.load(overrides={"log.dirs": " , "})


# -- retention and other topic defaults derived from broker keys ----------------------------------


@pytest.mark.parametrize(
    "overrides, retention_ms, origin",
    [
        ({}, "604800000", "log.retention.hours"),
        ({"log.retention.hours": "1"}, "3600000", "log.retention.hours"),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, "120000", "log.retention.minutes"),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"}, "3", "log.retention.ms"),
        ({"log.retention.minutes": "2", "log.retention.ms": "-1"}, "-1", "log.retention.ms"),
        ({"log.retention.hours": "-1"}, "-1", "log.retention.hours"),
        ({"log.retention.minutes": "-5"}, "-1", "log.retention.minutes"),
    ],
)
def test_retention_ms_precedence(overrides: dict[str, str], retention_ms: str, origin: str) -> None:
    config = BrokerConfig.load(overrides=overrides)
    assert config.topic_defaults()["retention.ms"] == retention_ms
    assert config.topic_default_origin("retention.ms")[0] == origin


def test_zero_retention_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="log.retention.minutes"):
        BrokerConfig.load(overrides={"log.retention.minutes": "0"})


def test_topic_defaults_follow_broker_synonyms() -> None:
    config = BrokerConfig.load(
        overrides={
            "log.segment.bytes": "1048576",
            "log.roll.hours": "2",
            "log.flush.interval.ms": "1000",
            "message.max.bytes": "2000000",
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "log.index.size.max.bytes": "4096",
            "log.message.timestamp.type": "LogAppendTime",
            "min.insync.replicas": "2",
        }
    )
    defaults = config.topic_defaults()
    assert defaults["segment.bytes"] == "1048576"
    assert defaults["segment.ms"] == str(2 * 3600 * 1000)
    assert defaults["flush.ms"] == "1000"
    assert defaults["max.message.bytes"] == "2000000"
    assert defaults["cleanup.policy"] == "compact"
    assert defaults["min.cleanable.dirty.ratio"] == "0.25"
    assert defaults["segment.index.bytes"] == "4096"
    assert defaults["message.timestamp.type"] == "LogAppendTime"
    assert defaults["min.insync.replicas"] == "2"
    assert BrokerConfig.load(overrides={"log.roll.ms": "5", "log.roll.hours": "2"}).topic_defaults()["segment.ms"] == "5"


def test_topic_default_origin_and_synonyms() -> None:
    config = BrokerConfig.load(overrides={"log.retention.minutes": "10"})
    assert config.topic_default_origin("retention.ms") == ("log.retention.minutes", STATIC_BROKER_CONFIG)
    assert config.topic_default_origin("segment.bytes") == ("log.segment.bytes", DEFAULT_CONFIG)
    assert config.topic_default_origin("remote.storage.enable") == (None, DEFAULT_CONFIG)
    assert config.topic_config_synonyms("retention.ms") == [
        ("log.retention.minutes", "10", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]
    assert broker_config_synonyms("log.retention.minutes") == ["log.retention.minutes", "log.retention.hours"]
    assert broker_config_synonyms("num.partitions") == ["num.partitions"]


def test_effective_topic_config() -> None:
    config = BrokerConfig.load(overrides={"log.segment.bytes": "2000000"})
    effective = config.effective_topic_config({"retention.ms": "1000", "cleanup.policy": None})
    assert effective["retention.ms"] == "1000"
    assert effective["segment.bytes"] == "2000000"
    assert effective["cleanup.policy"] == "delete"
    typed = parse_topic_configs(effective)
    assert typed["retention.ms"] == 1000 and typed["cleanup.policy"] == ["delete"]
    assert typed["min.cleanable.dirty.ratio"] == 0.5 and typed["preallocate"] is False


# -- unknown and malformed broker keys ------------------------------------------------------------


def test_unknown_keys_are_warned_about_and_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_properties(tmp_path, "num.partitions=2\nno.such.setting=1\n")
    with caplog.at_level(logging.WARNING, logger="kafkacompat.config"):
        config = BrokerConfig.load(path, {"another.unknown": "x"})
    assert config.num_partitions == 2
    assert "no.such.setting" not in config.values and "another.unknown" not in config.values
    warned = [r.getMessage() for r in caplog.records if r.name == "kafkacompat.config"]
    assert any("no.such.setting" in message for message in warned)
    assert any("another.unknown" in message for message in warned)


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("num.partitions", "abc", "Not a number of type INT"),
        ("num.partitions", "0", "at least 1"),
        ("num.partitions", "1.5", "Not a number of type INT"),
        ("message.max.bytes", "99999999999", "Not a number of type INT"),
        ("log.retention.bytes", "lots", "Not a number of type LONG"),
        ("auto.create.topics.enable", "yes", "either true or false"),
        ("log.cleanup.policy", "delete,shred", "compact, delete"),
        ("compression.type", "brotli", "uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("log.message.timestamp.type", "Now", "CreateTime, LogAppendTime"),
        ("log.segment.bytes", "13", "at least 14"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "no more than 1"),
        ("offsets.topic.replication.factor", "40000", "Not a number of type SHORT"),
        ("broker.id", "-1", "does not generate broker ids"),
    ],
)
def test_malformed_values_raise_config_error_naming_the_key(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.load(overrides={key: value})
    message = str(caught.value)
    assert key in message and value.split(",")[-1] in message and expected in message
    assert caught.value.key == key


def test_malformed_file_value_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Invalid value abc for configuration num.partitions"):
        BrokerConfig.load(write_properties(tmp_path, "num.partitions=abc\n"))


def test_negative_port_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--port"):
        BrokerConfig.load(port=-1)


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read config file"):
        BrokerConfig.load(tmp_path / "missing.properties")


def test_broker_id_and_node_id_are_synonyms() -> None:
    assert BrokerConfig.load(overrides={"node.id": "5"}).broker_id == 5
    config = BrokerConfig.load(overrides={"broker.id": "6"})
    assert config.values["node.id"] == "6"
    with pytest.raises(ConfigError, match="node.id"):
        BrokerConfig.load(overrides={"broker.id": "1", "node.id": "2"})
    assert BrokerConfig.load(overrides={"broker.id": "1", "node.id": "2"}, broker_id=9).broker_id == 9


KAFKA_SAMPLE_SERVER_PROPERTIES = """\
############################# Server Basics #############################
# The id of the broker. This must be set to a unique integer for each broker.
broker.id=0

############################# Socket Server Settings #############################
#listeners=PLAINTEXT://:9092
#advertised.listeners=PLAINTEXT://your.host.name:9092
#listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000

############################# Zookeeper #############################
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000

############################# Group Coordinator Settings #############################
group.initial.rebalance.delay.ms=0
"""


def test_kafkas_sample_server_properties_loads_without_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_properties(tmp_path, KAFKA_SAMPLE_SERVER_PROPERTIES.format(log_dirs=tmp_path / "kafka-logs"))
    with caplog.at_level(logging.WARNING, logger="kafkacompat.config"):
        config = BrokerConfig.load(path)
    assert caplog.records == []
    assert config.data_dir == tmp_path / "kafka-logs"
    assert config.zookeeper_connect == "localhost:2181"
    assert config.zookeeper_connection_timeout_ms == 18000
    assert config.offsets_topic_replication_factor == 1
    assert config.transaction_state_log_min_isr == 1
    assert config.group_initial_rebalance_delay_ms == 0
    assert (config.host, config.port) == ("0.0.0.0", 9092)


# -- directly constructed BrokerConfig ------------------------------------------------------------


def test_direct_construction_keeps_values_in_step(tmp_path: Path) -> None:
    config = BrokerConfig(port=0, host="127.0.0.1", data_dir=tmp_path, num_partitions=3, broker_id=2)
    assert config.values["listeners"] == "PLAINTEXT://127.0.0.1:0"
    assert config.values["log.dirs"] == str(tmp_path)
    assert config.values["num.partitions"] == "3"
    assert config.values["broker.id"] == config.values["node.id"] == "2"
    assert config.sources["num.partitions"] == STATIC_BROKER_CONFIG
    assert config.sources["default.replication.factor"] == DEFAULT_CONFIG
    advertised = BrokerConfig(advertised_host="public", advertised_port=1234)
    assert advertised.values["advertised.listeners"] == "PLAINTEXT://public:1234"


def test_direct_construction_is_the_same_as_set() -> None:
    direct = BrokerConfig(num_partitions=3, log_cleaner_enable=False, zookeeper_connect="zk:2181", port=0)
    loaded = BrokerConfig.load(None, {"num.partitions": "3", "log.cleaner.enable": "false",
                                      "zookeeper.connect": "zk:2181"}, port=0)
    assert direct == loaded
    assert (direct.num_partitions, direct.log_cleaner_enable, direct.zookeeper_connect) == (3, False, "zk:2181")
    with pytest.raises(TypeError, match="num_partition"):
        BrokerConfig(num_partition=3)
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig(num_partitions=0)  # validated like any configured value


def test_every_broker_key_is_an_attribute() -> None:
    config = BrokerConfig.load(None, {"log.cleaner.io.buffer.load.factor": "0.5", "num.io.threads": "16"})
    for name, key in BROKER_CONFIGS.items():
        assert hasattr(config, key.attribute), name
    assert (config.log_cleaner_io_buffer_load_factor, config.num_io_threads) == (0.5, 16)


# -- accepted but not applied -------------------------------------------------------------------


def test_settings_without_effect_are_the_non_default_ones_the_table_marks() -> None:
    config = BrokerConfig.load(None, {
        "num.io.threads": "16",  # not applied, not the default
        "num.network.threads": "3",  # not applied, but the default
        "socket.send.buffer.bytes": " 65536",
        "log.preallocate": "true",  # its topic config (preallocate) is not applied
        "num.partitions": "4",  # applied
        "log.flush.interval.messages": "1",  # applied (flush.messages)
    })
    assert config.settings_without_effect() == {
        "log.preallocate": "true", "num.io.threads": "16", "socket.send.buffer.bytes": "65536",
    }
    assert BrokerConfig.load().settings_without_effect() == {}
    assert not BROKER_CONFIGS["log.preallocate"].applied and not TOPIC_CONFIGS["preallocate"].applied
    assert BROKER_CONFIGS["log.cleaner.io.buffer.load.factor"].applied
    assert BROKER_CONFIGS["log.flush.scheduler.interval.ms"].applied and TOPIC_CONFIGS["flush.ms"].applied


def test_one_start_up_warning_names_them(caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig.load(None, {"num.io.threads": "16", "num.replica.fetchers": "2"})
    with caplog.at_level(logging.WARNING, logger="kafkacompat.config"):
        config.warn_about_settings_without_effect()
        BrokerConfig.load().warn_about_settings_without_effect()
    assert [record.getMessage() for record in caplog.records] == [
        "These settings are accepted for compatibility but have no effect in kafkacompat: "
        "num.io.threads=16, num.replica.fetchers=2"
    ]


def test_several_listeners_are_all_served_with_their_protocols() -> None:
    config = BrokerConfig.load(None, {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://:9093,INTERNAL://127.0.0.1:9094",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SASL_SSL",
        "advertised.listeners": "SSL://public.example:19093",
        "inter.broker.listener.name": "internal",
    })
    assert [(l.name, l.protocol, l.port) for l in config.served_listeners] == [
        ("PLAINTEXT", "PLAINTEXT", 9092), ("SSL", "SSL", 9093), ("INTERNAL", "SASL_SSL", 9094)]
    assert config.served_listeners[1].advertised(9093) == ("public.example", 19093)
    assert config.served_listeners[2].advertised(9094) == ("127.0.0.1", 9094)
    assert config.inter_broker_listener.name == "INTERNAL"
    assert (config.listener_name, config.port) == ("PLAINTEXT", 9092)


def test_the_inter_broker_listener_follows_security_inter_broker_protocol() -> None:
    config = BrokerConfig.load(None, {"listeners": "PLAINTEXT://:9092,SASL_SSL://:9093",
                                      "security.inter.broker.protocol": "SASL_SSL"})
    assert config.inter_broker_listener.name == "SASL_SSL"
    with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name"):
        BrokerConfig.load(None, {"listeners": "PLAINTEXT://:9092,SASL_SSL://:9093",
                                 "security.inter.broker.protocol": "SASL_SSL",
                                 "inter.broker.listener.name": "SASL_SSL"})
    with pytest.raises(ConfigError, match="valid options based on currently configured listeners are PLAINTEXT"):
        BrokerConfig.load(None, {"inter.broker.listener.name": "OTHER"})


def test_per_listener_keys_take_precedence(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kafkacompat.config"):
        config = BrokerConfig.load(None, {
            "listeners": "SSL://:9093,MTLS://:9094,SASL_SSL://:9095",
            "listener.security.protocol.map": "SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL",
            "ssl.client.auth": "none",
            "listener.name.mtls.ssl.client.auth": "required",
            "sasl.jaas.config": "global",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": "plain-only",
            "listener.name.nosuch.ssl.client.auth": "required",
        })
    assert config.listener_value("MTLS", "ssl.client.auth") == "required"
    assert config.listener_value("SSL", "ssl.client.auth") == "none"
    assert config.listener_value("SASL_SSL", "sasl.jaas.config", "PLAIN") == "plain-only"
    assert config.listener_value("SASL_SSL", "sasl.jaas.config", "SCRAM-SHA-256") == "global"
    assert "listener.name.nosuch.ssl.client.auth" in caplog.text
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.load(None, {"listener.name.plaintext.ssl.client.auth": "sometimes"})
    assert caught.value.key == "listener.name.plaintext.ssl.client.auth"


# -- topic config validation ----------------------------------------------------------------------


def test_valid_topic_configs_are_returned() -> None:
    configs = {
        "cleanup.policy": "compact,delete",
        "compression.type": "zstd",
        "retention.ms": "-1",
        "segment.bytes": "14",
        "min.cleanable.dirty.ratio": "0",
        "message.timestamp.type": "LogAppendTime",
        "min.insync.replicas": "2",
        "max.message.bytes": "5242880",
        "unclean.leader.election.enable": "TRUE",
        "leader.replication.throttled.replicas": "0:1,1:2",
        "follower.replication.throttled.replicas": "*",
    }
    assert validate_topic_configs(configs) == configs
    assert validate_topic_configs({}) == {}
    assert validate_topic_configs({"cleanup.policy": ""}) == {"cleanup.policy": ""}


def test_unknown_topic_config_is_rejected_like_kafka() -> None:
    with pytest.raises(ConfigError, match="^Unknown topic config name: retention.hours$"):
        validate_topic_configs({"retention.ms": "1", "retention.hours": "1"})


def test_null_topic_config_value_is_rejected() -> None:
    with pytest.raises(ConfigError, match="Null value not supported for topic configs: retention.ms"):
        validate_topic_configs({"retention.ms": None})


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.bytes", "1GB", "Not a number of type INT"),
        ("cleanup.policy", "compact,bogus", "String must be one of: compact, delete"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("compression.type", "GZIP", "String must be one of"),
        ("message.timestamp.type", "Whenever", "String must be one of: CreateTime, LogAppendTime"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
        ("compression.gzip.level", "0", "between 1 and 9"),
        ("leader.replication.throttled.replicas", "0-1", "[partitionId]:[brokerId]"),
    ],
)
def test_invalid_topic_config_values(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_topic_configs({key: value})
    assert str(caught.value).startswith(f"Invalid value {value} for configuration {key}: ")
    assert expected in str(caught.value)
    assert (caught.value.key, caught.value.value) == (key, value)


def test_min_compaction_lag_may_not_exceed_max() -> None:
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


# -- CLI ----------------------------------------------------------------------------------------


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_config_error_exits_2_with_a_readable_message() -> None:
    result = run_module("serve", "--set", "num.partitions=abc")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "kafkacompat: configuration error: Invalid value abc for configuration num.partitions: "
        "Not a number of type INT"
    )
    assert "Traceback" not in result.stderr


def test_cli_set_without_equals_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--set", "num.partitions"])
    assert caught.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_cli_without_a_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main([])
    out = capsys.readouterr().out
    assert "usage: kafkacompat" in out and "serve" in out


def test_cli_serve_builds_the_config_and_runs_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    received: list[BrokerConfig] = []
    http_settings: list = []
    fake_broker = types.ModuleType("kafkacompat.broker")

    def run_broker(config: BrokerConfig, http) -> None:
        received.append(config)
        http_settings.append(http)

    fake_broker.run_broker = run_broker  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kafkacompat.broker", fake_broker)
    log_levels: list[str] = []
    monkeypatch.setattr(cli, "configure_logging", log_levels.append)
    path = write_properties(tmp_path, "num.partitions=2\nlisteners=PLAINTEXT://:9000\n")

    cli.main(
        [
            "serve",
            "--config", str(path),
            "--set", "num.partitions=3",
            "--set", "default.replication.factor=1",
            "--port", "0",
            "--host", "127.0.0.1",
            "--data-dir", str(tmp_path / "data"),
            "--broker-id", "7",
            "--advertised-host", "example.test",
            "--log-level", "debug",
        ]
    )

    assert log_levels == ["DEBUG"]
    [config] = received
    assert (config.host, config.port, config.broker_id) == ("127.0.0.1", 0, 7)
    assert config.num_partitions == 3
    assert config.data_dir == tmp_path / "data"
    assert (config.advertised_host, config.advertised_port) == ("example.test", 0)
    config.port = 45678  # what a broker does after binding an ephemeral port
    assert config.advertised_endpoint() == ("example.test", 45678)
    [http] = http_settings
    assert (http.host, http.port) == ("127.0.0.1", 9644)  # the console's defaults


def test_cli_logging_format(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    cli.configure_logging("WARNING")
    [handler] = root.handlers
    record = logging.LogRecord("kafkacompat.test", logging.WARNING, __file__, 1, "hello", None, None)
    line = handler.format(record)
    assert line.endswith(" WARNING kafkacompat.test: hello")
    assert root.level == logging.WARNING


def test_importing_config_and_cli_stays_cheap() -> None:
    code = (
        "import sys, kafkacompat.config, kafkacompat.cli; "
        "heavy = [m for m in ('trio', 'kafka', 'kafkacompat.broker') if m in sys.modules]; "
        "print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
