"""`vigil bench`'s peak RSS and CPU leave the local Kafka cluster out, even as the bench's children."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import psutil

from monitor.bench import PeakRss, local_cluster_pids
from monitor.config import parse

class Sampled:
    """A process of the sampled tree reading ``readings`` (MB) one sample after another, then ``rest``."""

    def __init__(self, pid: int, name: str, readings: list[int], rest: int) -> None:
        self.pid, self._name, self._readings, self._rest = pid, name, iter(readings), rest

    def name(self) -> str:
        return self._name

    def memory_info(self):
        return SimpleNamespace(rss=next(self._readings, self._rest) * 2**20)

    def cpu_times(self):
        return SimpleNamespace(user=0.0, system=0.0, children_user=0.0, children_system=0.0)


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


def test_a_lookup_that_failed_is_made_again_at_the_next_sample():
    """The brokers' lookup failed once under load and a run counted them: it is made at every sample."""
    before = _peak_mb(set)
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    calls = []

    def flaky() -> set[int]:
        calls.append(1)
        return set() if len(calls) == 1 else {hog.pid}  # (the first lookup, at the start, finds nothing)
    try:
        deadline = time.monotonic() + 20
        while _peak_mb(set) < before + 300 and time.monotonic() < deadline:
            time.sleep(0.2)
        with PeakRss(interval=0.05, exclude=flaky) as rss:
            time.sleep(0.5)
        counted = _peak_mb(set)
    finally:
        hog.kill()
        hog.wait(10)
    assert len(calls) > 2 and rss.figures(1, 1.0)["left_out"] == 1
    assert counted - rss.peak / 2**20 > 250, (counted, rss.peak / 2**20)


def test_a_configured_cluster_leaves_nothing_out_and_a_stopped_local_one_nothing_either(tmp_path):
    configured = parse({"kafka": {"bootstrap_servers": "broker.example:9092"}})
    assert local_cluster_pids(configured)() == set()
    local = parse({"cluster": {"state_dir": str(tmp_path / "cluster")}})
    assert local.embedded and local_cluster_pids(local)() == set()


def test_a_peak_counts_once_two_samples_in_a_row_reach_it(monkeypatch):
    """A child being spawned reads, until it execs, as its parent's RSS: one sample of it is no peak."""
    mb = 2**20
    readings = [100, 100, 5000, 100, 100, 300, 300, 120]  # (MB) a spike of one sample, then a level of two
    monkeypatch.setattr(PeakRss, "_tree", lambda self, p=Sampled(1, "python3", readings, 120): [p])
    with PeakRss(interval=0.01) as rss:
        time.sleep(0.5)
    assert rss.peak == 300 * mb


def test_a_window_too_short_for_two_samples_still_has_a_peak_and_a_child_counts_once():
    """Under two samples (a reader that finished within one interval) the highest sample is the
    peak, not 0; a process found both as a child and as ``extra`` (a standalone cluster's daemon)
    counts once."""
    me = psutil.Process().pid
    with PeakRss(interval=10.0) as rss:
        pass
    assert rss.peak > 0
    once = PeakRss(extra=lambda: [me])
    assert [p.pid for p in once._tree()].count(me) == 1



def test_the_jvms_and_the_python_processes_peak_apart(monkeypatch):
    """``peak_rss_mb_by_kind``: Spark's JVMs and the Python processes, each its own peak under the
    total's rule (two samples in a row), so a run says which of them grew."""
    mb = 2**20
    jvm = [500, 500, 9000, 500, 700, 700, 600]  # (MB) a one-sample spike, then a level of two
    py = [100, 100, 100, 400, 400, 100, 100]
    procs = [Sampled(1, "java", jvm, 100), Sampled(2, "python3.11", py, 100)]
    monkeypatch.setattr(PeakRss, "_tree", lambda self: procs)
    with PeakRss(interval=0.01) as rss:
        time.sleep(0.5)
    assert rss.figures(1, 1.0)["peak_rss_mb_by_kind"] == {"jvm": 700, "python": 400}
    assert rss.peak == 900 * mb  # (the total's own: the kinds' peaks need not come at one moment)


def test_a_window_under_two_samples_takes_each_kinds_highest(monkeypatch):
    mb = 2**20
    monkeypatch.setattr(PeakRss, "_tree", lambda self, p=Sampled(1, "java", [900, 500], 500): [p])
    with PeakRss(interval=10.0) as rss:
        pass
    assert rss.peak == 900 * mb and rss.peak_by_kind == {"jvm": 900 * mb}
