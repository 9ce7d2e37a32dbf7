"""Kafka's compression codecs, for the batches and legacy message sets the broker itself opens
or writes (compacted topics, a topic's compression.type, old clients' message sets).

gzip; snappy in the xerial framing Kafka's Java clients write (a 16-byte header, then blocks of
raw snappy, each an int32 length and the compression of at most 32 KiB of input; a raw snappy
block is read too); lz4 as an LZ4 frame with independent blocks; zstd. The codec libraries are
imported on first use: most brokers never open a compressed batch.
"""

from __future__ import annotations

import struct

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODECS = (GZIP, SNAPPY, LZ4, ZSTD)
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # format version 1, readable by version 1
_XERIAL_BLOCK = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")
GZIP_DEFAULT_LEVEL = 9  # what the cleaner has always written when no level is configured


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec``. ``level`` is Kafka's level for the codec (KIP-390:
    compression.gzip.level -1 = zlib's default 6, compression.lz4.level 9 = the fast compressor,
    compression.zstd.level); None keeps each library's default (gzip: 9)."""
    if codec == GZIP:
        import gzip

        return gzip.compress(data, compresslevel=GZIP_DEFAULT_LEVEL if level is None else 6 if level == -1 else level)
    if codec == SNAPPY:
        import snappy

        blocks = [_XERIAL_HEADER]
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = snappy.compress(bytes(data[start:start + _XERIAL_BLOCK]))
            blocks += (_BLOCK_LENGTH.pack(len(block)), block)
        return b"".join(blocks)
    if codec == LZ4:
        import lz4.frame

        if level is None or level == 9:
            return lz4.frame.compress(data, block_linked=False)
        return lz4.frame.compress(data, block_linked=False, compression_level=level)
    if codec == ZSTD:
        import zstandard

        compressor = zstandard.ZstdCompressor() if level is None else zstandard.ZstdCompressor(level=level)
        return compressor.compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        import gzip

        return gzip.decompress(data)
    if codec == SNAPPY:
        return _snappy_decompress(data)
    if codec == LZ4:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == ZSTD:
        import zstandard

        # streamed: producers often leave the content size out of the frame
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            return reader.read()
    raise ValueError(f"unknown compression codec {codec} in a record batch")


def _snappy_decompress(data: bytes) -> bytes:
    import snappy

    if len(data) < len(_XERIAL_HEADER) or data[:len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return snappy.decompress(data)
    # the version fields are not checked: some producers write them little-endian
    out = []
    position = len(_XERIAL_HEADER)
    while position < len(data):
        (size,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if size < 0 or position + size > len(data):
            raise ValueError("snappy block runs past the end of the data")
        out.append(snappy.decompress(data[position:position + size]))
        position += size
    return b"".join(out)
