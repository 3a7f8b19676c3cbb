"""`vigil audit`: the offline ground truth, from a full read of the canary topic and ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from invariants.catalog import CATALOG, Invariant, Isolation
from invariants.model import DURABILITIES, Durability
from invariants.promises import latest_topic_settings, read_record
from monitor import clients
from monitor.audit.hanging import hanging_transactions
from monitor.audit.oracle import HISTORY_INVARIANTS, audit
from monitor.audit.reader import read_history
from monitor.cli.common import ConfigOption, console, load_config, print_json, progress


def audit_report(cfg: Any, timeout_s: float = 600.0) -> dict[str, Any]:
    h = read_history(cfg, timeout_s, progress)
    result = audit(h.entries, h.reads, cfg.watch.settle_offsets, h.log_start, watched=[cfg.canary.name],
                   topic_ids_now={cfg.canary.name: h.topic_id or None}, read_log_start=h.read_log_start)
    counts: dict[str, dict[str, int]] = {iso.value: {} for iso in Isolation}
    by_class: dict[str, dict[str, dict[str, int]]] = {iso.value: {} for iso in Isolation}
    for inv in (*HISTORY_INVARIANTS, Invariant.LSO_STUCK):
        for iso in CATALOG[inv].scope.isolations:
            counts[iso.value][inv.value] = result.count(inv, iso)
            by_class[iso.value][inv.value] = {d.value: result.counts.get((inv, iso, d), 0) for d in DURABILITIES}
    counts[Isolation.READ_COMMITTED.value][Invariant.LSO_STUCK.value] = hanging_transactions(
        h.entries, cfg.watch.lso_stuck_threshold_s, h.reads.get(Isolation.READ_UNCOMMITTED, {}))
    canaries: dict[Invariant, int] = {}  # the application canaries' counts
    details: dict[str, Any] = {}  # and what else their audits found
    if cfg.eos.enabled:  # the EOS pipeline, from its group's offsets, its output and the canary topic
        from monitor.eos.audit import audit as eos_audit

        verdict = eos_audit(cfg, cfg.canary.name, cfg.eos.output_topic, cfg.eos.group, timeout_s).verdict
        canaries.update({Invariant.EOS_LOSS: len(verdict.losses), Invariant.EOS_DUPLICATE: len(verdict.duplicates)})
    if cfg.groups.enabled and clients.describe_topic(clients.admin(cfg), cfg.groups.observation_topic) is None:
        # no member ever ran here (a history from before the group canary, a `vigil watch` without them)
        details["groups"] = {"skipped": f"no observation topic {cfg.groups.observation_topic!r}"}
    elif cfg.groups.enabled:  # the group canary, from its observation log and the canary topic
        from monitor.group.audit import audit as group_audit, canary_recreated, reused_offsets, rewrite_marks_of

        group = group_audit(cfg, cfg.canary.name, cfg.groups.observation_topic, cfg.groups.stall_ms, timeout_s,
                            recreated=canary_recreated(h.entries, cfg.canary.name, h.topic_id),
                            reused=reused_offsets(result.reused, h.topic_id or None),
                            marks=rewrite_marks_of(result.rewrite_marks, h.topic_id or None))
        canaries.update({inv: group.counts[inv.value]
                         for inv in (Invariant.GROUP_SKIP, Invariant.GROUP_REWIND, Invariant.REBALANCE_STALL)})
        details["groups"] = group.summary()
    rc = Isolation.READ_COMMITTED.value
    # a record read, on the canary topic's latest settings; a stall is about no setting
    read = read_record(latest_topic_settings(h.entries, h.topic_id))
    for inv, n in canaries.items():
        durability = Durability.GUARANTEED if inv is Invariant.REBALANCE_STALL else read.durability
        counts[rc][inv.value] = n
        by_class[rc][inv.value] = {d.value: (n if d is durability else 0) for d in DURABILITIES}
    examples = {f"{inv.value}/{iso.value}": ex for (inv, iso), ex in result.examples.items() if ex}
    return {
        **counts,
        "by_durability": by_class,
        "lost_writes_by_writer": [{"writer": w, "isolation": iso.value, "durability": d.value, "count": n}
                                  for (w, iso, d), n in sorted(result.lost_by_writer.items(),
                                                               key=lambda kv: (kv[0][0], kv[0][1].value)) if n],
        "examples": examples,
        "topic_id": h.topic_id,
        "records_checked": {iso.value: n for iso, n in result.records_checked.items()},
        "expired_unread": result.expired_unread,
        "expired_unread_by_reason": {reason: n for reason, n in sorted(result.expired.items()) if n},
        "lost_writes_by_cause": {f"{cause}/{iso.value}": n for (cause, iso), n in sorted(
            result.lost_by_cause.items(), key=lambda kv: (kv[0][0], kv[0][1].value)) if n},
        "aborted_records_read": result.aborted_allowed,
        "unconfirmed_missing": {iso.value: n for iso, n in result.unconfirmed_missing.items()},
        "undecided": result.undecided,
        # which undecided writes: [isolation, topic_id, partition, writer_id (hex, as in evidence), incarnation, seq]
        "undecided_writes": [[iso, tid, p, f"{wid:016x}", inc, seq]
                             for iso, tid, p, wid, inc, seq in sorted(result.undecided_writes)],
        "malformed": h.malformed,
        **details,
        "ledger_entries": len(h.entries),
        "history": {  # where what the audit could read begins
            "ledger_first_offsets": {str(p): off for p, off in sorted(h.ledger_start.items())},
            "canary_log_start": {str(p): off for (_tid, p), off in sorted(h.log_start.items())},
            "writers_joined_mid_stream": result.writers_joined_mid_stream,
        },
    }


def audit_cmd(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="Print {isolation: {invariant: count}} plus examples."),
    timeout: float = typer.Option(600.0, help="Give up when the end of a partition is not reached within this."),
) -> None:
    """Audit the whole history offline: the ground truth the live checker must agree with.

    Reads every partition from the beginning in read_committed and read_uncommitted plus the
    whole ledger, and counts every invariant exactly.

    This is the ground truth the live checker is compared with: an independent, whole-history
    implementation. With `eos.enabled`, the EOS pipeline too (`vigil eos audit`); with
    `groups.enabled`, the group canary (`vigil group audit`: its rebalance_stall from the
    observations' timestamps, as live). Liveness invariants are time-based and live only;
    `lso_stuck` here counts
    the (transaction, partition) pairs whose records the final log holds and that the ledger shows
    holding the log back longer than `watch.lso_stuck_threshold_s` (see docs/invariants.md).
    """
    cfg = load_config(config)
    report = audit_report(cfg, timeout)
    if as_json:
        print_json(report)
        return
    table = Table(title=f"audit of {cfg.canary.name} ({report['topic_id'] or 'topic missing'})")
    table.add_column("invariant")
    table.add_column("isolation")
    table.add_column("count", justify="right")
    for iso in Isolation:
        for inv, n in report[iso.value].items():
            table.add_row(inv, iso.value, f"[red]{n}[/]" if n else "0")
    console.print(table)
    console.print(f"records checked: {report['records_checked']}  expired unread: {report['expired_unread']} "
                  f"{report['expired_unread_by_reason'] or ''}  "
                  f"aborted records read (read_uncommitted, allowed): {report['aborted_records_read']}  "
                  f"not yet judgeable: {report['undecided']}")
    for row in report["lost_writes_by_writer"]:
        console.print(f"lost writes of writer {row['writer'] or '?'} ({row['isolation']}): {row['count']} "
                      f"[{row['durability']}]")
    if "skipped" in report.get("groups", {}):
        console.print(f"group canary: not audited ({report['groups']['skipped']})")
    hist = report["history"]
    console.print(f"history begins at ledger offsets {hist['ledger_first_offsets']} and canary log start "
                  f"{hist['canary_log_start']}; writers joined mid-stream: {hist['writers_joined_mid_stream']}")
