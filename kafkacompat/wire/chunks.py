"""Response chunks that are not in memory: file bytes sent with sendfile.

wire stays sans-IO: a FileRegion only *describes* bytes of a file (an owned, dup'ed descriptor,
an offset and a length). The server is the one that sends them (os.sendfile) and then closes it.
"""

from __future__ import annotations

import os
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

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, length={self.length})"


Chunk = Union[bytes, bytearray, memoryview, FileRegion]


def chunk_length(chunk: Chunk) -> int:
    return len(chunk)


def close_chunks(chunks: list[Chunk]) -> None:
    for chunk in chunks:
        if isinstance(chunk, FileRegion):
            chunk.close()
