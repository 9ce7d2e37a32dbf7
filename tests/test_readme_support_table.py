"""README's "What is supported" table must list exactly what ApiVersions advertises."""

from __future__ import annotations

import re
from pathlib import Path

from kafkacompat.handlers.api_versions import served_versions

README = Path(__file__).resolve().parent.parent / "README.md"
ROW = re.compile(r"^\|\s*(?P<name>[A-Za-z]+)\s*\|\s*(?P<key>\d+)\s*\|\s*(?P<lo>\d+)(?:-(?P<hi>\d+))?\s*\|")


def readme_versions() -> dict[int, tuple[int, int]]:
    table: dict[int, tuple[int, int]] = {}
    for line in README.read_text().splitlines():
        match = ROW.match(line)
        if match:
            low = int(match["lo"])
            table[int(match["key"])] = (low, int(match["hi"] or low))
    return table


def test_readme_lists_every_served_api_with_its_versions():
    served = {key: (low, high) for key, low, high in served_versions()}
    assert readme_versions() == served


# Kafka 4.2's client-facing API keys: what clients, admin tools and the Java AdminClient send to
# a broker (the inter-broker and controller-only APIs are left out: LeaderAndIsr, UpdateMetadata,
# WriteTxnMarkers, the Raft and share-state RPCs, BrokerRegistration, ...).
KAFKA_4_2_CLIENT_APIS = frozenset({
    0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 32,
    33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 55, 57, 60, 61, 64, 65, 66, 68,
    69, 71, 72, 74, 75, 76, 77, 78, 79, 80, 81, 88, 89, 90, 91, 92,
})
NOT_SERVED = re.compile(r"client-facing APIs, not served yet.*?:(?P<list>.*?)\.\s+Served\s+below", re.S)


def test_readme_names_every_kafka_4_2_client_api_not_served():
    from kafkacompat.wire.messages import APIS

    served = {key for key, _, _ in served_versions()}
    match = NOT_SERVED.search(README.read_text())
    assert match, "README lost its list of the Kafka 4.2 client-facing APIs not served yet"
    named = {int(key): name for name, key in re.findall(r"([A-Za-z]+) \((\d+)\)", match["list"])}
    missing = KAFKA_4_2_CLIENT_APIS - served
    assert set(named) == missing, (
        f"README's list of APIs not served yet must name exactly {sorted(missing)}: "
        f"remove {sorted(set(named) - missing)}, add {sorted(missing - set(named))}")
    assert all(APIS[key][0] == name for key, name in named.items())


# Where the message specs the codecs are generated from go past what a Kafka 4.2 broker serves:
# InitProducerId v6 (KIP-939, two-phase commit) and DescribeLogDirs v5 (KIP-1066, cordoning) are
# not among Kafka 4.2's versions.
KAFKA_4_2_NEWEST_BELOW_SPECS = {22: 5, 35: 4}


def kafka_4_2_newest(key: int) -> int:
    from kafkacompat.wire.messages import APIS

    return KAFKA_4_2_NEWEST_BELOW_SPECS.get(key, APIS[key][3])


def test_readme_names_every_api_served_below_kafka_4_2s_newest_version():
    below = {key for key, _, high in served_versions() if key in KAFKA_4_2_CLIENT_APIS and high < kafka_4_2_newest(key)}
    text = README.read_text()
    listed = text[re.search(r"Served\s+below\s+Kafka\s+4\.2's\s+newest\s+version:", text).start():]
    listed = listed[:listed.index("\n\n")]
    named = {int(key): int(newest) for key, newest in re.findall(r"\((\d+), (?:4\.2: )?(\d+)\)", listed)}
    assert named == {key: kafka_4_2_newest(key) for key in below}
