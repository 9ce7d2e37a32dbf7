"""A blocking client of a broker's HTTP API (tests, the pytest plugin, benchmarks): stdlib only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class HttpAnswer:
    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def http_request(method: str, url: str, body: Any = None, *, raw: bytes | None = None,
                 headers: dict[str, str] | None = None, timeout: float = 30.0) -> HttpAnswer:
    """Any status is returned (4xx, 5xx included); only a failure to connect raises."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return HttpAnswer(response.status, response.read(), response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as error:
        return HttpAnswer(error.code, error.read(), error.headers.get("Content-Type", ""))


def add_fault(http_url: str, **fields: Any) -> dict[str, Any]:
    """POST /v1/faults; raises ValueError with the broker's message when the fault is refused."""
    answer = http_request("POST", http_url.rstrip("/") + "/v1/faults", fields)
    if answer.status != 201:
        raise ValueError(f"fault refused ({answer.status}): {answer.json().get('error')}")
    return answer.json()


def clear_faults(http_url: str) -> None:
    http_request("DELETE", http_url.rstrip("/") + "/v1/faults")
