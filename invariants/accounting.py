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

**Topics.** ``start`` and ``checkpoint`` entries say which topic ID a writer writes under which
name (:class:`TopicObserved`, with the log start offsets a checkpoint observed); a ``start`` that
``replaces`` an ID says that ID vanished or was recreated (:class:`TopicReplaced`); a ``retire``
entry retires an ID on purpose (:class:`TopicRetired`). Per writer, incarnation and partition the
fold keeps which seqs were intended for which topic ID (:meth:`LedgerFold.topic_of`): seqs only
grow, so each topic ID a writer wrote to is a range of its seqs, and a record read under a topic
name can be told apart by its content.

**Time.** Durations are taken from each entry's :attr:`~invariants.ledger_format.LedgerEntry.time_us`
(the broker's append time on a ``LogAppendTime`` ledger topic), never from the writer's clock
against the monitor's: an intent is pending since its entry was appended, an acknowledgement
counts from the append of the entry reporting it, and a writer that announced ``init`` is
initialising since then (until its next intent).

Once the next incarnation of an instance has started, entries its predecessor still writes
are ignored: the predecessor's undecided writes and transactions were declared
``indeterminate`` at that point, and verdicts do not change afterwards (the instance lock
keeps a predecessor from running on; the audit's ledger reading applies the same rule).

:class:`LedgerFold` turns entries, in ledger order, into the typed events of
:mod:`invariants.ledger_events` for the
checker and the prober. Every write event carries the :class:`~invariants.promises.WriteClass`
of its writer as of its intent. The fold's state is bounded by what is still open: pending
writes (intent without outcome) and the per-writer numbering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import bisect

from invariants.ledger_format import (
    Checkpoint, Init, Intent, LedgerEntry, Outcomes, Retire, Start, Stop, TxnEnd, TxnOutcome,
    WriteOutcome, WriterSettings,
)
from invariants.ledger_events import (  # noqa: F401 - the events are part of the fold's contract
    AckedRun, UnconfirmedRun, TxnWritesIntended, TxnWritesAcked, TxnWriteDecided, TxnDecided, EntriesMissing,
    WriterClassified, TopicObserved, TopicReplaced, TopicRetired, LedgerEvent,
)
from invariants.model import TxnKey, WriteKey
from invariants.promises import UNKNOWN_CLASS, WriteClass, classify


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
    init_since_us: int = 0  # announced ``init`` and no intent since (0: not initialising)

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
                # (beside the list, which an older Vigil reads positionally)
                **({"outcome_within_ms": self.settings.outcome_within_ms}
                   if self.settings is not None and self.settings.outcome_within_ms else {}),
                "cls": self.cls.to_doc(),
                "pending": [[tid, p, [r.to_doc() for r in rs]] for (tid, p), rs in self.pending.items()],
                "open_txns": sorted(list(t) for t in self.open_txns), "last_ack_ts_us": self.last_ack_ts_us,
                "init_since_us": self.init_since_us}

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> "WriterCursor":
        return cls(d["instance"], d["writer_id"], d["inc"], d["next_n"], d["started"], d["joined"], d["watched"],
                   d["stopped"],
                   d["superseded"], None if d["settings"] is None else WriterSettings(
                       *d["settings"], outcome_within_ms=int(d.get("outcome_within_ms", 0))),
                   WriteClass.from_doc(d["cls"]),
                   {(tid, p): [PendingRange.from_doc(r) for r in rs] for tid, p, rs in d["pending"]},
                   {TxnKey(*t) for t in d["open_txns"]}, d["last_ack_ts_us"], d["init_since_us"])


def _settings_doc(s: WriterSettings) -> list:
    return [s.name, s.role, s.acks, s.idempotence, s.transactional, s.message_timeout_ms]


class LedgerFold:
    """``watched``: the canary topic names this fold accounts for (None: every topic)."""

    def __init__(self, watched: Iterable[str] | None = None) -> None:
        self.watched = None if watched is None else frozenset(watched)
        self.watched_ids: set[str] = set()
        self.writers: dict[tuple[str, int], WriterCursor] = {}
        # (writer id, incarnation, partition) -> [[first seq, topic id], ...] in seq order
        self.generations: dict[tuple[int, int, int], list[list]] = {}
        # (writer id, incarnation, partition) -> 1 + the highest seq it said it intended (an intent, a
        # checkpoint's pending or open transaction, an outcome); what lies above was not folded yet
        self.intended_to: dict[tuple[int, int, int], int] = {}
        self.clock_us = 0  # the latest time_us of an entry read: how far the ledger has been read

    def _intended(self, w: WriterCursor, p: int, end_seq: int) -> None:
        """This writer said it intended seqs of partition ``p`` below ``end_seq``."""
        key = (w.writer_id, w.inc, p)
        self.intended_to[key] = max(self.intended_to.get(key, 0), end_seq)

    def _generation(self, w: WriterCursor, tid: str, p: int, first_seq: int, end_seq: int) -> None:
        self._intended(w, p, end_seq)
        gens = self.generations.setdefault((w.writer_id, w.inc, p), [])
        if not gens or (gens[-1][1] != tid and first_seq > gens[-1][0]):
            gens.append([first_seq, tid])
        elif first_seq < gens[0][0] and gens[0][1] == tid:
            gens[0][0] = first_seq  # an earlier write of the first topic seen (a checkpoint's pending)

    def topic_of(self, writer_id: int, inc: int, partition: int, seq: int) -> str | None:
        """The topic ID seq ``seq`` of this writer and partition was intended for (None: unknown)."""
        gens = self.generations.get((writer_id, inc, partition))
        if not gens or seq < gens[0][0]:
            return None
        return gens[bisect.bisect_right([g[0] for g in gens], seq) - 1][1]

    def beyond_intents(self, writer_id: int, inc: int, partition: int, seq: int) -> bool:
        """True when seq ``seq`` of this writer and partition is above every seq the ledger folded
        so far says it intended (its topic ID then only presumed, by :meth:`topic_of`: the
        writer's last one); False when nothing is known of its intents."""
        top = self.intended_to.get((writer_id, inc, partition))
        return top is not None and seq >= top

    def outcome_open(self, writer_id: int, inc: int, topic_id: str, partition: int, seq: int) -> bool:
        """True while the ledger folded so far gives the write of seq ``seq`` (this writer,
        incarnation, topic ID and partition) no outcome yet: its intent not folded yet (an intent is
        durable before the send, so a record read has one in the ledger), or pending. False once it
        has one, and where none can come (an incarnation that stopped or was superseded: its
        undecided writes are indeterminate; one this fold does not know, unless it knows an earlier
        incarnation of the writer: then the new one's ``start``, which comes before its writes, is
        still on its way)."""
        if self.intent_unread(writer_id, inc, partition, seq):
            return True
        w = self._incarnation(writer_id, inc)
        if w is None or w.stopped or w.superseded or not w.watched:
            return False
        return any(r.first <= seq < r.end for r in w.pending.get((topic_id, partition), ()))

    def intent_unread(self, writer_id: int, inc: int, partition: int, seq: int) -> bool:
        """True while the write of seq ``seq`` may still have an intent to come in the ledger: the
        incarnation is watched and writing, and no intent of it folded so far reaches ``seq`` on
        ``partition`` (or the incarnation is not known yet, but an earlier one of the writer is:
        its ``start`` is on its way)."""
        w = self._incarnation(writer_id, inc)
        if w is None:
            return any(c.writer_id == writer_id and c.inc < inc and c.watched for c in self.writers.values())
        if w.stopped or w.superseded or not w.watched:
            return False
        return seq >= self.intended_to.get((writer_id, inc, partition), 0)

    def outcome_within_ms(self, writer_id: int, inc: int) -> int:
        """How long after its intent a record of this incarnation may get its outcome in the ledger:
        the bound its ``start`` recorded (a transactional writer's: its transaction's end), at least
        its message timeout (0: not known)."""
        w = self._incarnation(writer_id, inc)
        return 0 if w is None or w.settings is None else max(w.settings.message_timeout_ms,
                                                              w.settings.outcome_within_ms)

    def _incarnation(self, writer_id: int, inc: int) -> Any:
        return next((c for c in self.writers.values() if c.writer_id == writer_id and c.inc == inc), None)

    def writing(self) -> bool:
        """Whether some watched writer may still append to the ledger (started, neither stopped nor
        superseded)."""
        return any(w.watched and w.started and not w.stopped and not w.superseded for w in self.writers.values())

    def watch_topic_id(self, topic_id: str) -> None:
        """A topic ID known (e.g. from metadata) to be one of the watched topics."""
        self.watched_ids.add(topic_id)

    def apply_all(self, entries: Iterable[LedgerEntry]) -> list[LedgerEvent]:
        return [ev for e in entries for ev in self.apply(e)]

    def _accepts(self, w: WriterCursor, e: LedgerEntry) -> bool:
        body = e.body
        if isinstance(body, (Start, Checkpoint, Retire)):
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
        self.clock_us = max(self.clock_us, e.time_us)
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
            events.extend(self._join(w, e.body, e.time_us - e.ts_us))
        if e.n > w.next_n:
            events.append(EntriesMissing(w.instance, w.inc, w.next_n, e.n - w.next_n))
        w.next_n = e.n + 1
        body = e.body
        if isinstance(body, (Start, Checkpoint)):
            events.append(self._classify(w, body))
            events.append(TopicObserved(body.topic, body.topic_id, body.partitions,
                                        body.log_starts if isinstance(body, Checkpoint) else ()))
        if isinstance(body, Start):
            if body.replaces:
                events.append(TopicReplaced(body.topic, body.replaces, body.topic_id))
            for (inst, inc), other in self.writers.items():
                if inst == w.instance and inc < w.inc and not other.superseded:
                    events.extend(self._close(other))
                    other.superseded = True
        elif isinstance(body, Retire):
            events.append(TopicRetired(body.topic, body.topic_id))
        elif isinstance(body, Init):
            w.init_since_us = w.init_since_us or e.time_us
        elif isinstance(body, Intent):
            w.init_since_us = 0
            events.extend(self._intent(w, body, e.time_us))
        elif isinstance(body, Outcomes):
            events.extend(self._outcomes(w, body, e.time_us))
        elif isinstance(body, TxnEnd):
            tkey = TxnKey(w.writer_id, w.inc, body.id)
            w.open_txns.discard(tkey)
            events.append(TxnDecided(tkey, body.outcome, w.cls))
        elif isinstance(body, Stop):
            events.extend(self._close(w))
            w.stopped = True
            w.init_since_us = 0
        return events

    @staticmethod
    def _classify(w: WriterCursor, body: Start | Checkpoint) -> WriterClassified:
        w.settings = body.settings
        w.cls = classify(body.settings, body.topic_settings)
        return WriterClassified(w.writer_id, w.inc, body.topic_id, w.cls, body.settings, body.topic_settings)

    def _join(self, w: WriterCursor, body: Checkpoint, clock_offset_us: int) -> list[LedgerEvent]:
        """A writer that joined late, at its first checkpoint: what it has in flight (writes whose
        intent this reader did not see) and its open transaction. ``clock_offset_us`` turns the
        writer's clock into the broker's (the checkpoint's append time minus its own time)."""
        w.cls = classify(body.settings, body.topic_settings)
        events: list[LedgerEvent] = []
        for pw in body.pending:
            tkey = TxnKey(w.writer_id, w.inc, pw.txn_id) if pw.txn_id else None
            known = w.pending.setdefault((body.topic_id, pw.partition), [])
            self._generation(w, body.topic_id, pw.partition, pw.first_seq, pw.first_seq + pw.count)
            for lo, hi in _uncovered(pw.first_seq, pw.first_seq + pw.count, list(known)):
                known.append(PendingRange(lo, hi, pw.intent_ts_us + clock_offset_us, tkey, w.cls))
        for t in body.open_txns:
            tkey = TxnKey(w.writer_id, w.inc, t.id)
            w.open_txns.add(tkey)
            for r in t.writes:
                self._intended(w, r.partition, r.first_seq + r.count)
            events.extend(TxnWritesIntended(body.topic_id, r.partition, w.writer_id, w.inc, r.first_seq, r.count, tkey,
                                            w.cls) for r in t.writes)
        return events

    def _intent(self, w: WriterCursor, body: Intent, ts_us: int) -> list[LedgerEvent]:
        tkey = TxnKey(w.writer_id, w.inc, body.txn.id) if body.txn else None
        if tkey:
            w.open_txns.add(tkey)
        events: list[LedgerEvent] = []
        for r in body.writes:
            self._generation(w, body.topic_id, r.partition, r.first_seq, r.first_seq + r.count)
            w.pending.setdefault((body.topic_id, r.partition), []).append(
                PendingRange(r.first_seq, r.first_seq + r.count, ts_us, tkey, w.cls))
            if tkey:
                events.append(TxnWritesIntended(body.topic_id, r.partition, w.writer_id, w.inc, r.first_seq, r.count,
                                                tkey, w.cls))
        return events

    def _outcomes(self, w: WriterCursor, body: Outcomes, ts_us: int) -> list[LedgerEvent]:
        tid = body.topic_id
        events: list[LedgerEvent] = []
        for run in body.runs:
            if run.outcome is WriteOutcome.PENDING:
                continue
            p, first, end = run.partition, run.first_seq, run.first_seq + run.count
            pieces = w.take(tid, p, first, end)
            covered = sum(piece.end - piece.first for piece in pieces)
            if covered < run.count:  # outcomes of writes whose intent was not seen (read from the middle)
                self._generation(w, tid, p, first, end)
                txn = TxnKey(w.writer_id, w.inc, run.txn_id) if run.txn_id else None
                pieces += [PendingRange(lo, hi, 0, txn, w.cls) for lo, hi in _uncovered(first, end, pieces)]
            acked = run.outcome is WriteOutcome.ACKED
            if acked:
                w.last_ack_ts_us = max(w.last_ack_ts_us, ts_us)
            for piece in sorted(pieces, key=lambda r: r.first):
                if piece.txn is None:
                    if acked:
                        events.append(AckedRun(tid, p, w.writer_id, w.inc, piece.first, piece.end - piece.first,
                                               run.first_offset + piece.first - first, ts_us, piece.cls,
                                               run.log_start_after, run.done_ts_us))
                    elif run.outcome is WriteOutcome.UNCONFIRMED:
                        events.append(UnconfirmedRun(tid, p, w.writer_id, w.inc, piece.first,
                                                     piece.end - piece.first))
                    continue
                if acked:
                    events.append(TxnWritesAcked(tid, p, w.writer_id, w.inc, piece.first, piece.end - piece.first,
                                                 run.first_offset + piece.first - first, piece.txn, ts_us, piece.cls,
                                                 run.done_ts_us))
                    continue
                events.extend(TxnWriteDecided(WriteKey(tid, p, w.writer_id, w.inc, s), piece.txn, piece.cls)
                              for s in range(piece.first, piece.end))
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
        """Per running writer, since when it has waited: the append time of the intent of its oldest
        write still waiting for an outcome, or of its ``init`` if it has not got past that."""
        out = {}
        for k, w in self.writers.items():
            if w.stopped or w.superseded:
                continue
            times = [r.intent_ts_us for rs in w.pending.values() for r in rs]
            if w.init_since_us:
                times.append(w.init_since_us)
            if times:
                out[k] = min(times)
        return out

    def to_doc(self) -> dict[str, Any]:
        return {"watched": None if self.watched is None else sorted(self.watched),
                "watched_ids": sorted(self.watched_ids), "writers": [w.to_doc() for w in self.writers.values()],
                "generations": [[*k, gens] for k, gens in self.generations.items()],
                "intended_to": [[*k, top] for k, top in self.intended_to.items()], "clock_us": self.clock_us}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "LedgerFold":
        fold = cls(doc["watched"])
        fold.watched_ids = set(doc["watched_ids"])
        fold.generations = {(wid, inc, p): gens for wid, inc, p, gens in doc["generations"]}
        # (absent from a document saved before it was kept: nothing known, nothing left out)
        fold.intended_to = {(wid, inc, p): top for wid, inc, p, top in doc.get("intended_to", [])}
        fold.clock_us = doc.get("clock_us", 0)
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
