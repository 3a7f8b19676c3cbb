"""The incremental checker: state and new observations in, new state and violations out.

It keeps what every family judges against — the ledger fold and, per reader, topic ID and
partition, the :class:`~invariants.read_index.PartitionView` — and dispatches observations to
the families, each of which holds its own spec, state and verdicts: acked writes
(:mod:`invariants.acked_writes`), sequence (:mod:`invariants.sequence`), offsets
(:mod:`invariants.offsets`), transactions (:mod:`invariants.transactions`) and accounting
(:mod:`invariants.accounting`). Observations arrive in any interleaving of ledger entries and
read batches; :meth:`Checker.settle` judges whatever became decidable. Every verdict is
*stable* (reading further cannot change it), so splitting a history into different
micro-batches, or saving the checker between batches and going on from the copy, gives the
same violations as one pass over the whole history — the property the tests hammer, and what
lets the live result equal the audit's.

State is bounded: per view, offsets more than ``horizon_offsets`` behind the frontier are
forgotten; transactions are dropped once judged and read past; the ledger fold keeps only
writes still waiting for an outcome. Everything is keyed by topic ID, so a recreated topic
starts a new history. :meth:`Checker.to_doc` / :meth:`Checker.from_doc` give the explicit,
versioned form the watch saves after every batch.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from invariants import offsets
from invariants.accounting import (
    AckedRun, EntriesMissing, LedgerEvent, LedgerFold, TxnDecided, TxnWriteAcked, TxnWriteDecided, TxnWriteIntended,
)
from invariants.acked_writes import AckedWritesFamily
from invariants.catalog import Invariant, Isolation
from invariants.ledger_format import LedgerEntry
from invariants.model import (
    NONE, RC, RU, Read, Settings, TxnKey, ViewKey, Violation, ViolationSink, WriteKey, is_canary,
)
from invariants.read_index import PartitionView
from invariants.sequence import SequenceFamily
from invariants.transactions import TransactionsFamily

DOC_VERSION = 2


class Checker:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.sink = ViolationSink()
        self.fold = LedgerFold()
        self.views: dict[ViewKey, PartitionView] = {}
        self.acked = AckedWritesFamily(self.settings.settle_offsets)
        self.sequence = SequenceFamily()
        self.txns = TransactionsFamily(self.settings.horizon_offsets)
        self.log_start: dict[tuple[str, int], int] = {}
        self.records_checked: dict[Isolation, int] = {RC: 0, RU: 0}
        self._dirty: set[ViewKey] = set()

    # -- what other code reads -------------------------------------------------------------

    @property
    def counts(self) -> dict[tuple[Invariant, Isolation], int]:
        return self.sink.counts

    @property
    def expired_unread(self) -> int:
        return self.acked.expired_unread

    @property
    def aborted_allowed(self) -> int:
        return self.txns.aborted_allowed

    def frontiers(self) -> dict[ViewKey, int]:
        return {k: v.frontier for k, v in self.views.items()}

    def unseen(self, now_us: int, deadline_s: float) -> dict[Isolation, int]:
        """Expected writes acked more than ``deadline_s`` ago that each reader has not reached."""
        return {RC: 0, RU: 0, **self.acked.unseen(now_us - int(deadline_s * 1e6))}

    # -- observations ----------------------------------------------------------------------

    def view(self, iso: Isolation, topic_id: str, partition: int) -> PartitionView:
        key = ViewKey(iso, topic_id, partition)
        v = self.views.get(key)
        if v is None:
            v = self.views[key] = PartitionView()
        return v

    def apply_ledger(self, entries: Iterable[LedgerEntry]) -> None:
        for entry in entries:
            for ev in self.fold.apply(entry):
                self._ledger_event(ev)

    def set_log_start(self, topic_id: str, partition: int, offset: int) -> None:
        key = (topic_id, partition)
        self.log_start[key] = max(offset, self.log_start.get(key, 0))

    def apply_reads(self, iso: Isolation, topic_id: str, partition: int, reads: Sequence[Read]) -> None:
        """One reader's records of one partition, in offset order."""
        key = ViewKey(iso, topic_id, partition)
        v = self.view(iso, topic_id, partition)
        other = self.views.get(ViewKey(RU if iso is RC else RC, topic_id, partition))
        report = self.sink.extend
        self._dirty.add(key)
        for r in reads:
            off, ident = r.offset, r.ident
            if off < v.frontier:
                continue  # a re-read of an offset already judged
            prev, new_offset = v.record(off, ident)
            report(offsets.cross_reader(key, off, ident, other))
            if not is_canary(ident):
                continue
            self.records_checked[iso] += 1
            report(self.sequence.on_read(key, off, ident, prev, new_offset))
            wkey = WriteKey(topic_id, partition, *ident)
            report(self.acked.on_read(key, off, wkey))
            if r.txn_id:
                report(self.txns.on_read(iso, TxnKey(wkey.writer_id, wkey.inc, r.txn_id), wkey, off))

    def settle(self) -> list[Violation]:
        """Judge everything that became decidable; returns the new violations."""
        for key in sorted(self._dirty, key=lambda k: (k.iso.value, k.topic_id, k.partition)):
            v = self.views[key]
            self.sink.extend(self.acked.settle_view(key, v, self.log_start.get((key.topic_id, key.partition), 0)))
            v.forget(self.settings.horizon_offsets)
        self._dirty.clear()
        self.sink.extend(self.txns.judge(self.view))
        return self.sink.take()

    # -- ledger events ---------------------------------------------------------------------

    def _expect(self, iso: Isolation, wkey: WriteKey, off: int, done_ts_us: int) -> None:
        key = ViewKey(iso, wkey.topic_id, wkey.partition)
        self.view(*key)
        self.acked.expect(key, off, 1, wkey.writer_id, wkey.inc, wkey.seq, done_ts_us)
        self._dirty.add(key)

    def _ledger_event(self, ev: LedgerEvent) -> None:
        if isinstance(ev, AckedRun):
            for iso in (RU, RC):
                key = ViewKey(iso, ev.topic_id, ev.partition)
                self.view(*key)
                self.acked.expect(key, ev.first_offset, ev.count, ev.writer_id, ev.inc, ev.first_seq, ev.done_ts_us)
                self._dirty.add(key)
        elif isinstance(ev, TxnWriteAcked):
            self._expect(RU, ev.write, ev.offset, ev.done_ts_us)
            if self.txns.on_acked(ev):
                self._expect(RC, ev.write, ev.offset, ev.done_ts_us)
        elif isinstance(ev, TxnWriteIntended):
            self.txns.on_intended(ev.write, ev.txn)
        elif isinstance(ev, TxnWriteDecided):
            self.txns.on_write_decided(ev.write, ev.txn)
        elif isinstance(ev, TxnDecided):
            expect, found = self.txns.on_decided(ev)
            for wkey, off in expect:
                self._expect(RC, wkey, off, 0)
            self.sink.extend(found)
        elif isinstance(ev, EntriesMissing):
            for n in range(ev.first_n, ev.first_n + ev.count):  # one violation (and evidence line) per lost entry
                self.sink.add(Violation(Invariant.OUTCOME_GAP, NONE, detail=f"{ev.instance} incarnation {ev.inc}: "
                                        f"ledger entry n={n} missing ({ev.count} from n={ev.first_n})"))

    # -- durable form ----------------------------------------------------------------------

    def to_doc(self) -> dict[str, Any]:
        return {
            "version": DOC_VERSION,
            "counts": [[inv.value, iso.value, n] for (inv, iso), n in self.sink.counts.items()],
            "records_checked": {iso.value: n for iso, n in self.records_checked.items()},
            "log_start": [[tid, p, off] for (tid, p), off in self.log_start.items()],
            "views": [[key.to_doc(), v.to_doc()] for key, v in self.views.items()],
            "dirty": [key.to_doc() for key in self._dirty],
            "fold": self.fold.to_doc(),
            "acked": self.acked.to_doc(),
            "sequence": self.sequence.to_doc(),
            "txns": self.txns.to_doc(),
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any], settings: Settings) -> "Checker":
        if doc.get("version") != DOC_VERSION:
            raise ValueError(f"checker state version {doc.get('version')!r}, this code reads {DOC_VERSION}")
        ck = cls(settings)
        for inv, iso, n in doc["counts"]:
            ck.sink.counts[(Invariant(inv), Isolation(iso))] = n
        ck.records_checked = {Isolation(k): n for k, n in doc["records_checked"].items()}
        ck.log_start = {(tid, p): off for tid, p, off in doc["log_start"]}
        ck.views = {ViewKey.from_doc(k): PartitionView.from_doc(v) for k, v in doc["views"]}
        ck._dirty = {ViewKey.from_doc(k) for k in doc["dirty"]}
        ck.fold = LedgerFold.from_doc(doc["fold"])
        ck.acked = AckedWritesFamily.from_doc(doc["acked"], settings.settle_offsets)
        ck.sequence = SequenceFamily.from_doc(doc["sequence"])
        ck.txns = TransactionsFamily.from_doc(doc["txns"], settings.horizon_offsets)
        return ck
