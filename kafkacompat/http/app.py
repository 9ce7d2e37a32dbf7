"""The HTTP application: the route table (method, path pattern) -> handler of (context, request,
path parameters). The console pages, the JSON API and /metrics each bring a ``ROUTES`` list; a
later page is one more module in ``ROUTE_MODULES`` (and, for the console's navigation, an entry
in console.NAV)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable
from urllib.parse import unquote, urlsplit

from kafkacompat.http import api, console, metrics
from kafkacompat.http.routing import ClusterControl, Route
from kafkacompat.http.server import HttpError, Request, Response
from kafkacompat.http.views import RequestRates

if TYPE_CHECKING:
    from kafkacompat.handlers.registry import Services

ROUTE_MODULES = (api, metrics, console)


class App:
    def __init__(self, services: "Services", *, control: ClusterControl | None = None) -> None:
        self.services = services
        self.control = control
        self.rates = RequestRates()
        self.routes: list[Route] = [r for module in ROUTE_MODULES for r in module.ROUTES]

    def handle(self, request: Request) -> "Response | Awaitable[Response]":
        if request.method not in ("GET", "HEAD"):
            _refuse_other_origins(request)
        allowed = []
        for candidate in self.routes:
            match = candidate.pattern.match(request.path)
            if match is None:
                continue
            if candidate.method == request.method or (candidate.method == "GET" and request.method == "HEAD"):
                params = {name: unquote(value) for name, value in match.groupdict().items()}
                return candidate.handler(self, request, params)
            allowed.append(candidate.method)
        if allowed:
            raise HttpError(405, f"{request.method} is not allowed on {request.path}; "
                                 f"use {', '.join(sorted(set(allowed)))}")
        raise HttpError(404, f"no page or API at {request.path}; the API is under /v1 (see README)")


def _refuse_other_origins(request: Request) -> None:
    """A web page of another site must not change the broker (faults, broker stop) through the
    visitor's browser: browsers name the page's origin on such requests; curl and clients don't."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    if origin == "null" or urlsplit(origin).netloc != request.headers.get("host"):
        raise HttpError(403, f"{request.method} from the web page of another origin ({origin}) is refused")
