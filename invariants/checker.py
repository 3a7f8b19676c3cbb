"""The incremental checker: state and new observations in, new state and violations out.

It keeps what every family judges against — the ledger fold and, per reader, topic ID and
partition, the reader's current view of the log (:class:`~invariants.read_index.PartitionView`)
— and dispatches observations to the families, each of which holds its own spec, state and
verdicts: acked writes (:mod:`invariants.acked_writes`), sequence (:mod:`invariants.sequence`),
offsets (:mod:`invariants.offsets`), transactions (:mod:`invariants.transactions`), write cycles
(:mod:`invariants.write_cycles`), unconfirmed writes (:mod:`invariants.unconfirmed`) and accounting
(:mod:`invariants.accounting`).

Observations arrive in any interleaving of ledger entries and reads. Reads at or above a
reader's frontier extend its view; reads below it (Spark resuming lower after a truncation, or a
range the runtime re-fetched because :meth:`Checker.refetch_wanted` asked for it) are compared
with what the view held: a changed record is ``inconsistent_offset``, an acknowledged write that
vanished is ``lost_write``, and verdicts that rested on the old content are made again. Verdicts
that rest on offsets read before their evidence arrived wait for such a fresh read
(:mod:`invariants.confirm`). So any split of a history into micro-batches, any interleaving, and
any restart from the saved document give the same verdicts as the whole history read at once —
the property the tests hammer, and what lets the live result equal the audit's.

Reads arrive under topic *names*; :meth:`Checker.apply_named_reads` attributes them to topic IDs
(:mod:`invariants.attribution`). A topic ID that is gone — replaced (a writer's ``start`` says so,
or the runtime sees another ID under the name), seen gone by the runtime, or retired — has its
tracked writes judged (:mod:`invariants.acked_writes`, topics that vanish), retirements first,
and is read no more. Ends the ledger announces are made at the next :meth:`Checker.settle`;
ends the runtime saw (metadata) wait for the next batch (:meth:`Checker.begin_batch`), which
holds every ledger entry written before they were seen — the topic's last recorded log starts,
or a retirement.

State is bounded: per view, offsets more than ``horizon_offsets`` behind the frontier are
forgotten; transactions are dropped a horizon after they are decided; the ledger fold keeps only
writes still waiting for an outcome. Everything is keyed by topic ID, so a recreated topic
starts a new history. :meth:`Checker.to_doc` / :meth:`Checker.from_doc` give the explicit,
versioned form the watch saves after every batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from invariants.accounting import (
    AckedRun, EntriesMissing, LedgerEvent, LedgerFold, TopicObserved, TopicReplaced, TopicRetired, TxnDecided,
    TxnWritesAcked, TxnWriteDecided, TxnWritesIntended, UnconfirmedRun, WriterClassified,
)
from invariants.acked_writes import AckedWritesFamily
from invariants import checker_doc
from invariants.attribution import TopicAttribution
from invariants.catalog import Invariant, Isolation
from invariants.confirm import Pending, merge, subtract
from invariants.ledger_format import LedgerEntry, TopicSettings, WriterSettings
from invariants.liveness import producer_threshold
from invariants.model import (
    NONE, RC, RU, Durability, Ident, Read, ReadRun, Settings, TxnKey, ViewKey, Violation, ViolationSink, WriteKey,
    is_canary, one_by_one, read_named, read_ranges,
)
from invariants.offset_set import OffsetSet
from invariants.offsets import OffsetsFamily
from invariants.promises import GUARANTEED, Promise, WriteClass, read_record
from invariants.read_index import PartitionView
from invariants.topic_lifecycle import TopicLifecycle
from invariants.sequence import SequenceFamily
from invariants.transactions import TransactionsFamily
from invariants.unconfirmed import UnconfirmedFamily
from invariants.eos import Copy, EosFinding, EosLive
from invariants.reference_confirm import FindingsToConfirm
from invariants.groups import (
    GroupFinding, GroupJudge, acks_in_order, reused_by_rewrite, rewrite_began,
)
from invariants.write_cycles import WriteCyclesFamily



@dataclass(frozen=True)
class Refetch:
    """A range of one partition to read again, in both isolation levels."""

    topic_id: str
    partition: int
    lo: int
    hi: int


# a confirmed group_skip waits for the ledger (Checker._ledger_behind): read this much further (the
# writers' entries follow their acknowledgements within about a second), and at most this much
LEDGER_GRACE_US = 5_000_000
LEDGER_WAIT_MAX_US = 30_000_000


class Checker(TopicLifecycle):
    def __init__(self, settings: Settings | None = None, watched: Iterable[str] | None = None) -> None:
        self.settings = settings or Settings()
        self.sink = ViolationSink()
        self.fold = LedgerFold(watched)
        self.views: dict[ViewKey, PartitionView] = {}
        self.writer_classes: dict[tuple[int, int], WriteClass] = {}
        self.writer_info: dict[str, WriterSettings] = {}  # canary writers by configured name, as last announced
        self.topic_settings: dict[str, TopicSettings] = {}
        self.acked = AckedWritesFamily(self.settings.settle_offsets)
        self.sequence = SequenceFamily(self.class_of)
        self.offsets = OffsetsFamily(self.class_of)
        self.txns = TransactionsFamily(self.settings.horizon_offsets)
        self.unconfirmed = UnconfirmedFamily(self.settings.settle_offsets)
        self.cycles = WriteCyclesFamily()
        self.eos = EosLive(self.settings.horizon_offsets)
        self.eos_source = ""  # the canary topic name the EOS pipeline reads ("": no pipeline watched)
        self.eos_topic_id = ""  # ... and the ID its verdicts are about (another ID: another pipeline)
        self.groups = GroupJudge()
        self.group_source = ""  # the canary topic name the group canary reads ("": no group watched)
        self.group_topic_id = ""  # ... and the ID its verdicts are about
        # group_skip / eos_loss found, counted once read_committed read the offset again (invariants.reference_confirm)
        self.group_skips: FindingsToConfirm[GroupFinding] = FindingsToConfirm(GroupFinding, "group_skip")
        self.eos_losses: FindingsToConfirm[EosFinding] = FindingsToConfirm(EosFinding, "eos_loss")
        self.log_start: dict[tuple[str, int], int] = {}
        self.records_checked: dict[Isolation, int] = {RC: 0, RU: 0}
        self.old_log_reads: dict[Isolation, int] = {}  # reads of a replaced ID's log under its name, not applied
        # records read directly below a reader's first read of a recreated topic (TopicLifecycle._fill_below),
        # and those of them left out (up to the last one not known to be meant for that ID)
        self.filled_reads: dict[Isolation, int] = {}
        self.fill_left_out: dict[Isolation, int] = {}
        self.refused_refetches: dict[tuple[Isolation, str, int], int] = {}  # in a row, per reader and partition
        self.suspects: dict[ViewKey, list[list[int]]] = {}  # ranges to read again (evidence of a rewrite)
        self.max_acked: dict[tuple[int, int, str, int], int] = {}  # (writer, inc, topic, partition) -> offset
        # (topic ID, partition) -> offsets a rewrite reused, by in-order writers' acks (invariants.groups):
        # kept apart from the group judge, which takes them on when it takes on the topic ID
        self.rewrites: dict[tuple[str, int], OffsetSet] = {}
        self.rewriting: set[tuple[int, int, str, int]] = set()  # keys whose last ack went backwards
        self.rewrite_marks: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (tid, p) -> [(ms, offset)] each began
        self._dirty: set[ViewKey] = set()
        self.topics = TopicAttribution()
        self.recorded_log_start: dict[tuple[str, int], int] = {}  # from the writers' checkpoints
        self.current_ids: dict[str, str] = {}  # topic name -> the ID the runtime sees under it now
        self._ending: dict[str, list] = {}  # topic IDs to end -> [why, batches still to wait for]

    # -- what other code reads -------------------------------------------------------------

    @property
    def counts(self) -> dict[tuple[Invariant, Isolation, Durability], int]:
        return self.sink.counts

    def count(self, inv: Invariant, iso: Isolation) -> int:
        """All violations of one invariant in one isolation level, whatever their class."""
        return sum(n for (i, s, _d), n in self.sink.counts.items() if i is inv and s is iso)

    @property
    def expired_unread(self) -> int:
        return self.acked.expired_unread

    @property
    def expired_by_reason(self) -> dict[str, int]:
        return {reason: n for reason, n in self.acked.expired.items() if n}

    @property
    def aborted_allowed(self) -> int:
        return self.txns.aborted_allowed

    def frontiers(self) -> dict[ViewKey, int]:
        return {k: v.frontier for k, v in self.views.items()}

    def unseen(self, now_us: int, deadline_s: float) -> dict[Isolation, int]:
        """Expected writes acked more than ``deadline_s`` ago that each reader has not reached."""
        return {RC: 0, RU: 0, **self.acked.unseen(now_us - int(deadline_s * 1e6))}

    def class_of(self, writer: tuple[int, int]) -> WriteClass | None:
        """The class of a writer the ledger announced (None: not announced, yet)."""
        return self.writer_classes.get(writer)

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
        """The partition's log start offset: nothing below it can be read (again) any more, so
        verdicts waiting for a re-read there are made now."""
        key = (topic_id, partition)
        self.log_start[key] = max(offset, self.log_start.get(key, 0))
        for iso in (RC, RU):
            view_key = ViewKey(iso, topic_id, partition)
            for pending in self._pending():
                pending.below_log_start(view_key, offset)
            if view_key in self.suspects:  # nothing below the log start can be read again either
                self.suspects[view_key] = subtract(self.suspects[view_key], 0, offset)

    def suspect(self, topic_id: str, partition: int, lo: int, hi: int) -> None:
        """Evidence that [lo, hi) may have been rewritten (a high watermark that went backwards):
        both readers read it again before anything resting on it is counted."""
        for iso in (RC, RU):
            v = self.views.get(ViewKey(iso, topic_id, partition))
            if v is not None and v.start is not None and lo < v.frontier:
                ranges = self.suspects.setdefault(ViewKey(iso, topic_id, partition), [])
                ranges.append([max(lo, v.start, v.forgotten_below), min(hi, v.frontier)])
                self.suspects[ViewKey(iso, topic_id, partition)] = [list(r) for r in merge(
                    [(a, b) for a, b in ranges if a < b])]

    def log_went_back(self, topic_id: str, partition: int, new_end: int, old_end: int) -> None:
        """The partition's high watermark went back from ``old_end`` to ``new_end``: the log was cut
        at or below ``new_end``, and how far below nobody can tell (a broker back without its data
        starts again at 0; the new records below ``new_end`` may begin with a marker or an aborted
        transaction, which read_committed never returns): everything the readers remember below
        ``old_end`` is read again, from the lowest offset each remembers."""
        self.suspect(topic_id, partition, 0, old_end)

    def apply_reads(self, iso: Isolation, topic_id: str, partition: int, reads: Sequence[Read | ReadRun],
                    covered: tuple[int, int] | None = None) -> None:
        """One reader's records of one partition, in offset order, single or in runs
        (:class:`~invariants.model.ReadRun`). ``covered``: the range they were read from, when it
        was read whole (a re-fetch); offsets in it with no record held none. Reads of a topic ID
        that is gone are not judged."""
        if topic_id in self.topics.gone:
            return
        key = ViewKey(iso, topic_id, partition)
        v = self.view(iso, topic_id, partition)
        other = self.views.get(ViewKey(RU if iso is RC else RC, topic_id, partition))
        self._dirty.add(key)
        fresh_from = v.frontier
        if covered is not None or any(isinstance(r, ReadRun) and r.offset < fresh_from for r in reads):
            reads = one_by_one(reads)  # what is read again is compared record by record
        again = [r for r in reads if r.offset < fresh_from]
        fresh: list[tuple[int, int]] = []
        if again or covered is not None:
            lo, hi = covered if covered is not None else (again[0].offset, again[-1].offset + 1)
            hi = min(hi, fresh_from)
            if lo < hi:
                self._read_again(key, v, other, [r for r in again if lo <= r.offset < hi], lo, hi)
                fresh.append((lo, hi))
        if covered is None:  # a re-fetch only ever reads again what this reader read; Spark reads on
            for r in reads:
                if isinstance(r, ReadRun):
                    self._read_run(key, v, other, r)
                elif r.offset >= v.frontier:
                    self._read_first(key, v, other, r)
        if v.frontier > fresh_from:
            fresh.append((fresh_from, v.frontier))
        if iso is RC and covered is None and self.eos_source and topic_id == self.current_ids.get(self.eos_source):
            self._eos_pipeline(topic_id).read_source(partition, read_named(reads))
        if iso is RC and covered is None and self.group_source and topic_id == self.current_ids.get(self.group_source):
            self._group(topic_id).read_reference_ranges(partition, read_ranges(reads))
        v.epoch += 1
        for lo, hi in fresh:
            for pending in self._pending():
                pending.read_again(key, lo, hi, v.epoch)
            if key in self.suspects:
                self.suspects[key] = subtract(self.suspects[key], lo, hi)

    # -- the EOS pipeline (invariants.eos) ---------------------------------------------------

    def _eos_pipeline(self, topic_id: str) -> EosLive:
        if topic_id != self.eos_topic_id:
            if self.eos_topic_id:  # a recreated canary topic: its offsets start again
                self.eos = EosLive(self.settings.horizon_offsets)
            self.eos_topic_id = topic_id  # (the first ID known: what was fed before is its)
            for (tid, p), reused in self.rewrites.items():  # learnt from the ledger before
                if tid == topic_id:
                    for first, count in reused.to_runs():
                        self.eos.rewritten(p, first, first + count)
        return self.eos

    def _eos_judge(self) -> None:
        tid = self.eos_topic_id
        starts = {p: off for (t, p), off in self.log_start.items() if t == tid} if tid else {}
        # a loss waits for the ledger as a skip does: the writers' acknowledgements that show its
        # offset reused by a rewrite may reach the checker a batch or more after the records
        for about, f in self.eos_losses.confirmed(self._view_of, self._ledger_behind, self.fold.clock_us):
            # (a loss held on a recreated topic's old ID: that ID's)
            self._eos_violations(self._eos_not_rewritten([f], about), about)
        self._eos_violations(self.eos_losses.hold(self.eos.judge(starts), tid, self._view_of))

    def _eos_not_rewritten(self, losses: list[EosFinding], topic_id: str) -> list[EosFinding]:
        """Those of ``losses`` (about ``topic_id``) the pipeline's log was not rewritten under (a re-read
        or the ledger showed it since they were found)."""
        if topic_id != self.eos_topic_id:
            return losses
        return [f for f in losses if not self.eos.in_span(f.partition, f.offset)]

    def _pending(self) -> tuple[Pending, ...]:
        """Every family's verdicts waiting for a re-read (:mod:`invariants.confirm`)."""
        return (self.acked.candidates, self.sequence.candidates, self.group_skips.pending, self.eos_losses.pending)

    def _view_of(self, key: ViewKey) -> PartitionView:
        return self.view(*key)

    def _eos_current(self) -> bool:
        """Whether a pipeline is watched; its state is the canary topic's current ID's."""
        if not self.eos_source:
            return False
        tid = self.current_ids.get(self.eos_source)
        if tid:
            self._eos_pipeline(tid)
        return True

    def _eos_violations(self, found: list[EosFinding], topic_id: str | None = None) -> None:
        """``topic_id``: the source topic ID the findings are about (None: the pipeline's now)."""
        tid = self.eos_topic_id if topic_id is None else topic_id
        for f in found:
            inv = Invariant.EOS_LOSS if f.invariant == "eos_loss" else Invariant.EOS_DUPLICATE
            detail = ("below the group's committed offset, no copy in the committed output" if f.copies == 0
                      else f"{f.copies} copies in the committed output")
            promise = self._canary_promise(tid)
            writer, seq = (None, None) if f.record is None else (tuple(f.record[:2]), f.record[2])
            self.sink.add(Violation(inv, RC, tid, f.partition, (f.offset,), detail=detail, writer=writer, seq=seq,
                                    durability=promise.durability, reason=promise.reason))

    def _canary_promise(self, topic_id: str) -> Promise:
        """The class of the application canaries' findings: a record read, on the canary topic's
        latest observed settings (:mod:`invariants.promises`)."""
        return read_record(self.topic_settings.get(topic_id))

    def apply_eos_output(self, partition: int, records: Sequence[tuple[int, Copy]],
                         reader_at: int | None = None) -> None:
        """Output records of the EOS pipeline read with read_committed on output ``partition``, as
        (output offset, source position and the source record's identity: :data:`invariants.eos.Copy`);
        ``reader_at``: the reader's position there after them."""
        if self._eos_current():
            self._eos_violations(self.eos.read_output(partition, records, reader_at))

    def eos_committed(self, offsets: dict[int, int], output_ends: dict[int, int],
                      output_trimmed: Iterable[int] = ()) -> None:
        """A sample of the pipeline group's committed offsets, and the output's high watermarks
        taken after it (and its partitions whose log start is past 0)."""
        if self._eos_current():
            self.eos.committed(offsets, output_ends, output_trimmed)

    def eos_tick(self, positions: dict[int, int], sample: tuple | None) -> list[Violation]:
        """Between batches (no new output to read, so no batch comes): where the output reader
        stands and a fresh sample, judged; returns the new violations (all the sink holds: only
        EOS ones are found between batches, but none is lost either way)."""
        if not self._eos_current():
            return []
        for q, at in positions.items():
            self.apply_eos_output(q, [], at)
        if sample is not None:
            self.eos_committed(*sample)
        self._eos_judge()
        return self.sink.take()

    # -- the group canary (invariants.groups) ------------------------------------------------

    def _group(self, topic_id: str) -> GroupJudge:
        if topic_id != self.group_topic_id:
            # a recreated canary topic (seen live, or known from the ledger to a checker started
            # on the new one: a rebuild): its offsets start again (the observation log, ownership
            # and the counters go on)
            if self.group_topic_id or self.fold.watched_ids - {topic_id, ""}:
                self.groups.recreated()
            self.group_topic_id = topic_id
            for (tid, p), reused in self.rewrites.items():  # learnt from the ledger before (a new checker)
                if tid == topic_id:
                    for first, count in reused.to_runs():
                        self.groups.rewritten(p, first, first + count)
                    for since, lo in self.rewrite_marks.get((tid, p), []):
                        self.groups.rewritten(p, lo, lo, since_ms=since)
        return self.groups

    def apply_group_observations(self, observations: Sequence[tuple[int, Mapping]],
                                 reader_at: Mapping[int, int] | None = None) -> None:
        """The group canary's observation log, in order, as (offset, observation); ``reader_at``:
        where the read_committed reader of the canary stands per partition (past control records)."""
        if not self.group_source:
            return
        tid = self.current_ids.get(self.group_source)
        judge = self._group(tid) if tid else self.groups
        for at, obs in observations:
            judge.observe(at, obs)
        for p, at in (reader_at or {}).items():
            judge.read_reference(p, [], reader_at=at)

    def _group_judge(self) -> None:
        if not self.group_source:
            return
        tid = self.group_topic_id
        starts = {p: off for (t, p), off in self.log_start.items() if t == tid} if tid else {}
        for p, lo, hi in self.groups.take_exempted():  # a rewrite's offsets: no skip held there is one
            self.group_skips.drop(tid, p, lo, hi)
        for about, f in self.group_skips.confirmed(self._view_of, self._ledger_behind, self.fold.clock_us,
                                                   self._intent_unread):
            self._group_violations(about, [f])
        self._group_violations(tid, self.group_skips.hold(self.groups.judge(starts), tid, self._view_of))

    def _ledger_behind(self, key: ViewKey, record: Ident, since_us: int) -> bool:
        """Whether a skip confirmed when the ledger had been read to ``since_us`` still waits for
        it (invariants.reference_confirm): the writers' entries reach the checker up to a batch or
        more after their records, and the acknowledgements that show a rewrite reused the offset
        may be another writer's. It waits until the ledger was read :data:`LEDGER_GRACE_US`
        further and the write of the record there has an outcome (a canary record's), at most
        :data:`LEDGER_WAIT_MAX_US` further (an outcome lost from the ledger, a writer gone without
        a ``stop``) — or, for a canary record, longer if the writer's client may take longer to
        report an outcome at all (its message timeout, or the bound its ``start`` recorded — a
        transactional writer's outcomes come when its transaction ends — and a margin: the rule of
        :func:`invariants.liveness.producer_threshold`), and an in-order writer reports the writes
        behind one that timed out later still (found on the local cluster: a wiped node's queued
        writes timed out 30.1 s after their intents, the next write's acknowledgement, going
        backwards, came 30.4 s after its own); without a ledger read, or once every writer
        stopped, nothing more will come."""
        clock = self.fold.clock_us
        longest = LEDGER_WAIT_MAX_US
        if is_canary(record):
            longest = round(producer_threshold(LEDGER_WAIT_MAX_US / 1e6,
                                               self.fold.outcome_within_ms(record[0], record[1])) * 1e6)
        if not since_us or clock >= since_us + longest or not self.fold.writing():
            return False
        return clock < since_us + LEDGER_GRACE_US or (is_canary(record) and self.fold.outcome_open(
            record[0], record[1], key.topic_id, key.partition, record[2]))

    def _intent_unread(self, key: ViewKey, record: Ident) -> bool:
        """Whether the ledger has not reached the write of a record read yet (a catch-up reads a
        rewritten log's new records long before the ledger comes to their time): a skip's wait for
        the ledger (:meth:`_ledger_behind`) starts only once it has, so the acknowledgements that
        show the offsets reused, which follow the intent, are not outwaited. Live the intent is
        folded within about a second of the record. Found on the local cluster: 18-26 false
        ``group_skip`` in catch-ups of a wiped-partition history (tests/unit/invariants/test_group_skip_catch_up.py)."""
        return is_canary(record) and self.fold.writing() and self.fold.intent_unread(
            record[0], record[1], key.partition, record[2])

    def _group_violations(self, tid: str, found: list[GroupFinding]) -> None:
        for f in found:
            # a stall is liveness, about no setting of the topic
            promise = self._canary_promise(tid) if f.invariant != "rebalance_stall" else GUARANTEED
            self.sink.add(Violation(Invariant(f.invariant), RC, tid, f.partition, (f.offset,) if f.offset >= 0 else (),
                                    detail=_group_detail(f), durability=promise.durability, reason=promise.reason))

    def _read_first(self, key: ViewKey, v: PartitionView, other: PartitionView | None, r: Read) -> None:
        off, ident = r.offset, r.ident
        prev, new_offset = v.record(off, ident)
        report = self.sink.extend
        report(self.offsets.observe(key, off, ident, other))
        if not is_canary(ident):
            return
        self.records_checked[key.iso] += 1
        self.sequence.on_read(key, v, off, ident, prev, new_offset)
        self._canary_read(key, v, r)

    def _read_run(self, key: ViewKey, v: PartitionView, other: PartitionView | None, run: ReadRun) -> None:
        """A run of first reads: kept whole when nothing about it needs a record-by-record look
        (:meth:`_plain_run`), which is exactly when each of its records, read alone, would change
        nothing but the view, the writer's highest seq, the records checked and what its
        transaction's family learns of each (told record by record); else read one by one."""
        if run.offset >= v.frontier and self._plain_run(key, v, other, run):
            v.record_run(run.offset, run.count, run.writer_id, run.inc, run.seq)
            self.sequence.on_plain_run(key, (run.writer_id, run.inc), run.seq + run.count - 1, run.last_offset)
            self.records_checked[key.iso] += run.count
            if run.txn_id:  # what its transaction's records tell, as one by one
                tkey = TxnKey(run.writer_id, run.inc, run.txn_id)
                self.sink.extend(self.txns.on_read_run(key.iso, tkey, key.topic_id, key.partition, run))
                if key.iso is RC:
                    self.cycles.on_read_run(tkey, key.topic_id, key.partition, run)
            return
        for r in run.reads():
            if r.offset >= v.frontier:
                self._read_first(key, v, other, r)

    def _plain_run(self, key: ViewKey, v: PartitionView, other: PartitionView | None, run: ReadRun) -> bool:
        """Whether none of the run's records, read one by one, would be a second read of a record
        (its seqs all above the writer's highest read in this view, so no duplicate and no
        reorder), meet another record at its offset (the other reader's view, the offsets already
        inconsistent), or settle a write waiting inside its window, a bogus zero ack or an
        unconfirmed write."""
        writer = (run.writer_id, run.inc)
        top = self.sequence.max_seq.get(key, {}).get(writer)
        if top is not None and run.seq <= top[0]:
            return False
        offsets = range(run.offset, run.offset + run.count)
        inconsistent = self.offsets.records.get((key.topic_id, key.partition))
        if inconsistent and not inconsistent.keys().isdisjoint(offsets):
            return False
        if other is not None and not other.agrees_with_run(run.offset, run.count, run.writer_id, run.inc, run.seq):
            return False
        st = self.acked.views.get(key)
        if st is not None and (st.waiting or st.zero_wait):
            for i in range(run.count):
                wkey = WriteKey(key.topic_id, key.partition, run.writer_id, run.inc, run.seq + i)
                if wkey in st.waiting or wkey in st.zero_wait:
                    return False
        return not self.unconfirmed.waiting.get(key, {}).get(writer)

    def _canary_read(self, key: ViewKey, v: PartitionView, r: Read) -> None:
        wkey = WriteKey(key.topic_id, key.partition, *r.ident)
        self.sink.extend(self.acked.on_read(key, v, r.offset, wkey))
        self.unconfirmed.on_read(key, (wkey.writer_id, wkey.inc), wkey.seq)
        if r.txn_id:
            tkey = TxnKey(wkey.writer_id, wkey.inc, r.txn_id)
            self.sink.extend(self.txns.on_read(key.iso, tkey, wkey, r.offset, r.intended_abort, r.txn_size,
                                               r.txn_index))
            if key.iso is RC:
                self.cycles.on_read(tkey, key.topic_id, key.partition, r.offset, r.intended_abort, r.txn_size,
                                    r.txn_index)

    def _read_again(self, key: ViewKey, v: PartitionView, other: PartitionView | None, reads: list[Read],
                    lo: int, hi: int) -> None:
        """Offsets [lo, hi) read again: bring the view up to date, judge what changed."""
        found = {r.offset: r for r in reads}
        changed: list[tuple[int, Ident | None, Read | None]] = []
        offsets = range(max(lo, v.start or 0, v.forgotten_below), hi)
        for off in ([0] if lo == 0 and v.remembers(0) and 0 not in offsets else []) + list(offsets):
            r = found.get(off)
            old = v.held(off) if r is None else v.replace(off, r.ident)
            if r is None and old is not None:
                v.remove(off)
            if old != (None if r is None else r.ident):
                changed.append((off, old, r))
        report = self.sink.extend
        if changed and key.iso is RC:  # before the new records are read in
            self.cycles.on_rewritten(key.topic_id, key.partition, changed[0][0])
            if self.group_source and key.topic_id == self.group_topic_id:
                self.groups.log_rewritten(key.partition, changed[0][0], consumed_again=False)
            if self.eos_source and key.topic_id == self.current_ids.get(self.eos_source):
                self._eos_pipeline(key.topic_id).log_rewritten(key.partition, changed[0][0])
        for off, old, r in changed:
            new = None if r is None else r.ident
            report(self.offsets.on_change(key, off, old, new, other))
            if old is not None and is_canary(old):
                report(self.acked.on_vanished(key, v, off, old))
                if key.iso is RC:
                    self.txns.on_vanished(WriteKey(key.topic_id, key.partition, *old), off)
            if new is not None:
                if is_canary(new):
                    self.records_checked[key.iso] += 1
                    self._canary_read(key, v, r)
        self.sequence.on_reread(key, v, [(off, r.ident) for off, _o, r in changed
                                          if r is not None and is_canary(r.ident)], lo)
        if changed and hi < v.frontier:  # the rest of what this reader read may have changed too
            self.suspect(key.topic_id, key.partition, changed[0][0], v.frontier)

    def _unsettled(self, topic_id: str, partition: int, offset: int) -> bool:
        """Whether read_committed's memory of an offset waits to be read again."""
        key = ViewKey(RC, topic_id, partition)
        return (any(lo <= offset < hi for lo, hi in self.suspects.get(key, ()))
                or any(c.key == key and any(lo <= offset < hi for lo, hi in c.need)
                       for c in (*self.acked.candidates.items, *self.sequence.candidates.items)))

    def refetch_wanted(self) -> list[Refetch]:
        """Ranges to read again directly (both isolation levels) before verdicts resting on them count."""
        wanted: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for tid, p, lo, hi in [w for pending in self._pending() for w in pending.wanted()]:
            wanted.setdefault((tid, p), []).append((lo, hi))
        for key, ranges in self.suspects.items():
            wanted.setdefault((key.topic_id, key.partition), []).extend((a, b) for a, b in ranges)
        gap = self.settings.settle_offsets
        return [Refetch(tid, p, lo, hi) for (tid, p), ranges in sorted(wanted.items())
                if tid not in self.topics.gone for lo, hi in merge(ranges, gap)]

    def settle(self) -> list[Violation]:
        """Judge everything that became decidable; returns the new violations."""
        self._finish_topics()
        for key in sorted(self._dirty, key=lambda k: (k.iso.value, k.topic_id, k.partition)):
            v = self.views[key]
            self.sink.extend(self.acked.settle_view(key, v, self.log_start.get((key.topic_id, key.partition), 0)))
        self.sink.extend(self.acked.judge_ready(lambda k: self.views[k],
                                                lambda k: self.log_start.get((k.topic_id, k.partition), 0)))
        self.sink.extend(self.sequence.judge_ready(lambda k: self.views[k]))
        self.sink.extend(self.offsets.judge_parked())
        self.sink.extend(self.txns.judge(self.view, lambda tid, p: self.log_start.get((tid, p), 0),
                                         self.topics.gone, self._unsettled,
                                         lambda tid, p, off: self.suspect(tid, p, off, off + 1)))
        self.sink.extend(self.txns.judge_headers(
            lambda tid: {k.partition for k in self.views if k.iso is RC and k.topic_id == tid}, self.view))
        self.sink.extend(self.cycles.judge())
        self._eos_judge()
        self._group_judge()
        for key in self._dirty:
            v = self.views[key]
            cut = v.frontier - self.settings.horizon_offsets
            if cut > v.forgotten_below:  # verdicts still waiting for a re-read there: judged on what the view holds
                self.sink.extend(self.acked.judge_unconfirmed(
                    key, v, cut, self.log_start.get((key.topic_id, key.partition), 0)))
                self.sink.extend(self.sequence.judge_unconfirmed(key, v, cut))
                self._group_violations(key.topic_id, self.group_skips.unconfirmed(key, v, cut))
                self._eos_violations(self._eos_not_rewritten(self.eos_losses.unconfirmed(key, v, cut), key.topic_id),
                                     key.topic_id)
            v.forget(self.settings.horizon_offsets)
            self.acked.forget(key, v)
            self.sequence.forget(key, v)
            self.offsets.forget(key, v)
            if key.iso is RC:
                self.cycles.forget(key.topic_id, key.partition, v.forgotten_below)
            if key in self.suspects:
                self.suspects[key] = subtract(self.suspects[key], 0, v.forgotten_below)
        self._dirty.clear()
        return self.sink.take()

    # -- ledger events ---------------------------------------------------------------------

    def _expect(self, iso: Isolation, tid: str, p: int, first_offset: int, count: int, writer_id: int, inc: int,
                first_seq: int, done_ts_us: int, cls: WriteClass) -> None:
        key = ViewKey(iso, tid, p)
        if tid in self.topics.gone:  # acknowledged writes of a topic that is gone: judged on arrival
            self.sink.extend(self.acked.ended(key, first_offset, count, writer_id, inc, first_seq, cls,
                                              self.recorded_log_start.get((tid, p), 0), self.topics.gone[tid]))
            return
        self.acked.expect(key, self.view(iso, tid, p), first_offset, count, writer_id, inc, first_seq, done_ts_us,
                          cls)
        self._dirty.add(key)

    def _acked_at(self, writer_id: int, inc: int, tid: str, p: int, first_offset: int, last_offset: int,
                  cls: WriteClass, ack_ts_us: int) -> None:
        """An acknowledgement that goes backwards for a writer and partition is evidence of a rewrite,
        at or below the new ack's offset (how far below, nobody can tell: :meth:`log_went_back`)."""
        key = (writer_id, inc, tid, p)
        reused = reused_by_rewrite(self.max_acked, key, first_offset, last_offset)
        in_order = acks_in_order(cls)
        since = rewrite_began(self.rewriting, self.rewrite_marks, key, reused, last_offset, ack_ts_us, in_order)
        if reused is not None:
            self.log_went_back(tid, p, first_offset, reused[1])
            if in_order:  # no group_skip judged there (invariants.groups)
                self.rewrites.setdefault((tid, p), OffsetSet()).add_range(*reused)
                if self.group_source and tid == self.group_topic_id:
                    self.groups.rewritten(p, *reused, since_ms=since)  # (skips held there: dropped when judged)
                if self.eos_source and tid == self.eos_topic_id:
                    self.eos.rewritten(p, *reused)  # (losses held there: dropped when confirmed)

    def _ledger_event(self, ev: LedgerEvent) -> None:
        if isinstance(ev, AckedRun):
            bogus = min(ev.count, max(0, ev.log_start_after - ev.first_offset))
            if bogus:  # acks below the log start listed after them: judged at once, never expected
                for iso in (RU, RC):
                    self.sink.extend(self.acked.below_log_start(iso, ev.topic_id, ev.partition, ev.first_offset,
                                                                bogus, (ev.writer_id, ev.inc), ev.first_seq,
                                                                ev.log_start_after, ev.cls))
                if bogus == ev.count:
                    return
                ev = replace(ev, first_seq=ev.first_seq + bogus, count=ev.count - bogus,
                             first_offset=ev.first_offset + bogus)
            self._acked_at(ev.writer_id, ev.inc, ev.topic_id, ev.partition, ev.first_offset,
                           ev.first_offset + ev.count - 1, ev.cls, ev.ack_ts_us)
            for iso in (RU, RC):
                self._expect(iso, ev.topic_id, ev.partition, ev.first_offset, ev.count, ev.writer_id, ev.inc,
                             ev.first_seq, ev.done_ts_us, ev.cls)
        elif isinstance(ev, TxnWritesAcked):  # (as each write acked one after another)
            last = ev.first_offset + ev.count - 1
            self._acked_at(ev.writer_id, ev.inc, ev.topic_id, ev.partition, ev.first_offset, last, ev.cls,
                           ev.ack_ts_us)
            self._expect(RU, ev.topic_id, ev.partition, ev.first_offset, ev.count, ev.writer_id, ev.inc, ev.first_seq,
                         ev.done_ts_us, ev.cls)
            if self.txns.on_acked(ev):
                self._expect(RC, ev.topic_id, ev.partition, ev.first_offset, ev.count, ev.writer_id, ev.inc,
                             ev.first_seq, ev.done_ts_us, ev.cls)
        elif isinstance(ev, UnconfirmedRun):
            if ev.topic_id in self.topics.gone:
                return
            for iso in (RU, RC):
                key = ViewKey(iso, ev.topic_id, ev.partition)
                top = self.sequence.max_seq.get(key, {}).get((ev.writer_id, ev.inc))
                self.unconfirmed.expect(key, self.view(*key), (ev.writer_id, ev.inc), ev.first_seq, ev.count,
                                        None if top is None else top[0])
        elif isinstance(ev, TxnWritesIntended):
            self.txns.on_intended(ev)
        elif isinstance(ev, TxnWriteDecided):
            self.txns.on_write_decided(ev.write, ev.txn, ev.cls)
        elif isinstance(ev, TxnDecided):
            expect, found = self.txns.on_decided(ev)
            if expect:
                cls = self.txns.txns[ev.txn].cls
                # each write in turn, those that follow the one before (next seq at the next offset) in
                # one call: the family would join them into the same expected run one by one
                for wkey, off, n in _consecutive(expect):
                    self._expect(RC, wkey.topic_id, wkey.partition, off, n, wkey.writer_id, wkey.inc, wkey.seq, 0,
                                 cls)
            self.sink.extend(found)
        elif isinstance(ev, WriterClassified):
            self.writer_classes[(ev.writer_id, ev.inc)] = ev.cls
            if ev.settings.role == "canary":
                self.writer_info[ev.settings.name] = ev.settings
            if ev.topic_settings is not None:
                self.topic_settings[ev.topic_id] = ev.topic_settings
        elif isinstance(ev, TopicObserved):
            self.topics.note(ev.topic, ev.topic_id)
            for p, off in enumerate(ev.log_starts):
                k = (ev.topic_id, p)
                self.recorded_log_start[k] = max(off, self.recorded_log_start.get(k, 0))
        elif isinstance(ev, TopicReplaced):
            self.topics.note(ev.topic, ev.old_id)
            self.topics.note(ev.topic, ev.new_id, after=ev.old_id)
            self._end(ev.old_id, "vanished")
        elif isinstance(ev, TopicRetired):
            self.topics.note(ev.topic, ev.topic_id)
            self._end(ev.topic_id, "retired")
        elif isinstance(ev, EntriesMissing):
            for n in range(ev.first_n, ev.first_n + ev.count):  # one violation (and evidence line) per lost entry
                self.sink.add(Violation(Invariant.OUTCOME_GAP, NONE, detail=f"{ev.instance} incarnation {ev.inc}: "
                                        f"ledger entry n={n} missing ({ev.count} from n={ev.first_n})"))

    # -- durable form ----------------------------------------------------------------------

    def to_doc(self) -> dict[str, Any]:
        """The explicit, versioned document the watch saves (:mod:`invariants.checker_doc`)."""
        return checker_doc.to_doc(self)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], settings: Settings) -> "Checker":
        return checker_doc.from_doc(cls(settings), doc, settings)


def _group_detail(f: GroupFinding) -> str:
    if f.invariant == "group_skip":
        return f"the commit acknowledged at observation {f.at} passed it; no member had consumed it"
    if f.invariant == "group_rewind":
        return f"member {f.member}, observation {f.at}: below the group's acknowledged committed offset"
    return f"member {f.member}, observation {f.at}: no live owner for longer than the stall threshold"


def _consecutive(pairs: list[tuple[WriteKey, int]]) -> list[tuple[WriteKey, int, int]]:
    """(write, offset) pairs, in their order, as (first write, its offset, count) groups of pairs
    each of which is the next seq of the same writer incarnation and partition at the next offset."""
    out: list[list] = []
    for wkey, off in pairs:
        last = out[-1] if out else None
        if last is not None:
            w, at, n = last
            if (wkey.seq == w.seq + n and off == at + n and wkey.partition == w.partition
                    and wkey.writer_id == w.writer_id and wkey.inc == w.inc and wkey.topic_id == w.topic_id):
                last[2] += 1
                continue
        out.append([wkey, off, 1])
    return [(w, at, n) for w, at, n in out]
