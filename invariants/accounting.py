"""Accounting family: ``outcome_gap``, and the incremental fold of the outcome ledger.

**outcome_gap.** Each writer (instance, incarnation) numbers its ledger entries ``n`` from 0.
An entry whose ``n`` is above the next expected number means entries were lost: counted once
per missing entry (isolation ``none``). Entries with ``n`` below the next expected one are
re-reads and are ignored. Cannot be inferred: entries lost at the very end of a writer's
ledger with no later entry (a ``stop`` entry marks a clean end). False positives: none; the
ledger is written idempotently with an infinite delivery timeout. Implies: verdicts on that
writer's writes in the gap cannot be made; those writes stay ``pending`` until the writer's
next incarnation or stop turns them ``indeterminate`` (never ``lost_write``).

:class:`LedgerFold` turns entries, in ledger order, into events for the checker. Its state is
bounded by what is still open: pending writes (intent without outcome) and the per-writer
numbering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from invariants.model import TxnKey, WriteKey

# events: ("acked", wkey, offset, txn_key|None, done_ts_us)
#         ("decided", wkey, txn_key|None)            a non-acked outcome (failed/indeterminate/...)
#         ("intent", wkey, txn_key|None, ts_us)
#         ("txn", txn_key, outcome)
#         ("gap", (instance, inc), missing_count, first_missing_n)
Event = tuple


@dataclass
class WriterCursor:
    instance: str
    writer_id: int
    inc: int
    next_n: int = 0
    stopped: bool = False
    pending: dict[WriteKey, tuple[int, TxnKey | None]] = field(default_factory=dict)
    open_txns: set[TxnKey] = field(default_factory=set)
    last_ack_ts_us: int = 0


class LedgerFold:
    def __init__(self) -> None:
        self.writers: dict[tuple[str, int], WriterCursor] = {}

    def apply(self, e: dict[str, Any]) -> list[Event]:
        key = (e["instance"], e["inc"])
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = WriterCursor(e["instance"], e["writer_id"], e["inc"])
        if e["n"] < w.next_n:
            return []
        events: list[Event] = []
        if e["n"] > w.next_n:
            events.append(("gap", key, e["n"] - w.next_n, w.next_n))
        w.next_n = e["n"] + 1
        kind, wid, inc = e["kind"], e["writer_id"], e["inc"]
        if kind == "start":
            for (inst, i), other in self.writers.items():
                if inst == e["instance"] and i < inc:
                    events.extend(self._close(other))
        elif kind == "intent":
            txn = e.get("txn")
            tkey = (wid, inc, int(txn["id"])) if txn else None
            if tkey:
                w.open_txns.add(tkey)
            for p, first, count in e["writes"]:
                for seq in range(first, first + count):
                    wkey = (e["topic_id"], p, wid, inc, seq)
                    w.pending[wkey] = (e["ts_us"], tkey)
                    events.append(("intent", wkey, tkey, e["ts_us"]))
        elif kind == "outcomes":
            for p, first, count, outcome, first_offset, _send, done, _err in e["runs"]:
                for i in range(count):
                    wkey = (e["topic_id"], p, wid, inc, first + i)
                    _ts, tkey = w.pending.pop(wkey, (0, None))
                    if outcome == "acked":
                        w.last_ack_ts_us = max(w.last_ack_ts_us, done)
                        events.append(("acked", wkey, first_offset + i, tkey, done))
                    elif outcome != "pending":
                        events.append(("decided", wkey, tkey))
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
        events: list[Event] = [("decided", wkey, tkey) for wkey, (_ts, tkey) in w.pending.items()]
        events.extend(("txn", tkey, "indeterminate") for tkey in sorted(w.open_txns))
        w.pending.clear()
        w.open_txns.clear()
        return events

    def oldest_pending_us(self) -> dict[tuple[str, int], int]:
        """Per running writer, the intent time of its oldest write still waiting for an outcome."""
        return {k: min(ts for ts, _ in w.pending.values())
                for k, w in self.writers.items() if w.pending and not w.stopped}
