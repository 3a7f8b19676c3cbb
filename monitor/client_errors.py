"""Errors the Kafka clients report on their own (librdkafka's error callback), per client and kind.

Every client Vigil opens (:mod:`monitor.clients`) reports here. Counted for
``vigil_client_errors_total{client,kind}``; the kinds an operator must act on — the brokers
refused the credentials, or an ACL does not allow what the client asked — are also said as one
line naming the client and the setting to check, at most once a minute per client and kind (the
clients retry on their own meanwhile). Nothing said or counted carries a secret: the line holds
the user name and the client's own error text, which never includes the password.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

from confluent_kafka import KafkaError

QUIET_S = 60.0
SAID = ("authentication", "authorization", "tls")  # the kinds an operator must act on: also said
REFUSED = ("authentication", "authorization")  # the brokers answered, and said no

_AUTHENTICATION = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
_AUTHORIZATION = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                  KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
_TRANSPORT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE}


def classify(err: KafkaError) -> str:
    code = err.code()
    if code in _AUTHENTICATION:
        return "authentication"
    if code in _AUTHORIZATION:
        return "authorization"
    if code == KafkaError._SSL:
        return "tls"
    return "transport" if code in _TRANSPORT else "other"


# Spark's source runs the Java client: its refusals end the query, and reach Vigil as the
# StreamingQueryException's text, naming the Java exception (most specific first)
_JAVA_KINDS = (("SslAuthenticationException", "tls"), ("SaslAuthenticationException", "authentication"),
               ("AuthenticationException", "authentication"), ("AuthorizationException", "authorization"))


def classify_java(text: str) -> tuple[str, str] | None:
    """The kind of refusal a Java client's error text names, and the line that names it (None:
    not a refusal)."""
    for name, kind in _JAVA_KINDS:
        if name in text:
            line = next(ln for ln in text.splitlines() if name in ln).strip()
            return kind, line[line.rfind(" ", 0, line.find(name)) + 1:][:300]
    return None


def advice(kind: str, settings: str, user: str | None) -> str:
    """What to check, naming the settings (``settings``: ``kafka.security`` or ``ledger.kafka.security``)."""
    if kind == "authentication":
        return (f"the brokers refused the credentials of {user!r}: check {settings}.sasl_username and "
                f"{settings}.sasl_password (and sasl_mechanism)")
    if kind == "authorization":
        return f"an ACL does not allow this to {user!r}: grant it what the README's secured-cluster section lists"
    return f"the TLS handshake failed: check {settings}.ssl_ca_location (the CA that signed the brokers' certificates)"


class ClientErrors:
    def __init__(self, say: Callable[[str], None] | None = None, quiet_s: float = QUIET_S) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.quiet_s = quiet_s
        self._said: dict[tuple[str, str], float] = {}
        self._known: set[str] = set()  # clients with a callback: their alerting kinds are exported from 0
        self._lock = threading.Lock()

    def report(self, client: str, err: KafkaError, settings: str = "kafka.security", user: str | None = None,
               now: float | None = None) -> str:
        """Count one error of ``client``; returns its kind."""
        kind = classify(err)
        self.report_kind(client, kind, err.str(), settings, user, now)
        return kind

    def report_kind(self, client: str, kind: str, text: str, settings: str = "kafka.security",
                    user: str | None = None, now: float | None = None) -> None:
        """Count one error of ``client`` already classified (``text``: the client's own words,
        never holding a secret)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self.counts[(client, kind)] += 1
            due = kind in SAID and \
                now - self._said.get((client, kind), -self.quiet_s) >= self.quiet_s
            if due:
                self._said[(client, kind)] = now
        if due:
            self.say(f"vigil: {client}: {advice(kind, settings, user)} ({text}); retrying")

    def callback(self, client: str, settings: str = "kafka.security", user: str | None = None,
                 also: Callable[[Any], None] | None = None) -> Callable[[KafkaError], None]:
        """An ``error_cb`` for one client (``also``: the client's own callback, called first). From
        now on the kinds an operator must act on are exported for it at 0 until they happen, so
        an alert on their increase sees the first one too (a series that appears at 1 shows none)."""
        with self._lock:
            self._known.add(client)

        def on_error(err: KafkaError) -> None:
            if also is not None:
                also(err)
            self.report(client, err, settings, user)
        return on_error

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return {**{(client, kind): 0 for client in self._known for kind in SAID}, **self.counts}


ERRORS = ClientErrors()  # the process's clients all report here
