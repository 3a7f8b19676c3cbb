"""The periodic threads (certificate and password-file looks) survive an unexpected error."""

from __future__ import annotations

import threading

from monitor.periodic import start_periodic


def test_a_round_that_raises_is_said_and_the_next_round_runs():
    stop, rounds, errors = threading.Event(), [], []
    done = threading.Event()

    def work() -> None:
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("unexpected")
        if len(rounds) == 3:
            done.set()

    thread = start_periodic("t", 0.01, stop, work, errors.append)
    assert done.wait(5), rounds
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and [str(e) for e in errors] == ["unexpected"]


def test_first_now_false_waits_one_interval_and_a_stop_meanwhile_runs_nothing():
    stop, rounds = threading.Event(), []
    thread = start_periodic("t", 30, stop, lambda: rounds.append(1), lambda _e: None, first_now=False)
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and rounds == []
