"""Share sessions (Kafka's ShareSessionCache): per (group, member), the share partitions a
member fetches from this broker and the epoch its next request must carry.

Epoch 0 opens a session (replacing the member's previous one; acknowledgements are not allowed
with it), -1 closes it, any other value must equal the session's epoch, which then moves on
(wrapping after Integer.MAX_VALUE to 1). At most ``group.share.max.share.sessions`` sessions are
kept; one more is refused with SHARE_SESSION_LIMIT_REACHED, as Kafka 4.2's SharePartitionManager does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterable

from kafkacompat.wire.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

SharePartitionKey = tuple[uuid.UUID, int]  # (topic id, partition)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)  # insertion-ordered set

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch == INT32_MAX else self.epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, partitions: Iterable[SharePartitionKey]) -> ShareSession:
        key = (group_id, member_id)
        self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                             f"Could not create a share session for member {member_id} of share group {group_id}: "
                             f"this broker already has group.share.max.share.sessions={self.max_sessions}")
        session = ShareSession(group_id, member_id)
        session.partitions = dict.fromkeys(partitions)
        self.sessions[key] = session
        return session

    def update(self, group_id: str, member_id: str, epoch: int, added: Iterable[SharePartitionKey],
               forgotten: Iterable[SharePartitionKey]) -> ShareSession:
        """A subsequent ShareFetch: the session must exist with this epoch."""
        session = self.existing(group_id, member_id)
        check_epoch(session, epoch)
        for key in forgotten:
            session.partitions.pop(key, None)
        for key in added:
            session.partitions[key] = None
        session.next_epoch()
        return session

    def existing(self, group_id: str, member_id: str) -> ShareSession:
        session = self.get(group_id, member_id)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"No share session for member {member_id} of share group {group_id}")
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession:
        session = self.existing(group_id, member_id)
        del self.sessions[(group_id, member_id)]
        return session

    def remove_member(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)


def check_epoch(session: ShareSession, epoch: int) -> None:
    if session.epoch != epoch:
        raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                         f"The share session of member {session.member_id} expected epoch {session.epoch}, "
                         f"got {epoch}")
