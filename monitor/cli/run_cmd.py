"""`vigil run`: the embedded default in one command.

Starts the local cluster (unless ``kafka.bootstrap_servers`` is set), every configured canary
writer, and the metrics endpoint, and shows a live status line until Ctrl-C or --duration.
The live checker (`vigil watch`) joins this command with the checker issue.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

import typer
from prometheus_client import CollectorRegistry, start_http_server
from rich.live import Live

from monitor.canary.runner import WriterThread, open_writer, prepare_topics
from monitor.cli.common import ConfigOption, console, err_console, load_config, print_json, progress
from monitor.cli.produce_cmd import install_stop_handlers, status_line, writer_summary
from monitor.cluster.local_cluster import LocalCluster
from monitor.metrics import producer_metrics


def run(
    config: Optional[Path] = ConfigOption,
    duration: Optional[float] = typer.Option(None, help="Stop after this many seconds (default: until Ctrl-C)."),
    as_json: bool = typer.Option(False, "--json", help="Print the writers' final summaries as JSON."),
) -> None:
    """Run the embedded default: local 3-node cluster, canary writers, metrics on 127.0.0.1:9464."""
    cfg = load_config(config)
    if cfg.embedded:
        status = LocalCluster(cfg.cluster, progress).up()
        err_console.print(f"local cluster up: {status.bootstrap_servers} "
                          f"(active controller: node {status.active_controller})")
    registry = CollectorRegistry()
    metrics = producer_metrics(registry)
    if cfg.metrics.port:
        start_http_server(cfg.metrics.port, addr=cfg.metrics.bind, registry=registry)
        err_console.print(f"metrics: http://{cfg.metrics.bind}:{cfg.metrics.port}/metrics")
    topics = prepare_topics(cfg)
    stop = threading.Event()
    install_stop_handlers(stop)
    threads = [WriterThread(open_writer(cfg, w, topics, metrics), stop, duration) for w in cfg.writers]
    for t in threads:
        t.start()
    started = time.monotonic()

    def render() -> str:
        lines = [status_line(t.writer) for t in threads]
        return f"[{time.monotonic() - started:5.0f} s] Ctrl-C to stop\n" + "\n".join(lines)

    if as_json:
        for t in threads:
            t.join()
    else:
        with Live(render(), console=err_console, refresh_per_second=2, transient=False) as live:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.25)
                live.update(render())
    failures = [t for t in threads if t.error is not None]
    if as_json:
        print_json([writer_summary(t.writer) for t in threads])
    for t in failures:
        err_console.print(f"[red]writer {t.writer.cfg.name} failed:[/] {t.error}")
    if failures:
        raise typer.Exit(1)
    console.print("stopped; the local cluster keeps running (`vigil cluster down` stops it)")
