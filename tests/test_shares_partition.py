"""The share-partition state machine (kafkacompat/shares/partition.py) and its durable records
(kafkacompat/shares/records.py), driven directly with explicit times."""

import uuid

import pytest

from kafkacompat.shares.partition import (
    AcknowledgementBatch as Ack,
    AcknowledgeType,
    AcquiredRange,
    AcquireMode,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateBatch,
    delivery_complete_count,
)
from kafkacompat.shares import records
from kafkacompat.wire.errors import ErrorCode, KafkaError

ACCEPT, RELEASE, REJECT, GAP, RENEW = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                                       AcknowledgeType.GAP, AcknowledgeType.RENEW)


def share(start=0, **config) -> SharePartition:
    return SharePartition("g", "t", 0, start, SharePartitionConfig(**config))


def test_acquire_locks_records_for_one_member_and_counts_the_delivery():
    sp = share()
    assert sp.acquire("a", [(0, 4), (5, 9)], 100, now=0) == [AcquiredRange(0, 9, 1)]
    assert sp.end_offset == 10 and sp.next_fetch_offset() == 10
    # another member gets nothing of what "a" holds
    assert sp.acquire("b", [(0, 4), (5, 9)], 100, now=1) == []


def test_batch_mode_ends_on_a_batch_boundary_record_limit_does_not():
    sp = share()
    assert sp.acquire("a", [(0, 4), (5, 9)], 3, now=0) == [AcquiredRange(0, 4, 1)]
    sp2 = share()
    assert sp2.acquire("a", [(0, 4), (5, 9)], 3, now=0, mode=AcquireMode.RECORD_LIMIT) == [AcquiredRange(0, 2, 1)]
    assert sp2.end_offset == 3
    assert sp2.acquire("b", [(0, 4), (5, 9)], 3, now=0, mode=AcquireMode.RECORD_LIMIT) == [AcquiredRange(3, 5, 1)]


def test_accept_moves_the_start_offset_and_frees_the_slots():
    sp = share()
    sp.acquire("a", [(0, 9)], 100, now=0)
    sp.acknowledge("a", [Ack(0, 4, [ACCEPT])], now=1)
    assert (sp.start_offset, sp.end_offset, sp.in_flight()) == (5, 10, 5)
    sp.acknowledge("a", [Ack(5, 9, [REJECT])], now=1)
    assert (sp.start_offset, sp.in_flight()) == (10, 0)


def test_release_redelivers_with_a_rising_delivery_count_until_the_limit_archives():
    sp = share(delivery_count_limit=3)
    for delivery in (1, 2, 3):
        assert sp.acquire("a", [(0, 0)], 10, now=0) == [AcquiredRange(0, 0, delivery)]
        sp.acknowledge("a", [Ack(0, 0, [RELEASE])], now=0)
    assert sp.start_offset == 1  # archived after its third delivery
    assert sp.acquire("a", [(1, 1)], 10, now=0) == [AcquiredRange(1, 1, 1)]


def test_an_expired_lock_releases_the_record_to_any_member():
    sp = share(lock_duration_s=30)
    sp.acquire("a", [(0, 1)], 10, now=0)
    assert sp.next_lock_deadline() == 30
    assert not sp.expire_locks(now=29.9)
    assert sp.expire_locks(now=30)
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("b", [(0, 1)], 10, now=31) == [AcquiredRange(0, 1, 2)]
    with pytest.raises(KafkaError) as failure:
        sp.acknowledge("a", [Ack(0, 1, [ACCEPT])], now=32)
    assert failure.value.code == ErrorCode.INVALID_RECORD_STATE


def test_renew_extends_the_lock_without_a_new_delivery():
    sp = share(lock_duration_s=30)
    sp.acquire("a", [(0, 0)], 10, now=0)
    sp.acknowledge("a", [Ack(0, 0, [RENEW])], now=20)
    assert not sp.expire_locks(now=40)
    assert sp.slot(0).state is RecordState.ACQUIRED and sp.slot(0).delivery_count == 1


def test_acknowledgements_are_all_or_nothing():
    sp = share()
    sp.acquire("a", [(0, 4)], 10, now=0)
    with pytest.raises(KafkaError) as failure:
        sp.acknowledge("a", [Ack(0, 1, [ACCEPT]), Ack(3, 6, [ACCEPT])], now=0)
    assert failure.value.code == ErrorCode.INVALID_RECORD_STATE
    assert sp.start_offset == 0 and all(sp.slot(o).state is RecordState.ACQUIRED for o in range(5))
    with pytest.raises(KafkaError) as failure:
        sp.acknowledge("a", [Ack(0, 4, [ACCEPT, REJECT])], now=0)
    assert failure.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as failure:
        sp.acknowledge("a", [Ack(0, 0, [9])], now=0)
    assert failure.value.code == ErrorCode.INVALID_REQUEST


def test_per_offset_types_and_gaps():
    sp = share()
    sp.acquire("a", [(0, 4)], 10, now=0)
    sp.acknowledge("a", [Ack(0, 4, [ACCEPT, GAP, RELEASE, REJECT, ACCEPT])], now=0)
    assert sp.start_offset == 2
    assert [sp.slot(o).state for o in (2, 3, 4)] == [RecordState.AVAILABLE, RecordState.ARCHIVED,
                                                      RecordState.ACKNOWLEDGED]
    assert sp.next_fetch_offset() == 2


def test_a_closed_members_records_come_back_with_the_delivery_count_decremented():
    sp = share()
    sp.acquire("a", [(0, 2)], 10, now=0)
    sp.acquire("b", [(3, 4)], 10, now=0)
    assert sp.release_member("a")
    assert [sp.slot(o).delivery_count for o in range(5)] == [0, 0, 0, 1, 1]
    assert sp.acquire("c", [(0, 2)], 10, now=0) == [AcquiredRange(0, 2, 1)]


def test_in_flight_records_are_bounded_by_max_record_locks():
    sp = share(max_record_locks=4)
    assert sp.acquire("a", [(0, 2), (3, 5), (6, 8)], 100, now=0) == [AcquiredRange(0, 5, 1)]
    assert not sp.can_acquire()
    assert sp.acquire("a", [(6, 8)], 100, now=0) == []
    sp.acknowledge("a", [Ack(0, 2, [ACCEPT])], now=0)
    assert sp.can_acquire()
    assert sp.acquire("a", [(6, 8)], 100, now=0) == [AcquiredRange(6, 8, 1)]


def test_offsets_missing_from_the_log_are_archived():
    sp = share()
    assert sp.acquire("a", [(0, 1), (5, 6)], 100, now=0) == [AcquiredRange(0, 1, 1), AcquiredRange(5, 6, 1)]
    sp.acknowledge("a", [Ack(0, 1, [ACCEPT])], now=0)
    assert sp.start_offset == 5


def test_the_start_follows_the_log_start():
    sp = share()
    sp.acquire("a", [(0, 9)], 100, now=0)
    assert sp.move_start_to(4)
    assert (sp.start_offset, sp.end_offset) == (4, 10)
    assert sp.move_start_to(20) and (sp.start_offset, sp.end_offset) == (20, 20)


def test_durable_state_round_trip_redelivers_acquired_records_and_never_acknowledged_ones():
    sp = share(start=100)
    sp.acquire("a", [(100, 109)], 100, now=0)
    sp.acknowledge("a", [Ack(101, 102, [ACCEPT]), Ack(104, 104, [REJECT]), Ack(105, 105, [RELEASE])], now=0)
    batches = sp.state_batches()
    assert batches == [StateBatch(100, 100, 0, 1), StateBatch(101, 102, 2, 1), StateBatch(103, 103, 0, 1),
                       StateBatch(104, 104, 4, 1), StateBatch(105, 109, 0, 1)]
    restored = share()
    restored.restore(sp.start_offset, batches)
    assert (restored.start_offset, restored.end_offset) == (100, 110)
    got = restored.acquire("b", [(100, 109)], 100, now=0)
    assert got == [AcquiredRange(100, 100, 2), AcquiredRange(103, 103, 2), AcquiredRange(105, 109, 2)]


def test_share_state_records_round_trip():
    topic_id = uuid.uuid4()
    key = records.ShareStateKey(records.SNAPSHOT_TYPE, "group-é", topic_id, 7)
    assert records.decode_key(records.encode_key(key)) == key
    snapshot = records.ShareSnapshot(3, 1, 5, 42, 1000, 2000, [StateBatch(42, 50, 2, 1), StateBatch(51, 51, 4, 5)])
    assert records.decode_value(records.SNAPSHOT_TYPE, records.encode_snapshot(snapshot)) == snapshot
    update = records.ShareUpdate(3, 5, -1, [StateBatch(52, 60, 0, 2)])
    assert records.decode_value(records.UPDATE_TYPE, records.encode_update(update)) == update
    with pytest.raises(records.DecodeError):
        records.decode_value(records.SNAPSHOT_TYPE, b"\x00\x00\x01")


def test_a_restored_state_is_cut_at_the_in_flight_bound():
    sp = share(max_record_locks=100)
    sp.restore(0, [StateBatch(0, 10**15, 2, 1)])  # a damaged or hostile state: not a quadrillion slots
    assert (sp.start_offset, sp.in_flight()) == (4 * 100 + 100_000, 0)


def test_delivery_complete_count_counts_terminal_records_at_or_past_the_start():
    batches = [StateBatch(0, 9, 2, 1),    # acknowledged, 5-9 at or past the start
               StateBatch(10, 11, 0, 2),  # available
               StateBatch(12, 12, 4, 5),  # archived
               StateBatch(13, 14, 2, 1)]
    assert delivery_complete_count(5, batches) == 5 + 1 + 2
    assert delivery_complete_count(15, batches) == 0
    assert delivery_complete_count(0, []) == 0
