"""`vigil watch`: the live checker against a running cluster (local or configured)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Optional

import typer

from monitor.cli.common import ConfigOption, err_console, load_config, progress
from monitor.watch.runtime import WatchRuntime


def install_watch_stop(runtime: WatchRuntime) -> None:
    def handler(_sig, _frame) -> None:
        runtime.stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


def watch(
    config: Optional[Path] = ConfigOption,
    duration: Optional[float] = typer.Option(None, help="Stop after this many seconds (default: until Ctrl-C)."),
) -> None:
    """Run the live checker (Spark) against a running cluster and export every invariant.

    Spark reads the canary topic in read_committed and read_uncommitted plus the outcome
    ledger, judges every invariant, and exports them on /metrics.

    Counters continue from the checkpoint directory (`watch.checkpoint_dir`); evidence lines go
    to `watch.evidence.path`. The cluster must be up (`vigil cluster up` or `vigil run`).
    """
    from monitor.watch.main import run_watch

    from monitor.canary.runner import prepare_topics

    cfg = load_config(config)
    prepare_topics(cfg)
    runtime = WatchRuntime(cfg, progress)
    install_watch_stop(runtime)
    if cfg.metrics.port:
        err_console.print(f"metrics: http://{cfg.metrics.bind}:{cfg.metrics.port}/metrics   "
                          f"evidence: {cfg.evidence_path()}")
    run_watch(cfg, runtime, duration, progress)
