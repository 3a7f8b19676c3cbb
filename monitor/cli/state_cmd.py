"""`vigil state`: look at the watch's saved checker state, and rebuild it when it is damaged."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from invariants.model import Settings
from monitor import clients
from monitor.audit.reader import read_to_end
from monitor.cli.common import ConfigOption, console, load_config, print_json, progress
from monitor.watch import rebuild as rebuilder
from monitor.watch import state as state_store
from monitor.watch import write_ahead

app = typer.Typer(help="The watch's saved checker state: check it, rebuild it when it is damaged or lost.",
                  no_args_is_help=True)


@app.command("check")
def check(as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
          config: Optional[Path] = ConfigOption) -> None:
    """Load the saved checker state as `vigil watch` would, and say what it holds (exit 2 if it cannot
    be loaded, with the recovery command)."""
    cfg = load_config(config)
    directory = cfg.checkpoint_dir()
    st = state_store.load(directory, Settings(cfg.watch.settle_offsets, cfg.watch.horizon_offsets),
                          (cfg.canary.name,))
    path = directory / state_store.STATE_FILE
    pending = write_ahead.pending_ids(directory, st.batch_id)
    for i in pending:  # fetched, not applied yet: `vigil watch` applies them first, so they must read back
        write_ahead.read(write_ahead.path_of(directory, i))
    out = {"state": str(path), "exists": path.exists(), "bytes": path.stat().st_size if path.exists() else 0,
           "batch_id": st.batch_id, "pending_batches": pending, "batches": st.batches, "restarts": st.restarts,
           "records_checked": {iso.value: n for iso, n in st.checker.records_checked.items()},
           "violations": sum(st.checker.counts.values()) + sum(st.liveness.values()),
           "awaiting_rediscovery": sum(st.checker.sink.counted_before.values()),
           "last_batch_at": st.last_batch_at}
    if as_json:
        print_json(out)
        return
    if not out["exists"]:
        console.print(f"no saved state at {path}: `vigil watch` starts a new history")
        return
    age = f", last batch {time.time() - st.last_batch_at:.0f} s ago" if st.last_batch_at else ""
    waiting = (f"; {len(pending)} fetched batch(es) to apply first ({pending[0]}..{pending[-1]}, "
               f"{write_ahead.directory_of(directory)})" if pending else "")
    console.print(f"state OK: {path} ({out['bytes']} bytes), batch {st.batch_id}{age}; "
                  f"{out['violations']} violation(s) counted, records checked {out['records_checked']}{waiting}")


@app.command("rebuild")
def rebuild(
    source: str = typer.Option("file", "--from", help="Where the counted violations come from: `file` (the "
                               "evidence file, watch.evidence.path) or `topic` (the compacted evidence topic, "
                               "watch.evidence.topic, when the file went with the state)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was done, as JSON."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Rebuild a damaged or lost checker state (stop `vigil watch` / `vigil run` first).

    Spark's checkpoint holds only offsets, so the state comes back from what is retained: every
    violation in the evidence is counted again at once (and passed over when the logs show it
    again: nothing is counted twice), the damaged state and its Spark checkpoint are moved aside
    (renamed, kept for investigation), and the next `vigil watch` reads the retained canary and
    ledger logs again from their start (watch.starting_offsets: earliest). Records checked and
    latency histograms restart from what the logs still hold (Prometheus sees one counter reset).
    """
    cfg = load_config(config)
    if source not in ("file", "topic"):
        raise rebuilder.RebuildError(f"--from {source!r}: say `file` or `topic`")
    if source == "topic":
        if not cfg.watch.evidence.topic:
            raise rebuilder.RebuildError("--from topic: watch.evidence.topic is not set, so no evidence topic "
                                         "was written; use --from file")
        read = lambda: rebuilder.evidence_from_topic(read_evidence_topic(cfg))  # noqa: E731
    else:
        read = lambda: rebuilder.evidence_from_file(cfg.evidence_path())  # noqa: E731
    report = rebuilder.rebuild(cfg, read, source, progress)
    if as_json:
        print_json(report.to_json())
        return
    total = sum(report.violations.values())
    console.print(f"state rebuilt at {report.state_path}: {total} violation(s) counted from the evidence "
                  f"({source}){f', {report.torn_lines} torn line(s) left out' if report.torn_lines else ''}.")
    if cfg.watch.starting_offsets != "earliest":
        console.print("[yellow]watch.starting_offsets is `latest`: the next watch reads only new records, so "
                      "what the retained logs hold is not judged again[/]")
    console.print("Start `vigil watch` (or `vigil run`): it reads the retained logs again from their start.")


def read_evidence_topic(cfg) -> list[tuple[bytes | None, bytes | None]]:
    topic = cfg.watch.evidence.topic
    info = clients.describe_topic(clients.admin(cfg), topic)
    if info is None:
        raise rebuilder.RebuildError(f"evidence topic {topic!r} does not exist on {cfg.canary_bootstrap()}")
    records: list[tuple[bytes | None, bytes | None]] = []
    c = clients.consumer(cfg, "read_committed", group="vigil-rebuild", profile="bulk")
    try:
        read_to_end(c, topic, info.partitions, 300.0, lambda m: records.append((m.key(), m.value())), progress)
    finally:
        c.close()
    return records
