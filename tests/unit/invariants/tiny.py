"""Tiny hand-written histories for the per-family tests: one writer, a few offsets, both readers.

``Story`` collects ledger entries of one writer (numbered for it) and what each reader
returned; ``run()`` feeds them to a fresh checker (ledger first, then reads) and returns the
violations per (invariant, isolation) as plain strings, plus the checker for other figures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from invariants.checker import Checker
from invariants.ledger_format import (
    Body, Intent, LedgerEntry, OutcomeRun, Outcomes, Start, Stop, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome,
    WriteRange, WriterRef,
)
from invariants.model import RC, RU, Read, Settings

TID = "topic-1"
WID, INC = 77, 1
SETTINGS = Settings(settle_offsets=4, horizon_offsets=1000)


def rec(seq: int, wid: int = WID, inc: int = INC) -> tuple[int, int, int]:
    return (wid, inc, seq)


@dataclass
class Story:
    writer: WriterRef = field(default_factory=lambda: WriterRef("w", WID, INC))
    entries: list[LedgerEntry] = field(default_factory=list)
    reads: dict = field(default_factory=lambda: {RC: {}, RU: {}})

    def __post_init__(self) -> None:
        self.entry(Start("canary", TID, 2))

    def entry(self, body: Body, n: int | None = None) -> "Story":
        n = len(self.entries) if n is None else n
        self.entries.append(LedgerEntry(self.writer, n, 1_000 + n, body))
        return self

    def acked(self, seq: int, offset: int, p: int = 0, done_us: int = 2) -> "Story":
        """An intent for ``seq`` and its acknowledgement at ``offset`` (the writer had it at ``done_us``)."""
        self.entry(Intent(TID, (WriteRange(p, seq, 1),)))
        return self.entry(Outcomes(TID, (OutcomeRun(p, seq, 1, WriteOutcome.ACKED, offset, 1, done_us),)))

    def outcome(self, seq: int, outcome: WriteOutcome, p: int = 0) -> "Story":
        self.entry(Intent(TID, (WriteRange(p, seq, 1),)))
        return self.entry(Outcomes(TID, (OutcomeRun(p, seq, 1, outcome, -1, 1, 2),)))

    def txn(self, txn_id: int, acked: dict[int, int], outcome: TxnOutcome, size: int | None = None,
            p: int = 0) -> "Story":
        """A transaction of ``size`` writes (seqs ``acked`` keys first): the acked ones at their
        offsets, the rest indeterminate; then its outcome."""
        seqs = sorted(acked)
        size = size or len(seqs)
        extra = list(range(max(seqs) + 1, max(seqs) + 1 + size - len(seqs)))
        self.entry(Intent(TID, tuple(WriteRange(p, s, 1) for s in seqs + extra),
                          TxnInfo(txn_id, size, outcome is TxnOutcome.ABORTED)))
        runs = [OutcomeRun(p, s, 1, WriteOutcome.ACKED, acked[s], 1, 2) for s in seqs]
        runs += [OutcomeRun(p, s, 1, WriteOutcome.INDETERMINATE, -1, 1, 2, "timeout") for s in extra]
        self.entry(Outcomes(TID, tuple(runs)))
        return self.entry(TxnEnd(txn_id, outcome))

    def stop(self) -> "Story":
        return self.entry(Stop())

    def read(self, iso, *items: tuple[int, tuple], p: int = 0, txn: dict[int, int] | None = None) -> "Story":
        """``iso`` returned these (offset, record) pairs on partition ``p``; ``txn``: offset → txn id."""
        txn = txn or {}
        self.reads[iso].setdefault(p, []).extend(Read(off, ident, txn.get(off, 0)) for off, ident in items)
        return self

    def read_both(self, *items: tuple[int, tuple], p: int = 0) -> "Story":
        return self.read(RC, *items, p=p).read(RU, *items, p=p)

    def run(self, log_start: int = 0) -> tuple[dict[tuple[str, str], int], Checker]:
        """Ledger first, then each reader's reads; re-fetches answered from the same reads (the log
        does not change in these stories)."""
        ck = Checker(SETTINGS)
        ck.apply_ledger(self.entries)
        for p in (0, 1):
            if log_start:
                ck.set_log_start(TID, p, log_start)
        for iso in (RC, RU):
            for p, reads in self.reads[iso].items():
                ck.apply_reads(iso, TID, p, sorted(reads, key=lambda r: r.offset))
        ck.settle()
        answer_refetches(ck, lambda iso, p: self.reads[iso].get(p, []))
        found: Counter = Counter()
        for (inv, iso, _dur), n in ck.counts.items():
            if n:
                found[(inv.value, iso.value)] += n
        return dict(found), ck


def answer_refetches(ck: Checker, log: Callable[[Any, int], list[Read]], rounds: int = 5) -> None:
    """Do what the runtime does: read again what the checker asks for, from ``log(iso, partition)``."""
    for _ in range(rounds):
        wanted = ck.refetch_wanted()
        if not wanted:
            return
        for w in wanted:
            for iso in (RC, RU):
                reads = sorted((r for r in log(iso, w.partition) if w.lo <= r.offset < w.hi), key=lambda r: r.offset)
                ck.apply_reads(iso, w.topic_id, w.partition, reads, covered=(w.lo, w.hi))
        ck.settle()


FILLER = 5


def honest(first_offset: int, last_offset: int) -> list[tuple[int, tuple]]:
    """Offsets ``first..last`` holding records of another, honest writer whose seq is its offset
    (it has no ledger entries: nothing is expected of it)."""
    return [(o, rec(o, wid=FILLER)) for o in range(first_offset, last_offset + 1)]
