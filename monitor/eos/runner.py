"""The EOS worker inside `vigil run` (``eos.enabled``): started with the canary writers, started
again whenever it exits, drained and stopped after them; what it reports is exported.

Metrics (a collector over its events, so nothing is counted twice):

- ``vigil_eos_after_abort_total{client,position}``: where the worker's consumer resumed after each
  aborted transaction, ``advance`` / ``rewind`` / ``rewind_further`` / ``other`` (KAFKA-17582);
- ``vigil_eos_close_hung_total{client}``: ``close()`` calls that did not return within
  ``eos.close_bound_s`` (KAFKA-17734);
- ``vigil_eos_worker_exits_total{client}``: worker processes that ended by themselves (each is
  started again).

``client`` is ``eos.client``: ``java`` (the Java client, which most applications run) or
``librdkafka`` (its twin, :mod:`monitor.eos.rdkafka_worker`).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily

from invariants.eos import AFTER_ABORT_CLASSES
from monitor.audit.reader import committed_to_the_end
from monitor.config import Config
from monitor.eos.worker import EosWorker, worker_for

class EosPipeline:
    def __init__(self, cfg: Config, registry: CollectorRegistry | None = None,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.cfg = cfg
        self.worker: EosWorker = worker_for(cfg)
        self.say = say
        self.exits = 0
        self.close_hung = 0
        self.started = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if registry is not None:
            registry.register(self)

    def start(self) -> bool:
        """Start the worker (False, said, when it cannot: no JDK with javac, a bad output topic)."""
        try:
            self.worker.start()
        except Exception as exc:  # noqa: BLE001 (the canary and the checker run on without it)
            self.say(f"the EOS worker cannot start: {exc}")
            return False
        self.started = True
        self._thread = threading.Thread(target=self._supervise, name="vigil-eos-worker", daemon=True)
        self._thread.start()
        return True

    def _supervise(self) -> None:
        wait = 1.0
        while not self._stop.wait(wait):
            proc = self.worker.proc
            if proc is not None and proc.poll() is not None and not self._stop.is_set():
                self.exits += 1
                ran_s = time.monotonic() - self.worker.started_at
                wait = 1.0 if ran_s > 60 else min(30.0, wait * 2)  # one that keeps failing: less often
                self.say(f"the EOS worker exited (code {proc.returncode}; {self.worker.workdir / 'worker.log'}): "
                         f"starting it again in {wait:.0f} s")
                if self._stop.wait(wait):
                    return
                self.worker.start()
            elif proc is not None and proc.poll() is None:
                wait = 1.0

    def drain(self, timeout_s: float) -> bool:
        """Wait until the group committed past every record the canary topic holds (the writers
        have stopped); False when it did not within ``timeout_s``."""
        if not self.started:
            return False
        if committed_to_the_end(self.cfg, self.cfg.eos.group, self.cfg.canary.name, timeout_s):
            return True
        self.say(f"the EOS worker did not consume the canary topic to its end within {timeout_s:.0f} s")
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if not self.worker.stop(self.cfg.eos.close_bound_s):
            self.close_hung += 1
            self.say(f"the EOS worker's close() did not return within {self.cfg.eos.close_bound_s:.0f} s: killed")

    def collect(self) -> Iterator[CounterMetricFamily]:
        after = CounterMetricFamily("vigil_eos_after_abort", "where the EOS worker's consumer resumed after an "
                                    "aborted transaction (KAFKA-17582)", labels=["client", "position"])
        classes = self.worker.after_abort_classes()
        for cls in AFTER_ABORT_CLASSES:
            after.add_metric([self.worker.client, cls], classes.get(cls, 0))
        yield after
        hung = CounterMetricFamily("vigil_eos_close_hung", "EOS worker close() calls that did not return within "
                                   "eos.close_bound_s (KAFKA-17734)", labels=["client"])
        hung.add_metric([self.worker.client], self.close_hung)
        yield hung
        exits = CounterMetricFamily("vigil_eos_worker_exits", "EOS worker processes that ended by themselves "
                                    "(each started again)", labels=["client"])
        exits.add_metric([self.worker.client], self.exits)
        yield exits
