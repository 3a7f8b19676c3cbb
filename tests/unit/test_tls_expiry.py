"""Certificate expiry: read from a real TLS handshake on loopback and from PEM files."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from monitor.cluster.tls import ensure_tls
from monitor.config import Config
from monitor.tls_expiry import CertificateExpiryCollector, CertificateWatch, file_expiry, presented_expiry, sources


def tls_server(directory, days: int) -> tuple[str, float, threading.Event]:
    """A TLS server on loopback presenting a certificate valid ``days``; (address, its expiry, stop)."""
    files = ensure_tls(directory, ["node-1"], days=days)
    key, cert, _chain = pkcs12.load_key_and_certificates(files.broker_p12.read_bytes(), files.keystore_password.encode())
    pem = directory / "server.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pem)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except OSError:
                pass
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}", cert.not_valid_after_utc.timestamp(), stop


def test_the_certificate_a_server_presents_is_read_without_trusting_it(tmp_path):
    address, expires, stop = tls_server(tmp_path, days=9)
    try:
        assert presented_expiry(address, 5) == expires  # signed by a CA this process does not know
    finally:
        stop.set()


def test_the_earliest_certificate_of_a_bundle_counts(tmp_path):
    short = ensure_tls(tmp_path / "a", ["n"], days=3)
    long = ensure_tls(tmp_path / "b", ["n"], days=400)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(long.ca_pem.read_bytes() + short.ca_pem.read_bytes())
    want = x509.load_pem_x509_certificate(short.ca_pem.read_bytes()).not_valid_after_utc.timestamp()
    assert file_expiry(str(bundle)) == want


def config(**security) -> Config:
    return Config.model_validate({"kafka": {"bootstrap_servers": "127.0.0.1:1,127.0.0.1:2", "security": security}})


def test_nothing_is_looked_at_without_tls():
    assert sources(config()) == []
    assert sources(config(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
                          sasl_password="p")) == []
    watch = CertificateWatch(config(), threading.Event())
    assert watch.start() is None


def test_a_broker_that_does_not_answer_keeps_its_last_known_expiry_and_counts_a_failure(tmp_path):
    address, expires, stop = tls_server(tmp_path / "tls", days=30)
    ca = str(tmp_path / "tls" / "ca.pem")
    cfg = Config.model_validate({"kafka": {"bootstrap_servers": address,
                                           "security": {"protocol": "SSL", "ssl_ca_location": ca}}})
    watch = CertificateWatch(cfg, threading.Event())
    assert [s for s, _read in watch.sources] == [("canary", "broker", address), ("canary", "ca", ca)]
    watch.look()
    stop.set()
    expiry, failures = watch.snapshot()
    assert expiry[("canary", "broker", address)] == expires
    assert expiry[("canary", "ca", ca)] == pytest.approx(expires, abs=1)  # made together, same validity
    assert failures == {}
    threading.Event().wait(0.5)  # the listener closes
    watch.look()
    expiry, failures = watch.snapshot()
    assert expiry[("canary", "broker", address)] == expires
    assert failures == {("canary", "broker", address): 1}
    assert "broker certificate of " + address in (watch.last_error or "")
    text = {m.name: [(s.labels, s.value) for s in m.samples] for m in CertificateExpiryCollector(watch).collect()}
    assert ({"cluster": "canary", "certificate": "broker", "source": address}, expires) in \
        text["vigil_tls_certificate_expiry_timestamp_seconds"]
    assert ({"cluster": "canary", "certificate": "broker", "source": address}, 1.0) in \
        text["vigil_tls_certificate_check_failures"]
