"""The control-plane codecs: Kafka's message specs generated into kafkacompat/wire/messages/.

Handlers see typed dataclasses (attribute names are the snake_case of the spec's field names;
nested struct classes hang off their parent, ``response_class(METADATA).MetadataResponseTopic``).
A message module is imported the first time its API is used, so none of this is on the path to
the first accepted connection. scripts/generate_codecs.py regenerates the modules.
"""

from __future__ import annotations

import functools
import importlib
import struct
from typing import Any

from kafkacompat.wire.message_runtime import DecodeError, UnsupportedFieldError
from kafkacompat.wire.messages import APIS

__all__ = [
    "DecodeError", "EncodeError", "decode_request", "decode_response", "encode_request", "encode_response",
    "flexible_versions", "new_response", "request_class", "response_class", "struct_class", "valid_versions",
]


class EncodeError(ValueError):
    """A message that cannot be written at the requested version (a bug in whoever built it)."""


@functools.cache
def _message_class(api_key: int, kind: str) -> Any:
    name, module, _, _, _ = APIS[api_key]
    return getattr(importlib.import_module(f"kafkacompat.wire.messages.{module}_{kind}"), f"{name}{kind.title()}")


def request_class(api_key: int) -> Any:
    return _message_class(api_key, "request")


def response_class(api_key: int) -> Any:
    return _message_class(api_key, "response")


def valid_versions(api_key: int) -> tuple[int, int] | None:
    """The versions Kafka's spec defines for this API (what the generated codecs read and write)."""
    entry = APIS.get(api_key)
    return (entry[2], entry[3]) if entry else None


def flexible_versions(api_key: int) -> int | None:
    """The first flexible version of the API, or None when it has none."""
    entry = APIS.get(api_key)
    return entry[4] if entry else None


def decode_request(api_key: int, version: int, body: bytes | bytearray | memoryview) -> Any:
    return _decode(request_class(api_key), version, body)


def decode_response(api_key: int, version: int, body: bytes | bytearray | memoryview) -> Any:
    return _decode(response_class(api_key), version, body)


def _decode(cls: Any, version: int, body: bytes | bytearray | memoryview) -> Any:
    try:
        return cls.decode(body, version)
    except DecodeError as exc:
        raise DecodeError(f"malformed {cls.__name__} v{version}: {exc}") from exc
    except KeyError as exc:
        raise DecodeError(f"{cls.__name__} has no version {version}") from exc
    except Exception as exc:  # struct.error, IndexError, UnicodeDecodeError: a short or garbled body
        raise DecodeError(f"malformed {cls.__name__} v{version}: {exc!r}") from exc


def new_response(api_key: int, version: int, **fields: Any) -> Any:
    """A response message (the version is given when it is encoded; kept for the handlers' calls)."""
    return response_class(api_key)(**fields)


def encode_response(message: Any, version: int) -> bytes:
    return _encode(message, version)


def encode_request(message: Any, version: int) -> bytes:
    return _encode(message, version)


def _encode(message: Any, version: int) -> bytes:
    try:
        return bytes(message.encode(version))
    except UnsupportedFieldError as exc:
        raise EncodeError(f"{type(message).__name__} v{version}: {exc}") from exc
    except KeyError as exc:
        raise EncodeError(f"{type(message).__name__} has no version {version}") from exc
    except (AttributeError, TypeError, ValueError, OverflowError, struct.error) as exc:  # e.g. None for a value
        raise EncodeError(f"{type(message).__name__} v{version} cannot be encoded: {exc!r}") from exc


def struct_class(message_cls: Any, *path: str) -> Any:
    """A nested struct class of a message, e.g. struct_class(MetadataResponse, 'MetadataResponseTopic')."""
    cls = message_cls
    for name in path:
        cls = getattr(cls, name)
    return cls
