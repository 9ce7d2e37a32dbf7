"""Failures stay where they belong: a metadata-store write that fails is the client's error (the
broker keeps serving), a controller wait that times out is REQUEST_TIMED_OUT, a failed
__consumer_offsets creation is logged, exhausted producer ids are UNKNOWN_SERVER_ERROR, and a
follower fetcher that hits a bug logs it and carries on. Real brokers over the embedded store
(served in this process); a store fault is injected only where ZooKeeper would fail."""

from __future__ import annotations

import dataclasses
import json
import logging
from types import SimpleNamespace

import trio

from kafkacompat.broker import Broker, serve
from kafkacompat.config import BrokerConfig
from kafkacompat.controller.producer_ids import BLOCK_FILE, MAX_PRODUCER_ID, encode_block
from kafkacompat.controller.store import EmbeddedStore, EmbeddedTree, StoreError
from kafkacompat.handlers.configs import TOPIC, handle_incremental_alter_configs
from kafkacompat.handlers.groups import handle_find_coordinator
from kafkacompat.handlers.producer_ids import handle_init_producer_id
from kafkacompat.handlers.registry import RequestContext
from kafkacompat.replication.fetcher import ReplicaFetcher
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.frame import RequestHeader

SET = 0


class TopicConfigWritesFail(EmbeddedStore):
    """The embedded store, with writes of topic configs failing while ``failing`` is set (as a
    ZooKeeper connection loss would)."""

    failing = False

    async def create(self, path, data=b"", *args, **kwargs):
        self._maybe_fail(path)
        return await super().create(path, data, *args, **kwargs)

    async def set(self, path, data, *args, **kwargs):
        self._maybe_fail(path)
        return await super().set(path, data, *args, **kwargs)

    def _maybe_fail(self, path: str) -> None:
        if self.failing and path.startswith("/config/topics/"):
            raise StoreError(f"connection lost writing {path}")


def _config(tmp_path, **options) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path / "data", host="127.0.0.1", port=0, log_cleaner_enable=False, **options)


def _ctx(broker: Broker, api_key: int, version: int) -> RequestContext:
    return RequestContext(broker.services(), RequestHeader(api_key, version, 1, "test", True), None)


def _set_config(name: str, value: str):
    return SimpleNamespace(validate_only=False, resources=[SimpleNamespace(
        resource_type=TOPIC, resource_name="t",
        configs=[SimpleNamespace(name=name, config_operation=SET, value=value)])])


async def _serving(nursery: trio.Nursery, broker: Broker) -> None:
    await nursery.start(serve, broker)


def test_alter_configs_answers_a_failed_store_write_and_the_broker_keeps_serving(tmp_path):
    async def main():
        store = TopicConfigWritesFail(EmbeddedTree(None))
        broker = Broker(_config(tmp_path), store=store)
        async with trio.open_nursery() as nursery:
            await _serving(nursery, broker)
            await broker.admin.create_topic("t", 1, 1, {})
            store.failing = True
            response = await handle_incremental_alter_configs(_set_config("retention.ms", "1000"),
                                                              _ctx(broker, 44, 1))
            assert response.responses[0].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
            assert broker.metadata.topic("t").configs == {}
            store.failing = False
            response = await handle_incremental_alter_configs(_set_config("retention.ms", "2000"),
                                                              _ctx(broker, 44, 1))
            assert response.responses[0].error_code == ErrorCode.NONE
            # Awaited end to end: the log has the new config when the client hears success.
            assert broker.partition("t", 0).log.config.retention_ms == 2000
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_controller_waits_that_time_out_are_request_timed_out(tmp_path):
    async def main():
        broker = Broker(_config(tmp_path), store=EmbeddedStore(EmbeddedTree(None)))
        async with trio.open_nursery() as nursery:
            await _serving(nursery, broker)
            # Broker 7 never registers: the partition never gets a state.
            try:
                await broker.admin.create_topic("orphan", 1, 1, {}, {0: [7]}, timeout_ms=300)
            except KafkaError as exc:
                assert exc.code == ErrorCode.REQUEST_TIMED_OUT
            else:
                raise AssertionError("CreateTopics reported success for a partition without a leader")
            assert broker.metadata.topic("orphan") is not None  # created, as Kafka leaves it
            topic = await broker.admin.create_topic("grows", 1, 1, {})
            try:
                await broker.admin.add_partitions(topic, 2, [[7]], timeout_ms=300)
            except KafkaError as exc:
                assert exc.code == ErrorCode.REQUEST_TIMED_OUT
            else:
                raise AssertionError("CreatePartitions reported success for a partition without a leader")
            nursery.cancel_scope.cancel()

    trio.run(main)


class _AdminThatFails:
    async def create_topic(self, *args, **kwargs):
        raise RuntimeError("the admin path has a bug")


def test_find_coordinator_logs_why_the_offsets_topic_could_not_be_created(tmp_path, caplog):
    broker = Broker(_config(tmp_path))
    broker.open()
    try:
        services = dataclasses.replace(broker.services(), admin=_AdminThatFails())
        ctx = RequestContext(services, RequestHeader(10, 3, 1, "test", True), None)
        with caplog.at_level(logging.ERROR):
            response = trio.run(handle_find_coordinator, SimpleNamespace(key="g", key_type=0), ctx)
        assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        failures = [r for r in caplog.records if "__consumer_offsets" in r.getMessage()]
        assert failures and failures[0].exc_info is not None
        assert "the admin path has a bug" in caplog.text
    finally:
        broker.close()


def test_exhausted_producer_ids_are_unknown_server_error(tmp_path):
    broker = Broker(_config(tmp_path))
    broker.open()
    try:
        (tmp_path / "data" / BLOCK_FILE).write_bytes(encode_block(0, MAX_PRODUCER_ID - 999, MAX_PRODUCER_ID))
        request = SimpleNamespace(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                  producer_epoch=-1)
        response = trio.run(handle_init_producer_id, request, _ctx(broker, 22, 4))
        assert response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert json.loads((tmp_path / "data" / BLOCK_FILE).read_bytes())["block_end"] == str(MAX_PRODUCER_ID)
    finally:
        broker.close()


class _BuggyHost:
    """A replica manager whose broker lookup fails with a bug the first time."""

    node_id = 1
    partitions: dict = {}

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.calls = 0

    def brokers(self):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in the broker lookup")
        return {}

    def topic(self, name):
        return None

    def checkpoint_log_start_offsets(self) -> None:
        pass


def test_a_fetcher_that_hits_a_bug_logs_it_and_retries(tmp_path, caplog):
    host = _BuggyHost(_config(tmp_path, replica_fetch_backoff_ms=10))
    fetcher = ReplicaFetcher(host, leader_id=0)
    fetcher.add(("t", 0))

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetcher.run)
            with trio.fail_after(10):
                while host.calls < 3:
                    await trio.sleep(0.01)
            fetcher.stop()

    with caplog.at_level(logging.INFO, logger="kafkacompat.replication.fetcher"):
        trio.run(main)
    bug = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert bug and bug[0].exc_info is not None and "('t', 0)" in bug[0].getMessage()
