"""One transactional id's state and Kafka's state machine (TransactionMetadata).

A change is prepared first (``prepare_*`` returns the target as a ``Transit`` and sets
``pending_state``), written to __transaction_state, and applied with ``complete`` once the ISR
has it, or dropped with ``abandon`` when the write failed. While a change is pending, requests
for the id answer CONCURRENT_TRANSACTIONS.

    Empty             -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn), Empty (InitProducerId),
                         Dead (expiration), PrepareAbort (transaction version 2: an abort of nothing)
    Ongoing           -> Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence (InitProducerId or
                         a timeout fences the producer, then aborts)
    PrepareEpochFence -> PrepareAbort
    PrepareCommit     -> CompleteCommit (all markers written)
    PrepareAbort      -> CompleteAbort
    Complete*         -> Ongoing, Empty, Dead, PrepareAbort (as from Empty)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from kafkacompat.transactions.log import NO_PRODUCER_ID, TransactionLogValue

NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (the TransactionStatus byte of the log value)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions report ("PrepareCommit")."""
        return "".join(part.capitalize() for part in self.name.split("_"))


STATE_BY_NAME = {state.kafka_name: state for state in TxnState}

_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    # Empty and Complete*: transaction version 2's abort with no partitions (an epoch bump)
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE, TxnState.EMPTY,
                                       TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

EXPIRATION_ALLOWED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MaxValue free so that the coordinator can always fence a producer."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Transit:
    """The state a prepared change leads to (Kafka's TxnTransitMetadata)."""

    state: TxnState
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int
    client_transaction_version: int

    def log_value(self) -> TransactionLogValue:
        grouped: dict[str, list[int]] | None = None
        if self.state != TxnState.EMPTY:
            grouped = {}
            for topic, index in self.partitions:
                grouped.setdefault(topic, []).append(index)
        # PrepareEpochFence is never written: the abort it leads to is (PrepareAbort).
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
                                   grouped, self.last_update_ms, self.start_ms, self.previous_producer_id,
                                   self.next_producer_id, self.client_transaction_version)


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    pending_state: TxnState | None = None
    # An epoch fence whose write failed: the epoch it bumped was never handed out, so the next
    # fence reuses it (Kafka's hasFailedEpochFence).
    failed_epoch_fence: bool = False

    @classmethod
    def from_log(cls, transactional_id: str, value: TransactionLogValue) -> "TransactionMetadata":
        partitions = {(topic, index) for topic, ids in (value.partitions or {}).items() for index in ids}
        return cls(transactional_id, value.producer_id, value.producer_epoch, NO_PRODUCER_EPOCH, value.timeout_ms,
                   TxnState(value.status), partitions, value.start_ms, value.last_update_ms,
                   value.previous_producer_id, value.next_producer_id, value.client_transaction_version)

    @property
    def supports_epoch_bump(self) -> bool:
        """Transaction version 2 (KIP-890): every commit or abort bumps the epoch."""
        return self.client_transaction_version >= 2

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT)

    # ---- preparing changes --------------------------------------------------------------------

    def _transit(self, state: TxnState, **changes) -> Transit:
        if self.pending_state is not None:
            raise RuntimeError(f"transactional id {self.transactional_id!r}: a transition to {state.kafka_name} "
                               f"was prepared while {self.pending_state.kafka_name} is pending")
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"transactional id {self.transactional_id!r}: {self.state.kafka_name} cannot "
                               f"become {state.kafka_name}")
        transit = Transit(state, self.producer_id, self.previous_producer_id, NO_PRODUCER_ID, self.producer_epoch,
                          self.last_producer_epoch, self.timeout_ms, frozenset(self.partitions), self.start_ms,
                          self.last_update_ms, 0)
        transit = replace(transit, **changes)
        self.pending_state = state
        return transit

    def prepare_fence_epoch(self) -> Transit:
        if self.producer_epoch == MAX_EPOCH:
            raise RuntimeError(f"cannot fence producer {self.producer_id}: its epoch is at the maximum")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._transit(TxnState.PREPARE_EPOCH_FENCE, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> "Transit | int":
        """InitProducerId: the next epoch, or an error code (PRODUCER_FENCED)."""
        from kafkacompat.wire.errors import ErrorCode

        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry of a call that succeeded
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._transit(TxnState.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)

    def prepare_producer_id_rotation(self, producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> Transit:
        return self._transit(TxnState.EMPTY, producer_id=producer_id, previous_producer_id=self.producer_id,
                             producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int, client_transaction_version: int) -> Transit:
        starting = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        return self._transit(TxnState.ONGOING, partitions=frozenset(self.partitions | added),
                             start_ms=now_ms if starting else self.start_ms, last_update_ms=now_ms,
                             client_transaction_version=client_transaction_version)

    def prepare_end(self, state: TxnState, client_transaction_version: int, next_producer_id: int,
                    now_ms: int, *, starting: bool = False) -> Transit:
        """PrepareCommit/PrepareAbort; ``starting``: an abort of nothing (TV2), which starts now."""
        if client_transaction_version >= 2:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        extra = {"partitions": frozenset(), "start_ms": now_ms} if starting else {}
        return self._transit(state, next_producer_id=next_producer_id, producer_epoch=epoch, last_producer_epoch=last,
                             last_update_ms=now_ms, client_transaction_version=client_transaction_version, **extra)

    def prepare_complete(self, now_ms: int) -> Transit:
        state = TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self.failed_epoch_fence = False
        producer_id, epoch = self.producer_id, self.producer_epoch
        if self.supports_epoch_bump and self.next_producer_id != NO_PRODUCER_ID:
            producer_id, epoch = self.next_producer_id, 0  # the epoch overflowed: the new id takes over now
        return self._transit(state, producer_id=producer_id, previous_producer_id=self.producer_id,
                             producer_epoch=epoch, last_producer_epoch=self.producer_epoch, partitions=frozenset(),
                             last_update_ms=now_ms, client_transaction_version=self.client_transaction_version)

    def prepare_dead(self) -> Transit:
        return self._transit(TxnState.DEAD, partitions=frozenset(),
                             client_transaction_version=self.client_transaction_version)

    # ---- completing them ----------------------------------------------------------------------

    def complete(self, transit: Transit) -> None:
        """Apply a prepared change once __transaction_state has it."""
        if self.pending_state != transit.state and not (
                self.pending_state == TxnState.PREPARE_EPOCH_FENCE and transit.state == TxnState.PREPARE_ABORT):
            raise RuntimeError(f"transactional id {self.transactional_id!r}: completing {transit.state.kafka_name} "
                               f"while {self.pending_state} is pending")
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.last_update_ms = transit.last_update_ms
        self.client_transaction_version = transit.client_transaction_version
        self.state = transit.state
        self.pending_state = None

    def abandon(self) -> None:
        """The prepared change was not written: the id stays as it was."""
        self.pending_state = None
