"""scripts/generate_codecs.py merging the specs of two releases: each spec owns the versions in
its validVersions, fields are matched by name per struct level, renames keep one module."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "generate_codecs.py"


def generator():
    spec = importlib.util.spec_from_file_location("generate_codecs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GEN = generator()


def message(name: str, valid: str, fields: list[dict], kind: str = "request", key: int = 900) -> dict:
    return {"apiKey": key, "type": kind, "name": name, "validVersions": valid, "flexibleVersions": "1+",
            "fields": fields}


def field(name: str, versions: str, type_: str = "int32", **extra) -> dict:
    return {"name": name, "type": type_, "versions": versions, **extra}


def merged(old: dict, new: dict) -> tuple[dict, list[str]]:
    notes: list[str] = []
    return GEN.merge_specs([old, new], notes), notes


def by_name(fields: list[dict]) -> dict[str, dict]:
    return {f["name"]: f for f in fields}


def test_versions_the_newer_spec_dropped_are_kept_from_the_older_one() -> None:
    old = message("XRequest", "0-2", [field("A", "0+"), field("Gone", "0-1"), field("B", "0+")])
    new = message("XRequest", "1-3", [field("A", "0+"), field("B", "0+"), field("C", "3+")])
    spec, notes = merged(old, new)
    assert spec["validVersions"] == "0-3"
    assert [f["name"] for f in spec["fields"]] == ["A", "Gone", "B", "C"]
    fields = by_name(spec["fields"])
    # v1 belongs to the newer spec, which has no Gone: the older spec keeps it at v0 only
    assert (fields["A"]["versions"], fields["Gone"]["versions"], fields["C"]["versions"]) == ("0+", "0", "3+")
    assert any("v0 kept from the older spec" in note for note in notes)


def test_a_field_the_newer_spec_narrows_follows_it_in_its_versions() -> None:
    old = message("XRequest", "0", [field("Max", "0+"), field("Records", "0+", "records", nullableVersions="0+")])
    new = message("XRequest", "1-2", [field("Max", "0"), field("Records", "0+", "records", nullableVersions="0")])
    fields = by_name(merged(old, new)[0]["fields"])
    assert fields["Max"]["versions"] == "0"
    assert fields["Records"]["nullableVersions"] == "0"


def test_nested_struct_fields_and_common_structs_merge_by_name() -> None:
    old = message("XRequest", "0", [field("Topics", "0+", "[]Topic", fields=[field("P", "0+")])])
    new = message("XRequest", "0-1", [field("Topics", "0+", "[]Topic")])
    new["commonStructs"] = [{"name": "Topic", "versions": "0+", "fields": [field("P", "0+"), field("Q", "1+")]}]
    topics = by_name(merged(old, new)[0]["fields"])["Topics"]
    assert [(f["name"], f["versions"]) for f in topics["fields"]] == [("P", "0+"), ("Q", "1+")]


def test_a_name_reused_with_another_type_is_refused() -> None:
    old = message("XRequest", "0", [field("A", "0+", "int32")])
    new = message("XRequest", "0-1", [field("A", "0+", "int64")])
    with pytest.raises(SystemExit, match="different types"):
        merged(old, new)


def test_a_gap_between_the_specs_versions_is_refused() -> None:
    with pytest.raises(SystemExit, match="not contiguous"):
        merged(message("XRequest", "0", [field("A", "0+")]), message("XRequest", "2-3", [field("A", "0+")]))


def test_a_renamed_api_is_one_module_named_as_the_newest_spec(tmp_path: Path) -> None:
    older, newer, out = tmp_path / "old", tmp_path / "new", tmp_path / "out"
    older.mkdir()
    newer.mkdir()
    items = [field("Items", "0+", "[]Item", fields=[field("Name", "0+", "string")])]
    renamed = [field("ConfigItems", "0+", "[]ConfigItem", fields=[field("ResourceName", "0+", "string"),
                                                                      field("Kind", "1+", "int8")])]
    for directory, prefix, valid, fields in ((older, "ListThings", "0", items), (newer, "ListConfigs", "0-1", renamed)):
        for kind in ("request", "response"):
            body = message(f"{prefix}{kind.title()}", valid, fields if kind == "response" else [], kind)
            (directory / f"{prefix}{kind.title()}.json").write_text("// a comment line\n" + json.dumps(body))
    assert GEN.main(["--specs", str(older), "--specs", str(newer), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.py")) == [
        "__init__.py", "list_configs_request.py", "list_configs_response.py"]
    source = (out / "list_configs_response.py").read_text()
    assert "config_items" in source and "class Item:" not in source
    assert "900: ('ListConfigs', 'list_configs', 0, 1, 1)" in (out / "__init__.py").read_text()


def test_an_amendment_the_specs_already_cover_is_refused(monkeypatch) -> None:
    spec = message("ShareFetchRequest", "0-2", [field("ShareAcquireMode", "2+", "int8"),
                                                field("IsRenewAck", "2+", "bool")])
    with pytest.raises(SystemExit, match="already have IsRenewAck; drop its AMENDMENTS entry"):
        GEN.amend(spec)
    monkeypatch.setitem(GEN.AMENDMENTS, "MetadataRequest", {"validVersions": "0-13"})
    with pytest.raises(SystemExit, match="already reach 0-13; drop its AMENDMENTS entry"):
        GEN.amend(message("MetadataRequest", "0-13", []))
