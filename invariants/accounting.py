"""Accounting family: ``outcome_gap``, and the incremental fold of the outcome ledger.

**outcome_gap.** Each writer (instance, incarnation) numbers its ledger entries ``n`` from 0.
An entry whose ``n`` is above the next expected number means entries were lost: counted once
per missing entry (isolation ``none``). Entries with ``n`` below the next expected one are
re-reads and are ignored. The first entry a reader sees of a writer starts that writer's
accounting: what was never available (the ledger's head trimmed by retention, a checker that
joined late) is not a gap. Cannot be inferred: entries lost at the very end of a writer's
ledger with no later entry (a ``stop`` entry marks a clean end), or before the first entry
seen. False positives: none; the ledger is written idempotently with an infinite delivery
timeout. Implies: verdicts on that writer's writes in the gap cannot be made; those writes stay
``pending`` until the writer's next incarnation or stop turns them ``indeterminate`` (never
``lost_write``).

**Reading from the middle.** An outcome whose intent was never seen is still judged when it is
outside a transaction (outcome runs carry their transaction id); a transactional one is expected
by ``read_uncommitted``, and by ``read_committed`` once its transaction's commit is seen, but the
transaction is never judged ``partial_txn`` without its intent. A writer's ``checkpoint`` entries
(every few seconds) tell a late reader the writes still in flight and the open transaction.

**Watched topics.** Only entries about the canary topics this checker watches count: a writer
is watched once an entry names a watched topic (``start``, ``checkpoint``) or a topic ID known
to be one; entries of other topics' writers are ignored entirely (no expectations, no gaps).

Once the next incarnation of an instance has started, entries its predecessor still writes
are ignored: the predecessor's undecided writes and transactions were declared
``indeterminate`` at that point, and verdicts do not change afterwards (the instance lock
keeps a predecessor from running on; the audit's ledger reading applies the same rule).

:class:`LedgerFold` turns entries, in ledger order, into the typed events below for the
checker and the prober. Every write event carries the :class:`~invariants.promises.WriteClass`
of its writer as of its intent. The fold's state is bounded by what is still open: pending
writes (intent without outcome) and the per-writer numbering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from invariants.ledger_format import (
    Checkpoint, Intent, LedgerEntry, Outcomes, Start, Stop, TopicSettings, TxnEnd, TxnOutcome, WriteOutcome,
    WriterSettings,
)
from invariants.model import TxnKey, WriteKey
from invariants.promises import UNKNOWN_CLASS, WriteClass, classify

# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AckedRun:
    """Acked writes outside transactions, run-length encoded as the ledger has them."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    first_seq: int
    count: int
    first_offset: int
    done_ts_us: int
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class UnconfirmedRun:
    """Writes sent with ``acks=0``: written or not, nobody was told."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    first_seq: int
    count: int


@dataclass(frozen=True, slots=True)
class TxnWriteIntended:
    write: WriteKey
    txn: TxnKey
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class TxnWriteAcked:
    write: WriteKey
    offset: int
    txn: TxnKey
    done_ts_us: int
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class TxnWriteDecided:
    """A transaction's write got an outcome other than acked (or its writer ended)."""

    write: WriteKey
    txn: TxnKey
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class TxnDecided:
    txn: TxnKey
    outcome: TxnOutcome
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class EntriesMissing:
    instance: str
    inc: int
    first_n: int
    count: int


@dataclass(frozen=True, slots=True)
class WriterClassified:
    """What a writer does and what its topic promises, as of its latest ``start``/``checkpoint``."""

    writer_id: int
    inc: int
    topic_id: str
    cls: WriteClass
    settings: WriterSettings
    topic_settings: TopicSettings | None


LedgerEvent = Union[AckedRun, UnconfirmedRun, TxnWriteIntended, TxnWriteAcked, TxnWriteDecided, TxnDecided,
                    EntriesMissing, WriterClassified]


# -- the fold --------------------------------------------------------------------------------


@dataclass
class PendingRange:
    """Seqs ``[first, end)`` of one partition whose intent was seen and outcome not yet."""

    first: int
    end: int
    intent_ts_us: int
    txn: TxnKey | None
    cls: WriteClass = UNKNOWN_CLASS  # the writer's class at the intent

    def to_doc(self) -> list:
        return [self.first, self.end, self.intent_ts_us, None if self.txn is None else list(self.txn),
                self.cls.to_doc()]

    @classmethod
    def from_doc(cls, d: list) -> "PendingRange":
        return cls(d[0], d[1], d[2], None if d[3] is None else TxnKey(*d[3]), WriteClass.from_doc(d[4]))


@dataclass
class WriterCursor:
    instance: str
    writer_id: int
    inc: int
    next_n: int = 0
    started: bool = False  # an entry was accepted: numbering is tracked from there
    joined: bool = False  # its state is known from its start, or from a checkpoint after joining late
    watched: bool | None = None  # None: not known yet whether it writes a watched topic
    stopped: bool = False
    superseded: bool = False  # a later incarnation of the instance has started
    settings: WriterSettings | None = None
    cls: WriteClass = UNKNOWN_CLASS
    pending: dict[tuple[str, int], list[PendingRange]] = field(default_factory=dict)  # (topic_id, p) -> ranges
    open_txns: set[TxnKey] = field(default_factory=set)
    last_ack_ts_us: int = 0

    def take(self, tid: str, p: int, first: int, end: int) -> list[PendingRange]:
        """Remove seqs [first, end) from the pending ranges; returns the pieces that were pending."""
        kept, taken = [], []
        for r in self.pending.get((tid, p), []):
            lo, hi = max(r.first, first), min(r.end, end)
            if lo >= hi:
                kept.append(r)
                continue
            taken.append(PendingRange(lo, hi, r.intent_ts_us, r.txn, r.cls))
            if r.first < lo:
                kept.append(PendingRange(r.first, lo, r.intent_ts_us, r.txn, r.cls))
            if hi < r.end:
                kept.append(PendingRange(hi, r.end, r.intent_ts_us, r.txn, r.cls))
        if kept:
            self.pending[(tid, p)] = kept
        else:
            self.pending.pop((tid, p), None)
        return taken

    def to_doc(self) -> dict[str, Any]:
        return {"instance": self.instance, "writer_id": self.writer_id, "inc": self.inc, "next_n": self.next_n,
                "started": self.started, "joined": self.joined, "watched": self.watched, "stopped": self.stopped,
                "superseded": self.superseded,
                "settings": None if self.settings is None else _settings_doc(self.settings),
                "cls": self.cls.to_doc(),
                "pending": [[tid, p, [r.to_doc() for r in rs]] for (tid, p), rs in self.pending.items()],
                "open_txns": sorted(list(t) for t in self.open_txns), "last_ack_ts_us": self.last_ack_ts_us}

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> "WriterCursor":
        return cls(d["instance"], d["writer_id"], d["inc"], d["next_n"], d["started"], d["joined"], d["watched"],
                   d["stopped"],
                   d["superseded"], None if d["settings"] is None else WriterSettings(*d["settings"]),
                   WriteClass.from_doc(d["cls"]),
                   {(tid, p): [PendingRange.from_doc(r) for r in rs] for tid, p, rs in d["pending"]},
                   {TxnKey(*t) for t in d["open_txns"]}, d["last_ack_ts_us"])


def _settings_doc(s: WriterSettings) -> list:
    return [s.name, s.role, s.acks, s.idempotence, s.transactional, s.message_timeout_ms]


class LedgerFold:
    """``watched``: the canary topic names this fold accounts for (None: every topic)."""

    def __init__(self, watched: Iterable[str] | None = None) -> None:
        self.watched = None if watched is None else frozenset(watched)
        self.watched_ids: set[str] = set()
        self.writers: dict[tuple[str, int], WriterCursor] = {}

    def watch_topic_id(self, topic_id: str) -> None:
        """A topic ID known (e.g. from metadata) to be one of the watched topics."""
        self.watched_ids.add(topic_id)

    def apply_all(self, entries: Iterable[LedgerEntry]) -> list[LedgerEvent]:
        return [ev for e in entries for ev in self.apply(e)]

    def _accepts(self, w: WriterCursor, e: LedgerEntry) -> bool:
        body = e.body
        if isinstance(body, (Start, Checkpoint)):
            watched = self.watched is None or body.topic in self.watched
            if watched:
                self.watched_ids.add(body.topic_id)
            w.watched = watched
        elif w.watched is None:
            tid = getattr(body, "topic_id", None)
            if self.watched is None or (tid is not None and tid in self.watched_ids):
                w.watched = True
        return bool(w.watched)

    def apply(self, e: LedgerEntry) -> list[LedgerEvent]:
        key = (e.writer.instance, e.writer.inc)
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = WriterCursor(e.writer.instance, e.writer.writer_id, e.writer.inc)
        if w.superseded or (w.started and e.n < w.next_n) or not self._accepts(w, e):
            return []  # a re-read, a predecessor writing after its successor started, another topic's writer
        events: list[LedgerEvent] = []
        if not w.started:
            w.started, w.next_n = True, e.n  # the first entry seen starts the accounting
            w.joined = isinstance(e.body, Start)
        if not w.joined and isinstance(e.body, Checkpoint):
            w.joined = True
            events.extend(self._join(w, e.body))
        if e.n > w.next_n:
            events.append(EntriesMissing(w.instance, w.inc, w.next_n, e.n - w.next_n))
        w.next_n = e.n + 1
        body = e.body
        if isinstance(body, (Start, Checkpoint)):
            events.append(self._classify(w, body))
        if isinstance(body, Start):
            for (inst, inc), other in self.writers.items():
                if inst == w.instance and inc < w.inc and not other.superseded:
                    events.extend(self._close(other))
                    other.superseded = True
        elif isinstance(body, Intent):
            events.extend(self._intent(w, body, e.ts_us))
        elif isinstance(body, Outcomes):
            events.extend(self._outcomes(w, body))
        elif isinstance(body, TxnEnd):
            tkey = TxnKey(w.writer_id, w.inc, body.id)
            w.open_txns.discard(tkey)
            events.append(TxnDecided(tkey, body.outcome, w.cls))
        elif isinstance(body, Stop):
            events.extend(self._close(w))
            w.stopped = True
        return events

    @staticmethod
    def _classify(w: WriterCursor, body: Start | Checkpoint) -> WriterClassified:
        w.settings = body.settings
        w.cls = classify(body.settings, body.topic_settings)
        return WriterClassified(w.writer_id, w.inc, body.topic_id, w.cls, body.settings, body.topic_settings)

    @staticmethod
    def _join(w: WriterCursor, body: Checkpoint) -> list[LedgerEvent]:
        """A writer that joined late, at its first checkpoint: what it has in flight (writes whose
        intent this reader did not see) and its open transaction."""
        w.cls = classify(body.settings, body.topic_settings)
        events: list[LedgerEvent] = []
        for pw in body.pending:
            tkey = TxnKey(w.writer_id, w.inc, pw.txn_id) if pw.txn_id else None
            known = w.pending.setdefault((body.topic_id, pw.partition), [])
            for lo, hi in _uncovered(pw.first_seq, pw.first_seq + pw.count, list(known)):
                known.append(PendingRange(lo, hi, pw.intent_ts_us, tkey, w.cls))
        for t in body.open_txns:
            tkey = TxnKey(w.writer_id, w.inc, t.id)
            w.open_txns.add(tkey)
            events.extend(TxnWriteIntended(WriteKey(body.topic_id, r.partition, w.writer_id, w.inc, s), tkey, w.cls)
                          for r in t.writes for s in range(r.first_seq, r.first_seq + r.count))
        return events

    @staticmethod
    def _intent(w: WriterCursor, body: Intent, ts_us: int) -> list[LedgerEvent]:
        tkey = TxnKey(w.writer_id, w.inc, body.txn.id) if body.txn else None
        if tkey:
            w.open_txns.add(tkey)
        events: list[LedgerEvent] = []
        for r in body.writes:
            w.pending.setdefault((body.topic_id, r.partition), []).append(
                PendingRange(r.first_seq, r.first_seq + r.count, ts_us, tkey, w.cls))
            if tkey:
                events.extend(TxnWriteIntended(WriteKey(body.topic_id, r.partition, w.writer_id, w.inc, s), tkey,
                                               w.cls) for s in range(r.first_seq, r.first_seq + r.count))
        return events

    @staticmethod
    def _outcomes(w: WriterCursor, body: Outcomes) -> list[LedgerEvent]:
        tid = body.topic_id
        events: list[LedgerEvent] = []
        for run in body.runs:
            if run.outcome is WriteOutcome.PENDING:
                continue
            p, first, end = run.partition, run.first_seq, run.first_seq + run.count
            pieces = w.take(tid, p, first, end)
            covered = sum(piece.end - piece.first for piece in pieces)
            if covered < run.count:  # outcomes of writes whose intent was not seen (read from the middle)
                txn = TxnKey(w.writer_id, w.inc, run.txn_id) if run.txn_id else None
                pieces += [PendingRange(lo, hi, 0, txn, w.cls) for lo, hi in _uncovered(first, end, pieces)]
            acked = run.outcome is WriteOutcome.ACKED
            if acked:
                w.last_ack_ts_us = max(w.last_ack_ts_us, run.done_ts_us)
            for piece in sorted(pieces, key=lambda r: r.first):
                if piece.txn is None:
                    if acked:
                        events.append(AckedRun(tid, p, w.writer_id, w.inc, piece.first, piece.end - piece.first,
                                               run.first_offset + piece.first - first, run.done_ts_us, piece.cls))
                    elif run.outcome is WriteOutcome.UNCONFIRMED:
                        events.append(UnconfirmedRun(tid, p, w.writer_id, w.inc, piece.first,
                                                     piece.end - piece.first))
                    continue
                for s in range(piece.first, piece.end):
                    wkey = WriteKey(tid, p, w.writer_id, w.inc, s)
                    events.append(TxnWriteAcked(wkey, run.first_offset + s - first, piece.txn, run.done_ts_us,
                                                piece.cls) if acked else TxnWriteDecided(wkey, piece.txn, piece.cls))
        return events

    @staticmethod
    def _close(w: WriterCursor) -> list[LedgerEvent]:
        events: list[LedgerEvent] = [
            TxnWriteDecided(WriteKey(tid, p, w.writer_id, w.inc, s), r.txn, r.cls)
            for (tid, p), rs in w.pending.items() for r in rs if r.txn for s in range(r.first, r.end)]
        events.extend(TxnDecided(tkey, TxnOutcome.INDETERMINATE, w.cls) for tkey in sorted(w.open_txns))
        w.pending.clear()
        w.open_txns.clear()
        return events

    def oldest_pending_us(self) -> dict[tuple[str, int], int]:
        """Per running writer, the intent time of its oldest write still waiting for an outcome."""
        return {k: min(r.intent_ts_us for rs in w.pending.values() for r in rs)
                for k, w in self.writers.items() if w.pending and not w.stopped}

    def to_doc(self) -> dict[str, Any]:
        return {"watched": None if self.watched is None else sorted(self.watched),
                "watched_ids": sorted(self.watched_ids), "writers": [w.to_doc() for w in self.writers.values()]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "LedgerFold":
        fold = cls(doc["watched"])
        fold.watched_ids = set(doc["watched_ids"])
        for d in doc["writers"]:
            w = WriterCursor.from_doc(d)
            fold.writers[(w.instance, w.inc)] = w
        return fold


def _uncovered(first: int, end: int, pieces: list[PendingRange]) -> list[tuple[int, int]]:
    out, at = [], first
    for r in sorted(pieces, key=lambda r: r.first):
        if r.first > at:
            out.append((at, r.first))
        at = max(at, r.end)
    if at < end:
        out.append((at, end))
    return out
