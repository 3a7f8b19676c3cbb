"""The audit oracle: every history invariant, computed over the whole history at once.

Deliberately simple and independent of :mod:`invariants.checker` (it shares only the catalog
names, the ledger's typed decoding and the promise-class definitions; its ledger reading is its
own, :mod:`monitor.audit.book`): no incremental state, no horizon, plain sets and loops over
everything that was read. It applies the definitions of the invariant catalog as written in
the checker modules' docstrings; the live checker must reach the same counts (the property
tests and the integration tests compare them). Liveness invariants (``stalled_poll``,
``lso_stuck``, ``producer_stalled``) are judged on time and are not recomputed here, except
the hanging transactions the ledger and the final log show (:mod:`monitor.audit.hanging`).

A topic ID that is gone (:meth:`monitor.audit.book.LedgerBook.gone`: retired, found replaced by a
writer, or not the ID its name has now) has nothing left to read: its acknowledged writes are
``lost_write`` (``topic_vanished``) at or above the last log start the writers recorded for their
partition, expired below it, and all expired (``retired``) if it was retired.

A reader's view of the final log begins at its first record, or lower where the log start after
its read is lower: read_committed returns nothing of an aborted transaction, and a log that begins
with one (a partition wiped and written again) holds records at the offsets below its first. An
acknowledged write acked there is missing, as the live checker, which read the log before it
changed, finds; below the view's beginning retention took the log, and writes there are expired.

What the final log cannot show: an offset that held one record when a reader read it and
another later (``inconsistent_offset`` across time), and that a lost write had been read before
it vanished (the live checker classes such a loss by the topic's unclean-election setting, the
audit by the write's own class). Where they differ, the live evidence shows what was seen.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from invariants.catalog import Invariant, Isolation
from invariants.ledger_format import LedgerEntry, TxnOutcome, WriteOutcome
from invariants.model import Durability, TxnKey, WriteKey, lost_cause
from invariants.offset_set import OffsetSet
from invariants.promises import GUARANTEED, KAFKA_ALLOWS, UNKNOWN, Promise
from monitor.audit.book import LedgerBook

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE

# reads[isolation][(topic_id, partition)] = [(offset, ident, txn id[, intended-abort flag]), ...]
Reads = dict[Isolation, dict[tuple[str, int], list[tuple]]]

HISTORY_INVARIANTS = (
    Invariant.LOST_WRITE, Invariant.DUPLICATE, Invariant.REORDER, Invariant.ZERO_OFFSET,
    Invariant.OFFSET_MISMATCH, Invariant.INCONSISTENT_OFFSET, Invariant.ABORTED_READ,
    Invariant.PARTIAL_TXN, Invariant.OUTCOME_GAP, Invariant.G0_WRITE_CYCLE,
)


@dataclass
class AuditResult:
    counts: dict[tuple[Invariant, Isolation, Durability], int] = field(default_factory=lambda: defaultdict(int))
    examples: dict[tuple[Invariant, Isolation], list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    records_checked: dict[Isolation, int] = field(default_factory=lambda: {RC: 0, RU: 0})
    lost_by_writer: dict[tuple[str, Isolation, Durability], int] = field(default_factory=lambda: defaultdict(int))
    expired: Counter = field(default_factory=Counter)  # reason -> writes
    lost_by_cause: Counter = field(default_factory=Counter)  # (cause, isolation) -> lost writes
    aborted_allowed: int = 0
    undecided: int = 0
    unconfirmed_missing: dict[Isolation, int] = field(default_factory=lambda: {RC: 0, RU: 0})
    writers_joined_mid_stream: int = 0
    undecided_writes: set[tuple[str, str, int, int, int, int]] = field(default_factory=set)  # iso, tid, p, wid, inc, seq
    reused: dict[tuple[str, int], OffsetSet] = field(default_factory=dict)  # the ledger's (LedgerBook.reused)
    rewrite_marks: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)  # LedgerBook's

    def add(self, inv: Invariant, iso: Isolation, n: int = 1, promise: Promise = GUARANTEED, writer_name: str = "",
            **example: Any) -> None:
        self.counts[(inv, iso, promise.durability)] += n
        if inv is Invariant.LOST_WRITE:
            self.lost_by_writer[(writer_name, iso, promise.durability)] += n
            self.lost_by_cause[(lost_cause(example.get("cause", "")), iso)] += n
        if len(self.examples[(inv, iso)]) < 5:
            self.examples[(inv, iso)].append({**example, "durability": promise.durability.value,
                                              "reason": promise.reason})

    @property
    def expired_unread(self) -> int:
        return sum(self.expired.values())

    def count(self, inv: Invariant, iso: Isolation) -> int:
        return sum(n for (i, s, _d), n in self.counts.items() if i is inv and s is iso)

    def nonzero(self) -> dict[tuple[Invariant, Isolation], int]:
        """Counts per (invariant, isolation), whatever the class."""
        out: dict[tuple[Invariant, Isolation], int] = defaultdict(int)
        for (inv, iso, _d), n in self.counts.items():
            out[(inv, iso)] += n
        return {k: v for k, v in out.items() if v}

    def by_class(self) -> dict[tuple[Invariant, Isolation, Durability], int]:
        return {k: v for k, v in self.counts.items() if v}


def audit(ledger_entries: Iterable[LedgerEntry], reads: Reads, settle: int,
          log_start: dict[tuple[str, int], int] | None = None, watched: Iterable[str] | None = None,
          topic_ids_now: dict[str, str | None] | None = None,
          read_log_start: dict[Isolation, dict[tuple[str, int], int]] | None = None) -> AuditResult:
    """``topic_ids_now``: the ID each watched topic name has now (None: missing), when known.
    ``read_log_start``: per isolation, each partition's log start once that reader had read it to
    the end, when known. A reader's view of the final log begins there, not at the first record it
    returned: read_committed returns nothing for an aborted transaction's records, and a log that
    begins with some (a partition wiped and written again, its first transaction aborted) holds
    other records at the offsets below — an acknowledged write there is missing, not expired."""
    book = LedgerBook.of(ledger_entries, watched)
    log_start = log_start or {}
    res = AuditResult(reused=book.reused, rewrite_marks=book.rewrite_marks)
    for missing in book.gaps().values():
        res.add(Invariant.OUTCOME_GAP, NONE, len(missing), entries=missing[:10])

    at: dict[Isolation, dict[tuple[str, int], dict[int, Any]]] = {RC: {}, RU: {}}
    where: dict[Isolation, dict[tuple[str, int], dict[Any, list[int]]]] = {RC: {}, RU: {}}
    for iso in (RC, RU):
        for part, recs in reads.get(iso, {}).items():
            by_offset: dict[int, Any] = {}
            for off, ident, *_txn in recs:
                by_offset.setdefault(off, ident)
            at[iso][part] = by_offset
            w: dict[Any, list[int]] = defaultdict(list)
            for off in sorted(by_offset):
                if by_offset[off][0] != "x":
                    w[by_offset[off]].append(off)
            where[iso][part] = w
            res.records_checked[iso] += sum(len(v) for v in w.values())

    seen_from = _seen_from(at, read_log_start or {})
    _duplicates_and_reorders(res, book, at, where)
    _inconsistent(res, book, at)
    _acked_writes(res, book, at, where, settle, log_start, book.gone(topic_ids_now), seen_from)
    _unconfirmed(res, book, where, settle)
    headers = _transactions(res, book, reads, at, log_start, seen_from)
    _write_cycles(res, reads.get(RC, {}), headers)
    res.writers_joined_mid_stream = sum(1 for w in book.writers.values() if w.watched and w.joined_mid_stream)
    return res


def _seen_from(at: dict, read_log_start: dict[Isolation, dict[tuple[str, int], int]]
               ) -> dict[Isolation, dict[tuple[str, int], int]]:
    """Per isolation and partition, where the reader's view of the final log begins: its first
    record, or the log start after its read when that is lower (records below the first one it
    returned were there, invisible to it). Below it, nothing can be judged: retention took it."""
    return {iso: {part: min(min(offs), read_log_start.get(iso, {}).get(part, min(offs)))
                  for part, offs in at[iso].items() if offs} for iso in (RC, RU)}


def _write_cycles(res: AuditResult, rc_reads: dict[tuple[str, int], list[tuple]],
                  headers: dict[TxnKey, tuple[int, set[int]]]) -> None:
    """``g0_write_cycle``: per pair of partitions of a topic, the transactions read on both, in
    their order on the first; a pair whose order on the second is the opposite is a cycle, counted
    once per pair of transactions (whichever partitions show it). Only transactions read whole
    (``headers``: read_committed's size and indexes seen; none: as good as whole) have known
    positions (invariants.write_cycles)."""
    first: dict[tuple[str, int], dict[TxnKey, int]] = defaultdict(dict)  # the lowest offset read per txn
    for (tid, p), recs in rc_reads.items():
        for rec in recs:
            off, ident, txn_id = rec[:3]
            if txn_id and ident[0] != "x" and not (len(rec) > 3 and rec[3]):
                key = TxnKey(ident[0], ident[1], txn_id)
                size, indexes = headers.get(key, (0, ()))
                if len(indexes) >= size:
                    mine = first[(tid, p)]
                    mine[key] = min(off, mine.get(key, off))
    cycles: set[tuple[TxnKey, TxnKey]] = set()
    for (tid, p), (tid2, q) in itertools.combinations(sorted(first), 2):
        if tid != tid2:
            continue
        on_p, on_q = first[(tid, p)], first[(tid2, q)]
        order = sorted((on_p[k], on_q[k], k) for k in on_p if k in on_q)
        for a, b in _inverted([(oq, k) for _op, oq, k in order]):
            cycles.add((min(a, b), max(a, b)))
    for a, b in sorted(cycles):
        res.add(Invariant.G0_WRITE_CYCLE, RC, promise=KAFKA_ALLOWS, txns=[tuple(a), tuple(b)])


def _inverted(items: list[tuple[int, TxnKey]]) -> list[tuple[TxnKey, TxnKey]]:
    """Pairs (earlier, later) of ``items`` (in order on one partition: (offset on the other,
    transaction)) whose offsets on the other partition are in the opposite order: divide and
    conquer, each half sorted by the other partition's offset."""
    if len(items) < 2:
        return []
    mid = len(items) // 2
    left, right = items[:mid], items[mid:]
    pairs = _inverted(left) + _inverted(right)
    left_by_q = sorted(left)
    left_q = [oq for oq, _k in left_by_q]
    for oq, k in right:
        pairs.extend((lk, k) for _lq, lk in left_by_q[bisect.bisect_right(left_q, oq):])
    return pairs


def _duplicates_and_reorders(res: AuditResult, book: LedgerBook, at: dict, where: dict) -> None:
    for iso in (RC, RU):
        for (tid, p), w in where[iso].items():
            for ident, offs in w.items():
                cls = book.writer_class(ident[0], ident[1])
                if len(offs) >= 2 and cls is not None:  # judged for writers the ledger announced
                    res.add(Invariant.DUPLICATE, iso, promise=cls.order, topic_id=tid, partition=p, writer=ident[:2],
                            seq=ident[2], offsets=offs)
            highest: dict[tuple[int, int], int] = {}
            seen: set[Any] = set()
            for off in sorted(at[iso][(tid, p)]):
                ident = at[iso][(tid, p)][off]
                if ident[0] == "x":
                    continue
                writer, seq = ident[:2], ident[2]
                cls = book.writer_class(*writer)
                if ident not in seen and writer in highest and seq < highest[writer] and cls is not None:
                    res.add(Invariant.REORDER, iso, promise=cls.order, topic_id=tid, partition=p, offset=off,
                            writer=writer, seq=seq)
                seen.add(ident)
                highest[writer] = max(seq, highest.get(writer, seq))


def _inconsistent(res: AuditResult, book: LedgerBook, at: dict) -> None:
    for part, rc_at in at[RC].items():
        ru_at = at[RU].get(part, {})
        for off, ident in rc_at.items():
            if off in ru_at and ru_at[off] != ident:
                canary = sorted(i for i in (ident, ru_at[off]) if i[0] != "x")
                cls = book.writer_class(canary[0][0], canary[0][1]) if canary else None
                if canary and cls is None:
                    continue  # classed by its writer's announcement, which the ledger never made
                promise = cls.read if cls is not None else UNKNOWN
                for iso in (RC, RU):
                    res.add(Invariant.INCONSISTENT_OFFSET, iso, promise=promise, topic_id=part[0], partition=part[1],
                            offset=off)


def _zero_acks_after_higher(book: LedgerBook) -> set:
    """Acks at offset 0 that follow (in seq order) an ack of the same writer incarnation,
    partition and topic ID at a higher offset: an offset going back to 0 at ack time."""
    out, highest = set(), {}
    for wkey, st in sorted(book.writes.items(), key=lambda kv: kv[0]):
        if st.outcome is not WriteOutcome.ACKED:
            continue
        stream = (wkey.topic_id, wkey.partition, wkey.writer_id, wkey.inc)
        if st.offset == 0 and highest.get(stream, 0) > 0:
            out.add(wkey)
        highest[stream] = max(highest.get(stream, 0), st.offset)
    return out


def _expected_in(iso: Isolation, txn_outcome: TxnOutcome | None) -> bool:
    return iso is RU or txn_outcome is None or txn_outcome is TxnOutcome.COMMITTED


def _acked_writes(res: AuditResult, book: LedgerBook, at: dict, where: dict, settle: int,
                  log_start: dict[tuple[str, int], int], gone: dict[str, str],
                  seen_from: dict[Isolation, dict[tuple[str, int], int]]) -> None:
    bounds = {iso: {part: (seen_from[iso][part], max(offs) + 1) for part, offs in at[iso].items() if offs}
              for iso in (RC, RU)}
    backwards = _zero_acks_after_higher(book)
    for wkey, st in book.writes.items():
        if st.outcome is not WriteOutcome.ACKED:
            continue
        tid, p, wid, inc, seq = wkey.topic_id, wkey.partition, wkey.writer_id, wkey.inc, wkey.seq
        txn = book.txns.get(TxnKey(wid, inc, st.txn_id)) if st.txn_id else None
        ident, o = wkey.ident, st.offset
        if not st.txn_id and o < st.log_start_after:  # below the log start listed after the ack: bogus
            for iso in (RC, RU):
                res.add(Invariant.ZERO_OFFSET if o == 0 else Invariant.OFFSET_MISMATCH, iso, topic_id=tid, partition=p,
                        writer=(wid, inc), seq=seq, acked_offset=o, cause="below_log_start")
            continue
        for iso in (RC, RU):
            if not _expected_in(iso, txn.outcome if txn else None):
                continue
            if tid in gone:
                L = book.log_starts.get((tid, p), 0)
                if gone[tid] == "retired":
                    res.expired["retired"] += 1
                elif o < L:
                    res.expired["log_start"] += 1
                else:
                    res.add(Invariant.LOST_WRITE, iso, promise=st.cls.acked, writer_name=st.cls.writer,
                            topic_id=tid, partition=p, writer=(wid, inc), seq=seq, acked_offset=o,
                            cause="topic_vanished")
                continue
            offsets_read = at[iso].get((tid, p), {})
            undecided = (iso.value, tid, p, wid, inc, seq)
            if not offsets_read:
                res.undecided += 1
                res.undecided_writes.add(undecided)
                continue
            start, frontier = bounds[iso][(tid, p)]
            found = where[iso][(tid, p)].get(ident, [])
            ex = dict(topic_id=tid, partition=p, writer=(wid, inc), seq=seq, acked_offset=o, read_at=found)
            if frontier <= o:
                res.undecided += 1
                res.undecided_writes.add(undecided)
            elif o < start:
                res.expired["below_first_read"] += 1
            elif o == 0 and offsets_read.get(0) != ident and (found or wkey in backwards):
                res.add(Invariant.ZERO_OFFSET, iso, **ex)
                if found:
                    res.add(Invariant.OFFSET_MISMATCH, iso, **ex)
            elif o in found:
                pass
            elif any(r <= o + settle - 1 for r in found):
                res.add(Invariant.OFFSET_MISMATCH, iso, **ex)
            elif frontier >= o + settle:
                if o < log_start.get((tid, p), 0):
                    res.expired["log_start"] += 1
                else:
                    res.add(Invariant.LOST_WRITE, iso, promise=st.cls.acked, writer_name=st.cls.writer, **ex)
            else:
                res.undecided += 1
                res.undecided_writes.add(undecided)


def _unconfirmed(res: AuditResult, book: LedgerBook, where: dict, settle: int) -> None:
    """acks=0 writes never read although a seq at least H higher of their writer and partition was."""
    for iso in (RC, RU):
        top: dict[tuple[str, int, int, int], int] = {}
        for (tid, p), w in where[iso].items():
            for wid, inc, seq in w:
                k = (tid, p, wid, inc)
                top[k] = max(top.get(k, -1), seq)
        for wkey, st in book.writes.items():
            if st.outcome is not WriteOutcome.UNCONFIRMED:
                continue
            found = wkey.ident in where[iso].get(wkey.part, {})
            if not found and top.get((*wkey.part, wkey.writer_id, wkey.inc), -1) >= wkey.seq + settle:
                res.unconfirmed_missing[iso] += 1


def _transactions(res: AuditResult, book: LedgerBook, reads: Reads, at: dict,
                  log_start: dict[tuple[str, int], int], seen_from: dict[Isolation, dict[tuple[str, int], int]]
                  ) -> dict[TxnKey, tuple[int, set[int]]]:
    """Judges transactions; returns read_committed's headers per transaction (size, indexes seen)."""
    rc_seen: dict[TxnKey, dict[WriteKey, int]] = defaultdict(dict)
    ru_seen: dict[TxnKey, set[WriteKey]] = defaultdict(set)
    meant_to_abort: set[TxnKey] = set()  # a record of it carried the header's intended-abort flag
    headers: dict[TxnKey, tuple[int, set[int]]] = {}  # read_committed: the header's size, indexes seen
    for iso, target in ((RC, rc_seen), (RU, ru_seen)):
        for (tid, p), recs in reads.get(iso, {}).items():
            for rec in recs:
                off, ident, txn_id = rec[:3]
                if txn_id and ident[0] != "x":
                    key = TxnKey(ident[0], ident[1], txn_id)
                    if len(rec) > 3 and rec[3]:
                        meant_to_abort.add(key)
                    wkey = WriteKey(tid, p, *ident)
                    if iso is RC:
                        if wkey not in target[key] and len(rec) > 5:
                            headers.setdefault(key, (rec[4], set()))[1].add(rec[5])
                        target[key].setdefault(wkey, off)
                    else:
                        target[key].add(wkey)
    _torn_by_headers(res, book, reads.get(RC, {}), rc_seen, headers, meant_to_abort)
    for key, txn in book.txns.items():
        if txn.outcome is TxnOutcome.ABORTED or key in meant_to_abort:
            for wkey, off in rc_seen.get(key, {}).items():
                res.add(Invariant.ABORTED_READ, RC, promise=txn.cls.txn, topic_id=wkey.topic_id,
                        partition=wkey.partition, offset=off, txn=tuple(key))
        if txn.outcome is TxnOutcome.ABORTED:
            res.aborted_allowed += len(ru_seen.get(key, ()))
        if txn.outcome not in (TxnOutcome.COMMITTED, TxnOutcome.INDETERMINATE) or key in meant_to_abort:
            continue
        states = [book.writes[w] for w in txn.writes if w in book.writes]
        if any(s.outcome is WriteOutcome.PENDING for s in states):
            continue
        tops: dict[tuple[str, int], int] = {}
        for w in txn.writes:
            st = book.writes.get(w)
            if st is not None and st.outcome is WriteOutcome.ACKED:
                tops[w.part] = max(st.offset, tops.get(w.part, -1))
        if not tops:
            continue
        if any(not at[RC].get(part) or max(at[RC][part]) < top for part, top in tops.items()):
            continue
        lows: dict[tuple[str, int], int] = {}
        for w in txn.writes:
            st = book.writes.get(w)
            if st is not None and st.outcome is WriteOutcome.ACKED:
                lows[w.part] = min(st.offset, lows.get(w.part, st.offset))
        if any(low < max(seen_from[RC][part], log_start.get(part, 0)) for part, low in lows.items()):
            continue
        visible = sum(1 for w, off in rc_seen.get(key, {}).items() if off <= tops.get(w.part, -1))
        if 0 < visible < len(txn.writes):
            res.add(Invariant.PARTIAL_TXN, RC, promise=txn.cls.txn, txn=tuple(key), visible=visible,
                    intended=len(txn.writes))
    return headers


def _torn_by_headers(res: AuditResult, book: LedgerBook, rc_reads: dict[tuple[str, int], list[tuple]],
                     rc_seen: dict[TxnKey, dict[WriteKey, int]], headers: dict[TxnKey, tuple[int, set[int]]],
                     meant_to_abort: set[TxnKey]) -> None:
    """Transactions without an intent in the ledger, judged from their records' headers: torn when
    read_committed read around them on every partition and saw some, not all, of their indexes."""
    intents_up_to: dict[tuple[int, int], int] = {}
    for key, txn in book.txns.items():
        if txn.intent_seen:
            w = (key.writer_id, key.inc)
            intents_up_to[w] = max(key.txn_id, intents_up_to.get(w, 0))
    spans: dict[tuple[int, int, str, int], tuple[int, int]] = {}
    parts: dict[str, set[int]] = defaultdict(set)
    for (tid, p), recs in rc_reads.items():
        parts[tid].add(p)
        for rec in recs:
            ident, txn_id = rec[1], rec[2]
            if txn_id and ident[0] != "x":
                k = (ident[0], ident[1], tid, p)
                lo, hi = spans.get(k, (txn_id, txn_id))
                spans[k] = (min(lo, txn_id), max(hi, txn_id))
    for key, (size, indexes) in headers.items():
        txn = book.txns.get(key)
        if (txn is not None and (txn.intent_seen or txn.outcome is TxnOutcome.ABORTED)) or key in meant_to_abort:
            continue
        if intents_up_to.get((key.writer_id, key.inc), 0) <= key.txn_id:
            continue
        tid = min(rc_seen[key]).topic_id
        around = [spans.get((key.writer_id, key.inc, tid, p)) for p in parts[tid]]
        if not all(sp is not None and sp[0] < key.txn_id < sp[1] for sp in around):
            continue
        if 0 < len(indexes) < size:
            res.add(Invariant.PARTIAL_TXN, RC, promise=txn.cls.txn if txn is not None else UNKNOWN,
                    txn=tuple(key), visible=len(indexes), intended=size, by="headers")
