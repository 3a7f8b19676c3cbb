"""A chaos run's verdict, from the live totals and the audit: Kafka's promise kept or broken (as
Vigil classes every violation, :mod:`invariants.promises`), live == audit, and the scenario's
expectations met."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from invariants.catalog import CATALOG, Invariant
from monitor.audit.oracle import HISTORY_INVARIANTS
from monitor.chaos.scenario import Scenario

HISTORY = {i.value for i in HISTORY_INVARIANTS}
# the application canaries' (when the run's config enables them): the audit recomputes them from
# their own logs; a safety one counted in the guaranteed class breaks the promise as a history one does
CANARY_SAFETY = {i.value for i in (Invariant.EOS_LOSS, Invariant.EOS_DUPLICATE, Invariant.GROUP_SKIP,
                                   Invariant.GROUP_REWIND)}
SAFETY = HISTORY | CANARY_SAFETY
COMPARED = SAFETY | {Invariant.REBALANCE_STALL.value}
# the final log cannot show an offset that held one record when read and another later
LIVE_MAY_EXCEED = {Invariant.INCONSISTENT_OFFSET.value}
Key = tuple[str, str, str]  # invariant, isolation, durability


def live_counts(run_summary: dict[str, Any]) -> dict[Key, int]:
    """From `vigil run --json`'s final totals."""
    out: dict[Key, int] = {}
    for key, n in run_summary.get("checker", {}).get("violations", {}).items():
        inv, iso, durability = key.split("/")
        out[(inv, iso, durability)] = out.get((inv, iso, durability), 0) + int(n)
    return out


def audit_counts(report: dict[str, Any]) -> dict[Key, int]:
    """From `vigil audit --json`: the history invariants and the application canaries' by
    durability class."""
    return {(inv, iso, d): int(n) for iso, by_inv in report.get("by_durability", {}).items()
            for inv, by_d in by_inv.items() if inv in COMPARED for d, n in by_d.items() if n}


def vanished_beyond_audit(evidence: Iterable[dict[str, Any]], undecided: Iterable[list[Any]]) -> dict[Key, int]:
    """Live ``lost_write``s of records read at their acknowledged offset and later gone from it
    (``cause="vanished"``) that the audit leaves undecided (``vigil audit --json``,
    ``undecided_writes``): the final log does not reach past their settle window (a truncated log
    that has not grown back that far). Live saw them read; the final log cannot show that, as with
    ``inconsistent_offset``. Matched write by write, not by a rule of their own."""
    open_writes = {tuple(u) for u in undecided}
    out: dict[Key, int] = {}
    for e in evidence:
        if e.get("invariant") != Invariant.LOST_WRITE.value or e.get("cause") != "vanished":
            continue
        if (e["isolation"], e["topic_id"], e["partition"], e["writer_id"], e["incarnation"], e["seq"]) in open_writes:
            key = (Invariant.LOST_WRITE.value, e["isolation"], e["durability"])
            out[key] = out.get(key, 0) + 1
    return out


@dataclass
class Verdict:
    promise_kept: bool
    live_equals_audit: bool
    expectations_met: bool
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    unmet: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.live_equals_audit and self.expectations_met

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "promise_kept": self.promise_kept, "live_equals_audit": self.live_equals_audit,
                "expectations_met": self.expectations_met, "disagreements": self.disagreements, "unmet": self.unmet,
                "notes": self.notes}


def judge(scenario: Scenario, live: dict[Key, int], audit: dict[Key, int],
          beyond_audit: dict[Key, int] | None = None) -> Verdict:
    """``beyond_audit``: live verdicts the audit leaves undecided (:func:`vanished_beyond_audit`);
    live must exceed the audit by exactly these (equal counts then mean the audit counted losses
    live did not)."""
    broken = {k: n for k, n in live.items() if n and k[2] == "guaranteed" and k[0] in SAFETY}
    disagreements, notes = [], []
    beyond_audit = beyond_audit or {}
    for key in sorted({k for k in live if k[0] in COMPARED} | set(audit) | set(beyond_audit)):
        lv, av = live.get(key, 0), audit.get(key, 0)
        if lv == av and not beyond_audit.get(key):
            continue
        if beyond_audit.get(key) and lv == av + beyond_audit[key]:
            notes.append(f"{'/'.join(key)}: live {lv}, audit {av} — {beyond_audit[key]} acked writes read at their "
                         "offset and later gone from it, where the final log does not reach past their settle "
                         "window (the audit leaves them undecided)")
            continue
        if key[0] in LIVE_MAY_EXCEED and lv > av:
            notes.append(f"{'/'.join(key)}: live {lv}, audit {av} — offsets rewritten after they were read, which "
                         "the final log cannot show (see the evidence)")
            continue
        disagreements.append({"invariant": key[0], "isolation": key[1], "durability": key[2], "live": lv, "audit": av})
    total = {inv.value: sum(n for k, n in live.items() if k[0] == inv.value) for inv in CATALOG}
    unmet = [f"{inv} counted {total.get(inv, 0)}, expected none" for inv in scenario.expect.zero if total.get(inv, 0)]
    unmet += [f"{inv} never counted" for inv in scenario.expect.nonzero if not total.get(inv, 0)]
    kept = not broken
    if scenario.expect.promise_kept is not None and scenario.expect.promise_kept != kept:
        unmet.append(f"Kafka's promise {'kept' if kept else 'broken'}, expected "
                     f"{'kept' if scenario.expect.promise_kept else 'broken'}")
    return Verdict(kept, not disagreements, not unmet, disagreements, unmet, notes)
