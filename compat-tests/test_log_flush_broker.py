"""flush.messages against a real broker process: with log.flush.interval.messages=1 every append
is fsynced and the recovery point follows the log end, so a SIGKILL'ed broker restarts without
rescanning what it had acknowledged."""

import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import ConfluentDriver, confluent_send, create_topic, numbered  # noqa: E402

from kafkacompat.log import read_checkpoint  # noqa: E402


def wait_for_checkpointed_recovery_point(broker, topic: str, offset: int) -> None:
    """Only a flush moves the recovery point; the housekeeping loop checkpoints it every 100 ms."""
    path = broker.data_dir / "recovery-point-offset-checkpoint"
    deadline = time.monotonic() + 30
    while read_checkpoint(path).get((topic, 0)) != offset:
        assert time.monotonic() < deadline, f"the recovery point of {topic}-0 never reached {offset}"
        time.sleep(0.05)


def test_flush_messages_1_makes_a_crash_restart_without_rescanning(broker_factory, topic_name):
    broker = broker_factory("--set", "log.flush.interval.messages=1",
                            "--set", "log.flush.offset.checkpoint.interval.ms=100")
    create_topic(broker.bootstrap, topic_name)
    assert confluent_send(broker.bootstrap, topic_name, numbered(30)) == list(range(30))
    wait_for_checkpointed_recovery_point(broker, topic_name, 30)

    broker.kill()
    already = len(broker.output())
    broker.start()
    started = broker.output()[already:]
    assert "after an unclean shutdown" in started
    assert f"Recovered {topic_name}-0" not in started, "the flushed, checkpointed batches were rescanned"
    assert ConfluentDriver(broker.bootstrap).watermarks(topic_name, 0) == (0, 30)
