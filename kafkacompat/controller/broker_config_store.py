"""Entity configs in the metadata store, in ZooKeeper mode's layout: dynamic broker configs at
``/config/brokers/<id>`` (one broker) and ``/config/brokers/<default>`` (the cluster default),
each ``{"version": 1, "config": {key: value}}``, and a sequential change notification
``/config/changes/config_change_`` naming the entity (``{"version": 2, "entity_path": "brokers/<id>"}``),
as Kafka's AdminZkClient.changeConfigs writes them. Every broker watches its two nodes and applies
what changed without a restart (kafkacompat/config.py's BrokerConfig.apply_dynamic). Client
metrics subscriptions (KIP-714) live beside them, one node per subscription under
``/config/client-metrics/<name>`` (kafkacompat/telemetry.py reads them), and so do group configs
under ``/config/groups/<group>`` (kafkacompat/groups/group_configs.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable

from kafkacompat.controller.store import BadVersionError, NodeExistsError, NoNodeError, encode_json

if TYPE_CHECKING:
    from kafkacompat.controller.store import MetadataStore

BROKERS_PATH = "/config/brokers"
CLIENT_METRICS_PATH = "/config/client-metrics"
CHANGES_DIR = "/config/changes"
CHANGES_PATH = f"{CHANGES_DIR}/config_change_"
DEFAULT_ENTITY = "<default>"
KEPT_NOTIFICATIONS = 100  # Kafka purges notifications after 15 minutes; here the newest are kept


def entity_name(resource_name: str) -> str:
    """A BROKER resource name ("" is the cluster default) as its node under /config/brokers."""
    return resource_name or DEFAULT_ENTITY


def _config_of(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        config = json.loads(data).get("config") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(key): str(value) for key, value in config.items()}


class EntityConfigStore:
    """One entity type's configs (``/config/<entity type>/<entity>``), changed by compare-and-set."""

    ENTITY_TYPE = "brokers"
    DELETE_WHEN_EMPTY = False  # an entity whose every key is deleted: its node is removed

    def __init__(self, store: "MetadataStore") -> None:
        self.store = store

    @property
    def root(self) -> str:
        return f"/config/{self.ENTITY_TYPE}"

    def entity(self, resource_name: str) -> str:
        return resource_name

    async def read(self, resource_name: str) -> dict[str, str]:
        found = await self.store.get_or_none(f"{self.root}/{self.entity(resource_name)}")
        return _config_of(found[0] if found else None)

    async def change(self, resource_name: str, edit: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the entity's config with ``edit(current)`` by compare-and-set (edit again when
        another writer came first), then post the change notification. Returns the new config."""
        entity = self.entity(resource_name)
        path = f"{self.root}/{entity}"
        while True:
            found = await self.store.get_or_none(path)
            current = _config_of(found[0] if found else None)
            updated = edit(dict(current))
            if updated == current:
                return current
            data = encode_json({"version": 1, "config": updated})
            try:
                if found is None:
                    await self.store.create(path, data, makepath=True)
                elif not updated and self.DELETE_WHEN_EMPTY:
                    await self.store.delete(path, found[1])
                else:
                    await self.store.set(path, data, found[1])
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            await self._notify(entity)
            return updated

    async def _notify(self, entity: str) -> None:
        notification = encode_json({"version": 2, "entity_path": f"{self.ENTITY_TYPE}/{entity}"})
        await self.store.create(CHANGES_PATH, notification, sequential=True, makepath=True)
        notifications = [name for name in await self.store.children_or_empty(CHANGES_DIR)
                         if name.startswith("config_change_")]
        for name in sorted(notifications)[:-KEPT_NOTIFICATIONS]:
            try:
                await self.store.delete(f"{CHANGES_DIR}/{name}")
            except NoNodeError:
                pass  # another broker purged it



class BrokerConfigStore(EntityConfigStore):
    ENTITY_TYPE = "brokers"

    def entity(self, resource_name: str) -> str:
        return entity_name(resource_name)

    async def watch(self, node_id: int, callback: Callable[[], None]) -> None:
        for entity in (str(node_id), DEFAULT_ENTITY):
            await self.store.watch(f"{BROKERS_PATH}/{entity}", callback)


class NamedEntityConfigStore(EntityConfigStore):
    """Entities named by clients, one node each; an entity whose configs are all deleted is gone."""

    DELETE_WHEN_EMPTY = True

    async def read_all(self) -> dict[str, dict[str, str]]:
        names = await self.store.children_or_empty(self.root)
        nodes = await self.store.get_many([f"{self.root}/{name}" for name in names])
        found = {name: _config_of(node[0] if node else None)
                 for name in names for node in [nodes.get(f"{self.root}/{name}")]}
        return {name: config for name, config in sorted(found.items()) if config}

    async def watch(self, callback: Callable[[], None]) -> None:
        """``callback()`` when an entity is created or deleted, or any entity's change
        notification is posted (an entity changed through any broker of the cluster)."""
        for path in (self.root, CHANGES_DIR):
            await self.store.ensure_path(path)
            await self.store.watch(path, callback, children=True)


class ClientMetricsConfigStore(NamedEntityConfigStore):
    """KIP-714 client metrics subscriptions."""

    ENTITY_TYPE = "client-metrics"


class GroupConfigStore(NamedEntityConfigStore):
    """Kafka 4's group configs (GroupConfig), one node per group under ``/config/groups/<group>``."""

    ENTITY_TYPE = "groups"
