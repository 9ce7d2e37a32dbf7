"""Delegation tokens (KIP-48) as Kafka's ZooKeeper-mode DelegationTokenManagerZk keeps them: in
the metadata store at ``/delegation_token/tokens/<token id>`` ({"version":3,"owner","tokenRequester",
"renewers","issueTimestamp","maxTimestamp","expiryTimestamp","tokenId"}, principals sanitized),
the HMAC-SHA512 of the token id under ``delegation.token.secret.key`` as the token's secret.
A client logs in with SCRAM as the token id, the base64 HMAC as password and the ``tokenauth=true``
extension; the connection then acts as the token's owner. An expired token is removed when it is
next read (Kafka's timer, delegation.token.expiry.check.interval.ms, is not run)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote, unquote_plus

from kafkacompat.controller.store import MetadataStore, NoNodeError, encode_json
from kafkacompat.security.principal import KafkaPrincipal
from kafkacompat.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential, new_credential
from kafkacompat.wire.errors import ErrorCode

log = logging.getLogger("kafkacompat.security")

TOKENS_PATH = "/delegation_token/tokens"


@dataclass
class TokenInfo:
    token_id: str
    owner: KafkaPrincipal
    requester: KafkaPrincipal
    renewers: list[KafkaPrincipal]
    issue_timestamp: int
    max_timestamp: int
    expiry_timestamp: int
    hmac: bytes = field(default=b"", repr=False)

    def owner_or_renewer(self, principal: KafkaPrincipal) -> bool:
        return principal == self.owner or principal in self.renewers

    def to_json(self) -> dict:
        return {"version": 3, "owner": _sanitize(str(self.owner)), "tokenRequester": _sanitize(str(self.requester)),
                "renewers": [_sanitize(str(r)) for r in self.renewers], "issueTimestamp": self.issue_timestamp,
                "maxTimestamp": self.max_timestamp, "expiryTimestamp": self.expiry_timestamp, "tokenId": self.token_id}

    @classmethod
    def from_json(cls, data: dict, secret: bytes) -> "TokenInfo":
        owner = KafkaPrincipal.parse(unquote_plus(data["owner"]))
        requester = KafkaPrincipal.parse(unquote_plus(data["tokenRequester"])) if data.get("tokenRequester") else owner
        token_id = str(data["tokenId"])
        return cls(token_id, owner, requester, [KafkaPrincipal.parse(unquote_plus(r)) for r in data["renewers"]],
                   int(data["issueTimestamp"]), int(data["maxTimestamp"]), int(data["expiryTimestamp"]),
                   token_hmac(secret, token_id))


def _sanitize(text: str) -> str:
    return quote(text, safe="")


def token_hmac(secret: bytes, token_id: str) -> bytes:
    return hmac.digest(secret, token_id.encode(), hashlib.sha512)


@dataclass(frozen=True)
class TokenResult:
    error: int
    token: TokenInfo | None = None
    expiry_timestamp: int = -1


class DelegationTokens:
    def __init__(self, open_store: Callable[[], MetadataStore], secret: str | None, max_lifetime_ms: int,
                 expiry_time_ms: int) -> None:
        self._open_store = open_store
        self.secret = secret.encode() if secret else None
        self.max_lifetime_ms = max_lifetime_ms
        self.expiry_time_ms = expiry_time_ms

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    async def create(self, owner: KafkaPrincipal, requester: KafkaPrincipal, renewers: list[KafkaPrincipal],
                     max_lifetime_ms: int) -> TokenResult:
        if self.secret is None:
            return TokenResult(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        now = _now_ms()
        lifetime = self.max_lifetime_ms if max_lifetime_ms <= 0 else min(max_lifetime_ms, self.max_lifetime_ms)
        token_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
        token = TokenInfo(token_id, owner, requester, renewers, now, now + lifetime,
                          min(now + lifetime, now + self.expiry_time_ms), token_hmac(self.secret, token_id))
        await self._open_store().create(f"{TOKENS_PATH}/{token_id}", encode_json(token.to_json()), makepath=True)
        log.info("Delegation token %s created for owner %s by %s", token_id, owner, requester)
        return TokenResult(ErrorCode.NONE, token, token.expiry_timestamp)

    async def renew(self, principal: KafkaPrincipal, token_hmac_bytes: bytes, period_ms: int) -> TokenResult:
        return await self._change(principal, token_hmac_bytes, period_ms if period_ms >= 0 else self.expiry_time_ms,
                                  expire_now=False)

    async def expire(self, principal: KafkaPrincipal, token_hmac_bytes: bytes, period_ms: int) -> TokenResult:
        return await self._change(principal, token_hmac_bytes, period_ms, expire_now=period_ms < 0)

    async def _change(self, principal: KafkaPrincipal, token_hmac_bytes: bytes, period_ms: int,
                      expire_now: bool) -> TokenResult:
        if self.secret is None:
            return TokenResult(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        token = next((t for t in await self.all_tokens() if hmac.compare_digest(t.hmac, token_hmac_bytes)), None)
        if token is None:
            return TokenResult(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
        if not token.owner_or_renewer(principal):
            return TokenResult(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        now = _now_ms()
        if expire_now:
            await self._remove(token.token_id)
            log.info("Delegation token %s of %s expired by %s", token.token_id, token.owner, principal)
            return TokenResult(ErrorCode.NONE, token, now)
        if token.max_timestamp < now or token.expiry_timestamp < now:
            return TokenResult(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        token.expiry_timestamp = min(token.max_timestamp, now + period_ms)
        await self._open_store().set(f"{TOKENS_PATH}/{token.token_id}", encode_json(token.to_json()))
        return TokenResult(ErrorCode.NONE, token, token.expiry_timestamp)

    async def _remove(self, token_id: str) -> None:
        try:
            await self._open_store().delete(f"{TOKENS_PATH}/{token_id}")
        except NoNodeError:
            pass

    async def all_tokens(self) -> list[TokenInfo]:
        """Every live token; expired ones are removed on the way."""
        if self.secret is None:
            return []
        store = self._open_store()
        names = await store.children_or_empty(TOKENS_PATH)
        nodes = await store.get_many([f"{TOKENS_PATH}/{name}" for name in names])
        now = _now_ms()
        tokens = []
        for path, found in nodes.items():
            if found is None:
                continue
            try:
                token = TokenInfo.from_json(json.loads(found[0]), self.secret)
            except (ValueError, KeyError, TypeError):
                log.warning("Delegation token node %s does not parse; ignored", path)
                continue
            if token.expiry_timestamp < now:
                log.info("Removing expired delegation token %s of %s", token.token_id, token.owner)
                await self._remove(token.token_id)
                continue
            tokens.append(token)
        return tokens

    async def describe(self, owners: list[KafkaPrincipal] | None) -> list[TokenInfo]:
        """Without an authorizer every token may be described (Kafka's filterToken with every
        DESCRIBE allowed), narrowed to ``owners`` (as owner or renewer) when given."""
        return [t for t in await self.all_tokens()
                if owners is None or any(t.owner_or_renewer(owner) for owner in owners)]

    async def scram_credential(self, mechanism: str, token_id: str) -> ScramCredential | None:
        """The SCRAM credential of a live token (the base64 HMAC is its password), with its owner."""
        if self.secret is None or mechanism not in MECHANISMS:
            return None
        try:
            found = await self._open_store().get(f"{TOKENS_PATH}/{token_id}")
            token = TokenInfo.from_json(json.loads(found[0]), self.secret)
        except (NoNodeError, ValueError, KeyError, TypeError):
            return None
        if token.expiry_timestamp < _now_ms():
            return None
        credential = new_credential(mechanism, base64.b64encode(token.hmac).decode(), MIN_ITERATIONS)
        return ScramCredential(credential.salt, credential.stored_key, credential.server_key, credential.iterations,
                               owner=str(token.owner))


def _now_ms() -> int:
    return int(time.time() * 1000)

