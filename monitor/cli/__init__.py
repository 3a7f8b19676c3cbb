"""The `vigil` command line: it only wires config, clients and commands together."""

from __future__ import annotations

import faulthandler
import gc
import importlib
import signal
import sys

import typer
from rich.console import Console
from rich.text import Text

from invariants.errors import VigilError

HELP = ("Vigil: a live invariant monitor for Apache Kafka. Canary writers account for every "
        "write; checkers judge what readers see against what writers were told.")

# name -> (module under monitor.cli, attribute, a group of subcommands?), in --help's order. Each
# command's module is imported only when that command runs (or for the full --help): importing all
# of them made every `vigil` command pay about 0.6 s more CPU at start (1.27 s against 0.61-0.82 s,
# measured), and tests and operators run `vigil drill`, `audit` and `status` often.
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "cluster": ("cluster_cmd", "app", True),
    "config": ("config_cmd", "app", True),
    "chaos": ("chaos_cmd", "app", True),
    "spark": ("spark_cmd", "app", True),
    "state": ("state_cmd", "app", True),
    "eos": ("eos_cmd", "app", True),
    "group": ("group_cmd", "app", True),
    "produce": ("produce_cmd", "produce", False),
    "drill": ("drill_cmd", "drill", False),
    "run": ("run_cmd", "run", False),
    "watch": ("watch_cmd", "watch", False),
    "audit": ("audit_cmd", "audit_cmd", False),
    "bench": ("bench_cmd", "bench", False),
    "soak": ("soak_cmd", "soak", False),
    "retire": ("retire_cmd", "retire", False),
    "status": ("status_cmd", "status", False),
}

GC_THRESHOLDS = (100_000, 50, 100)  # gc.set_threshold for every vigil command (see main)


def build_app(only: str | None = None) -> typer.Typer:
    """The command line with every command, or with ``only`` that one (what it needs is imported)."""
    app = typer.Typer(name="vigil", help=HELP, no_args_is_help=True, add_completion=False,
                      pretty_exceptions_enable=False)

    @app.callback()
    def _vigil() -> None:  # (a group even with one command registered: never the command itself)
        pass

    for name, (module, attribute, group) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(f"monitor.cli.{module}"), attribute)
        if group:
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # (the whole command line, for tests that invoke it in process)
        return build_app()
    raise AttributeError(name)


def _command_asked() -> str | None:
    """The command the arguments name, when they name one: its first argument (there are no
    options before it)."""
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    return first if first in COMMANDS else None


def main() -> None:
    # `kill -USR1 <pid>` prints every thread's Python stack to stderr, even while one holds the GIL:
    # what a hung monitor was doing (the chaos runner and `vigil soak` ask before they kill one)
    # and a fatal signal (a crash in native code: librdkafka, Arrow) leaves every thread's Python
    # stack too (a `vigil run` died of SIGSEGV once, with nothing on stderr to say where)
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        faulthandler.enable(all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError):  # no stderr to print to (2>&-): no dump
        pass
    # The checker keeps millions of small objects (its state), and the collector's default (a young
    # collection every 700 allocations, an old one walking the whole heap every so many) spent about
    # 45 % of the checking time on them: measured with `vigil bench --records 2000000 --only checker`,
    # check 3.7 -> 2.0-2.1 s, the rate +12-16 %, peak RSS unchanged (two runs each, alternating).
    # Reference counting frees almost everything; cycles wait a little longer.
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        build_app(_command_asked())()
    except VigilError as exc:
        # one line, never wrapped: it is read in logs and searched for (a command, a path, a key)
        Console(stderr=True).print(Text.assemble(("error: ", "bold red"), str(exc)), highlight=False, soft_wrap=True)
        sys.exit(2)
