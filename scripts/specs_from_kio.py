"""Rebuild Kafka 4.x JSON message specs from kio's generated schema (development time only).

kio (a dev dependency, in every venv) is generated from Kafka 4.x's message definitions: one frozen
dataclass per message, struct and version, with each field's wire type, tag and nullability. This
script folds those per-version classes back into one spec per message, in Kafka's JSON format, for
scripts/generate_codecs.py:

    python scripts/specs_from_kio.py [--reference DIR] [--out DIR]

``--reference`` is the 3.9-era spec copy (the generator's first default): a field that exists there
at the same struct level keeps its name, struct type name, default and ``ignorable``, so the
generated attribute and class names do not change; fields only kio has get a PascalCase name that
snake-cases back to kio's (plus ``Ms`` for kio's timedelta fields, whose ``_ms`` kio drops) and
are ``ignorable``. ``--out`` defaults to ../specs/kafka-4.2-kio beside the repo; the JSON files are
not committed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import pkgutil
import sys
import types
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate_codecs import DEFAULT_SPECS, KIO_SPECS, load_spec, merged_order, snake_case  # noqa: E402

import kio.schema  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

# kio's wire types that are Kafka's integers under another name
KAFKA_TYPES = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64", "datetime_i64": "int64"}
# kio drops the ``Ms`` of these fields' names (ThrottleTimeMs is throttle_time, LogAppendTimeMs
# log_append_time); Kafka names its durations ...Ms, its timestamps sometimes without
DURATIONS = {"timedelta_i32", "timedelta_i64"}
TIMES = DURATIONS | {"datetime_i64"}
NULLABLE_TYPES = {"string", "bytes", "records"}
# fields Kafka renamed after 3.9 (the generated attributes keep their 3.9 names): struct -> kio -> 3.9
RENAMED = {"PartitionData": {"replica_epoch": "CandidateEpoch", "replica_id": "CandidateId",
                             "replica_directory_id": "CandidateDirectoryId"}}


# ---- one version of one message, as kio has it ------------------------------------------------


@dataclasses.dataclass
class KioField:
    attr: str
    kafka_type: str  # Kafka's element type name: int32, string, or the struct's class name
    is_array: bool
    struct: type | None
    nullable: bool
    tag: int | None
    default: str | None  # Kafka's default text, None for the type's zero
    time: bool  # a duration or a timestamp: kio's name may lack Kafka's Ms
    duration: bool


def unwrap(annotation) -> tuple[object, bool]:
    """(the annotation without ``| None``, whether None was allowed)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def default_text(f: dataclasses.Field, kafka_type: str) -> str | None:
    if f.default is dataclasses.MISSING:
        return None
    value = f.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else None
    if isinstance(value, datetime.timedelta):
        value = round(value.total_seconds() * 1000)
    if isinstance(value, int):
        return str(int(value)) if int(value) != 0 else None
    if isinstance(value, float):
        return repr(value) if value else None
    if isinstance(value, str):
        return value or None
    return None  # a struct or an empty tuple: the type's zero


def kio_fields(cls: type) -> list[KioField]:
    out = []
    for f in dataclasses.fields(cls):
        inner, nullable = unwrap(f.type)
        is_array = typing.get_origin(inner) is tuple
        element = typing.get_args(inner)[0] if is_array else inner
        element, _ = unwrap(element)
        struct = element if dataclasses.is_dataclass(element) else None
        raw = f.metadata.get("kafka_type")
        if struct is None and raw is None:
            raise SystemExit(f"{cls.__name__}.{f.name}: no kafka_type and not a struct")
        kafka_type = struct.__name__ if struct is not None else KAFKA_TYPES.get(raw, raw)
        out.append(KioField(f.name, kafka_type, is_array, struct, nullable, f.metadata.get("tag"),
                            None if struct is not None else default_text(f, kafka_type), raw in TIMES,
                            raw in DURATIONS))
    return out


def kio_messages() -> dict[tuple[int, str], dict[int, type]]:
    """(api key, request/response) -> version -> kio's message class."""
    found: dict[tuple[int, str], dict[int, type]] = {}
    for api in pkgutil.iter_modules(kio.schema.__path__):
        if not api.ispkg:
            continue
        package = importlib.import_module(f"kio.schema.{api.name}")
        for version_module in pkgutil.iter_modules(package.__path__):
            if not version_module.name.startswith("v"):
                continue
            version = int(version_module.name[1:])
            for kind in ("request", "response"):
                try:
                    module = importlib.import_module(f"kio.schema.{api.name}.{version_module.name}.{kind}")
                except ImportError:
                    continue
                entity = getattr(EntityType, kind)
                for value in vars(module).values():
                    if isinstance(value, type) and getattr(value, "__type__", None) is entity \
                            and value.__module__ == module.__name__:
                        found.setdefault((int(value.__api_key__), kind), {})[version] = value
    return found


# ---- folding the versions into one spec ---------------------------------------------------------


def versions_text(present: list[int], top: int, what: str, scope: tuple[int, int] | None = None,
                  reference: str | None = None, floor: int = 0) -> str:
    """A contiguous version set as spec text. A set that starts (ends) where its ``scope`` (the
    versions of the enclosing struct, or the field's own) does starts where the 3.9 field's
    ``reference`` range does, else at ``floor`` (is open-ended), as Kafka's specs write it: the
    fields of a struct that exists from v12 on are ``0+``, and so one struct type used by two
    fields present in different versions has one field list."""
    low, high = min(present), max(present)
    if len(present) != high - low + 1:
        raise SystemExit(f"{what}: present at versions {present}, not one contiguous range")
    if scope is not None:
        if low == scope[0]:
            reference_low = int(reference.split("-")[0].rstrip("+")) if reference not in (None, "none") else floor
            low = reference_low if reference_low <= low else floor
        high = top if high == scope[1] else high
    return f"{low}+" if high == top else f"{low}" if low == high else f"{low}-{high}"


def pascal_case(attr: str, time: bool) -> str:
    name = "".join(part[:1].upper() + part[1:] for part in attr.rstrip("_").split("_"))
    return name + "Ms" if time else name


def reference_match(attr: str, time: bool, reference: list[dict], renamed: str | None = None) -> dict | None:
    """The 3.9 field kio's ``attr`` is (kio spells names as snake case and drops ``Ms`` from
    timedelta and timestamp fields)."""
    if renamed is not None:
        return next(f for f in reference if f["name"] == renamed)
    wanted = {attr.rstrip("_").replace("_", "")} | ({attr.replace("_", "") + "ms"} if time else set())
    matches = [f for f in reference if f["name"].lower() in wanted]
    return matches[0] if len(matches) == 1 else None


def reference_nested(field_json: dict | None, spec: dict | None) -> list[dict]:
    if field_json is None or spec is None:
        return []
    if "fields" in field_json:
        return field_json["fields"]
    element = field_json["type"].removeprefix("[]")
    return next((s["fields"] for s in spec.get("commonStructs", []) if s["name"] == element), [])


def fold(where: str, classes: dict[int, type], top: int, reference: list[dict], ref_spec: dict | None,
         notes: list[str]) -> list[dict]:
    """One struct level: ``classes`` maps each version where the struct exists to kio's class."""
    by_version = {v: {f.attr: f for f in kio_fields(cls)} for v, cls in classes.items()}
    renamed = RENAMED.get(classes[max(classes)].__name__, {})
    # the newest version's order, older-only fields after their predecessor
    order = merged_order([[{"name": attr} for attr in by_version[v]] for v in sorted(by_version)])
    # the 3.9 fields in the 3.9 order (the generated classes' field order stays), kio's others
    # after their predecessor
    newest = {attr: by_version[max(v for v in by_version if attr in by_version[v])][attr] for attr in order}
    matched = {attr: reference_match(attr, newest[attr].time, reference, renamed.get(attr)) for attr in order}
    ranks = {f["name"]: i for i, f in enumerate(reference)}
    known = sorted((attr for attr in order if matched[attr]), key=lambda attr: ranks[matched[attr]["name"]])
    for attr in order:
        if not matched[attr]:
            before = order[:order.index(attr)]
            known.insert(known.index(before[-1]) + 1 if before else 0, attr)
    order = known
    result = []
    for attr in order:
        present = sorted(v for v, fields in by_version.items() if attr in fields)
        field_ = newest[attr]
        what = f"{where}.{attr}"
        kinds = {(by_version[v][attr].kafka_type if by_version[v][attr].struct is None else "struct",
                  by_version[v][attr].is_array) for v in present}
        if len(kinds) > 1:
            raise SystemExit(f"{what}: kio gives it different types {sorted(kinds)}")
        ref = matched[attr]
        name = ref["name"] if ref else pascal_case(attr, field_.duration)
        if ref is None:
            if snake_case(name) != attr and snake_case(name).removesuffix("_ms") != attr:
                notes.append(f"{what}: new field {name} snake-cases to {snake_case(name)}")
            entry: dict = {"name": name, "ignorable": True}
            if field_.default is not None:
                entry["default"] = field_.default
        else:
            entry = {k: v for k, v in ref.items() if k in ("name", "default", "ignorable")}
        type_name = field_.kafka_type
        if field_.struct is not None and ref is not None:
            type_name = ref["type"].removeprefix("[]")  # keep the 3.9 struct's name
        entry["type"] = ("[]" if field_.is_array else "") + type_name
        entry["versions"] = versions_text(present, top, what, (min(classes), max(classes)),
                                          (ref or {}).get("versions"))
        floor = int(entry["versions"].split("-")[0].rstrip("+"))
        # kio reads a zero uuid and a -1 timestamp as None; only these can be null in Kafka
        can_be_null = field_.is_array or field_.struct is not None or field_.kafka_type in NULLABLE_TYPES
        nullable = [v for v in present if by_version[v][attr].nullable and can_be_null]
        if nullable:
            entry["nullableVersions"] = versions_text(nullable, top, what + " nullable", (present[0], present[-1]),
                                                      (ref or {}).get("nullableVersions"), floor)
        tagged = [v for v in present if by_version[v][attr].tag is not None]
        if tagged:
            tags = {by_version[v][attr].tag for v in tagged}
            if len(tags) > 1:
                raise SystemExit(f"{what}: kio gives it tags {sorted(tags)}")
            entry["taggedVersions"] = versions_text(tagged, top, what + " tagged", (present[0], present[-1]),
                                                    (ref or {}).get("taggedVersions"), floor)
            entry["tag"] = tags.pop()
        if field_.struct is not None:
            entry["fields"] = fold(what, {v: by_version[v][attr].struct for v in present}, top,
                                   reference_nested(ref, ref_spec), ref_spec, notes)
        result.append(entry)
    for version, fields in by_version.items():  # every version reads its fields in kio's order
        ours = [attr for attr in order if attr in fields]
        if ours != list(fields):
            raise SystemExit(f"{where} v{version}: folded order {ours} is not kio's {list(fields)}")
    return result


def spec_for(api_key: int, kind: str, classes: dict[int, type], reference: dict | None,
             notes: list[str]) -> dict:
    versions = sorted(classes)
    top = versions[-1]
    name = classes[top].__name__
    if versions != list(range(versions[0], top + 1)):
        raise SystemExit(f"{name}: kio's versions {versions} are not contiguous")
    flexible = [v for v in versions if classes[v].__flexible__]
    spec = {
        "apiKey": api_key, "type": kind, "name": name,
        "validVersions": f"{versions[0]}-{top}",
        "flexibleVersions": versions_text(flexible, top, f"{name} flexibleVersions") if flexible else "none",
        "fields": fold(name, classes, top, reference["fields"] if reference else [], reference, notes),
    }
    if reference is not None and reference["name"] != name:
        notes.append(f"api key {api_key} {kind}: {reference['name']} in 3.9, {name} in kio")
    return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_SPECS[0])
    parser.add_argument("--out", type=Path, default=KIO_SPECS)
    args = parser.parse_args(argv)
    references = {}
    for path in sorted(args.reference.glob("*.json")):
        spec = load_spec(path)
        if spec.get("type") in ("request", "response") and "apiKey" in spec:
            references[(spec["apiKey"], spec["type"])] = spec
    notes: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.json"):
        old.unlink()
    messages = kio_messages()
    for (api_key, kind), classes in sorted(messages.items()):
        spec = spec_for(api_key, kind, classes, references.get((api_key, kind)), notes)
        (args.out / f"{spec['name']}.json").write_text(json.dumps(spec, indent=2) + "\n")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {len(messages)} specs to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
