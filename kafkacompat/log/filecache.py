"""An LRU of open file descriptors shared by all segments, so that many partitions stay cheap."""

from __future__ import annotations

import os
from collections import OrderedDict

_OPEN_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)


class FileCache:
    """At most ``max_open`` segment files open at once; a file reopens on demand.

    ``fd()`` lends a descriptor that stays valid only until the next call into the cache, so use it
    at once (pread/pwrite) and never keep it. Anything that outlives that - a FileRegion waiting for
    sendfile - takes its own descriptor with ``dup()``, so that evicting or closing the cached one
    never breaks it. Not thread-safe: use it from the event loop thread only (flush opens its own
    descriptors for fsync).
    """

    def __init__(self, max_open: int = 1000) -> None:
        if max_open < 1:
            raise ValueError(f"FileCache needs room for at least one open file, got max_open={max_open}")
        self.max_open = max_open
        self._fds: OrderedDict[str, int] = OrderedDict()

    def fd(self, path: str) -> int:
        """A borrowed descriptor for an existing file (FileNotFoundError if it is gone)."""
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        return self._remember(path, os.open(path, _OPEN_FLAGS))

    def create(self, path: str) -> int:
        """Create (or empty) the file and return a borrowed descriptor for it. An empty file is
        left as it is: O_TRUNC would cost a journal update even then (recovery resets the indexes
        of 10,000 segments, most of them empty)."""
        self.forget(path)
        fd = self._remember(path, os.open(path, _OPEN_FLAGS | os.O_CREAT, 0o644))
        if os.fstat(fd).st_size:
            os.ftruncate(fd, 0)
        return fd

    def dup(self, path: str) -> int:
        """A descriptor the caller owns and must close."""
        return os.dup(self.fd(path))

    def forget(self, path: str) -> None:
        """Close the cached descriptor of ``path`` (before the file is deleted or renamed)."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)

    @property
    def open_count(self) -> int:
        return len(self._fds)

    def _remember(self, path: str, fd: int) -> int:
        self._fds[path] = fd
        while len(self._fds) > self.max_open:
            _, evicted = self._fds.popitem(last=False)
            os.close(evicted)
        return fd
