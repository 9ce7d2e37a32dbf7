"""Damaged Kafka requests and the time a broker may take to deal with them (fuzz tests, benchmarks).

Shared by compat-tests/test_fuzz_requests.py and benchmarks/hostile.py. Everything here is built
from the broker's own schema classes and record-batch layout (kafkacompat.wire) over plain
blocking loopback sockets; nothing depends on a client library.

The bound: a damaged request must be answered, or its connection closed, within the time the
request's own fields let a Kafka broker hold it, plus ``SLACK_S``. Kafka holds a request only
where the protocol says so:

- Produce with acks=-1 waits for the in-sync replicas up to the request's timeout_ms
  (ReplicaManager.appendRecords -> DelayedProduce); acks=0 is never answered (a bad batch closes
  the connection instead), so only the request queued behind it bounds it.
- Fetch waits up to its max_wait_ms for min_bytes (ReplicaManager.fetchMessages -> DelayedFetch),
  unless it names no partition (``fetchInfos.isEmpty``: answered at once).
- JoinGroup waits for the group's other members up to the group's rebalance timeout, and a
  member that does not rejoin is dropped when its session timeout expires; SyncGroup waits for
  the leader's assignment as long. Both depend on the JoinGroups the group received earlier, so
  ``Bounds`` remembers the longest wait any accepted JoinGroup allowed.
- CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and ElectLeaders wait up to their
  timeout_ms for the change to complete.

Every other request is answered as soon as it is handled.
"""

from __future__ import annotations

import functools
import random
import re
import socket
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import crc32c

from kafkacompat.wire import records as rb
from kafkacompat.wire.frame import API_VERSIONS_KEY, is_flexible

# Time a correct broker needs for a request it does not hold, on a loaded 2-core machine running
# the fuzzer beside it: answers normally take milliseconds; 5 s leaves room for a stalled
# scheduler without letting a hung handler pass.
SLACK_S = 5.0
PROBE_CORRELATION_ID = 0x7E57
TRIALS_PER_VERSION = 12

PRODUCE, FETCH, JOIN_GROUP, SYNC_GROUP, DELETE_RECORDS = 0, 1, 11, 14, 21
SHARE_FETCH = 78
TIMEOUT_APIS = {19: "CreateTopics", 20: "DeleteTopics", 21: "DeleteRecords", 37: "CreatePartitions",
                43: "ElectLeaders"}


def request_header(api_key: int, version: int, correlation_id: int, client_id: str = "fuzz") -> bytes:
    """Request header v1, or v2 (an empty tagged-field section) where the API version is flexible."""
    encoded = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(encoded)) + encoded
    return header + (b"\x00" if is_flexible(api_key, version) else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def probe_frame() -> bytes:
    """ApiVersions v0 with an empty body: what every broker answers, at once."""
    return frame(request_header(API_VERSIONS_KEY, 0, PROBE_CORRELATION_ID))


# ---- damaged request bodies --------------------------------------------------------------


@functools.cache
def kafka_python_classes() -> dict[tuple[int, str], Any]:
    """kafka-python's schema classes by (api key, kind), looked up here rather than through
    kafkacompat.wire.codec: the broker's codec must not be the fuzzer's oracle."""
    import importlib

    from kafka.protocol.api_message import ApiMessage

    found: dict[tuple[int, str], Any] = {}
    for module_name in ("admin", "consumer", "metadata", "producer", "sasl"):
        module = importlib.import_module(f"kafka.protocol.{module_name}")
        for name in getattr(module, "__all__", dir(module)):
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, ApiMessage) and cls is not ApiMessage:
                found[(cls.API_KEY, cls.type)] = cls
    return found


# ---- hand-written templates for the APIs kafka-python has no schema for (delegation tokens) ----


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Writer:
    """Kafka's primitive types, classic or compact (flexible versions), written with struct."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()

    def string(self, text: str | None) -> "_Writer":
        if text is None:
            self.out += _uvarint(0) if self.flexible else struct.pack(">h", -1)
        else:
            data = text.encode()
            self.out += (_uvarint(len(data) + 1) if self.flexible else struct.pack(">h", len(data))) + data
        return self

    def blob(self, data: bytes) -> "_Writer":
        self.out += (_uvarint(len(data) + 1) if self.flexible else struct.pack(">i", len(data))) + data
        return self

    def array(self, count: int | None) -> "_Writer":
        if count is None:
            self.out += _uvarint(0) if self.flexible else struct.pack(">i", -1)
        else:
            self.out += _uvarint(count + 1) if self.flexible else struct.pack(">i", count)
        return self

    def int64(self, value: int) -> "_Writer":
        self.out += struct.pack(">q", value)
        return self

    def tags(self) -> "_Writer":
        if self.flexible:
            self.out += b"\x00"
        return self


def _principals(writer: _Writer, principals: list[tuple[str, str]]) -> None:
    writer.array(len(principals))
    for principal_type, name in principals:
        writer.string(principal_type).string(name).tags()


def _token_body(api_key: int, version: int, populated: bool) -> bytes:
    """CreateDelegationToken (38), Renew (39), Expire (40), DescribeDelegationToken (41)."""
    writer = _Writer(version >= 2)
    principals = [("User", "fuzz")] if populated else []
    if api_key == 38:
        if version >= 3:
            writer.string("User" if populated else None).string("fuzz" if populated else None)
        _principals(writer, principals)
        writer.int64(60_000 if populated else 0)
    elif api_key in (39, 40):
        writer.blob(b"\x01" * 64 if populated else b"").int64(60_000 if populated else 0)
    else:
        _principals(writer, principals)
    return bytes(writer.tags().out)


_HAND_WRITTEN = {38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3)}  # api key -> versions


def request_class(api_key: int) -> Any:
    """kafka-python's request class: requests are written by a codec independent of the broker's."""
    return kafka_python_classes()[(api_key, "request")]


def response_class(api_key: int) -> Any:
    return kafka_python_classes()[(api_key, "response")]


def encodable(api_key: int, version: int) -> bool:
    """Whether kafka-python's schema (or a hand-written template) can write this API at this
    version (its message specs reach below the versions Kafka 4 still accepts, which it calls valid)."""
    if api_key in _HAND_WRITTEN:
        low, high = _HAND_WRITTEN[api_key]
        return low <= version <= high
    if (api_key, "request") not in kafka_python_classes():
        return False
    try:
        default_body(api_key, version)
        populated_body(api_key, version)
    except Exception:  # noqa: BLE001 - whatever the schema raises for a version it lacks
        return False
    return True



@functools.cache
def default_body(api_key: int, version: int) -> bytes:
    """The request with every field at its schema default (empty arrays, zero timeouts, acks=0)."""
    if api_key in _HAND_WRITTEN:
        return _token_body(api_key, version, populated=False)
    if (api_key, "request") not in kafka_python_classes():
        return _kio_body(api_key, version, populated=False)
    cls = request_class(api_key)
    return bytes(cls(version=version).encode(version=version))


# ---- APIs kafka-python has no schema for (KIP-848, share groups): kio writes them ------------


def _kio_body(api_key: int, version: int, *, populated: bool) -> bytes:
    """The request written by kio (generated from Kafka's 4.x specs, independent of the broker's
    codec): every field empty/zero/null, or (``populated``) plausible as in ``populated_body``."""
    return kio_encode(kio_message(api_key, version, "request", populated=populated))


def kio_class(api_key: int, version: int, kind: str) -> type:
    """kio's request or response class of an API version (ImportError when kio lacks it)."""
    import importlib
    import re

    from kafkacompat.wire.frame import api_name

    module = re.sub(r"(?<!^)(?=[A-Z])", "_", api_name(api_key)).lower()
    schema = importlib.import_module(f"kio.schema.{module}.v{version}.{kind}")
    suffix = "Request" if kind == "request" else "Response"
    return next(c for name, c in vars(schema).items() if name.endswith(suffix) and isinstance(c, type)
                and getattr(c, "__api_key__", None) == api_key)


def kio_message(api_key: int, version: int, kind: str, *, populated: bool) -> Any:
    """A kio message of the API version: every field empty/zero/null, or plausible values."""
    return _kio_entity(kio_class(api_key, version, kind), "", populated)


def kio_encode(entity: Any) -> bytes:
    import io

    from kio.serial import entity_writer

    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _kio_entity(cls: type, parent: str, populated: bool) -> Any:
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _kio_value(hints[f.name], f.name, parent, populated)
                  for f in dataclasses.fields(cls) if f.init})


def _kio_value(hint: Any, name: str, parent: str, populated: bool) -> Any:
    import dataclasses
    import datetime
    import types
    import typing

    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        # kio marks some arrays nullable that Kafka's specs do not (ShareFetch's Responses): an
        # empty array is what every version can carry
        if not populated and type(None) in args and typing.get_origin(inner) is not tuple:
            return None
        return _kio_value(next(a for a in args if a is not type(None)), name, parent, populated)
    if typing.get_origin(hint) is tuple:
        return (_kio_value(args[0], name, parent, populated),) if populated else ()
    if dataclasses.is_dataclass(hint):
        return _kio_entity(hint, name, populated)
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return hint.parse(datetime.timedelta(milliseconds=100 if populated else 0))
    if isinstance(hint, type) and issubclass(hint, bool):
        return populated
    if isinstance(hint, type) and issubclass(hint, int):
        return hint.parse(0) if hasattr(hint, "parse") else hint(0)
    if isinstance(hint, type) and issubclass(hint, str):
        if not populated:
            return hint("")
        where = f"{parent}.{name}"
        return hint(TARGET_TOPIC if "topic" in where else TARGET_GROUP if "group" in where else "hostile")
    if hint is uuid.UUID:
        return uuid.UUID(int=0)
    if hint is bytes:
        return b"x" if populated else b""
    if isinstance(hint, type) and issubclass(hint, bytes):  # kio's Records (a record set)
        return hint(b"")
    if isinstance(hint, type) and issubclass(hint, float):
        return hint.parse(1.0 if populated else 0.0) if hasattr(hint, "parse") else hint(1.0 if populated else 0.0)
    raise TypeError(f"no plausible value for {name}: {hint!r}")


TARGET_TOPIC = "hostile-target"  # what populated requests name: created, altered, deleted at will
TARGET_GROUP = "hostile-group"


@functools.cache
def populated_body(api_key: int, version: int) -> bytes:
    """The request with every array holding one element and every field a plausible value (the
    fuzz target topic and group, partition 0, 100 ms timeouts, a valid record batch), so damage
    reaches the handler code behind the empty arrays of ``default_body``."""
    if api_key in _HAND_WRITTEN:
        return _token_body(api_key, version, populated=True)
    if (api_key, "request") not in kafka_python_classes():
        return _kio_body(api_key, version, populated=True)
    cls = request_class(api_key)
    return bytes(cls(version=version, **_plausible_fields(cls.fields, "")).encode(version=version))


def _plausible_fields(fields: dict, parent: str) -> dict[str, Any]:
    return {name: _plausible(name, parent, field) for name, field in fields.items() if field._tag is None}


def _plausible(name: str, parent: str, field: Any) -> Any:
    if field.is_struct_array():
        return [field.data_class(**_plausible_fields(field.fields, name))]
    if field.is_struct():
        return field.data_class(**_plausible_fields(field.fields, name))
    type_name = field._type_str
    if type_name.startswith("[]"):
        return [_plausible_scalar(name, parent, type_name[2:])]
    return _plausible_scalar(name, parent, type_name)


def _plausible_scalar(name: str, parent: str, type_name: str) -> Any:
    if type_name == "string":
        where = f"{parent}.{name}"  # "topics.name", "group_id"...
        return TARGET_TOPIC if "topic" in where else TARGET_GROUP if "group" in where else "hostile"
    if type_name in ("int8", "int16", "int32", "int64"):
        if name == "session_timeout_ms":
            return 6000  # group.min.session.timeout.ms: a JoinGroup that joins
        if "timeout" in name or "wait" in name:
            return 100
        return -1 if name == "acks" else 0
    if type_name == "records":
        return bytes(record_batch([b"fuzz"]))
    return {"bool": True, "bytes": b"x", "uuid": uuid.UUID(int=0), "float64": 1.0}[type_name]


def damaged(body: bytes, trial: int, rng: random.Random) -> bytes:
    """Trial 0 is the body unchanged; the others overwrite 1-4 bytes with boundary or random
    values, and every fourth is also cut short."""
    data = bytearray(body)
    if trial == 0 or not data:
        return bytes(data)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    if trial % 4 == 0:
        data = data[: rng.randrange(len(data) + 1)]
    return bytes(data)


# ---- how long the broker may hold a request -----------------------------------------------


@dataclass(frozen=True)
class Bound:
    """``seconds``: by when the request must be answered or its connection closed. ``answer_due``
    is False where Kafka sends no response (Produce acks=0): then the probe queued behind it on
    the same connection must be answered by then instead."""

    seconds: float
    answer_due: bool
    why: str


@dataclass
class Bounds:
    """Bounds for requests sent to one broker, remembering how long its groups may hold a join.

    ``min_session_ms``/``max_session_ms`` are the broker's group.min/max.session.timeout.ms: a
    JoinGroup outside them is refused at once (INVALID_SESSION_TIMEOUT) and joins nothing.
    ``initial_delay_ms`` is group.initial.rebalance.delay.ms (Kafka caps it at the rebalance
    timeout, InitialDelayedJoin). On a ``single_broker`` a leader has no follower to wait for, so
    Produce acks=-1 and DeleteRecords are answered at once whatever their timeout_ms."""

    decode: Callable[[int, int, memoryview], Any]
    single_broker: bool = False
    min_session_ms: int = 6000
    max_session_ms: int = 1_800_000
    initial_delay_ms: int = 3000
    longest_group_wait_ms: int = 0

    def of(self, api_key: int, version: int, body: bytes) -> Bound:
        try:
            request = self.decode(api_key, version, memoryview(body))
        except Exception:  # noqa: BLE001 - the broker refuses what does not decode: it closes at once
            return Bound(SLACK_S, True, "does not decode: the connection is closed")
        return self._for(api_key, request)

    def _for(self, api_key: int, request: Any) -> Bound:
        if api_key == PRODUCE:
            if request.acks == 0:
                return Bound(SLACK_S, False, "acks=0: no answer; the request behind it is answered")
            if self.single_broker:
                return Bound(SLACK_S, True, "Produce on one broker: no follower to wait for")
            return self._waits(request.timeout_ms, "Produce timeout_ms")
        if api_key == FETCH:
            if not any(topic.partitions for topic in request.topics):
                return Bound(SLACK_S, True, "a Fetch of no partition is answered at once")
            return self._waits(request.max_wait_ms, "Fetch max_wait_ms")
        if api_key == SHARE_FETCH:
            return self._waits(request.max_wait_ms, "ShareFetch max_wait_ms")
        if api_key == JOIN_GROUP:
            self._remember_join(request)
            return self._waits(self.longest_group_wait_ms, "the group's rebalance/session timeouts")
        if api_key == SYNC_GROUP:
            return self._waits(self.longest_group_wait_ms, "the group's rebalance timeout")
        if api_key == DELETE_RECORDS and self.single_broker:
            return Bound(SLACK_S, True, "DeleteRecords on one broker: its own log start is the low watermark")
        if api_key in TIMEOUT_APIS:
            return self._waits(request.timeout_ms, f"{TIMEOUT_APIS[api_key]} timeout_ms")
        return Bound(SLACK_S, True, "answered when handled")

    def _remember_join(self, request: Any) -> None:
        session = request.session_timeout_ms
        if not self.min_session_ms <= session <= self.max_session_ms:
            return
        rebalance = request.rebalance_timeout_ms if request.rebalance_timeout_ms >= 0 else session
        # A member holds the others' joins until it rejoins (rebalance timeout) or expires (session).
        wait = min(rebalance, session) + min(self.initial_delay_ms, rebalance)
        self.longest_group_wait_ms = max(self.longest_group_wait_ms, wait)

    @staticmethod
    def _waits(timeout_ms: int, why: str) -> Bound:
        return Bound(max(timeout_ms, 0) / 1000 + SLACK_S, True, f"{why} {timeout_ms} ms + slack")


def broker_bounds(**config: Any) -> Bounds:
    """Bounds judged with the broker's own request decoders (what it sees is what it holds)."""
    from kafkacompat.handlers import REGISTRY

    return Bounds(lambda api_key, version, body: REGISTRY[api_key].decode(version, body), **config)


# ---- one exchange over a raw socket -------------------------------------------------------


def read_frame(sock: socket.socket, deadline: float) -> bytes | None:
    """One response frame, or None if the broker closed the connection. Raises socket.timeout
    past ``deadline`` (a time.monotonic() value)."""
    size_bytes = _read_exactly(sock, 4, deadline)
    if size_bytes is None:
        return None
    (size,) = struct.unpack(">i", size_bytes)
    return _read_exactly(sock, size, deadline)


def _read_exactly(sock: socket.socket, count: int, deadline: float) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline passed")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(count - len(chunks), 1 << 20))
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


ANSWERED, NO_ANSWER_DUE, CLOSED, UNANSWERED, DROPPED = "answered", "no-answer-due", "closed", "unanswered", "dropped"
HELD = "held-within-its-own-bound"
# A damaged request's fields can allow a wait of days (an int32 of milliseconds): such a request is
# waited for this long, and if it is still held then, Kafka would hold it too (HELD, not a failure).
LONGEST_WAIT_S = 60.0


def bounded_exchange(sock: socket.socket, request: bytes, bound: Bound) -> tuple[str, list[bytes]]:
    """``exchange`` waiting at most LONGEST_WAIT_S; UNANSWERED becomes HELD where the request's
    own bound is longer than that."""
    waited = Bound(min(bound.seconds, LONGEST_WAIT_S), bound.answer_due, bound.why)
    outcome, responses = exchange(sock, request, waited)
    if outcome == UNANSWERED and bound.seconds > LONGEST_WAIT_S:
        return HELD, responses
    return outcome, responses


def exchange(sock: socket.socket, request: bytes, bound: Bound) -> tuple[str, list[bytes]]:
    """Send ``request`` (one complete frame) and the probe behind it; wait up to ``bound``.

    Outcomes: ANSWERED (a response, then the probe's), NO_ANSWER_DUE (only the probe's, where no
    answer is due), CLOSED (the broker closed the connection), UNANSWERED (neither by the bound),
    DROPPED (the probe was answered but the request, which was due an answer, never was).
    Also returns the responses read before the probe's. The connection is reusable after the
    first two outcomes only."""
    deadline = time.monotonic() + bound.seconds
    try:
        sock.sendall(request + probe_frame())
    except (ConnectionResetError, BrokenPipeError):
        return CLOSED, []
    responses: list[bytes] = []
    try:
        while True:
            response = read_frame(sock, deadline)
            if response is None:
                return CLOSED, responses
            if response[:4] == struct.pack(">i", PROBE_CORRELATION_ID):
                if responses:
                    return ANSWERED, responses
                return (DROPPED if bound.answer_due else NO_ANSWER_DUE), responses
            responses.append(response)
    except socket.timeout:
        return UNANSWERED, responses


def connect(bootstrap: str, timeout: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    # Close with a reset: a million fuzz connections must not pile up in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


def served_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version, from the broker's ApiVersions v0 answer."""
    with connect(bootstrap) as sock:
        sock.sendall(probe_frame())
        body = read_frame(sock, time.monotonic() + 10)
    assert body is not None, "the broker closed the connection on ApiVersions v0"
    error_code, count = struct.unpack_from(">hi", body, 4)
    assert error_code == 0, f"ApiVersions v0 answered error {error_code}"
    return {key: (low, high) for key, low, high in struct.iter_unpack(">hhh", body[10:10 + 6 * count])}


# ---- record batches, whole and damaged ------------------------------------------------------


def record_batch(values: list[bytes], *, attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, payload: bytes | None = None, records_count: int | None = None,
                 last_offset_delta: int | None = None, magic: int = rb.CURRENT_MAGIC) -> bytearray:
    """A RecordBatch v2 of ``values`` (keys k0, k1...), CRC and length right; ``payload`` replaces
    the encoded records (for garbage), the other keywords let header fields lie."""
    now = int(time.time() * 1000)
    if payload is None:
        payload = records_section(values)
        if attributes & rb.COMPRESSION_MASK in (1, 2, 3, 4):
            payload = rb.compress(attributes & rb.COMPRESSION_MASK, payload)
    batch = bytearray(rb.HEADER_SIZE) + payload
    struct.pack_into(">qiibIhiqqqhii", batch, 0, 0, len(batch) - rb.LOG_OVERHEAD, -1, magic, 0, attributes,
                     len(values) - 1 if last_offset_delta is None else last_offset_delta, now, now, producer_id,
                     producer_epoch, base_sequence, len(values) if records_count is None else records_count)
    return seal(batch)


def records_section(values: list[bytes]) -> bytes:
    return b"".join(encode_record(i, f"k{i}".encode(), value) for i, value in enumerate(values))


def encode_record(offset_delta: int, key: bytes, value: bytes) -> bytes:
    body = (b"\x00" + rb.write_varint(0) + rb.write_varint(offset_delta) + rb.write_varint(len(key)) + key
            + rb.write_varint(len(value)) + value + rb.write_varint(0))
    return rb.write_varint(len(body)) + body


def seal(batch: bytearray) -> bytearray:
    """Set the batch's length to its size and its CRC32C to its contents."""
    struct.pack_into(">i", batch, 8, len(batch) - rb.LOG_OVERHEAD)
    struct.pack_into(">I", batch, rb.CRC_OFFSET, crc32c.crc32c(memoryview(batch)[rb.ATTRIBUTES_OFFSET:]))
    return batch


def _values(rng: random.Random) -> list[bytes]:
    return [rng.randbytes(rng.randint(0, 40)) for _ in range(rng.randint(1, 5))]


def _lying_record_length(rng: random.Random) -> bytearray:
    values = _values(rng)
    records = bytearray(records_section(values))
    # The first record's length is one varint byte (records here are < 64 bytes): make it lie
    # (never its true value, which would be a sound batch).
    true_length = len(encode_record(0, b"k0", values[0])) - 1
    lies = [length for length in (0, 1, 63, rng.randrange(64)) if length != true_length]
    records[0] = rb.write_varint(rng.choice(lies))[0]
    return record_batch(values, payload=bytes(records))


def _truncated_records(rng: random.Random) -> bytearray:
    values = _values(rng)
    records = records_section(values)
    return record_batch(values, payload=records[:rng.randrange(1, len(records))])


def _trailing_garbage(rng: random.Random) -> bytearray:
    values = _values(rng)
    return record_batch(values, payload=records_section(values) + rng.randbytes(rng.randint(1, 32)))


def _bad_crc(rng: random.Random) -> bytearray:
    batch = record_batch(_values(rng))
    batch[rb.CRC_OFFSET + rng.randrange(4)] ^= 1 << rng.randrange(8)
    return batch


def _lying_count(rng: random.Random) -> bytearray:
    values = _values(rng)
    return record_batch(values, records_count=rng.choice([len(values) + rng.randint(1, 1000), 2**31 - 1]))


def _lying_last_offset_delta(rng: random.Random) -> bytearray:
    values = _values(rng)
    return record_batch(values, last_offset_delta=rng.choice([len(values) + rng.randint(0, 1000), 2**31 - 1]))


def _garbage_compressed(codec: int) -> Callable[[random.Random], bytearray]:
    return lambda rng: record_batch(_values(rng), attributes=codec, payload=rng.randbytes(rng.randint(1, 200)))


def _codec_id(codec: int) -> Callable[[random.Random], bytearray]:
    return lambda rng: record_batch(_values(rng), attributes=codec)


def _bad_magic(rng: random.Random) -> bytearray:
    return record_batch(_values(rng), magic=rng.choice([0, 1, 3, 127, -1]))


# name -> builder; each builder takes the frame's own Random, so a seed replays the same bytes.
DAMAGED_BATCHES: dict[str, Callable[[random.Random], bytearray]] = {
    "lying-record-count": _lying_count,
    "lying-last-offset-delta": _lying_last_offset_delta,
    "lying-record-length": _lying_record_length,
    "truncated-records": _truncated_records,
    "trailing-garbage": _trailing_garbage,
    **{f"garbage-{name}": _garbage_compressed(codec)
       for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd"))},
    **{f"codec-{codec}": _codec_id(codec) for codec in (5, 6, 7)},
    "control-bit": lambda rng: record_batch(_values(rng), attributes=rb.CONTROL_FLAG),
    "transactional-without-producer-id": lambda rng: record_batch(_values(rng), attributes=rb.TRANSACTIONAL_FLAG),
    "bad-crc": _bad_crc,
    "bad-magic": _bad_magic,
}


def produce_body(topic: str, partition: int, batch: bytes, version: int, *, acks: int = -1,
                 timeout_ms: int = 5000) -> bytes:
    """A Produce request body carrying ``batch`` for one partition."""
    cls = request_class(PRODUCE)
    data = cls.TopicProduceData(name=topic, partition_data=[
        cls.TopicProduceData.PartitionProduceData(index=partition, records=bytes(batch))])
    return bytes(cls(acks=acks, timeout_ms=timeout_ms, topic_data=[data]).encode(version=version))


def produce_error(response: bytes, version: int) -> tuple[int, int]:
    """(error code, base offset) of the one partition in a Produce response frame."""
    body = memoryview(response)[4 + (1 if is_flexible(PRODUCE, version) else 0):]
    (topic,) = response_class(PRODUCE).decode(body, version=version).responses
    (partition,) = topic.partition_responses
    return partition.error_code, partition.base_offset
