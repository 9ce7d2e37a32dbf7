"""Topic-level log configuration with Kafka's names, defaults and validation rules."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Callable, Mapping

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
# compression.type -> the codec id batches are stored with; "producer" keeps the producer's (-1).
COMPRESSION_CODECS = {"producer": -1, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass
class LogConfig:
    """The topic configs the log acts on; defaults are Kafka's."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000  # -1 = forever
    retention_bytes: int = -1  # -1 = no size limit
    max_message_bytes: int = 1048588  # enforced by the produce path (validate_batches), not here
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    cleanup_policy: str = "delete"  # comma-separated: "delete", "compact" or both
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    # Compaction (cleanup.policy containing "compact"); see log/cleaner.py.
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    # Accepted for compatibility only: deleted segments are unlinked at once, because every
    # in-flight read holds its own duplicated descriptor.
    file_delete_delay_ms: int = 60000
    # What the produce path does to a client's batch before it is appended (Kafka's LogValidator;
    # handlers/produce.py). These settings act on incoming batches, not on the stored log, so they
    # are left out of equality (compare=False): two configs that store and clean alike are equal.
    compression_type: str = field(default="producer", compare=False)
    compression_gzip_level: int = field(default=-1, compare=False)  # -1: zlib's default (6)
    compression_lz4_level: int = field(default=9, compare=False)  # 9: the fast compressor, as Kafka
    compression_zstd_level: int = field(default=3, compare=False)
    message_timestamp_before_max_ms: int = field(default=INT64_MAX, compare=False)
    message_timestamp_after_max_ms: int = field(default=INT64_MAX, compare=False)
    message_timestamp_difference_max_ms: int = field(default=INT64_MAX, compare=False)  # deprecated

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
        self.timestamp_before_max_ms = before if before != INT64_MAX else difference
        self.timestamp_after_max_ms = after if after != INT64_MAX else difference
        self.checks_timestamps = not self.uses_log_append_time and (
            self.timestamp_before_max_ms != INT64_MAX or self.timestamp_after_max_ms != INT64_MAX)
        self.reworks_batches = self.target_codec >= 0 or self.checks_timestamps

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "LogConfig":
        """Build from Kafka topic config names (``segment.bytes``...); unknown keys are ignored.

        Raises ValueError naming the key and the accepted range when a value is invalid.
        """
        values: dict[str, object] = {}
        for key, raw in props.items():
            spec = _PROPERTIES.get(key)
            if spec is None:
                continue
            attribute, parse = spec
            values[attribute] = parse(key, str(raw).strip())
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        """The Kafka topic config names and values (for DescribeConfigs and the like)."""
        by_attribute = {attribute: key for key, (attribute, _) in _PROPERTIES.items()}
        return {by_attribute[f.name]: str(getattr(self, f.name)) for f in fields(self)}

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


def _integer(minimum: int, maximum: int) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"Invalid value {raw!r} for configuration {key}: not an integer") from None
        if value < minimum:
            raise ValueError(f"Invalid value {value} for configuration {key}: must be at least {minimum}")
        if value > maximum:
            raise ValueError(f"Invalid value {value} for configuration {key}: must be at most {maximum}")
        return value

    return parse


def _ratio(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"Invalid value {value} for configuration {key}: must be between 0 and 1")
    return value


def _timestamp_type(key: str, raw: str) -> str:
    if raw not in TIMESTAMP_TYPES:
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: must be one of {', '.join(TIMESTAMP_TYPES)}")
    return raw


def _compression_type(key: str, raw: str) -> str:
    value = raw.lower()
    if value not in COMPRESSION_CODECS:
        raise ValueError(
            f"Invalid value {raw!r} for configuration {key}: must be one of {', '.join(COMPRESSION_CODECS)}")
    return value


def _level(minimum: int, maximum: int, default: int) -> Callable[[str, str], int]:
    """A compression level: Kafka's range for the codec, or the codec's default sentinel."""
    in_range = _integer(minimum, maximum)

    def parse(key: str, raw: str) -> int:
        try:
            if int(raw) == default:
                return default
        except ValueError:
            pass
        return in_range(key, raw)

    return parse


def _cleanup_policy(key: str, raw: str) -> str:
    policies = _split_list(raw)
    unknown = [policy for policy in policies if policy not in CLEANUP_POLICIES]
    if unknown:
        raise ValueError(
            f"Invalid value {raw!r} for configuration {key}: {', '.join(unknown)} is not one of "
            f"{', '.join(CLEANUP_POLICIES)}"
        )
    return ",".join(policies)


# Kafka topic config name -> (LogConfig attribute, parser); ranges follow Kafka's validators.
_PROPERTIES: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "segment.bytes": ("segment_bytes", _integer(14, INT32_MAX)),
    "segment.ms": ("segment_ms", _integer(1, INT64_MAX)),
    "segment.index.bytes": ("segment_index_bytes", _integer(4, INT32_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _integer(0, INT32_MAX)),
    "retention.ms": ("retention_ms", _integer(-1, INT64_MAX)),
    "retention.bytes": ("retention_bytes", _integer(INT64_MIN, INT64_MAX)),
    "max.message.bytes": ("max_message_bytes", _integer(0, INT32_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "flush.messages": ("flush_messages", _integer(1, INT64_MAX)),
    "flush.ms": ("flush_ms", _integer(0, INT64_MAX)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _integer(0, INT64_MAX)),
    "delete.retention.ms": ("delete_retention_ms", _integer(0, INT64_MAX)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _integer(0, INT64_MAX)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _integer(1, INT64_MAX)),
    "compression.type": ("compression_type", _compression_type),
    "compression.gzip.level": ("compression_gzip_level", _level(1, 9, -1)),
    "compression.lz4.level": ("compression_lz4_level", _level(1, 17, 9)),
    "compression.zstd.level": ("compression_zstd_level", _level(-131072, 22, 3)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _integer(0, INT64_MAX)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _integer(0, INT64_MAX)),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _integer(0, INT64_MAX)),
}
