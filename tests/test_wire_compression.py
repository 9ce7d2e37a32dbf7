"""wire/compression.py against kafka-python's codec module (the framings Kafka clients write):
each reads what the other wrote, for every codec and level, empty and multi-block inputs."""

from __future__ import annotations

import random

import pytest
from kafka import codec as kafka_python

from kafkacompat.wire.compression import GZIP, LZ4, SNAPPY, ZSTD, compress, decompress

THEIRS = {
    GZIP: (kafka_python.gzip_encode, kafka_python.gzip_decode),
    SNAPPY: (kafka_python.snappy_encode, kafka_python.snappy_decode),
    LZ4: (kafka_python.lz4_encode, kafka_python.lz4_decode),
    ZSTD: (kafka_python.zstd_encode, kafka_python.zstd_decode),
}
DATA = [b"", b"x", b"record %d " * 5000, random.Random(7).randbytes(100_000)]  # 100 KB: several snappy blocks


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("index", range(len(DATA)))
def test_each_reads_what_the_other_wrote(codec: int, index: int) -> None:
    data = DATA[index]
    encode, decode = THEIRS[codec]
    assert decompress(codec, encode(data)) == data
    if data or codec != SNAPPY:  # kafka-python cannot read back its own empty xerial stream (a bare header)
        assert decode(compress(codec, data)) == data


@pytest.mark.parametrize("codec,level", [(GZIP, -1), (GZIP, 1), (LZ4, 9), (LZ4, 12), (ZSTD, 1), (ZSTD, 19)])
def test_levels(codec: int, level: int) -> None:
    data = DATA[2]
    assert THEIRS[codec][1](compress(codec, data, level)) == data


def test_snappy_is_the_xerial_framing_and_a_raw_block_is_read_too() -> None:
    import snappy

    framed = compress(SNAPPY, DATA[2])
    assert framed[:8] == b"\x82SNAPPY\x00" and framed == kafka_python.snappy_encode(DATA[2])
    assert decompress(SNAPPY, snappy.compress(DATA[2])) == DATA[2]


def test_zstd_frames_without_a_content_size_are_read() -> None:
    import zstandard

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(DATA[2])
    assert decompress(ZSTD, frame) == DATA[2]


def test_an_unknown_codec_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown compression codec 5"):
        decompress(5, b"")
    with pytest.raises(ValueError, match="unknown compression codec 5"):
        compress(5, b"")
