"""The follower's side of fetch sessions (KIP-227), sans-IO: Kafka's FetchSessionHandler.

A fetcher builds each request from what it wants to fetch now (``build``); the handler keeps
what the leader's session holds. The first request is a full fetch with epoch 0 that asks for a
session; once the leader answers with a session id, each request carries only the partitions
whose fetch data changed (fetch offset, log start, leader epochs, limits), the ones no longer
wanted go into forgotten_topics_data, and the epoch goes up by one (wrapping to 1, as Kafka's).
An incremental answer carries only partitions with something new: the others had no change.

Errors (``handle_response`` / ``handle_error``) start over as Kafka's handler does:
FETCH_SESSION_ID_NOT_FOUND with a plain full fetch (id 0, epoch 0); any other session error,
an answer that names partitions outside the session, or a lost connection with a full fetch that
closes the old session and asks for a new one (the old id, epoch 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from kafkacompat.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from kafkacompat.wire.errors import ErrorCode

PartitionKey = tuple[str, int]  # (topic name, partition)


@dataclass(frozen=True, slots=True)
class PartitionData:
    """A partition's entry of a fetch request; equal data need not be sent again."""
    topic_id: Hashable | None
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


@dataclass(slots=True)
class FetchPlan:
    """One request to send: ``to_send`` goes into topics, ``forgotten`` into
    forgotten_topics_data ((topic name, topic id, partition))."""
    session_id: int
    epoch: int
    to_send: dict[PartitionKey, PartitionData]
    forgotten: list[tuple[str, Hashable | None, int]] = field(default_factory=list)
    uses_topic_ids: bool = False

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler:
    """The session a fetcher holds with one leader."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.session: dict[PartitionKey, PartitionData] = {}  # as the leader's session holds them
        self.uses_topic_ids = False
        self.full_requests = 0
        self.incremental_requests = 0

    @property
    def is_full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict[PartitionKey, PartitionData], *, uses_topic_ids: bool) -> FetchPlan:
        """The request for ``wanted`` (in fetch order). A session opened by topic id cannot go on
        by name or back: the leader would answer FETCH_SESSION_TOPIC_ID_ERROR, so that request
        is a full one that replaces the session."""
        if not self.is_full and uses_topic_ids != self.uses_topic_ids:
            self.epoch = INITIAL_EPOCH
        self.uses_topic_ids = uses_topic_ids
        if self.is_full:
            self.session = dict(wanted)
            self.full_requests += 1
            return FetchPlan(self.session_id, self.epoch, dict(wanted), [], uses_topic_ids)
        to_send: dict[PartitionKey, PartitionData] = {}
        forgotten: list[tuple[str, Hashable | None, int]] = []
        for key, before in list(self.session.items()):
            now = wanted.get(key)
            if now is None:
                del self.session[key]
                forgotten.append((key[0], before.topic_id, key[1]))
            elif now != before:
                if (uses_topic_ids and before.topic_id is not None and now.topic_id is not None
                        and before.topic_id != now.topic_id):
                    # the topic was deleted and made again under the same name: the old one's
                    # partition is forgotten, the new one's added (Kafka's "replaced")
                    forgotten.append((key[0], before.topic_id, key[1]))
                self.session[key] = now
                to_send[key] = now
        for key, now in wanted.items():
            if key not in self.session:
                self.session[key] = now
                to_send[key] = now
        self.incremental_requests += 1
        return FetchPlan(self.session_id, self.epoch, to_send, forgotten, uses_topic_ids)

    def handle_response(self, error_code: int, session_id: int, partitions: set[PartitionKey],
                        throttle_time_ms: int = 0) -> bool:
        """After the answer to the last ``build``: whether it can be used (its partitions merged
        into the fetcher's state); sets up the next request either way."""
        if error_code != ErrorCode.NONE:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self._reset()
            else:
                self.close_and_start_over()
            return False
        if self.is_full:
            if not partitions and throttle_time_ms > 0:
                self._reset()  # KIP-219: an empty full answer only says "throttled"
                return False
            if partitions - self.session.keys():
                self._reset()
                return False
            if session_id == INVALID_SESSION_ID:
                self._reset()  # no slot for a session on the leader: full fetches go on
            else:
                self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            return True
        if partitions - self.session.keys():
            self.close_and_start_over()
            return False
        if session_id == INVALID_SESSION_ID:
            self._reset()  # the leader closed the session
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request or its answer was lost (connection error, timeout)."""
        self.close_and_start_over()

    def close_and_start_over(self) -> None:
        """The next request is a full one that closes this session and opens another (also
        when the fetcher dropped an answer it could not apply: the leader will not repeat it)."""
        self.epoch = INITIAL_EPOCH

    def _reset(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
