"""The broker's counters: requests and their durations per API, messages and bytes per topic.

Counting is per request and per partition batch, never per record: dispatch adds one request and
its duration (a bisect into the histogram's bounds), Produce adds the records and bytes of each
partition's append, Fetch the bytes of each partition it answers. ``BrokerMetrics.enabled`` is
False when the broker serves no HTTP (``--no-http``): then nothing is counted at all. The
Prometheus rendering is kafkacompat/http/metrics.py's.
"""

from __future__ import annotations

import time
from bisect import bisect_left

# Upper bounds (seconds) of the request-duration histogram: 0.5 ms to 10 s, the range between an
# ApiVersions and a long-polling Fetch or a JoinGroup waiting for its rebalance.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestStats:
    """One API's duration histogram (bucket counts are not cumulative) and their sum."""

    __slots__ = ("seconds", "buckets")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)  # the last one is +Inf

    @property
    def count(self) -> int:
        return sum(self.buckets)


class TopicStats:
    __slots__ = ("messages_in", "bytes_in", "bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0


class BrokerMetrics:
    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.started = time.time()
        self.requests: dict[int, RequestStats] = {}
        self.topics: dict[str, TopicStats] = {}

    def request_done(self, api_key: int, seconds: float) -> None:
        try:
            stats = self.requests[api_key]
        except KeyError:
            stats = self.requests[api_key] = RequestStats()
        stats.seconds += seconds
        stats.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def produced(self, topic: str, messages: int, size: int) -> None:
        if self.enabled:
            try:
                stats = self.topics[topic]
            except KeyError:
                stats = self._topic(topic)
            stats.messages_in += messages
            stats.bytes_in += size

    def fetched(self, topic: str, size: int) -> None:
        if self.enabled and size:
            self._topic(topic).bytes_out += size

    def forget_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
