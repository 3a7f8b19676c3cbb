"""A rotated SASL password, picked up without a restart.

With ``kafka.security.sasl_password_file`` (or the ledger's), :class:`CredentialWatch` reads the
file again every ``watch.credentials_check_interval_s``. When its content changed, every client
this process has open for that cluster (:data:`monitor.clients.OPEN`: writers, ledger, prober,
re-fetcher, admin) gets the new password (librdkafka's ``set_sasl_credentials``): its next
connection and its next re-authentication (KIP-368, when the brokers set
``connections.max.reauth.ms``) use it; connections already authenticated stay up. Spark's Kafka
source takes its JAAS configuration when its query starts: once its connections are refused with
the old password, the query fails and is started again by the supervisor with the file's current
content — a restart of the query, not of the monitor. Counted in
``vigil_credential_reloads_total{cluster}``; a file that cannot be read is said on stderr and
the old password kept.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Iterator

from confluent_kafka import KafkaException
from prometheus_client.core import CounterMetricFamily

from monitor import clients
from monitor.config import Config, ConfigError, SecurityConfig
from monitor.periodic import start_periodic


def _snapshot(clients_open: Any) -> list:
    """The clients of a WeakSet now (another thread may open one while it is iterated)."""
    for _ in range(5):
        try:
            return list(clients_open)
        except RuntimeError:
            continue
    return []


class CredentialWatch:
    def __init__(self, cfg: Config, stop: threading.Event,
                 say: Callable[[str], None] | None = None) -> None:
        # (cluster, settings key, security, the client sets it applies to)
        self.files: list[tuple[str, str, SecurityConfig, tuple[bool, ...]]] = []
        if cfg.kafka.security.sasl_password_file:
            self.files.append(("canary", "kafka.security", cfg.kafka.security,
                               (False,) if cfg.ledger.kafka is not None else (False, True)))
        if cfg.ledger.kafka is not None and cfg.ledger.kafka.security.sasl_password_file:
            self.files.append(("ledger", "ledger.kafka.security", cfg.ledger.kafka.security, (True,)))
        self.interval_s = cfg.watch.credentials_check_interval_s
        self.stop = stop
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.current: dict[str, str | None] = {}
        for cluster, _key, sec, _sets in self.files:
            try:
                self.current[cluster] = sec.password()
            except ConfigError:
                self.current[cluster] = None
        self.reloads: dict[str, int] = {cluster: 0 for cluster, *_ in self.files}
        self.lock = threading.Lock()

    def look(self) -> None:
        """Read every password file once; give a changed password to every open client."""
        for cluster, key, sec, sets in self.files:
            try:
                password = sec.password()
            except ConfigError as exc:
                self.say(f"vigil: {key}.{exc} (keeping the password read before)")
                continue
            if not password or password == self.current.get(cluster):
                continue  # empty: a file being rewritten (truncated, not yet written), read next time
            given = 0
            for ledger in sets:
                for client in _snapshot(clients.OPEN[ledger]):
                    try:
                        with clients.CLOSING:  # not while it closes (clients.CLOSING)
                            client.set_sasl_credentials(sec.sasl_username, password)
                        given += 1
                    except (RuntimeError, KafkaException):  # a client closed before
                        continue
            with self.lock:
                self.current[cluster] = password
                self.reloads[cluster] += 1
            self.say(f"vigil: {key}.sasl_password_file changed: {given} open client(s) use the new password; "
                     "Spark's source takes it when its query starts again")

    def start(self) -> threading.Thread | None:
        if not self.files:
            return None

        return start_periodic(
            "vigil-credentials", self.interval_s, self.stop, self.look, first_now=False,
            on_error=lambda exc: self.say(f"vigil: reading the SASL password files failed ({type(exc).__name__}); "
                                          "trying again"))

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily("vigil_credential_reloads", "Changes of a SASL password file "
                                  "(kafka.security.sasl_password_file, the ledger's) given to the open clients "
                                  "without a restart.", labels=["cluster"])
        with self.lock:
            for cluster, n in sorted(self.reloads.items()):
                fam.add_metric([cluster], n)
        yield fam
