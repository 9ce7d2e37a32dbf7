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
