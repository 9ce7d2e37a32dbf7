"""The transaction coordinator: transactional ids, their state machine (metadata.py) and its
durable form in __transaction_state (log.py), as Kafka's TransactionCoordinator and
TransactionStateManager.

Each transactional id belongs to the __transaction_state partition its hash picks; the leader of
that partition coordinates it. A cluster member follows leadership through the replica manager
(``on_partition_state``): it loads a partition's ids when it becomes the leader and drops them
when it stops being it. A single node coordinates every id. Every change is written with acks=-1
(``transaction.state.log.min.isr``) before it takes effect and before the client hears of it.

Once EndTxn's PrepareCommit/PrepareAbort is written the client is answered and the markers go to
every partition's leader (markers.py), retried until all are written; then CompleteCommit /
CompleteAbort is written. A new leader of the partition resumes the markers of every transaction
it loads in PrepareCommit/PrepareAbort.

Everything runs on one Trio thread: a change is prepared (``pending_state``) synchronously, and
other requests for the id answer CONCURRENT_TRANSACTIONS until it is written or abandoned.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Protocol

import trio

from kafkacompat.groups import storage
from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.transactions import log as txnlog
from kafkacompat.transactions.log import NO_PRODUCER_ID, TRANSACTION_STATE_TOPIC
from kafkacompat.transactions.metadata import (
    EXPIRATION_ALLOWED,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    Transit,
    TxnState,
    epoch_exhausted,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError, error_name

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.producer_ids import ProducerIdManager
    from kafkacompat.services import OffsetsLog

log = logging.getLogger("kafkacompat.transactions")

TV0, TV2 = 0, 2
_MARKER_RETRY_MIN_S = 0.02
_MARKER_RETRY_MAX_S = 1.0


class MarkerWriter(Protocol):
    """Writes COMMIT/ABORT markers to the leaders of ``partitions`` (markers.py)."""

    async def write(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                    partitions: set[tuple[str, int]], transaction_version: int) -> dict[tuple[str, int], int]: ...


@dataclass(slots=True)
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _append_error(code: int) -> int:
    """TransactionStateManager.appendTransactionToLog: a failed append as the client hears it."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


SETTLE_WAIT_S = 0.1  # how long AddPartitionsToTxn waits for the id's change in flight before CONCURRENT_TRANSACTIONS


def _changing(metadata: TransactionMetadata) -> bool:
    """A change of the id is being written, or its transaction's markers are."""
    return metadata.pending_state is not None or metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


class TransactionCoordinator:
    def __init__(self, config: "BrokerConfig", state_log: "OffsetsLog", producer_ids: "ProducerIdManager",
                 markers: MarkerWriter | None, *, clustered: bool,
                 wall_clock: Callable[[], int] | None = None) -> None:
        self.config = config
        self.state_log = state_log
        self.producer_ids = producer_ids
        self.markers = markers
        self.wall_clock = wall_clock or (lambda: int(time.time() * 1000))
        self.transactions: dict[str, TransactionMetadata] = {}
        # __transaction_state partition -> coordinator epoch (its leader epoch when loaded). None on
        # a single node until load(): then every partition is owned.
        self.owned: dict[int, int] = {}
        self.clustered = clustered
        self.loading: set[int] = set()
        self._background: trio.Nursery | None = None
        self._queued: list[tuple] = []  # marker work found before run() started (load at start-up)
        self._changed = trio.Event()  # set (and replaced) whenever a transactional id's state change ends

    # ---- __transaction_state -------------------------------------------------------------------

    def topic(self):
        return self.state_log.topic()

    def topic_configs(self, replication_factor: int) -> dict[str, str]:
        """TransactionStateManager.transactionTopicConfigs. min.insync.replicas is capped by the
        replication factor the topic gets (itself capped by the live brokers), so a single node
        serves transactions as Kafka's shipped server.properties (min.isr 1) does."""
        min_isr = min(self.config.transaction_state_log_min_isr, max(replication_factor, 1))
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(min_isr),
            "segment.bytes": str(self.config.transaction_state_log_segment_bytes),
        }

    def partition_for(self, transactional_id: str) -> int:
        topic = self.topic()
        count = topic.partitions if topic is not None else self.config.transaction_state_log_num_partitions
        return txnlog.partition_for(transactional_id, count)

    def is_loading(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self.loading

    def _coordinator_epoch(self, transactional_id: str) -> int | None:
        return self.owned.get(self.partition_for(transactional_id))

    def _check_coordinator(self, transactional_id: str) -> int:
        index = self.partition_for(transactional_id)
        if index in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.owned and not self.clustered:
            if self.topic() is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            self.on_topic_created()  # created by someone else (CreateTopics): a single node owns it all
        return ErrorCode.NONE if index in self.owned else ErrorCode.NOT_COORDINATOR

    async def _write(self, metadata: TransactionMetadata, transit: Transit, coordinator_epoch: int) -> int:
        """Write ``transit`` with acks=-1 and apply it (0), or abandon it and return the error."""
        tid = metadata.transactional_id
        try:
            error = await self._append(tid, txnlog.value_bytes(transit.log_value()))
        except (KafkaError, OSError) as exc:
            error = exc.code if isinstance(exc, KafkaError) else ErrorCode.KAFKA_STORAGE_ERROR
            log.warning("Could not write the state of transactional id %r to %s: %s", tid, TRANSACTION_STATE_TOPIC,
                        exc)
        error = _append_error(error)
        if error == ErrorCode.NONE and self._coordinator_epoch(tid) != coordinator_epoch:
            error = ErrorCode.NOT_COORDINATOR  # the partition moved while the write waited
        current = self.transactions.get(tid)
        if current is not metadata:
            return error or ErrorCode.NOT_COORDINATOR
        if error:
            metadata.abandon()
        else:
            metadata.complete(transit)
        self._changed.set()
        self._changed = trio.Event()
        return error

    async def _append(self, transactional_id: str, value: bytes | None) -> int:
        from kafkacompat.wire.records import validate_batches

        self.state_log.ensure_topic()
        partition = self.state_log.partition(self.partition_for(transactional_id))
        if partition is None:
            return ErrorCode.NOT_COORDINATOR
        partition.check_leader()
        partition.check_enough_replicas()
        batch = storage.build_batch([(txnlog.key_bytes(transactional_id), value)], self.wall_clock())
        view = memoryview(batch)
        info = partition.append(view, validate_batches(view, partition.log.config.max_message_bytes))
        required, leader_epoch = info.last_offset + 1, partition.leader_epoch
        status = partition.replication_status(required, leader_epoch)
        if status is None:
            status = await partition.wait_replicated(required, leader_epoch, self.config.request_timeout_ms)
        return status

    # ---- loading and leadership --------------------------------------------------------------------

    def load(self) -> None:
        """A single node coordinates every id: load every partition at start-up."""
        topic = self.topic()
        if topic is None:
            return
        for index in range(topic.partitions):
            self._load_partition(index)
        log.info("Loaded %d transactional id(s) from %s", len(self.transactions), TRANSACTION_STATE_TOPIC)

    def on_topic_created(self) -> None:
        """A single node created __transaction_state: it owns every (empty) partition."""
        topic = self.topic()
        if topic is not None and not self.clustered:
            for index in range(topic.partitions):
                partition = self.state_log.partition(index)
                if partition is not None and index not in self.owned:
                    self.owned[index] = partition.leader_epoch

    def _load_partition(self, index: int) -> None:
        partition = self.state_log.partition(index)
        if partition is None:
            return
        self.loading.add(index)
        try:
            loaded = self._read_partition(partition)
        finally:
            self.loading.discard(index)
        coordinator_epoch = partition.leader_epoch
        for tid, metadata in loaded.items():
            self.transactions[tid] = metadata
        self.owned[index] = coordinator_epoch
        for metadata in loaded.values():
            if metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("Transactional id %r was in %s when %s-%d was loaded; writing its markers",
                         metadata.transactional_id, metadata.state.kafka_name, TRANSACTION_STATE_TOPIC, index)
                self._start_markers(metadata, coordinator_epoch)

    def _read_partition(self, partition) -> dict[str, TransactionMetadata]:
        from kafkacompat.wire.records import iter_batches

        values: dict[str, txnlog.TransactionLogValue | None] = {}
        position = partition.log_start_offset
        end = partition.log_end_offset
        chunk = max(self.config.transaction_state_log_load_buffer_size, 1)
        while position < end:
            result = partition.log.read(position, chunk, max_offset=end, min_one_batch=True)
            try:
                data = result.read_all()
            finally:
                result.close()
            if not data:
                break
            for _, key, value in storage.iter_batch_records(data):
                tid = txnlog.decode_key(key) if key is not None else None
                if tid is None:
                    continue
                values[tid] = None if value is None else txnlog.decode_value(value)
            position = max(max((h.next_offset for h in iter_batches(data)), default=position + 1), position + 1)
        return {tid: TransactionMetadata.from_log(tid, value) for tid, value in values.items() if value is not None}

    def on_partition_state(self, state, node_id: int) -> None:
        if state.topic != TRANSACTION_STATE_TOPIC:
            return
        index = state.partition
        if state.leader == node_id:
            if self.owned.get(index) != state.leader_epoch:
                self._unload(index)
                self._load_partition(index)
                log.info("Coordinating the transactional ids of %s-%d (coordinator epoch %d)",
                         TRANSACTION_STATE_TOPIC, index, state.leader_epoch)
        elif index in self.owned:
            self.on_partition_removed(TRANSACTION_STATE_TOPIC, index)

    def on_partition_removed(self, topic: str, index: int) -> None:
        if topic != TRANSACTION_STATE_TOPIC or index not in self.owned:
            return
        self._unload(index)
        log.info("No longer coordinating the transactional ids of %s-%d", TRANSACTION_STATE_TOPIC, index)

    def _unload(self, index: int) -> None:
        self.owned.pop(index, None)
        for tid in [t for t in self.transactions if self.partition_for(t) == index]:
            del self.transactions[tid]

    # ---- background work ---------------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._background = nursery
            for args in self._queued:
                nursery.start_soon(*args)
            self._queued.clear()
            nursery.start_soon(self._every, self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                               self.abort_timed_out_transactions)
            nursery.start_soon(self._every, self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                               self.remove_expired_transactional_ids)

    async def _every(self, interval_ms: int, work) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception:
                log.exception("Transaction coordinator housekeeping failed; will retry")

    def _spawn(self, *args) -> None:
        if self._background is None:
            self._queued.append(args)
        else:
            self._background.start_soon(*args)

    async def abort_timed_out_transactions(self) -> None:
        """Roll back every transaction open longer than its timeout, fencing its producer."""
        now = self.wall_clock()
        for metadata in list(self.transactions.values()):
            if (metadata.state != TxnState.ONGOING or metadata.pending_state is not None
                    or metadata.start_ms + metadata.timeout_ms >= now):
                continue
            log.info("Transaction of transactional id %r (producer %d, epoch %d) timed out after %d ms; aborting it",
                     metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, metadata.timeout_ms)
            fence = metadata.prepare_fence_epoch()
            error, _, _ = await self._end(metadata.transactional_id, fence.producer_id, fence.producer_epoch,
                                          committed=False, from_client=False, transaction_version=None, fence=fence)
            if error:
                log.info("Rolling back the timed-out transaction of %r did not happen: %s",
                         metadata.transactional_id, error_name(error))

    async def remove_expired_transactional_ids(self) -> None:
        """transactional.id.expiration.ms: an id idle that long (and with no open transaction) goes."""
        now = self.wall_clock()
        for metadata in list(self.transactions.values()):
            if (metadata.state not in EXPIRATION_ALLOWED or metadata.pending_state is not None
                    or metadata.last_update_ms > now - self.config.transactional_id_expiration_ms):
                continue
            tid = metadata.transactional_id
            coordinator_epoch = self._coordinator_epoch(tid)
            if coordinator_epoch is None:
                continue
            metadata.prepare_dead()
            try:
                error = _append_error(await self._append(tid, None))
            except (KafkaError, OSError) as exc:
                error = ErrorCode.KAFKA_STORAGE_ERROR if isinstance(exc, OSError) else exc.code
            if error == ErrorCode.NONE and self.transactions.get(tid) is metadata:
                del self.transactions[tid]
                log.info("Transactional id %r expired (idle for %d ms)", tid, now - metadata.last_update_ms)
            else:
                metadata.abandon()

    # ---- InitProducerId --------------------------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None) -> InitResult:
        """TransactionCoordinator.handleInitProducerId for a transactional id."""
        if tid == "":
            return InitResult(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.config.transaction_max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error = self._check_coordinator(tid)
        if error:
            return InitResult(error)
        coordinator_epoch = self._coordinator_epoch(tid)
        metadata = self.transactions.get(tid)
        if metadata is None:
            producer_id = await self.producer_ids.generate()
            metadata = self.transactions.setdefault(
                tid, TransactionMetadata(tid, producer_id, timeout_ms=timeout_ms, last_update_ms=self.wall_clock()))
        if metadata.pending_state is not None:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not self._valid_expected_producer(metadata, expected):
            return InitResult(ErrorCode.PRODUCER_FENCED)
        state = metadata.state
        if state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state == TxnState.ONGOING:
            # Fence the producer and abort its transaction; the client retries and gets the next epoch.
            fence = metadata.prepare_fence_epoch()
            error, _, _ = await self._end(tid, fence.producer_id, fence.producer_epoch, committed=False,
                                          from_client=False, transaction_version=None, fence=fence)
            return InitResult(error or ErrorCode.CONCURRENT_TRANSACTIONS)
        if state not in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            raise RuntimeError(f"transactional id {tid!r} is {state.kafka_name}, which InitProducerId never sees")
        now = self.wall_clock()
        if metadata.epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
            producer_id = await self.producer_ids.generate()
            if metadata.pending_state is not None:
                return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            transit: Transit | int = metadata.prepare_producer_id_rotation(producer_id, timeout_ms, now,
                                                                           expected is not None)
        else:
            transit = metadata.prepare_increment_epoch(timeout_ms, expected[1] if expected else None, now)
        if isinstance(transit, int):
            return InitResult(transit)
        error = await self._write(metadata, transit, coordinator_epoch)
        if error:
            log.info("InitProducerId of transactional id %r answered %s", tid, error_name(error))
            return InitResult(error)
        log.info("Initialized transactional id %r with producer id %d and epoch %d on %s-%d", tid,
                 metadata.producer_id, metadata.producer_epoch, TRANSACTION_STATE_TOPIC, self.partition_for(tid))
        return InitResult(ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch)

    @staticmethod
    def _valid_expected_producer(metadata: TransactionMetadata, expected: tuple[int, int]) -> bool:
        """KIP-360: a producer recovering with its current id and epoch (or the previous id with an
        exhausted epoch: a retry of a rotation it never heard of) is not fenced."""
        producer_id, epoch = expected
        return (metadata.producer_epoch == NO_PRODUCER_EPOCH or producer_id == metadata.producer_id
                or (producer_id == metadata.previous_producer_id and epoch_exhausted(epoch)))

    # ---- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------

    def _check_producer(self, tid: str, producer_id: int, epoch: int) -> tuple[int, TransactionMetadata | None]:
        if not tid:
            return ErrorCode.INVALID_REQUEST, None
        error = self._check_coordinator(tid)
        if error:
            return error, None
        metadata = self.transactions.get(tid)
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if metadata.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return ErrorCode.NONE, metadata

    async def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions: set[tuple[str, int]],
                             transaction_version: int = TV0) -> int:
        """handleAddPartitionsToTransaction: one error for all the partitions."""
        error, metadata = await self._check_producer_once_settled(tid, producer_id, epoch)
        if metadata is None:
            return error
        if _changing(metadata):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state == TxnState.ONGOING and partitions <= metadata.partitions:
            return ErrorCode.NONE
        version = max(transaction_version, metadata.client_transaction_version) \
            if metadata.state == TxnState.ONGOING else transaction_version
        transit = metadata.prepare_add_partitions(partitions, self.wall_clock(), version)
        return await self._write(metadata, transit, self._coordinator_epoch(tid))

    async def _check_producer_once_settled(self, tid: str, producer_id: int,
                                           epoch: int) -> tuple[int, TransactionMetadata | None]:
        """_check_producer, once the id's change in flight is written (its previous transaction's
        markers and CompleteCommit, typically: a producer begins its next transaction as soon as
        EndTxn is answered), waiting at most SETTLE_WAIT_S. Kafka answers CONCURRENT_TRANSACTIONS
        at once, which librdkafka retries only after retry.backoff.ms (100 ms): one such retry per
        few dozen transactions cost more than the broker's whole work for them."""
        deadline = trio.current_time() + SETTLE_WAIT_S
        while True:
            error, metadata = self._check_producer(tid, producer_id, epoch)
            if metadata is None or not _changing(metadata) or trio.current_time() >= deadline:
                return error, metadata
            with trio.move_on_at(deadline):
                await self._changed.wait()

    def verify_partitions(self, tid: str, producer_id: int, epoch: int,
                          partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """handleVerifyPartitionsInTransaction (AddPartitionsToTxn v4+ verify_only from a leader)."""
        error, metadata = self._check_producer(tid, producer_id, epoch)
        if metadata is None:
            return {tp: error for tp in partitions}
        if metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return {tp: ErrorCode.CONCURRENT_TRANSACTIONS for tp in partitions}
        return {tp: ErrorCode.NONE if tp in metadata.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions}

    async def add_offsets(self, tid: str, producer_id: int, epoch: int, group_id: str,
                          offsets_partitions: int) -> int:
        index = storage.partition_for(group_id, offsets_partitions)
        return await self.add_partitions(tid, producer_id, epoch, {(OFFSETS_TOPIC, index)})

    # ---- the TransactionVerifier a partition leader asks ------------------------------------------

    async def verify_or_add(self, tid: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]],
                            verify_only: bool) -> dict[tuple[str, int], int]:
        """A leader's check before a transactional append: verify_only (TV1) or add (TV2)."""
        wanted = set(partitions)
        if verify_only:
            return self.verify_partitions(tid, producer_id, epoch, wanted)
        error = await self.add_partitions(tid, producer_id, epoch, wanted, TV2)
        return {tp: error for tp in wanted}

    # ---- EndTxn --------------------------------------------------------------------------------

    async def end_transaction(self, tid: str, producer_id: int, epoch: int, committed: bool,
                              transaction_version: int) -> tuple[int, int, int]:
        """handleEndTransaction: (error, producer id, epoch) - the new epoch for a TV2 client."""
        if not tid:
            return ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error = self._check_coordinator(tid)
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return await self._end(tid, producer_id, epoch, committed=committed, from_client=True,
                               transaction_version=transaction_version, fence=None)

    @staticmethod
    def _valid_end_epoch(metadata: TransactionMetadata, producer_id: int, epoch: int, from_client: bool,
                         tv2: bool) -> tuple[bool, bool]:
        """(epoch valid, a retry of an EndTxn that took effect) as Kafka 4.2's endTransaction (TV2)
        and endTransactionWithTV1 decide them."""
        if not tv2:
            return (not from_client or epoch == metadata.producer_epoch) and epoch >= metadata.producer_epoch, False
        retry_on_bump = metadata.producer_epoch == epoch + 1
        retry_on_overflow = (metadata.previous_producer_id == producer_id and epoch == MAX_EPOCH - 1
                             and metadata.producer_epoch == 0)
        state = metadata.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return retry_on_bump, retry_on_bump
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            retry = retry_on_bump or retry_on_overflow
            return retry or epoch == metadata.producer_epoch, retry
        return epoch == metadata.producer_epoch, False

    async def _end(self, tid: str, producer_id: int, epoch: int, *, committed: bool, from_client: bool,
                   transaction_version: int | None, fence: Transit | None) -> tuple[int, int, int]:
        none = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        metadata = self.transactions.get(tid)
        if metadata is None:
            return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *none)
        coordinator_epoch = self._coordinator_epoch(tid)
        version = metadata.client_transaction_version if transaction_version is None else transaction_version
        tv2 = version >= TV2 and fence is None
        if fence is not None:
            # The fence's bumped epoch is taken now; the abort below is what gets written.
            metadata.pending_state = None
            metadata.producer_epoch = fence.producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            valid, retry = True, False
        else:
            valid, retry = self._valid_end_epoch(metadata, producer_id, epoch, from_client, tv2)
        overflow_retry = retry and metadata.producer_id != producer_id
        if metadata.producer_id != producer_id and not overflow_retry:
            return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *none)
        if not valid:
            return (ErrorCode.PRODUCER_FENCED, *none)
        if metadata.pending_state is not None:
            return (ErrorCode.CONCURRENT_TRANSACTIONS, *none)
        state = metadata.state
        wanted_prepare = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        wanted_complete = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        current = (ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch)
        # Transaction version 2 lets a producer abort with nothing added (Empty, or right after a
        # completed transaction): the epoch is bumped all the same (KIP-890's "EB").
        empty_abort = tv2 and not committed and not retry and state in (
            TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        if state == wanted_complete and not empty_abort:
            if tv2 and not retry:
                return (ErrorCode.INVALID_TXN_STATE, *none)
            return current  # a retry of what is done
        if state == wanted_prepare:
            return (ErrorCode.CONCURRENT_TRANSACTIONS, *none)
        if state != TxnState.ONGOING and not empty_abort:
            log.debug("EndTxn(%s) for transactional id %r in %s", "commit" if committed else "abort", tid,
                      state.kafka_name)
            return (ErrorCode.INVALID_TXN_STATE, *none)
        next_producer_id = NO_PRODUCER_ID
        if fence is None and version >= TV2 and metadata.epoch_exhausted:
            next_producer_id = await self.producer_ids.generate()
            if metadata.pending_state is not None:
                return (ErrorCode.CONCURRENT_TRANSACTIONS, *none)
        if fence is not None:
            transit = metadata.prepare_end(wanted_prepare, TV0, next_producer_id, self.wall_clock())
            transit = _with_version(transit, metadata.client_transaction_version)
        elif empty_abort:
            transit = metadata.prepare_end(wanted_prepare, version, next_producer_id, self.wall_clock(),
                                           starting=True)
        else:
            transit = metadata.prepare_end(wanted_prepare, version, next_producer_id, self.wall_clock())
        error = await self._write(metadata, transit, coordinator_epoch)
        if error:
            if fence is not None:
                metadata.failed_epoch_fence = True
            log.info("EndTxn for transactional id %r: writing %s failed (%s)", tid, wanted_prepare.kafka_name,
                     error_name(error))
            return (error, *none)
        self._start_markers(metadata, coordinator_epoch)
        return ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch

    # ---- markers -------------------------------------------------------------------------------

    def _start_markers(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        self._spawn(self._write_markers_and_complete, metadata, coordinator_epoch)

    async def _write_markers_and_complete(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        try:
            await self._complete_transaction(metadata, coordinator_epoch)
        except Exception:
            # The state stays PrepareCommit/PrepareAbort: the partition's next leader resumes it.
            log.exception("Completing the transaction of transactional id %r failed", metadata.transactional_id)

    async def _complete_transaction(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        tid = metadata.transactional_id
        committed = metadata.state == TxnState.PREPARE_COMMIT
        remaining = set(metadata.partitions)
        delay = _MARKER_RETRY_MIN_S
        while remaining:
            if not self._still_owns(metadata, coordinator_epoch):
                return
            if self.markers is None:
                raise RuntimeError("the transaction coordinator has no marker writer")
            try:
                results = await self.markers.write(metadata.producer_id, metadata.producer_epoch, committed,
                                                   coordinator_epoch, remaining, metadata.client_transaction_version)
            except Exception:
                log.exception("Writing the markers of transactional id %r failed; retrying", tid)
                results = {}
            for tp, error in results.items():
                if error in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    # A partition whose topic is gone has nothing to mark (Kafka drops it too).
                    remaining.discard(tp)
                elif error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                    log.warning("Markers of transactional id %r refused by %s-%d (%s): a newer coordinator "
                                "or producer epoch exists; this coordinator stops", tid, tp[0], tp[1],
                                error_name(error))
                    return
            if remaining:
                if delay == _MARKER_RETRY_MIN_S:  # once per transaction, not on every retry
                    log.info("Markers of transactional id %r (producer %d) not written yet to %s; retrying until "
                             "they are", tid, metadata.producer_id,
                             ", ".join(f"{t}-{p}: {error_name(results.get((t, p)))}" for t, p in sorted(remaining)))
                await trio.sleep(delay)
                delay = min(delay * 2, _MARKER_RETRY_MAX_S)
        delay = _MARKER_RETRY_MIN_S
        while self._still_owns(metadata, coordinator_epoch):
            if metadata.pending_state is not None:
                await trio.sleep(delay)
                delay = min(delay * 2, _MARKER_RETRY_MAX_S)
                continue
            error = await self._write(metadata, metadata.prepare_complete(self.wall_clock()), coordinator_epoch)
            if error in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                return
            log.info("Writing %s for transactional id %r failed (%s); retrying", metadata.state.kafka_name, tid,
                     error_name(error))
            await trio.sleep(delay)
            delay = min(delay * 2, _MARKER_RETRY_MAX_S)

    def _still_owns(self, metadata: TransactionMetadata, coordinator_epoch: int) -> bool:
        tid = metadata.transactional_id
        return (self.transactions.get(tid) is metadata and self._coordinator_epoch(tid) == coordinator_epoch
                and metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT))

    # ---- DescribeTransactions / ListTransactions --------------------------------------------------------

    def describe(self, tid: str) -> tuple[int, TransactionMetadata | None]:
        if not tid:
            return ErrorCode.INVALID_REQUEST, None
        error = self._check_coordinator(tid)
        if error:
            return error, None
        metadata = self.transactions.get(tid)
        if metadata is None or metadata.state == TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, metadata

    def list_transactions(self, states: set[str], producer_ids: set[int], min_duration_ms: int,
                          id_pattern: str | None = None) -> tuple[int, list[str], list[TransactionMetadata]]:
        """(error, unknown state filters, matches). ``min_duration_ms`` < 0: no duration filter;
        ``id_pattern`` (ListTransactions v2), when not empty: ids the whole regular expression matches."""
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        matcher = None
        if id_pattern:
            try:
                matcher = re.compile(id_pattern)
            except re.error:
                return ErrorCode.INVALID_REGULAR_EXPRESSION, [], []
        unknown = sorted(name for name in states if name not in _STATE_NAMES)
        wanted = {TxnState[_STATE_NAMES[name]] for name in states if name in _STATE_NAMES}
        now = self.wall_clock()
        matches = []
        for metadata in self.transactions.values():
            if metadata.state == TxnState.DEAD:
                continue
            if states and metadata.state not in wanted:
                continue
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if matcher is not None and matcher.fullmatch(metadata.transactional_id) is None:
                continue
            if min_duration_ms >= 0 and now - metadata.start_ms <= min_duration_ms:
                continue  # as Kafka: running no longer than the filter (start -1 never is)
            matches.append(metadata)
        return ErrorCode.NONE, unknown, matches


_STATE_NAMES = {state.kafka_name: state.name for state in TxnState}


def _with_version(transit: Transit, version: int) -> Transit:
    return replace(transit, client_transaction_version=version)
