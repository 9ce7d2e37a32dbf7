"""share.auto.offset.reset's by_duration:<ISO 8601> values, read as java.time.Duration.parse
reads them (Kafka's ShareGroupAutoOffsetResetStrategy)."""

from __future__ import annotations

import pytest

from kafkacompat.groups.group_configs import iso_duration_ms, share_reset_lookback_ms


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3_600_000), ("pt15m", 900_000), ("P2D", 172_800_000), ("P1DT2H", 93_600_000),
    ("PT1H30M", 5_400_000), ("PT0.5S", 500), ("PT1,25S", 1250), ("PT-6H3M", -21_420_000),
    ("-PT1H", -3_600_000), ("PT-0.5S", -500), ("+PT10S", 10_000),
])
def test_iso_durations_parse_as_java_parses_them(text, ms):
    assert iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1X", "PT10S.", "P1H", "PT1.1234567891S", "P1W"])
def test_what_java_refuses_does_not_parse(text):
    assert iso_duration_ms(text) is None


@pytest.mark.parametrize("value, lookback", [
    ("latest", None), ("earliest", None), ("by_duration", None), ("by_duration:", None),
    ("by_duration:-PT1S", None), ("by_duration:PT0S", 0), ("by_duration:P1D", 86_400_000),
])
def test_only_a_non_negative_by_duration_looks_back(value, lookback):
    assert share_reset_lookback_ms(value) == lookback
