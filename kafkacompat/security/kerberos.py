"""Kerberos names as Kafka reads them: KerberosName (``service/host@REALM``) and the
``sasl.kerberos.principal.to.local.rules`` that map an authenticated principal to the short name
of its ``User:`` principal (KerberosShortNamer / KerberosRule).

A rule is ``DEFAULT`` (the first component of a name in the default realm) or
``RULE:[n:format](match)s/from/to/g/L`` (``/U`` upper-cases): it applies to names of ``n``
components; ``format`` builds a string from ``$0`` (the realm) and ``$1``.. (the components),
which must fully match the ``match`` regular expression; then the ``s///`` substitution (every
match with ``g``) gives the short name. The first rule that applies wins; none is a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# [n:format], (match), s/from/to/[g], /L or /U
_RULE = re.compile(r"((DEFAULT)|(RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?))/?([LU])?")
_NAME = re.compile(r"([^/@]+)(?:/([^/@]+))?(?:@([^/@]+))?")
_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?")


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True)
class KerberosName:
    service: str
    host: str | None
    realm: str | None

    @classmethod
    def parse(cls, text: str) -> "KerberosName":
        match = _NAME.fullmatch(text)
        if match is None:
            raise ValueError(f"Malformed Kerberos name: {text}")
        return cls(match[1], match[2], match[3])

    def __str__(self) -> str:
        host = f"/{self.host}" if self.host else ""
        realm = f"@{self.realm}" if self.realm else ""
        return f"{self.service}{host}{realm}"


@dataclass(frozen=True)
class _Rule:
    text: str
    default: bool
    components: int = 0
    format: str = ""
    match: re.Pattern | None = None
    substitute: re.Pattern | None = None
    replacement: str = ""
    repeat: bool = False
    case: str | None = None

    def apply(self, params: list[str], default_realm: str | None) -> str | None:
        result = None
        if self.default:
            if params[0] == default_realm:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = _replace_parameters(self.format, params)
            if self.match is None or self.match.fullmatch(base):
                result = base
                if self.substitute is not None:
                    result = self.substitute.sub(self.replacement, base, count=0 if self.repeat else 1)
        if result is not None and re.search(r"[/@]", result):
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule {self.text}")
        if result is not None and self.case == "L":
            result = result.lower()
        elif result is not None and self.case == "U":
            result = result.upper()
        return result


def _replace_parameters(format_: str, params: list[str]) -> str:
    out = []
    for match in _PARAMETER.finditer(format_):
        out.append(match[1])
        if match[3] is not None:
            if not match[3]:
                raise NoMatchingRule(f"bad format in username mapping in {format_}")
            index = int(match[3])
            if index >= len(params):
                raise NoMatchingRule(f"index {index} from {format_} is outside of the valid range "
                                     f"0 to {len(params) - 1}")
            out.append(params[index])
    return "".join(out)


def _java_replacement(java: str) -> str:
    """Java's replacement ($1, \\$) as Python's (\\g<1>)."""
    return re.sub(r"\\(.)|\$(\d+)|(\\)",
                  lambda m: (m[1].replace("\\", "\\\\") if m[1] is not None
                             else f"\\g<{m[2]}>" if m[2] is not None else "\\\\"), java)


def parse_rule(text: str) -> _Rule:
    match = _RULE.match(text)
    if match is None:
        raise ValueError(f"Invalid rule: {text}")
    if match.end() != len(text):
        raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{text[match.end():]}`")
    if match[2] is not None:
        return _Rule(text, True)  # Kafka ignores a case flag on DEFAULT
    try:
        return _Rule(text, False, int(match[4] or "0"), match[5],
                     re.compile(match[7]) if match[7] is not None else None,
                     re.compile(match[9]) if match[9] is not None else None,
                     _java_replacement(match[10] or ""), match[11] == "g", match[12])
    except re.error as exc:
        raise ValueError(f"Invalid rule: {text} ({exc})") from None


class KerberosShortNamer:
    def __init__(self, rules: list[str] | None, default_realm: str | None) -> None:
        self.rules = [parse_rule(rule.strip()) for rule in (rules or ["DEFAULT"]) if rule.strip()]
        self.default_realm = default_realm

    def short_name(self, name: KerberosName) -> str:
        if name.host is None:
            if name.realm is None:
                return name.service
            params = [name.realm, name.service]
        else:
            params = [name.realm or "", name.service, name.host]
        for rule in self.rules:
            result = rule.apply(params, self.default_realm)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {name}, rules {[rule.text for rule in self.rules]} "
                             "(sasl.kerberos.principal.to.local.rules)")
