"""The control plane's certificates and keys: one CA that signs the serving certificates and the client
certificates (the admin's, the controller manager's), and the key pair ServiceAccount tokens are signed
with. ECDSA P-256 throughout: fast to generate, accepted by every component."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for a development plane left running; the files live only as long as its state folder.
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def _private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, secret: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600 if secret else 0o644)
    path.write_bytes(data)
    return path


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA kept in a folder, issuing leaf certificates into it."""

    def __init__(self, folder: Path, common_name: str = "raybus-realkube-ca") -> None:
        self.folder = folder
        self._key = _private_key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.files = KeyPair(
            _write(folder / "ca.crt", self._cert.public_bytes(serialization.Encoding.PEM), secret=False),
            _write(folder / "ca.key", _key_pem(self._key), secret=True),
        )

    def serving(self, name: str, hosts: Sequence[str]) -> KeyPair:
        """A server certificate for ``hosts`` (IP addresses or DNS names), written as ``<name>.crt/.key``."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(name, _name(name), ExtendedKeyUsageOID.SERVER_AUTH, x509.SubjectAlternativeName(sans))

    def client(self, name: str, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate authenticating as ``user`` in ``groups``, written as ``<name>.crt/.key``."""
        return self._issue(name, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, None)

    def _issue(
        self,
        name: str,
        subject: x509.Name,
        purpose: x509.ObjectIdentifier,
        sans: x509.SubjectAlternativeName | None,
    ) -> KeyPair:
        key = _private_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if sans is not None:
            builder = builder.add_extension(sans, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(
            _write(self.folder / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM), secret=False),
            _write(self.folder / f"{name}.key", _key_pem(key), secret=True),
        )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass(frozen=True)
class SigningKey:
    """A bare key pair for signing tokens, as PEM files."""

    private: Path
    public: Path


def signing_key(folder: Path, name: str) -> SigningKey:
    """A new signing key pair, written as ``<name>.key`` (private) and ``<name>.pub`` (public)."""
    key = _private_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return SigningKey(
        private=_write(folder / f"{name}.key", _key_pem(key), secret=True),
        public=_write(folder / f"{name}.pub", public, secret=False),
    )
