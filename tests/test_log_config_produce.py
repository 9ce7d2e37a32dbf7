"""The topic configs the produce path acts on (Kafka's LogValidator inputs): compression.type and
its levels (KIP-390), and the CreateTime timestamp limits with the deprecated fallback."""

from __future__ import annotations

import pytest

from kafkacompat.config import BrokerConfig
from kafkacompat.log import LogConfig

INT64_MAX = 2**63 - 1


def test_defaults_recompress_nothing_and_check_timestamps_at_most_an_hour_ahead():
    config = LogConfig()
    assert (config.compression_type, config.target_codec, config.target_level) == ("producer", -1, None)
    # Kafka 4.x's message.timestamp.after.max.ms (1 hour, KIP-1030): a header check per batch.
    assert config.checks_timestamps and (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (
        INT64_MAX, 3_600_000)
    assert not LogConfig(message_timestamp_after_max_ms=INT64_MAX).reworks_batches


@pytest.mark.parametrize("name, codec, level", [
    ("producer", -1, None), ("uncompressed", 0, None), ("gzip", 1, -1), ("snappy", 2, None), ("lz4", 3, 9),
    ("zstd", 4, 3),
])
def test_compression_type_names_the_target_codec_and_its_level(name, codec, level):
    config = LogConfig.from_properties({"compression.type": name, "message.timestamp.after.max.ms": str(INT64_MAX)})
    assert (config.target_codec, config.target_level) == (codec, level)
    assert config.reworks_batches == (codec >= 0)


def test_levels_are_kafkas_per_codec():
    config = LogConfig.from_properties({"compression.type": "zstd", "compression.zstd.level": "-7",
                                        "compression.gzip.level": "1", "compression.lz4.level": "17"})
    assert (config.target_level, config.compression_gzip_level, config.compression_lz4_level) == (-7, 1, 17)
    assert LogConfig.from_properties({"compression.type": "gzip", "compression.gzip.level": "9"}).target_level == 9


@pytest.mark.parametrize("key, value, fragment", [
    ("compression.type", "brotli", "must be one of"),
    ("compression.type", "GZIP", "must be one of"),  # case-sensitive, as Kafka's ValidString
    ("compression.gzip.level", "0", "between 1 and 9"),
    ("compression.gzip.level", "10", "between 1 and 9"),
    ("compression.lz4.level", "18", "between 1 and 17"),
    ("compression.zstd.level", "23", "between -131072 and 22"),
    ("message.timestamp.after.max.ms", "-1", "at least 0"),
])
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ValueError) as raised:
        LogConfig.from_properties({key: value})
    assert key in str(raised.value) and fragment in str(raised.value)


def test_timestamp_limits_fall_back_to_the_deprecated_difference_while_at_their_default():
    config = LogConfig.from_properties({"message.timestamp.difference.max.ms": "5000"})
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (5000, 5000)
    assert config.checks_timestamps and config.reworks_batches
    config = LogConfig.from_properties({"message.timestamp.difference.max.ms": "5000",
                                        "message.timestamp.after.max.ms": "10"})
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (5000, 10)
    config = LogConfig.from_properties({"message.timestamp.before.max.ms": "7"})
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (7, 3_600_000)  # Kafka 4.x's 1 hour


def test_log_append_time_topics_check_no_record_timestamps():
    config = LogConfig.from_properties({"message.timestamp.type": "LogAppendTime",
                                        "message.timestamp.after.max.ms": "10"})
    assert not config.checks_timestamps and not config.reworks_batches


def test_the_broker_defaults_reach_a_topic_without_overrides():
    broker = BrokerConfig.load(None, {"compression.type": "lz4", "compression.lz4.level": "12",
                                      "log.message.timestamp.before.max.ms": "60000"})
    config = LogConfig.from_properties(broker.effective_topic_config({}))
    assert (config.target_codec, config.target_level, config.timestamp_before_max_ms) == (3, 12, 60000)
    overridden = LogConfig.from_properties(broker.effective_topic_config({"compression.type": "producer"}))
    assert overridden.target_codec == -1 and overridden.checks_timestamps
