"""The pytest plugin installed with kafkacompat (entry point group ``pytest11``): fixtures that run
real brokers for a project's own tests.

- ``kafka_broker``: one broker on a free loopback port with a temporary data dir, started once
  per session (ini option ``kafkacompat_scope`` changes that), with ``.bootstrap_servers``,
  ``.http_url``, ``.inject_fault(**fields)`` (the fields of ``POST /v1/faults``) and
  ``.clear_faults()``.
- ``kafka_cluster``: ``kafkacompat_cluster_brokers`` (default 3) replicating brokers sharing an
  embedded metadata store (as ``kafkacompat dev-cluster``), with ``.stop(broker_id)`` (a crash: no
  controlled shutdown) and ``.start(broker_id)``.

The brokers run in this process, in a thread of their own under their own Trio loop, so starting
one costs no interpreter start-up; they are the same code as ``kafkacompat serve``. Consumer
groups start without Kafka's 3 s group.initial.rebalance.delay.ms (set to 0 here). Importing
this module imports nothing of the broker: pytest loads it in every session of the environment.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

import pytest

FIXTURE_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("kafkacompat_scope", "scope of the kafka_broker and kafka_cluster fixtures (default: session)",
                  default="session")
    parser.addini("kafkacompat_cluster_brokers", "number of brokers of kafka_cluster (default: 3)", default="3")


def _scope(fixture_name: str, config: pytest.Config) -> str:
    return str(config.getini("kafkacompat_scope") or "session")


class _TrioThread:
    """A Trio loop in a daemon thread; ``run(async_fn)`` calls into it from the test's thread."""

    def __init__(self, name: str) -> None:
        import trio

        self._trio = trio
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.token: Any = None
        self.nursery: Any = None
        self._stop: Any = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _main(self) -> None:
        trio = self._trio

        async def loop() -> None:
            self.token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        try:
            trio.run(loop)
        except BaseException as exc:  # noqa: BLE001 - reported to the thread that waits
            self._failure = exc
            self._ready.set()

    def run(self, async_fn: Callable, *args: Any) -> Any:
        return self._trio.from_thread.run(async_fn, *args, trio_token=self.token)

    def close(self) -> None:
        if self._thread.is_alive():
            self._trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
            self._thread.join(30)


class KafkaBroker:
    """A running broker: ``bootstrap_servers`` for clients, ``http_url`` for its console and API."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker
        self.broker_id: int = broker.node_id
        self.port: int = broker.port
        self.data_dir: Path = broker.data_dir
        self.bootstrap_servers = f"127.0.0.1:{broker.port}"
        self.http_url = f"http://127.0.0.1:{broker.http_port}"

    def inject_fault(self, **fields: Any) -> dict[str, Any]:
        """POST /v1/faults with these fields (api, error, count, topic, partition, client_id,
        delay_ms, close); returns the fault (its ``id`` included). Raises ValueError if refused."""
        from kafkacompat.testing.http import add_fault

        return add_fault(self.http_url, **fields)

    def clear_faults(self) -> None:
        from kafkacompat.testing.http import clear_faults

        clear_faults(self.http_url)

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap_servers}, console {self.http_url})"


async def _started(broker: Any) -> Any:
    await broker.http_ready.wait()
    return broker


def start_broker(data_dir: Path, overrides: dict[str, str] | None = None) -> tuple[_TrioThread, KafkaBroker]:
    """One broker (as ``kafkacompat serve``) on free ports, running in a thread of its own."""
    from functools import partial

    from kafkacompat.broker import Broker, serve
    from kafkacompat.config import BrokerConfig
    from kafkacompat.http import HttpSettings

    config = BrokerConfig.load(None, {**FIXTURE_OVERRIDES, **(overrides or {})}, host="127.0.0.1", port=0,
                               data_dir=data_dir)
    broker = Broker(config, http=HttpSettings("127.0.0.1", 0))
    loop = _TrioThread("kafka_broker")

    async def launch() -> Any:
        await loop.nursery.start(partial(serve, broker))
        return await _started(broker)

    try:
        loop.run(launch)
    except BaseException:
        loop.close()
        raise
    return loop, KafkaBroker(broker)


class KafkaCluster:
    """N replicating brokers (ids 0..N-1). ``brokers`` holds the running ones by id."""

    def __init__(self, loop: _TrioThread, cluster: Any, count: int) -> None:
        self._loop = loop
        self._cluster = cluster
        self.size = count

    @property
    def brokers(self) -> dict[int, KafkaBroker]:
        """The running brokers by id (those stopped through the HTTP API too are left out)."""
        return {broker_id: KafkaBroker(broker) for broker_id, broker in sorted(self._cluster.brokers.items())}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(broker.bootstrap_servers for broker in self.brokers.values())

    @property
    def http_urls(self) -> dict[int, str]:
        return {broker_id: broker.http_url for broker_id, broker in self.brokers.items()}

    def stop(self, broker_id: int) -> None:
        """Crash the broker: no controlled shutdown; its session ends, the controller moves its leaders."""
        self._loop.run(self._cluster.crash_broker, broker_id)

    def start(self, broker_id: int) -> KafkaBroker:
        """Start a stopped broker again, on its ports and data dir."""
        async def restart() -> None:
            await self._cluster.restart_broker(broker_id)
            await _started(self._cluster.brokers[broker_id])

        self._loop.run(restart)
        return self.brokers[broker_id]

    def inject_fault(self, broker_id: int, **fields: Any) -> dict[str, Any]:
        return self.brokers[broker_id].inject_fault(**fields)


def start_cluster(data_dir: Path, count: int, overrides: dict[str, str] | None = None
                  ) -> tuple[_TrioThread, KafkaCluster]:
    from kafkacompat.dev_cluster import InProcessCluster
    from kafkacompat.http import HttpSettings

    settings = {**FIXTURE_OVERRIDES, "default.replication.factor": str(min(count, 3)),
                "offsets.topic.replication.factor": str(min(count, 3)), **(overrides or {})}
    loop = _TrioThread("kafka_cluster")

    async def launch() -> Any:
        cluster = InProcessCluster(loop.nursery, data_dir, host="127.0.0.1", overrides=settings)
        for broker_id in range(count):
            await cluster.start_broker(broker_id, 0, http=HttpSettings("127.0.0.1", 0))
        for broker in cluster.brokers.values():
            await _started(broker)
        return cluster

    try:
        cluster = loop.run(launch)
    except BaseException:
        loop.close()
        raise
    return loop, KafkaCluster(loop, cluster, count)


@pytest.fixture(scope=_scope)
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    """A kafkacompat broker on a free port with a temporary data dir (see the module docstring)."""
    loop, broker = start_broker(tmp_path_factory.mktemp("kafka_broker"))
    try:
        yield broker
    finally:
        loop.close()


@pytest.fixture(scope=_scope)
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """kafkacompat_cluster_brokers replicating brokers (see the module docstring)."""
    count = int(pytestconfig.getini("kafkacompat_cluster_brokers") or 3)
    loop, cluster = start_cluster(tmp_path_factory.mktemp("kafka_cluster"), count)
    try:
        yield cluster
    finally:
        loop.close()
