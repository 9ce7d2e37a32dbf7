"""The one adapter over kafka-python 3's schema classes, used for control-plane APIs.

Every other module talks to kafka-python only through here, so the library can be swapped for
generated code later without touching handlers. kafka-python is imported lazily: it is off the
path to the first accepted connection.
"""

from __future__ import annotations

import functools
from typing import Any


class DecodeError(ValueError):
    """The request body does not parse at the version its header names."""


@functools.cache
def _classes() -> dict[tuple[int, str], Any]:
    import importlib

    from kafka.protocol.api_message import ApiMessage

    found: dict[tuple[int, str], Any] = {}
    for module_name in ("admin", "consumer", "metadata", "producer"):
        module = importlib.import_module(f"kafka.protocol.{module_name}")
        for name in getattr(module, "__all__", dir(module)):
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, ApiMessage) and cls is not ApiMessage:
                try:
                    found[(cls.API_KEY, cls.type)] = cls
                except (AttributeError, TypeError):
                    continue
    return found


def request_class(api_key: int) -> Any:
    return _classes()[(api_key, "request")]


def response_class(api_key: int) -> Any:
    return _classes()[(api_key, "response")]


def schema_version_range(api_key: int) -> tuple[int, int] | None:
    """The versions kafka-python's schema for this API can encode and decode."""
    cls = _classes().get((api_key, "request"))
    if cls is None:
        return None
    low, high = cls.valid_versions
    return low, high


def decode_request(api_key: int, version: int, body: bytes | bytearray | memoryview) -> Any:
    cls = request_class(api_key)
    try:
        message = cls.decode(memoryview(body), version=version)
    except Exception as exc:  # the library raises struct.error, IndexError, ValueError...
        raise DecodeError(f"malformed {cls.name} v{version} request: {exc!r}") from exc
    _check_non_nullable(cls.fields, message, version, cls.name)
    return message


_NULLABLE_TYPES = ("string", "bytes", "records")


def _check_non_nullable(fields: dict, message: Any, version: int, where: str) -> None:
    """Kafka's generated readers refuse null (length -1) for a string, bytes or array field that
    is not nullable at this version ("non-nullable field X was serialized as null"); kafka-python
    decodes it as None, which no handler expects."""
    for attribute, field in fields.items():
        if field._tag is not None or not field.for_version_q(version):
            continue
        value = getattr(message, attribute, None)
        if value is None:
            if (field.is_array() or field._type_str in _NULLABLE_TYPES) and not field.nullable_for_version_q(version):
                raise DecodeError(f"malformed {where} v{version} request: non-nullable field {field.name} "
                                  f"was serialized as null")
        elif field.is_struct_array():
            for item in value:
                _check_non_nullable(field.fields, item, version, where)
        elif field.is_struct():
            _check_non_nullable(field.fields, value, version, where)


def new_response(api_key: int, version: int, **fields: Any) -> Any:
    return response_class(api_key)(version=version, **fields)


def encode_response(message: Any, version: int) -> bytes:
    return bytes(message.encode(version=version))


def struct_class(message_cls: Any, *path: str) -> Any:
    """A nested struct class of a message, e.g. struct_class(MetadataResponse, 'MetadataResponseTopic')."""
    cls = message_cls
    for name in path:
        cls = getattr(cls, name)
    return cls
