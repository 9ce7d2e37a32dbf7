"""Java key stores for TLS listeners, turned into the PEM that Python's ssl module loads.

JKS (``ssl.keystore.type=JKS``, Kafka's default, and the trust store's) is read here: its entries
(private keys with their certificate chains, trusted certificates), the private keys' protection
(Sun's KeyProtector: a SHA-1 key stream keyed by the key password, checked by a SHA-1 digest),
and the whole file's SHA-1 integrity check keyed by the store password. PKCS12 (keytool's default
since Java 9) is read with the ``cryptography`` package. JCEKS and other formats are refused with
what to do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import struct
from dataclasses import dataclass, field

JKS_MAGIC = 0xFEEDFEED
JCEKS_MAGIC = 0xCECECECE
_PRIVATE_KEY_ENTRY = 1
_TRUSTED_CERT_ENTRY = 2
_INTEGRITY_SALT = b"Mighty Aphrodite"  # the constant Java's JKS integrity digest is keyed with
_SUN_KEY_PROTECTOR_OID = bytes.fromhex("2b060104012a02110101")  # 1.3.6.1.4.1.42.2.17.1.1, DER
_DIGEST = 20


class KeyStoreError(ValueError):
    """The store cannot be read: a wrong password, a damaged file or a format not supported."""


@dataclass
class KeyStoreContents:
    private_keys: list[tuple[str, bytes, list[bytes]]] = field(default_factory=list)  # (alias, PKCS#8 DER, chain DER)
    trusted: list[tuple[str, bytes]] = field(default_factory=list)  # (alias, certificate DER)


def key_store_pem(path: str, store_type: str, store_password: str | None,
                  key_password: str | None) -> tuple[str, str]:
    """(private key PEM, certificate chain PEM) of the store's one private key entry."""
    contents = _read(path, store_type, store_password, key_password)
    if not contents.private_keys:
        raise KeyStoreError("it holds no private key entry (a trust store given as the key store?)")
    if len(contents.private_keys) > 1:
        aliases = ", ".join(alias for alias, _, _ in contents.private_keys)
        raise KeyStoreError(f"it holds several private keys ({aliases}); keep one per listener's key store")
    _, key, chain = contents.private_keys[0]
    return _pem("PRIVATE KEY", key), "".join(ssl.DER_cert_to_PEM_cert(cert) for cert in chain)


def trust_store_pem(path: str, store_type: str, store_password: str | None) -> str:
    """Every certificate of the store in PEM: the trusted entries and, as Java trusts them too,
    the chains of private key entries."""
    contents = _read(path, store_type, store_password, None, keys_wanted=False)
    certificates = [cert for _, cert in contents.trusted]
    certificates += [cert for _, _, chain in contents.private_keys for cert in chain]
    if not certificates:
        raise KeyStoreError("it holds no certificate")
    return "".join(ssl.DER_cert_to_PEM_cert(cert) for cert in certificates)


def _read(path: str, store_type: str, store_password: str | None, key_password: str | None, *,
          keys_wanted: bool = True) -> KeyStoreContents:
    with open(path, "rb") as handle:
        data = handle.read()
    if store_type == "PKCS12":
        return _read_pkcs12(data, store_password)
    if store_type != "JKS":
        raise KeyStoreError(f"type {store_type} is not read (JKS, PKCS12 and PEM are)")
    return read_jks(data, store_password, key_password if key_password is not None else store_password,
                    keys_wanted=keys_wanted)


def read_jks(data: bytes, store_password: str | None, key_password: str | None, *,
             keys_wanted: bool = True) -> KeyStoreContents:
    """A JKS file's entries. Without a store password the integrity digest is not checked (Java
    reads a trust store so); private keys are decrypted only when ``keys_wanted``."""
    reader = _Reader(data)
    magic = reader.uint32()
    if magic == JCEKS_MAGIC:
        raise KeyStoreError("it is a JCEKS store; convert it: keytool -importkeystore -deststoretype PKCS12")
    if magic != JKS_MAGIC:
        raise KeyStoreError("it is not a JKS store (no JKS magic number); is ssl.keystore.type right?")
    version = reader.uint32()
    if version not in (1, 2):
        raise KeyStoreError(f"JKS version {version} is not known")
    contents = KeyStoreContents()
    for _ in range(reader.uint32()):
        tag, alias = reader.uint32(), reader.utf()
        reader.take(8)  # the entry's creation time
        if tag == _PRIVATE_KEY_ENTRY:
            protected = reader.take(reader.uint32())
            chain = [_certificate(reader, version) for _ in range(reader.uint32())]
            key = _unprotect(protected, key_password, alias) if keys_wanted else b""
            contents.private_keys.append((alias, key, chain))
        elif tag == _TRUSTED_CERT_ENTRY:
            contents.trusted.append((alias, _certificate(reader, version)))
        else:
            raise KeyStoreError(f"entry {alias!r} has the unknown tag {tag}")
    body_end = reader.position
    digest = reader.take(_DIGEST)
    if store_password is not None:
        expected = hashlib.sha1(_utf16(store_password) + _INTEGRITY_SALT + data[:body_end]).digest()
        if not hmac.compare_digest(digest, expected):
            raise KeyStoreError("its integrity check failed: the store password is wrong or the file is damaged")
    return contents


def _certificate(reader: "_Reader", version: int) -> bytes:
    if version == 2:
        kind = reader.utf()
        if kind != "X.509":
            raise KeyStoreError(f"a certificate of type {kind!r} is not read (X.509 is)")
    return reader.take(reader.uint32())


def _unprotect(protected: bytes, password: str | None, alias: str) -> bytes:
    """Sun's KeyProtector.recover: the PKCS#8 key inside an EncryptedPrivateKeyInfo."""
    if password is None:
        raise KeyStoreError(f"the key {alias!r} needs a password: set ssl.key.password (or ssl.keystore.password)")
    algorithm, encrypted = _encrypted_private_key_info(protected)
    if algorithm != _SUN_KEY_PROTECTOR_OID:
        raise KeyStoreError(f"the key {alias!r} is protected by an algorithm other than JKS's own")
    if len(encrypted) < 2 * _DIGEST:
        raise KeyStoreError(f"the key {alias!r} is truncated")
    salt, body, check = encrypted[:_DIGEST], encrypted[_DIGEST:-_DIGEST], encrypted[-_DIGEST:]
    secret = _utf16(password)
    stream = bytearray()
    digest = salt
    while len(stream) < len(body):
        digest = hashlib.sha1(secret + digest).digest()
        stream += digest
    key = bytes(a ^ b for a, b in zip(body, stream))
    if not hmac.compare_digest(hashlib.sha1(secret + key).digest(), check):
        raise KeyStoreError(f"the key {alias!r} does not open with the key password (ssl.key.password)")
    return key


def _encrypted_private_key_info(der: bytes) -> tuple[bytes, bytes]:
    """(algorithm OID bytes, encrypted data) of SEQUENCE { SEQUENCE { OID, ... }, OCTET STRING }."""
    outer = _Der(der)
    body = _Der(outer.expect(0x30))
    algorithm = _Der(body.expect(0x30))
    oid = algorithm.expect(0x06)
    return oid, body.expect(0x04)


def _read_pkcs12(data: bytes, password: str | None) -> KeyStoreContents:
    try:
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12
    except ImportError:  # pragma: no cover - a runtime dependency
        raise KeyStoreError("reading PKCS12 needs the cryptography package (pip install cryptography)") from None
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
    except ValueError as exc:
        raise KeyStoreError(f"it does not open ({exc}): the store password is wrong or the file is damaged") from None
    contents = KeyStoreContents()
    others = [cert.certificate.public_bytes(Encoding.DER) for cert in store.additional_certs]
    if store.key is not None:
        key = store.key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
        chain = [store.cert.certificate.public_bytes(Encoding.DER)] if store.cert is not None else []
        contents.private_keys.append(("key", key, chain + others))
    else:
        contents.trusted = [(str(index), cert) for index, cert in enumerate(others)]
    return contents


def _utf16(password: str) -> bytes:
    return password.encode("utf-16-be")


def _pem(label: str, der: bytes) -> str:
    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, size: int) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise KeyStoreError("the file is truncated or damaged")
        chunk = self.data[self.position:end]
        self.position = end
        return chunk

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def utf(self) -> str:
        """Java's DataInput.readUTF (modified UTF-8; aliases and type names are plain text)."""
        size = struct.unpack(">H", self.take(2))[0]
        raw = self.take(size)
        try:
            return raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError:
            raise KeyStoreError("an entry name is not valid modified UTF-8") from None


class _Der:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def expect(self, tag: int) -> bytes:
        """The value of the next element, which must have ``tag``."""
        if self.position + 2 > len(self.data) or self.data[self.position] != tag:
            raise KeyStoreError("a protected key is not DER as expected")
        length = self.data[self.position + 1]
        self.position += 2
        if length & 0x80:
            count = length & 0x7F
            if not 0 < count <= 4 or self.position + count > len(self.data):
                raise KeyStoreError("a protected key is not DER as expected")
            length = int.from_bytes(self.data[self.position:self.position + count], "big")
            self.position += count
        value = self.data[self.position:self.position + length]
        if len(value) != length:
            raise KeyStoreError("a protected key is truncated")
        self.position += length
        return value
