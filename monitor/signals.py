"""Graceful stops: Ctrl-C and SIGTERM set an event that the long-running commands watch."""

from __future__ import annotations

import signal
import threading


def install_stop_handlers(stop: threading.Event) -> None:
    """Ctrl-C and SIGTERM set ``stop`` (the caller then shuts down in order)."""
    def handler(_sig: int, _frame: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
