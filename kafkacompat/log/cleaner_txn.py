"""Transactions in log compaction (Kafka's Cleaner.CleanedTransactionMetadata): while the
cleaner walks the batches of a group in offset order, it knows which producers are inside an
aborted transaction (from the aborted-transaction index of the range) and which inside a
committed one, so that

- the records of aborted transactions are discarded (and never enter the offset map);
- an ABORT marker stays while this pass saw data of its transaction, and its transaction goes
  into the cleaned segment's .txnindex; a COMMIT marker stays while this pass saw data of its
  transaction. A marker whose transaction has no data left may go, but only once the delete
  horizon stamped on its batch (delete.retention.ms, KIP-534) has passed."""

from __future__ import annotations

from collections import deque
from typing import Iterable

from kafkacompat.log.txn_index import AbortedTxn
from kafkacompat.wire.records import BatchHeader, read_txn_marker


class CleanedTransactions:
    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._aborted = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._ongoing_aborted: dict[int, AbortedTxn] = {}
        self._observed_aborted: set[int] = set()  # producers whose aborted data this pass saw
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: list[AbortedTxn] = []  # entries for the cleaned segment's .txnindex

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, txn)

    def on_data_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (its records go)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        if header.producer_id in self._ongoing_aborted:
            self._observed_aborted.add(header.producer_id)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, data: bytes | memoryview) -> bool:
        """A control batch: True when no data of its transaction was seen (it may go once its
        delete horizon passed)."""
        self._consume_aborted_up_to(header.last_offset)
        marker = read_txn_marker(data, header)
        if marker is None:
            return True  # an emptied control batch, or a control type this broker does not write
        producer_id = header.producer_id
        if marker.committed:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        txn = self._ongoing_aborted.pop(producer_id, None)
        if txn is not None and producer_id in self._observed_aborted:
            self._observed_aborted.discard(producer_id)
            self.cleaned_index.append(txn)
            return False
        self._observed_aborted.discard(producer_id)
        return True
