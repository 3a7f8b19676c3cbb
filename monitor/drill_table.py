"""Which invariants each drill triggers: one fixed table, pinned by tests.

A drill does not declare its effects at run time; this table does, and the detection tests
(and ``vigil drill --json``'s ``expected`` field) read it from here. ``per_count`` is how
much each invariant's counter moves per unit of ``--count``.

=================  ==========================================================  ==========================
drill              what the lying writer/broker does (per unit of --count)     triggers (isolation)
=================  ==========================================================  ==========================
lost_write         ledger claims acked(o) for a record never written; o holds  lost_write (rc, ru)
                   an honest cover record of the same drill writer
duplicate          the same record (writer, partition, seq) written twice;     duplicate (rc, ru)
                   the ledger says acked at the first offset
reorder            seq s+1 written before seq s (both acked, truthfully)       reorder (rc, ru)
zero_offset        a record written at o > 0; the ledger claims acked(0)       zero_offset (rc, ru),
                   while offset 0 holds another record                         offset_mismatch (rc, ru)
                   (offset 0 deleted by retention: the log start listed after  (zero_offset only, judged
                   the claim, recorded with it as a writer does, says so)       at acknowledgement time)
offset_mismatch    a record written at o; the ledger claims acked(o + 1); an     offset_mismatch (rc, ru)
                   honest cover record written after it
aborted_read       a transaction that committed, recorded as aborted           aborted_read (rc) per record
partial_txn        a transaction recorded as committed with two records; only  partial_txn (rc) per txn
                   the first was ever written
outcome_gap        ledger entry numbers skipped                                outcome_gap (none) per entry
lso_stuck          a transaction left open on a partition for --hold seconds,  lso_stuck (rc) per partition
                   then aborted
g0_write_cycle     two transactions open at once, each writing this partition  g0_write_cycle (rc), info
                   and the next, in opposite orders on the two; both committed
=================  ==========================================================  ==========================

Side effects that are not violations: the honest cover records are ordinary canary writes;
``read_uncommitted`` sees the ``aborted_read`` drill's records as aborted-and-visible
(allowed, counted); an ``lso_stuck`` drill holds back ``read_committed`` reads of that
partition, so the ``unseen`` gauge may rise until the transaction ends. A ``g0_write_cycle``
drill's transactions stay open for four round trips: a canary transaction written meanwhile on the
same two partitions can be ordered against them both ways too — a real write cycle Kafka allows,
counted as well (the drill's own cycles are the ones between its two transactions).
"""

from __future__ import annotations

from dataclasses import dataclass

from invariants.catalog import Invariant, Isolation

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE


@dataclass(frozen=True)
class Effect:
    invariant: Invariant
    isolation: Isolation
    per_count: int = 1


DRILL_TABLE: dict[str, tuple[Effect, ...]] = {
    "lost_write": (Effect(Invariant.LOST_WRITE, RC), Effect(Invariant.LOST_WRITE, RU)),
    "duplicate": (Effect(Invariant.DUPLICATE, RC), Effect(Invariant.DUPLICATE, RU)),
    "reorder": (Effect(Invariant.REORDER, RC), Effect(Invariant.REORDER, RU)),
    "zero_offset": (
        Effect(Invariant.ZERO_OFFSET, RC), Effect(Invariant.ZERO_OFFSET, RU),
        Effect(Invariant.OFFSET_MISMATCH, RC), Effect(Invariant.OFFSET_MISMATCH, RU),
    ),
    "offset_mismatch": (Effect(Invariant.OFFSET_MISMATCH, RC), Effect(Invariant.OFFSET_MISMATCH, RU)),
    "aborted_read": (Effect(Invariant.ABORTED_READ, RC),),
    "partial_txn": (Effect(Invariant.PARTIAL_TXN, RC),),
    "outcome_gap": (Effect(Invariant.OUTCOME_GAP, NONE),),
    "lso_stuck": (Effect(Invariant.LSO_STUCK, RC),),
    "g0_write_cycle": (Effect(Invariant.G0_WRITE_CYCLE, RC),),
}

DRILL_KINDS = tuple(DRILL_TABLE)


def expected_counts(kind: str, count: int, below_log_start: int = 0) -> dict[tuple[Invariant, Isolation], int]:
    """How much each (invariant, isolation) counter must move for ``count`` units of ``kind``
    (``below_log_start``: of those, zero_offset claims made below the log start listed after them,
    which are judged at acknowledgement time, where the record is read does not count)."""
    out = {(e.invariant, e.isolation): e.per_count * count for e in DRILL_TABLE[kind]}
    if kind == "zero_offset" and below_log_start:
        for iso in (RC, RU):
            out[(Invariant.OFFSET_MISMATCH, iso)] -= below_log_start
    return {k: n for k, n in out.items() if n}
