"""The invariant catalog: the names, severities and isolation scopes of everything Vigil checks.

This module is the single list of invariant names. The drill table, the metrics (one series
per invariant and isolation level) and the checker modules all refer to these members, so a
new invariant is added here first.

Isolation scope says which readers an invariant is judged for:

* ``BOTH`` — judged separately for the ``read_committed`` and the ``read_uncommitted``
  reader; a fault that both readers see counts once in each.
* ``READ_COMMITTED`` — only meaningful for a ``read_committed`` reader (aborted reads,
  partial transactions, a stuck last stable offset).
* ``WRITER`` — about the writers and their outcome ledger, not about a reader; exported with
  the isolation label ``none``.

The exact definitions are in the module docstrings of the checker modules and in
``docs/invariants.md``; this catalog only carries what other code needs to know by name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Isolation(str, enum.Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"
    NONE = "none"


class Scope(str, enum.Enum):
    BOTH = "both"
    READ_COMMITTED = "read_committed"
    WRITER = "writer"

    @property
    def isolations(self) -> tuple[Isolation, ...]:
        if self is Scope.BOTH:
            return (Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED)
        if self is Scope.READ_COMMITTED:
            return (Isolation.READ_COMMITTED,)
        return (Isolation.NONE,)


class Severity(str, enum.Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"  # a measurement of behaviour Kafka allows: a dashboard panel, never a page


class Invariant(str, enum.Enum):
    LOST_WRITE = "lost_write"
    UNSEEN = "unseen"
    DUPLICATE = "duplicate"
    REORDER = "reorder"
    ZERO_OFFSET = "zero_offset"
    OFFSET_MISMATCH = "offset_mismatch"
    INCONSISTENT_OFFSET = "inconsistent_offset"
    ABORTED_READ = "aborted_read"
    PARTIAL_TXN = "partial_txn"
    STALLED_POLL = "stalled_poll"
    LSO_STUCK = "lso_stuck"
    PRODUCER_STALLED = "producer_stalled"
    OUTCOME_GAP = "outcome_gap"
    G0_WRITE_CYCLE = "g0_write_cycle"
    EOS_LOSS = "eos_loss"
    EOS_DUPLICATE = "eos_duplicate"
    GROUP_SKIP = "group_skip"
    GROUP_REWIND = "group_rewind"
    REBALANCE_STALL = "rebalance_stall"


@dataclass(frozen=True)
class InvariantInfo:
    invariant: Invariant
    severity: Severity
    scope: Scope
    summary: str


CATALOG: dict[Invariant, InvariantInfo] = {
    info.invariant: info
    for info in (
        InvariantInfo(
            Invariant.LOST_WRITE, Severity.CRITICAL, Scope.BOTH,
            "an acked write is missing although the reader fetched a range containing its acked offset",
        ),
        InvariantInfo(
            Invariant.UNSEEN, Severity.WARNING, Scope.BOTH,
            "an acked write not yet read after a deadline, reader not yet past it (a gauge, not a loss)",
        ),
        InvariantInfo(
            Invariant.DUPLICATE, Severity.CRITICAL, Scope.BOTH,
            "one write (writer, partition, seq) present at two or more offsets",
        ),
        InvariantInfo(
            Invariant.REORDER, Severity.CRITICAL, Scope.BOTH,
            "within one writer and partition, offset order disagrees with seq order",
        ),
        InvariantInfo(
            Invariant.ZERO_OFFSET, Severity.CRITICAL, Scope.BOTH,
            "a write acknowledged or read at offset 0 where offset 0 cannot be its place",
        ),
        InvariantInfo(
            Invariant.OFFSET_MISMATCH, Severity.CRITICAL, Scope.BOTH,
            "a write acknowledged at offset o is read, but never at o",
        ),
        InvariantInfo(
            Invariant.INCONSISTENT_OFFSET, Severity.CRITICAL, Scope.BOTH,
            "one (topic id, partition, offset) read holding two different records",
        ),
        InvariantInfo(
            Invariant.ABORTED_READ, Severity.CRITICAL, Scope.READ_COMMITTED,
            "a read_committed reader sees a record of an aborted transaction (G1a)",
        ),
        InvariantInfo(
            Invariant.PARTIAL_TXN, Severity.CRITICAL, Scope.READ_COMMITTED,
            "a read_committed reader past a committed transaction saw only some of its records",
        ),
        InvariantInfo(
            Invariant.STALLED_POLL, Severity.CRITICAL, Scope.BOTH,
            "records are available beyond the reader's position but polls make no progress",
        ),
        InvariantInfo(
            Invariant.LSO_STUCK, Severity.WARNING, Scope.READ_COMMITTED,
            "the last stable offset stops advancing while the high watermark moves on",
        ),
        InvariantInfo(
            Invariant.PRODUCER_STALLED, Severity.CRITICAL, Scope.WRITER,
            "a canary writer gets no acknowledgement for longer than a threshold",
        ),
        InvariantInfo(
            Invariant.OUTCOME_GAP, Severity.CRITICAL, Scope.WRITER,
            "the outcome ledger of a writer has a gap in its own numbering",
        ),
        InvariantInfo(
            Invariant.G0_WRITE_CYCLE, Severity.INFO, Scope.READ_COMMITTED,
            "two transactions in opposite orders on two partitions (G0; Kafka allows it, counted, never paged)",
        ),
        InvariantInfo(
            Invariant.EOS_LOSS, Severity.CRITICAL, Scope.READ_COMMITTED,
            "the EOS pipeline's group committed past a canary record that has no copy in its committed output",
        ),
        InvariantInfo(
            Invariant.EOS_DUPLICATE, Severity.CRITICAL, Scope.READ_COMMITTED,
            "a canary record copied twice into the EOS pipeline's committed output",
        ),
        InvariantInfo(
            Invariant.GROUP_SKIP, Severity.CRITICAL, Scope.READ_COMMITTED,
            "the group canary's acknowledged commit passed a canary record no member of the group had consumed",
        ),
        InvariantInfo(
            Invariant.GROUP_REWIND, Severity.CRITICAL, Scope.READ_COMMITTED,
            "a group member was delivered a record below the group's acknowledged committed offset",
        ),
        InvariantInfo(
            Invariant.REBALANCE_STALL, Severity.WARNING, Scope.READ_COMMITTED,
            "a partition of the group canary had no live owner for longer than groups.stall_ms",
        ),
    )
}


def series() -> list[tuple[Invariant, Isolation]]:
    """Every (invariant, isolation) pair that is exported, in catalog order."""
    return [(inv, iso) for inv, info in CATALOG.items() for iso in info.scope.isolations]
