"""A daemon thread that does one piece of work every ``interval_s`` until ``stop`` is set, and
survives the work's failures: an exception is said (``on_error``) and the next round tries again
(a thread that died on one unexpected error would silently stop refreshing what it exports)."""

from __future__ import annotations

import threading
from typing import Callable


def start_periodic(name: str, interval_s: float, stop: threading.Event, work: Callable[[], None],
                   on_error: Callable[[Exception], None], first_now: bool = True) -> threading.Thread:
    def loop() -> None:
        if not first_now and stop.wait(interval_s):
            return
        while not stop.is_set():
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - the next round may succeed; never end the thread
                on_error(exc)
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
