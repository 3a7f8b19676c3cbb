"""The `vigil run` Vigil starts as a child of its own (`bench --live`, `soak`, chaos runs): a free
metrics port for it, its ``/metrics`` read back, and the wait for its first micro-batch."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, host: str = "127.0.0.1") -> dict[tuple[str, tuple], float]:
    """``/metrics`` of a `vigil run` (on this machine by default): (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
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
