"""``GET /metrics``: Prometheus text format (0.0.4), with the names the JMX exporter gives Kafka's
MBeans (kafka_server_brokertopicmetrics_messagesin_total, ...) so existing dashboards fit, the
request-duration histogram, and the usual process_* metrics. Counters come from
kafkacompat/metrics.py; gauges are read from the services when scraped."""

from __future__ import annotations

import os
import re
import resource
import time
from typing import TYPE_CHECKING, Iterable

import trio

from kafkacompat.http import views
from kafkacompat.http.routing import HttpContext, route
from kafkacompat.http.server import Request, Response
from kafkacompat.metrics import DURATION_BUCKETS
from kafkacompat.wire.frame import api_name

if TYPE_CHECKING:
    from kafkacompat.handlers.registry import Services

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def get_metrics(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    return Response(200, render(app.services).encode(), CONTENT_TYPE)


def render(services: "Services") -> str:
    lines: list[str] = []
    _topic_counters(lines, services)
    _request_metrics(lines, services)
    _log_gauges(lines, services)
    _replication_throttles(lines, services)
    _fetch_sessions(lines, services)
    _group_lag(lines, services)
    _client_telemetry(lines, services)
    _process_metrics(lines)
    return "\n".join(lines) + "\n"


def _family(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def _labels(**labels: object) -> str:
    def escape(value: object) -> str:
        return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{key}="{escape(value)}"' for key, value in labels.items()) + "}"


def _topic_counters(lines: list[str], services: "Services") -> None:
    topics = sorted(services.metrics.topics.items())
    for name, attribute, help_text in (
        ("kafka_server_brokertopicmetrics_messagesin_total", "messages_in", "Messages appended by producers"),
        ("kafka_server_brokertopicmetrics_bytesin_total", "bytes_in", "Record bytes appended by producers"),
        ("kafka_server_brokertopicmetrics_bytesout_total", "bytes_out", "Record bytes sent to consumers"),
    ):
        _family(lines, name, "counter", help_text)
        lines.append(f"{name} {sum(getattr(stats, attribute) for _, stats in topics)}")
        for topic, stats in topics:
            lines.append(f"{name}{_labels(topic=topic)} {getattr(stats, attribute)}")


def _request_metrics(lines: list[str], services: "Services") -> None:
    requests = sorted((api_name(key), stats) for key, stats in services.metrics.requests.items())
    _family(lines, "kafka_network_requestmetrics_requests_total", "counter", "Requests handled, by API")
    for name, stats in requests:
        lines.append(f"kafka_network_requestmetrics_requests_total{_labels(request=name)} {stats.count}")
    _family(lines, "kafkacompat_request_duration_seconds", "histogram",
            "Time from a request's decode to its response, by API")
    for name, stats in requests:
        cumulative = 0
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), stats.buckets):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f"kafkacompat_request_duration_seconds_bucket{_labels(request=name, le=le)} {cumulative}")
        lines.append(f"kafkacompat_request_duration_seconds_sum{_labels(request=name)} {stats.seconds!r}")
        lines.append(f"kafkacompat_request_duration_seconds_count{_labels(request=name)} {stats.count}")


def _log_gauges(lines: list[str], services: "Services") -> None:
    _family(lines, "kafka_log_log_size", "gauge", "Bytes of a partition's log on this broker")
    partitions = 0
    for topic in sorted(services.metadata.topics(), key=lambda t: t.name):
        for index in range(topic.partitions):
            partition = services.replicas.partition(topic.name, index)
            if partition is not None:
                partitions += 1
                lines.append(f"kafka_log_log_size{_labels(topic=topic.name, partition=index)} "
                             f"{partition.log.size_bytes}")
    _family(lines, "kafka_server_replicamanager_partitioncount", "gauge", "Partitions hosted on this broker")
    lines.append(f"kafka_server_replicamanager_partitioncount {partitions}")
    _family(lines, "kafka_server_replicamanager_underreplicatedpartitions", "gauge",
            "Partitions led by this broker whose ISR is smaller than their replicas")
    lines.append(f"kafka_server_replicamanager_underreplicatedpartitions {views.under_replicated(services)}")
    _family(lines, "kafka_controller_kafkacontroller_activecontrollercount", "gauge", "1 on the controller")
    metadata = services.metadata
    lines.append(f"kafka_controller_kafkacontroller_activecontrollercount "
                 f"{int(metadata.controller_id == metadata.node_id)}")


def _replication_throttles(lines: list[str], services: "Services") -> None:
    """Kafka's LeaderReplication / FollowerReplication byte-rate: the bytes per second of the
    throttled replicas (replication throttles, quotas.py), over the quota windows."""
    now = trio.current_time()
    for quota in (services.replicas.leader_quota, services.replicas.follower_quota):
        name = f"kafka_server_{quota.name.lower()}_byte_rate"
        _family(lines, name, "gauge", f"Bytes per second of throttled replicas ({quota.name})")
        lines.append(f"{name} {quota.measure(now)!r}")


def _fetch_sessions(lines: list[str], services: "Services") -> None:
    """Kafka's FetchSessionCache metrics (leader side), and this broker's fetch requests as a
    leader (by fetcher and session kind) and as a follower (by leader and kind)."""
    cache = services.fetch_sessions
    for name, kind, help_text, value in (
        ("kafka_server_fetchsessioncache_numincrementalfetchsessions", "gauge", "Fetch sessions open",
         len(cache.sessions)),
        ("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", "gauge",
         "Partitions held by the open fetch sessions", cache.cached_partitions()),
        ("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", "counter",
         "Fetch sessions evicted to make room for others", cache.evictions),
    ):
        _family(lines, name, kind, help_text)
        lines.append(f"{name} {value}")
    _family(lines, "kafkacompat_fetch_session_requests_total", "counter",
            "Fetch requests received, by fetcher (follower or consumer) and session kind "
            "(sessionless, full, incremental, error)")
    for (fetcher, kind), count in sorted(cache.requests.items()):
        lines.append(f"kafkacompat_fetch_session_requests_total{_labels(fetcher=fetcher, kind=kind)} {count}")
    _family(lines, "kafkacompat_replica_fetch_requests_total", "counter",
            "Fetch requests this broker's follower fetchers sent, by leader and kind (full, incremental)")
    for (leader, kind), count in sorted(services.replicas.fetchers.request_counts.items()):
        lines.append(f"kafkacompat_replica_fetch_requests_total{_labels(leader=leader, kind=kind)} {count}")


def _group_lag(lines: list[str], services: "Services") -> None:
    _family(lines, "kafka_consumergroup_lag", "gauge", "High watermark minus the group's committed offset")
    for group in sorted(services.groups.list_groups(), key=lambda g: g.group_id):
        for entry in views.group_offsets(services, group.group_id):
            if entry["lag"] is not None:
                lines.append(f"kafka_consumergroup_lag"
                             f"{_labels(group=group.group_id, topic=entry['topic'], partition=entry['partition'])}"
                             f" {entry['lag']}")


_LABEL_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")
CLIENT_LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version")


def _client_telemetry(lines: list[str], services: "Services") -> None:
    """KIP-714: each client instance's latest pushed metrics, the OTLP metric name as the
    ``metric`` label, the data point's attributes as further labels."""
    snapshots = services.telemetry.snapshots()
    _family(lines, "kafkacompat_client_telemetry_instances", "gauge",
            "Client instances whose pushed metrics (KIP-714) the broker holds")
    lines.append(f"kafkacompat_client_telemetry_instances {len(snapshots)}")
    _family(lines, "kafkacompat_client_telemetry_last_push_seconds", "gauge",
            "When the client instance last pushed its metrics (Unix time)")
    for client, snapshot in snapshots:
        client_labels = {key: client.attributes()[key] for key in CLIENT_LABELS}
        lines.append(f"kafkacompat_client_telemetry_last_push_seconds{_labels(**client_labels)} {snapshot.received!r}")
    _family(lines, "kafkacompat_client_telemetry", "gauge",
            "A metric a client pushed (KIP-714 PushTelemetry), as of its latest push")
    for client, snapshot in snapshots:
        client_labels = {key: client.attributes()[key] for key in CLIENT_LABELS}
        series: dict[str, float] = {}
        for point in snapshot.points:
            labels = {**client_labels, "metric": point.name}
            for key, value in point.attributes:
                labels.setdefault(_LABEL_UNSAFE.sub("_", key), value)
            series[_labels(**labels)] = point.value
        lines.extend(f"kafkacompat_client_telemetry{labels} {_sample(value)}" for labels, value in series.items())


def _sample(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _process_metrics(lines: list[str]) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    for name, kind, help_text, value in _process_values(usage):
        _family(lines, name, kind, help_text)
        lines.append(f"{name} {value!r}" if isinstance(value, float) else f"{name} {value}")


def _process_values(usage: resource.struct_rusage) -> Iterable[tuple[str, str, str, float | int]]:
    yield ("process_cpu_seconds_total", "counter", "User and system CPU time spent",
           round(usage.ru_utime + usage.ru_stime, 6))
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        with open("/proc/self/statm") as statm:
            virtual, resident = (int(field) * page for field in statm.read().split()[:2])
        yield ("process_virtual_memory_bytes", "gauge", "Virtual memory size", virtual)
        yield ("process_resident_memory_bytes", "gauge", "Resident memory size", resident)
    except OSError:
        yield ("process_resident_memory_bytes", "gauge", "Peak resident memory size", usage.ru_maxrss * 1024)
    try:
        yield ("process_open_fds", "gauge", "Open file descriptors", len(os.listdir("/proc/self/fd")))
    except OSError:
        pass
    yield ("process_max_fds", "gauge", "The open-files limit", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    yield ("process_start_time_seconds", "gauge", "Start time since the Unix epoch", round(_start_time(), 3))


def _start_time() -> float:
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            up = float(uptime.read().split()[0])
        return time.time() - up + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - time.monotonic()


ROUTES = [route("GET", "/metrics", get_metrics)]
