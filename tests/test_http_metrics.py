"""The Prometheus text of /metrics (kafkacompat/http/metrics.py): label values from clients (group
ids may hold any character) are escaped so that prometheus_client's parser reads them back, and
the request histogram's buckets are cumulative."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kafkacompat.http.metrics import _labels, _request_metrics
from kafkacompat.metrics import DURATION_BUCKETS, BrokerMetrics


class _Services:
    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics


def test_label_values_round_trip_through_the_parser():
    group = 'odd "group"\\ with\nnewline'
    text = f"# TYPE kafka_consumergroup_lag gauge\nkafka_consumergroup_lag{_labels(group=group, topic='t', partition=0)} 3\n"
    [family] = text_string_to_metric_families(text)
    [sample] = family.samples
    assert sample.labels == {"group": group, "topic": "t", "partition": "0"} and sample.value == 3


def test_request_histogram_is_cumulative_and_counts_every_request():
    metrics = BrokerMetrics()
    for seconds in (0.0001, 0.0007, 0.003, 0.003, 42.0):
        metrics.request_done(0, seconds)
    lines: list[str] = []
    _request_metrics(lines, _Services(metrics))
    families = {f.name: f for f in text_string_to_metric_families("\n".join(lines) + "\n")}
    samples = families["kafkacompat_request_duration_seconds"].samples
    buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("_bucket")}
    assert buckets["0.0005"] == 1 and buckets["0.001"] == 2 and buckets["0.005"] == 4
    assert buckets[repr(DURATION_BUCKETS[-1])] == 4 and buckets["+Inf"] == 5
    counts = {s.name: s.value for s in samples if not s.name.endswith("_bucket")}
    assert counts["kafkacompat_request_duration_seconds_count"] == 5
    assert abs(counts["kafkacompat_request_duration_seconds_sum"] - 42.0068) < 1e-9
    [total] = families["kafka_network_requestmetrics_requests"].samples
    assert (total.labels, total.value) == ({"request": "Produce"}, 5)


def test_request_rates_cover_the_last_minute_once_there_is_one(monkeypatch):
    from kafkacompat.http import views

    clock = [1000.0]
    monkeypatch.setattr(views.time, "monotonic", lambda: clock[0])
    metrics = BrokerMetrics()
    metrics.started -= 100  # 100 s of uptime
    for _ in range(200):
        metrics.request_done(3, 0.001)
    rates = views.RequestRates()
    per_api, span = rates.rates(metrics)  # no earlier look: the average since the start
    assert 100 <= span < 110 and per_api[3] == 200 / span
    clock[0] += 10
    for _ in range(50):
        metrics.request_done(3, 0.001)
    per_api, span = rates.rates(metrics)
    assert (per_api[3], span) == (5.0, 10.0)  # 50 requests in the 10 s since the first look
    clock[0] += 120
    metrics.request_done(0, 0.001)
    rates.rates(metrics)  # a snapshot at t=130 s
    clock[0] += 60
    for _ in range(120):
        metrics.request_done(0, 0.001)
    per_api, span = rates.rates(metrics)
    assert span == 60.0 and per_api[0] == 2.0 and per_api[3] == 0.0  # only the last minute counts
