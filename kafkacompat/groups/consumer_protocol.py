"""The classic consumer's embedded protocol (Kafka's ConsumerProtocol): the subscription a
classic member sends in JoinGroup's protocol metadata and the assignment SyncGroup hands out,
both an int16 version followed by a non-flexible struct:

    ConsumerProtocolSubscription  v0: topics [string], user_data nullable bytes
                                  v1: + owned_partitions [topic string, partitions [int32]]
                                  v2: + generation_id int32      v3: + rack_id nullable string
    ConsumerProtocolAssignment    v0+: assigned_partitions [topic string, partitions [int32]],
                                       user_data nullable bytes

Needed when classic members live in a consumer group (online migration).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MalformedProtocol(ValueError):
    pass


@dataclass(slots=True)
class Subscription:
    version: int
    topics: list[str]
    owned: list[tuple[str, list[int]]] = field(default_factory=list)
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise MalformedProtocol("truncated consumer protocol data")
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        end = self.pos + size
        if end > len(self.data):
            raise MalformedProtocol("truncated consumer protocol string")
        try:
            value = self.data[self.pos:end].decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedProtocol("consumer protocol string is not UTF-8") from None
        self.pos = end
        return value

    def count(self) -> int:
        size = self.int32()
        if size > len(self.data) - self.pos:
            raise MalformedProtocol("consumer protocol array longer than the data")
        return max(size, 0)

    def skip_bytes(self) -> None:
        size = self.int32()
        if size > 0:
            self.pos += size

    def topic_partitions(self) -> list[tuple[str, list[int]]]:
        return [(self.string() or "", [self.int32() for _ in range(self.count())]) for _ in range(self.count())]


def decode_subscription(data: bytes) -> Subscription:
    reader = _Reader(bytes(data))
    version = reader.int16()
    if version < 0:
        raise MalformedProtocol(f"consumer protocol subscription version {version}")
    topics = [reader.string() or "" for _ in range(reader.count())]
    subscription = Subscription(version, topics)
    if reader.pos < len(reader.data):
        reader.skip_bytes()  # user data
    if version >= 1 and reader.pos < len(reader.data):
        subscription.owned = reader.topic_partitions()
    if version >= 2 and reader.pos < len(reader.data):
        reader.int32()  # generation id
    if version >= 3 and reader.pos < len(reader.data):
        subscription.rack_id = reader.string()
    return subscription


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    if not data:
        return []
    reader = _Reader(bytes(data))
    reader.int16()
    return reader.topic_partitions()


def protocol_version(metadata: bytes) -> int:
    """The version a member's subscription is written in; its assignment is written in the same
    one (capped at 3, the newest)."""
    return min(max(_Reader(bytes(metadata)).int16(), 0), 3) if len(metadata) >= 2 else 0


def encode_assignment(partitions: list[tuple[str, list[int]]], version: int) -> bytes:
    buf = bytearray(_I16.pack(version))
    buf += _I32.pack(len(partitions))
    for topic, indexes in partitions:
        encoded = topic.encode("utf-8")
        buf += _I16.pack(len(encoded)) + encoded
        buf += _I32.pack(len(indexes))
        for index in sorted(indexes):
            buf += _I32.pack(index)
    buf += _I32.pack(-1)  # no user data
    return bytes(buf)
