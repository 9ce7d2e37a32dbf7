import pytest

from kafkacompat.log import LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.retention_bytes == -1
    assert config.deletes_old_segments and not config.compacts
    assert not config.uses_log_append_time


def test_from_properties_reads_kafka_topic_config_names_and_ignores_unknown_keys():
    config = LogConfig.from_properties({
        "segment.bytes": "1048576",
        "segment.ms": "3600000",
        "segment.index.bytes": "4096",
        "index.interval.bytes": "0",
        "retention.ms": "-1",
        "retention.bytes": "123456",
        "max.message.bytes": "2000000",
        "message.timestamp.type": "LogAppendTime",
        "cleanup.policy": "compact, delete",
        "flush.messages": "1",
        "flush.ms": "1000",
        "file.delete.delay.ms": "0",
        "compression.type": "zstd",
        "min.insync.replicas": "2",
    })
    assert config == LogConfig(
        segment_bytes=1048576, segment_ms=3600000, segment_index_bytes=4096, index_interval_bytes=0,
        retention_ms=-1, retention_bytes=123456, max_message_bytes=2000000,
        message_timestamp_type="LogAppendTime", cleanup_policy="compact,delete", flush_messages=1,
        flush_ms=1000,
    )
    assert config.compacts and config.deletes_old_segments and config.uses_log_append_time


def test_to_properties_round_trips():
    config = LogConfig(segment_bytes=5000, cleanup_policy="compact")
    assert LogConfig.from_properties(config.to_properties()) == config


@pytest.mark.parametrize("key, value, fragment", [  # Kafka's ConfigException wording (config.py's table)
    ("segment.bytes", "abc", "Not a number of type INT"),
    ("segment.bytes", "10", "at least 14"),
    ("segment.bytes", str(2**31), "Not a number of type INT"),
    ("retention.ms", "-2", "at least -1"),
    ("flush.messages", "0", "at least 1"),
    ("message.timestamp.type", "WallClock", "CreateTime, LogAppendTime"),
    ("cleanup.policy", "delete,shred", "String must be one of: compact, delete"),
])
def test_bad_values_raise_value_error_naming_the_key(key, value, fragment):
    with pytest.raises(ValueError) as raised:
        LogConfig.from_properties({key: value})
    assert key in str(raised.value) and fragment in str(raised.value)
