"""Generate kafkacompat/wire/messages/ from Kafka's JSON message definitions.

Run at development time, after changing this script or moving to newer specs:

    python scripts/generate_codecs.py [--specs DIR]... [--out DIR]

``--specs`` may be given several times, oldest first; the messages of every directory are
merged (see merge_specs): each spec owns the versions in its ``validVersions`` (a newer one wins
where two overlap), so the versions a newer release removed (CreateTopics 0-1 in Kafka 4) stay
encodable from the older spec while the newer one adds its versions and fields. Messages are
matched by api key and kind, so a renamed API keeps one module, named as the newest spec names it
(ListClientMetricsResources -> ListConfigResources). The default, oldest first: the 3.9-era
reference copy (../shared/kafka-reference/message, relative to the repo); the Kafka 4.x specs
rebuilt from kio's schema by scripts/specs_from_kio.py into ../specs/kafka-4.2-kio (run it first:
the generator refuses to run without them); the 4.2-era specs in ../specs/kafka-4.2
(clients/src/main/resources/common/message/*.json as the stored apache/kafka index holds them,
downloaded by hand, only where the index is 4.2-era: share groups and ListConfigResources), which
are authoritative where they exist. ``--out`` defaults to kafkacompat/wire/messages. The output is committed; the JSON files are not. Every API
gets one module holding its request and response: a ``dataclass(slots=True)`` per message and struct
(attribute names are the snake_case of the spec's field names, nested struct classes are class
attributes of their parent, as kafka-python exposed them) and, per version, a straight-line
encoder and decoder (versions whose layout is identical share one function). The package's
``__init__`` is the index: api key -> name, module, valid versions and first flexible version.

Semantics follow Kafka's generated readers and writers: compact strings/arrays/bytes and tagged
fields in flexible versions (a tagged field is written when it differs from its default; unknown
tags are skipped on read), null only where ``nullableVersions`` allow it ("non-nullable field X
was serialized as null" is a malformed request), fields absent at a version decode to their
default, and writing a non-default value into a field the version lacks raises unless the field
is ``ignorable``. UUIDs decode to uuid.UUID (the zero UUID when unset; None encodes as zero).

AMENDMENTS below adds versions the broker serves that are newer than every spec given (applied
after merging; an amendment the specs already cover is an error, so it is removed, not kept).
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# ../shared/kafka-reference/message beside the repo (for a worktree nested deeper, the nearest one up)


def _nearest_up(*parts: str) -> Path | None:
    """The directory ``parts`` beside the repo (for a worktree nested deeper, the nearest one up)."""
    return next((parent.joinpath(*parts) for parent in REPO.parents if parent.joinpath(*parts).is_dir()), None)


# ../specs beside the repo: the 4.2-era specs rebuilt from kio (scripts/specs_from_kio.py writes
# them) and the few downloaded ones, which are authoritative where they exist
SPECS_4_2 = (_nearest_up("specs", "kafka-4.2") or REPO.parent / "specs" / "kafka-4.2").parent
KIO_SPECS = SPECS_4_2 / "kafka-4.2-kio"
# oldest first: the 3.9-era reference copy, then the 4.2-era specs when present
DEFAULT_SPECS = [path for path in (
    _nearest_up("shared", "kafka-reference", "message") or REPO.parent / "shared" / "kafka-reference" / "message",
    KIO_SPECS,
    SPECS_4_2 / "kafka-4.2",
) if path.is_dir()]
DEFAULT_OUT = REPO / "kafkacompat" / "wire" / "messages"
INFINITY = 32767

# What the specs given lack: ShareFetchRequest v2's IsRenewAck (KIP-1222) came after the stored
# 4.2-era spec (commit 08c855f, which has ShareAcquireMode only), which owns ShareFetch's versions.
# "append" adds fields at the end of a struct, "insert" after the named field.
AMENDMENTS: dict[str, dict] = {
    "ShareFetchRequest": {"insert": {(): [("ShareAcquireMode", {
        "name": "IsRenewAck", "type": "bool", "versions": "2+", "default": "false"})]}},
}

SMALL_ARRAY = 64  # arrays of fixed-width elements up to this long are packed with a prebuilt Struct
# type -> (struct format code, width, python annotation)
FIXED = {
    "bool": ("?", 1, "bool"),
    "int8": ("b", 1, "int"),
    "int16": ("h", 2, "int"),
    "uint16": ("H", 2, "int"),
    "int32": ("i", 4, "int"),
    "uint32": ("I", 4, "int"),
    "int64": ("q", 8, "int"),
    "float64": ("d", 8, "float"),
}
# the bytes of a null length: (classic, compact)
NULL_LENGTH32 = {False: repr(b"\xff\xff\xff\xff"), True: repr(b"\x00")}
NULL_LENGTH16 = {False: repr(b"\xff\xff"), True: repr(b"\x00")}
VARIABLE = {"string": "str", "bytes": "bytes", "records": "bytes", "uuid": "uuid.UUID"}


# ---- the spec model ------------------------------------------------------------------------


def parse_versions(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    text = text.strip()
    if text in ("", "none"):
        return None
    if text.endswith("+"):
        return int(text[:-1]), INFINITY
    if "-" in text:
        low, high = text.split("-")
        return int(low), int(high)
    return int(text), int(text)


def versions_text(versions: tuple[int, int] | None) -> str:
    if versions is None:
        return "none"
    low, high = versions
    return f"{low}+" if high == INFINITY else f"{low}" if low == high else f"{low}-{high}"


def within(versions: tuple[int, int] | None, version: int) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def snake_case(name: str) -> str:
    """kafka-python's attribute names (handlers use them): an underscore before every capital."""
    attr = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return attr + "_" if keyword.iskeyword(attr) else attr


@dataclass
class Field:
    name: str
    attr: str
    type: str  # element type for arrays
    is_array: bool
    versions: tuple[int, int] | None
    nullable: tuple[int, int] | None
    tag: int | None
    tagged: tuple[int, int] | None
    ignorable: bool
    default: str | None
    struct: "Struct | None" = None

    def present(self, version: int) -> bool:
        return within(self.versions, version)

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and within(self.tagged, version)

    def is_nullable(self, version: int) -> bool:
        return within(self.nullable, version)

    @property
    def fixed(self) -> bool:
        return not self.is_array and self.type in FIXED


@dataclass
class Struct:
    name: str
    fields: list[Field] = field(default_factory=list)
    parent_attrs: list[str] = field(default_factory=list)


@dataclass
class Message:
    api_key: int
    kind: str  # request / response
    name: str
    valid: tuple[int, int]
    flexible: tuple[int, int] | None
    root: Struct
    structs: list[Struct]  # children before parents, root last


def load_spec(path: Path) -> dict:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def amend(spec: dict) -> dict:
    change = AMENDMENTS.get(spec["name"])
    if not change:
        return spec
    if "validVersions" in change:
        if parse_versions(change["validVersions"])[1] <= parse_versions(spec["validVersions"])[1]:
            raise SystemExit(f"{spec['name']}: the specs already reach {spec['validVersions']}; "
                             "drop its AMENDMENTS entry")
        spec["validVersions"] = change["validVersions"]
    for path, extra in change.get("append", {}).items():
        struct_fields(spec, path).extend(extra)
    for path, extra in change.get("insert", {}).items():
        fields = struct_fields(spec, path)
        for after, new in extra:
            if any(f["name"] == new["name"] for f in fields):
                raise SystemExit(f"{spec['name']}: the specs already have {new['name']}; drop its AMENDMENTS entry")
            fields.insert(next(i for i, f in enumerate(fields) if f["name"] == after) + 1, new)
    return spec


def struct_fields(spec: dict, path: tuple[str, ...]) -> list[dict]:
    fields = spec["fields"]
    for name in path:
        fields = next(f for f in fields if f["name"] == name)["fields"]
    return fields


# ---- merging the specs of several releases ----------------------------------------------------


def version_set(text: str | None, versions: list[int]) -> set[int]:
    span = parse_versions(text)
    return {v for v in versions if within(span, v)}


def set_text(present: set[int], top: int, open_ended: bool, what: str) -> str:
    """A version set as spec text; it must be one contiguous range."""
    if not present:
        return "none"
    low, high = min(present), max(present)
    if len(present) != high - low + 1:
        raise SystemExit(f"{what}: versions {sorted(present)} are not contiguous")
    return versions_text((low, INFINITY if high == top and open_ended else high))


def nested_fields(field_json: dict, spec: dict) -> list[dict] | None:
    """A struct field's fields, inline or from the spec's commonStructs (None: not a struct)."""
    if "fields" in field_json:
        return field_json["fields"]
    element = field_json["type"].removeprefix("[]")
    if element in FIXED or element in VARIABLE:
        return None
    return next(s["fields"] for s in spec.get("commonStructs", []) if s["name"] == element)


def merged_order(lists: list[list[dict]]) -> list[str]:
    """Field names in the newest spec's order, with fields only older specs have inserted after
    their predecessor there."""
    order: list[str] = []
    for fields in reversed(lists):
        previous = None
        for f in fields:
            if f["name"] not in order:
                order.insert(order.index(previous) + 1 if previous is not None else 0, f["name"])
            previous = f["name"]
    return order


def merge_fields(where: str, lists: list[list[dict] | None], specs: list[dict], owner: dict[int, int],
                 notes: list[str]) -> list[dict]:
    """One struct level: ``lists[i]`` are spec i's fields there (None where spec i lacks the struct)."""
    versions = sorted(owner)
    top = versions[-1]
    present_lists = [fields or [] for fields in lists]
    merged: list[dict] = []
    for name in merged_order(present_lists):
        by_spec = [next((f for f in fields if f["name"] == name), None) for fields in present_lists]
        newest = next(f for f in reversed(by_spec) if f is not None)
        what = f"{where}.{name}"
        types = {f["type"] for f in by_spec if f is not None}
        if len(types) > 1:
            elements = {t.removeprefix("[]") for t in types}
            scalar = any(e in FIXED or e in VARIABLE for e in elements)
            if scalar or len({t.startswith("[]") for t in types}) > 1:
                raise SystemExit(f"{what}: the specs give it different types {sorted(types)}")
            notes.append(f"{what}: struct renamed {' -> '.join(t for t in dict.fromkeys(f['type'] for f in by_spec if f))}")
        tags = {int(f["tag"]) for f in by_spec if f is not None and "tag" in f}  # some specs quote it
        if len(tags) > 1:
            raise SystemExit(f"{what}: the specs give it different tags {sorted(tags)}")

        def owned(key: str) -> set[int]:
            return {v for v in versions if by_spec[owner[v]] is not None
                    and v in version_set(by_spec[owner[v]].get(key), [v])}

        if not owned("versions") and by_spec[-1] is None:
            notes.append(f"{what}: dropped (only specs that own no version have it)")
            continue
        top_field = by_spec[owner[top]]
        result = dict(newest)
        for key in ("versions", "nullableVersions", "taggedVersions"):
            if not any(f is not None and key in f for f in by_spec):
                continue
            open_ended = top_field is not None and (parse_versions(top_field.get(key)) or (0, 0))[1] == INFINITY
            text = set_text(owned(key), top, open_ended, f"{what} {key}")
            if key == "versions" and text == "none":
                text = newest["versions"]  # the newest spec's field at no valid version: as it has it
            if key != "versions" and text == "none":
                result.pop(key, None)
            else:
                result[key] = text
        if tags:
            result["tag"] = tags.pop()
        nested = [nested_fields(f, spec) if f is not None else None for f, spec in zip(by_spec, specs)]
        if any(n is not None for n in nested):
            result["fields"] = merge_fields(what, nested, specs, owner, notes)
        merged.append(result)
    check_order(where, merged, lists, owner)
    return merged


def check_order(where: str, merged: list[dict], lists: list[list[dict] | None], owner: dict[int, int]) -> None:
    """At every version the merged fields come in the order the owning spec writes them."""
    for version, index in owner.items():
        ours = [f["name"] for f in merged if version in version_set(f["versions"], [version])]
        theirs = [f["name"] for f in lists[index] or [] if version in version_set(f["versions"], [version])]
        if ours != theirs:
            raise SystemExit(f"{where} v{version}: merged field order {ours} is not the spec's {theirs}")


def merge_specs(specs: list[dict], notes: list[str]) -> dict:
    """One message's specs, oldest first, as one spec. A version belongs to the newest spec
    whose validVersions hold it; a field's version ranges are what the owning specs say."""
    if len(specs) == 1:
        return specs[0]
    owner: dict[int, int] = {}
    for index, spec in enumerate(specs):
        low, high = parse_versions(spec["validVersions"])
        for version in range(low, high + 1):
            owner[version] = index
    versions = sorted(owner)
    name = specs[-1]["name"]
    if len(versions) != versions[-1] - versions[0] + 1:
        raise SystemExit(f"{name}: the specs' valid versions {versions} are not contiguous")
    flexible = {v for v in versions if v in version_set(specs[owner[v]]["flexibleVersions"], [v])}
    if flexible and max(flexible) != versions[-1]:
        raise SystemExit(f"{name}: flexible versions {sorted(flexible)} do not run to the newest")
    names = list(dict.fromkeys(s["name"] for s in specs))
    if len(names) > 1:
        notes.append(f"api key {specs[-1]['apiKey']}: renamed {' -> '.join(names)}")
    for old, new in zip(specs, specs[1:]):
        dropped = sorted(set(range(*_span(old))) - set(range(*_span(new))))
        if dropped and dropped[0] < _span(new)[0]:
            notes.append(f"{name}: v{versions_text((dropped[0], dropped[-1]))} kept from the older spec")
    merged = dict(specs[-1])
    merged.pop("commonStructs", None)
    merged["validVersions"] = versions_text((versions[0], versions[-1]))
    merged["flexibleVersions"] = set_text(flexible, versions[-1], True, f"{name} flexibleVersions")
    merged["fields"] = merge_fields(name, [s["fields"] for s in specs], specs, owner, notes)
    return merged


def _span(spec: dict) -> tuple[int, int]:
    low, high = parse_versions(spec["validVersions"])
    return low, high + 1


def build_message(spec: dict) -> Message:
    common = {s["name"]: s for s in spec.get("commonStructs", [])}
    structs: dict[str, Struct] = {}
    order: list[Struct] = []

    def struct_for(name: str, fields_json: list[dict]) -> Struct:
        if name in structs:
            return structs[name]
        struct_ = Struct(name)
        structs[name] = struct_
        struct_.fields = [make_field(f) for f in fields_json]
        order.append(struct_)
        return struct_

    def make_field(f: dict) -> Field:
        type_ = f["type"]
        is_array = type_.startswith("[]")
        element = type_[2:] if is_array else type_
        default = f.get("default")
        result = Field(
            name=f["name"], attr=snake_case(f["name"]), type=element, is_array=is_array,
            versions=parse_versions(f["versions"]), nullable=parse_versions(f.get("nullableVersions")),
            tag=f.get("tag"), tagged=parse_versions(f.get("taggedVersions")), ignorable=bool(f.get("ignorable")),
            default=None if default is None else str(default),
        )
        if element not in FIXED and element not in VARIABLE:
            body = f.get("fields")
            if body is None:
                body = common[element]["fields"]
            result.struct = struct_for(element, body)
        return result

    root = Struct(spec["name"])
    structs[spec["name"]] = root
    root.fields = [make_field(f) for f in spec["fields"]]
    order.append(root)
    return Message(
        api_key=spec["apiKey"], kind=spec["type"], name=spec["name"], valid=parse_versions(spec["validVersions"]),
        flexible=parse_versions(spec["flexibleVersions"]), root=root, structs=order,
    )


# ---- defaults ------------------------------------------------------------------------------


def default_literal(f: Field) -> str:
    """A Python expression for the field's default (a fresh object for lists and structs)."""
    raw = f.default
    if f.is_array:
        return "None" if raw == "null" else "[]"
    if f.struct is not None:
        return "None" if raw == "null" else f"{f.struct.name}()"
    if f.type == "bool":
        return "True" if (raw or "").lower() == "true" else "False"
    if f.type in FIXED and f.type != "float64":
        if not raw:
            return "0"
        sign = -1 if raw.startswith("-") else 1
        digits = raw.lstrip("-")
        return str(sign * int(digits, 16 if digits.lower().startswith("0x") else 10))
    if f.type == "float64":
        return repr(float(raw)) if raw else "0.0"
    if f.type == "uuid":
        return "ZERO_UUID"
    if raw == "null":
        return "None"
    if f.type == "string":
        return repr(raw or "")
    return "b''"


def is_mutable_default(f: Field) -> bool:
    literal = default_literal(f)
    return literal == "[]" or literal.endswith("()")


def differs_from_default(f: Field, expr: str) -> str:
    """A condition true when ``expr`` is not the field's default (when a tagged field is written)."""
    literal = default_literal(f)
    if literal == "[]":
        return expr
    if literal == "None":
        return f"{expr} is not None"
    if f.type == "uuid" and not f.is_array:
        return f"{expr} not in (None, ZERO_UUID)"
    return f"{expr} != {literal}"


def annotation(f: Field) -> str:
    base = f.struct.name if f.struct is not None else FIXED[f.type][2] if f.type in FIXED else VARIABLE[f.type]
    if f.is_array:
        base = f"list[{base}]"
    if f.nullable is not None or default_literal(f) == "None":
        base += " | None"
    return base


# ---- code generation -----------------------------------------------------------------------


class Module:
    def __init__(self) -> None:
        self.packers: dict[str, str] = {}
        self.array_codes: set[str] = set()  # fixed-width element types written as arrays
        self.lines: list[str] = []

    def packer(self, fmt: str) -> str:
        if fmt not in self.packers:
            self.packers[fmt] = f"_S{len(self.packers)}"
        return self.packers[fmt]


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def fixed_runs(fields: list[Field], version: int):
    """Yield lists of consecutive fixed-width fields (packed with one struct call) and single fields."""
    run: list[Field] = []
    for f in fields:
        if f.fixed and not f.is_tagged(version):
            run.append(f)
            continue
        if run:
            yield run
            run = []
        yield f
    if run:
        yield run


class StructCodegen:
    """Per-version encoder/decoder bodies for one message (all its structs)."""

    def __init__(self, module: Module, message: Message) -> None:
        self.module = module
        self.message = message
        self.encoders: dict[tuple[str, int], str] = {}  # (struct, version) -> function name
        self.decoders: dict[tuple[str, int], str] = {}
        self.bodies: dict[str, str] = {}  # body text -> function name (versions sharing a layout)

    def flexible(self, version: int) -> bool:
        return within(self.message.flexible, version)

    def generate(self) -> None:
        low, high = self.message.valid
        for struct_ in self.message.structs:
            for version in range(low, high + 1):
                self.encoders[(struct_.name, version)] = self._function(
                    f"_e_{struct_.name}", self._encode_body(struct_, version), "(m, buf)")
                self.decoders[(struct_.name, version)] = self._function(
                    f"_d_{struct_.name}", self._decode_body(struct_, version), "(data, pos)")

    def _function(self, prefix: str, body: list[str], signature: str) -> str:
        text = "\n".join(body)
        key = prefix + "\n" + text
        if key not in self.bodies:
            name = f"{prefix}_{len([k for k in self.bodies if k.startswith(prefix + chr(10))])}"
            self.bodies[key] = name
            self.module.lines.append(f"def {name}{signature}:")
            self.module.lines.extend("    " + line if line else "" for line in body)
            self.module.lines.append("")
            self.module.lines.append("")
        return self.bodies[key]

    # -- encoding

    def _encode_body(self, struct_: Struct, version: int) -> list[str]:
        flexible = self.flexible(version)
        var = Counter()
        lines: list[str] = []
        for f in struct_.fields:
            if not f.present(version) and not f.ignorable:
                lines.append(f"if {differs_from_default(f, 'm.' + f.attr)}:")
                lines.append(f"    raise unsupported({struct_.name!r}, {f.name!r}, {versions_text(f.versions)!r})")
        for item in fixed_runs([f for f in struct_.fields if f.present(version)], version):
            if isinstance(item, list):
                fmt = ">" + "".join(FIXED[f.type][0] for f in item)
                args = ", ".join(f"m.{f.attr}" for f in item)
                lines.append(f"buf += {self.module.packer(fmt)}.pack({args})")
            elif not item.is_tagged(version):
                lines.extend(self._encode_value(item, f"m.{item.attr}", "buf", version, flexible, var))
        if flexible:
            tagged = sorted((f for f in struct_.fields if f.present(version) and f.is_tagged(version)),
                            key=lambda f: f.tag)
            if not tagged:
                lines.append("buf.append(0)")
            else:
                lines.append("tags = []")
                for f in tagged:
                    value = var("v")
                    lines.append(f"{value} = m.{f.attr}")
                    lines.append(f"if {differs_from_default(f, value)}:")
                    lines.append("    t = bytearray()")
                    lines.extend("    " + line for line in self._encode_value(f, value, "t", version, True, var))
                    lines.append(f"    tags.append(({f.tag}, t))")
                lines.append("write_tagged(buf, tags)")
        return lines or ["pass"]

    def _encode_value(self, f: Field, expr: str, buf: str, version: int, compact: bool, var: Counter) -> list[str]:
        nullable = f.is_nullable(version)
        lines: list[str] = []
        if f.is_array:
            items = var("a")
            lines.append(f"{items} = {expr}")
            if nullable:
                lines.append(f"if {items} is None:")
                lines.append(f"    {buf} += {NULL_LENGTH32[compact]}")
                lines.append("else:")
                indent = "    "
            else:
                indent = ""
            count = var("n")
            body = [f"{count} = len({items})"]
            body.extend(self._length_lines(count, buf, compact))
            if f.type in FIXED:
                code = FIXED[f.type][0]
                self.module.array_codes.add(code)
                body.append(f"{buf} += (_A{code}[{count}] if {count} < {SMALL_ARRAY} "
                            f"else struct.Struct(f'>{{{count}}}{code}')).pack(*{items})")
            elif f.type == "string":
                body.append(f"for x in {items}:")
                body.append(f"    write_string({buf}, x, {compact})")
            elif f.type == "uuid":
                body.append(f"for x in {items}:")
                body.append(f"    {buf} += uuid_bytes(x)")
            elif f.type in ("bytes", "records"):
                body.append(f"for x in {items}:")
                body.append(f"    write_length({buf}, len(x), {compact})")
                body.append(f"    {buf} += x")
            else:
                encoder = self.encoders[(f.struct.name, version)]
                body.append(f"for x in {items}:")
                body.append(f"    {encoder}(x, {buf})")
            lines.extend(indent + line for line in body)
            return lines
        if f.struct is not None:
            encoder = self.encoders[(f.struct.name, version)]
            if nullable:
                value = var("s")
                lines.append(f"{value} = {expr}")
                lines.append(f"if {value} is None:")
                lines.append(f"    {buf}.append(255)")
                lines.append("else:")
                lines.append(f"    {buf}.append(1)")
                lines.append(f"    {encoder}({value}, {buf})")
            else:
                lines.append(f"{encoder}({expr}, {buf})")
            return lines
        if f.type in FIXED:
            code = FIXED[f.type][0]
            lines.append(f"{buf} += {self.module.packer('>' + code)}.pack({expr})")
            return lines
        if f.type == "uuid":
            lines.append(f"{buf} += uuid_bytes({expr})")
            return lines
        value = var("b")
        if f.type == "string":
            source = var("s")
            lines.append(f"{source} = {expr}")
            if nullable:
                lines.append(f"if {source} is None:")
                lines.append(f"    {buf} += {NULL_LENGTH16[compact]}")
                lines.append("else:")
                lines.extend("    " + line for line in self._string_lines(f"{source}.encode()", value, buf, compact))
            else:
                lines.pop()
                lines.extend(self._string_lines(f"{expr}.encode()", value, buf, compact))
            return lines
        # bytes / records
        lines.append(f"{value} = {expr}")
        if nullable:
            lines.append(f"if {value} is None:")
            lines.append(f"    {buf} += {NULL_LENGTH32[compact]}")
            lines.append("else:")
            indent = "    "
        else:
            indent = ""
        lines.append(f"{indent}write_length({buf}, len({value}), {compact})")
        lines.append(f"{indent}{buf} += {value}")
        return lines

    def _length_lines(self, count: str, buf: str, compact: bool) -> list[str]:
        """An array's non-null length, inline."""
        if not compact:
            return [f"{buf} += {self.module.packer('>i')}.pack({count})"]
        return [
            f"if {count} < 127:",
            f"    {buf}.append({count} + 1)",
            "else:",
            f"    write_uvarint({buf}, {count} + 1)",
        ]

    def _string_lines(self, encoded_expr: str, value: str, buf: str, compact: bool) -> list[str]:
        lines = [f"{value} = {encoded_expr}"]
        if compact:
            size = value + "n"
            lines.append(f"{size} = len({value}) + 1")
            lines.append(f"if {size} < 128:")
            lines.append(f"    {buf}.append({size})")
            lines.append("else:")
            lines.append(f"    write_uvarint({buf}, {size})")
        else:
            lines.append(f"{buf} += {self.module.packer('>h')}.pack(len({value}))")
        lines.append(f"{buf} += {value}")
        return lines

    # -- decoding

    def _decode_body(self, struct_: Struct, version: int) -> list[str]:
        flexible = self.flexible(version)
        var = Counter()
        lines: list[str] = []
        present = [f for f in struct_.fields if f.present(version)]
        for item in fixed_runs(present, version):
            if isinstance(item, list):
                fmt = ">" + "".join(FIXED[f.type][0] for f in item)
                width = struct.calcsize(fmt)
                targets = "".join(f"f_{f.attr}, " for f in item)
                lines.append(f"{targets}= {self.module.packer(fmt)}.unpack_from(data, pos)")
                lines.append(f"pos += {width}")
            elif not item.is_tagged(version):
                lines.extend(self._decode_value(item, f"f_{item.attr}", "pos", version, flexible, var))
        tagged = [f for f in present if f.is_tagged(version)]
        for f in tagged:
            lines.append(f"f_{f.attr} = {default_literal(f)}")
        if flexible:
            section = ["count, pos = read_uvarint(data, pos)", "for _ in range(count):",
                       "    tag, pos = read_uvarint(data, pos)"]
            if tagged:
                keyword_ = "if"
                for f in sorted(tagged, key=lambda f: f.tag):
                    section.append(f"    {keyword_} tag == {f.tag}:")
                    section.append("        size, p = read_uvarint(data, pos)")
                    section.append("        pos = p + size")
                    section.append("        if pos > len(data):")
                    section.append(f"            raise truncated({f.name!r})")
                    value_lines = self._decode_value(f, f"f_{f.attr}", "p", version, True, var)
                    section.extend("        " + line for line in value_lines)
                    keyword_ = "elif"
                section.append("    else:")
                section.append("        pos = skip_tagged_field(data, pos)")
            else:
                section.append("    pos = skip_tagged_field(data, pos)")
            lines.append("if data[pos] == 0:  # no tagged fields, the usual case")
            lines.append("    pos += 1")
            lines.append("else:")
            lines.extend("    " + line for line in section)
        args = ", ".join(f"f_{f.attr}" if f.present(version) else default_literal(f) for f in struct_.fields)
        lines.append(f"return {struct_.name}({args}), pos")
        return lines

    def _decode_value(self, f: Field, target: str, pos: str, version: int, compact: bool, var: Counter) -> list[str]:
        nullable = f.is_nullable(version)
        name = repr(f.name)
        lines: list[str] = []
        if f.is_array:
            count = var("n")
            lines.append(f"{count}, {pos} = read_array_length(data, {pos}, {compact}, {nullable}, {name})")
            lines.append(f"if {count} < 0:")
            lines.append(f"    {target} = None")
            lines.append("else:")
            if f.type in FIXED:
                code, width, _ = FIXED[f.type]
                lines.append(f"    {target}, {pos} = read_fixed_array(data, {pos}, {code!r}, {width}, {count}, {name})")
                return lines
            lines.append(f"    {target} = []")
            lines.append(f"    for _ in range({count}):")
            element = var("x")
            if f.type == "string":
                lines.append(f"        {element}, {pos} = read_string(data, {pos}, {compact}, False, {name})")
            elif f.type == "uuid":
                lines.append(f"        {element}, {pos} = read_uuid(data, {pos})")
            elif f.type in ("bytes", "records"):
                lines.append(f"        {element}, {pos} = read_bytes(data, {pos}, {compact}, False, {name})")
            else:
                decoder = self.decoders[(f.struct.name, version)]
                lines.append(f"        {element}, {pos} = {decoder}(data, {pos})")
            lines.append(f"        {target}.append({element})")
            return lines
        if f.struct is not None:
            decoder = self.decoders[(f.struct.name, version)]
            if nullable:
                lines.append(f"if data[{pos}] >= 128:")
                lines.append(f"    {target} = None")
                lines.append(f"    {pos} += 1")
                lines.append("else:")
                lines.append(f"    {target}, {pos} = {decoder}(data, {pos} + 1)")
            else:
                lines.append(f"{target}, {pos} = {decoder}(data, {pos})")
            return lines
        if f.type in FIXED:
            code, width, _ = FIXED[f.type]
            lines.append(f"{target} = {self.module.packer('>' + code)}.unpack_from(data, {pos})[0]")
            lines.append(f"{pos} += {width}")
            return lines
        if f.type == "uuid":
            lines.append(f"{target}, {pos} = read_uuid(data, {pos})")
        elif f.type == "string":
            lines.extend(self._string_decode(target, pos, compact, nullable, name, var))
        elif f.type == "bytes":
            lines.append(f"{target}, {pos} = read_bytes(data, {pos}, {compact}, {nullable}, {name})")
        else:  # records: a view of the request, not a copy
            lines.append(f"{target}, {pos} = read_bytes(data, {pos}, {compact}, {nullable}, {name}, copy=False)")
        return lines


    def _string_decode(self, target: str, pos: str, compact: bool, nullable: bool, name: str,
                       var: Counter) -> list[str]:
        """Inline for the usual case (a compact length in one byte, or a classic non-negative
        one); read_string for nulls, long compact lengths and errors."""
        end = var("end")
        if compact:
            head = var("c")
            return [
                f"{head} = data[{pos}]",
                f"if 0 < {head} < 128:",
                f"    {end} = {pos} + {head}",
                f"    if {end} > len(data):",
                f"        raise truncated({name})",
                f"    {target} = str(data[{pos} + 1:{end}], 'utf-8')",
                f"    {pos} = {end}",
                "else:",
                f"    {target}, {pos} = read_string(data, {pos}, True, {nullable}, {name})",
            ]
        size = var("n")
        return [
            f"{size} = {self.module.packer('>h')}.unpack_from(data, {pos})[0]",
            f"if {size} >= 0:",
            f"    {end} = {pos} + 2 + {size}",
            f"    if {end} > len(data):",
            f"        raise truncated({name})",
            f"    {target} = str(data[{pos} + 2:{end}], 'utf-8')",
            f"    {pos} = {end}",
            "else:",
            f"    {target}, {pos} = read_string(data, {pos}, False, {nullable}, {name})",
        ]


def class_lines(struct_: Struct, message: Message | None) -> list[str]:
    lines = ["@dataclass(slots=True)", f"class {struct_.name}:"]
    for f in struct_.fields:
        literal = default_literal(f)
        if literal == "[]":
            default = "field(default_factory=list)"
        elif literal.endswith("()"):
            default = f"field(default_factory={literal[:-2]})"
        else:
            default = literal
        lines.append(f"    {f.attr}: {annotation(f)} = {default}")
    if not struct_.fields:
        lines.append("    pass")
    if message is not None:
        name = struct_.name
        lines += [
            "",
            "    def encode(self, version: int) -> bytearray:",
            "        buf = bytearray()",
            f"        _ENCODERS_{name}[version](self, buf)",
            "        return buf",
            "",
            "    @staticmethod",
            f"    def decode(data, version: int) -> \"{name}\":",
            f"        return _DECODERS_{name}[version](data, 0)[0]",
        ]
    return lines + ["", ""]


def module_name(api_name: str) -> str:
    return snake_case(api_name)


def generate_module(api_name: str, messages: list[Message]) -> str:
    module = Module()
    classes: list[str] = []
    seen: dict[str, Struct] = {}
    for message in messages:
        for struct_ in message.structs:
            if struct_.name in seen:
                if [f.name for f in seen[struct_.name].fields] != [f.name for f in struct_.fields]:
                    raise SystemExit(f"{api_name}: two different structs named {struct_.name}")
                continue
            seen[struct_.name] = struct_
            classes.extend(class_lines(struct_, message if struct_ is message.root else None))
    nesting: list[str] = []
    for message in messages:
        for struct_ in message.structs:
            for f in struct_.fields:
                if f.struct is not None:
                    line = f"{struct_.name}.{f.struct.name} = {f.struct.name}  # type: ignore[attr-defined]"
                    if line not in nesting:
                        nesting.append(line)
    tables: list[str] = []
    for message in messages:
        codegen = StructCodegen(module, message)
        codegen.generate()
        low, high = message.valid
        root = message.root.name
        tables.append(f"_ENCODERS_{root} = {{")
        tables.extend(f"    {v}: {codegen.encoders[(root, v)]}," for v in range(low, high + 1))
        tables.append("}")
        tables.append(f"_DECODERS_{root} = {{")
        tables.extend(f"    {v}: {codegen.decoders[(root, v)]}," for v in range(low, high + 1))
        tables.append("}")
        tables.append("")
    header = [
        f'"""{api_name}: generated by scripts/generate_codecs.py from',
        "Kafka's message definitions; do not edit, rerun the generator.\"\"\"",
        "",
        "# ruff: noqa",
        "# fmt: off",
        "from __future__ import annotations",
        "",
        "import struct",
        "import uuid",
        "from dataclasses import dataclass, field",
        "",
        "from kafkacompat.wire.message_runtime import (",
        "    ZERO_UUID, read_array_length, read_bytes, read_fixed_array, read_string, read_uuid, read_uvarint,",
        "    skip_tagged_field, truncated, unsupported, uuid_bytes, write_length, write_string, write_tagged,",
        "    write_uvarint,",
        ")",
        "",
    ]
    header += [f"{name} = struct.Struct({fmt!r})" for fmt, name in module.packers.items()]
    header += [f"_A{code} = tuple(struct.Struct(f'>{{n}}{code}') for n in range({SMALL_ARRAY}))"
               for code in sorted(module.array_codes)]
    header += ["", ""]
    return "\n".join(header + classes + nesting + ["", ""] + module.lines + tables) + "\n"


def generate_index(apis: dict[int, dict[str, Message]]) -> str:
    lines = [
        '"""Index of the generated message codecs: api key -> API name, module prefix, valid and',
        "flexible versions. Generated by scripts/generate_codecs.py; do not edit.",
        "",
        "Module ``<name>_request`` (``<name>_response``), imported on first use and never at start-up,",
        "holds the class ``<Name>Request`` (``<Name>Response``) with ``encode(version)`` and",
        "``decode(data, version)``; its nested struct classes are attributes of it.",
        '"""',
        "",
        "# fmt: off",
        "from __future__ import annotations",
        "",
        "# api key: (API name, module prefix, lowest valid version, highest, first flexible version or None)",
        "APIS: dict[int, tuple[str, str, int, int, int | None]] = {",
    ]
    for key in sorted(apis):
        request = apis[key]["request"]
        name = request.name[: -len("Request")]
        first_flexible = request.flexible[0] if request.flexible else None
        low, high = request.valid
        lines.append(f"    {key}: ({name!r}, {module_name(name)!r}, {low}, {high}, {first_flexible}),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load_all(directories: list[Path]) -> dict[tuple[int, str], list[dict]]:
    """(api key, request/response) -> that message's specs, oldest directory first."""
    found: dict[tuple[int, str], list[dict]] = {}
    for directory in directories:
        for path in sorted(directory.glob("*.json")):
            spec = load_spec(path)
            if spec.get("type") not in ("request", "response") or "apiKey" not in spec:
                continue
            found.setdefault((spec["apiKey"], spec["type"]), []).append(spec)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=Path, action="append",
                        help="a directory of message specs; repeat it, oldest first (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.specs and not KIO_SPECS.is_dir():
        raise SystemExit(f"{KIO_SPECS} is missing: run python scripts/specs_from_kio.py first")
    directories = args.specs or DEFAULT_SPECS
    apis: dict[int, dict[str, Message]] = {}
    notes: list[str] = []
    for (key, kind), specs in sorted(load_all(directories).items()):
        message = build_message(amend(merge_specs(specs, notes)))
        apis.setdefault(key, {})[kind] = message
    if not apis:
        raise SystemExit(f"no request/response specs found in {', '.join(map(str, directories))}")
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.py"):
        old.unlink()
    for key, pair in sorted(apis.items()):
        if set(pair) != {"request", "response"}:
            raise SystemExit(f"api key {key} lacks a request or a response spec")
        if pair["request"].valid != pair["response"].valid:
            raise SystemExit(f"api key {key}: request and response valid versions differ "
                             f"({pair['request'].valid}, {pair['response'].valid})")
        for message in pair.values():
            source = generate_module(message.name, [message])
            (args.out / f"{module_name(message.name)}.py").write_text(source)
    (args.out / "__init__.py").write_text(generate_index(apis))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {len(apis)} APIs to {args.out} from {', '.join(map(str, directories))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
