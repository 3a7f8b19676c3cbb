"""The supervisor: runs the streaming query, restarts it from its checkpoint when it fails.

Restarts back off exponentially (up to ``watch.restart_backoff_max_s``) and are counted in the
durable state (``vigil_query_restarts_total``); ``/metrics`` keeps answering throughout, and
``vigil_up`` says whether the query runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from monitor.watch.runtime import WatchRuntime


def supervise(rt: "WatchRuntime", start_query: Callable[[], Any], deadline: float | None = None,
              on_tick: Callable[[], None] = lambda: None) -> None:
    """Run the query until stop (or the deadline), restarting it with backoff when it fails."""
    backoff = 1.0

    def running() -> bool:
        return not rt.stop.is_set() and (deadline is None or time.monotonic() < deadline)

    while running():
        try:
            query = start_query()
        except Exception as exc:  # e.g. brokers away while planning: retry like a failure
            query, rt.status.last_error = None, f"{type(exc).__name__}: {exc}"
        if query is not None:
            rt.query_started()
            while query.isActive and running():
                try:
                    query.awaitTermination(1)
                except Exception:  # noqa: BLE001 - it terminated with an error: query.exception() below
                    break
                rt.refresh()
                on_tick()
                if time.time() - rt.status.started_at > 60:
                    backoff = 1.0
            if query.isActive:
                query.stop()
                rt.status.running = False
                break
            exc = query.exception()
            rt.query_failed(str(exc) if exc else "query stopped")  # whole: the cause may be deep in it
        else:
            rt.status.running = False
        rt.count_restart()
        rt.progress(f"query failed ({(rt.status.last_error or '')[:200]}); restarting in {backoff:.0f} s")
        waited = time.monotonic()
        while time.monotonic() - waited < backoff and not rt.stop.is_set():
            rt.stop.wait(0.5)
            rt.refresh()
            on_tick()
        backoff = min(backoff * 2, rt.cfg.watch.restart_backoff_max_s)
    rt.status.running = False
    rt.refresh()
