"""Graceful stops: Ctrl-C and SIGTERM set an event that the long-running commands watch."""

from __future__ import annotations

import os
import signal
import threading


def install_stop_handlers(stop: threading.Event) -> None:
    """Ctrl-C and SIGTERM set ``stop`` (the caller then shuts down in order)."""
    def handler(_sig: int, _frame: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def stop_when_stdin_ends(stop: threading.Event) -> None:
    """For a child whose runner holds its stdin open: set ``stop`` when that input ends (the runner
    gone, even by kill -9), from a daemon thread, so no child outlives the process that watches it."""
    def watch() -> None:
        try:
            while os.read(0, 4096):  # the raw descriptor: a buffered reader's lock would block shutdown
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()
