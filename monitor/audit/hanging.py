"""The audit's ``lso_stuck``: the (transaction, partition) pairs the ledger and the final log show
holding a partition's last stable offset back for longer than the threshold.

Live, ``lso_stuck`` is what the prober lists: an LSO frozen below a high watermark
(:mod:`invariants.liveness`) — from the moment a transaction's first record on a partition is
replicated (the high watermark passes it while the LSO stays at it) until its marker. The ledger
says when a transaction began and ended, but a transaction that stays open does not by itself hold
any LSO back: its records must be in the partition's log. So a canary transaction T counts on
partition p when

- T's writes are the ones its ``intent`` names, and T's first record on p (its acknowledged offset
  there) is in the final log (read_uncommitted);
- T ended with ``committed`` or ``aborted`` (the call returned; the ledger entry's time is its end);
- an acknowledgement on p at or above T's first record — T's own, or any other write's, whose record
  the final log holds at that offset — arrived inside T's open time and more than ``threshold_s``
  before T's end: from then on the high watermark was past T's first record while T held the LSO
  at it.

All times are on the brokers' clock. T began at its intent's append time (the writer waits until
the intent is durable before it begins the transaction). When an acknowledgement arrived
(``done_ts_us``) and when T ended (its ``txn`` entry's own time) are moments on the writer's
clock — the transactional writer writes its outcomes only after the commit or abort returned, and
an entry may wait in the writer's producer for as long as the ledger is away — so they are put on
the brokers' clock by :class:`BrokerTimes`: plus the smallest gap between an entry's append time and
its own time among that writer's entries of the same minute or the neighbouring ones (the writer's
clock skew plus the quickest append). An entry's append time alone would date a transaction that
ended just before its ledger went away at the ledger's return: a hang it never had. This is never
later than the append time, and never earlier than the moment by more than a clock step of the
writer's inside those minutes. Left out on purpose, because the
ledger cannot say when they released the LSO: transactions that ended ``indeterminate`` (the call
never returned; the coordinator may have written the markers long before, or only when a new
producer fenced the old one) and transactions without an end (a writer killed). Their hangs are
live only. Also live only: a hang that outlasts the end the ledger records (a marker delayed by a
leader that is away). A transaction whose records never reached a partition (its leader away: the
producer still holds them), or vanished with it (a broker back empty), held no LSO there, live or
here. Live counts episodes per partition, this counts transactions per partition: two transactions
hanging at once on one partition are one episode live. The two sides measure one hang with
different instruments — the prober lists every few seconds, the ledger records an acknowledgement
when a writer flushes its outcomes — so they agree exactly for hangs well away from the threshold;
one within a listing interval of it may be counted by one side only.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Iterable

from invariants.ledger_format import Intent, LedgerEntry, Outcomes, TxnEnd, TxnOutcome, WriteOutcome

# (topic_id, partition) -> [(offset, (writer_id, incarnation, seq), txn id, ...)] as the audit reads them
Reads = dict[tuple[str, int], list[tuple]]
TxnRef = tuple[int, int, int]  # writer_id, incarnation, txn id


class BrokerTimes:
    """Moments on a writer's clock put on the brokers' clock (see the module docstring)."""

    WINDOW_US = 60_000_000

    def __init__(self, entries: Iterable[LedgerEntry]) -> None:
        # (writer_id, incarnation, minute of the writer's clock) -> smallest append time - own time
        self._gap: dict[tuple[int, int, int], int] = {}
        for e in entries:
            key = (e.writer.writer_id, e.writer.inc, e.ts_us // self.WINDOW_US)
            gap = e.time_us - e.ts_us
            if gap < self._gap.get(key, gap + 1):
                self._gap[key] = gap

    def at(self, writer_id: int, inc: int, ts_us: int) -> int:
        minute = ts_us // self.WINDOW_US
        gaps = [g for m in (minute - 1, minute, minute + 1)
                if (g := self._gap.get((writer_id, inc, m))) is not None]
        return ts_us + min(gaps) if gaps else ts_us


def hanging_transactions(entries: Iterable[LedgerEntry], threshold_s: float, ru_reads: Reads) -> int:
    """How many (transaction, partition) pairs held the LSO back longer than ``threshold_s``."""
    entries = list(entries)
    clock = BrokerTimes(entries)
    begun: dict[TxnRef, tuple[str, int]] = {}  # -> (topic_id, intent time)
    ended: dict[TxnRef, int] = {}  # committed or aborted: when the call returned
    txn_of: dict[tuple[int, int, int, int], TxnRef] = {}  # (writer_id, inc, partition, seq) -> its transaction
    first_own: dict[tuple[TxnRef, int], tuple[int, tuple[int, int, int]]] = {}  # (T, p) -> its lowest ack there
    # (topic_id, partition) -> [(broker time, offset, (writer_id, inc, seq))], one per acknowledged write
    acks: dict[tuple[str, int], list[tuple[int, int, tuple[int, int, int]]]] = defaultdict(list)
    for e in entries:
        body, wid, inc = e.body, e.writer.writer_id, e.writer.inc
        if isinstance(body, Intent) and body.txn:
            t = (wid, inc, body.txn.id)
            begun.setdefault(t, (body.topic_id, e.time_us))
            for w in body.writes:
                for seq in range(w.first_seq, w.first_seq + w.count):
                    txn_of[(wid, inc, w.partition, seq)] = t
        elif isinstance(body, TxnEnd) and body.outcome in (TxnOutcome.COMMITTED, TxnOutcome.ABORTED):
            ended.setdefault((wid, inc, body.id), min(clock.at(wid, inc, e.ts_us), e.time_us))
        elif isinstance(body, Outcomes):
            for run in body.runs:
                if run.outcome is not WriteOutcome.ACKED:
                    continue
                held_us = max(0, e.ts_us - run.done_ts_us)  # the writer held the outcome this long
                acked_at = min(clock.at(wid, inc, e.ts_us - held_us), e.time_us - held_us)
                for i in range(run.count):
                    acks[(body.topic_id, run.partition)].append(
                        (acked_at, run.first_offset + i, (wid, inc, run.first_seq + i)))
                t = txn_of.get((wid, inc, run.partition, run.first_seq))  # a run is of one transaction
                if t is not None:
                    key = (t, run.partition)
                    mine = (run.first_offset, (wid, inc, run.first_seq))
                    first_own[key] = min(mine, first_own.get(key, mine))
    held = {part: {r[0]: r[1] for r in recs} for part, recs in ru_reads.items()}  # offset -> ident
    for runs in acks.values():
        runs.sort(key=lambda r: r[0])
    times = {part: [r[0] for r in runs] for part, runs in acks.items()}
    count = 0
    for (t, p), (first, ident) in first_own.items():
        if t not in begun or t not in ended:
            continue
        tid, since = begun[t]
        log = held.get((tid, p), {})
        if log.get(first) != ident:
            continue  # T's first record there is not in the final log
        # acknowledged (the record still where it was acked) inside T's open time and more than
        # threshold_s before T ended, at or above T's first record there
        runs, at = acks.get((tid, p), []), times.get((tid, p), [])
        lo, hi = bisect.bisect_left(at, since), bisect.bisect_left(at, ended[t] - threshold_s * 1e6)
        if any(off >= first and log.get(off) == who for _ts, off, who in runs[lo:hi]):
            count += 1
    return count
