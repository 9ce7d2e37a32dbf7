"""The partition log: RecordBatch v2 bytes in Kafka's on-disk layout (a data dir is a Kafka log dir).

Modules: ``config`` (LogConfig, Kafka topic config names), ``filecache`` (LRU of open files),
``index`` (.index/.timeindex), ``segment`` (one .log and its indexes), ``partition_log`` (one
partition: roll, read, truncate, retention, recovery), ``manager`` (the log dirs: loading, moves, failures,
checkpoints, flushing, clean shutdown), ``checkpoint`` (Kafka's offset checkpoint files and the
directory fsync), ``cleaner`` (compaction: the log cleaner and its checkpoint) and ``swap`` (the
cleaner's segment swap, and completing one a crash interrupted).

Choices that differ from Kafka's implementation, on purpose:

- Index files are not preallocated or memory-mapped. Entries live in arrays and reach the file in
  small groups, and completely on roll, close and flush; so a closed index file is exactly its
  entries, and a Kafka-written zero-filled tail is cut off on load.
- Index files are loaded lazily and checked (ordering, bounds, and the batch an entry points at);
  a bad one is rebuilt from the .log batch headers instead of failing the partition.
- Deleted segments are unlinked at once (file.delete.delay.ms is not used): reads hand out
  FileRegions holding their own dup()'ed descriptor, so an in-flight sendfile is unaffected.
- A read may span several segments, returning one FileRegion per segment.
"""

from kafkacompat.log.checkpoint import read_checkpoint, write_checkpoint
from kafkacompat.log.cleaner import LogCleaner
from kafkacompat.log.config import LogConfig
from kafkacompat.log.filecache import FileCache
from kafkacompat.log.index import IndexCorruptError, OffsetIndex, TimeIndex
from kafkacompat.log.manager import LogManager, parse_partition_dir_name
from kafkacompat.log.partition_log import AppendInfo, PartitionLog, ReadResult, UnexpectedAppendOffsetError
from kafkacompat.log.segment import LogSegment, segment_file_name

__all__ = [
    "AppendInfo",
    "FileCache",
    "IndexCorruptError",
    "LogCleaner",
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
