"""The replicated state of one partition, as the controller writes it to the metadata store and
as brokers apply it (leader or follower). Shared by controller/ and replication/."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    replicas: tuple[int, ...]            # assignment, preferred leader first
    isr: tuple[int, ...]
    leader: int                          # -1: no leader (offline)
    leader_epoch: int                    # bumped on every leader change
    partition_epoch: int = 0             # bumped on every change (the store's compare-and-set version)
    offline_replicas: tuple[int, ...] = field(default_factory=tuple)

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # (listener name, advertised host, port) of every listener; host/port are the first one's
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str | None) -> tuple[str, int]:
        """The advertised (host, port) of ``listener``: what a client that came in on it is told."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port
