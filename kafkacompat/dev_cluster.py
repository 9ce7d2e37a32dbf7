"""N brokers in one Trio process sharing one embedded metadata store (``kafkacompat
dev-cluster``, and in-process cluster tests). Each broker has its own data dir and listens on its
own port; replication between them goes over real sockets, as between processes.

The store's persistent nodes are saved in ``<data-dir>/metadata-store.json``, so a restarted
dev-cluster keeps its topics; each broker's data lives in ``<data-dir>/broker-<id>``.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import trio

from kafkacompat.broker import Broker, serve, shutdown_broker
from kafkacompat.config import BrokerConfig
from kafkacompat.controller.store import EmbeddedStore, EmbeddedTree

if TYPE_CHECKING:
    from kafkacompat.http import HttpSettings

log = logging.getLogger("kafkacompat.dev_cluster")

STORE_FILE = "metadata-store.json"


class _StartedFlag:
    """A task status that remembers whether the task has reported itself started."""

    def __init__(self, task_status) -> None:
        self._task_status = task_status
        self.started_yet = False

    def started(self, value=None) -> None:
        self.started_yet = True
        self._task_status.started(value)


class InProcessCluster:
    """Start, stop and kill brokers sharing one EmbeddedTree, each in its own cancel scope."""

    def __init__(self, nursery: trio.Nursery, data_dir: Path, *, host: str = "127.0.0.1",
                 overrides: Mapping[str, str] | None = None, persist: bool = True,
                 zookeeper_connect: str | None = None) -> None:
        self.nursery = nursery
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.overrides = dict(overrides or {})
        # With zookeeper_connect the brokers use ZooKeeper instead of the shared embedded store.
        self.zookeeper_connect = zookeeper_connect
        self.tree = EmbeddedTree(self.data_dir / STORE_FILE if persist else None)
        self.brokers: dict[int, Broker] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self._done: dict[int, trio.Event] = {}
        # how each broker was started, for a restart through the HTTP API (ClusterControl)
        self._started_as: dict[int, tuple[int, str | None, HttpSettings | None]] = {}

    def config(self, broker_id: int, port: int, rack: str | None = None) -> BrokerConfig:
        overrides = dict(self.overrides)
        if rack is not None:
            overrides["broker.rack"] = rack
        if self.zookeeper_connect:
            overrides["zookeeper.connect"] = self.zookeeper_connect
        return BrokerConfig.load(None, overrides, host=self.host, port=port,
                                 data_dir=self.data_dir / f"broker-{broker_id}", broker_id=broker_id)

    async def start_broker(self, broker_id: int, port: int = 0, rack: str | None = None,
                           store: EmbeddedStore | None = None, *, http: "HttpSettings | None" = None) -> Broker:
        """``store``: this broker's session over ``self.tree`` (a new one by default); ``http``:
        its console and API, which can stop and start the cluster's brokers."""
        if store is None and not self.zookeeper_connect:
            store = EmbeddedStore(self.tree)
        broker = Broker(self.config(broker_id, port, rack), store=store, http=http, control=self)
        scope = trio.CancelScope()
        done = trio.Event()

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            status = _StartedFlag(task_status)
            try:
                with scope:
                    await serve(broker, task_status=status)
            except Exception:
                if not status.started_yet:
                    raise  # a start-up failure is start_broker's
                # The brokers share a nursery: one broker's failure must not stop the others.
                log.exception("Broker %d stopped after an error; the other brokers keep running", broker_id)
            finally:
                done.set()

        await self.nursery.start(run)
        self._started_as[broker_id] = (broker.port, rack, http)
        self.brokers[broker_id] = broker
        self._scopes[broker_id] = scope
        self._done[broker_id] = done
        return broker

    async def stop_broker(self, broker_id: int, *, controlled: bool = True) -> None:
        """Stop a broker: with controlled shutdown (leaders moved first) or abruptly (its session
        ends at once, as a crashed broker's would after the session timeout)."""
        broker = self.brokers.pop(broker_id)
        scope = self._scopes.pop(broker_id)
        if controlled:
            await shutdown_broker(broker, scope)
        else:
            scope.cancel()
        await self._done.pop(broker_id).wait()

    async def stop_all(self) -> None:
        for broker_id in list(self.brokers):
            await self.stop_broker(broker_id, controlled=False)

    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{b.port}" for _, b in sorted(self.brokers.items()))

    def http_summary(self) -> str:
        urls = [f"http://{b.http.host}:{b.http_port}/" for _, b in sorted(self.brokers.items())
                if b.http is not None and b.http_port is not None]
        return " ".join(urls)

    # ---- ClusterControl (kafkacompat/http/app.py): the HTTP API's broker stop and start --------

    def broker_ids(self) -> list[int]:
        return sorted(self._started_as)

    def running(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    async def crash_broker(self, broker_id: int, *, wait: bool = True) -> None:
        """Stop a broker as a crash (no controlled shutdown). The stop runs in the cluster's
        nursery: a broker asked through its own HTTP API (``wait`` False, as that request's task
        stops with it) still stops."""
        done = self._done[broker_id]
        self.nursery.start_soon(partial(self.stop_broker, broker_id, controlled=False))
        if wait:
            await done.wait()

    async def restart_broker(self, broker_id: int) -> None:
        """Start a stopped broker again on its ports, answered once its HTTP side is up too."""
        port, rack, http = self._started_as[broker_id]
        broker = await self.start_broker(broker_id, port, rack, http=http)
        await broker.http_ready.wait()


async def run_dev_cluster(count: int, first_port: int, data_dir: Path, *, host: str = "127.0.0.1",
                          overrides: Mapping[str, str] | None = None,
                          task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with trio.open_nursery() as nursery:
        cluster = InProcessCluster(nursery, data_dir, host=host, overrides=overrides)
        for index in range(count):
            await cluster.start_broker(index, first_port + index if first_port else 0)
        task_status.started(cluster)
