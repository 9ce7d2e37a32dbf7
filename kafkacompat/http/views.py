"""The broker as the console and the JSON API show it: plain dicts built from the services'
interfaces (MetadataView, the ReplicaManager's partitions, the GroupCoordinator's describe, list
and fetch-offsets operations), the same ones the Kafka handlers use. Partitions hosted on another
broker of the cluster show what the metadata knows (leader, replicas, ISR) without offsets."""

from __future__ import annotations

import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from kafkacompat import __version__
from kafkacompat.groups.storage import OFFSETS_TOPIC
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.handlers.registry import Services
    from kafkacompat.metrics import BrokerMetrics

MAX_MESSAGES_PAGE = 200
MESSAGE_READ_BYTES = 1 << 20
PREVIEW_BYTES = 1024


def overview(services: "Services") -> dict[str, Any]:
    metadata = services.metadata
    topics = metadata.topics()
    return {
        "cluster_id": metadata.cluster_id,
        "controller_id": metadata.controller_id,
        "node_id": metadata.node_id,
        "version": __version__,
        "uptime_seconds": round(time.time() - services.metrics.started, 1),
        "brokers": brokers(services),
        "topic_count": sum(1 for t in topics if not t.is_internal),
        "partition_count": sum(t.partitions for t in topics if not t.is_internal),
        "group_count": len(services.groups.list_groups()),
        "under_replicated_partitions": under_replicated(services),
    }


def brokers(services: "Services") -> list[dict[str, Any]]:
    metadata = services.metadata
    return [
        {"id": info.broker_id, "host": info.host, "port": info.port, "rack": info.rack,
         "controller": info.broker_id == metadata.controller_id, "this_broker": info.broker_id == metadata.node_id}
        for _, info in sorted(metadata.brokers().items())
    ]


def topics(services: "Services") -> list[dict[str, Any]]:
    return [_topic_summary(services, topic) for topic in sorted(services.metadata.topics(), key=lambda t: t.name)]


def _topic_summary(services: "Services", topic: "TopicInfo") -> dict[str, Any]:
    partitions = [partition_view(services, topic.name, index) for index in range(topic.partitions)]
    return {
        "name": topic.name, "topic_id": str(topic.topic_id), "internal": topic.is_internal,
        "partitions": topic.partitions, "replication_factor": topic.replication_factor,
        "messages": sum(max(p["high_watermark"] - p["log_start_offset"], 0) for p in partitions
                        if p["high_watermark"] is not None),
        "size_bytes": sum(p["size_bytes"] or 0 for p in partitions),
        "under_replicated": sum(1 for p in partitions if p["under_replicated"]),
    }


def topic_detail(services: "Services", name: str) -> dict[str, Any] | None:
    topic = services.metadata.topic(name)
    if topic is None:
        return None
    detail = _topic_summary(services, topic)
    detail["configs"] = dict(sorted(topic.configs.items()))
    detail["partition_details"] = [partition_view(services, name, index) for index in range(topic.partitions)]
    return detail


def partition_view(services: "Services", topic: str, index: int) -> dict[str, Any]:
    state = services.metadata.partition_state(topic, index)
    local = services.replicas.partition(topic, index)
    view: dict[str, Any] = {
        "partition": index,
        "leader": state.leader if state is not None else (local.leader_id if local is not None else -1),
        "replicas": list(state.replicas) if state is not None else [],
        "isr": list(state.isr) if state is not None else [],
        "log_start_offset": None, "high_watermark": None, "last_stable_offset": None,
        "log_end_offset": None, "size_bytes": None, "segments": None,
    }
    if local is not None:  # hosted here: the leader's figures, or this follower's (its HW may trail)
        log = local.log
        view.update(log_start_offset=local.log_start_offset, high_watermark=local.high_watermark,
                    last_stable_offset=local.last_stable_offset, log_end_offset=local.log_end_offset,
                    size_bytes=log.size_bytes, segments=log.segment_count)
        if state is None:
            view["replicas"], view["isr"] = list(local.replicas), list(local.isr)
    view["under_replicated"] = len(view["isr"]) < len(view["replicas"])
    return view


def under_replicated(services: "Services") -> int:
    """Partitions led here whose ISR is smaller than their replicas (Kafka's gauge is per broker)."""
    count = 0
    node_id = services.metadata.node_id
    for topic in services.metadata.topics():
        for index in range(topic.partitions):
            state = services.metadata.partition_state(topic.name, index)
            if state is not None and state.leader == node_id and len(state.isr) < len(state.replicas):
                count += 1
    return count


class RequestRates:
    """Requests per second per API over the last RATE_WINDOW_S, from snapshots of the counters
    taken when a page asks (nothing runs in the background, nothing touches the request path);
    until a snapshot is old enough, the average since the broker started."""

    RATE_WINDOW_S = 60.0
    MIN_SPAN_S = 2.0

    def __init__(self) -> None:
        self._snapshots: deque[tuple[float, dict[int, int]]] = deque()

    def rates(self, metrics: "BrokerMetrics") -> tuple[dict[int, float], float]:
        """(requests/s by api key, the seconds they are measured over)."""
        now = time.monotonic()
        counts = {key: stats.count for key, stats in metrics.requests.items()}
        while len(self._snapshots) > 1 and now - self._snapshots[1][0] >= self.RATE_WINDOW_S:
            self._snapshots.popleft()
        oldest = self._snapshots[0] if self._snapshots else None
        if not self._snapshots or now - self._snapshots[-1][0] >= self.MIN_SPAN_S:
            self._snapshots.append((now, counts))
        if oldest is None or now - oldest[0] < self.MIN_SPAN_S:
            span = max(time.time() - metrics.started, 1e-9)
            return {key: count / span for key, count in counts.items()}, span
        span = now - oldest[0]
        return {key: (count - oldest[1].get(key, 0)) / span for key, count in counts.items()}, span


# ---- groups ---------------------------------------------------------------------------------


def groups(services: "Services") -> list[dict[str, Any]]:
    result = []
    for group in sorted(services.groups.list_groups(), key=lambda g: g.group_id):
        offsets = group_offsets(services, group.group_id)
        result.append({
            "group_id": group.group_id, "state": group.state.value, "protocol_type": group.protocol_type or "",
            "protocol": group.protocol_name or "", "members": len(group.members),
            "generation": group.generation_id,
            "lag": sum(o["lag"] for o in offsets if o["lag"] is not None),
            "partitions": len(offsets),
        })
    return result


def group_detail(services: "Services", group_id: str) -> dict[str, Any] | None:
    error, group = services.groups.describe_group(group_id)
    if error == ErrorCode.NOT_COORDINATOR:
        return {"group_id": group_id, "coordinator_elsewhere": True, "coordinator": coordinator_of(services, group_id)}
    if error or group is None or group.state.value == "Dead":
        return None
    members = []
    for member in group.members.values():
        members.append({
            "member_id": member.member_id, "group_instance_id": member.group_instance_id,
            "client_id": member.client_id, "client_host": member.client_host,
            "assignment": consumer_assignment(member.assignment) if group.protocol_type == "consumer" else None,
        })
    members.sort(key=lambda m: (m["client_id"], m["member_id"]))
    return {
        "group_id": group.group_id, "state": group.state.value, "protocol_type": group.protocol_type or "",
        "protocol": group.protocol_name or "", "generation": group.generation_id, "leader": group.leader_id,
        "members": members, "offsets": group_offsets(services, group_id),
    }


def coordinator_of(services: "Services", group_id: str) -> int:
    """The broker leading the group's __consumer_offsets partition (-1: none now)."""
    state = services.metadata.partition_state(OFFSETS_TOPIC, services.groups.partition_for(group_id))
    return state.leader if state is not None else -1


def group_offsets(services: "Services", group_id: str) -> list[dict[str, Any]]:
    error, fetched = services.groups.fetch_offsets(group_id, None)
    if error:
        return []
    result = []
    for entry in fetched:
        if entry.offset < 0:
            continue
        partition = services.replicas.partition(entry.topic, entry.partition)
        end = partition.high_watermark if partition is not None else None
        result.append({
            "topic": entry.topic, "partition": entry.partition, "committed_offset": entry.offset,
            "log_end_offset": end, "lag": max(end - entry.offset, 0) if end is not None else None,
            "metadata": entry.metadata,
        })
    return result


def client_telemetry(services: "Services") -> list[dict[str, Any]]:
    """KIP-714: each client instance's latest push, with the client's identity."""
    return [{**metadata.attributes(), "received": snapshot.received, "resource": dict(snapshot.resource),
             "dropped_points": snapshot.dropped,
             "metrics": [{"name": p.name, "kind": p.kind, "value": p.value, "attributes": dict(p.attributes)}
                         for p in snapshot.points]}
            for metadata, snapshot in services.telemetry.snapshots()]


def consumer_assignment(data: bytes) -> dict[str, list[int]] | None:
    """A ConsumerProtocolAssignment's topic partitions (any version: they come first)."""
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        result: dict[str, list[int]] = {}
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + length]).decode()
            pos += length
            (partitions,) = struct.unpack_from(">i", data, pos)
            pos += 4
            result[topic] = list(struct.unpack_from(f">{max(partitions, 0)}i", data, pos))
            pos += 4 * max(partitions, 0)
        return result
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


# ---- messages -------------------------------------------------------------------------------


def messages(services: "Services", topic: str, partition: int, offset: int | None,
             limit: int) -> dict[str, Any] | None:
    """Up to ``limit`` records from ``offset`` (default: the last ``limit`` below the high
    watermark), with key, value preview, headers; None when the partition is not hosted here."""
    from kafkacompat.wire.records import iter_batches, iter_records

    local = services.replicas.partition(topic, partition)
    if local is None:
        return None
    limit = max(1, min(limit, MAX_MESSAGES_PAGE))
    start, end = local.log_start_offset, local.high_watermark
    if offset is None:
        offset = max(start, end - limit)
    offset = min(max(offset, start), end)
    records: list[dict[str, Any]] = []
    position = offset
    while len(records) < limit and position < end:
        result = local.read(position, MESSAGE_READ_BYTES, min_one_batch=True)
        try:
            data = result.read_all()
        finally:
            result.close()
        if not data:
            break
        before = position
        for header in _batches(iter_batches, data):
            if len(records) >= limit:
                break
            if not header.is_control:
                for record in _batch_records(iter_records, data, header):
                    if record.offset < position or record.offset >= end:
                        continue
                    if len(records) >= limit:
                        break
                    records.append(_record_view(record))
                    position = record.offset + 1
            if len(records) < limit:
                position = max(position, header.next_offset)
        if position == before:
            break
    return {"topic": topic, "partition": partition, "offset": offset, "log_start_offset": start,
            "high_watermark": end, "limit": limit, "next_offset": position if position < end else None,
            "previous_offset": max(start, offset - limit) if offset > start else None, "records": records}


def _batches(iter_batches, data: bytes) -> list:
    """The batches' headers up to the first that does not parse (the console shows what it can)."""
    headers = []
    try:
        for header in iter_batches(data):
            headers.append(header)
    except (ValueError, IndexError, struct.error):
        pass
    return headers


def _batch_records(iter_records, data: bytes, header) -> list:
    try:
        return list(iter_records(data, header))  # header.position is within data
    except Exception:  # a batch the console cannot open (legacy format, a codec it lacks): skip it
        return []


def _record_view(record) -> dict[str, Any]:
    value, headers = _value_and_headers(record.tail)
    return {
        "offset": record.offset, "timestamp": record.timestamp,
        "key": preview(record.key), "value": preview(value),
        "headers": [{"key": key, "value": preview(header_value)} for key, header_value in headers],
    }


def _value_and_headers(tail: bytes) -> tuple[bytes | None, list[tuple[str, bytes | None]]]:
    """A record's value and headers from its tail (key, value, headers as Kafka encodes them)."""
    from kafkacompat.wire.records import read_varint

    def field(position: int) -> tuple[bytes | None, int]:
        length, position = read_varint(tail, position)
        if length < 0:
            return None, position
        return bytes(tail[position:position + length]), position + length

    try:
        _, position = field(0)
        value, position = field(position)
        count, position = read_varint(tail, position)
        headers = []
        for _ in range(max(count, 0)):
            key, position = field(position)
            header_value, position = field(position)
            headers.append(((key or b"").decode("utf-8", "replace"), header_value))
        return value, headers
    except (IndexError, ValueError):
        return None, []


def preview(data: bytes | None) -> dict[str, Any] | None:
    """Text when the bytes are UTF-8 without control characters, else hex; cut at PREVIEW_BYTES."""
    if data is None:
        return None
    data = bytes(data)
    cut = data[:PREVIEW_BYTES]
    try:
        text = cut.decode("utf-8")
        if all(ch.isprintable() or ch in "\n\t\r" for ch in text):
            return {"text": text, "size": len(data), "truncated": len(data) > PREVIEW_BYTES}
    except UnicodeDecodeError:
        pass
    return {"hex": cut.hex(" "), "size": len(data), "truncated": len(data) > PREVIEW_BYTES}
