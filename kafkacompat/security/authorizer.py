"""The ACL authorizer (``authorizer.class.name``: Kafka's StandardAuthorizer or AclAuthorizer).

Decisions follow StandardAuthorizerData: a super user may do anything; otherwise the ACLs of the
resource are those of its literal name, the LITERAL wildcard ``*`` and every PREFIXED pattern the
name starts with; a matching DENY wins over any ALLOW; an ALLOW of READ, WRITE, DELETE or ALTER
implies DESCRIBE and one of ALTER_CONFIGS implies DESCRIBE_CONFIGS (DENY implies nothing); ALL
matches every operation; the principal matches by name or ``User:*``, the host by address or
``*``. A resource with no ACL at all is allowed only with ``allow.everyone.if.no.acl.found``.

ACLs live in the metadata store in ZooKeeper mode's layout (AclAuthorizer / ZkAclStore), so the
single node keeps them in its embedded store and every broker of a cluster sees the same ones::

    /kafka-acl/<ResourceType>/<name>                   LITERAL   {"version":1,"acls":[...]}
    /kafka-acl-extended/prefixed/<ResourceType>/<name> PREFIXED
    /kafka-acl-changes/acl_changes_<seq>               "Topic:name" (literal change notification)
    /kafka-acl-extended-changes/acl_changes_<seq>      {"version":1,"resourceType":..,"name":..,"patternType":"PREFIXED"}

Every broker watches the two change paths and re-reads the ACLs when a notification arrives (the
watch only nudges, so merged notifications are harmless); the broker that made a change also
applies it to its own cache before answering, so its next request already sees it.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Callable, Iterable

import trio

from kafkacompat.controller.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    StoreError,
    StoreUnavailableError,
)
from kafkacompat.security.acl import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    RESOURCE_TYPE_NAMES,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    decode_entries,
    encode_entries,
    resource_type_named,
    validate_new_acl,
)
from kafkacompat.security.principal import KafkaPrincipal
from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.authorizer")
audit = logging.getLogger("kafkacompat.authorizer.audit")

AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "kafka.security.authorizer.AclAuthorizer")
ACL_ROOTS = {PatternType.LITERAL: "/kafka-acl", PatternType.PREFIXED: "/kafka-acl-extended/prefixed"}
CHANGE_PATHS = {PatternType.LITERAL: "/kafka-acl-changes", PatternType.PREFIXED: "/kafka-acl-extended-changes"}
CHANGE_PREFIX = "acl_changes_"
KEPT_CHANGE_NOTIFICATIONS = 100   # older ones are deleted (Kafka expires them after 15 minutes)
RETRY_SECONDS = 0.5

ALLOW_ALL_OPERATIONS = sum(1 << op for op in AclOperation if op > AclOperation.ALL)


def node_path(pattern: ResourcePattern) -> str:
    return f"{ACL_ROOTS[pattern.pattern_type]}/{RESOURCE_TYPE_NAMES[pattern.resource_type]}/{pattern.name}"


def change_notification(pattern: ResourcePattern) -> bytes:
    type_name = RESOURCE_TYPE_NAMES[pattern.resource_type]
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{type_name}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": type_name, "name": pattern.name,
                       "patternType": pattern.pattern_type.name}, separators=(",", ":")).encode()


def _entry_result(entry: AccessControlEntry, operation: AclOperation) -> Permission | None:
    """StandardAuthorizerData.findResult for an entry whose principal and host matched."""
    if entry.operation != AclOperation.ALL:
        if entry.permission == Permission.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if entry.operation not in IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if entry.operation not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != entry.operation:
                return None
        elif operation != entry.operation:
            return None
    return entry.permission


def _results(entries: Iterable[AccessControlEntry], principal: str, host: str,
             operation: AclOperation) -> Iterable[Permission]:
    """What each entry says about the operation for this principal (or ``User:*``) and host."""
    for entry in entries:
        if entry.principal not in (principal, WILDCARD_PRINCIPAL) or (entry.host != WILDCARD and entry.host != host):
            continue
        result = _entry_result(entry, operation)
        if result is not None:
            yield result


class Authorizer:
    def __init__(self, store: Callable[[], MetadataStore], super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self._store_factory = store
        self._store: MetadataStore | None = None
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, list[ResourcePattern]] = {}
        self._nudge = trio.Event()

    @property
    def store(self) -> MetadataStore:
        """The metadata store, taken at first use (the single node's exists once its data dir is open)."""
        if self._store is None:
            self._store = self._store_factory()
        return self._store

    # ---- decisions ----------------------------------------------------------------------------

    def _entries_for(self, resource_type: ResourceType, name: str) -> Iterable[frozenset[AccessControlEntry]]:
        acls = self._acls
        for literal in (name, WILDCARD) if name != WILDCARD else (name,):
            found = acls.get(ResourcePattern(resource_type, literal, PatternType.LITERAL))
            if found:
                yield found
        for pattern in self._prefixed.get(resource_type, ()):
            if name.startswith(pattern.name):
                yield acls[pattern]

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, *, request: str = "", log_denied: bool = True) -> bool:
        principal_text = str(principal)
        if principal_text in self.super_users:
            return True
        has_acls = allowed = False
        for entries in self._entries_for(resource_type, name):
            has_acls = True
            for result in _results(entries, principal_text, host, operation):
                if result == Permission.DENY:
                    self._audit_denied(principal_text, host, operation, resource_type, name, request, log_denied)
                    return False
                if result == Permission.ALLOW:
                    allowed = True
        if allowed or (not has_acls and self.allow_if_no_acl):
            return True
        self._audit_denied(principal_text, host, operation, resource_type, name, request, log_denied)
        return False

    @staticmethod
    def _audit_denied(principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str,
                      request: str, log_denied: bool) -> None:
        if log_denied or audit.isEnabledFor(logging.DEBUG):
            audit.log(logging.INFO if log_denied else logging.DEBUG,
                      "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s%s",
                      principal, operation.name, host, RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name),
                      name, f" for request = {request}" if request else "")

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do the operation on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType, what InitProducerId without a transactional id needs
        with WRITE on topics): an ALLOW on some pattern that no DENY covers (a DENY on the literal
        ``*`` or on a prefix of it); with no ACL of that type at all, allow.everyone.if.no.acl.found."""
        if str(principal) in self.super_users:
            return True
        allows, denies = [], []
        has_acls = False
        for pattern, entries in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            has_acls = True
            for result in _results(entries, str(principal), host, operation):
                if result == Permission.ALLOW:
                    allows.append(pattern)
                elif result == Permission.DENY:
                    denies.append(pattern)
        if not has_acls:
            return self.allow_if_no_acl
        if any(d.pattern_type == PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return False
        for allow in allows:
            covered = any((d.pattern_type == PatternType.PREFIXED and allow.name.startswith(d.name))
                          or (d.pattern_type == allow.pattern_type == PatternType.LITERAL and d.name == allow.name)
                          for d in denies)
            if not covered:
                return True
        return False

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """The int32 bitfield of authorized-operations fields: bit n for AclOperation code n."""
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type]
                   if self.authorize(principal, host, op, resource_type, name, log_denied=False))

    # ---- the ACLs -----------------------------------------------------------------------------

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [AclBinding(pattern, entry) for pattern, entries in self._acls.items()
                if acl_filter.matches_pattern(pattern)
                for entry in entries if acl_filter.matches_entry(entry)]

    def _set_cache(self, acls: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        prefixed: dict[ResourceType, list[ResourcePattern]] = defaultdict(list)
        for pattern in acls:
            if pattern.pattern_type == PatternType.PREFIXED:
                prefixed[pattern.resource_type].append(pattern)
        self._acls, self._prefixed = acls, dict(prefixed)

    def _cache_node(self, pattern: ResourcePattern, entries: set[AccessControlEntry]) -> None:
        acls = dict(self._acls)
        if entries:
            acls[pattern] = frozenset(entries)
        else:
            acls.pop(pattern, None)
        self._set_cache(acls)

    async def load(self) -> None:
        """Read every ACL node of the store into the cache (one that does not parse is logged
        and keeps its last good entries)."""
        paths: dict[str, ResourcePattern] = {}
        for pattern_type, root in ACL_ROOTS.items():
            for type_name in await self.store.children_or_empty(root):
                resource_type = resource_type_named(type_name)
                if resource_type is None:
                    continue
                for name in await self.store.children_or_empty(f"{root}/{type_name}"):
                    paths[f"{root}/{type_name}/{name}"] = ResourcePattern(resource_type, name, pattern_type)
        nodes = await self.store.get_many(list(paths))
        acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for path, pattern in paths.items():
            node = nodes.get(path)
            if node is None:
                continue
            try:
                entries = decode_entries(node[0])
            except ValueError as exc:
                log.warning("Ignoring the unreadable ACL node %s: %s", path, exc)
                entries = set(self._acls.get(pattern, ()))
            if entries:
                acls[pattern] = frozenset(entries)
        self._set_cache(acls)

    def _changed(self) -> None:
        self._nudge.set()   # (the event is replaced after each wake-up: never register its bound method)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Load the ACLs (retried while the store is unreachable: nothing is authorized before),
        then re-read them whenever a change notification arrives. A failure is logged and
        retried, never ending the broker."""
        await self._watch_and_load()
        log.info("Authorizer loaded %d ACL(s); super users: %s; allow.everyone.if.no.acl.found=%s",
                 sum(len(e) for e in self._acls.values()), ", ".join(sorted(self.super_users)) or "none",
                 str(self.allow_if_no_acl).lower())
        task_status.started()
        while True:
            await self._nudge.wait()
            self._nudge = trio.Event()
            try:
                await self.load()
                await self._purge_notifications()
            except Exception as exc:   # a store outage, or a bug: the cache stays as it was
                log.warning("Could not re-read the ACLs from the metadata store (%s); retrying", exc,
                            exc_info=not isinstance(exc, StoreError))
                await trio.sleep(RETRY_SECONDS)
                self._nudge.set()

    async def _watch_and_load(self) -> None:
        warned = False
        while True:
            try:
                for path in CHANGE_PATHS.values():
                    await self.store.ensure_path(path)
                    await self.store.watch(path, self._changed, children=True)
                await self.load()
                return
            except StoreError as exc:
                if not warned:
                    log.warning("Could not load the ACLs from the metadata store (%s); retrying every %.1f s, "
                                "no request is served until they are loaded", exc, RETRY_SECONDS)
                    warned = True
                await trio.sleep(RETRY_SECONDS)

    async def _purge_notifications(self) -> None:
        for path in CHANGE_PATHS.values():
            changes = sorted(c for c in await self.store.children_or_empty(path) if c.startswith(CHANGE_PREFIX))
            for change in changes[:-KEPT_CHANGE_NOTIFICATIONS]:
                try:
                    await self.store.delete(f"{path}/{change}")
                except NoNodeError:
                    pass

    async def _update_node(self, pattern: ResourcePattern, change) -> set[AccessControlEntry]:
        """Apply ``change(entries) -> new entries`` to the pattern's node by compare-and-set
        (retried when another broker wrote it first), notify every broker, update the cache.
        Returns the entries the node had before."""
        path = node_path(pattern)
        while True:
            found = await self.store.get_or_none(path)
            try:
                before = decode_entries(found[0]) if found else set()
            except ValueError:
                before = set()
            after = change(before)
            if after == before:
                self._cache_node(pattern, after)
                return before
            try:
                if not after:
                    await self.store.delete(path, found[1])
                elif found is None:
                    await self.store.create(path, encode_entries(after), makepath=True)
                else:
                    await self.store.set(path, encode_entries(after), found[1])
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
        await self.store.create(f"{CHANGE_PATHS[pattern.pattern_type]}/{CHANGE_PREFIX}", change_notification(pattern),
                                sequential=True, makepath=True)
        self._cache_node(pattern, after)
        return before

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """One result per binding (None: created, or there already)."""
        results: list[KafkaError | None] = []
        valid: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
        for binding in bindings:
            try:
                validate_new_acl(binding)
            except KafkaError as error:
                results.append(error)
                continue
            if "/" in binding.pattern.name:
                results.append(KafkaError(ErrorCode.INVALID_REQUEST, "A resource name with '/' cannot be stored "
                                          f"as a ZooKeeper node: {binding.pattern.name!r}"))
                continue
            valid[binding.pattern].add(binding.entry)
            results.append(None)
        failed: dict[ResourcePattern, KafkaError] = {}
        for pattern, entries in valid.items():
            try:
                await self._update_node(pattern, lambda before, new=entries: before | new)
            except StoreError as exc:
                failed[pattern] = _store_failure(exc)
        return [failed.get(b.pattern, result) if result is None else result for b, result in zip(bindings, results)]

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | KafkaError]:
        """Per filter, the bindings it deleted (or the error)."""
        results: list[list[AclBinding] | KafkaError] = []
        for acl_filter in filters:
            patterns = [p for p in self._acls if acl_filter.matches_pattern(p)]
            deleted: list[AclBinding] = []
            try:
                for pattern in patterns:
                    before = await self._update_node(
                        pattern, lambda entries: {e for e in entries if not acl_filter.matches_entry(e)})
                    deleted.extend(AclBinding(pattern, e) for e in before if acl_filter.matches_entry(e))
            except StoreError as exc:
                results.append(_store_failure(exc))
                continue
            results.append(deleted)
        return results


def _store_failure(exc: StoreError) -> KafkaError:
    log.warning("Could not write ACLs to the metadata store: %s", exc)
    if isinstance(exc, StoreUnavailableError):
        return KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The metadata store is unreachable: {exc}")
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"The ACLs could not be written to the metadata store: {exc}")
