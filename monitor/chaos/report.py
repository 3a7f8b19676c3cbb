"""A chaos run written down: ``report.md`` (the field reports' table, the timeline as it ran,
live against audit per invariant, the first evidence lines) and ``result.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from monitor.chaos import charts, sampler
from monitor.chaos.runner import RunResult
from monitor.chaos.scenario import Scenario
from monitor.chaos.scenario import parse as parse_scenario

EVIDENCE_LINES = 3


def table_row(r: RunResult) -> dict[str, Any]:
    """One row of the field reports' table."""
    return row_of(r.to_json(), r.scenario)


def row_of(result: dict[str, Any], s: Scenario) -> dict[str, Any]:
    """The row from a run's ``result.json`` (so a matrix can be summarised again from its files)."""
    live = (result.get("live") or {}).get("violations", {})
    audit = result.get("audit") or {}

    def worst(inv: str) -> int:  # the reader that saw more of it
        return max(sum(n for k, n in live.items() if k.startswith(f"{inv}/{iso}/"))
                   for iso in ("read_committed", "read_uncommitted"))

    outcomes = [w.get("outcomes", {}) for w in result.get("writers", [])]
    acked = sum(o.get("acked", 0) for o in outcomes)
    written = sum(n for o in outcomes for k, n in o.items() if k != "pending")
    lost = worst("lost_write")
    v = result.get("verdict") or {}
    return {"scenario": s.name, "acks": "/".join(sorted({w.acks for w in s.writers})),
            "transactions": any(w.transactional for w in s.writers), "min_isr": s.topic.min_insync_replicas,
            "unclean": s.topic.unclean_leader_election, "elr": result.get("elr") or "?",
            "fault": ", ".join(dict.fromkeys(st.fault for st in s.timeline)),
            "written": written, "acked": acked, "lost": lost,
            "lost_pct": round(100.0 * lost / acked, 3) if acked else 0.0, "duplicates": worst("duplicate"),
            "acks0_missing": max((audit.get("unconfirmed_missing") or {}).values(), default=0),
            "promise": "kept" if v.get("promise_kept") else "broken", "passed": bool(v.get("passed"))}


def rows_from(out_dir: Path, known: dict[str, Scenario]) -> list[dict[str, Any]]:
    """The rows of every run under ``out_dir`` (each ``NAME/result.json``), in scenario order."""
    rows = []
    for path in sorted(out_dir.glob("*/result.json")):
        result = json.loads(path.read_text())
        s = known.get(result["scenario"])
        if s is None and "spec" in result:  # a scenario file of the user's, as it ran
            s = parse_scenario(result["spec"], str(path))
        if s is not None:
            rows.append(row_of(result, s))
    order = list(known)
    return sorted(rows, key=lambda r: (order.index(r["scenario"]) if r["scenario"] in order else len(order),
                                       r["scenario"]))


def _md_table(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(c for row in rows for c in row))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in cols) + " |" for row in rows]
    return "\n".join(lines)


def _evidence(r: RunResult) -> dict[str, list[str]]:
    path = r.config.evidence_path()
    first: dict[str, list[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            inv = json.loads(line).get("invariant", "?")
            if len(first.setdefault(inv, [])) < EVIDENCE_LINES:
                first[inv].append(line)
    return first


def write(r: RunResult) -> Path:
    (r.run_dir / "result.json").write_text(json.dumps({**r.to_json(), "row": table_row(r)}, indent=2))
    samples = sampler.load(r.run_dir / "timeline.jsonl")
    chart = charts.render(samples, r.steps, r.phases, f"{r.scenario.name}: {r.scenario.title}",
                          r.run_dir / "timeline.png") if samples else None
    v = r.verdict
    out = [f"# {r.scenario.name}: {r.scenario.title}", ""]
    if r.scenario.field_report:
        out += [f"Field reports: {r.scenario.field_report}.", ""]
    out += [_md_table([table_row(r)]), ""]
    if v is not None:
        out += [f"**Verdict: {'PASSED' if v.passed else 'FAILED'}** — Kafka's promise "
                f"{'kept' if v.promise_kept else 'broken'}; live {'==' if v.live_equals_audit else '!='} audit; "
                f"expectations {'met' if v.expectations_met else 'not met'}.", ""]
        out += [f"- unmet: {u}" for u in v.unmet] + [f"- note: {n}" for n in v.notes]
        out += [f"- disagreement: {d}" for d in v.disagreements] + [""]
    out += ["## Timeline", "", f"Phases (s after the run began): {r.phases}", ""]
    if chart is not None:
        out += [f"![{r.scenario.name} timeline]({chart.name})", ""]
    out += [_md_table(r.steps) if r.steps else "(no steps)", ""]
    live = r.summary.get("checker", {}).get("violations", {})
    by_class = r.audit.get("by_durability", {})
    rows = [{"invariant/isolation/class": k, "live": n,
             "audit": by_class.get(k.split("/")[1], {}).get(k.split("/")[0], {}).get(k.split("/")[2], "–")}
            for k, n in sorted(live.items())]
    out += ["## Live and audit", "", _md_table(rows) if rows else "No violation counted live.", ""]
    group = r.audit.get("groups")
    if group and "skipped" in group:
        out += ["## Consumer-group canary", "", f"Not audited: {group['skipped']}.", ""]
    elif group:  # the consumer-group canary ran: what the faults did to it
        out += ["## Consumer-group canary", "",
                f"By the audit: group_skip {group['group_skip']}, group_rewind {group['group_rewind']}, "
                f"rebalance_stall {group['rebalance_stall']}; {group['judged_records']} of "
                f"{group['reference_records']} read_committed records passed by an acknowledged commit and judged; "
                f"{group['redeliveries']} redeliveries (offsets consumed again, rewritten ones included), "
                f"{group['offset_resets']} offset resets, {group['observations_lost']} observations lost; "
                f"rebalances (member:last reason): {group['rebalances'] or 'none'}.", ""]
    ev = _evidence(r)
    if ev:
        out += ["## First evidence lines", ""]
        for inv, lines in sorted(ev.items()):
            out += [f"### {inv}", "", "```", *lines, "```", ""]
    path = r.run_dir / "report.md"
    path.write_text("\n".join(out))
    return path


MATRIX_NOTE = ("Each row is one run of `vigil chaos run` on the local 3-node KRaft cluster; `lost` is the "
               "reader that saw more of it, confirmed by `vigil audit`; `promise` is Kafka's promise as Vigil "
               "classes every violation (at_risk losses keep it); `passed`: live == audit and the scenario's "
               "expectations met. Each scenario's report.md and timeline.png are in its directory.")


def write_matrix(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """One summary table over every scenario run (a row with ``error`` for one that could not run)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "matrix.json").write_text(json.dumps(rows, indent=2))
    ran = [r for r in rows if "error" not in r]
    text = ["# Chaos matrix", "", MATRIX_NOTE, "", _md_table(ran) if ran else "(no scenario ran)", ""]
    text += [f"- **{r['scenario']}** could not run: {r['error']}" for r in rows if "error" in r]
    path = out_dir / "matrix.md"
    path.write_text("\n".join(text) + "\n")
    return path
