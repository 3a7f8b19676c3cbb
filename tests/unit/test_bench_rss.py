"""`vigil bench`'s peak RSS and CPU leave the local Kafka cluster out, even as the bench's children."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from monitor.bench import PeakRss, local_cluster_pids
from monitor.config import parse

HOG = "import time; x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(30)"


def _peak_mb(exclude) -> float:
    with PeakRss(interval=0.05, exclude=exclude) as rss:
        time.sleep(0.5)
    return rss.peak / 2**20


def test_a_child_left_out_counts_neither_its_memory_nor_its_children():
    """A child holding 300 MB (a broker the bench started) counts while it is not left out."""
    before = _peak_mb(set)  # (this process: a pytest worker may hold hundreds of MB already)
    hog = subprocess.Popen([sys.executable, "-c",
                            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOG!r}])"])
    try:
        deadline = time.monotonic() + 20
        while _peak_mb(set) < before + 300 and time.monotonic() < deadline:  # (until the grandchild has its 300 MB)
            time.sleep(0.2)
        counted = _peak_mb(set)
        left_out = _peak_mb(lambda: {hog.pid})
    finally:
        for p in [*psutil.Process(hog.pid).children(recursive=True), psutil.Process(hog.pid)]:
            p.kill()
        hog.wait(10)
    assert counted - left_out > 250, (counted, left_out)


def test_a_configured_cluster_leaves_nothing_out_and_a_stopped_local_one_nothing_either(tmp_path):
    configured = parse({"kafka": {"bootstrap_servers": "broker.example:9092"}})
    assert local_cluster_pids(configured)() == set()
    local = parse({"cluster": {"state_dir": str(tmp_path / "cluster")}})
    assert local.embedded and local_cluster_pids(local)() == set()
