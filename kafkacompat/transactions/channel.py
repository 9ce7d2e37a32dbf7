"""Requests from this broker to another one (WriteTxnMarkers to a partition leader,
AddPartitionsToTxn to a transaction coordinator): one connection per broker, one request in
flight on it at a time, reopened after a failure. The connection is the replica fetcher's."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

import trio

from kafkacompat.replication.fetcher import _NETWORK_ERRORS, FetcherConnectionError, _Connection
from kafkacompat.security.client import authenticate, open_broker_stream
from kafkacompat.wire import codec

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.state import BrokerInfo

log = logging.getLogger("kafkacompat.transactions")


class BrokerUnreachable(Exception):
    """The request did not get an answer (no such broker, connection refused or lost, timeout)."""


class _Peer:
    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.stream: trio.abc.Stream | None = None
        self.conn: _Connection | None = None


class BrokerChannel:
    def __init__(self, node_id: int, brokers: "Callable[[], dict[int, BrokerInfo]]", timeout_ms: int,
                 config: "BrokerConfig | None" = None) -> None:
        """With ``config``, connections go to the other brokers' inter-broker listener, through
        its TLS and SASL (security/client.py), as the replica fetchers' do."""
        self.config = config
        self.node_id = node_id
        self.brokers = brokers
        self.timeout = timeout_ms / 1000
        self._peers: dict[int, _Peer] = {}

    async def request(self, broker_id: int, api_key: int, version: int, message: Any) -> Any:
        """Send ``message`` (a request of ``api_key`` at ``version``) and return the decoded response."""
        peer = self._peers.setdefault(broker_id, _Peer())
        flexible_from = codec.flexible_versions(api_key)
        flexible = flexible_from is not None and version >= flexible_from
        async with peer.lock:
            try:
                with trio.fail_after(self.timeout):
                    if peer.conn is None:
                        await self._connect(broker_id, peer)
                    assert peer.conn is not None
                    body = await peer.conn.request(api_key, version, codec.encode_request(message, version),
                                                   flexible_header=flexible, flexible_response=flexible)
                return codec.decode_response(api_key, version, body)
            except (*_NETWORK_ERRORS, FetcherConnectionError, codec.DecodeError) as exc:
                await self._close(peer)
                raise BrokerUnreachable(f"broker {broker_id}: {exc or type(exc).__name__}") from None

    async def _connect(self, broker_id: int, peer: _Peer) -> None:
        info = self.brokers().get(broker_id)
        if info is None:
            raise FetcherConnectionError(f"broker {broker_id} is not registered")
        if self.config is None:
            peer.stream = await trio.open_tcp_stream(info.host, info.port)
            peer.conn = _Connection(peer.stream, f"kafkacompat-broker-{self.node_id}")
            return
        host, port = info.address(self.config.inter_broker_listener.name)
        peer.stream = await open_broker_stream(self.config, host, port)
        peer.conn = _Connection(peer.stream, f"kafkacompat-broker-{self.node_id}")
        await authenticate(self.config, peer.conn.request, host)

    @staticmethod
    async def _close(peer: _Peer) -> None:
        stream, peer.stream, peer.conn = peer.stream, None, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await stream.aclose()
