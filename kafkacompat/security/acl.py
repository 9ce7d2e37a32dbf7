"""ACLs as Kafka models them (sans-IO): resource patterns, entries, bindings and filters, Kafka's
matching rules (ResourcePatternFilter / AccessControlEntryFilter), its validation of new ACLs
(AclControlManager.validateNewAcl) and the JSON of ZooKeeper mode's ACL nodes (AclAuthorizer's
``{"version":1,"acls":[{"principal":..,"permissionType":..,"operation":..,"host":..}]}``)."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from kafkacompat.wire.errors import ErrorCode, KafkaError

WILDCARD = "*"              # any resource name (a LITERAL pattern), any host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The names ZooKeeper mode writes (SecurityUtils.resourceTypeName / operationName / permissionTypeName).
RESOURCE_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES = {
    AclOperation.ALL: "All", AclOperation.READ: "Read", AclOperation.WRITE: "Write", AclOperation.CREATE: "Create",
    AclOperation.DELETE: "Delete", AclOperation.ALTER: "Alter", AclOperation.DESCRIBE: "Describe",
    AclOperation.CLUSTER_ACTION: "ClusterAction", AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    AclOperation.ALTER_CONFIGS: "AlterConfigs", AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
    AclOperation.CREATE_TOKENS: "CreateTokens", AclOperation.DESCRIBE_TOKENS: "DescribeTokens",
}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}
_BY_NAME = {
    "resource": {name: kind for kind, name in RESOURCE_TYPE_NAMES.items()},
    "operation": {name: op for op, name in OPERATION_NAMES.items()},
    "permission": {name: perm for perm, name in PERMISSION_NAMES.items()},
}

# Operations an ALLOW of another operation implies (StandardAuthorizerData).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                              AclOperation.DELETE, AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# The operations each resource type supports (AclEntry.supportedOperations): what the
# authorized-operations fields of Metadata, DescribeGroups and DescribeCluster are computed over.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: Permission


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None for a name, principal or host matches any (a DescribeAcls/DeleteAcls filter)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: Permission

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission == Permission.ANY or self.permission == entry.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def _enum(kind: type[enum.IntEnum], code: int) -> enum.IntEnum:
    try:
        return kind(code)
    except ValueError:
        return kind(0)   # Kafka's fromCode: an unknown code is UNKNOWN


def binding_of(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
               permission: int) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type)),
        AccessControlEntry(principal, host, _enum(AclOperation, operation), _enum(Permission, permission)))


def filter_of(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
              operation: int, permission: int) -> AclBindingFilter:
    return AclBindingFilter(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal,
                            host, _enum(AclOperation, operation), _enum(Permission, permission))


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def validate_new_acl(binding: AclBinding) -> None:
    """What Kafka refuses in a CreateAcls creation (AclApis, then AclControlManager.validateNewAcl),
    with its codes and messages; raises KafkaError."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise _invalid("Invalid empty resource name")
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise _invalid(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise _invalid(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise _invalid(f"Invalid operation {entry.operation.name}")
    if entry.permission not in (Permission.ALLOW, Permission.DENY):
        raise _invalid(f"Invalid permissionType {entry.permission.name}")
    principal_type, sep, _ = entry.principal.partition(":")
    if not sep or not principal_type:
        # SecurityUtils.parseKafkaPrincipal's IllegalArgumentException, as an ApiError.
        raise _invalid(f"expected a string in format principalType:principalName but got {entry.principal}")


# ---- ZooKeeper mode's JSON ------------------------------------------------------------------


def encode_entries(entries: set[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission],
             "operation": OPERATION_NAMES[e.operation], "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes) -> set[AccessControlEntry]:
    """The entries of an ACL node; raises ValueError for a node that does not parse."""
    if not data:
        return set()
    document = json.loads(data)
    found = set()
    for acl in document.get("acls") or []:
        try:
            found.add(AccessControlEntry(
                str(acl["principal"]), str(acl["host"]), _BY_NAME["operation"][acl["operation"]],
                _BY_NAME["permission"][acl["permissionType"]]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"unreadable ACL entry {acl!r}") from exc
    return found


def resource_type_named(name: str) -> ResourceType | None:
    return _BY_NAME["resource"].get(name)
