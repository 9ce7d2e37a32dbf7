"""KafkaPrincipal: the identity a connection acts as, in Kafka's "Type:name" form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """'User:alice' -> KafkaPrincipal('User', 'alice'); a name may itself contain ':'."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type:
            raise ValueError(f"a principal is 'Type:name', got {text!r}")
        return cls(principal_type, name)


# What an unauthenticated connection (PLAINTEXT, or SSL without a client certificate) is.
ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
