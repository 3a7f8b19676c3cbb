"""The audit's own reading of the whole ledger: every write's and every transaction's outcome.

Deliberately independent of the live checker's incremental fold
(:class:`invariants.accounting.LedgerFold`): no bounded state, no events, just a dictionary of
every write ever announced and what became of it. Both read the same typed entries
(:mod:`invariants.ledger_format`) and apply the same rules: a new incarnation turns its
predecessor's pending writes and transactions ``indeterminate``, and entries the predecessor
writes after that are ignored; a number skipped in a writer's entries is a gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from invariants.ledger_format import (
    Intent, LedgerEntry, LedgerFormatError, Outcomes, Start, Stop, TxnEnd, TxnOutcome, WriteOutcome, decode,
)
from invariants.model import TxnKey, WriteKey


@dataclass
class WriteState:
    outcome: WriteOutcome
    offset: int = -1
    txn_id: int = 0
    error: str | None = None
    send_ts_us: int = 0
    done_ts_us: int = 0


@dataclass
class TxnState:
    outcome: TxnOutcome
    intended_abort: bool
    size: int
    writes: list[WriteKey] = field(default_factory=list)
    error: str | None = None


@dataclass
class WriterLedger:
    instance: str
    writer_id: int
    incarnation: int
    topic_id: str | None = None
    next_n: int = 0
    missing: list[int] = field(default_factory=list)
    stopped: bool = False
    superseded: bool = False  # a later incarnation started: its entries from then on are ignored


class LedgerBook:
    """Folds ledger entries, in ledger order, into per-write and per-transaction outcomes."""

    def __init__(self) -> None:
        self.writers: dict[tuple[str, int], WriterLedger] = {}
        self.writes: dict[WriteKey, WriteState] = {}
        self.txns: dict[TxnKey, TxnState] = {}
        self.malformed = 0

    def apply_raw(self, value: bytes | None) -> None:
        try:
            entry = decode(value)
        except LedgerFormatError:
            self.malformed += 1
            return
        self.apply(entry)

    def apply(self, e: LedgerEntry) -> None:
        key = (e.writer.instance, e.writer.inc)
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = WriterLedger(e.writer.instance, e.writer.writer_id, e.writer.inc)
        if e.n < w.next_n or w.superseded:
            return  # a re-read or duplicate entry, or a predecessor writing after its successor started
        w.missing.extend(range(w.next_n, e.n))
        w.next_n = e.n + 1
        wid, inc, body = w.writer_id, w.incarnation, e.body
        if isinstance(body, Start):
            w.topic_id = body.topic_id
            self._close_predecessors(w.instance, inc)
        elif isinstance(body, Intent):
            txn_id = body.txn.id if body.txn else 0
            keys = [WriteKey(body.topic_id, r.partition, wid, inc, r.first_seq + i)
                    for r in body.writes for i in range(r.count)]
            for k in keys:
                self.writes.setdefault(k, WriteState(WriteOutcome.PENDING, txn_id=txn_id))
            if body.txn:
                self.txns[TxnKey(wid, inc, txn_id)] = TxnState(TxnOutcome.PENDING, body.txn.abort, body.txn.size, keys)
        elif isinstance(body, Outcomes):
            for run in body.runs:
                for i in range(run.count):
                    st = self.writes.setdefault(WriteKey(body.topic_id, run.partition, wid, inc, run.first_seq + i),
                                                WriteState(WriteOutcome.PENDING))
                    st.outcome = run.outcome
                    st.offset = run.first_offset + i if run.first_offset >= 0 else -1
                    st.error, st.send_ts_us, st.done_ts_us = run.error, run.send_ts_us, run.done_ts_us
        elif isinstance(body, TxnEnd):
            t = self.txns.get(TxnKey(wid, inc, body.id))
            if t is not None:
                t.outcome, t.error = body.outcome, body.error
        elif isinstance(body, Stop):
            w.stopped = True
            self._close(wid, inc, "writer stopped")

    def _close(self, writer_id: int, inc: int, reason: str) -> None:
        for k, st in self.writes.items():
            if k.writer_id == writer_id and k.inc == inc and st.outcome is WriteOutcome.PENDING:
                st.outcome, st.error = WriteOutcome.INDETERMINATE, reason
        for tkey, t in self.txns.items():
            if tkey.writer_id == writer_id and tkey.inc == inc and t.outcome is TxnOutcome.PENDING:
                t.outcome, t.error = TxnOutcome.INDETERMINATE, reason

    def _close_predecessors(self, instance: str, inc: int) -> None:
        for (inst, i), w in self.writers.items():
            if inst == instance and i < inc and not w.superseded:
                self._close(w.writer_id, i, "writer restarted")
                w.superseded = True

    # -- queries ---------------------------------------------------------------------------

    def by_outcome(self) -> dict[WriteOutcome, int]:
        counts: dict[WriteOutcome, int] = {o: 0 for o in WriteOutcome}
        for st in self.writes.values():
            counts[st.outcome] += 1
        return counts

    def gaps(self) -> dict[tuple[str, int], list[int]]:
        return {k: list(w.missing) for k, w in self.writers.items() if w.missing}
