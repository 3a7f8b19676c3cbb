"""`vigil drill`: inject one anomaly on purpose, to prove detection and alerting end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from monitor.canary.runner import prepare_topics
from monitor.cli.common import ConfigOption, console, load_config, print_json, progress
from monitor.config import Config
from monitor.drill_table import DRILL_KINDS, DRILL_TABLE
from monitor.drills import run_drill

# Drills the application canaries apply themselves (asked through control files): which one.
CANARY_DRILLS = {"eos_loss": "eos", "eos_duplicate": "eos", "group_skip": "group", "group_rewind": "group"}


def _ask_canary(cfg: Config, kind: str, as_json: bool) -> None:
    if CANARY_DRILLS[kind] == "eos":
        from monitor.eos.worker import worker_for

        worker_for(cfg).drill(kind)
        asked, where = "the EOS worker", "vigil eos run --json"
    else:
        from monitor.group.runner import canary_for

        canary = canary_for(cfg)
        canary.drill(kind, canary.names[0])
        asked, where = f"group member {canary.names[0]}", "vigil group audit --json"
    if as_json:
        print_json({"kind": kind, "asked": asked, "reported_by": where})
    else:
        console.print(f"asked {asked} for {kind}: it applies it on its next transaction, poll or commit "
                      f"and reports what it did ({where})")


def drill(
    kind: str = typer.Argument(..., help=f"One of: {', '.join(DRILL_KINDS + tuple(CANARY_DRILLS))}."),
    count: int = typer.Option(1, "--count", "-n", help="How many units to inject (see the drill table)."),
    partition: int = typer.Option(0, help="Canary partition to inject into."),
    hold: float = typer.Option(90.0, help="lso_stuck only: seconds to hold the transaction open."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly what was injected, as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Write canary records and ledger entries that exhibit one anomaly on purpose.

    The drill acts as a lying writer or broker (e.g. a ledger entry claiming an
    acknowledgement for a record never written). Which invariants each kind triggers is
    fixed in the drill table (README, "Drills"; `monitor/drill_table.py`); --json prints what
    was injected and the expected counter increments.

    eos_loss, eos_duplicate, group_skip and group_rewind are asked of the running application
    canaries instead (the EOS worker, a group member: `vigil eos drill`, `vigil group drill`);
    each reports what it did (`vigil eos run --json`, `vigil group audit --json`).
    """
    cfg = load_config(config)
    if kind in CANARY_DRILLS:
        _ask_canary(cfg, kind, as_json)
        return
    if kind not in DRILL_TABLE:
        raise typer.BadParameter(f"unknown drill {kind!r}; kinds: {', '.join(DRILL_KINDS)}", param_hint="KIND")
    topics = prepare_topics(cfg)
    report = run_drill(cfg, topics, kind, count, partition, hold, progress)
    if as_json:
        print_json(report.to_json())
        return
    console.print(f"drill {kind}: injected {count} into {report.topic} partition {report.partition} "
                  f"as {report.instance_id} incarnation {report.incarnation}")
    for item in report.to_json()["expected"]:
        console.print(f"  expect {item['invariant']} ({item['isolation']}) +{item['count']}")
