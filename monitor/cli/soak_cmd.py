"""`vigil soak`: a long `vigil run` under short retention that must stay flat."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from monitor.cli.common import ConfigOption, console, err_console, load_config, print_json, progress


def _seconds(text: str, option: str) -> float:
    from monitor.soak import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def soak(
    config: Optional[Path] = ConfigOption,
    duration: str = typer.Option("1h", help="How long to run after the first batch (90s, 5m, 1h)."),
    interval: str = typer.Option("60s", help="How often to sample."),
    warmup: str = typer.Option("10m", help="Growth is judged after this (the checker's horizon, Spark's "
                               "retained batches and the JVM heap fill up first)."),
    retention: str = typer.Option("5m", help="retention.ms of the soak's canary and ledger topics (segments of "
                                  "a quarter of it, 1 MiB at most): several retention cycles per hour."),
    checks: str = typer.Option("rss_steady,worker_rss,state,checkpoint,fds,threads",
                               help="Figures that must not grow: rss (all processes), rss_steady (all but "
                               "PySpark's Python workers), worker_rss (the largest worker), workers (how "
                               "many), state, checkpoint, fds, threads (all but those of Spark's block manager's two "
                               "pools, which Spark bounds at 100 each), pool_threads (those)."),
    report: Optional[Path] = typer.Option(None, help="Directory for soak.json, soak.png and the run's "
                                          "state and output (default: a new temporary one)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Run `vigil run` for --duration on topics of its own with short retention, sampling every
    --interval the resident memory, open file descriptors and threads of the run and its Spark
    JVM, the checker's state file, the Spark checkpoint and /metrics.

    Fails (exit 1) on any violation, on a monitor that stopped checking, or on a figure of
    --checks that grows after --warmup: its fitted growth (Theil–Sen slope times the span)
    beyond a tolerance of its median (memory 15 %, state and checkpoint 10 %, fds and threads 5 %,
    or a small absolute slack). Memory is judged by process: where PySpark runs Python workers the
    total steps with how many it keeps, so by default the long-lived processes (rss_steady) and
    the largest worker (worker_rss) are checked, the total (rss) and the number of workers shown.
    Spark's block manager starts threads in two pools up to 100 each, for minutes at a batch a
    second: those are shown (pool_threads), not counted in threads.
    Writes soak.json and a chart, soak.png, into --report.
    """
    from monitor.soak import FIGURES, run_soak

    which = tuple(c.strip() for c in checks.split(",") if c.strip())
    unknown = set(which) - set(FIGURES)
    if unknown:
        raise typer.BadParameter(f"unknown: {', '.join(sorted(unknown))}", param_hint="--checks")
    cfg = load_config(config)
    result = run_soak(cfg, _seconds(duration, "--duration"), _seconds(interval, "--interval"),
                      _seconds(warmup, "--warmup"), _seconds(retention, "--retention"), which, report, progress)
    if as_json:
        print_json({k: v for k, v in result.items() if k != "samples"} | {"samples": len(result["samples"])})
    else:
        for name, g in result["growth"].items():
            if "fitted_growth" in g:
                mark = "checked" if name in which else "shown"
                console.print(f"{name:10s} start {g['start']:>14,.0f}  end {g['end']:>14,.0f}  "
                              f"fitted growth {g['fitted_growth']:>12,.0f}  limit {g['limit']:>12,.0f}  ({mark})")
        console.print(f"report: {result['report_dir']}/soak.json   chart: {result['chart']}")
    if not result["ok"]:
        for failure in result["failures"]:
            err_console.print(f"soak failed: {failure}")
        raise typer.Exit(1)
    err_console.print("soak passed: no violation, every checked figure flat after the warm-up")
