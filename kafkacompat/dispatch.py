"""One request through the handler registry: decode, run the handler with the broker's services,
encode and frame the response."""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

from kafkacompat.faults import apply_fault
from kafkacompat.wire.chunks import Chunk
from kafkacompat.wire.frame import (
    API_VERSIONS_KEY,
    HeaderError,
    ProtocolViolation,
    RequestHeader,
    api_name,
    frame_prefix,
    response_header,
)

if TYPE_CHECKING:
    from kafkacompat.faults import Fault
    from kafkacompat.handlers.registry import Handler, Services
    from kafkacompat.server import Connection

_HANDLERS: tuple | None = None  # (REGISTRY, RequestContext, unsupported_version_response)


def _import_handlers() -> tuple:
    """The handler registry, imported at the first request (the handlers and their codecs stay off
    the start-up path) and kept: an import statement costs ~1.5 us on every request."""
    global _HANDLERS
    from kafkacompat.handlers import REGISTRY, RequestContext
    from kafkacompat.handlers.api_versions import unsupported_version_response

    _HANDLERS = (REGISTRY, RequestContext, unsupported_version_response)
    return _HANDLERS


async def dispatch(
    services: "Services", header: RequestHeader, body: memoryview, connection: "Connection | None"
) -> list[Chunk] | None:
    """Run one request; return the framed response chunks, or None when none is sent."""
    REGISTRY, RequestContext, unsupported_version_response = _HANDLERS or _import_handlers()
    handler = REGISTRY.get(header.api_key)
    version = header.api_version
    if handler is None or not handler.supports(version):
        if header.api_key == API_VERSIONS_KEY:
            return _frame(response_header(header.correlation_id, API_VERSIONS_KEY, 0), unsupported_version_response(bool(services.telemetry.subscriptions)))
        if handler is None:
            raise HeaderError(f"unknown API key {header.api_key} (correlation id {header.correlation_id})")
        raise HeaderError(
            f"{api_name(header.api_key)} v{version} is not supported (this broker serves "
            f"v{handler.min_version}-v{handler.max_version}); upgrade or configure the client's api version"
        )
    try:
        request = handler.decode(version, body)
    except ProtocolViolation:
        raise
    except ValueError as exc:
        raise ProtocolViolation(f"malformed {api_name(header.api_key)} v{version} request: {exc}") from exc
    ctx = RequestContext(services, header, connection, len(body))
    metrics = services.metrics
    started = perf_counter() if metrics.enabled else 0.0
    faults = services.faults
    fault = faults.take(header, request, services.metadata) if faults.active else None
    timer = services.quotas.timer if services.quotas is not None else None
    if fault is not None:
        response = await _run_with_fault(fault, handler, request, ctx)
    elif timer is None or header.api_key in _NEVER_REQUEST_THROTTLED:
        response = await handler.fn(request, ctx)
    else:
        response = await _timed(handler.fn, request, ctx, timer)
    if metrics.enabled:
        metrics.request_done(header.api_key, perf_counter() - started)
    if response is None:
        return None
    encoded = handler.encode(response, version)
    return _frame(response_header(header.correlation_id, header.api_key, version), encoded)


_NEVER_REQUEST_THROTTLED = frozenset({17, 18, 36})   # SaslHandshake, ApiVersions, SaslAuthenticate


async def _timed(fn, request, ctx, timer):
    """Run the handler timed for its client's request_percentage quota (quotas.py): over it, the
    response carries the throttle time and the connection is muted for it (KIP-124, KIP-219)."""
    task = timer.start()
    try:
        response = await fn(request, ctx)
    finally:
        throttle_ms = ctx.record_request_time(timer.stop(task))
    if throttle_ms > 0 and response is not None:
        if hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
        if ctx.connection is not None:
            ctx.connection.throttle(throttle_ms)
    return response


async def _run_with_fault(fault: "Fault", handler: "Handler", request, context) -> object:
    """The injected delay or closed connection, then the injected error's response (the request
    is not applied) or, without an error, the handler's."""
    answered, response = await apply_fault(fault, handler.api_key, context.version, request, handler.error_response)
    if answered:
        return response
    return await handler.fn(request, context)


def _frame(header: bytes, encoded: "bytes | list[Chunk]") -> list[Chunk]:
    if isinstance(encoded, (bytes, bytearray)):
        return [frame_prefix(len(header) + len(encoded)) + header + encoded]
    size = len(header) + sum(len(chunk) for chunk in encoded)
    return [frame_prefix(size) + header, *encoded]
