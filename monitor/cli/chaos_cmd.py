"""`vigil chaos`: chaos-day scenarios on the local cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from invariants.errors import VigilError
from monitor.chaos import scenario as scenarios
from monitor.chaos.heal import heal_cluster
from monitor.cli.common import ConfigOption, console, load_config, print_json, progress
from monitor.cluster.local_cluster import LocalCluster

app = typer.Typer(
    help="Chaos days on the local cluster: scenarios (writers, topic settings, a timeline of faults, "
    "expected verdicts) as data; `heal` undoes whatever a run left behind.",
    no_args_is_help=True,
)

ScenarioFiles = typer.Option(None, "--scenario", help="A scenario YAML file of your own (repeatable).")
ReportDir = typer.Option(Path("chaos-reports"), "--report", help="Directory for the reports.")
MetricsPort = typer.Option(9470, help="Metrics port of each run's checker.")
Warmup = typer.Option(None, "--warmup", min=0, help="Seconds of writes before the first fault, instead of "
                      "each scenario's warmup_s (20 unless it says otherwise).")
Recovery = typer.Option(None, "--recovery", min=0, help="Seconds of writes after the last fault before the "
                        "run stops and drains, instead of each scenario's recovery_s (30 unless it says "
                        "otherwise). The checker reads to the end either way; a longer recovery shows more of how "
                        "the cluster came back, and decides more of the writes a fault left at risk.")
WithCanaries = typer.Option(None, "--with", help="Run an application canary in each run as well (repeatable): "
                            "groups (the consumer-group canary) or eos (the exactly-once pipeline), judged live "
                            "and by the audit with the rest; the config's groups.enabled / eos.enabled too.")


@app.command("list")
def list_(scenario: Optional[list[Path]] = ScenarioFiles,
          as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The shipped scenarios (S1–S10 of the chaos matrix and more), and any given with --scenario."""
    known = list(scenarios.builtin().values()) + [scenarios.load_file(f) for f in scenario or []]
    if as_json:
        print_json([{"name": s.name, "title": s.title, "faults": [st.fault for st in s.timeline],
                     "fault_s": s.fault_s, "expect": s.expect.model_dump()} for s in known])
        return
    table = Table(title="chaos scenarios", title_justify="left")
    for col in ("name", "what happens", "writers", "topic", "expect"):
        table.add_column(col)
    for s in known:
        writers = ", ".join(f"{w.name} (acks={w.acks}{', txn' if w.transactional else ''})" for w in s.writers)
        t = s.topic
        topic = f"RF{t.replication_factor} minISR{t.min_insync_replicas}" + \
            (" unclean" if t.unclean_leader_election else "") + (f" ELR {s.elr}" if s.elr != "any" else "")
        kept = {True: "promise kept", False: "promise broken", None: "whatever happens"}[s.expect.promise_kept]
        extra = ([f"none of {', '.join(s.expect.zero)}"] if s.expect.zero else []) + \
            ([f"some {', '.join(s.expect.nonzero)}"] if s.expect.nonzero else [])
        table.add_row(s.name, s.title, writers, topic, "; ".join([kept, *extra]))
    console.print(table)


@app.command()
def run(names: list[str] = typer.Argument(None, help="Scenario names (see `vigil chaos list`)."),
        scenario: Optional[list[Path]] = ScenarioFiles,
        report: Path = ReportDir,
        metrics_port: int = MetricsPort,
        with_: Optional[list[str]] = WithCanaries,
        warmup: Optional[float] = Warmup,
        recovery: Optional[float] = Recovery,
        as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
        config: Optional[Path] = ConfigOption) -> None:
    """Run scenarios on the local cluster, one after another: fresh topics, writers and checker, a
    warm-up, the fault timeline, recovery, then `vigil audit` and the verdict — Kafka's promise kept
    or broken, live == audit, the scenario's expectations met. Each writes DIR/NAME/report.md,
    result.json, timeline.jsonl and timeline.png. Exits 1 when a verdict fails. Ctrl-C stops the
    faults and heals the cluster before exiting."""
    chosen = _phases(scenarios.select(list(names or []), list(scenario or [])), warmup, recovery)
    if not chosen:
        raise scenarios.ScenarioError("name at least one scenario (see `vigil chaos list`)")
    results = [_run_one(runner, s, report) for runner in [_runner(config, metrics_port, with_)] for s in chosen]
    if as_json:
        print_json([r.to_json() for r in results])
    if not all(r.verdict and r.verdict.passed for r in results):
        raise typer.Exit(1)


@app.command()
def matrix(scenario: Optional[list[Path]] = ScenarioFiles,
           only: Optional[list[str]] = typer.Option(None, "--only", help="Run just these scenarios (repeatable)."),
           report: Path = ReportDir,
           metrics_port: int = MetricsPort,
           with_: Optional[list[str]] = WithCanaries,
           warmup: Optional[float] = Warmup,
           recovery: Optional[float] = Recovery,
           summarize: bool = typer.Option(False, "--summarize", help="Run nothing: write the summary again from "
                                          "the runs already under --report (their result.json)."),
           config: Optional[Path] = ConfigOption) -> None:
    """Every shipped scenario (and any --scenario file) in turn, then one summary table over all of
    them: DIR/matrix.md and DIR/matrix.json. A scenario that cannot run (its ELR need, a failed
    start) is a row with its error, and the matrix goes on. About 2-3 minutes per scenario.
    Exits 1 when any verdict fails or any scenario could not run."""
    from monitor.chaos import report as reports

    chosen = _phases(scenarios.select(list(only or scenarios.builtin()), list(scenario or [])), warmup, recovery)
    if summarize:
        rows = reports.rows_from(report, {s.name: s for s in chosen})
        errors = json.loads((report / "matrix.json").read_text()) if (report / "matrix.json").exists() else []
        rows += [r for r in errors if "error" in r]
        path = reports.write_matrix(rows, report)
        console.print(f"matrix: {len(rows)} rows summarised again; {path}")
        return
    runner = _runner(config, metrics_port, with_)
    rows = []
    for i, s in enumerate(chosen, 1):
        progress(f"matrix: scenario {i}/{len(chosen)}: {s.name}")
        try:
            rows.append(reports.table_row(_run_one(runner, s, report)))
        except VigilError as exc:  # a bad scenario for this cluster, a run that failed to start
            progress(f"{s.name}: could not run: {exc}")
            rows.append({"scenario": s.name, "error": str(exc)})
    path = reports.write_matrix(rows, report)
    console.print(f"matrix: {sum(1 for r in rows if r.get('passed'))} of {len(rows)} passed; summary {path}")
    if not all(r.get("passed") for r in rows):
        raise typer.Exit(1)


CANARIES = ("groups", "eos")


def _phases(chosen: list[scenarios.Scenario], warmup: Optional[float],
            recovery: Optional[float]) -> list[scenarios.Scenario]:
    """The scenarios with --warmup / --recovery in place of their own warm-up and recovery."""
    update = {k: v for k, v in (("warmup_s", warmup), ("recovery_s", recovery)) if v is not None}
    return [s.model_copy(update=update) for s in chosen] if update else chosen


def _runner(config: Optional[Path], metrics_port: int, with_: Optional[list[str]] = None):
    from monitor.chaos.runner import Runner
    from monitor.config import parse, to_document

    unknown = sorted(set(with_ or ()) - set(CANARIES))
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)}: not an application canary (choose from "
                                 f"{', '.join(CANARIES)})", param_hint="--with")
    cfg = load_config(config)
    if with_:
        doc = to_document(cfg)
        for name in with_:
            doc[name] = {**doc.get(name, {}), "enabled": True}
        cfg = parse(doc, str(config or "(defaults)"))
    cluster = LocalCluster(cfg.cluster, progress)
    cluster.up()
    return Runner(cfg, cluster, progress, metrics_port)


def _run_one(runner, s: scenarios.Scenario, report: Path):
    from monitor.chaos import report as reports

    result = runner.run(s, report)
    path = reports.write(result)
    row = reports.table_row(result)
    progress(f"{s.name}: {'PASSED' if row['passed'] else 'FAILED'} — acked {row['acked']}, lost {row['lost']}, "
             f"promise {row['promise']}; report {path}")
    return result


@app.command()
def heal(config: Optional[Path] = ConfigOption) -> None:
    """Resume paused nodes, lift file-size limits, heal cut links, start stopped nodes (also after a
    chaos run killed with -9)."""
    done = heal_cluster(LocalCluster(load_config(config).cluster, progress))
    console.print("\n".join(done) if done else "the cluster was healthy: nothing to undo")
