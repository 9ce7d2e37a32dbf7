"""Framing and request headers: the sans-IO layer every request goes through."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.wire.frame import (
    FrameDecoder,
    FrameError,
    HeaderError,
    ProtocolViolation,
    is_flexible,
    parse_request_header,
    response_header,
)


def feed(decoder: FrameDecoder, data: bytes, step: int | None = None) -> list[bytes]:
    frames = []
    pos = 0
    while pos < len(data):
        target = decoder.writable()
        n = min(len(target), len(data) - pos, step or len(data))
        target[:n] = data[pos : pos + n]
        decoder.received(n)
        pos += n
        while (frame := decoder.next_frame()) is not None:
            frames.append(bytes(frame))
    return frames


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_frames_split_at_any_boundary_come_out_whole():
    payloads = [b"a" * 10, b"", b"b" * 70_000, b"c" * 3, b"d" * 2_000_000]
    stream = b"".join(framed(p) for p in payloads)
    for step in (1, 7, 4096, 65536, None):
        if step == 1:
            continue  # byte-at-a-time over 2 MB is slow and adds nothing over step=7 for small frames
        assert feed(FrameDecoder(10_000_000), stream, step) == payloads


def test_byte_at_a_time_small_frames():
    payloads = [b"xyz" * n for n in range(20)]
    assert feed(FrameDecoder(1000), b"".join(framed(p) for p in payloads), 1) == payloads


def test_frames_are_independent_writable_buffers():
    decoder = FrameDecoder(1000)
    feed_bytes = framed(b"hello") + framed(b"world")
    target = decoder.writable()
    target[: len(feed_bytes)] = feed_bytes
    decoder.received(len(feed_bytes))
    first, second = decoder.next_frame(), decoder.next_frame()
    first[0:1] = b"J"
    assert bytes(first) == b"Jello" and bytes(second) == b"world"


@pytest.mark.parametrize("size", [-1, -(2**31), 1001, 2**31 - 1])
def test_oversized_or_negative_length_is_rejected_before_allocating(size):
    decoder = FrameDecoder(1000)
    target = decoder.writable()
    target[:4] = struct.pack(">i", size)
    decoder.received(4)
    with pytest.raises(FrameError):
        decoder.next_frame()


def test_large_claimed_frame_allocates_as_bytes_arrive():
    decoder = FrameDecoder(100 * 1024 * 1024)
    target = decoder.writable()
    target[:8] = struct.pack(">i", 100 * 1024 * 1024) + b"abcd"
    decoder.received(8)
    assert decoder.next_frame() is None
    # Only a modest buffer exists for a 100 MB claim backed by 4 bytes.
    assert len(decoder.writable()) <= 2 * 1024 * 1024


def header_bytes(api_key, version, correlation_id, client_id, tagged=b""):
    cid = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    return struct.pack(">hhi", api_key, version, correlation_id) + cid + tagged


def test_request_header_v1_and_v2():
    header, offset = parse_request_header(header_bytes(3, 8, 42, "me") + b"BODY")
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 8, 42, "me")
    assert not header.flexible and offset == 12
    header, offset = parse_request_header(header_bytes(3, 12, 7, None, b"\x01\x05\x02zz") + b"BODY")
    assert header.flexible and header.client_id is None
    assert offset == 10 + 5  # tagged fields: count, tag, size, 2 bytes


def test_flexible_version_table():
    assert is_flexible(0, 9) and not is_flexible(0, 8)
    assert is_flexible(18, 3) and not is_flexible(18, 2)
    assert not is_flexible(47, 0)  # OffsetDelete has no flexible versions
    assert not is_flexible(9999, 1)


def test_response_headers():
    assert response_header(5, 3, 9) == struct.pack(">i", 5) + b"\x00"
    assert response_header(5, 3, 8) == struct.pack(">i", 5)
    assert response_header(5, 18, 4) == struct.pack(">i", 5)  # ApiVersions: always v0


@pytest.mark.parametrize("data", [b"", b"\x00\x03", b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x09ab",
                                  b"\x00\x03\x00\x01\x00\x00\x00\x01\xff\xf0"])
def test_malformed_headers_raise_header_error(data):
    with pytest.raises(HeaderError):
        parse_request_header(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_header_parser_fuzz_only_raises_protocol_violations(data):
    try:
        parse_request_header(data)
    except ProtocolViolation:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(min_value=1, max_value=50))
def test_frame_decoder_fuzz_roundtrip(payloads, step):
    stream = b"".join(framed(p) for p in payloads)
    assert feed(FrameDecoder(1000), stream, step) == payloads


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_frame_decoder_fuzz_garbage(data):
    try:
        feed(FrameDecoder(1000), data, 13)
    except FrameError:
        pass


def test_large_frame_reads_into_its_own_buffer_and_the_small_one_stays_small():
    """An idle connection holds a 4 KiB buffer. A frame larger than that is read straight into
    a buffer of its own (the frame handed out: no copy), which the decoder lets go of; the next
    small and large frames work as before."""
    decoder = FrameDecoder(100 * 1024 * 1024)
    assert len(decoder.writable()) <= 4096
    large = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(2):
        assert feed(decoder, framed(b"small")) == [b"small"]
        stream = framed(large) + framed(b"after")
        target = decoder.writable()
        target[:4096] = stream[:4096]
        decoder.received(4096)
        assert decoder.next_frame() is None
        target = decoder.writable()
        assert len(target) == len(large) - 4092  # the rest of the frame, in the frame's own buffer
        target[:] = stream[4096:4 + len(large)]
        decoder.received(len(target))
        frame = decoder.next_frame()
        assert frame == large and target.obj is frame
        assert not decoder.has_partial_frame() and len(decoder.writable()) <= 4096
        assert feed(decoder, stream[4 + len(large):]) == [b"after"]
