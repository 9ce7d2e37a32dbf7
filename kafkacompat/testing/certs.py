"""Test certificates made with the openssl command line: a CA, a server certificate for
127.0.0.1/localhost, client certificates with a chosen subject, optionally an encrypted PKCS#8
key. Everything is written under one directory; nothing is reused between runs."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Identity:
    cert: Path
    key: Path

    def keystore(self) -> Path:
        """Key and certificate in one PEM file (ssl.keystore.location with ssl.keystore.type=PEM)."""
        path = self.cert.with_suffix(".keystore.pem")
        path.write_text(self.key.read_text() + self.cert.read_text())
        return path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "kafkacompat test CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name.replace(" ", "-")
        self.cert = self.directory / f"{self.name}.crt"
        self.key = self.directory / f"{self.name}.key"
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                 "-keyout", str(self.key), "-out", str(self.cert), cwd=self.directory)

    def issue(self, name: str, subject: str, *, server: bool = False, key_password: str | None = None) -> Identity:
        key, csr, cert = (self.directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr),
                 cwd=self.directory)
        extensions = self.directory / f"{name}.ext"
        extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
                              if server else "extendedKeyUsage=clientAuth\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key), "-CAcreateserial",
                 "-days", "2", "-extfile", str(extensions), "-out", str(cert), cwd=self.directory)
        if key_password is not None:
            encrypted = self.directory / f"{name}.enc.key"
            _openssl("pkcs8", "-topk8", "-in", str(key), "-out", str(encrypted), "-v2", "aes-256-cbc",
                     "-passout", f"pass:{key_password}", cwd=self.directory)
            key = encrypted
        return Identity(cert, key)
