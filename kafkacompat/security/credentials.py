"""SCRAM credentials in the metadata store, in Kafka's ZooKeeper layout (the user's config node
``/config/users/<sanitized name>``, shared with the user's client quotas), with
Describe/AlterUserScramCredentials' rules and messages as Kafka's ZkAdminManager has them."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from kafkacompat.controller.client_quotas import USERS_PATH, desanitize, sanitize
from kafkacompat.controller.store import BadVersionError, MetadataStore, NodeExistsError, encode_json
from kafkacompat.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.security.tokens import DelegationTokens

log = logging.getLogger("kafkacompat.security")

USER_MUST_NOT_BE_EMPTY = "Username must not be empty"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"


@dataclass
class UserResult:
    user: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    credentials: list[tuple[int, int]] = field(default_factory=list)  # (mechanism id, iterations)


def _config_of(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        value = json.loads(data)
        config = value.get("config", {}) if isinstance(value, dict) else {}
        return {str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {}
    except ValueError:
        return {}


class ScramCredentialStore:
    def __init__(self, open_store: Callable[[], MetadataStore], tokens: "DelegationTokens | None" = None) -> None:
        self._open_store = open_store
        self.tokens = tokens  # delegation tokens log in with SCRAM too (the tokenauth extension)

    @property
    def store(self) -> MetadataStore:
        return self._open_store()

    async def lookup(self, mechanism: str, username: str, token: bool = False) -> ScramCredential | None:
        if token:
            return await self.tokens.scram_credential(mechanism, username) if self.tokens is not None else None
        found = await self.store.get_or_none(f"{USERS_PATH}/{sanitize(username)}")
        text = _config_of(found[0] if found else None).get(mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.from_text(text)
        except (ValueError, KeyError):
            log.warning("The %s credential of user %r in the metadata store does not parse; it cannot log in",
                        mechanism, username)
            return None

    async def _user_config(self, user: str) -> tuple[dict[str, str], int | None]:
        found = await self.store.get_or_none(f"{USERS_PATH}/{sanitize(user)}")
        return _config_of(found[0] if found else None), (found[1] if found else None)

    @staticmethod
    def _credential_infos(config: dict[str, str]) -> list[tuple[int, int]]:
        infos = []
        for mechanism_id, name in sorted(MECHANISM_IDS.items()):
            if name in config:
                infos.append((mechanism_id, ScramCredential.from_text(config[name]).iterations))
        return infos

    async def describe(self, users: list[str] | None) -> list[UserResult]:
        if not users:
            results = []
            for sanitized in sorted(await self.store.children_or_empty(USERS_PATH)):
                user = desanitize(sanitized) or ""
                infos = self._credential_infos((await self._user_config(user))[0])
                if infos:
                    results.append(UserResult(user, credentials=infos))
            return sorted(results, key=lambda r: r.user)
        by_user: dict[str, UserResult] = {}
        for user in dict.fromkeys(users):
            if not user:
                by_user[user] = UserResult(user, ErrorCode.RESOURCE_NOT_FOUND, USER_MUST_NOT_BE_EMPTY)
            elif users.count(user) > 1:
                by_user[user] = UserResult(user, ErrorCode.DUPLICATE_RESOURCE,
                                           "Cannot describe SCRAM credentials for the same user twice in a single "
                                           f"request: {user}")
            else:
                infos = self._credential_infos((await self._user_config(user))[0])
                by_user[user] = UserResult(user, credentials=infos) if infos else UserResult(
                    user, ErrorCode.RESOURCE_NOT_FOUND,
                    f"Attempt to describe a user credential that does not exist: {user}")
        return list(by_user.values())

    async def alter(self, upsertions: list, deletions: list) -> list[UserResult]:
        """Kafka's order: invalid users (empty name, unknown mechanism, iterations out of
        4096..16384), then users altering one mechanism twice, deletions of a missing credential,
        then the users changed."""
        results: dict[str, UserResult] = {}
        for item in [*deletions, *upsertions]:
            message = self._illegal(item, item in upsertions)
            if message is not None:
                code = ErrorCode.UNSUPPORTED_SASL_MECHANISM if message == UNKNOWN_MECHANISM else ErrorCode.UNACCEPTABLE_CREDENTIAL
                results[item.name] = UserResult(item.name, code, message)
        pairs = [(i.name, i.mechanism) for i in [*upsertions, *deletions] if i.name not in results]
        for name, _ in pairs:
            if sum(1 for pair in pairs if pair[0] == name) != len({m for n, m in pairs if n == name}):
                results.setdefault(name, UserResult(name, ErrorCode.DUPLICATE_RESOURCE,
                                                    "A user credential cannot be altered twice in the same request"))
        for user in dict.fromkeys(name for name, _ in pairs if name not in results):
            results[user] = await self._apply(user, [u for u in upsertions if u.name == user],
                                              [d for d in deletions if d.name == user])
        return list(results.values())

    @staticmethod
    def _illegal(item, upsertion: bool) -> str | None:
        if not item.name:
            return USER_MUST_NOT_BE_EMPTY
        if item.mechanism not in MECHANISM_IDS:
            return UNKNOWN_MECHANISM
        if upsertion and item.iterations < MIN_ITERATIONS:
            return "Too few iterations"
        if upsertion and item.iterations > MAX_ITERATIONS:
            return "Too many iterations"
        return None

    async def _apply(self, user: str, upsertions: list, deletions: list) -> UserResult:
        path = f"{USERS_PATH}/{sanitize(user)}"
        while True:
            config, version = await self._user_config(user)
            updated = dict(config)
            for deletion in deletions:
                name = MECHANISM_IDS[deletion.mechanism]
                if name not in updated:
                    return UserResult(user, ErrorCode.RESOURCE_NOT_FOUND,
                                      "Attempt to delete a user credential that does not exist")
                del updated[name]
            for upsertion in upsertions:
                name = MECHANISM_IDS[upsertion.mechanism]
                credential = credential_from_salted(MECHANISMS[name], bytes(upsertion.salted_password),
                                                    bytes(upsertion.salt), upsertion.iterations)
                updated[name] = credential.to_text()
            data = encode_json({"version": 1, "config": updated})
            try:
                if version is None:
                    await self.store.create(path, data, makepath=True)
                else:
                    await self.store.set(path, data, version)
            except (BadVersionError, NodeExistsError):
                continue
            log.info("SCRAM credentials of user %r changed: %s", user,
                     ", ".join([f"{MECHANISM_IDS[u.mechanism]} set" for u in upsertions]
                               + [f"{MECHANISM_IDS[d.mechanism]} deleted" for d in deletions]))
            return UserResult(user)
