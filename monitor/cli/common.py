"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from monitor.cluster.jars import ResolveError
from monitor.cluster.java import JavaError
from monitor.cluster.local_cluster import ClusterError
from monitor.clients import ClientError
from monitor.config import Config, ConfigError, load
from monitor.drills import DrillError
from monitor.identity import IdentityError
from monitor.ledger import LedgerError
from monitor.watch.state import StateError
from monitor.audit.reader import AuditReadError

EXPECTED_ERRORS = (ConfigError, ClusterError, ResolveError, JavaError, ClientError, IdentityError, DrillError,
                   LedgerError, StateError, AuditReadError)

console = Console(highlight=False, width=max(120, Console().width))
err_console = Console(stderr=True, highlight=False)

ConfigOption = typer.Option(
    None, "--config", "-c", envvar="VIGIL_CONFIG", exists=False, dir_okay=False,
    help="YAML config file (defaults are used without one; see `vigil config reference`).",
)


def load_config(path: Optional[Path]) -> Config:
    return load(path)


def install_stop_handlers(stop: threading.Event) -> None:
    """Ctrl-C and SIGTERM set ``stop`` (the command then shuts down in order)."""
    def handler(_sig: int, _frame: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def print_endpoints(cfg: Config) -> None:
    """Where the watch exports its metrics and writes its evidence."""
    if cfg.metrics.port:
        err_console.print(f"metrics: http://{cfg.metrics.bind}:{cfg.metrics.port}/metrics   "
                          f"evidence: {cfg.evidence_path()}")


def print_json(obj: object, indent: int | None = None) -> None:
    """JSON on stdout, unwrapped (rich would fold long lines)."""
    sys.stdout.write(json.dumps(obj, indent=indent) + "\n")
    sys.stdout.flush()


def progress(msg: str) -> None:
    err_console.print(f"[dim]…[/] {msg}")
