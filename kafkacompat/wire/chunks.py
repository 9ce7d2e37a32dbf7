"""Response chunks that are not in memory: file bytes sent with sendfile, and bytes produced a
piece at a time while they are sent.

wire stays sans-IO: a FileRegion only *describes* bytes of a file (an owned, dup'ed descriptor,
an offset and a length). The server is the one that sends them (os.sendfile) and then closes it.
A StreamedChunk has a known length and an iterator of its pieces (down-converted records); the
server takes the next piece only once the previous one is sent, so one piece is in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Union


class FileRegion:
    """``length`` bytes of the open file ``fd`` starting at ``offset``; owns ``fd``."""

    __slots__ = ("fd", "offset", "length")

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length

    def read_all(self) -> bytes:
        """The bytes themselves (tests, and transports that cannot sendfile)."""
        return os.pread(self.fd, self.length, self.offset)

    def read(self, position: int, length: int) -> bytes:
        """``length`` bytes from ``position`` within the region (fewer past its end)."""
        return os.pread(self.fd, max(0, min(length, self.length - position)), self.offset + position)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, length={self.length})"


class StreamedChunk:
    """``length`` bytes that ``pieces`` yields a piece at a time (exactly that many in all),
    computed from the file regions it owns as they are sent."""

    __slots__ = ("length", "pieces", "regions")

    def __init__(self, length: int, pieces: Iterator[bytes | bytearray], regions: list[FileRegion]) -> None:
        self.length = length
        self.pieces = pieces
        self.regions = regions

    def read_all(self) -> bytes:
        """All the bytes at once (tests)."""
        return b"".join(self.pieces)

    def close(self) -> None:
        close = getattr(self.pieces, "close", None)
        if close is not None:
            close()
        close_chunks(self.regions)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"StreamedChunk(length={self.length}, regions={self.regions})"


Chunk = Union[bytes, bytearray, memoryview, FileRegion, StreamedChunk]


def chunk_length(chunk: Chunk) -> int:
    return len(chunk)


def close_chunks(chunks: list[Chunk]) -> None:
    for chunk in chunks:
        if isinstance(chunk, (FileRegion, StreamedChunk)):
            chunk.close()
