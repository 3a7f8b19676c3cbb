"""Transactions family: ``aborted_read`` (G1a) and ``partial_txn``, ``read_committed`` only.

A transaction is identified by (writer, incarnation, txn id); its intended writes come from
the writer's ``intent`` entry, its outcome from the ``txn`` entry (``committed``/``aborted``
when the commit or abort call returned, otherwise ``indeterminate``; a writer that stopped or
restarted turns its undecided transactions ``indeterminate``).

**aborted_read.** A ``read_committed`` reader returns a record of a transaction whose abort
returned. Counted once per write (not per re-read). The ``read_uncommitted`` reader sees such
records by design: counted as *allowed* (``vigil_aborted_records_read_total``), never a
violation. Cannot be inferred for ``indeterminate`` transactions (visible means committed).
False positives: none. Implies: the broker or the coordinator lost the abort marker.

**partial_txn.** A ``read_committed`` reader that has read past all of a transaction's
acknowledged records (on every partition that has one) saw some, but not all, of its
intended records. Judged once the transaction is decided (``committed``, or
``indeterminate`` — then any visible record means it committed), every one of its writes has
an outcome, and at least one was acked. "Saw" counts a record read at or below the highest
acked offset of the transaction in that record's partition. Counted once per transaction.
A committed transaction of which nothing is visible is not partial: its acked records are
``lost_write`` instead. Cannot be inferred: transactions without any acked record. False
positives: none for a committed transaction (Kafka's atomicity promise); Jepsen found torn
transactions before KIP-890. Implies ``lost_write`` in ``read_uncommitted`` when the missing
records were acked.

**Horizon.** An aborted transaction is remembered until both readers have read
``horizon_offsets`` past its known offsets (and past where they were when it was decided):
a write of it that timed out may still have landed and be read later. Other transactions
are forgotten once judged and read past.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from invariants.model import TxnKey, WriteKey


@dataclass
class TxnTrack:
    key: TxnKey
    writes: set[WriteKey] = field(default_factory=set)  # intended (from intents)
    outcome: str = "pending"  # pending | committed | aborted | indeterminate
    undecided_writes: int = 0
    acked: dict[WriteKey, int] = field(default_factory=dict)
    rc_reads: dict[WriteKey, int] = field(default_factory=dict)  # write -> lowest offset read
    aborted_counted: set[WriteKey] = field(default_factory=set)
    ru_reads: set[WriteKey] = field(default_factory=set)
    judged: bool = False
    decided_at: dict | None = None  # (isolation, topic_id, partition) -> reader frontier when first seen decided

    def max_acked(self) -> dict[tuple[str, int], int]:
        top: dict[tuple[str, int], int] = {}
        for (tid, p, *_), off in self.acked.items():
            top[(tid, p)] = max(off, top.get((tid, p), -1))
        return top

    def ready(self) -> bool:
        return (not self.judged and self.outcome in ("committed", "indeterminate")
                and self.undecided_writes == 0 and bool(self.acked))


def partial_verdict(intended: int, visible: int, outcome: str) -> bool:
    """Whether a decided transaction is torn, given how many of its records were visible."""
    if outcome not in ("committed", "indeterminate"):
        return False
    return 0 < visible < intended
