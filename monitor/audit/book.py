"""The audit's own reading of the whole ledger: every write's and every transaction's outcome.

Deliberately independent of the live checker's incremental fold
(:class:`invariants.accounting.LedgerFold`): no bounded state, no events, just a dictionary of
every write ever announced and what became of it. Both read the same typed entries
(:mod:`invariants.ledger_format`), classify with the same definitions
(:mod:`invariants.promises`) and apply the same rules, written again here:

* a new incarnation turns its predecessor's pending writes and transactions ``indeterminate``,
  and entries the predecessor writes after that are ignored;
* a number skipped in a writer's entries is a gap; the first entry seen of a writer starts its
  numbering (a ledger read from the middle has no gap before it);
* only writers of the watched canary topics count (named by a ``start``/``checkpoint`` entry, or
  writing to a topic ID such an entry named);
* a write whose intent was never seen is a transaction's write when its outcome run says so;
* each write is classed by its writer's settings and the topic settings it last recorded;
* topic IDs: which ones each name stood for, the log starts the writers recorded for them, which
  ones a writer found replaced (a ``start`` with ``replaces``), and which were retired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from invariants.ledger_format import (
    Checkpoint, Intent, LedgerEntry, LedgerFormatError, Outcomes, Retire, Start, Stop, TopicSettings, TxnEnd,
    TxnOutcome, WriteOutcome, decode,
)
from invariants.groups import acks_in_order, reused_by_rewrite, rewrite_began
from invariants.model import TxnKey, WriteKey
from invariants.offset_set import OffsetSet
from invariants.promises import UNKNOWN_CLASS, WriteClass, classify


@dataclass
class WriteState:
    outcome: WriteOutcome
    offset: int = -1
    txn_id: int = 0
    error: str | None = None
    send_ts_us: int = 0
    done_ts_us: int = 0
    cls: WriteClass = UNKNOWN_CLASS
    log_start_after: int = -1  # see OutcomeRun


@dataclass
class TxnState:
    outcome: TxnOutcome
    intended_abort: bool
    size: int
    writes: list[WriteKey] = field(default_factory=list)
    error: str | None = None
    cls: WriteClass = UNKNOWN_CLASS
    intent_seen: bool = True


@dataclass
class WriterLedger:
    instance: str
    writer_id: int
    incarnation: int
    topic_id: str | None = None
    next_n: int | None = None  # None until the first entry seen
    missing: list[int] = field(default_factory=list)
    stopped: bool = False
    superseded: bool = False  # a later incarnation started: its entries from then on are ignored
    watched: bool | None = None
    cls: WriteClass = UNKNOWN_CLASS
    joined_mid_stream: bool = False  # its first entry seen was not its start (the ledger's head was trimmed)
    awaiting_checkpoint: bool = False  # joined mid-stream: its state comes with its next checkpoint
    announced: bool = False  # a start or checkpoint said what it does


class LedgerBook:
    """Folds ledger entries, in ledger order, into per-write and per-transaction outcomes.
    ``watched``: the canary topic names that count (None: all)."""

    def __init__(self, watched: Iterable[str] | None = None) -> None:
        self.watched = None if watched is None else set(watched)
        self.watched_ids: set[str] = set()
        self.writers: dict[tuple[str, int], WriterLedger] = {}
        self.topic_settings: dict[str, TopicSettings] = {}  # the latest any writer recorded, per topic ID
        self.writes: dict[WriteKey, WriteState] = {}
        self.txns: dict[TxnKey, TxnState] = {}
        self.malformed = 0
        self.topic_ids: dict[str, set[str]] = {}  # name -> every ID it stood for
        self.log_starts: dict[tuple[str, int], int] = {}  # (topic ID, partition) -> highest recorded
        self.replaced: set[str] = set()  # IDs a writer found gone
        self.retired: set[str] = set()
        self.max_acked: dict[tuple[int, int, str, int], int] = {}  # (writer, inc, topic ID, partition) -> offset
        # (topic ID, partition) -> offsets a rewrite reused, as the writers' acks show them (invariants.groups)
        self.reused: dict[tuple[str, int], OffsetSet] = {}
        self.rewriting: set[tuple[int, int, str, int]] = set()  # keys whose last ack went backwards
        # (topic ID, partition) -> [(ms, offset)]: where each in-order writer saw a rewrite begin (invariants.groups)
        self.rewrite_marks: dict[tuple[str, int], list[tuple[int, int]]] = {}

    @classmethod
    def of(cls, entries: Iterable[LedgerEntry], watched: Iterable[str] | None = None) -> "LedgerBook":
        """The book of ``entries``, in ledger order."""
        book = cls(watched)
        for e in entries:
            book.apply(e)
        return book

    def apply_raw(self, value: bytes | None) -> None:
        try:
            entry = decode(value)
        except LedgerFormatError:
            self.malformed += 1
            return
        self.apply(entry)

    def _counts(self, w: WriterLedger, e: LedgerEntry) -> bool:
        body = e.body
        if isinstance(body, (Start, Checkpoint, Retire)):
            w.watched = self.watched is None or body.topic in self.watched
            if w.watched:
                self.watched_ids.add(body.topic_id)
        elif w.watched is None and (self.watched is None or getattr(body, "topic_id", None) in self.watched_ids):
            w.watched = True
        return bool(w.watched)

    def apply(self, e: LedgerEntry) -> None:
        key = (e.writer.instance, e.writer.inc)
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = WriterLedger(e.writer.instance, e.writer.writer_id, e.writer.inc)
        if w.superseded or (w.next_n is not None and e.n < w.next_n) or not self._counts(w, e):
            return  # a re-read or duplicate entry, a predecessor after its successor started, another topic
        if w.next_n is None:
            w.joined_mid_stream = w.awaiting_checkpoint = not isinstance(e.body, Start)
            w.next_n = e.n
        w.missing.extend(range(w.next_n, e.n))
        w.next_n = e.n + 1
        wid, inc, body = w.writer_id, w.incarnation, e.body
        if isinstance(body, (Start, Checkpoint)):
            w.topic_id = body.topic_id
            w.cls = classify(body.settings, body.topic_settings)
            w.announced = True
            self.topic_ids.setdefault(body.topic, set()).add(body.topic_id)
            if body.topic_settings is not None:
                self.topic_settings[body.topic_id] = body.topic_settings
        if isinstance(body, Checkpoint):
            for p, off in enumerate(body.log_starts):
                self.log_starts[(body.topic_id, p)] = max(off, self.log_starts.get((body.topic_id, p), 0))
        if isinstance(body, Retire):
            self.topic_ids.setdefault(body.topic, set()).add(body.topic_id)
            self.retired.add(body.topic_id)
        if isinstance(body, Start):
            if body.replaces:
                self.topic_ids[body.topic].add(body.replaces)
                self.replaced.add(body.replaces)
            self._close_predecessors(w.instance, inc)
        elif isinstance(body, Checkpoint) and w.awaiting_checkpoint:
            self._join(w, body)
        elif isinstance(body, Intent):
            txn_id = body.txn.id if body.txn else 0
            keys = [WriteKey(body.topic_id, r.partition, wid, inc, r.first_seq + i)
                    for r in body.writes for i in range(r.count)]
            for k in keys:
                self.writes.setdefault(k, WriteState(WriteOutcome.PENDING, txn_id=txn_id, cls=w.cls))
            if body.txn:
                self.txns[TxnKey(wid, inc, txn_id)] = TxnState(TxnOutcome.PENDING, body.txn.abort, body.txn.size, keys,
                                                               cls=w.cls)
        elif isinstance(body, Outcomes):
            for run in body.runs:
                if run.outcome is WriteOutcome.ACKED and run.first_offset >= 0:
                    self._acked_at(body.topic_id, run.partition, wid, inc, run.first_offset, run.count,
                                   -1 if run.txn_id else run.log_start_after, w.cls, run.done_ts_us)
                for i in range(run.count):
                    k = WriteKey(body.topic_id, run.partition, wid, inc, run.first_seq + i)
                    st = self.writes.get(k)
                    if st is None:  # its intent was not seen: the run says which transaction it belongs to
                        st = self.writes[k] = WriteState(WriteOutcome.PENDING, txn_id=run.txn_id, cls=w.cls)
                        if run.txn_id:
                            self.txns.setdefault(TxnKey(wid, inc, run.txn_id), TxnState(
                                TxnOutcome.PENDING, False, 0, [], cls=w.cls, intent_seen=False))
                    st.outcome = run.outcome
                    st.offset = run.first_offset + i if run.first_offset >= 0 else -1
                    st.error, st.send_ts_us, st.done_ts_us = run.error, run.send_ts_us, run.done_ts_us
                    st.log_start_after = run.log_start_after
        elif isinstance(body, TxnEnd):
            t = self.txns.get(TxnKey(wid, inc, body.id))
            if t is None:  # a transaction none of whose entries were seen before
                t = self.txns[TxnKey(wid, inc, body.id)] = TxnState(TxnOutcome.PENDING, False, 0, [], cls=w.cls,
                                                                     intent_seen=False)
            if t.outcome is TxnOutcome.PENDING:
                t.outcome, t.error = body.outcome, body.error
        elif isinstance(body, Stop):
            w.stopped = True
            self._close(wid, inc, "writer stopped")

    def _acked_at(self, tid: str, p: int, wid: int, inc: int, first: int, count: int, log_start_after: int,
                  cls: WriteClass, ack_ts_us: int) -> None:
        """Acks in the writer's ledger order, as the checker takes them (those outside a transaction
        below a log start listed after them are not acks at their offsets)."""
        end = first + count
        first += min(count, max(0, log_start_after - first))
        if first < end:
            key = (wid, inc, tid, p)
            reused = reused_by_rewrite(self.max_acked, key, first, end - 1)
            in_order = acks_in_order(cls)
            rewrite_began(self.rewriting, self.rewrite_marks, key, reused, end - 1, ack_ts_us, in_order)
            if reused is not None and in_order:
                self.reused.setdefault((tid, p), OffsetSet()).add_range(*reused)

    def _join(self, w: WriterLedger, body: Checkpoint) -> None:
        """A writer that joined mid-stream, at its first checkpoint: its writes in flight and its
        open transaction."""
        w.awaiting_checkpoint = False
        for pw in body.pending:
            for s in range(pw.first_seq, pw.first_seq + pw.count):
                self.writes.setdefault(WriteKey(body.topic_id, pw.partition, w.writer_id, w.incarnation, s),
                                       WriteState(WriteOutcome.PENDING, txn_id=pw.txn_id, cls=w.cls))
        for t in body.open_txns:
            keys = [WriteKey(body.topic_id, r.partition, w.writer_id, w.incarnation, r.first_seq + i)
                    for r in t.writes for i in range(r.count)]
            for k in keys:
                self.writes.setdefault(k, WriteState(WriteOutcome.PENDING, txn_id=t.id, cls=w.cls))
            known = self.txns.get(TxnKey(w.writer_id, w.incarnation, t.id))
            if known is None:
                self.txns[TxnKey(w.writer_id, w.incarnation, t.id)] = TxnState(TxnOutcome.PENDING, t.abort, t.size,
                                                                                keys, cls=w.cls)
            elif not known.intent_seen:  # known from its outcomes only: now its whole intent
                known.intended_abort, known.size, known.writes, known.intent_seen = t.abort, t.size, keys, True

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

    def writer_class(self, writer_id: int, inc: int) -> WriteClass | None:
        """The class the writer last announced (start or checkpoint); None if it never did."""
        for w in self.writers.values():
            if (w.writer_id, w.incarnation) == (writer_id, inc) and w.watched and w.announced:
                return w.cls
        return None

    def gone(self, now: dict[str, str | None] | None = None) -> dict[str, str]:
        """Topic IDs no longer read -> why (``retired``, else ``vanished``): retired ones, replaced
        ones, and — given ``now``, the ID each watched name has now (None: the topic is missing) —
        every other ID those names stood for."""
        out = {tid: "vanished" for tid in self.replaced}
        for name, current in (now or {}).items():
            out.update({tid: "vanished" for tid in self.topic_ids.get(name, set()) if tid != current})
        out.update({tid: "retired" for tid in self.retired})
        return out

    def by_outcome(self) -> dict[WriteOutcome, int]:
        counts: dict[WriteOutcome, int] = {o: 0 for o in WriteOutcome}
        for st in self.writes.values():
            counts[st.outcome] += 1
        return counts

    def gaps(self) -> dict[tuple[str, int], list[int]]:
        return {k: list(w.missing) for k, w in self.writers.items() if w.missing}
