"""`vigil watch`: the live checker against a running cluster (local or configured)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from monitor.cli.common import ConfigOption, load_config, print_endpoints, print_json, progress


def watch(
    config: Optional[Path] = ConfigOption,
    duration: Optional[float] = typer.Option(None, help="Stop after this many seconds (default: until Ctrl-C)."),
    until_caught_up: bool = typer.Option(False, "--until-caught-up",
                                         help="Stop once everything written so far has been read and checked."),
    as_json: bool = typer.Option(False, "--json", help="Print what the checker found as JSON when stopped."),
) -> None:
    """Run the live checker (Spark) against a running cluster and export every invariant.

    Spark reads the canary topic in read_committed and read_uncommitted plus the outcome
    ledger, judges every invariant, and exports them on /metrics.

    Counters continue from the checkpoint directory (`watch.checkpoint_dir`); evidence lines go
    to `watch.evidence.path`. The cluster must be up (`vigil cluster up` or `vigil run`).
    """
    from monitor.watch.main import watch as run

    runtime = run(load_config(config), duration, progress, on_start=print_endpoints, until_caught_up=until_caught_up)
    if as_json:
        print_json({"checker": runtime.summary()})
