"""scripts/specs_from_kio.py: kio's per-version classes folded back into Kafka's JSON spec format,
with the 3.9 names kept where a field exists there (the generated attribute names stay)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(SCRIPTS))
KIO = load("specs_from_kio")
MESSAGES = KIO.kio_messages()


def fields_by_name(fields: list[dict]) -> dict[str, dict]:
    return {f["name"]: f for f in fields}


def test_a_message_keeps_the_reference_names_and_gains_kios_fields() -> None:
    reference = {"name": "MetadataResponse", "fields": [
        {"name": "ThrottleTimeMs", "type": "int32", "versions": "3+"},
        {"name": "Brokers", "type": "[]MetadataResponseBroker", "versions": "0+", "fields": [
            {"name": "NodeId", "type": "int32", "versions": "0+"}]},
        {"name": "Topics", "type": "[]OldTopicName", "versions": "0+", "fields": [
            {"name": "TopicId", "type": "uuid", "versions": "10+"}]},
    ]}
    notes: list[str] = []
    spec = KIO.spec_for(3, "response", MESSAGES[(3, "response")], reference, notes)
    assert (spec["name"], spec["validVersions"], spec["flexibleVersions"]) == ("MetadataResponse", "0-13", "9+")
    top = fields_by_name(spec["fields"])
    # kio calls it throttle_time (a timedelta): the 3.9 name comes back, Ms and all
    assert top["ThrottleTimeMs"]["versions"] == "3+" and top["ThrottleTimeMs"]["type"] == "int32"
    assert "ignorable" not in top["ThrottleTimeMs"]
    assert top["ErrorCode"] == {"name": "ErrorCode", "ignorable": True, "type": "int16", "versions": "13+"}
    assert top["ClusterId"]["nullableVersions"] == "2+" and top["ClusterId"]["default"] == "null"
    assert top["Topics"]["type"] == "[]OldTopicName"  # the 3.9 struct name stays
    topic = fields_by_name(top["Topics"]["fields"])
    assert "nullableVersions" not in topic["TopicId"]  # kio reads a zero uuid as None; Kafka never does
    assert topic["Name"]["nullableVersions"] == "12+"
    assert [f["name"] for f in spec["fields"]][:3] == ["ThrottleTimeMs", "Brokers", "ClusterId"]


def test_the_fields_of_a_struct_newer_than_the_message_run_from_0() -> None:
    """FetchResponse's SnapshotId exists from v12: its fields are 0+, as Kafka writes them, so the
    3.9 spec's versions (which own Fetch 0-3) merge with kio's into one range."""
    spec = KIO.spec_for(1, "response", MESSAGES[(1, "response")], None, [])
    partition = fields_by_name(fields_by_name(fields_by_name(spec["fields"])["Responses"]["fields"])
                               ["Partitions"]["fields"])
    snapshot = partition["SnapshotId"]
    assert (snapshot["versions"], snapshot["taggedVersions"], snapshot["tag"]) == ("12+", "12+", 2)
    assert {f["versions"] for f in snapshot["fields"]} == {"0+"}
    assert partition["LogStartOffset"]["default"] == "-1"


def test_kio_covers_the_apis_the_downloads_lack() -> None:
    for key in (8, 9, 22, 28, 66, 68, 69, 75, 88, 89, 91, 92):
        assert (key, "request") in MESSAGES and (key, "response") in MESSAGES
