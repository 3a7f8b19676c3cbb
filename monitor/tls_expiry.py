"""How long the TLS certificates Vigil depends on stay valid.

With ``kafka.security.protocol`` SSL or SASL_SSL (and the same for a ledger on its own cluster),
:class:`CertificateWatch` looks, every ``watch.certificate_check_interval_s``, at:

* ``broker``: the certificate each bootstrap address presents in a TLS handshake (read, not
  verified: an expired or untrusted certificate is exactly what should still be reported; no
  credentials are sent);
* ``ca``: the earliest expiry in the CA bundle ``ssl_ca_location``;
* ``client``: the client certificate ``ssl_certificate_location``.

A renewed certificate shows at the next look, without a restart — the brokers' one as soon as
they present it, the files as soon as they are replaced. An address that does not answer keeps
its last known expiry (its certificate did not change by being unreachable); a failed look is
counted in ``failures``. Exported as ``vigil_tls_certificate_expiry_timestamp_seconds`` by
:class:`CertificateExpiryCollector`; the alert ``VigilCertificateExpiresSoon`` reads it.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path
from typing import Callable, Iterator

from cryptography import x509
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from monitor.config import Config, KafkaConfig
from monitor.periodic import start_periodic

Source = tuple[str, str, str]  # (cluster: canary | ledger, certificate: broker | ca | client, where)


def presented_expiry(address: str, timeout_s: float) -> float:
    """When the certificate a TLS server at ``host:port`` presents stops being valid (Unix time).
    Unverified on purpose: the expiry of an expired or untrusted certificate is what is wanted."""
    host, _, port = address.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as raw:
        with ctx.wrap_socket(raw, server_hostname=host.strip("[]")) as tls:
            der = tls.getpeercert(binary_form=True)
    if not der:
        raise ssl.SSLError(f"{address} presented no certificate")
    return x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp()


def file_expiry(path: str) -> float:
    """The earliest expiry among the PEM certificates in ``path`` (Unix time)."""
    certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    return min(c.not_valid_after_utc.timestamp() for c in certs)


def sources(cfg: Config) -> list[tuple[Source, Callable[[], float]]]:
    """What to look at for ``cfg``: nothing when no cluster Vigil talks to uses TLS."""
    timeout = 5.0
    out: list[tuple[Source, Callable[[], float]]] = []
    clusters: list[tuple[str, KafkaConfig, str]] = [("canary", cfg.kafka, cfg.canary_bootstrap())]
    if cfg.ledger.kafka is not None and cfg.ledger_bootstrap() != cfg.canary_bootstrap():
        clusters.append(("ledger", cfg.ledger.kafka, cfg.ledger_bootstrap()))
    for cluster, kafka, bootstrap in clusters:
        sec = kafka.security
        if not sec.protocol.endswith("SSL"):
            continue
        for address in [a.strip() for a in bootstrap.split(",") if a.strip()]:
            out.append(((cluster, "broker", address), lambda a=address: presented_expiry(a, timeout)))
        if sec.ssl_ca_location:
            out.append(((cluster, "ca", sec.ssl_ca_location), lambda p=sec.ssl_ca_location: file_expiry(p)))
        if sec.ssl_certificate_location:
            out.append(((cluster, "client", sec.ssl_certificate_location),
                        lambda p=sec.ssl_certificate_location: file_expiry(p)))
    return out


class CertificateWatch:
    """The expiry of every certificate of :func:`sources`, looked at every ``interval_s``."""

    def __init__(self, cfg: Config, stop: threading.Event) -> None:
        self.sources = sources(cfg)
        self.interval_s = cfg.watch.certificate_check_interval_s
        self.stop = stop
        self.lock = threading.Lock()
        self.expiry: dict[Source, float] = {}
        self.failures: dict[Source, int] = {}
        self.last_error: str | None = None

    def look(self) -> None:
        """One look at every source."""
        for source, read in self.sources:
            try:
                when = read()
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError; a bad PEM a ValueError
                with self.lock:
                    self.failures[source] = self.failures.get(source, 0) + 1
                    self.last_error = f"{source[1]} certificate of {source[2]}: {exc}"
                continue
            with self.lock:
                self.expiry[source] = when

    def start(self) -> threading.Thread | None:
        """Look now and then every ``interval_s`` until ``stop`` is set (no thread without TLS)."""
        if not self.sources:
            return None

        def failed(exc: Exception) -> None:
            with self.lock:
                self.last_error = f"looking at the certificates failed: {type(exc).__name__}: {exc}"

        return start_periodic("vigil-certificates", self.interval_s, self.stop, self.look, failed)

    def snapshot(self) -> tuple[dict[Source, float], dict[Source, int]]:
        with self.lock:
            return dict(self.expiry), dict(self.failures)


class CertificateExpiryCollector:
    """``vigil_tls_certificate_expiry_timestamp_seconds`` and ``vigil_tls_certificate_check_failures_total``
    from a :class:`CertificateWatch` (no series without TLS)."""

    def __init__(self, watch: CertificateWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        expiry, failures = self.watch.snapshot()
        labels = ["cluster", "certificate", "source"]
        fam = GaugeMetricFamily("vigil_tls_certificate_expiry_timestamp_seconds",
                                "When a TLS certificate Vigil depends on stops being valid (Unix time): the one "
                                "each bootstrap broker presents (certificate=broker, source=host:port), the CA "
                                "bundle's earliest (ca) and the client certificate (client, source=file), per "
                                "cluster (canary, ledger). Looked at every watch.certificate_check_interval_s.",
                                labels=labels)
        for (cluster, cert, where), when in sorted(expiry.items()):
            fam.add_metric([cluster, cert, where], when)
        yield fam
        fails = CounterMetricFamily("vigil_tls_certificate_check_failures", "Looks at a certificate that failed "
                                    "(the broker did not answer the handshake, the file is unreadable); the last "
                                    "known expiry stays exported.", labels=labels)
        for (cluster, cert, where), n in sorted(failures.items()):
            fails.add_metric([cluster, cert, where], n)
        yield fails
