"""Topic metadata (name, id, partition count, per-topic config overrides) persisted in the data
dir, so a restart keeps every topic. This is the single-node store; the replicated cluster moves
the same records into the MetadataStore.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kafkacompat.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("kafkacompat.topics")

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
REGISTRY_FILE = "kafkacompat-topics.json"


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
    """All topics by name and id, written atomically to ``<data_dir>/kafkacompat-topics.json``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / REGISTRY_FILE
        self.by_name: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(
                f"cannot read the topic registry {self.path}: {exc}. Restore it from a backup, or move it "
                "away to start with no topics (the partition data stays on disk)."
            ) from exc
        for entry in data.get("topics", []):
            self._index(TopicInfo.from_json(entry))

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        payload = json.dumps({"version": 1, "topics": [t.to_json() for t in self.by_name.values()]}, indent=1)
        with open(tmp, "w") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def _index(self, topic: TopicInfo) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    def add(self, topic: TopicInfo) -> None:
        self._index(topic)
        self.save()

    def remove(self, name: str) -> TopicInfo | None:
        topic = self.by_name.pop(name, None)
        if topic is not None:
            self.by_id.pop(topic.topic_id, None)
            self.save()
        return topic

    def update(self, topic: TopicInfo) -> None:
        self._index(topic)
        self.save()

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.by_id.get(topic_id)

    def names(self) -> list[str]:
        return list(self.by_name)

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name differs only by '.' vs '_' (their metrics names collide)."""
        if not has_collision_chars(name):
            return None
        normalized = name.replace(".", "_")
        for existing in self.by_name:
            if existing != name and existing.replace(".", "_") == normalized:
                return existing
        return None
