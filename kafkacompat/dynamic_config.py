"""Dynamic broker configs applied while the broker runs (AlterConfigs / IncrementalAlterConfigs on
BROKER resources, stored by controller/broker_config_store.py).

DynamicBrokerConfigs loads this broker's two entities (its id and the cluster default) at start-up
and again whenever either node changes (a watch, so a change made through another broker of a
cluster arrives too), and applies them: BrokerConfig takes the values (the attributes every
component reads: max.connections, message.max.bytes, ...) and the logs of topics without their
own override take the new log.* defaults.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from kafkacompat.controller.store import StoreError

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.broker_config_store import BrokerConfigStore
    from kafkacompat.replication.manager import ReplicaManager
    from kafkacompat.services import MetadataView

log = logging.getLogger("kafkacompat.configs")


def apply_broker_configs(config: "BrokerConfig", replicas: "ReplicaManager", metadata: "MetadataView",
                         per_broker: dict[str, str], cluster_default: dict[str, str]) -> None:
    changed = config.apply_dynamic(per_broker, cluster_default)
    if not changed:
        return
    log.info("Dynamic broker configs applied: %s", ", ".join(changed))
    for topic in metadata.topics():
        replicas.refresh_topic_config(topic)


class DynamicBrokerConfigs:
    def __init__(self, config: "BrokerConfig", store: "BrokerConfigStore", replicas: "ReplicaManager",
                 metadata: "MetadataView") -> None:
        self.config = config
        self.store = store
        self.replicas = replicas
        self.metadata = metadata
        self._changed = trio.Event()

    def _nudge(self) -> None:
        self._changed.set()

    async def reload(self) -> None:
        node_id = str(self.metadata.node_id)
        per_broker, cluster_default = await self.store.read(node_id), await self.store.read("")
        apply_broker_configs(self.config, self.replicas, self.metadata, per_broker, cluster_default)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self.store.watch(self.metadata.node_id, self._nudge)
        await self._reload_logging_failures()
        task_status.started()
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            await self._reload_logging_failures()

    async def _reload_logging_failures(self) -> None:
        try:
            await self.reload()
        except StoreError as exc:  # the watch fires again once the store is back (session events)
            log.warning("Dynamic broker configs not reloaded: the metadata store is unavailable (%s)", exc)
