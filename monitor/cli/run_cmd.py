"""`vigil run`: the embedded default in one command.

Starts the local cluster (unless ``kafka.bootstrap_servers`` is set), every configured canary
writer and the live checker (the `vigil watch` job) with the metrics endpoint, and shows a
live status line until Ctrl-C or --duration.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

import typer
from prometheus_client import CollectorRegistry
from rich.live import Live

from monitor.canary.runner import WriterThread, open_writer, prepare_topics_patiently
from monitor.cli.common import ConfigOption, err_console, load_config, print_endpoints, print_json, progress
from monitor.cli.produce_cmd import status_line, writer_summary
from monitor.cluster.access import up_for
from monitor.metrics import producer_metrics
from monitor.signals import install_stop_handlers
from monitor.watch.runtime import WatchRuntime


def run(
    config: Optional[Path] = ConfigOption,
    duration: Optional[float] = typer.Option(None, help="Stop after this many seconds (default: until Ctrl-C)."),
    as_json: bool = typer.Option(False, "--json", help="Print the writers' final summaries as JSON."),
) -> None:
    """Run the embedded default: local 3-node cluster, canary writers and the live checker.

    Metrics on 127.0.0.1:9464 (`metrics.bind`, `metrics.port`).

    With `kafka.bootstrap_servers` set, the configured cluster is used instead of the local
    one. Writers stop first (waiting for their last acknowledgements), then the checker.
    """
    cfg = load_config(config)
    if cfg.embedded:
        status = up_for(cfg, progress)
        err_console.print(f"local cluster up: {status.bootstrap_servers} "
                          f"(active controller: node {status.active_controller})")
    registry = CollectorRegistry()
    metrics = producer_metrics(registry)
    runtime = WatchRuntime(cfg, progress)
    runtime.serve_metrics(registry)  # from the start: a cluster that refuses the clients shows there
    requested, writers_stop = threading.Event(), threading.Event()
    install_stop_handlers(requested)
    topics = prepare_topics_patiently(cfg, requested, progress)
    if topics is None:
        err_console.print("stopped before the canary and ledger topics could be prepared")
        return
    threads = [WriterThread(open_writer(cfg, w, topics, metrics), writers_stop, None) for w in cfg.writers]
    for t in threads:
        t.start()
    started = time.monotonic()

    def shutdown() -> None:
        """Writers stop first (their last outcomes land), then the checker reads up to the end."""
        try:
            requested.wait(duration)
            writers_stop.set()
            for t in threads:
                t.join()
            runtime.wait_caught_up(timeout_s=120.0)
        finally:  # whatever happened here, the run ends
            writers_stop.set()
            runtime.stop.set()

    threading.Thread(target=shutdown, name="vigil-shutdown", daemon=True).start()
    print_endpoints(cfg)

    def render() -> str:
        snap = runtime.published
        found = sum(snap.violations.values())
        checked = " ".join(f"{iso.value}={n}" for iso, n in snap.records_checked.items())
        lines = [status_line(t.writer) for t in threads]
        lines.append(f"checker: {'up' if snap.up else 'starting'}  checked {checked or '-'}  "
                     f"violations {found}  batches {snap.batches}")
        return f"[{time.monotonic() - started:5.0f} s] Ctrl-C to stop\n" + "\n".join(lines)

    from monitor.watch.main import run_watch

    try:
        if as_json:
            run_watch(cfg, runtime, None, progress, registry)
        else:
            with Live(render(), console=err_console, refresh_per_second=2, transient=False) as live:
                run_watch(cfg, runtime, None, progress, registry, on_tick=lambda: live.update(render()))
    finally:
        writers_stop.set()
        for t in threads:
            t.join()
    failures = [t for t in threads if t.error is not None]
    if as_json:
        print_json({"writers": [writer_summary(t.writer) for t in threads], "checker": runtime.summary()})
    for t in failures:
        err_console.print(f"[red]writer {t.writer.cfg.name} failed:[/] {t.error}", markup=True)
        err_console.print(t.trace, markup=False, highlight=False)
    if failures:
        raise typer.Exit(1)
    err_console.print("stopped; the local cluster keeps running (`vigil cluster down` stops it)")
