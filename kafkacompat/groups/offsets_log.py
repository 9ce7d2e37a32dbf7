"""__consumer_offsets as the group coordinator sees it (the OffsetsLog interface); the transaction
coordinator sees __transaction_state the same way (``name``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.wire.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.replication.manager import ReplicaManager
    from kafkacompat.services import TopicLookup


class OffsetsTopicLog:
    """``create`` makes the topic at once (a single node); None in a cluster, where the topic is
    created through the controller by FindCoordinator."""

    def __init__(self, topics: "TopicLookup", replicas: "ReplicaManager",
                 create: "Callable[[], TopicInfo] | None", name: str = OFFSETS_TOPIC) -> None:
        self.name = name
        self.topics = topics
        self.replicas = replicas
        self.create = create

    def topic(self) -> "TopicInfo | None":
        return self.topics.get(self.name)

    def partition(self, index: int):
        return self.replicas.partition(self.name, index)

    def ensure_topic(self) -> "TopicInfo":
        topic = self.topic()
        if topic is not None:
            return topic
        if self.create is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.name} does not exist yet")
        return self.create()

    def hosts(self, topic: str, index: int) -> bool:
        return self.replicas.partition(topic, index) is not None
