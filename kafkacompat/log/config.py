"""The topic configs the log and the produce path act on, as one LogConfig per topic.

Names, defaults, parsing and validation are config.py's TOPIC_CONFIGS: a LogConfig attribute is
its topic key with dots as underscores (``segment.bytes`` -> ``segment_bytes``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from kafkacompat.config import TOPIC_CONFIGS, format_value

INT64_MAX = 2**63 - 1  # Long.MAX_VALUE: the timestamp limits' "no limit" default
# compression.type -> the codec id batches are stored with; "producer" keeps the producer's (-1).
COMPRESSION_CODECS = {"producer": -1, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _parse(name: str, raw: str | None) -> Any:
    """A topic key's value as LogConfig holds it: lists (cleanup.policy) as comma-joined strings."""
    value = TOPIC_CONFIGS[name].parse(raw)
    return format_value(value) if isinstance(value, list) else value


def _default(name: str) -> Any:
    return _parse(name, TOPIC_CONFIGS[name].default)


_BEFORE_MAX_DEFAULT = _default("message.timestamp.before.max.ms")
_AFTER_MAX_DEFAULT = _default("message.timestamp.after.max.ms")  # Kafka 4.x: 1 hour


@dataclass
class LogConfig:
    """The topic configs the log acts on; defaults are Kafka's."""

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    retention_ms: int = _default("retention.ms")  # -1 = forever
    retention_bytes: int = _default("retention.bytes")  # -1 = no size limit
    max_message_bytes: int = _default("max.message.bytes")  # enforced by the produce path, not here
    message_timestamp_type: str = _default("message.timestamp.type")  # or "LogAppendTime"
    cleanup_policy: str = _default("cleanup.policy")  # comma-separated: "delete", "compact" or both
    # fsync after this many unflushed messages / when the last flush is this old (LogManager).
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    # Compaction (cleanup.policy containing "compact"); see log/cleaner.py.
    delete_retention_ms: int = _default("delete.retention.ms")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    # What the produce path does to a client's batch before it is appended (Kafka's LogValidator;
    # handlers/produce.py). These settings act on incoming batches, not on the stored log, so they
    # are left out of equality (compare=False): two configs that store and clean alike are equal.
    compression_type: str = field(default=_default("compression.type"), compare=False)
    compression_gzip_level: int = field(default=_default("compression.gzip.level"), compare=False)  # -1: zlib's 6
    compression_lz4_level: int = field(default=_default("compression.lz4.level"), compare=False)
    compression_zstd_level: int = field(default=_default("compression.zstd.level"), compare=False)
    message_timestamp_before_max_ms: int = field(default=_default("message.timestamp.before.max.ms"), compare=False)
    message_timestamp_after_max_ms: int = field(default=_default("message.timestamp.after.max.ms"), compare=False)
    message_timestamp_difference_max_ms: int = field(  # deprecated
        default=_default("message.timestamp.difference.max.ms"), compare=False)

    def __post_init__(self) -> None:
        # Derived once, read by every produce request (a config is replaced whole, never edited):
        # target_codec -1 keeps the producer's codec; reworks_batches is the one flag the produce
        # path tests before doing anything per batch beyond the in-place patches.
        self.target_codec = COMPRESSION_CODECS[self.compression_type]
        self.target_level = {1: self.compression_gzip_level, 3: self.compression_lz4_level,
                             4: self.compression_zstd_level}.get(self.target_codec)
        # Kafka's LogConfig: before/after.max.ms fall back to the deprecated difference.max.ms
        # while they keep their default. Only CreateTime topics check record timestamps.
        before, after = self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms
        difference = self.message_timestamp_difference_max_ms
        fallback = difference != INT64_MAX
        self.timestamp_before_max_ms = difference if fallback and before == _BEFORE_MAX_DEFAULT else before
        self.timestamp_after_max_ms = difference if fallback and after == _AFTER_MAX_DEFAULT else after
        self.checks_timestamps = not self.uses_log_append_time and (
            self.timestamp_before_max_ms != INT64_MAX or self.timestamp_after_max_ms != INT64_MAX)
        self.reworks_batches = self.target_codec >= 0 or self.checks_timestamps

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "LogConfig":
        """Build from Kafka topic config names (``segment.bytes``...); keys LogConfig does not hold
        are ignored. Raises ConfigError (a ValueError) naming the key when a value is invalid."""
        return cls(**{_ATTRIBUTE_OF_KEY[key]: _parse(key, str(raw)) for key, raw in props.items()
                      if key in _ATTRIBUTE_OF_KEY})

    def to_properties(self) -> dict[str, str]:
        """The Kafka topic config names and values (for DescribeConfigs and the like)."""
        return {key: format_value(getattr(self, attribute)) or "" for key, attribute in _ATTRIBUTE_OF_KEY.items()}

    @property
    def deletes_old_segments(self) -> bool:
        return "delete" in _policies(self.cleanup_policy)

    @property
    def compacts(self) -> bool:  # asked on every produce request
        return "compact" in _policies(self.cleanup_policy)

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


@functools.lru_cache(maxsize=64)
def _policies(cleanup_policy: str) -> frozenset[str]:
    return frozenset(_split_list(cleanup_policy))


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


_ATTRIBUTE_OF_KEY: Mapping[str, str] = {
    f.name.replace("_", "."): f.name for f in fields(LogConfig) if f.name.replace("_", ".") in TOPIC_CONFIGS
}
