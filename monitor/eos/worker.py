"""Run the EOS worker as a child process and collect what it reports: on the Java client
(``EosWorker.java``, compiled at setup) or its librdkafka twin (:mod:`monitor.eos.rdkafka_worker`).

The worker's stdout is one JSON event per line, the same for both; a reader thread keeps
them, in order, for whoever watches the worker: the abort positions, the drills it applied,
progress, and how long its ``close()`` took. Its stderr goes to a log file. ``stop`` asks it to
close (SIGTERM) and counts a close that does not return within the bound (KAFKA-17734) before it
kills it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invariants.eos import classify_after_abort, classify_resumed
from monitor import client_config
from monitor.cluster.java import find_java
from monitor.config import Config
from monitor.eos.build import MAIN_CLASS, worker_classpath

EVENT_KINDS = ("started", "assigned", "revoked", "abort", "drill", "progress", "closing", "closed_call", "closed")


def properties(cfg: Config) -> str:
    """The worker's client settings as a Java properties file's text (bootstrap and security)."""
    lines = []
    for key, value in client_config.spark_source(cfg, ledger=False).items():
        lines.append(f"{key.removeprefix('kafka.')}={_escape(value)}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def close_timeout_ms(close_bound_s: float) -> int:
    """The timeout the worker gives each client's close: a quarter less than the bound its runner
    holds each call to (at least 1 s less when the bound allows), so that a close returning at
    its own timeout — a broker unreachable at stop — is not counted hung (KAFKA-17734 is one that
    does not return)."""
    return max(1, int(1000 * min(close_bound_s * 0.75, max(close_bound_s - 1, close_bound_s / 2))))


def after_abort_class(event: dict[str, Any]) -> str:
    """An ``abort`` event's class: by the next poll's first record when it returned one there
    (:func:`invariants.eos.classify_resumed`), else by positions."""
    if event.get("resumed_record") and "first" in event:
        return classify_resumed(event["first"], event["last"], event["resumed"])
    at = event["resumed"] if event["resumed"] >= 0 else event["after"]
    return classify_after_abort(event["before"], event["end"], at, event["committed"])


@dataclass
class EosWorker:
    """One worker process; ``start`` again after ``kill`` is the same worker restarted (same
    transactional id: the new instance fences the old one's open transaction)."""

    cfg: Config
    input_topic: str
    output_topic: str
    group: str
    transactional_id: str
    workdir: Path
    abort_every: int = 5
    client: str = "java"  # or "librdkafka": the twin
    events: list[dict[str, Any]] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    stuck: bool = False  # the last stop found it not even closing: killed
    started_at: float = 0.0  # monotonic, of the last start
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def control(self) -> Path:
        return self.workdir / "control"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [self.input_topic, self.output_topic, self.group, self.transactional_id, str(self.abort_every),
                str(self.control), str(close_timeout_ms(self.cfg.eos.close_bound_s))]
        if self.client == "librdkafka":
            conf = self.workdir / "client.json"  # may hold the SASL password: the owner's only
            self._write_private(conf, json.dumps(client_config.admin(self.cfg)))
            cmd = [sys.executable, "-m", "monitor.eos.rdkafka_worker", str(conf), *args]
        else:
            props = self.workdir / "client.properties"
            self._write_private(props, properties(self.cfg))
            cp = worker_classpath(self.cfg.cluster.kafka_version, self.cfg.watch.java_home)
            java = find_java(self.cfg.watch.java_home).executable
            cmd = [java, "-Xmx256m", "-cp", cp, MAIN_CLASS, str(props), *args]
        log = open(self.workdir / "worker.log", "ab")
        # stdin held open: when this process ends (even by kill -9) the worker reads its end and stops
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.PIPE)
        log.close()
        self.started_at = time.monotonic()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True, name="eos-worker-events").start()

    @staticmethod
    def _write_private(path: Path, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not an event (a JVM warning on stdout): nothing to keep
            if isinstance(event, dict) and event.get("event") in EVENT_KINDS:
                with self._lock:
                    self.events.append(event)

    def after_abort_classes(self) -> "Counter[str]":
        """Where the consumer resumed after each abort (:func:`invariants.eos.classify_resumed`)."""
        return Counter(after_abort_class(a) for a in self.of_kind("abort"))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("event") == kind]

    def wait_for(self, kind: str, count: int, timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(found := self.of_kind(kind)) < count and time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.1)
        return found

    def drill(self, kind: str) -> None:
        """Ask the running worker for a drill (``eos_loss`` or ``eos_duplicate``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path(f"{self.control}.{kind}").write_bytes(b"")

    def kill(self) -> None:
        """SIGKILL, mid-transaction or not."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, close_bound_s: float = 30.0, wind_down_s: float = 180.0) -> bool:
        """Ask it to stop (SIGTERM); False when a ``close()`` hung: the producer's not returned within
        ``close_bound_s`` of the ``closing`` event, or the consumer's within ``close_bound_s`` of the
        producer's (``closed_call``), or the process not gone within ``close_bound_s`` of the
        consumer's: each call is bounded on its own, so two slow closes are not one hang
        (KAFKA-17734); the worker gives each client's close a shorter timeout
        (:func:`close_timeout_ms`). The loop may first finish a blocked call (a commit waits up to
        ``max.block.ms``): that is ``wind_down_s``, and a worker that has not begun closing by then
        is killed and marked ``stuck``, not counted as a hung close."""
        self.stuck = False
        if self.proc is None or self.proc.poll() is not None:
            return True
        closing_before = len(self.of_kind("closing"))
        calls_before = len(self.of_kind("closed_call"))
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + wind_down_s
        while len(self.of_kind("closing")) <= closing_before and self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.stuck = True
                self.kill()
                return True
            time.sleep(0.05)
        calls, since = calls_before, time.monotonic()  # the call under way began then
        while self.proc.poll() is None:
            returned = len(self.of_kind("closed_call"))
            if returned > calls:
                calls, since = returned, time.monotonic()
            if time.monotonic() - since > close_bound_s:  # (both returned, the process still there: what
                self.kill()  # it does at exit hung — the twin's librdkafka handles are destroyed then)
                return False
            time.sleep(0.05)
        return True


def worker_for(cfg: Config) -> EosWorker:
    """The configured pipeline's worker (on ``eos.client``): it reads the canary topic;
    ``<group>-<instance id>`` is its transactional id and static member id; its files are under
    ``<state_dir>/eos``."""
    return EosWorker(cfg, cfg.canary.name, cfg.eos.output_topic, cfg.eos.group,
                     f"{cfg.eos.group}-{cfg.resolved_instance_id()}", Path(cfg.state_dir) / "eos",
                     abort_every=cfg.eos.abort_every, client=cfg.eos.client)
