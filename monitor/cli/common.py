"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from monitor.child_run import url_host
from monitor.config import Config, load

console = Console(highlight=False, width=max(120, Console().width))
err_console = Console(stderr=True, highlight=False)

ConfigOption = typer.Option(
    None, "--config", "-c", envvar="VIGIL_CONFIG", exists=False, dir_okay=False,
    help="YAML config file (defaults are used without one; see `vigil config reference`).",
)


def load_config(path: Optional[Path]) -> Config:
    return load(path)


def print_endpoints(cfg: Config) -> None:
    """Where the watch exports its metrics and writes its evidence."""
    if cfg.metrics.port:
        err_console.print(f"metrics: http://{url_host(cfg.metrics.bind)}:{cfg.metrics.port}/metrics   "
                          f"evidence: {cfg.evidence_path()}")


def print_json(obj: object, indent: int | None = None) -> None:
    """JSON on stdout, unwrapped (rich would fold long lines)."""
    sys.stdout.write(json.dumps(obj, indent=indent) + "\n")
    sys.stdout.flush()


def progress(msg: str) -> None:
    err_console.print(f"[dim]…[/] {msg}")
