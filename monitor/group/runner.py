"""Run the group canary's members as child processes: started, stopped, killed, paused, restarted.

Each member is ``python -m monitor.group.member`` with the cluster's librdkafka settings in a file
of its own (it may hold the SASL password: the owner's only). Its stdin is a pipe held by this
process, so a member outlives no kill -9 of its runner. Stopping one asks it to close (SIGTERM)
and kills it after ``close_bound_s``.
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
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily

from monitor import client_config
from monitor.audit.reader import committed_to_the_end
from monitor.config import Config


@dataclass
class GroupCanary:
    cfg: Config
    topic: str
    workdir: Path
    group: str = ""
    obs_topic: str = ""
    members: int = 0
    static: bool | None = None
    protocol: str = ""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)  # member -> monotonic, of its last start

    def __post_init__(self) -> None:
        g = self.cfg.groups
        self.group = self.group or g.group
        self.obs_topic = self.obs_topic or g.observation_topic
        self.members = self.members or g.members
        self.static = g.static if self.static is None else self.static
        self.protocol = self.protocol or g.protocol

    @property
    def names(self) -> list[str]:
        return [f"m{i}" for i in range(self.members)]

    def control(self, member: str) -> Path:
        return self.workdir / f"control.{member}"

    def start(self, member: str | None = None, static: bool | None = None, rack: str | None = None) -> None:
        """Start every member (or one); ``static`` overrides the configured membership for it,
        ``rack`` its ``client.rack`` (by default the last member's is ``groups.rack``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "client.json"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(client_config.admin(self.cfg), f)
        for name in [member] if member else self.names:
            if name in self.procs and self.procs[name].poll() is None:
                continue
            is_static = self.static if static is None else static
            cmd = [sys.executable, "-m", "monitor.group.member", "--conf", str(conf), "--member", name,
                   "--group", self.group, "--topic", self.topic, "--obs-topic", self.obs_topic,
                   "--protocol", self.protocol, "--session-timeout-ms", str(self.cfg.groups.session_timeout_ms),
                   "--commit-interval-ms", str(self.cfg.groups.commit_interval_ms),
                   "--control", str(self.control(name))] + (["--static"] if is_static else [])
            client_rack = rack if rack is not None else (self.cfg.groups.rack if name == self.names[-1] else "")
            if client_rack:
                cmd += ["--rack", client_rack]
            log = open(self.workdir / f"{name}.log", "ab")
            self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=log)
            self.started_at[name] = time.monotonic()
            log.close()

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def kill(self, member: str) -> None:
        proc = self.procs.get(member)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def pause(self, member: str) -> None:
        self.procs[member].send_signal(signal.SIGSTOP)

    def resume(self, member: str) -> None:
        self.procs[member].send_signal(signal.SIGCONT)

    def stop(self, member: str | None = None, close_bound_s: float = 30.0) -> None:
        names = [member] if member else list(self.procs)
        for name in names:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for name in names:
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.wait(timeout=close_bound_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def drill(self, kind: str, member: str = "m0") -> None:
        """Ask ``member`` (running or not yet: the file waits for it) for a drill."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path(f"{self.control(member)}.{kind}").write_bytes(b"")


def canary_for(cfg: Config) -> GroupCanary:
    """The configured group canary: it reads the canary topic; its files are under ``<state_dir>/group``."""
    return GroupCanary(cfg, cfg.canary.name, Path(cfg.state_dir) / "group")


class GroupRunner:
    """The group canary inside `vigil run`: its members started with the writers, each started
    again when it exits (with a growing wait when it keeps failing), drained after the writers
    (until the group committed past every record), then stopped."""

    def __init__(self, cfg: Config, registry: CollectorRegistry | None = None,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.cfg = cfg
        self.canary = canary_for(cfg)
        self.say = say
        self.exits: Counter = Counter()  # member -> exits by itself
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if registry is not None:
            registry.register(self)

    def start(self) -> None:
        self.canary.start()
        self._thread = threading.Thread(target=self._supervise, name="vigil-group-members", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        wait: dict[str, float] = {}
        due: dict[str, float] = {}
        while not self._stop.wait(1.0):
            now = time.monotonic()
            for name, proc in list(self.canary.procs.items()):
                if proc.poll() is None or self._stop.is_set():
                    continue
                if name not in due:
                    self.exits[name] += 1
                    ran_s = now - self.canary.started_at.get(name, now)
                    wait[name] = 1.0 if ran_s > 60 else min(30.0, wait.get(name, 0.5) * 2)
                    due[name] = now + wait[name]
                    self.say(f"group member {name} exited (code {proc.returncode}; "
                             f"{self.canary.workdir / (name + '.log')}): starting it again in {wait[name]:.0f} s")
                elif now >= due[name]:
                    del due[name]
                    self.canary.start(name)

    def drain(self, timeout_s: float) -> bool:
        """Wait until the group committed past every record the canary topic holds (the writers
        have stopped); False when it did not within ``timeout_s``."""
        if committed_to_the_end(self.cfg, self.canary.group, self.canary.topic, timeout_s):
            return True
        self.say(f"the group canary did not consume the canary topic to its end within {timeout_s:.0f} s")
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.canary.stop()

    def collect(self) -> Iterator[CounterMetricFamily]:
        exits = CounterMetricFamily("vigil_group_member_exits", "group canary member processes that ended by "
                                    "themselves (each started again)", labels=["member"])
        for name in self.canary.names:
            exits.add_metric([name], self.exits.get(name, 0))
        yield exits
