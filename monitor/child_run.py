"""The `vigil run` Vigil starts as a child of its own (`bench --live`, `soak`, chaos runs): a free
metrics port for it, its ``/metrics`` read back, and the wait for its first micro-batch."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url_host(host: str) -> str:
    """``host`` as a URL names it: an IPv6 address in brackets."""
    host = host.strip("[]")
    return f"[{host}]" if ":" in host else host


def scrape(port: int, host: str = "127.0.0.1") -> dict[tuple[str, tuple], float]:
    """``/metrics`` of a `vigil run` (on this machine by default): (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{url_host(host)}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def first_batch(port: int, proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait until the run on ``port`` completed a micro-batch (True); False when ``proc`` exited
    or ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if scrape(port).get(("vigil_batches_total", ())):
                return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def stop(proc: subprocess.Popen, timeout_s: float, dump_to: Path | None = None) -> int:
    """Stop a `vigil run` the way it stops cleanly (SIGTERM: writers finish, the checker drains);
    if it has not exited within ``timeout_s``, write its threads to ``dump_to`` first (the Python
    stacks to its own stderr, the JVMs' to ``dump_to``), then SIGKILL. Returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        if dump_to is not None:
            dump_threads(proc.pid, dump_to)
        proc.kill()
        return proc.wait()


def dump_threads(pid: int, out: Path) -> None:
    """Every thread of a hung `vigil run`: SIGUSR1 makes the process print its Python stacks to its
    stderr (:func:`monitor.cli.main` registers it, which works while a thread holds the GIL), and
    ``jstack`` prints those of each JVM below it (Spark's driver) into ``out``."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return
    lines = [f"# `vigil run` (pid {pid}) did not stop; its Python stacks are at the end of its stderr\n"]
    for child in own_processes(pid)[1:]:
        try:
            if child.name() != "java":  # Spark's driver JVM
                continue
            exe = Path(child.exe())
        except psutil.Error:
            continue
        jstack = exe.parent / "jstack"  # the JDK that runs it (a JRE has none: then the one on PATH)
        tool = str(jstack) if jstack.exists() else shutil.which("jstack")
        if tool is None:
            lines.append(f"# java {child.pid}: no jstack (a JRE only); `jcmd {child.pid} Thread.print` from a JDK\n")
            continue
        try:
            got = subprocess.run([tool, str(child.pid)], capture_output=True, text=True, timeout=30)
            lines.append(f"# jstack {child.pid}\n{got.stdout}{got.stderr}\n")
        except (OSError, subprocess.TimeoutExpired) as exc:
            lines.append(f"# jstack {child.pid} failed: {exc}\n")
    time.sleep(1.0)  # the Python stacks are written by the process itself
    out.write_text("".join(lines))


def own_processes(pid: int) -> list[psutil.Process]:
    """A `vigil run` process and every process below it in its session (first the root; empty when
    it is gone): not the brokers and the link proxy a `vigil run` of the embedded cluster started,
    which run in sessions of their own."""
    try:
        root = psutil.Process(pid)
        session = os.getsid(pid)
        below = root.children(recursive=True)
    except (OSError, psutil.Error):
        return []
    return [root, *(p for p in below if _session(p.pid) == session)]


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None
