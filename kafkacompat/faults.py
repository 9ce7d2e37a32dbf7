"""Fault injection: the next N requests of an API (optionally of one topic, partition or client)
are answered with an error code, delayed, or have their connection closed.

A fault is added through the HTTP API (``POST /v1/faults``, kafkacompat/http/api.py) and applied
by dispatch (kafkacompat/dispatch.py) in one place, after the request is decoded and before its
handler runs. An injected error is the whole answer: the request is not applied (a producer that
retries after NOT_LEADER_OR_FOLLOWER writes its batch once), and the code goes where the
response of that API and version carries it, in every partition (and topic, group) the request
named, and in the top-level error code where the response has one. The response is built from
the generated message classes (wire/messages) by mirroring the request's topics and partitions;
Produce and Fetch, whose codecs are hand-written, register their own builder with the handler.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import trio

from kafkacompat.wire import codec
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.frame import ProtocolViolation, api_name

if TYPE_CHECKING:
    from kafkacompat.services import MetadataView
    from kafkacompat.wire.frame import RequestHeader

MAX_FAULTS = 1000  # faults kept (used-up ones included) before POST answers 400
MAX_DELAY_MS = 300_000

NAME_FIELDS = ("name", "topic", "topic_name")
INDEX_FIELDS = ("partition_index", "index", "partition", "partition_id")
SAME_NAME_FIELDS = ("topic_id", "group_id", "transactional_id", "resource_name", "resource_type", "producer_id")

ErrorResponseBuilder = Callable[[Any, int], Any]  # (decoded request, error code) -> response


class FaultSpecError(ValueError):
    """A fault description that cannot be applied (the HTTP API answers 400 with the message)."""


class InjectedClose(ProtocolViolation):
    """Raised by dispatch to close the connection of a request a fault matched."""


@dataclass(slots=True)
class Fault:
    id: int
    api_key: int
    remaining: int
    error_code: int | None = None
    delay_ms: int = 0
    close: bool = False
    topic: str | None = None
    partition: int | None = None
    client_id: str | None = None
    matched: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "api": api_name(self.api_key), "api_key": self.api_key,
            "error": ErrorCode(self.error_code).name if self.error_code is not None else None,
            "error_code": self.error_code, "delay_ms": self.delay_ms, "close": self.close,
            "topic": self.topic, "partition": self.partition, "client_id": self.client_id,
            "count": self.remaining + self.matched, "remaining": self.remaining, "matched": self.matched,
        }


class FaultInjector:
    """The faults of one broker. ``active`` is what the request path checks: False while no fault
    has anything left to do, so a broker without faults pays one attribute read per request."""

    def __init__(self) -> None:
        self.faults: dict[int, Fault] = {}
        self.active = False
        self._ids = itertools.count(1)

    def add(self, spec: Mapping[str, Any], served_api_keys: "Mapping[int, Any]") -> Fault:
        if len(self.faults) >= MAX_FAULTS:
            raise FaultSpecError(f"{MAX_FAULTS} faults are kept already; DELETE /v1/faults first")
        fault = parse_fault(spec, served_api_keys, next(self._ids))
        self.faults[fault.id] = fault
        self.active = True
        return fault

    def remove(self, fault_id: int) -> bool:
        removed = self.faults.pop(fault_id, None) is not None
        self._refresh()
        return removed

    def clear(self) -> None:
        self.faults.clear()
        self.active = False

    def _refresh(self) -> None:
        self.active = any(fault.remaining > 0 for fault in self.faults.values())

    def take(self, header: "RequestHeader", request: Any, metadata: "MetadataView") -> Fault | None:
        """The first fault matching this request, its count taken down by one."""
        named: list[tuple[str | None, int | None]] | None = None
        for fault in self.faults.values():
            if fault.remaining <= 0 or fault.api_key != header.api_key:
                continue
            if fault.client_id is not None and fault.client_id != header.client_id:
                continue
            if fault.topic is not None:
                if named is None:
                    named = request_partitions(request, metadata)
                if not any(topic == fault.topic and (fault.partition is None or partition == fault.partition)
                           for topic, partition in named):
                    continue
            fault.remaining -= 1
            fault.matched += 1
            if fault.remaining == 0:
                self._refresh()
            return fault
        return None


async def apply_fault(fault: Fault, api_key: int, version: int, request: Any,
                      error_response: ErrorResponseBuilder | None) -> tuple[bool, Any]:
    """Delay, close or answer with the error. (True, response) when the fault answers the
    request (a None response sends nothing); (False, None) when the handler runs after it."""
    if fault.delay_ms:
        await trio.sleep(fault.delay_ms / 1000)
    if fault.close:
        raise InjectedClose(f"fault {fault.id} closes the connection of this {api_name(api_key)} request")
    if fault.error_code is None:
        return False, None
    if error_response is not None:
        return True, error_response(request, fault.error_code)
    return True, generic_error_response(api_key, version, request, fault.error_code)


# ---- parsing ------------------------------------------------------------------------------


def parse_fault(spec: Mapping[str, Any], served_api_keys: "Mapping[int, Any]", fault_id: int) -> Fault:
    if not isinstance(spec, Mapping):
        raise FaultSpecError("a fault is a JSON object, e.g. {\"api\": \"Produce\", \"error\": "
                             "\"NOT_LEADER_OR_FOLLOWER\", \"count\": 3}")
    known = {"api", "error", "count", "topic", "partition", "client_id", "delay_ms", "close"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise FaultSpecError(f"unknown field(s) {', '.join(unknown)}; a fault has {', '.join(sorted(known))}")
    api_key = parse_api(spec.get("api"), served_api_keys)
    error_code = parse_error(spec["error"]) if spec.get("error") is not None else None
    count = _int_field(spec, "count", 1, low=1)
    delay_ms = _int_field(spec, "delay_ms", 0, low=0, high=MAX_DELAY_MS)
    close = spec.get("close", False)
    if not isinstance(close, bool):
        raise FaultSpecError("close must be true or false")
    if error_code is None and not delay_ms and not close:
        raise FaultSpecError("a fault needs an error, a delay_ms or close: true")
    topic = spec.get("topic")
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise FaultSpecError("topic must be a topic name")
    partition = spec.get("partition")
    if partition is not None:
        partition = _int_field(spec, "partition", 0, low=0)
        if topic is None:
            raise FaultSpecError("a partition needs its topic")
    client_id = spec.get("client_id")
    if client_id is not None and not isinstance(client_id, str):
        raise FaultSpecError("client_id must be a string")
    return Fault(fault_id, api_key, count, error_code, delay_ms, close, topic, partition, client_id)


def parse_api(value: Any, served_api_keys: "Mapping[int, Any]") -> int:
    served = {api_name(key): key for key in sorted(served_api_keys)}
    valid = ", ".join(served)
    if isinstance(value, bool) or value is None:
        raise FaultSpecError(f"api is required: one of {valid} (or its api key)")
    if isinstance(value, int):
        if value in served_api_keys:
            return value
        raise FaultSpecError(f"this broker does not serve api key {value}; valid apis: {valid}")
    if isinstance(value, str):
        folded = {name.lower(): key for name, key in served.items()}
        key = folded.get(value.strip().lower())
        if key is not None:
            return key
        raise FaultSpecError(f"unknown api {value!r}; valid apis: {valid}")
    raise FaultSpecError(f"api must be a name or an api key; valid apis: {valid}")


def parse_error(value: Any) -> int:
    names = ", ".join(code.name for code in ErrorCode if code != ErrorCode.NONE)
    if isinstance(value, bool):
        raise FaultSpecError(f"error must be an error name or code; valid errors: {names}")
    if isinstance(value, int):
        if value in ErrorCode._value2member_map_ and value != 0:
            return value
        raise FaultSpecError(f"unknown error code {value}; valid errors: {names}")
    if isinstance(value, str):
        code = ErrorCode.__members__.get(value.strip().upper())
        if code is not None and code != ErrorCode.NONE:
            return int(code)
        raise FaultSpecError(f"unknown error {value!r}; valid errors: {names}")
    raise FaultSpecError(f"error must be an error name or code; valid errors: {names}")


def _int_field(spec: Mapping[str, Any], name: str, default: int, *, low: int, high: int | None = None) -> int:
    value = spec.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultSpecError(f"{name} must be an integer")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise FaultSpecError(f"{name} must be {bound}, got {value}")
    return value


# ---- what a request names, and the error response that mirrors it -----------------------


def _fields(obj: Any) -> tuple[str, ...]:
    if dataclasses.is_dataclass(obj):
        return tuple(field.name for field in dataclasses.fields(obj))
    return ()


def _first(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None and value != "":
            return value
    return None


def _is_partition_item(item: Any) -> bool:
    return isinstance(item, int) or any(hasattr(item, name) for name in INDEX_FIELDS)


def _is_topic_item(item: Any) -> bool:
    return not isinstance(item, (int, str, bytes)) and (
        any(hasattr(item, name) for name in NAME_FIELDS) or hasattr(item, "topic_id"))


def _lists(obj: Any) -> list[tuple[str, list]]:
    return [(name, value) for name in _fields(obj) if isinstance(value := getattr(obj, name), list)]


def request_partitions(request: Any, metadata: "MetadataView") -> list[tuple[str | None, int | None]]:
    """(topic, partition) for every partition the request names (partition None for a topic
    named without partitions); topic ids are resolved to names."""
    found: list[tuple[str | None, int | None]] = []

    def topic_name(item: Any) -> str | None:
        name = _first(item, NAME_FIELDS)
        if name is None and isinstance(getattr(item, "topic_id", None), uuid.UUID):
            info = metadata.topic_by_id(item.topic_id)
            name = info.name if info is not None else None
        return name

    def walk(obj: Any, depth: int) -> None:
        if depth > 3:
            return
        for _, items in _lists(obj):
            for item in items:
                if _is_topic_item(item):
                    name = topic_name(item)
                    partition_lists = [values for _, values in _lists(item) if values and _is_partition_item(values[0])]
                    if not partition_lists:
                        found.append((name, None))
                    for values in partition_lists[:1]:
                        for value in values:
                            found.append((name, value if isinstance(value, int) else _first(value, INDEX_FIELDS)))
                elif not isinstance(item, (int, str, bytes)):
                    walk(item, depth + 1)

    walk(request, 0)
    return found


def _element_class(cls: type, field_type: str) -> type | None:
    if not (isinstance(field_type, str) and field_type.startswith("list[") and field_type.endswith("]")):
        return None
    element = getattr(sys.modules[cls.__module__], field_type[5:-1], None)
    return element if isinstance(element, type) and dataclasses.is_dataclass(element) else None


def _role(cls: type) -> str | None:
    """What a response struct mirrors of the request: a partition, topic, group, config
    resource, coordinator key, or (any other struct with an error code) one request item each."""
    names = {field.name for field in dataclasses.fields(cls)}
    if names & set(INDEX_FIELDS):
        return "partition"
    if names & set(NAME_FIELDS) or "topic_id" in names:
        return "topic"
    for role in ("group_id", "resource_name", "key"):
        if role in names:
            return role
    if any(_is_error_code(name) for name in names) or _holds_mirrored_lists(cls):
        return "item"
    return None


def _is_error_code(name: str) -> bool:
    return name == "error_code" or name.endswith("_error_code")  # partition_error_code (AddPartitionsToTxn v0-3)


def _holds_mirrored_lists(cls: type) -> bool:
    """A struct around topic lists (WriteTxnMarkers' markers): mirrored one per request item."""
    for field in dataclasses.fields(cls):
        element = _element_class(cls, field.type)
        if element is not None and element is not cls and _role(element) in ("topic", "partition"):
            return True
    return False


def _source_list(source: Any, role: str) -> list | None:
    for _, items in _lists(source):
        if not items:
            continue
        item = items[0]
        if role == "item" or (role == "partition" and _is_partition_item(item)):
            return items
        if role in ("topic", "group_id", "key") and isinstance(item, str):
            return items
        if role == "topic" and _is_topic_item(item):
            return items
        if role in ("group_id", "resource_name") and hasattr(item, role):
            return items
    return None


def _mirror(cls: type, source: Any, code: int) -> Any:
    out = cls()
    for field in dataclasses.fields(cls):
        name = field.name
        if _is_error_code(name):
            setattr(out, name, code)
        elif isinstance(source, str):  # a request list of names: topics, groups, coordinator keys
            if name in NAME_FIELDS or name in ("group_id", "key"):
                setattr(out, name, source)
        elif name in NAME_FIELDS:
            value = _first(source, NAME_FIELDS)
            if isinstance(value, str):
                setattr(out, name, value)
        elif name in INDEX_FIELDS:
            value = source if isinstance(source, int) else _first(source, INDEX_FIELDS)
            if isinstance(value, int):
                setattr(out, name, value)
        elif name in SAME_NAME_FIELDS:
            value = getattr(source, name, None)
            if value is not None:
                setattr(out, name, value)
        else:
            element = _element_class(cls, field.type)
            role = _role(element) if element is not None else None
            if role is not None:
                items = _source_list(source, role)
                if items is not None:
                    setattr(out, name, [_mirror(element, item, code) for item in items])
    return out


def generic_error_response(api_key: int, version: int, request: Any, code: int) -> Any:
    """The API's generated response with ``code`` at every level the request's topics,
    partitions, groups and resources reach, and in the top-level error code where the version
    has one. What the mirror filled in that this version does not carry (a v4+ list, a top-level
    code of a version without one) is reset, as the encoder names it."""
    response = _mirror(codec.response_class(api_key), request, code)
    for _ in range(MAX_RESETS):
        try:
            codec.encode_response(response, version)
            return response
        except codec.EncodeError as exc:
            found = _NOT_IN_VERSION.search(str(exc))
            if found is None:
                raise
            _reset(response, found.group(1), _snake_case(found.group(2)))
    return response


MAX_RESETS = 8
_NOT_IN_VERSION = re.compile(r"(\w+) has a non-default (\w+), which only version")


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _reset(message: Any, class_name: str, field_name: str) -> None:
    """Give ``field_name`` its default in every ``class_name`` struct within ``message``."""
    stack = [message]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif dataclasses.is_dataclass(item):
            for field in dataclasses.fields(item):
                if type(item).__name__ == class_name and field.name == field_name:
                    default = field.default_factory() if field.default_factory is not dataclasses.MISSING \
                        else field.default
                    setattr(item, field.name, default)
                else:
                    stack.append(getattr(item, field.name))
