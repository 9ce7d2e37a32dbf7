"""The handler registry: api key -> handler and version range. ApiVersions is derived from it.

A handler is ``async def fn(request, ctx) -> response``. By default the request is decoded and
the response encoded with the codecs generated from Kafka's message specs (wire/codec.py);
hot-path APIs plug in their own decoder and encoder. A handler that returns None sends no response (Produce acks=0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import trio

from kafkacompat.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from kafkacompat.security.principal import ANONYMOUS, KafkaPrincipal
from kafkacompat.faults import FaultInjector
from kafkacompat.metrics import BrokerMetrics
from kafkacompat.quotas import MutationBudget
from kafkacompat.services import AcceptingTransactionVerifier
from kafkacompat.telemetry import ClientMetricsManager
from kafkacompat.wire import codec
from kafkacompat.wire.chunks import Chunk
from kafkacompat.wire.frame import api_name

if TYPE_CHECKING:
    from pathlib import Path

    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.producer_ids import ProducerIdManager
    from kafkacompat.faults import ErrorResponseBuilder
    from kafkacompat.fetch_sessions import FetchSessionCache
    from kafkacompat.groups.coordinator import GroupCoordinator
    from kafkacompat.quotas import ClientQuotaManager
    from kafkacompat.replication.manager import ReplicaManager
    from kafkacompat.security.authorizer import Authorizer
    from kafkacompat.security.credentials import ScramCredentialStore
    from kafkacompat.security.tokens import DelegationTokens
    from kafkacompat.server import Connection
    from kafkacompat.services import AdminOps, MetadataView, TransactionVerifier
    from kafkacompat.groups.group_configs import GroupConfigs
    from kafkacompat.shares import ShareServices
    from kafkacompat.transactions.coordinator import TransactionCoordinator
    from kafkacompat.wire.frame import RequestHeader

Decoder = Callable[[int, memoryview], Any]
Encoder = Callable[[Any, int], "bytes | list[Chunk]"]


@dataclass(frozen=True, slots=True)
class Services:
    """What handlers may use: read the metadata, change it through admin, reach the partitions
    hosted here, the group and transaction coordinators, the producer ids and the transaction
    verifier; the authorizer (None: none configured, everything allowed) and the client quotas;
    what dispatch counts (metrics) and injects (faults); the client telemetry."""

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
    authorizer: "Authorizer | None" = None
    quotas: "ClientQuotaManager | None" = None
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)
    faults: FaultInjector = field(default_factory=FaultInjector)
    shares: "ShareServices | None" = None
    # KIP-714 client telemetry: the subscriptions, client instances and their pushed metrics
    telemetry: ClientMetricsManager = field(default_factory=lambda: ClientMetricsManager(1024 * 1024))
    # Kafka 4's per-group configs (GROUP config resources), kept in step with the metadata store
    group_configs: "GroupConfigs | None" = None


@dataclass(slots=True)
class RequestContext:
    services: Services
    header: "RequestHeader"
    connection: "Connection | None"
    request_bytes: int = 0   # the request body's size (what the produce byte-rate quota counts)

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

    @property
    def principal(self) -> KafkaPrincipal:
        return self.connection.principal if self.connection is not None else ANONYMOUS

    @property
    def client_host(self) -> str:
        return self.connection.client_host if self.connection is not None else "unknown"

    # The one authorization check every handler calls (Kafka's AuthHelper.authorize): may this
    # request's principal, from its address, do ``operation`` on the resource? Always True
    # without an authorizer. ``log_denied=False`` for checks that only filter (Metadata of every
    # topic, ListGroups), as Kafka logs those denials at debug level only.
    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  log_denied: bool = True) -> bool:
        authorizer = self.services.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(self.principal, self.client_host, operation, resource_type, name,
                                    request=api_name(self.header.api_key), log_denied=log_denied)

    def authorize_by_resource_type(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal do the operation on any resource of the type at all?"""
        authorizer = self.services.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize_by_resource_type(self.principal, self.client_host, operation, resource_type)

    def authorize_all(self, operation: AclOperation, resource_type: ResourceType, names) -> bool:
        """Every named resource allowed (Kafka's filterByAuthorized keeping them all)."""
        return all([self.authorize(operation, resource_type, name) for name in set(names or ())])

    def authorize_cluster(self, operation: AclOperation, *, log_denied: bool = True) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    # Client quotas (quotas.py): record what the request used, get the throttle time in ms.
    def record_produce_bytes(self) -> int:
        quotas = self.services.quotas
        if quotas is None:
            return 0
        return quotas.produce.record(self.principal.name, self.client_id or "", self.request_bytes,
                                     trio.current_time())

    def record_fetch_bytes(self, count: int) -> int:
        quotas = self.services.quotas
        if quotas is None:
            return 0
        return quotas.fetch.record(self.principal.name, self.client_id or "", count, trio.current_time())

    def record_request_time(self, seconds: float) -> int:
        """The handler's time, as Kafka's percentage units (100 = one thread for a second)."""
        quotas = self.services.quotas
        if quotas is None:
            return 0
        return quotas.request.record(self.principal.name, self.client_id or "", seconds * 100, trio.current_time())

    def mutation_budget(self, strict_since: int) -> MutationBudget:
        """The client's controller_mutation_rate for this CreateTopics / CreatePartitions /
        DeleteTopics: strict from ``strict_since`` on, else only recorded (KIP-599)."""
        quotas = self.services.quotas
        bucket = None if quotas is None else quotas.mutation.bucket(self.principal.name, self.client_id or "",
                                                                    trio.current_time())
        return MutationBudget(bucket, strict=self.version >= strict_since)

    def throttle_for_mutations(self, budget: MutationBudget, response) -> None:
        """The mutation quota's throttle time in the response, the connection muted for it."""
        throttle_ms = budget.throttle_ms()
        if throttle_ms > 0:
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
            if self.connection is not None:
                self.connection.throttle(throttle_ms)

    def unrecord_fetch_bytes(self, count: int) -> None:
        if self.services.quotas is not None:
            self.services.quotas.fetch.unrecord(self.principal.name, self.client_id or "", count, trio.current_time())

    async def throttle_for_quota(self, throttle_ms: int, client_throttles_since: int) -> None:
        """KIP-219: a client at ``client_throttles_since`` or later gets its answer at once, with
        throttle_time_ms, and its connection is not read until the time has passed; an older
        client gets its answer only after the throttle time (which mutes it as well)."""
        if throttle_ms <= 0:
            return
        if self.version < client_throttles_since:
            await trio.sleep(throttle_ms / 1000)
        elif self.connection is not None:
            self.connection.throttle(throttle_ms)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations bitfield of Metadata, DescribeGroups and DescribeCluster."""
        authorizer = self.services.authorizer
        if authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
        return authorizer.authorized_operations(self.principal, self.client_host, resource_type, name)


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[[Any, RequestContext], Awaitable[Any]]
    decode: Decoder
    encode: Encoder
    # The response that carries an injected fault's error (faults.py); None: built generically
    # from the generated response class.
    error_response: "ErrorResponseBuilder | None" = None

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
    error_response: "ErrorResponseBuilder | None" = None,
) -> Callable[[Callable], Callable]:
    """Register the decorated coroutine as the handler for ``api_key`` at these versions."""

    def register(fn: Callable) -> Callable:
        if api_key in REGISTRY:
            raise RuntimeError(f"two handlers registered for api key {api_key}")
        REGISTRY[api_key] = Handler(
            api_key, min_version, max_version, fn, decode or _schema_decoder(api_key), encode or _schema_encode,
            error_response,
        )
        return fn

    return register


def response_for(api_key: int, ctx: RequestContext, **fields: Any) -> Any:
    """A response message of the request's API (encoded at the request's version)."""
    return codec.new_response(api_key, ctx.version, **fields)
