"""`vigil run`: the embedded default in one command.

Starts the local cluster (unless ``kafka.bootstrap_servers`` is set), every configured canary
writer and the live checker (the `vigil watch` job) with the metrics endpoint, and shows a
live status line until Ctrl-C or --duration.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional

import typer
from prometheus_client import CollectorRegistry
from rich.live import Live

from monitor.canary.runner import WriterThread, open_writer, prepare_topics_patiently
from monitor.cli.common import ConfigOption, err_console, load_config, print_endpoints, print_json, progress
from monitor.cli.produce_cmd import status_line, writer_summary
from monitor.cluster.access import up_for
from monitor.eos.runner import EosPipeline
from monitor.group.runner import GroupRunner
from monitor.metrics import producer_metrics
from monitor.signals import install_stop_handlers
from monitor.watch.runtime import WatchRuntime

WRITERS_WAIT_S = 120.0  # the longest the writers wait for the checker's first trigger


def run(
    config: Optional[Path] = ConfigOption,
    duration: Optional[float] = typer.Option(
        None, help="Stop after the writers wrote for this many seconds (default: until Ctrl-C). They start "
        "once the checker's query runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the writers' final summaries as JSON."),
    check: bool = typer.Option(True, "--check/--no-check", help="--no-check: judge nothing — read, decode and hand "
                               "over every batch as the checker's query does, and count only produce → read latency "
                               "(vigil_e2e_latency_seconds): the pipeline's own floor, which `vigil bench --live` "
                               "measures beside the checker. Every violation counter stays 0. Its checkpoint "
                               "directory is marked and refused by a checking monitor later (and a checker's is "
                               "refused by it)."),
) -> None:
    """Run the embedded default: local 3-node cluster, canary writers and the live checker.

    Metrics on 127.0.0.1:9464 (`metrics.bind`, `metrics.port`). The application canaries run
    beside the writers: the consumer group's members (`groups.enabled`, on by default) and the
    exactly-once pipeline (`eos.enabled`, off by default).

    With `kafka.bootstrap_servers` set, the configured cluster is used instead of the local
    one. Writers start once the checker's query runs (at most 2 minutes after it is started),
    so the first writes are checked at once; they stop first (waiting for their last
    acknowledgements), then the checker.
    """
    cfg = load_config(config)
    if cfg.embedded:
        status = up_for(cfg, progress)
        err_console.print(f"local cluster up: {status.bootstrap_servers} "
                          f"(active controller: node {status.active_controller})")
    registry = CollectorRegistry()
    metrics = producer_metrics(registry)
    runtime = WatchRuntime(cfg, progress, check=check)
    if not check:
        err_console.print("--no-check: nothing is judged (every violation counter stays 0); only produce → read "
                          "latency is measured")
    runtime.serve_metrics(registry)  # from the start: a cluster that refuses the clients shows there
    requested, writers_stop = threading.Event(), threading.Event()
    install_stop_handlers(requested)
    topics = prepare_topics_patiently(cfg, requested, progress)
    if topics is None:
        err_console.print("stopped before the canary and ledger topics could be prepared")
        return
    threads = [WriterThread(open_writer(cfg, w, topics, metrics), writers_stop, None) for w in cfg.writers]
    pipeline = EosPipeline(cfg, registry, progress) if cfg.eos.enabled else None
    group = GroupRunner(cfg, registry, progress) if cfg.groups.enabled else None
    writers_starting = threading.Lock()
    started = time.monotonic()

    def shutdown() -> None:
        """Writers start once the checker runs, stop first when asked (their last outcomes land),
        then the checker reads up to the end."""
        try:
            start_writers_when_checking(runtime, threads, requested, writers_starting, progress)
            if pipeline is not None and not requested.is_set():
                pipeline.start()
            if group is not None and not requested.is_set():
                group.start()
            requested.wait(duration)
            writers_stop.set()
            for t in threads:
                if t.is_alive():
                    t.join()
            if pipeline is not None:  # it consumes what the writers wrote last, then closes
                pipeline.drain(timeout_s=60.0)
                pipeline.stop()
            if group is not None:  # the members too, then they commit, note that they stopped, and close
                group.drain(timeout_s=60.0)
                group.stop()
            runtime.wait_caught_up(timeout_s=120.0)
            if pipeline is not None:
                runtime.eos_tick()  # its last commits judged: no batch comes after the output's end
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
        with writers_starting:  # no writer starts after this
            requested.set()
        writers_stop.set()
        if pipeline is not None:
            pipeline.stop()
        if group is not None:
            group.stop()
        for t in threads:
            if t.ident is None:  # stopped before the checker ran: never started
                t.discard()
            elif t.is_alive():
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


def start_writers_when_checking(runtime: WatchRuntime, threads: list[WriterThread], stop: threading.Event,
                                starting: threading.Lock, say: Callable[[str], None],
                                wait_s: float = WRITERS_WAIT_S) -> None:
    """Start the writers once the checker's query completed a trigger, or after ``wait_s`` without
    one (a canary writes even while its checker cannot start). Spark's start on a busy machine took
    55 s with the writers already running against the local cluster, 20 s without (2 cores: the
    brokers took the CPU it needed), and the first writes waited that long to be checked."""
    deadline = time.monotonic() + wait_s
    while not runtime.query_runs.wait(0.25):
        if stop.is_set():
            return
        if time.monotonic() >= deadline:
            say(f"the checker has not completed a trigger within {wait_s:.0f} s: starting the writers anyway")
            break
    with starting:
        if not stop.is_set():
            for t in threads:
                t.start()
