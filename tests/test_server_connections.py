"""The connection loop in-process: an internal error in one request closes only that
connection, with a log line, and the broker keeps serving others."""

from __future__ import annotations

import logging
import struct

import trio

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.handlers import REGISTRY
from kafkacompat.server import Connection

METADATA, API_VERSIONS = 3, 18


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    return struct.pack(">i", len(payload)) + payload


async def read_response(sock) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


def test_internal_error_closes_only_that_connection(tmp_path, monkeypatch, caplog):
    async def failing_handler(request, ctx):
        raise RuntimeError("synthetic failure")

    original = REGISTRY[METADATA]
    monkeypatch.setitem(REGISTRY, METADATA, type(original)(
        original.api_key, original.min_version, original.max_version, failing_handler, original.decode,
        original.encode,
    ))
    broker = Broker(BrokerConfig.load(data_dir=tmp_path))
    broker.open()

    async def main():
        async with trio.open_nursery() as nursery:
            bad_server, bad_client = trio.socket.socketpair()
            good_server, good_client = trio.socket.socketpair()
            nursery.start_soon(Connection(broker, bad_server).serve)
            nursery.start_soon(Connection(broker, good_server).serve)
            await bad_client.send(request(METADATA, 1, 7, struct.pack(">i", -1)))
            assert await read_response(bad_client) == b"", "the failing request's connection is closed"
            await good_client.send(request(API_VERSIONS, 0, 8))
            response = await read_response(good_client)
            assert struct.unpack(">ih", response[4:10]) == (8, 0)
            good_client.close()

    with caplog.at_level(logging.ERROR, logger="kafkacompat.server"):
        trio.run(main)
    broker.close()
    assert any("internal error" in r.getMessage() and r.exc_info for r in caplog.records)
