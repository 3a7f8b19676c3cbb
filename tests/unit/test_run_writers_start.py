"""`vigil run` starts its writers once the checker's query completed a trigger."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from monitor.cli.run_cmd import start_writers_when_checking


class FakeThread:
    def __init__(self) -> None:
        self.started_at: float | None = None

    def start(self) -> None:
        self.started_at = time.monotonic()


def _start_in_background(runtime, threads, stop, said, wait_s=30.0) -> threading.Thread:
    t = threading.Thread(target=start_writers_when_checking,
                         args=(runtime, threads, stop, threading.Lock(), said.append, wait_s))
    t.start()
    return t


def test_the_writers_wait_for_the_first_trigger():
    runtime = SimpleNamespace(query_runs=threading.Event())
    threads, said = [FakeThread(), FakeThread()], []
    waiter = _start_in_background(runtime, threads, threading.Event(), said)
    time.sleep(0.6)
    assert all(t.started_at is None for t in threads)
    triggered = time.monotonic()
    runtime.query_runs.set()
    waiter.join(5)
    assert all(t.started_at is not None and t.started_at >= triggered for t in threads) and said == []


def test_a_stop_before_the_first_trigger_starts_no_writer():
    runtime, stop = SimpleNamespace(query_runs=threading.Event()), threading.Event()
    threads, said = [FakeThread()], []
    waiter = _start_in_background(runtime, threads, stop, said)
    stop.set()
    waiter.join(5)
    assert not waiter.is_alive() and threads[0].started_at is None


def test_a_checker_that_never_runs_does_not_keep_the_canary_from_writing():
    runtime = SimpleNamespace(query_runs=threading.Event())
    threads, said = [FakeThread()], []
    began = time.monotonic()
    _start_in_background(runtime, threads, threading.Event(), said, wait_s=0.5).join(5)
    assert threads[0].started_at is not None and threads[0].started_at - began >= 0.5
    assert said and "starting the writers anyway" in said[0]
