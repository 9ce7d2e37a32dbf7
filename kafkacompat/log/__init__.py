"""The partition log: RecordBatch v2 bytes in Kafka's on-disk layout (a data dir is a Kafka log dir)."""

from kafkacompat.log.config import LogConfig
from kafkacompat.log.filecache import FileCache
from kafkacompat.log.index import IndexCorruptError, OffsetIndex, TimeIndex
from kafkacompat.log.manager import LogManager, parse_partition_dir_name, read_checkpoint, write_checkpoint
from kafkacompat.log.partition_log import AppendInfo, PartitionLog, ReadResult, UnexpectedAppendOffsetError
from kafkacompat.log.segment import LogSegment, segment_file_name

__all__ = [
    "AppendInfo",
    "FileCache",
    "IndexCorruptError",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetIndex",
    "PartitionLog",
    "ReadResult",
    "TimeIndex",
    "UnexpectedAppendOffsetError",
    "parse_partition_dir_name",
    "read_checkpoint",
    "segment_file_name",
    "write_checkpoint",
]
