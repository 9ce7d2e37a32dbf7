"""The handler registry: api key -> handler and version range. ApiVersions is derived from it.

A handler is ``async def fn(request, ctx) -> response``. By default the request is decoded and
the response encoded with the codecs generated from Kafka's message specs (wire/codec.py);
hot-path APIs plug in their own decoder and encoder. A handler that returns None sends no response (Produce acks=0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kafkacompat.services import AcceptingTransactionVerifier
from kafkacompat.wire import codec
from kafkacompat.wire.chunks import Chunk

if TYPE_CHECKING:
    from pathlib import Path

    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.producer_ids import ProducerIdManager
    from kafkacompat.fetch_sessions import FetchSessionCache
    from kafkacompat.groups.coordinator import GroupCoordinator
    from kafkacompat.replication.manager import ReplicaManager
    from kafkacompat.security.credentials import ScramCredentialStore
    from kafkacompat.security.tokens import DelegationTokens
    from kafkacompat.server import Connection
    from kafkacompat.services import AdminOps, MetadataView, TransactionVerifier
    from kafkacompat.transactions.coordinator import TransactionCoordinator
    from kafkacompat.wire.frame import RequestHeader

Decoder = Callable[[int, memoryview], Any]
Encoder = Callable[[Any, int], "bytes | list[Chunk]"]


@dataclass(frozen=True, slots=True)
class Services:
    """What handlers may use: read the metadata, change it through admin, reach the partitions
    hosted here, the group and transaction coordinators, the producer ids and the transaction
    verifier."""

    config: "BrokerConfig"
    metadata: "MetadataView"
    admin: "AdminOps"
    replicas: "ReplicaManager"
    groups: "GroupCoordinator"
    producer_ids: "ProducerIdManager"
    log_dir: "Path"
    fetch_sessions: "FetchSessionCache"
    # KIP-890: asked before a transactional batch starts a transaction on a partition.
    txn_verifier: "TransactionVerifier" = field(default_factory=AcceptingTransactionVerifier)
    transactions: "TransactionCoordinator | None" = None
    credentials: "ScramCredentialStore | None" = None  # SCRAM credentials (the metadata store's /config/users)
    tokens: "DelegationTokens | None" = None  # delegation tokens (/delegation_token/tokens)


@dataclass(slots=True)
class RequestContext:
    services: Services
    header: "RequestHeader"
    connection: "Connection | None"

    @property
    def config(self) -> "BrokerConfig":
        return self.services.config

    @property
    def metadata(self) -> "MetadataView":
        return self.services.metadata

    @property
    def admin(self) -> "AdminOps":
        return self.services.admin

    @property
    def replicas(self) -> "ReplicaManager":
        return self.services.replicas

    @property
    def groups(self) -> "GroupCoordinator":
        return self.services.groups

    @property
    def producer_ids(self) -> "ProducerIdManager":
        return self.services.producer_ids

    @property
    def fetch_sessions(self) -> "FetchSessionCache":
        return self.services.fetch_sessions

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def listener_name(self) -> str | None:
        """The listener the request came in on (what Metadata advertises back), None in-process."""
        return self.connection.listener_name if self.connection is not None else None


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[[Any, RequestContext], Awaitable[Any]]
    decode: Decoder
    encode: Encoder

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


REGISTRY: dict[int, Handler] = {}


def _schema_decoder(api_key: int) -> Decoder:
    return lambda version, body: codec.decode_request(api_key, version, body)


def _schema_encode(message: Any, version: int) -> bytes:
    return codec.encode_response(message, version)


def handles(
    api_key: int,
    min_version: int,
    max_version: int,
    *,
    decode: Decoder | None = None,
    encode: Encoder | None = None,
) -> Callable[[Callable], Callable]:
    """Register the decorated coroutine as the handler for ``api_key`` at these versions."""

    def register(fn: Callable) -> Callable:
        if api_key in REGISTRY:
            raise RuntimeError(f"two handlers registered for api key {api_key}")
        REGISTRY[api_key] = Handler(
            api_key, min_version, max_version, fn, decode or _schema_decoder(api_key), encode or _schema_encode
        )
        return fn

    return register


def response_for(api_key: int, ctx: RequestContext, **fields: Any) -> Any:
    """A response message of the request's API (encoded at the request's version)."""
    return codec.new_response(api_key, ctx.version, **fields)
