"""`vigil group`: the consumer-group canary (member processes in one group) and its audit."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Optional

import typer

from monitor import clients
from monitor.cli.common import ConfigOption, console, load_config, print_json
from monitor.audit.book import LedgerBook
from monitor.audit.reader import read_ledger
from monitor.group.audit import (
    audit, canary_recreated, ensure_observation_topic, reused_offsets, rewrite_marks_of,
)
from monitor.group.runner import GroupRunner, canary_for

app = typer.Typer(help="The consumer-group canary: `groups.members` member processes subscribed to the canary topic "
                  "in one group (read_committed, explicit commits), each appending what it does to an observation "
                  "topic; and its audit (group_skip, group_rewind, rebalance_stall, redeliveries).",
                  no_args_is_help=True)

DRILLS = ("group_skip", "group_rewind")


@app.command("run")
def run(
    duration: float = typer.Option(0.0, help="Stop after this many seconds (0 = until Ctrl-C / SIGTERM)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Run the members until stopped (a member that exits is started again, with a growing wait).

    Members are `python -m monitor.group.member` processes named m0, m1, ...; with
    `groups.static` each has `group.instance.id = <group>-<member>`. Judge the result with
    `vigil group audit`.
    """
    cfg = load_config(config)
    admin = clients.admin(cfg)
    clients.ensure_topic(admin, cfg.canary.name, cfg.canary.partitions, cfg.canary.replication_factor,
                         cfg.canary.topic_configs())
    ensure_observation_topic(cfg)
    runner = GroupRunner(cfg, say=console.print)  # a member that exits is started again, with backoff
    canary = runner.canary
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_a: stop.set())
    runner.start()
    started = time.monotonic()
    console.print(f"started {len(canary.alive())} members of {canary.group} ({canary.protocol} protocol, "
                  f"{'static' if canary.static else 'dynamic'} membership); observations on {canary.obs_topic}")
    while not stop.wait(1.0):
        if duration and time.monotonic() - started >= duration:
            break
    runner.stop()
    console.print(f"stopped (members that exited by themselves: {dict(runner.exits) or 'none'})")


@app.command("drill")
def drill(
    kind: str = typer.Argument(..., help=f"One of: {', '.join(DRILLS)}."),
    member: str = typer.Option("m0", help="Which member applies it."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Ask a member of the running `vigil group run` (same state directory) for a deliberate fault.

    group_skip: it drops the last 3 records of its next poll of a partition (never reported
    consumed; its next commit passes them). group_rewind: after its next acknowledged commit it
    seeks a partition 3 records back below it (those are delivered again below the group's
    acknowledged committed offset).
    """
    if kind not in DRILLS:
        raise typer.BadParameter(f"{kind!r}: one of {', '.join(DRILLS)}", param_hint="KIND")
    cfg = load_config(config)
    canary_for(cfg).drill(kind, member)
    console.print(f"asked member {member} for {kind}; it applies it on its next poll or commit")


@app.command("audit")
def audit_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Judge the group from the observation topic and the canary topic: exit 1 on any group_skip
    or group_rewind (rebalance_stall is liveness: reported, not a failure)."""
    cfg = load_config(config)
    # a recreated canary topic: no group_skip judged; nor at offsets a rewrite reused
    entries, _bad, _starts = read_ledger(cfg)
    info = clients.describe_topic(clients.admin(cfg), cfg.canary.name)
    topic_id = info.topic_id if info else None
    book = LedgerBook.of(entries, [cfg.canary.name])
    result = audit(cfg, cfg.canary.name, cfg.groups.observation_topic, cfg.groups.stall_ms,
                   recreated=canary_recreated(entries, cfg.canary.name, topic_id),
                   reused=reused_offsets(book.reused, topic_id), marks=rewrite_marks_of(book.rewrite_marks, topic_id))
    out = result.summary()
    if as_json:
        print_json(out)
    else:
        console.print(f"group_skip {out['group_skip']}, group_rewind {out['group_rewind']}, rebalance_stall "
                      f"{out['rebalance_stall']}; {out['redeliveries']} redeliveries over {result.observations} "
                      f"observations; {result.judged_records} of {result.reference_records} records judged")
    if out["group_skip"] or out["group_rewind"]:
        raise typer.Exit(1)
