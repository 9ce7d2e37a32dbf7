"""Kafka's ssl.principal.mapping.rules (SslPrincipalMapper) and the RFC 2253 distinguished name
Java's X500Principal.getName() gives for a client certificate.

Rules are comma-separated ``DEFAULT`` or ``RULE:<pattern>/<replacement>/[L|U]``: the first rule
whose Java regular expression matches the whole DN gives the name (``$1`` refers to a group; ``L``
lower-cases, ``U`` upper-cases the result); ``DEFAULT`` keeps the DN. No matching rule fails the
authentication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# X500Principal.getName(RFC2253) keywords; other attributes print as <OID>=#<DER hex>.
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}
_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5", "title": "2.5.4.12",
         "surname": "2.5.4.4", "givenName": "2.5.4.42", "initials": "2.5.4.43", "generationQualifier": "2.5.4.44",
         "dnQualifier": "2.5.4.46", "pseudonym": "2.5.4.65", "postalCode": "2.5.4.17", "name": "2.5.4.41"}
# DER string tags Java keeps for these attributes: IA5String for email, PrintableString for others.
_DER_TAGS = {"emailAddress": 0x16, "serialNumber": 0x13, "dnQualifier": 0x13}


class NoMatchingRule(ValueError):
    pass


def distinguished_name(certificate: dict) -> str:
    """The subject of ``ssl.SSLSocket.getpeercert()`` as an RFC 2253 string (last RDN first)."""
    rdns = certificate.get("subject", ())
    return ",".join("+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(rdns))


def _attribute(name: str, value: str) -> str:
    keyword = _RFC2253_KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    encoded = value.encode()
    der = bytes([_DER_TAGS.get(name, 0x0C)]) + _der_length(len(encoded)) + encoded
    return f"{_OIDS.get(name, name)}=#{der.hex()}"


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    body = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


class PrincipalMapper:
    def __init__(self, rules: str | None) -> None:
        self.rules = _parse_rules(rules or "DEFAULT")

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches the certificate name {dn!r}")


_RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)")


def _parse_rules(text: str) -> list[_Rule]:
    rules = []
    position = 0
    text = text.strip()
    while position < len(text):
        if text.startswith("DEFAULT", position):
            rules.append(_Rule(None))
            position += len("DEFAULT")
        else:
            match = _RULE.match(text, position)
            if match is None:
                raise ValueError(f"Invalid rule: {text[position:]}")
            try:
                pattern = re.compile(match[1])
            except re.error as exc:
                raise ValueError(f"Invalid rule: {match[0]} ({exc})") from None
            rules.append(_Rule(pattern, _python_replacement(match[2]), match[3]))
            position = match.end()
        separator = re.compile(r"\s*(?:[,\n]\s*|$)").match(text, position)
        if separator is None or (separator.end() == position and position < len(text)):
            raise ValueError(f"Invalid rule: {text[position:]}")
        position = separator.end()
    return rules


def _python_replacement(java: str) -> str:
    """Java's replacement syntax ($1, \\$ for a dollar) as Python's (\\g<1>)."""
    out = []
    index = 0
    while index < len(java):
        char = java[index]
        if char == "\\" and index + 1 < len(java):
            out.append(java[index + 1].replace("\\", "\\\\"))
            index += 2
        elif char == "$" and index + 1 < len(java) and java[index + 1].isdigit():
            digits = re.match(r"\d+", java[index + 1:])[0]
            out.append(f"\\g<{digits}>")
            index += 1 + len(digits)
        else:
            out.append("\\\\" if char == "\\" else char)
            index += 1
    return "".join(out)
