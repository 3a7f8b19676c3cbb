"""A Spark standalone cluster on this machine: one master and N workers, each its own JVM.

The pyspark wheel carries ``bin/spark-class`` but not the ``sbin/start-*.sh`` scripts, so the
daemons are started directly: ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``, on loopback, with their own ports, work directories
(``SPARK_WORKER_DIR``) and logs under ``root``. Executors are launched by the workers in separate
JVMs; their Python is whatever the job sets (``watch.executor_python``). Used by ``vigil spark``,
``vigil bench --standalone N`` and the scale-out test; point ``watch.spark_master`` at
:attr:`StandaloneSpark.master_url`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from monitor.cluster.java import find_java
from monitor.watch.spark import SPARK_JAVA_MAX


class StandaloneError(RuntimeError):
    pass


@dataclass
class StandaloneSpark:
    root: Path
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    port_base: int = 27077  # master RPC; +1 master UI; workers +10.. (RPC) and +20.. (UI)
    java_home: str = ""

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port_base}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port_base + 1}"

    def _env(self) -> dict[str, str]:
        import pyspark

        java = find_java(self.java_home, max_major=SPARK_JAVA_MAX)
        home = Path(pyspark.__file__).parent
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        env.update(SPARK_HOME=str(home), JAVA_HOME=str(Path(os.path.realpath(java.executable)).parent.parent),
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.root / "logs"),
                   SPARK_WORKER_DIR=str(self.root / "work"))
        return env

    def _spark_class(self) -> str:
        import pyspark

        return str(Path(pyspark.__file__).parent / "bin" / "spark-class")

    def _start(self, name: str, args: list[str]) -> int:
        log = (self.root / "logs" / f"{name}.log").open("ab")
        proc = subprocess.Popen([self._spark_class(), *args], env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True)
        (self.root / f"{name}.pid").write_text(str(proc.pid))
        return proc.pid

    def up(self, progress: Callable[[str], None] = lambda _m: None, timeout_s: float = 90) -> None:
        """Start the master and the workers (unless up already) and wait until every worker is ALIVE."""
        if self.alive_workers() >= self.workers:
            return
        for sub in ("logs", "work"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for port in (self.port_base, self.port_base + 1):
            _free(port)
        progress(f"starting a Spark master on {self.master_url} and {self.workers} workers")
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port_base), "--webui-port", str(self.port_base + 1)])
        _wait(lambda: _listening(self.port_base), timeout_s, f"the Spark master on port {self.port_base}",
              self.root / "logs" / "master.log")
        for i in range(self.workers):
            (self.root / "work" / f"worker-{i + 1}").mkdir(parents=True, exist_ok=True)
            self._start(f"worker-{i + 1}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--port", str(self.port_base + 10 + i), "--webui-port", str(self.port_base + 20 + i),
                "--cores", str(self.cores_per_worker), "--memory", self.memory_per_worker,
                "--work-dir", str(self.root / "work" / f"worker-{i + 1}"), self.master_url])
        _wait(lambda: self.alive_workers() >= self.workers, timeout_s, f"{self.workers} Spark workers ALIVE",
              self.root / "logs" / "worker-1.log")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def pids(self) -> list[int]:
        """The daemons' process ids (their executors are their children)."""
        out = []
        for f in sorted(self.root.glob("*.pid")):
            try:
                pid = int(f.read_text())
                os.kill(pid, 0)
                out.append(pid)
            except (OSError, ValueError):
                pass
        return out

    def down(self, timeout_s: float = 30) -> None:
        """Stop the workers (and their executors) and the master."""
        pids = self.pids()
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(_exists(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            if _exists(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        for f in self.root.glob("*.pid"):
            f.unlink(missing_ok=True)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of ours (we started it) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free(port: int) -> None:
    if _listening(port):
        raise StandaloneError(f"port 127.0.0.1:{port} is in use; stop what holds it or choose another port base")


def _wait(pred: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise StandaloneError(f"timed out after {timeout_s:.0f} s waiting for {what}; log tail:\n{tail}")
