"""The query supervisor: a failed query is restarted, whatever way it reports its failure."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from monitor.watch.supervisor import supervise


class FailingQuery:
    """A query that fails after one tick, the way pyspark reports it: awaitTermination raises."""

    def __init__(self) -> None:
        self.ticks = 0
        self.isActive = True

    def awaitTermination(self, _timeout: float) -> None:
        self.ticks += 1
        self.isActive = False
        raise RuntimeError("StreamingQueryException: Timeout of 60000ms expired before the position ...")

    def exception(self) -> Exception:
        return RuntimeError("Timeout of 60000ms expired")

    def stop(self) -> None:
        self.isActive = False


class Runtime:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.status = SimpleNamespace(started_at=time.time(), last_error=None, running=False)
        self.cfg = SimpleNamespace(watch=SimpleNamespace(restart_backoff_max_s=0.1))
        self.failures: list[str] = []
        self.restarts = 0

    def query_started(self) -> None:
        self.status.running = True

    def refresh(self) -> None:
        pass

    def query_failed(self, msg: str) -> None:
        self.failures.append(msg)
        self.status.last_error = msg

    def count_restart(self) -> None:
        self.restarts += 1

    def progress(self, _msg: str) -> None:
        pass


def test_a_query_that_fails_is_restarted_even_when_await_termination_raises():
    rt = Runtime()
    started: list[FailingQuery] = []

    def start() -> FailingQuery:
        started.append(FailingQuery())
        if len(started) == 3:
            rt.stop.set()
        return started[-1]

    supervise(rt, start, deadline=time.monotonic() + 20)
    assert len(started) == 3 and rt.restarts >= 2
    assert rt.failures[0] == "Timeout of 60000ms expired"
