"""Client quotas (KIP-546): Kafka's validation and filter matching, stored in ZooKeeper mode's layout.

The rules are those of Kafka's controller (ClientQuotaControlManager) and broker metadata image
(ClientQuotasImage.describe), with their error codes and messages. The quotas are stored where
Kafka's ZooKeeper mode kept them, in the metadata store (the single node's embedded store, or the
cluster's)::

    /config/users/<user>                       {"version":1,"config":{"producer_byte_rate":"1048576"}}
    /config/users/<user>/clients/<client-id>   (the same document)
    /config/clients/<client-id>
    /config/ips/<ip>

Names are sanitized as Kafka's Sanitizer does (URL encoding, '*' as %2A); the default entity
(a null name) is ``<default>``. Values are strings as Kafka wrote them: integers for LONG/INT
quotas, Java's Double text for DOUBLE ones. A node stays when its last quota goes (it may also
hold a user's client nodes or, written by Kafka, SCRAM credentials); describe skips entities
without a quota. Quotas are stored, never enforced: there is no throttling.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
import math
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import quote, unquote_plus

import trio

from kafkacompat.controller.store import BadVersionError, MetadataStore, NodeExistsError, encode_json
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.quotas")

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
DEFAULT_NAME = "<default>"

USERS_PATH = "/config/users"
CLIENTS_PATH = "/config/clients"
IPS_PATH = "/config/ips"

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

LONG_MAX_AS_DOUBLE = float(2**63)   # Java widens Long.MAX_VALUE to 2^63 in a double comparison
INT_MAX = 2**31 - 1
FRACTION_TOLERANCE = 1e-6


class QuotaType(enum.Enum):
    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


# QuotaConfig.userAndClientQuotaConfigs() and ipConfigs().
USER_AND_CLIENT_QUOTAS = {
    "producer_byte_rate": QuotaType.LONG,
    "consumer_byte_rate": QuotaType.LONG,
    "request_percentage": QuotaType.DOUBLE,
    "controller_mutation_rate": QuotaType.DOUBLE,
}
IP_QUOTAS = {"connection_creation_rate": QuotaType.INT}


class QuotaEntity:
    """A map of entity type -> name (None: the default entity), kept in the order given.
    Equal to another entity with the same map in any order, as Kafka's ClientQuotaEntity."""

    __slots__ = ("entries", "_key")

    def __init__(self, entries: Iterable[tuple[str, str | None]]) -> None:
        self.entries: dict[str, str | None] = dict(entries)
        self._key = frozenset(self.entries.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuotaEntity) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        inner = ", ".join(f"{kind}={'null' if name is None else name}" for kind, name in self.entries.items())
        return f"ClientQuotaEntity(entries={{{inner}}})"

    __repr__ = __str__


@dataclass(frozen=True)
class QuotaAlteration:
    entity: QuotaEntity
    ops: list[tuple[str, float | None]]   # (key, value); None removes the key


@dataclass(frozen=True)
class QuotaFilter:
    exact: dict[str, str | None]   # entity type -> the name it must have (None: the default)
    specified: frozenset[str]      # entity types that must be present with any name
    strict: bool                   # no entity types other than the filter's

    def matches(self, entity: QuotaEntity) -> bool:
        entries = entity.entries
        if self.strict and len(entries) != len(self.exact) + len(self.specified):
            return False
        return (all(kind in entries and entries[kind] == name for kind, name in self.exact.items())
                and all(kind in entries for kind in self.specified))


def invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def parse_filter(components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
    """A DescribeClientQuotas filter from (entity type, match type, match) components; raises
    KafkaError as Kafka's ClientQuotasImage.describe."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise invalid("Invalid empty entity type.")
        if entity_type in exact or entity_type in specified:
            raise invalid(f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(entity_type)
        else:
            raise invalid(f"Unknown match type {match_type}")
    kinds = exact.keys() | specified
    if IP in kinds and (USER in kinds or CLIENT_ID in kinds):
        raise invalid("Invalid entity filter component combination. IP filter component should not be used "
                      "with user or clientId filter component.")
    return QuotaFilter(exact, frozenset(specified), strict)


# ---- validation of alterations (ClientQuotaControlManager) ------------------------------------


def validate_entity(entity: QuotaEntity) -> None:
    if not entity.entries:
        raise invalid("Invalid empty client quota entity")
    for entity_type, name in entity.entries.items():
        if entity_type not in ENTITY_TYPES:
            raise invalid(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise invalid(f"Empty {entity_type} not supported")


async def is_valid_ip_entity(name: str | None) -> bool:
    """Kafka's test is InetAddress.getByName: an address literal, or a name that resolves."""
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        await trio.socket.getaddrinfo(name, None)
    except (OSError, UnicodeError, ValueError):
        return False
    return True


async def quota_types_for(entity: QuotaEntity) -> dict[str, QuotaType]:
    """The quota keys this combination of entity types accepts."""
    kinds = entity.entries.keys()
    if IP in kinds:
        if USER in kinds or CLIENT_ID in kinds:
            # Kafka's message, missing space included ("should" + "not be combined").
            raise invalid("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        ip = entity.entries[IP]
        if not await is_valid_ip_entity(ip):
            raise invalid(f"{ip} is not a valid IP or resolvable host.")
        return IP_QUOTAS
    if USER in kinds or CLIENT_ID in kinds:
        return USER_AND_CLIENT_QUOTAS
    raise invalid("Invalid empty client quota entity")


def validate_quota_value(types: dict[str, QuotaType], key: str, value: float) -> None:
    quota_type = types.get(key)
    if quota_type is None:
        raise invalid(f"Invalid configuration key {key}")
    if value <= 0.0:
        raise invalid(f"Quota {key} must be greater than 0")
    if quota_type is QuotaType.DOUBLE:
        return
    if quota_type is QuotaType.INT and value > INT_MAX:
        raise invalid(f"Proposed value for {key} is too large for an INT.")
    if quota_type is QuotaType.LONG and value > LONG_MAX_AS_DOUBLE:
        raise invalid(f"Proposed value for {key} is too large for a LONG.")
    if abs(value % 1.0) > FRACTION_TOLERANCE:   # NaN passes, as in Kafka
        raise invalid(f"{key} cannot be a fractional value.")


async def validated_changes(alteration: QuotaAlteration) -> dict[str, float | None]:
    """The alteration's changes (key -> new value, None to remove); raises KafkaError."""
    validate_entity(alteration.entity)
    types = await quota_types_for(alteration.entity)
    changes = dict(alteration.ops)
    for key, value in changes.items():
        if value is not None:
            validate_quota_value(types, key, value)
    return changes


# ---- storage ----------------------------------------------------------------------------------


def sanitize(name: str | None) -> str:
    """Kafka's Sanitizer.sanitize (Java's URLEncoder, then '*' -> %2A, '+' -> %20)."""
    if name is None:
        return DEFAULT_NAME
    return quote(name, safe="").replace("~", "%7E")


def desanitize(text: str) -> str | None:
    return None if text == DEFAULT_NAME else unquote_plus(text)


def entity_path(entity: QuotaEntity) -> str:
    """Where a validated entity lives (ZooKeeper mode's /config/<type>/<name>)."""
    entries = entity.entries
    if USER in entries and CLIENT_ID in entries:
        return f"{USERS_PATH}/{sanitize(entries[USER])}/clients/{sanitize(entries[CLIENT_ID])}"
    if USER in entries:
        return f"{USERS_PATH}/{sanitize(entries[USER])}"
    if CLIENT_ID in entries:
        return f"{CLIENTS_PATH}/{sanitize(entries[CLIENT_ID])}"
    return f"{IPS_PATH}/{sanitize(entries[IP])}"


def format_quota(quota_type: QuotaType | None, value: float) -> str:
    """The text Kafka's ZooKeeper mode stored: integers for LONG/INT, else Java's Double text."""
    if quota_type in (QuotaType.LONG, QuotaType.INT) and value.is_integer():
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _config_of(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        document = json.loads(data)
    except ValueError:
        log.warning("Ignoring an unreadable client quota node: %r", data[:200])
        return {}
    config = document.get("config") if isinstance(document, dict) else None
    return dict(config) if isinstance(config, dict) else {}


def _quota_values(config: dict[str, str], accepted: dict[str, QuotaType]) -> dict[str, float]:
    values: dict[str, float] = {}
    for key, text in config.items():
        if key not in accepted:
            continue   # e.g. a user's SCRAM credentials
        try:
            values[key] = float(text)
        except (TypeError, ValueError):
            log.warning("Ignoring the unreadable client quota %s=%r", key, text)
    return values


class ClientQuotaStore:
    """Client quotas in a MetadataStore, in ZooKeeper mode's layout."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def read_all(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with at least one quota."""
        entities: dict[str, QuotaEntity] = {}
        users = await self.store.children_or_empty(USERS_PATH)
        for user in users:
            entities[f"{USERS_PATH}/{user}"] = QuotaEntity([(USER, desanitize(user))])
            for client in await self.store.children_or_empty(f"{USERS_PATH}/{user}/clients"):
                entities[f"{USERS_PATH}/{user}/clients/{client}"] = QuotaEntity(
                    [(USER, desanitize(user)), (CLIENT_ID, desanitize(client))])
        for client in await self.store.children_or_empty(CLIENTS_PATH):
            entities[f"{CLIENTS_PATH}/{client}"] = QuotaEntity([(CLIENT_ID, desanitize(client))])
        for ip in await self.store.children_or_empty(IPS_PATH):
            entities[f"{IPS_PATH}/{ip}"] = QuotaEntity([(IP, desanitize(ip))])
        nodes = await self.store.get_many(list(entities))
        found: dict[QuotaEntity, dict[str, float]] = {}
        for path, entity in entities.items():
            node = nodes.get(path)
            accepted = IP_QUOTAS if IP in entity.entries else USER_AND_CLIENT_QUOTAS
            values = _quota_values(_config_of(node[0] if node else None), accepted)
            if values:
                found[entity] = values
        return found

    async def describe(self, quota_filter: QuotaFilter) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: values for entity, values in (await self.read_all()).items()
                if quota_filter.matches(entity)}

    async def apply(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None:
        """Write validated changes to the entity's node by compare-and-set (retried when another
        writer got there first); nothing is written when nothing changes."""
        path = entity_path(entity)
        types = IP_QUOTAS if IP in entity.entries else USER_AND_CLIENT_QUOTAS
        while True:
            found = await self.store.get_or_none(path)
            config = _config_of(found[0] if found else None)
            updated = dict(config)
            for key, value in changes.items():
                if value is None:
                    updated.pop(key, None)
                else:
                    updated[key] = format_quota(types.get(key), value)
            if updated == config:
                return
            data = encode_json({"version": 1, "config": updated})
            try:
                if found is None:
                    await self.store.create(path, data, makepath=True)
                else:
                    await self.store.set(path, data, found[1])
                return
            except (BadVersionError, NodeExistsError):
                continue

    async def alter(self, alterations: list[QuotaAlteration],
                    validate_only: bool) -> list[tuple[QuotaEntity, KafkaError | None]]:
        """Kafka's ClientQuotaControlManager.alterClientQuotas: one result per distinct entity, in
        the order entities first appear. An entity named twice, or with a key twice in one
        alteration, answers "Ignoring duplicate entity" (an earlier valid alteration of it still
        applies, as in Kafka)."""
        results: dict[QuotaEntity, KafkaError | None] = {}
        for alteration in alterations:
            entity = alteration.entity
            keys = [key for key, _ in alteration.ops]
            if entity in results or len(set(keys)) != len(keys):
                results[entity] = invalid(f"Ignoring duplicate entity {entity}")
                continue
            try:
                changes = await validated_changes(alteration)
            except KafkaError as error:
                results[entity] = error
                continue
            if not validate_only:
                await self.apply(entity, changes)
            results[entity] = None
        return list(results.items())
