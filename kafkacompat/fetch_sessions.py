"""Fetch sessions (KIP-227): a consumer or follower that fetches the same partitions again and
again names them once; afterwards its requests carry only what changed and the answers only the
partitions with something new. Kafka's FetchManager / FetchSessionCache, by the same rules:

- session id 0, epoch -1: a sessionless (full) fetch; any other id with epoch -1 closes that
  session first. Epoch 0: a full fetch that opens a session (closing the named one), answered
  with the new session id, or 0 when the cache has no slot for it.
- epoch > 0: an incremental fetch of that session: the partitions named are added or updated,
  the forgotten ones removed, and every partition of the session is read; the answer carries a
  partition only when it has records, an error, a new high watermark or log start offset, a
  diverging epoch or a preferred replica. FETCH_SESSION_ID_NOT_FOUND for an unknown (or evicted)
  id, INVALID_FETCH_SESSION_EPOCH for an epoch other than the expected one, and
  FETCH_SESSION_TOPIC_ID_ERROR when the request's version and the session disagree on topic ids.
- ``max.incremental.fetch.session.cache.slots`` sessions at most; a new one may evict a session
  unused for ``min.incremental.fetch.session.eviction.ms``, else the smallest evictable one if it
  has fewer partitions: one older than the eviction time as of its last use (followers'
  sessions, "privileged", are evictable by consumers only then; consumers' by followers always).
  An incremental fetch uses its session when it arrives, a full one asks for a slot when it is
  answered, as in Kafka.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable

from kafkacompat.wire.chunks import close_chunks
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.fetch import (
    FetchPartitionRequest,
    FetchPartitionResult,
    FetchRequestData,
    FetchTopicRequest,
    FetchTopicResult,
)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
TOPIC_IDS_SINCE = 13
_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


# A partition of a session: (topic key, partition index); the key is the topic id from Fetch v13
# on and the topic name before.
PartitionKey = tuple[Hashable, int]


@dataclass(slots=True)
class CachedPartition:
    name: str
    topic_id: object
    request: FetchPartitionRequest  # the fetcher's latest fetch offset, limits and epochs
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: FetchPartitionResult) -> bool:
        """Whether an incremental answer carries this partition; remembers what it told."""
        respond = result.records_size > 0 or result.diverging_epoch is not None or result.preferred_read_replica >= 0
        if self.high_watermark != result.high_watermark:
            self.high_watermark = result.high_watermark
            respond = True
        if self.log_start_offset != result.log_start_offset:
            self.log_start_offset = result.log_start_offset
            respond = True
        if result.error_code != ErrorCode.NONE:
            self.high_watermark = -1  # so the partition is sent again once it recovers
            respond = True
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool
    created: float
    last_used: float
    epoch: int  # the epoch the next request of this session must carry
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)  # in fetch order


class FetchContext:
    """What one Fetch reads and how its answer is shaped: ``topics`` are the partitions to read
    (the request's, or the whole session's), ``respond`` turns the results into the answer."""

    error: int = ErrorCode.NONE
    topics: list[FetchTopicRequest]

    def respond(self, results: list[FetchTopicResult]) -> tuple[int, int, list[FetchTopicResult]]:
        """-> (error code, session id, the topics to send)."""
        raise NotImplementedError

    def throttled(self) -> tuple[int, int]:
        """-> (error code, session id) of the empty answer to a fetch over its client's quota
        (Kafka's getThrottledResponse: no session is created, an existing one is left as it was)."""
        return self.error, INVALID_SESSION_ID


class SessionError(FetchContext):
    def __init__(self, error: int) -> None:
        self.error = error
        self.topics = []

    def respond(self, results):
        return self.error, INVALID_SESSION_ID, []


class Sessionless(FetchContext):
    def __init__(self, request: FetchRequestData) -> None:
        self.topics = request.topics

    def respond(self, results):
        return ErrorCode.NONE, INVALID_SESSION_ID, results


class FullFetch(FetchContext):
    """A full fetch that asks for a session: created when answered, if the cache has room."""

    def __init__(self, cache: "FetchSessionCache", request: FetchRequestData, uses_topic_ids: bool,
                 privileged: bool) -> None:
        self.cache = cache
        self.topics = request.topics
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged

    def respond(self, results):
        def cached() -> dict[PartitionKey, CachedPartition]:
            partitions: dict[PartitionKey, CachedPartition] = {}
            for wanted, result in zip(self.topics, results):
                key = wanted.topic_id if self.uses_topic_ids else wanted.name
                for wanted_partition, answer in zip(wanted.partitions, result.partitions):
                    partitions[(key, wanted_partition.partition)] = CachedPartition(
                        wanted.name, wanted.topic_id, wanted_partition, answer.high_watermark,
                        answer.log_start_offset)
            return partitions

        size = sum(len(topic.partitions) for topic in self.topics)
        session_id = self.cache.create(self.privileged, size, self.uses_topic_ids, cached)
        return ErrorCode.NONE, session_id, results


class IncrementalFetch(FetchContext):
    def __init__(self, session: FetchSession, request_epoch: int, names: Callable[[object], str | None]) -> None:
        self.session = session
        self.request_epoch = request_epoch
        self.topics = _grouped(session, names)

    def respond(self, results):
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):  # another request of it came meanwhile
            _close_all(results)
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        answered: list[FetchTopicResult] = []
        sent_records: list[PartitionKey] = []
        for wanted, result in zip(self.topics, results):
            key = wanted.topic_id if session.uses_topic_ids else wanted.name
            kept = []
            for answer in result.partitions:
                cached = session.partitions.get((key, answer.index))
                if cached is None or cached.must_respond(answer):
                    kept.append(answer)
                    if answer.records_size > 0:
                        sent_records.append((key, answer.index))
                else:
                    close_chunks(answer.records)
            if kept:
                answered.append(FetchTopicResult(result.name, result.topic_id, kept))
        for key in sent_records:  # fetched last next time, so every partition gets its turn
            session.partitions[key] = session.partitions.pop(key)
        return ErrorCode.NONE, session.id, answered

    def throttled(self) -> tuple[int, int]:
        if self.session.epoch != next_epoch(self.request_epoch):
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, self.session.id
        return ErrorCode.NONE, self.session.id


def _grouped(session: FetchSession, names: Callable[[object], str | None]) -> list[FetchTopicRequest]:
    """The session's partitions as request topics, neighbours of one topic grouped (Kafka's
    answers group them the same way: a topic may appear twice when its partitions are apart)."""
    topics: list[FetchTopicRequest] = []
    for (key, _), cached in session.partitions.items():
        if session.uses_topic_ids and not cached.name:
            cached.name = names(cached.topic_id) or ""
        if topics and (topics[-1].topic_id if session.uses_topic_ids else topics[-1].name) == key:
            topics[-1].partitions.append(cached.request)
        else:
            topics.append(FetchTopicRequest("" if session.uses_topic_ids else cached.name,
                                            cached.topic_id, [cached.request]))
    return topics


def _close_all(results: list[FetchTopicResult]) -> None:
    for topic in results:
        for partition in topic.partitions:
            close_chunks(partition.records)


class FetchSessionCache:
    """The broker's fetch sessions (one cache: the event loop is single-threaded, so Kafka's
    shards would buy nothing)."""

    def __init__(self, max_slots: int, eviction_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_slots = max_slots
        self.eviction_s = eviction_ms / 1000
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        # Fetch requests by (fetcher: "follower" or "consumer", kind: "sessionless", "full",
        # "incremental" or "error"), for /metrics
        self.requests: Counter[tuple[str, str]] = Counter()
        self._random = random.Random()

    def new_context(self, version: int, request: FetchRequestData, names: Callable[[object], str | None]) -> FetchContext:
        """``names`` maps a topic id to its name (for sessions by topic id)."""
        context = self._new_context(version, request, names)
        kind = ("error" if context.error else "incremental" if isinstance(context, IncrementalFetch)
                else "full" if isinstance(context, FullFetch) else "sessionless")
        self.requests[("follower" if request.replica_id >= 0 else "consumer", kind)] += 1
        return context

    def cached_partitions(self) -> int:
        return sum(len(session.partitions) for session in self.sessions.values())

    def _new_context(self, version: int, request: FetchRequestData,
                     names: Callable[[object], str | None]) -> FetchContext:
        session_id, epoch = request.session_id, request.session_epoch
        privileged = request.replica_id >= 0
        if version < 7 or epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)
            if version < 7 or epoch == FINAL_EPOCH:
                return Sessionless(request)
            return FullFetch(self, request, version >= TOPIC_IDS_SINCE, privileged)
        session = self.sessions.get(session_id)
        if session is None:
            return SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (version >= TOPIC_IDS_SINCE):
            return SessionError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        self._update(session, request)
        if not session.partitions:  # everything forgotten: the session ends
            self.sessions.pop(session.id, None)
            return Sessionless(request)
        session.last_used = self.clock()
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetch(session, epoch, names)

    @staticmethod
    def _update(session: FetchSession, request: FetchRequestData) -> None:
        by_id = session.uses_topic_ids
        for wanted in request.topics:
            key = wanted.topic_id if by_id else wanted.name
            for wanted_partition in wanted.partitions:
                cached = session.partitions.get((key, wanted_partition.partition))
                if cached is None:
                    session.partitions[(key, wanted_partition.partition)] = CachedPartition(
                        wanted.name, wanted.topic_id, wanted_partition)
                else:
                    cached.request = wanted_partition
        for forgotten in request.forgotten_topics_data:
            key = forgotten.topic_id if by_id else forgotten.name
            for index in forgotten.partitions:
                session.partitions.pop((key, index), None)

    def create(self, privileged: bool, size: int, uses_topic_ids: bool,
               partitions: Callable[[], dict[PartitionKey, CachedPartition]]) -> int:
        now = self.clock()
        if len(self.sessions) >= self.max_slots and not self._evict_for(privileged, size, now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, uses_topic_ids, now, now, next_epoch(INITIAL_EPOCH),
                               partitions())
        self.sessions[session.id] = session
        return session.id

    def _evict_for(self, privileged: bool, size: int, now: float) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used, s.id))
        if now - stalest.last_used > self.eviction_s:
            return self._evict(stalest)
        # Old enough as of its last use (Kafka's touch files it under "evictable" then); a
        # follower may also evict consumers' sessions that are not yet old.
        evictable = [s for s in self.sessions.values()
                     if s.last_used - s.created > self.eviction_s or (privileged and not s.privileged)]
        if not evictable:
            return False
        smallest = min(evictable, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) <= (smallest.privileged, len(smallest.partitions)):  # Kafka's EvictableKey order
            return False
        return self._evict(smallest)

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randint(1, _MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id
