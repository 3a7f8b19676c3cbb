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
clock; each is put on the brokers' clock from its own write: the append time of the intent that
named the write, plus how long after its send the moment came (``send_ts_us`` to the moment, a
difference on the writer's clock, so its skew cancels). The send comes right after the intent is
durable, so this dates a moment at most the few milliseconds between the intent's append and the
send early, and no clock step of the writer's outside the operation moves it. The entries' own
append times would not do: the outcomes and the ``txn`` entry are written after the commit or
abort returned and may wait in the writer's producer for as long as the ledger is away — by its
append time a transaction that ended just before its ledger went away would have ended at the
ledger's return, a hang it never had. A moment is never dated later than that append time, nor
earlier than its intent's (where the ledger read no longer holds the intent, an acknowledgement
is dated by its entry's append time less how long the writer held it). Left out on purpose, because the
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


def hanging_transactions(entries: Iterable[LedgerEntry], threshold_s: float, ru_reads: Reads) -> int:
    """How many (transaction, partition) pairs held the LSO back longer than ``threshold_s``."""
    begun: dict[TxnRef, tuple[str, int]] = {}  # -> (topic_id, intent time)
    ended: dict[TxnRef, tuple[int, int]] = {}  # committed or aborted: (the writer's time of it, append time)
    first_send: dict[TxnRef, int] = {}  # the writer's time of the transaction's first send
    txn_of: dict[tuple[int, int, int, int], TxnRef] = {}  # (writer_id, inc, partition, seq) -> its transaction
    # (writer_id, inc, partition) -> [(first seq, intent append time)], seqs growing
    intents: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    first_own: dict[tuple[TxnRef, int], tuple[int, tuple[int, int, int]]] = {}  # (T, p) -> its lowest ack there
    # (topic_id, partition) -> [(broker time, offset, (writer_id, inc, seq))], one per acknowledged write
    acks: dict[tuple[str, int], list[tuple[int, int, tuple[int, int, int]]]] = defaultdict(list)
    for e in entries:
        body, wid, inc = e.body, e.writer.writer_id, e.writer.inc
        if isinstance(body, Intent):
            for w in body.writes:
                intents[(wid, inc, w.partition)].append((w.first_seq, e.time_us))
            if body.txn:
                t = (wid, inc, body.txn.id)
                begun.setdefault(t, (body.topic_id, e.time_us))
                for w in body.writes:
                    for seq in range(w.first_seq, w.first_seq + w.count):
                        txn_of[(wid, inc, w.partition, seq)] = t
        elif isinstance(body, TxnEnd) and body.outcome in (TxnOutcome.COMMITTED, TxnOutcome.ABORTED):
            ended.setdefault((wid, inc, body.id), (e.ts_us, e.time_us))
        elif isinstance(body, Outcomes):
            for run in body.runs:
                t = txn_of.get((wid, inc, run.partition, run.first_seq))  # a run is of one transaction
                if t is not None and run.send_ts_us > 0:
                    first_send[t] = min(run.send_ts_us, first_send.get(t, run.send_ts_us))
                if run.outcome is not WriteOutcome.ACKED:
                    continue
                sent = _intent_time(intents.get((wid, inc, run.partition)), run.first_seq)
                if sent is not None and run.send_ts_us > 0:
                    acked_at = min(e.time_us, sent + max(0, run.done_ts_us - run.send_ts_us))
                else:  # its intent is not in the ledger read (retention): less how long the writer held it
                    acked_at = e.time_us - max(0, e.ts_us - run.done_ts_us)
                for i in range(run.count):
                    acks[(body.topic_id, run.partition)].append(
                        (acked_at, run.first_offset + i, (wid, inc, run.first_seq + i)))
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
        end_ts, end_appended = ended[t]
        end = min(end_appended, since + max(0, end_ts - first_send[t])) if t in first_send else end_appended
        log = held.get((tid, p), {})
        if log.get(first) != ident:
            continue  # T's first record there is not in the final log
        # acknowledged (the record still where it was acked) inside T's open time and more than
        # threshold_s before T ended, at or above T's first record there
        runs, at = acks.get((tid, p), []), times.get((tid, p), [])
        lo, hi = bisect.bisect_left(at, since), bisect.bisect_left(at, end - threshold_s * 1e6)
        if any(off >= first and log.get(off) == who for _ts, off, who in runs[lo:hi]):
            count += 1
    return count


def _intent_time(intents: list[tuple[int, int]] | None, seq: int) -> int | None:
    """The append time of the intent that named ``seq`` (its writer's seqs on a partition only grow)."""
    if not intents:
        return None
    i = bisect.bisect_right(intents, (seq, float("inf"))) - 1
    return intents[i][1] if i >= 0 else None
