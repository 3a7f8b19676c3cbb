"""The audit's ``lso_stuck``: the (transaction, partition) pairs the ledger and the final log show
holding a partition's last stable offset back for longer than the threshold.

Live, ``lso_stuck`` is what the prober lists: an LSO frozen below a high watermark that moves on
(:mod:`invariants.liveness`). The ledger says when a transaction began and ended, but a transaction
that stays open does not by itself hold any LSO back: its records must be in the partition's log,
and the log must grow past them while it is open. So a canary transaction T of writer W counts on
partition p when

- T's first record on p (its acknowledged offset there) is in the final log (read_uncommitted);
- another write was acknowledged on p above T's records there while T was open, its
  acknowledgement's ledger entry appended at least ``threshold_s`` before T ended — the high
  watermark was past T's first record for that long while T held the LSO at it (only
  acknowledgements from T's own time count: a log rewritten under T reuses offsets);
- T's writes are the ones its ``intent`` names (their acknowledgements need not say the
  transaction);
- T ended when its ``txn_end`` entry says committed or aborted; an ``indeterminate`` end (the call
  never returned, the producer is replaced) or none at all ends when W's next ``intent`` was
  written (the new producer's ``init_transactions`` fenced the old one and completed what it left
  open). Without either, T's end is unknown and it is not counted.

All times are the ledger's append times (the brokers' clock). What this leaves out on purpose, and
what live also cannot see: a transaction whose records never reached a partition (its leader away:
the producer still holds them) and one whose records vanished with the partition (a broker back
empty) held no LSO there. The two sides measure one hang with different instruments — the prober
lists every few seconds, the ledger records an acknowledgement when the writer flushes its outcomes
— so they agree exactly for hangs well away from the threshold; one within a listing interval of it
may be counted by one side only.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Iterable

from invariants.ledger_format import Intent, LedgerEntry, Outcomes, TxnEnd, TxnOutcome, WriteOutcome

# (topic_id, partition) -> [(offset, (writer_id, incarnation, seq), txn id, ...)] as the audit reads them
Reads = dict[tuple[str, int], list[tuple]]
TxnRef = tuple[int, int, int]  # writer_id, incarnation, txn id


def hanging_transactions(entries: Iterable[LedgerEntry], threshold_s: float, ru_reads: Reads) -> int:
    """How many (transaction, partition) pairs held the LSO back longer than ``threshold_s``."""
    begun: dict[TxnRef, tuple[str, int]] = {}  # -> (topic_id, intent time)
    ended: dict[TxnRef, int] = {}
    waiting_for_next_intent: dict[int, list[TxnRef]] = defaultdict(list)  # writer_id -> indeterminate
    txn_of: dict[tuple[int, int, int, int], TxnRef] = {}  # (writer_id, inc, partition, seq) -> its transaction
    first_own: dict[tuple[TxnRef, int], int] = {}  # (T, partition) -> T's lowest acked offset there
    # (topic_id, partition) -> [(ledger time, last offset, transaction or None)]
    acks: dict[tuple[str, int], list[tuple[int, int, TxnRef | None]]] = defaultdict(list)
    for e in entries:
        body, wid, inc = e.body, e.writer.writer_id, e.writer.inc
        if isinstance(body, Intent):
            for t in waiting_for_next_intent.pop(wid, ()):
                ended.setdefault(t, e.time_us)
            if body.txn:
                t = (wid, inc, body.txn.id)
                begun.setdefault(t, (body.topic_id, e.time_us))
                for w in body.writes:
                    for seq in range(w.first_seq, w.first_seq + w.count):
                        txn_of[(wid, inc, w.partition, seq)] = t
        elif isinstance(body, TxnEnd):
            t = (wid, inc, body.id)
            if body.outcome in (TxnOutcome.COMMITTED, TxnOutcome.ABORTED):
                ended.setdefault(t, e.time_us)
            else:
                waiting_for_next_intent[wid].append(t)
        elif isinstance(body, Outcomes):
            for run in body.runs:
                if run.outcome is not WriteOutcome.ACKED:
                    continue
                t = txn_of.get((wid, inc, run.partition, run.first_seq))  # a run is of one transaction
                acks[(body.topic_id, run.partition)].append((e.time_us, run.first_offset + run.count - 1, t))
                if t is not None:
                    key = (t, run.partition)
                    first_own[key] = min(run.first_offset, first_own.get(key, run.first_offset))
    in_log = _transactional_records_read(ru_reads)
    for runs in acks.values():
        runs.sort(key=lambda r: r[0])
    times = {part: [r[0] for r in runs] for part, runs in acks.items()}
    count = 0
    for (t, p), first in first_own.items():
        if t not in begun or t not in ended:
            continue
        tid, since = begun[t]
        until = ended[t] - threshold_s * 1e6
        if until <= since or (tid, p, first, t) not in in_log:
            continue
        # acknowledged while T was open, at least threshold_s before it ended, above T's first
        # record there, not of T (a log rewritten under T reuses offsets: only acks of T's time count)
        runs, at = acks.get((tid, p), []), times.get((tid, p), [])
        lo, hi = bisect.bisect_left(at, since), bisect.bisect_right(at, until)
        if any(off > first and who != t for _ts, off, who in runs[lo:hi]):
            count += 1
    return count


def _transactional_records_read(ru_reads: Reads) -> set[tuple[str, int, int, TxnRef]]:
    """(topic_id, partition, offset, T) of every transactional canary record read."""
    out: set[tuple[str, int, int, TxnRef]] = set()
    for (tid, p), recs in ru_reads.items():
        for off, ident, txn, *_rest in recs:
            if txn and ident and ident[0] != "x":
                out.add((tid, p, off, (ident[0], ident[1], txn)))
    return out
