"""The `vigil` command line: it only wires config, clients and commands together."""

from __future__ import annotations

import faulthandler
import signal
import sys

import typer
from rich.console import Console
from rich.text import Text

from invariants.errors import VigilError
from monitor.cli import (
    audit_cmd, bench_cmd, chaos_cmd, cluster_cmd, config_cmd, drill_cmd, eos_cmd, group_cmd, produce_cmd, retire_cmd,
    run_cmd, soak_cmd, spark_cmd, state_cmd, status_cmd, watch_cmd,
)

app = typer.Typer(
    name="vigil",
    help="Vigil: a live invariant monitor for Apache Kafka. Canary writers account for every "
    "write; checkers judge what readers see against what writers were told.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(cluster_cmd.app, name="cluster")
app.add_typer(config_cmd.app, name="config")
app.add_typer(chaos_cmd.app, name="chaos")
app.add_typer(spark_cmd.app, name="spark")
app.add_typer(state_cmd.app, name="state")
app.add_typer(eos_cmd.app, name="eos")
app.add_typer(group_cmd.app, name="group")
app.command("produce")(produce_cmd.produce)
app.command("drill")(drill_cmd.drill)
app.command("run")(run_cmd.run)
app.command("watch")(watch_cmd.watch)
app.command("audit")(audit_cmd.audit_cmd)
app.command("bench")(bench_cmd.bench)
app.command("soak")(soak_cmd.soak)
app.command("retire")(retire_cmd.retire)
app.command("status")(status_cmd.status)


def main() -> None:
    # `kill -USR1 <pid>` prints every thread's Python stack to stderr, even while one holds the GIL:
    # what a hung monitor was doing (the chaos runner and `vigil soak` ask before they kill one)
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError):  # no stderr to print to (2>&-): no dump
        pass
    try:
        app()
    except VigilError as exc:
        # one line, never wrapped: it is read in logs and searched for (a command, a path, a key)
        Console(stderr=True).print(Text.assemble(("error: ", "bold red"), str(exc)), highlight=False, soft_wrap=True)
        sys.exit(2)
