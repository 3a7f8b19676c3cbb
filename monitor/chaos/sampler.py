"""Once a second during a chaos run: the run's own /metrics (writes by outcome, violations by
invariant, ack and end-to-end latency histograms) and who leads each canary partition, appended to
``timeline.jsonl`` for the charts (:mod:`monitor.chaos.charts`) and the progress line."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families

WRITES = "vigil_producer_writes"
VIOLATIONS = "vigil_violations"
TRANSACTIONS = "vigil_producer_transactions"
ABANDON_S = 5.0  # a leaders call taking longer is given up
HISTOGRAMS = {"ack": "vigil_producer_ack_latency_seconds", "e2e": "vigil_e2e_latency_seconds"}


def parse_metrics(text: str) -> dict[str, Any]:
    """The totals a chart needs, summed over the labels it does not show."""
    writes: dict[str, float] = {}
    violations: dict[str, float] = {}
    transactions: dict[str, float] = {}
    hist: dict[str, dict[str, Any]] = {k: {"sum": 0.0, "count": 0.0, "buckets": {}} for k in HISTOGRAMS}
    by_name = {v: k for k, v in HISTOGRAMS.items()}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if family.name == WRITES and s.name.endswith("_total"):
                outcome = s.labels.get("outcome", "?")
                writes[outcome] = writes.get(outcome, 0.0) + s.value
            elif family.name == TRANSACTIONS and s.name.endswith("_total"):
                outcome = s.labels.get("outcome", "?")
                transactions[outcome] = transactions.get(outcome, 0.0) + s.value
            elif family.name == VIOLATIONS and s.name.endswith("_total"):
                inv = s.labels.get("invariant", "?")
                violations[inv] = violations.get(inv, 0.0) + s.value
            elif family.name in by_name:
                h = hist[by_name[family.name]]
                if s.name.endswith("_sum"):
                    h["sum"] += s.value
                elif s.name.endswith("_count"):
                    h["count"] += s.value
                elif s.name.endswith("_bucket"):
                    le = s.labels["le"]
                    h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
    return {"writes": writes, "violations": violations, "transactions": transactions, **hist}


class Sampler(threading.Thread):
    """Samples until :meth:`finish`; a sample that fails (the checker still starting, a broker
    away) is skipped, never fatal. ``leaders`` should make a client of its own per call: a call
    that hangs is abandoned, not waited for."""

    def __init__(self, metrics_url: str, leaders: Callable[[], dict[int, int]], out: Path,
                 period_s: float = 1.0) -> None:
        super().__init__(daemon=True, name="chaos-sampler")
        self.metrics_url, self.leaders, self.out, self.period_s = metrics_url, leaders, out, period_s
        self.started = time.time()
        self.latest: dict[str, Any] = {}
        self._done = threading.Event()
        # the leaders are asked on a thread of their own: with a broker down an answer can take
        # seconds, and the writes and violations must still be sampled every period
        self._asker = ThreadPoolExecutor(1, thread_name_prefix="chaos-leaders")
        self._asking: Future | None = None
        self._asked_at = 0.0

    def run(self) -> None:
        with self.out.open("a") as f:
            while not self._done.is_set():
                sample = self.sample()
                if sample:
                    self.latest = sample
                    f.write(json.dumps(sample) + "\n")
                    f.flush()
                self._done.wait(self.period_s)

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": round(time.time() - self.started, 2)}
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=2) as resp:
                out.update(parse_metrics(resp.read().decode()))
        except (OSError, ValueError):
            pass
        leaders = self._leaders_now()
        if leaders is not None:
            out["leaders"] = {str(p): n for p, n in leaders.items()}
        return out if len(out) > 1 else {}

    def _leaders_now(self) -> dict[int, int] | None:
        """The leaders if an answer came within half a period, else None (the chart shows a gap)."""
        if self._asking is None:
            self._asking, self._asked_at = self._asker.submit(self.leaders), time.monotonic()
        try:
            got = self._asking.result(timeout=self.period_s / 2)
        except TimeoutError:
            if time.monotonic() - self._asked_at > ABANDON_S:
                # a call that hangs (measured: an admin client stuck for 50 s after a broker was
                # killed): left to finish on its own thread, and the next sample asks anew
                self._asker.shutdown(wait=False)
                self._asker = ThreadPoolExecutor(1, thread_name_prefix="chaos-leaders")
                self._asking = None
            return None  # still asking: the next sample waits for the same answer
        except Exception:  # noqa: BLE001 - no answer: a gap
            got = None
        self._asking = None
        return got

    def finish(self) -> None:
        self._done.set()
        self.join(10)
        self._asker.shutdown(wait=False, cancel_futures=True)


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
