"""A real cluster for compat tests: ZooKeeper on a free loopback port and N kafkacompat broker
processes joined to it with --zookeeper (short ZooKeeper sessions, so a SIGKILLed broker is
noticed within about a second). Shared by the controller and the replication compat tests.

    with ZooKeeperCluster(tmp_path, brokers=3) as cluster:
        cluster.bootstrap          # "127.0.0.1:p0,127.0.0.1:p1,127.0.0.1:p2"
        cluster.brokers[1].kill()  # SIGKILL
        cluster.wait_for(lambda md: ...)  # poll confluent_kafka metadata until true

With ``network=Network()`` (netns.py) every process runs on a host of its own, in a network
namespace: ZooKeeper on ``cluster.zookeeper_host``, broker N on ``cluster.hosts[N]``, and the
test's thread (so its clients) on ``cluster.client_host`` while the cluster is open; then
``cluster.network.cut(a, b)`` partitions two of them.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kafkacompat.testing.process import BrokerProcess, distinct_free_ports
from kafkacompat.testing.zookeeper import ZooKeeperServer, zookeeper_available

if TYPE_CHECKING:
    from netns import Host, Network

SESSION_TIMEOUT_MS = 1500
ZOOKEEPER_PORT = 2181  # on a network of its own, each host has every port free
BROKER_PORT = 9092


class ZooKeeperCluster:
    def __init__(self, tmp_path: Path, brokers: int = 3, *, extra_args: list[str] | None = None,
                 racks: list[str] | None = None, network: "Network | None" = None, http: bool = False,
                 broker_extra_args: dict[int, list[str]] | None = None) -> None:
        if not zookeeper_available():
            pytest.fail("ZooKeeper is not installed: scripts/test.sh installs it (apt-get install zookeeper)")
        self.tmp_path = Path(tmp_path)
        self.count = brokers
        self.extra_args = list(extra_args or [])
        self.broker_extra_args = dict(broker_extra_args or {})  # broker id -> its own settings, after extra_args
        self.racks = racks
        self.brokers: dict[int, BrokerProcess] = {}
        self.network = network
        # with ``http``: broker N serves /metrics on http_ports[N] (the same port after a restart)
        self.http_ports: dict[int, int] = dict(enumerate(distinct_free_ports(brokers))) if http else {}
        self.hosts: dict[int, "Host"] = {}
        self._in_client_namespace = contextlib.ExitStack()
        self.zookeeper = ZooKeeperServer(self.tmp_path / "zookeeper")

    def __enter__(self) -> "ZooKeeperCluster":
        try:
            if self.network is not None:
                self._join_network(self.network)
            self.zookeeper.start()
            for broker_id in range(self.count):
                self.start_broker(broker_id)
        except BaseException:
            self.close()
            raise
        return self

    def _join_network(self, network: "Network") -> None:
        self._in_client_namespace.enter_context(network)
        self.zookeeper_host = network.add_host("zk")
        self.hosts = {b: network.add_host(f"b{b}") for b in range(self.count)}
        self.client_host = network.add_host("client")
        self._in_client_namespace.enter_context(network.entered(self.client_host))
        self.zookeeper = ZooKeeperServer(self.tmp_path / "zookeeper", host=self.zookeeper_host.address,
                                         port=ZOOKEEPER_PORT, command_prefix=self.zookeeper_host.command_prefix)

    def __exit__(self, *exc) -> None:
        self.close()

    def broker_args(self, broker_id: int) -> list[str]:
        args = ["--zookeeper", f"{self.zookeeper.connect}/kafkacompat",
                "--set", f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}", *self.extra_args,
                *self.broker_extra_args.get(broker_id, [])]
        if self.racks:
            args += ["--set", f"broker.rack={self.racks[broker_id]}"]
        if broker_id in self.http_ports:
            args += ["--http-port", str(self.http_ports[broker_id])]
        return args

    def http_base(self, broker_id: int) -> str:
        return f"http://127.0.0.1:{self.http_ports[broker_id]}"

    def start_broker(self, broker_id: int) -> BrokerProcess:
        proc = self.brokers.get(broker_id)
        if proc is None:
            placement = {}
            if broker_id in self.hosts:
                host = self.hosts[broker_id]
                placement = {"host": host.address, "port": BROKER_PORT, "command_prefix": host.command_prefix}
            proc = BrokerProcess(self.tmp_path / f"broker-{broker_id}", broker_id=broker_id,
                                 extra_args=self.broker_args(broker_id), **placement)
            self.brokers[broker_id] = proc
        return proc.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(p.bootstrap for _, p in sorted(self.brokers.items()) if p.proc and p.proc.poll() is None)

    def close(self) -> None:
        for proc in self.brokers.values():
            proc.kill()
        self.zookeeper.stop()
        self._in_client_namespace.close()  # back to the machine's namespace; the network goes

    def metadata(self, broker_id: int | None = None, topic: str | None = None):
        """ClusterMetadata from one broker (its own view), through confluent_kafka's AdminClient."""
        from confluent_kafka.admin import AdminClient

        bootstrap = self.brokers[broker_id].bootstrap if broker_id is not None else self.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
        return admin.list_topics(topic=topic, timeout=10)

    def wait_until_every_broker_sees(self, count: int, timeout: float = 30.0) -> None:
        """Every running broker's metadata lists ``count`` brokers and a controller."""
        for broker_id, proc in self.brokers.items():
            if proc.proc is not None and proc.proc.poll() is None:
                self.wait_for(lambda md: len(md.brokers) == count and md.controller_id >= 0,
                              broker_id=broker_id, timeout=timeout)

    def wait_for(self, predicate, *, broker_id: int | None = None, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                md = self.metadata(broker_id)
                if predicate(md):
                    return md
            except Exception as exc:  # noqa: BLE001 - brokers coming and going
                last_error = exc
            time.sleep(0.2)
        raise AssertionError(f"cluster condition not reached within {timeout}s (last error: {last_error})")
