"""The incremental checker: state and new observations in, new state and violations out.

It wires the families together over shared per-batch indexes (frontier, which write sits at
each offset, where each write was read) kept per reader, topic ID and partition in a
:class:`PartitionView`. Observations arrive in any interleaving of ledger entries and read
batches; :meth:`Checker.settle` judges whatever became decidable. Every verdict is *stable*
(reading further cannot change it), so splitting a history into different micro-batches, or
pickling the checker between batches and going on from the copy, gives the same violations
as one pass over the whole history — the property the tests hammer, and what lets the live
result equal the audit's.

State is bounded: per view, offsets more than ``horizon_offsets`` behind the frontier are
forgotten (``start``, ``frontier`` and the record at offset 0 are kept); transactions are
dropped once judged and read past; the ledger fold keeps only writes still waiting for an
outcome. Everything is keyed by topic ID, so a recreated topic starts a new history.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from invariants import offsets, sequence, transactions
from invariants.accounting import LedgerFold
from invariants.catalog import Invariant, Isolation
from invariants.model import RC, RU, NONE, Read, Settings, TxnKey, Verdict, Violation, WriteKey, is_canary

I = Invariant


@dataclass
class PartitionView:
    """What one reader has read of one partition, within the horizon."""

    start: int | None = None
    frontier: int = 0
    forgotten_below: int = 0
    zero: Any = None  # ident read at offset 0
    at: dict[int, Any] = field(default_factory=dict)
    reads_of: dict[Any, list[int]] = field(default_factory=dict)
    max_seq: dict[tuple[int, int], int] = field(default_factory=dict)
    # expected acked writes not judged yet, as runs: heap of (first_offset, count, writer_id, inc, first_seq, done_ts)
    pending: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    waiting: dict[WriteKey, int] = field(default_factory=dict)
    waiting_heap: list[tuple[int, WriteKey]] = field(default_factory=list)
    zero_wait: set[WriteKey] = field(default_factory=set)


class Checker:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.fold = LedgerFold()
        self.views: dict[tuple[Isolation, str, int], PartitionView] = {}
        self.txns: dict[TxnKey, transactions.TxnTrack] = {}
        self.judge_queue: set[TxnKey] = set()
        self.log_start: dict[tuple[str, int], int] = {}
        self.counts: Counter[tuple[Invariant, Isolation]] = Counter()
        self.expired_unread = 0
        self.aborted_allowed = 0
        self.records_checked: Counter[Isolation] = Counter()
        self._dirty: set[tuple[Isolation, str, int]] = set()
        self._out: list[Violation] = []

    # -- observations ----------------------------------------------------------------------

    def view(self, iso: Isolation, topic_id: str, partition: int) -> PartitionView:
        key = (iso, topic_id, partition)
        v = self.views.get(key)
        if v is None:
            v = self.views[key] = PartitionView()
        return v

    def apply_ledger(self, entries: Iterable[dict[str, Any]]) -> None:
        for entry in entries:
            for ev in self.fold.apply(entry):
                self._ledger_event(ev)

    def set_log_start(self, topic_id: str, partition: int, offset: int) -> None:
        key = (topic_id, partition)
        self.log_start[key] = max(offset, self.log_start.get(key, 0))

    def apply_reads(self, iso: Isolation, topic_id: str, partition: int, reads: Sequence[Read]) -> None:
        """One reader's records of one partition, in offset order."""
        v = self.view(iso, topic_id, partition)
        other = self.views.get((RU if iso is RC else RC, topic_id, partition))
        settle = self.settings.settle_offsets
        self._dirty.add((iso, topic_id, partition))
        for r in reads:
            off, ident = r.offset, r.ident
            if off < v.frontier:
                continue  # a re-read of an offset already judged
            if v.start is None:
                v.start = off
            if off == 0:
                v.zero = ident
            v.at[off] = ident
            v.frontier = off + 1
            if other is not None and offsets.disagree(ident, other.at.get(off)):
                for side in (RC, RU):
                    self._violation(I.INCONSISTENT_OFFSET, side, topic_id, partition, (off,),
                                    detail=f"{iso.value} read {ident}, the other reader {other.at.get(off)}")
            if not is_canary(ident):
                continue
            self.records_checked[iso] += 1
            wid, inc, seq = ident
            prev = v.reads_of.get(ident)
            if prev is None:
                v.reads_of[ident] = [off]
            elif off not in prev:
                prev.append(off)
                if len(prev) == 2:
                    self._violation(I.DUPLICATE, iso, topic_id, partition, tuple(prev), (wid, inc), seq)
            top = v.max_seq.get((wid, inc))
            if sequence.is_reorder(seq, top, prev is None):
                self._violation(I.REORDER, iso, topic_id, partition, (off,), (wid, inc), seq,
                                detail=f"seq {seq} after seq {top}")
            if top is None or seq > top:
                v.max_seq[(wid, inc)] = seq
            wkey = (topic_id, partition, wid, inc, seq)
            acked_at = v.waiting.get(wkey)
            if acked_at is not None and off <= acked_at + settle - 1:
                del v.waiting[wkey]
                self._violation(I.OFFSET_MISMATCH, iso, topic_id, partition, (acked_at, off), (wid, inc), seq,
                                detail=f"acked at {acked_at}, read at {off}")
            if wkey in v.zero_wait:
                v.zero_wait.discard(wkey)
                self._violation(I.OFFSET_MISMATCH, iso, topic_id, partition, (0, off), (wid, inc), seq,
                                detail=f"acked at 0, read at {off}")
            if r.txn_id:
                self._txn_read(iso, (wid, inc, r.txn_id), wkey, off)

    def settle(self) -> list[Violation]:
        """Judge everything that became decidable; returns the new violations."""
        for key in sorted(self._dirty, key=lambda k: (k[0].value, k[1], k[2])):
            self._settle_view(key)
        self._dirty.clear()
        self._judge_txns()
        out, self._out = self._out, []
        return out

    # -- ledger events ---------------------------------------------------------------------

    def _ledger_event(self, ev: tuple) -> None:
        kind = ev[0]
        if kind == "gap":
            _, (instance, inc), missing, first = ev
            for n in range(first, first + missing):  # one violation (and evidence line) per lost entry
                self._violation(I.OUTCOME_GAP, NONE, detail=f"{instance} incarnation {inc}: ledger entry n={n} "
                                f"missing ({missing} from n={first})")
        elif kind == "acked_run":
            _, tid, p, wid, inc, first_seq, count, first_offset, done = ev
            for iso in (RU, RC):
                heapq.heappush(self.view(iso, tid, p).pending, (first_offset, count, wid, inc, first_seq, done))
                self._dirty.add((iso, tid, p))
        elif kind == "intent":
            _, wkey, tkey, _ts = ev
            if tkey:
                t = self._track(tkey)
                t.writes.add(wkey)
                t.undecided_writes += 1
        elif kind == "acked":
            _, wkey, off, tkey, done = ev
            self._expect(RU, wkey, off, done)
            if tkey is None:
                self._expect(RC, wkey, off, done)
            else:
                t = self._track(tkey)
                self._write_decided(t, wkey)
                t.acked[wkey] = off
                if t.outcome == "committed":
                    self._expect(RC, wkey, off, done)
                self.judge_queue.add(tkey)
        elif kind == "decided":
            _, wkey, tkey = ev
            if tkey:
                t = self._track(tkey)
                self._write_decided(t, wkey)
                self.judge_queue.add(tkey)
        elif kind == "txn":
            _, tkey, outcome = ev
            t = self._track(tkey)
            if t.outcome != "pending":
                return
            t.outcome = outcome
            if outcome == "committed":
                for wkey, off in t.acked.items():
                    self._expect(RC, wkey, off, 0)
            elif outcome == "aborted":
                for wkey, off in sorted(t.rc_reads.items(), key=lambda kv: kv[1]):
                    self._aborted_read(t, wkey, off)
                self.aborted_allowed += len(t.ru_reads)
            self.judge_queue.add(tkey)

    @staticmethod
    def _write_decided(t: transactions.TxnTrack, wkey: WriteKey) -> None:
        if wkey in t.writes and t.undecided_writes > 0 and wkey not in t.acked:
            t.undecided_writes -= 1

    def _track(self, tkey: TxnKey) -> transactions.TxnTrack:
        t = self.txns.get(tkey)
        if t is None:
            t = self.txns[tkey] = transactions.TxnTrack(tkey)
        return t

    def _expect(self, iso: Isolation, wkey: WriteKey, off: int, done_ts: int) -> None:
        tid, p, wid, inc, seq = wkey
        heapq.heappush(self.view(iso, tid, p).pending, (off, 1, wid, inc, seq, done_ts))
        self._dirty.add((iso, tid, p))

    # -- transactions ----------------------------------------------------------------------

    def _txn_read(self, iso: Isolation, tkey: TxnKey, wkey: WriteKey, off: int) -> None:
        t = self._track(tkey)
        if iso is RC:
            if wkey not in t.rc_reads:
                t.rc_reads[wkey] = off
                if t.outcome == "aborted":
                    self._aborted_read(t, wkey, off)
        elif wkey not in t.ru_reads:
            t.ru_reads.add(wkey)
            if t.outcome == "aborted":
                self.aborted_allowed += 1

    def _aborted_read(self, t: transactions.TxnTrack, wkey: WriteKey, off: int) -> None:
        if wkey in t.aborted_counted:
            return
        t.aborted_counted.add(wkey)
        tid, p, wid, inc, seq = wkey
        self._violation(I.ABORTED_READ, RC, tid, p, (off,), (wid, inc), seq, txn_id=t.key[2])

    def _judge_txns(self) -> None:
        for tkey in sorted(self.judge_queue):
            t = self.txns.get(tkey)
            if t is None:
                self.judge_queue.discard(tkey)
                continue
            if t.outcome == "pending" or t.undecided_writes:
                continue
            tops = t.max_acked()
            rc_past = all(self.view(RC, tid, p).frontier > top for (tid, p), top in tops.items())
            if t.ready() and rc_past:
                visible = sum(1 for w, off in t.rc_reads.items() if off <= tops.get((w[0], w[1]), -1))
                if transactions.partial_verdict(len(t.writes), visible, t.outcome):
                    tid, p = min(tops)
                    self._violation(I.PARTIAL_TXN, RC, tid, p, tuple(sorted(tops.values())), tkey[:2],
                                    txn_id=tkey[2], detail=f"{visible} of {len(t.writes)} records visible")
                t.judged = True
            if t.outcome == "aborted":
                # Its records may still be read (writes that timed out can have landed): kept until
                # both readers are a horizon past everything known of it (then it is the audit's).
                if self._past_horizon(t):
                    self.judge_queue.discard(tkey)
                    del self.txns[tkey]
            elif rc_past and all(self.view(RU, tid, p).frontier > top for (tid, p), top in tops.items()):
                self.judge_queue.discard(tkey)
                del self.txns[tkey]

    def _past_horizon(self, t: transactions.TxnTrack) -> bool:
        parts = {(w[0], w[1]) for w in t.writes} | {(w[0], w[1]) for w in t.acked}
        known = {part: -1 for part in parts}
        for w, off in [*t.acked.items(), *t.rc_reads.items()]:
            known[(w[0], w[1])] = max(known.get((w[0], w[1]), -1), off)
        if t.decided_at is None:
            t.decided_at = {(iso, *part): self.view(iso, *part).frontier for part in parts for iso in (RC, RU)}
        return all(self.view(iso, *part).frontier > max(known.get(part, -1), t.decided_at.get((iso, *part), 0))
                   + self.settings.horizon_offsets for part in known for iso in (RC, RU))

    # -- verdicts on acked writes ----------------------------------------------------------

    def _settle_view(self, key: tuple[Isolation, str, int]) -> None:
        iso, tid, p = key
        v = self.views[key]
        settle = self.settings.settle_offsets
        log_start = self.log_start.get((tid, p), 0)
        while v.pending and v.pending[0][0] < v.frontier:
            first_off, count, wid, inc, first_seq, done = heapq.heappop(v.pending)
            for i in range(count):
                off = first_off + i
                if off >= v.frontier:  # the rest of the run is still ahead of the reader
                    heapq.heappush(v.pending, (off, count - i, wid, inc, first_seq + i, done))
                    break
                self._judge_write(iso, tid, p, v, off, (tid, p, wid, inc, first_seq + i), settle, log_start)
        while v.waiting_heap and v.waiting_heap[0][0] <= v.frontier:
            _, wkey = heapq.heappop(v.waiting_heap)
            off = v.waiting.pop(wkey, None)
            if off is not None:
                self._verdict(Verdict.EXPIRED if off < log_start else Verdict.LOST, iso, tid, p, off, wkey, v)
        self._forget(v)

    def _judge_write(self, iso: Isolation, tid: str, p: int, v: PartitionView, off: int, wkey: WriteKey,
                     settle: int, log_start: int) -> None:
        ident = wkey[2:]
        seen = v.reads_of.get(ident)
        if seen is not None and off in seen:
            return  # the common case: read exactly where it was acked
        if off == 0 and v.start == 0 and ident == v.zero:
            return
        if off == 0 and v.start == 0 and offsets.bogus_zero_ack(0, ident, v.zero):
            self._violation(I.ZERO_OFFSET, iso, tid, p, (0,), ident[:2], ident[2],
                            detail=f"acked at 0, offset 0 holds {v.zero}")
            if seen:
                self._violation(I.OFFSET_MISMATCH, iso, tid, p, (0, seen[0]), ident[:2], ident[2],
                                detail=f"acked at 0, read at {seen[0]}")
            else:
                v.zero_wait.add(wkey)
            return
        if off < v.forgotten_below:
            self.expired_unread += 1  # acked later than the horizon reaches back: the audit's
            return
        verdict = sequence.acked_write_verdict(off, seen or (), v.frontier, v.start, settle, log_start)
        self._verdict(verdict, iso, tid, p, off, wkey, v)

    def _verdict(self, verdict: Verdict, iso: Isolation, tid: str, p: int, off: int, wkey: WriteKey,
                 v: PartitionView) -> None:
        ident = wkey[2:]
        if verdict is Verdict.EXPIRED:
            self.expired_unread += 1
        elif verdict is Verdict.LOST:
            self._violation(I.LOST_WRITE, iso, tid, p, (off,), ident[:2], ident[2],
                            detail=f"acked at {off}, reader at {v.frontier}")
        elif verdict is Verdict.MISMATCH:
            where = min(v.reads_of[ident])
            self._violation(I.OFFSET_MISMATCH, iso, tid, p, (off, where), ident[:2], ident[2],
                            detail=f"acked at {off}, read at {where}")
        elif verdict is Verdict.UNDECIDED:
            v.waiting[wkey] = off
            heapq.heappush(v.waiting_heap, (off + self.settings.settle_offsets, wkey))

    def _forget(self, v: PartitionView) -> None:
        cut = v.frontier - self.settings.horizon_offsets
        if cut <= v.forgotten_below:
            return
        for off in range(max(v.forgotten_below, v.start or 0), cut):
            ident = v.at.pop(off, None)
            if ident is not None:
                seen = v.reads_of.get(ident)
                if seen is not None and max(seen) < cut:
                    del v.reads_of[ident]
        v.forgotten_below = cut

    # -- reporting -------------------------------------------------------------------------

    def _violation(self, inv: Invariant, iso: Isolation, tid: str = "", p: int = -1, offs: tuple[int, ...] = (),
                   writer: tuple[int, int] | None = None, seq: int | None = None, txn_id: int | None = None,
                   detail: str = "") -> None:
        self.counts[(inv, iso)] += 1
        self._out.append(Violation(inv, iso, tid, p, offs, writer, seq, txn_id, detail))

    def unseen(self, now_us: int, deadline_s: float) -> dict[Isolation, int]:
        """Expected writes acked more than ``deadline_s`` ago that each reader has not reached."""
        cutoff = now_us - int(deadline_s * 1e6)
        out = {RC: 0, RU: 0}
        for (iso, _tid, _p), v in self.views.items():
            out[iso] += sum(count for _off, count, _w, _i, _s, done in v.pending if 0 < done < cutoff)
        return out

    def frontiers(self) -> dict[tuple[Isolation, str, int], int]:
        return {k: v.frontier for k, v in self.views.items()}
