"""Topic metadata (name, id, partition count, per-topic config overrides) persisted in the data
dir, so a restart keeps every topic.

The single node keeps them in an embedded metadata store (``controller/store.py``'s EmbeddedTree,
saved atomically to ``<data-dir>/metadata-store.json``) in the same layout as a cluster's
ZooKeeper: ``/brokers/topics/<t>`` (``{"version":3,"partitions":{"0":[<this broker>]},
"topic_id":...}``) and ``/config/topics/<t>`` (``{"version":1,"config":{...}}``). A data dir
written by an older kafkacompat (``kafkacompat-topics.json``) is migrated on the first start and
the old file renamed ``kafkacompat-topics.json.migrated``. In a cluster, ``MetadataCache``
(controller.py) replaces this registry and the store is the cluster's.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.topics")

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
REGISTRY_FILE = "kafkacompat-topics.json"   # before the embedded store (migrated)
STORE_FILE = "metadata-store.json"
TOPICS_PATH = "/brokers/topics"
CONFIG_TOPICS_PATH = "/config/topics"


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's form in /brokers/topics/<t>: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's Uuid string form (the same base64 as topic ids)."""
    return encode_topic_id(uuid.uuid4())


def decode_topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules (Topic.validate): raises KafkaError(INVALID_TOPIC_EXCEPTION)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name cannot be '{name}'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not _LEGAL_TOPIC_NAME.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name '{name}' is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, data: dict) -> "TopicInfo":
        return cls(
            name=data["name"],
            topic_id=uuid.UUID(data["topic_id"]),
            partitions=int(data["partitions"]),
            replication_factor=int(data.get("replication_factor", 1)),
            configs=dict(data.get("configs", {})),
        )


class TopicRegistry:
    """All topics by name and id, persisted in the embedded metadata store of the data dir."""

    def __init__(self, data_dir: Path, broker_id: int = 0) -> None:
        self.path = data_dir / REGISTRY_FILE
        self.store_path = data_dir / STORE_FILE
        self.broker_id = broker_id
        self.tree = None
        self.by_name: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}

    def load(self) -> None:
        from kafkacompat.controller.store import EmbeddedTree

        self.tree = EmbeddedTree(self.store_path)
        if not self.store_path.exists() and self.path.exists():
            self._migrate_legacy_registry()
            return
        for name in self._children(TOPICS_PATH):
            topic = self._read_topic(name)
            if topic is not None:
                self._index(topic)

    def _children(self, path: str) -> list[str]:
        from kafkacompat.controller.store import NoNodeError

        try:
            return self.tree.children(path)
        except NoNodeError:
            return []

    def _read_json(self, path: str) -> dict | None:
        from kafkacompat.controller.store import NoNodeError

        try:
            data, _ = self.tree.get(path)
        except NoNodeError:
            return None
        return json.loads(data) if data else {}

    def _read_topic(self, name: str) -> TopicInfo | None:
        document = self._read_json(f"{TOPICS_PATH}/{name}")
        if document is None:
            return None
        assignment = document.get("partitions", {})
        config = self._read_json(f"{CONFIG_TOPICS_PATH}/{name}") or {}
        return TopicInfo(
            name=name,
            topic_id=decode_topic_id(document["topic_id"]),
            partitions=len(assignment),
            replication_factor=int(document.get("replication_factor", len(assignment.get("0", [])) or 1)),
            configs=dict(config.get("config", {})),
        )

    def _migrate_legacy_registry(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(
                f"cannot read the topic registry {self.path}: {exc}. Restore it from a backup, or move it "
                "away to start with no topics (the partition data stays on disk)."
            ) from exc
        topics = [TopicInfo.from_json(entry) for entry in data.get("topics", [])]
        with self.tree.deferred_save():
            for topic in topics:
                self._index(topic)
                self._persist(topic)
        self.tree.save_now()
        os.replace(self.path, self.path.with_name(REGISTRY_FILE + ".migrated"))
        log.info("Migrated %d topic(s) from %s to the metadata store %s", len(topics), self.path, self.store_path)

    def _persist(self, topic: TopicInfo) -> None:
        """Write one topic's assignment and configs (every partition on this broker)."""
        from kafkacompat.controller.store import NodeExistsError

        if self.tree is None:
            self.load()
        assignment = {str(p): [self.broker_id] for p in range(topic.partitions)}
        documents = {
            f"{TOPICS_PATH}/{topic.name}": {
                "version": 3, "partitions": assignment, "topic_id": encode_topic_id(topic.topic_id),
                "adding_replicas": {}, "removing_replicas": {}, "replication_factor": topic.replication_factor,
            },
            f"{CONFIG_TOPICS_PATH}/{topic.name}": {"version": 1, "config": dict(topic.configs)},
        }
        with self.tree.deferred_save():
            for path, document in documents.items():
                data = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
                try:
                    self.tree.create(path, data, None, False, True)
                except NodeExistsError:
                    self.tree.set(path, data, -1)

    def _forget(self, name: str) -> None:
        from kafkacompat.controller.store import NoNodeError

        if self.tree is None:
            self.load()
        with self.tree.deferred_save():
            for path in (f"{TOPICS_PATH}/{name}", f"{CONFIG_TOPICS_PATH}/{name}"):
                try:
                    self.tree.delete(path, -1, True)
                except NoNodeError:
                    pass

    def save(self) -> None:
        """Write every topic (the store is normally written per change)."""
        if self.tree is None:
            self.load()
        with self.tree.deferred_save():
            for topic in self.by_name.values():
                self._persist(topic)

    def _index(self, topic: TopicInfo) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    # Each change is saved first and only then indexed: a store that cannot be written (a full
    # disk: StoreWriteError) leaves the registry as it was.

    def add(self, topic: TopicInfo) -> None:
        self._persist(topic)
        self._index(topic)

    def remove(self, name: str) -> TopicInfo | None:
        topic = self.by_name.get(name)
        if topic is not None:
            self._forget(name)
            del self.by_name[name]
            self.by_id.pop(topic.topic_id, None)
        return topic

    def update(self, topic: TopicInfo) -> None:
        self._persist(topic)
        self._index(topic)

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.by_id.get(topic_id)

    def names(self) -> list[str]:
        return list(self.by_name)

    def colliding_topic(self, name: str) -> str | None:
        return topic_collision(name, self.by_name)


def topic_collision(name: str, existing_names: Iterable[str]) -> str | None:
    """An existing topic whose name differs only by '.' vs '_' (their metrics names collide)."""
    if not has_collision_chars(name):
        return None
    normalized = name.replace(".", "_")
    for existing in existing_names:
        if existing != name and existing.replace(".", "_") == normalized:
            return existing
    return None
