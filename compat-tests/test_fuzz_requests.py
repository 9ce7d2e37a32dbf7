"""Every API and version the broker advertises, sent with damaged bodies (bytes overwritten with
0x00/0xff/0x7f/0x80 or random values, bodies cut short): each request is answered or its
connection closed as malformed, never by a crash inside a handler, and the broker keeps serving.
A fixed seed keeps the run repeatable; about 2,500 requests."""

from __future__ import annotations

import random
import socket

import pytest

pytest.register_assert_rewrite("clients")
from clients import assert_client_works, frame, request_header  # noqa: E402

from kafkacompat.handlers import REGISTRY  # noqa: E402
from clients import request_class  # noqa: E402

TRIALS_PER_VERSION = 12


def _default_body(api_key: int, version: int) -> tuple[bytes, bool]:
    cls = request_class(api_key)
    return bytes(cls(version=version).encode(version=version)), cls.flexible_version_q(version)


def _damaged(body: bytes, trial: int, rng: random.Random) -> bytes:
    data = bytearray(body)
    if trial == 0 or not data:
        return bytes(data)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    if trial % 4 == 0:
        data = data[: rng.randrange(len(data) + 1)]
    return bytes(data)


def _send(host: str, port: int, payload: bytes) -> str:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(payload)
        sock.settimeout(0.5)  # long enough for an answer here; parked requests are not waited for
        try:
            return "answered" if sock.recv(4) else "closed"
        except socket.timeout:
            return "parked"  # e.g. a JoinGroup waiting for its rebalance
        except ConnectionResetError:
            return "closed"


def test_damaged_requests_of_every_api_never_crash_a_handler(broker_factory, topic_name):
    broker = broker_factory("--set", "group.initial.rebalance.delay.ms=0")
    host, port = broker.bootstrap.rsplit(":", 1)
    rng = random.Random(20261201)
    outcomes: dict[str, int] = {}
    for api_key, handler in sorted(REGISTRY.items()):
        for version in range(handler.min_version, handler.max_version + 1):
            body, flexible = _default_body(api_key, version)
            for trial in range(TRIALS_PER_VERSION):
                header = request_header(api_key, version, 1000 + trial, flexible=flexible)
                outcome = _send(host, int(port), frame(header + _damaged(body, trial, rng)))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("answered", 0) > 200 and outcomes.get("closed", 0) > 200, outcomes
    crashes = [line for line in broker.output().splitlines() if "internal error" in line]
    assert not crashes, "\n".join(crashes[:10])
    assert_client_works(broker.bootstrap, topic_name)
