"""The broker's HTTP side: the console (console.py), /metrics (metrics.py), the JSON API and fault
injection (api.py), served by a small HTTP/1.1 server on Trio (server.py, h11). It reads the
broker only through its services (handlers/registry.py ``Services``) and, in dev-cluster, a
``ClusterControl`` (app.py). ``serve()`` starts it beside the Kafka listener, never before it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from kafkacompat.handlers.registry import Services
    from kafkacompat.http.routing import ClusterControl

DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 9644


@dataclass(frozen=True, slots=True)
class HttpSettings:
    host: str = DEFAULT_HTTP_HOST
    port: int = DEFAULT_HTTP_PORT  # 0: any free port


async def serve(services: "Services", settings: HttpSettings, *, control: "ClusterControl | None" = None,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; reports the bound port, or None when it could not be bound."""
    from kafkacompat.http.app import App
    from kafkacompat.http.server import serve_http

    await serve_http(App(services, control=control).handle, settings.host, settings.port, task_status=task_status)
