"""flush.messages on the Produce path of an in-process broker (real data dir and files): Kafka
fsyncs inside the append that reaches flush.messages, so the producer's acknowledgement comes only
once the batch is on disk, here once the log manager's worker thread has fsynced it."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from tests.support import TOPIC, produce


async def _acknowledged_and_recovery_points(tmp_path: Path, acks: int, config: dict) -> list[tuple[int, int, int]]:
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", **config))
    broker.open()
    try:
        broker.admin.create_topic_now(TOPIC, 1, 1, {})
        log = broker.partition(TOPIC, 0).log
        seen = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.logs.run_flusher, broker.config.log_flush_scheduler_interval_ms)
            for round_ in range(5):
                error, base = await produce(broker, [b"v%d" % round_, b"w%d" % round_], acks=acks)
                seen.append((error, base, log.recovery_point))
            nursery.cancel_scope.cancel()
        return seen
    finally:
        broker.close()


@pytest.mark.parametrize("acks", [1, -1])
def test_an_append_reaching_flush_messages_is_acknowledged_once_fsynced(tmp_path: Path, acks: int):
    seen = trio.run(_acknowledged_and_recovery_points, tmp_path, acks, {"log_flush_interval_messages": 1})
    assert seen == [(0, 2 * i, 2 * i + 2) for i in range(5)]


def test_without_flush_messages_nothing_waits_for_the_disk(tmp_path: Path):
    seen = trio.run(_acknowledged_and_recovery_points, tmp_path, 1, {})
    assert seen == [(0, 2 * i, 0) for i in range(5)]
