"""Accounting family: ``outcome_gap``, and the incremental fold of the outcome ledger.

**outcome_gap.** Each writer (instance, incarnation) numbers its ledger entries ``n`` from 0.
An entry whose ``n`` is above the next expected number means entries were lost: counted once
per missing entry (isolation ``none``). Entries with ``n`` below the next expected one are
re-reads and are ignored. Cannot be inferred: entries lost at the very end of a writer's
ledger with no later entry (a ``stop`` entry marks a clean end). False positives: none; the
ledger is written idempotently with an infinite delivery timeout. Implies: verdicts on that
writer's writes in the gap cannot be made; those writes stay ``pending`` until the writer's
next incarnation or stop turns them ``indeterminate`` (never ``lost_write``).

Once the next incarnation of an instance has started, entries its predecessor still writes
are ignored: the predecessor's undecided writes and transactions were declared
``indeterminate`` at that point, and verdicts do not change afterwards (the instance lock
keeps a predecessor from running on; the audit's ledger fold applies the same rule).

:class:`LedgerFold` turns entries, in ledger order, into events for the checker. Its state is
bounded by what is still open: pending writes (intent without outcome) and the per-writer
numbering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from invariants.model import TxnKey

# events: ("acked_run", topic_id, partition, writer_id, inc, first_seq, count, first_offset, done_ts_us)
#             acked writes outside transactions, run-length encoded as the ledger has them
#         ("acked", wkey, offset, txn_key, done_ts_us)     an acked write of a transaction
#         ("decided", wkey, txn_key)                       a transaction's write got another outcome
#         ("intent", wkey, txn_key, ts_us)                 a transaction's intended write
#         ("txn", txn_key, outcome)
#         ("gap", (instance, inc), missing_count, first_missing_n)
Event = tuple
Interval = list  # [first_seq, end_seq, intent_ts_us, txn_key | None]


@dataclass
class WriterCursor:
    instance: str
    writer_id: int
    inc: int
    next_n: int = 0
    stopped: bool = False
    superseded: bool = False  # a later incarnation of the instance has started
    pending: dict[tuple[str, int], list[Interval]] = field(default_factory=dict)  # (topic_id, p) -> intervals
    open_txns: set[TxnKey] = field(default_factory=set)
    last_ack_ts_us: int = 0

    def take(self, tid: str, p: int, first: int, end: int) -> list[Interval]:
        """Remove seqs [first, end) from the pending intervals; returns the pieces that were pending."""
        kept, taken = [], []
        for iv in self.pending.get((tid, p), []):
            lo, hi = max(iv[0], first), min(iv[1], end)
            if lo >= hi:
                kept.append(iv)
                continue
            taken.append([lo, hi, iv[2], iv[3]])
            if iv[0] < lo:
                kept.append([iv[0], lo, iv[2], iv[3]])
            if hi < iv[1]:
                kept.append([hi, iv[1], iv[2], iv[3]])
        if kept:
            self.pending[(tid, p)] = kept
        else:
            self.pending.pop((tid, p), None)
        return taken


class LedgerFold:
    def __init__(self) -> None:
        self.writers: dict[tuple[str, int], WriterCursor] = {}

    def apply(self, e: dict[str, Any]) -> list[Event]:
        key = (e["instance"], e["inc"])
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = WriterCursor(e["instance"], e["writer_id"], e["inc"])
        if e["n"] < w.next_n or w.superseded:
            return []  # a re-read, or a predecessor writing after its successor started
        events: list[Event] = []
        if e["n"] > w.next_n:
            events.append(("gap", key, e["n"] - w.next_n, w.next_n))
        w.next_n = e["n"] + 1
        kind, wid, inc = e["kind"], e["writer_id"], e["inc"]
        if kind == "start":
            for (inst, i), other in self.writers.items():
                if inst == e["instance"] and i < inc and not other.superseded:
                    events.extend(self._close(other))
                    other.superseded = True
        elif kind == "intent":
            txn = e.get("txn")
            tkey = (wid, inc, int(txn["id"])) if txn else None
            if tkey:
                w.open_txns.add(tkey)
            for p, first, count in e["writes"]:
                w.pending.setdefault((e["topic_id"], p), []).append([first, first + count, e["ts_us"], tkey])
                if tkey:
                    events.extend(("intent", (e["topic_id"], p, wid, inc, s), tkey, e["ts_us"])
                                  for s in range(first, first + count))
        elif kind == "outcomes":
            tid = e["topic_id"]
            for p, first, count, outcome, first_offset, _send, done, _err in e["runs"]:
                if outcome == "pending":
                    continue
                pieces = w.take(tid, p, first, first + count)
                covered = sum(hi - lo for lo, hi, _ts, _t in pieces)
                if covered < count:  # outcomes of writes whose intent was not seen: outside transactions
                    pieces += [[lo, hi, 0, None] for lo, hi in _uncovered(first, first + count, pieces)]
                if outcome == "acked":
                    w.last_ack_ts_us = max(w.last_ack_ts_us, done)
                for lo, hi, _ts, tkey in sorted(pieces, key=lambda iv: iv[0]):
                    if tkey is None:
                        if outcome == "acked":
                            events.append(("acked_run", tid, p, wid, inc, lo, hi - lo, first_offset + lo - first, done))
                    else:
                        for s in range(lo, hi):
                            wkey = (tid, p, wid, inc, s)
                            events.append(("acked", wkey, first_offset + s - first, tkey, done) if outcome == "acked"
                                          else ("decided", wkey, tkey))
        elif kind == "txn":
            tkey = (wid, inc, int(e["id"]))
            w.open_txns.discard(tkey)
            events.append(("txn", tkey, e["outcome"]))
        elif kind == "stop":
            events.extend(self._close(w))
            w.stopped = True
        return events

    @staticmethod
    def _close(w: WriterCursor) -> list[Event]:
        events: list[Event] = [("decided", (tid, p, w.writer_id, w.inc, s), tkey)
                               for (tid, p), ivs in w.pending.items() for lo, hi, _ts, tkey in ivs if tkey
                               for s in range(lo, hi)]
        events.extend(("txn", tkey, "indeterminate") for tkey in sorted(w.open_txns))
        w.pending.clear()
        w.open_txns.clear()
        return events

    def oldest_pending_us(self) -> dict[tuple[str, int], int]:
        """Per running writer, the intent time of its oldest write still waiting for an outcome."""
        return {k: min(iv[2] for ivs in w.pending.values() for iv in ivs)
                for k, w in self.writers.items() if w.pending and not w.stopped}


def _uncovered(first: int, end: int, pieces: list[Interval]) -> list[tuple[int, int]]:
    out, at = [], first
    for lo, hi, _ts, _t in sorted(pieces, key=lambda iv: iv[0]):
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    if at < end:
        out.append((at, end))
    return out
