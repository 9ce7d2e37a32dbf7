"""JAAS login context text as Kafka's ``sasl.jaas.config`` holds it:
``<LoginModule class> <flag> key="value" key2=value2;`` (one or more modules)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str) -> list[LoginModule]:
    """Parse ``text``; the error names the position, never the option values (they are secrets)."""
    tokens = _tokens(text)
    modules = []
    position = 0
    while position < len(tokens):
        class_name, flag = _word(tokens, position, "a login module class"), _word(tokens, position + 1, "a flag")
        if flag.lower() not in _FLAGS:
            raise JaasConfigError(f"login module {class_name}: the control flag must be one of {', '.join(_FLAGS)}")
        position += 2
        options: dict[str, str] = {}
        while position < len(tokens) and tokens[position] != (";", False):
            key = _word(tokens, position, "an option name")
            if position + 2 >= len(tokens) or tokens[position + 1] != ("=", False):
                raise JaasConfigError(f"login module {class_name}: option {key} has no '=value'")
            options[key] = tokens[position + 2][0]
            position += 3
        if position >= len(tokens):
            raise JaasConfigError(f"login module {class_name}: the entry must end with ';'")
        position += 1
        modules.append(LoginModule(class_name, flag.lower(), options))
    if not modules:
        raise JaasConfigError("no login module is configured")
    return modules


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(text, quoted) pairs; '=' and ';' are unquoted tokens of their own."""
    tokens = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise JaasConfigError(f"unexpected character at offset {position}")
        quoted, word, equals, semicolon = match.groups()
        if quoted is not None:
            tokens.append((re.sub(r"\\(.)", r"\1", quoted), True))
        else:
            tokens.append((word or equals or semicolon, False))
        position = match.end()
    return tokens


def _word(tokens: list[tuple[str, bool]], position: int, what: str) -> str:
    if position >= len(tokens) or tokens[position][0] in ("=", ";") and not tokens[position][1]:
        raise JaasConfigError(f"expected {what}")
    return tokens[position][0]
