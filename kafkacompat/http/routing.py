"""What the route modules (api.py, console.py, metrics.py) share: the route type, the context a
route handler gets (the broker's services and, in dev-cluster, its ClusterControl) and the JSON
helpers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from kafkacompat.http.server import HttpError, Request, Response

if TYPE_CHECKING:
    from kafkacompat.handlers.registry import Services
    from kafkacompat.http.views import RequestRates


class ClusterControl(Protocol):
    """What ``dev-cluster`` lets the HTTP API do to its brokers (None on a lone broker)."""

    def broker_ids(self) -> list[int]: ...

    def running(self, broker_id: int) -> bool: ...

    async def crash_broker(self, broker_id: int, *, wait: bool = True) -> None: ...

    async def restart_broker(self, broker_id: int) -> None: ...


class HttpContext(Protocol):
    services: "Services"
    control: ClusterControl | None
    rates: "RequestRates"


RouteHandler = Callable[[HttpContext, Request, dict[str, str]], "Response | Awaitable[Response]"]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: RouteHandler


def route(method: str, path: str, handler: RouteHandler) -> Route:
    """``path`` with ``<name>`` segments (any characters but '/'), e.g. ``/v1/topics/<name>``."""
    regex = re.sub(r"<([a-z_]+)>", r"(?P<\1>[^/]+)", path)
    return Route(method, re.compile(f"^{regex}/?$" if path != "/" else "^/$"), handler)


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, (json.dumps(value, indent=1, default=str) + "\n").encode(), "application/json")


def json_body(request: Request) -> Any:
    try:
        return json.loads(request.body.decode("utf-8")) if request.body.strip() else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}") from None
