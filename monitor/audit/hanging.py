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

All times are on the brokers' clock, and every error in dating a moment errs towards not
counting. T began at its intent's append time (the writer waits until the intent is durable
before it begins the transaction). When an acknowledgement arrived (``done_ts_us``) and when T
ended (its ``txn`` entry's own time) are moments on the writer's clock, put on the brokers' clock
from the intent that named the write — differences on the writer's clock inside the operation,
so its skew and any step of it outside the operation cancel:

- T's own acknowledgements and T's end: the intent's append time plus how long after the first
  send the moment came (``send_ts_us`` to it). The send follows the intent's append by however
  long the ledger took to make it durable (milliseconds; up to ``replica.lag.time.max.ms`` with a
  ledger follower stalling), so both are dated early by the same amount and the time between
  them — how long T held the LSO after its own record was replicated — is exact.
- Any other write's acknowledgement (the high watermark moved past T's first record because of
  it): the intent's append time plus how long after the intent was written the moment came
  (``ts_us`` of the intent to it), never earlier than it really was — the append came after the
  intent was written. Dated early, a record acknowledged after a slow follower of the ledger let
  its writer send could start T's hang before the high watermark really passed T's record.

The entries' own append times would not do: the outcomes and the ``txn`` entry are written after
the commit or abort returned and may wait in the writer's producer for as long as the ledger is
away — by its append time a transaction that ended just before its ledger went away would have
ended at the ledger's return, a hang it never had. No moment is dated later than that append
time; where the ledger read no longer holds the intent (retention), an acknowledgement is dated by
its entry's append time less how long the writer held it, late if anything. Left out on purpose, because the
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
from typing import Iterable, Iterator, NamedTuple

from invariants.ledger_format import Intent, LedgerEntry, OutcomeRun, Outcomes, TxnEnd, TxnOutcome, WriteOutcome

# (topic_id, partition) -> [(offset, (writer_id, incarnation, seq), txn id, ...)] as the audit reads them
Reads = dict[tuple[str, int], list[tuple]]
TxnRef = tuple[int, int, int]  # writer_id, incarnation, txn id


def hanging_transactions(entries: Iterable[LedgerEntry], threshold_s: float, ru_reads: Reads) -> int:
    """How many (transaction, partition) pairs held the LSO back longer than ``threshold_s``."""
    begun: dict[TxnRef, tuple[str, int]] = {}  # -> (topic_id, intent time)
    ended: dict[TxnRef, tuple[int, int]] = {}  # committed or aborted: (the writer's time of it, append time)
    first_send: dict[TxnRef, int] = {}  # the writer's time of the transaction's first send
    txn_of: dict[tuple[int, int, int, int], TxnRef] = {}  # (writer_id, inc, partition, seq) -> its transaction
    intents: dict[tuple[int, int, int], list[IntentAt]] = defaultdict(list)  # (writer_id, inc, partition) -> ...
    first_own: dict[tuple[TxnRef, int], tuple[int, tuple[int, int, int]]] = {}  # (T, p) -> its lowest ack there
    # (T, p) -> [(broker time as T's own, offset, (writer_id, inc, seq))], T's acknowledgements there
    own: dict[tuple[TxnRef, int], list[tuple[int, int, tuple[int, int, int]]]] = defaultdict(list)
    # (topic_id, partition) -> [(broker time, never early; offset, (writer_id, inc, seq))], every ack
    acks: dict[tuple[str, int], list[tuple[int, int, tuple[int, int, int]]]] = defaultdict(list)
    for e in entries:
        body, wid, inc = e.body, e.writer.writer_id, e.writer.inc
        if isinstance(body, Intent):
            for w in body.writes:
                intents[(wid, inc, w.partition)].append(IntentAt(w.first_seq, w.first_seq + w.count, e.time_us, e.ts_us))
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
                named = _intent_of(intents.get((wid, inc, run.partition)), run.first_seq)
                late = e.time_us - max(0, e.ts_us - run.done_ts_us)  # less how long the writer held it
                if named is not None:
                    late = min(late, named.time_us + max(0, run.done_ts_us - named.ts_us))
                acks[(body.topic_id, run.partition)].extend(_each_record(run, wid, inc, late))
                if t is not None:
                    key = (t, run.partition)
                    mine = (run.first_offset, (wid, inc, run.first_seq))
                    first_own[key] = min(mine, first_own.get(key, mine))
                    if named is not None and run.send_ts_us > 0:
                        at = min(e.time_us, named.time_us + max(0, run.done_ts_us - run.send_ts_us))
                        own[key].extend(_each_record(run, wid, inc, at))
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
        # threshold_s before T ended, at or above T's first record there: T's own, or another's
        before = end - threshold_s * 1e6
        if any(since <= ts < before and log.get(off) == who for ts, off, who in own.get((t, p), ())):
            count += 1
            continue
        runs, at = acks.get((tid, p), []), times.get((tid, p), [])
        lo, hi = bisect.bisect_left(at, since), bisect.bisect_left(at, before)
        if any(off >= first and log.get(off) == who for _ts, off, who in runs[lo:hi]):
            count += 1
    return count


def _each_record(run: OutcomeRun, wid: int, inc: int, at_us: int) -> Iterator[tuple[int, int, tuple[int, int, int]]]:
    """(time, offset, (writer_id, inc, seq)) for each record of an acknowledged run."""
    return ((at_us, run.first_offset + i, (wid, inc, run.first_seq + i)) for i in range(run.count))


class IntentAt(NamedTuple):
    """Seqs ``first_seq .. end_seq - 1`` of one writer on one partition, named by one intent."""

    first_seq: int
    end_seq: int
    time_us: int  # its append time (brokers' clock)
    ts_us: int  # when the writer wrote it (its own clock)


def _intent_of(intents: list[IntentAt] | None, seq: int) -> IntentAt | None:
    """The intent that named ``seq`` (a writer's seqs on a partition only grow), if the ledger read holds it."""
    if not intents:
        return None
    i = bisect.bisect_right(intents, (seq, float("inf"))) - 1
    return intents[i] if i >= 0 and seq < intents[i].end_seq else None
