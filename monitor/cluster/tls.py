"""The secured local cluster's key material: a CA, one broker certificate and the super user's
SCRAM password, made once under ``<state_dir>/tls/`` (owner-only files) and reused after.

- ``ca.pem`` — the CA certificate clients trust (``kafka.security.ssl_ca_location``);
- ``broker.p12`` — the brokers' key and certificate chain (PKCS#12, the JDK reads it natively),
  valid for ``127.0.0.1``, ``localhost`` and every node's advertised name;
- ``secrets.json`` — the key store's password and the password of ``vigil-admin``, the super
  user the cluster's own checks and ACL management authenticate as;
- ``ca.key`` — the CA's private key, so the broker certificate can be renewed
  (:func:`renew_broker`: a new key store ``broker-<n>.p12`` the running brokers are told to
  load, signed by the same CA, so clients notice nothing).

Every secret is random and never printed; a test greps logs, metrics and evidence for them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

ADMIN_USER = "vigil-admin"
VALID_DAYS = 365


@dataclass(frozen=True)
class TlsFiles:
    ca_pem: Path
    broker_p12: Path
    keystore_password: str
    admin_password: str

    def expires_at(self) -> dt.datetime:
        """When the broker certificate stops being valid (UTC)."""
        cert = x509.load_pem_x509_certificate(self.ca_pem.with_name("broker.pem").read_bytes())
        return cert.not_valid_after_utc


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Vigil local cluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(subject: x509.Name, public_key, issuer: x509.Name, signer, ca: bool, sans: list[x509.GeneralName],
           days: int) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
         .serial_number(x509.random_serial_number()).not_valid_before(now)
         .not_valid_after(now + dt.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
    else:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return b.sign(signer, hashes.SHA256())


def _broker_names(hostnames: list[str]) -> list[x509.GeneralName]:
    return [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
            *(x509.DNSName(h) for h in hostnames)]


def ensure_tls(directory: Path, hostnames: list[str], days: int = VALID_DAYS) -> TlsFiles:
    """The cluster's CA, broker key store and secrets, made on first use (kept after)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_pem, p12, broker_pem, secret_file = (directory / n for n in ("ca.pem", "broker.p12", "broker.pem",
                                                                     "secrets.json"))
    if not (ca_pem.exists() and p12.exists() and broker_pem.exists() and secret_file.exists()):
        ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ca_cert = _issue(_name("Vigil local CA"), ca_key.public_key(), _name("Vigil local CA"), ca_key, True, [], days)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = _issue(_name("vigil-broker"), key.public_key(), ca_cert.subject, ca_key, False,
                      _broker_names(hostnames), days)
        found = {"keystore_password": secrets.token_urlsafe(18), "admin_password": secrets.token_urlsafe(18)}
        _write_private(p12, pkcs12.serialize_key_and_certificates(
            b"broker", key, cert, [ca_cert],
            serialization.BestAvailableEncryption(found["keystore_password"].encode())))
        _write_private(secret_file, json.dumps(found).encode())
        _write_private(directory / "ca.key", ca_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        broker_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    found = json.loads(secret_file.read_text())
    return TlsFiles(ca_pem, p12, found["keystore_password"], found["admin_password"])


def renew_broker(directory: Path, hostnames: list[str], days: int) -> tuple[Path, bytes]:
    """A new broker certificate valid ``days``, signed by the cluster's CA with the same names,
    written as a new key store ``broker-<n>.p12`` (same password; the brokers load it when their
    ``ssl.keystore.location`` is altered). Returns its path and the certificate (PEM), which the
    caller writes as ``broker.pem`` once every broker took it."""
    files = ensure_tls(directory, hostnames)
    key_file = directory / "ca.key"
    if not key_file.exists():
        raise ValueError(f"{key_file}: missing; this cluster's CA was made before certificates could be renewed "
                         f"(with the cluster down, remove {directory}: the next start makes a new CA)")
    ca_key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(files.ca_pem.read_bytes())
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _issue(_name("vigil-broker"), key.public_key(), ca_cert.subject, ca_key, False, _broker_names(hostnames),
                  days)
    n = 1 + max([int(p.stem.split("-")[1]) for p in directory.glob("broker-*.p12")], default=0)
    store = directory / f"broker-{n}.p12"
    _write_private(store, pkcs12.serialize_key_and_certificates(
        b"broker", key, cert, [ca_cert], serialization.BestAvailableEncryption(files.keystore_password.encode())))
    return store, cert.public_bytes(serialization.Encoding.PEM)
