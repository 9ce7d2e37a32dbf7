"""Test certificates made with the openssl command line: a CA, a server certificate for
127.0.0.1/localhost, client certificates with a chosen subject, optionally an encrypted PKCS#8
key; and Java key and trust stores (JKS, PKCS12) made from them with Java's keytool, as a Kafka
user makes them. Everything is written under one directory; nothing is reused between runs."""

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


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True)


def java_key_store(identity: Identity, authority: "CertificateAuthority", store_type: str, store_password: str, *,
                   key_password: str | None = None, identity_key_password: str | None = None) -> Path:
    """A JKS or PKCS12 key store holding the identity's key and its chain (the CA's certificate
    after its own), written by keytool; JKS keeps the key under ``key_password`` when given."""
    exported = identity.cert.with_suffix(".export.p12")
    _openssl("pkcs12", "-export", "-in", str(identity.cert), "-inkey", str(identity.key), "-certfile",
             str(authority.cert), "-name", "broker", "-out", str(exported), "-passout", f"pass:{store_password}",
             *(["-passin", f"pass:{identity_key_password}"] if identity_key_password else []), cwd=exported.parent)
    if store_type == "PKCS12":
        return exported
    store = identity.cert.with_suffix(".keystore.jks")
    store.unlink(missing_ok=True)
    _keytool("-importkeystore", "-srckeystore", str(exported), "-srcstoretype", "PKCS12", "-srcstorepass",
             store_password, "-destkeystore", str(store), "-deststoretype", "JKS", "-deststorepass", store_password,
             "-destkeypass", key_password or store_password, "-noprompt")
    return store


def java_trust_store(certificates: list[Path], path: Path, store_type: str, store_password: str) -> Path:
    """A JKS or PKCS12 trust store of ``certificates`` (keytool -importcert)."""
    path.unlink(missing_ok=True)
    for index, certificate in enumerate(certificates):
        _keytool("-importcert", "-noprompt", "-alias", f"ca{index}", "-file", str(certificate), "-keystore", str(path),
                 "-storetype", store_type, "-storepass", store_password)
    return path


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
