"""Framing and headers: size prefix, request header v0-v2, response header v0/v1. Sans-IO.

A connection feeds received bytes into a FrameDecoder (it hands out a writable buffer so the
server can ``recv_into`` it without an extra copy) and takes complete frames out. Each frame is
its own bytearray, so the Produce path can patch record batches in place and keep them past the
next read. The claimed size is checked against socket.request.max.bytes before anything is
allocated, and large frames grow as their bytes arrive, so a lying length costs nothing.

The decoder's own buffer is small (4 KiB: what an idle connection costs): it holds small frames,
several at once when a client pipelines them. A frame that does not fit is read straight into a
buffer of its own (the frame itself, no copy after it is complete), which the decoder lets go of
when it hands the frame out: the memory a connection holds for reading grows for a large frame
and shrinks back after it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkacompat.wire.messages import APIS

_INT32 = struct.Struct(">i")
_REQUEST_HEADER_V1 = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_INITIAL_BUFFER = 4 * 1024
_LARGE_FRAME_CHUNK = 1024 * 1024
API_VERSIONS_KEY = 18

# api key -> (first flexible version or None, API name), from the generated codecs' index.
API_INFO: dict[int, tuple[int | None, str]] = {key: (first, name) for key, (name, _, _, _, first) in APIS.items()}


_NEVER = 1 << 30
# api key -> first flexible version (_NEVER for APIs that have none), for the per-request checks.
_FIRST_FLEXIBLE: dict[int, int] = {key: (first if first is not None else _NEVER) for key, (first, _) in API_INFO.items()}


class ProtocolViolation(ValueError):
    """The client sent something a Kafka broker answers by closing the connection."""


class FrameError(ProtocolViolation):
    """The byte stream cannot be a Kafka request stream: the connection must be closed."""


class HeaderError(ProtocolViolation):
    """A request header that cannot be parsed or names an API/version we cannot answer."""


def api_name(api_key: int) -> str:
    info = API_INFO.get(api_key)
    return info[1] if info else f"unknown API {api_key}"


def is_flexible(api_key: int, version: int) -> bool:
    return version >= _FIRST_FLEXIBLE.get(api_key, _NEVER)


class FrameDecoder:
    """Turns a received byte stream into size-delimited frames."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.limit_name = "socket.request.max.bytes"  # the config key max_frame_bytes comes from
        self._buf = bytearray(_INITIAL_BUFFER)
        self._start = 0
        self._end = 0
        self._large: bytearray | None = None
        self._large_size = 0
        self._large_filled = 0

    def writable(self) -> memoryview:
        """Where the next received bytes should go (pass to recv_into, then call received)."""
        if self._large is not None:
            if self._large_filled == len(self._large):
                self._large = _grown(self._large, min(self._large_size, 2 * len(self._large)))
            return memoryview(self._large)[self._large_filled :]
        if self._end == len(self._buf):
            self._compact()
        return memoryview(self._buf)[self._end :]

    def received(self, count: int) -> None:
        if self._large is not None:
            self._large_filled += count
        else:
            self._end += count

    def close(self) -> None:
        """Let go of the buffers now (a closed connection's memory is returned right away)."""
        self._buf = bytearray()
        self._large = None
        self._start = self._end = 0

    def has_partial_frame(self) -> bool:
        return self._large is not None or self._end > self._start

    def next_frame(self) -> bytearray | None:
        """The next complete frame (without its size prefix), or None if more bytes are needed."""
        if self._large is not None:
            if self._large_filled < self._large_size:
                return None
            frame, self._large = self._large, None
            return frame
        available = self._end - self._start
        if available < 4:
            return None
        size = _INT32.unpack_from(self._buf, self._start)[0]
        if size < 0 or size > self.max_frame_bytes:
            raise FrameError(
                f"request size {size} is outside 0..{self.max_frame_bytes} ({self.limit_name})"
            )
        if available - 4 >= size:
            begin = self._start + 4
            frame = self._buf[begin : begin + size]
            self._start = begin + size
            if self._start == self._end:
                self._start = self._end = 0
            return frame
        if 4 + size > len(self._buf):
            self._start_large_frame(size, available - 4)
        return None

    def _start_large_frame(self, size: int, have: int) -> None:
        begin = self._start + 4
        self._large = bytearray(min(size, max(_LARGE_FRAME_CHUNK, have)))
        self._large[:have] = self._buf[begin : begin + have]
        self._large_size = size
        self._large_filled = have
        self._start = self._end = 0

    def _compact(self) -> None:
        pending = self._end - self._start
        if self._start == 0:
            self._buf = _grown(self._buf, 2 * len(self._buf))
            return
        self._buf[:pending] = self._buf[self._start : self._end]
        self._start, self._end = 0, pending


def _grown(buffer: bytearray, size: int) -> bytearray:
    """A larger copy (never resized in place: a caller may still hold a view of the old one)."""
    bigger = bytearray(size)
    bigger[: len(buffer)] = buffer
    return bigger


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


def parse_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parse the request header; return it and the offset where the request body starts.

    Header v1 (api key, version, correlation id, nullable client id) for non-flexible
    versions, v2 (v1 plus tagged fields) for flexible ones. The client id is a classic
    nullable string even in v2.
    """
    size = len(frame)
    if size < 10:
        if size < 8:
            raise HeaderError(f"request of {size} bytes is too short for a request header")
        raise HeaderError("request header is truncated before the client id")
    api_key, api_version, correlation_id, client_id_len = _REQUEST_HEADER_V1.unpack_from(frame, 0)
    pos = 10
    client_id: str | None = None
    if client_id_len >= 0:
        pos += client_id_len
        if pos > size:
            raise HeaderError("request header client id runs past the end of the request")
        client_id = str(frame[10:pos], "utf-8", "replace")
    elif client_id_len != -1:
        raise HeaderError(f"request header client id has invalid length {client_id_len}")
    flexible = api_version >= _FIRST_FLEXIBLE.get(api_key, _NEVER)
    if flexible:
        if pos < size and frame[pos] == 0:  # the usual empty tagged-field section
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible), pos


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise HeaderError("varint runs past the end of the request")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise HeaderError("varint is longer than 5 bytes")


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise HeaderError("tagged field runs past the end of the request")
        pos += size
    return pos


def response_header(correlation_id: int, api_key: int, api_version: int) -> bytes:
    """Response header v1 (with empty tagged fields) for flexible versions, v0 otherwise.

    ApiVersions always answers with header v0 so clients can parse it before they know which
    versions we speak.
    """
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, api_version):
        return _INT32.pack(correlation_id) + b"\x00"
    return _INT32.pack(correlation_id)


def frame_prefix(size: int) -> bytes:
    return _INT32.pack(size)
