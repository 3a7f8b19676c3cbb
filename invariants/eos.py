"""Exactly-once pipelines: ``eos_loss`` and ``eos_duplicate``, and where a consumer stands after an abort.

The EOS canary (``monitor/eos/EosWorker.java``, the Java client) is a consume-transform-produce
worker: it reads the canary topic in a consumer group with ``read_committed``, and for each record
it consumed writes one output record naming the record's *source position* (partition, offset),
in a transaction that also commits the group's offsets (``sendOffsetsToTransaction``). Kafka
promises that the output and the offsets commit together or not at all, so:

**``eos_loss``.** A source position a ``read_committed`` reader read, below the group's
committed offset on its partition, with no copy in the committed output — the group moved past a
record whose output never committed. Judged only where the output is known whole: the committed
offsets are taken first, then the output's *high watermarks*, and the output is read with
``read_committed`` until its position passes them (offsets and output commit in one transaction,
and the output's records were written, acks=all, before the commit, so an offset that was
committed has its output below those watermarks; the output's last stable offset is not enough:
the commit markers reach the group's offsets and each output partition one by one); the source is
judged only below what its reader read. Live, a loss counts only once that reader read its source
offset again and found a record there (:mod:`invariants.reference_confirm`).

**``eos_duplicate``.** A source record with more than one copy in the committed output (after
an abort or a restart the worker consumes again from the committed offsets, so it writes a record
again; only one of the copies may commit). Counted once per source record. A copy names the
record it was made of — its position and the canary header it copied, ``(writer_id, incarnation,
seq)`` — and copies of two records at one position are not a duplicate: a rewritten source log (a
node back without its data, an unclean election, a topic recreated under the same group and
output) reuses offsets for other records, and a pipeline whose committed offset the new log no
longer reaches (the offsets it commits carry no leader epoch) starts again at its start
(``auto.offset.reset=earliest``) and copies the new records there (found on the local cluster: a
partition wiped under the worker made 1,265 false duplicates, live and in the audit, while
positions alone were compared). A copy that names no canary record (the source held a foreign
one) is matched by its position alone. A record that survived the rewrite below it is copied
again after such a reset: that one is a duplicate, as it is for any reset that moves a group back.

A copy of any record at a position is that position's copy for ``eos_loss``. Where a rewrite
reused the offset and the new log still reaches the committed offset, the pipeline goes on from
there: it passed that offset on the old log, and the new record there was never its to consume
(that loss is the canary's: ``lost_write`` and the acknowledged-write checks). Nor are the new
records at offsets where the old log held only transaction markers, which no copy names: the
audit judges none of a rewritten partition's records from the first offset whose copy names an
old record — and the records without a copy of theirs just below it, down to the first with one
(where the rewrite began at an old marker) — to where the pipeline began consuming the new log
(:func:`rewritten_span`). Live does the same with what it knows when: a span starts where a record
read has a copy naming another canary record — whichever of the two came first (found on the
local cluster: Vigil's reader read the new log before the old copies there reached it, and from
below where the pipeline had been; live counted 5 losses at the old log's marker offsets, the audit
0) — or where Vigil's reader read an offset again and found another record or none; it takes in
the offsets below not judged yet that have no copy of the record read there, down to the first
that has one; the first copy of a record read in it since ends it, and the records in a span not
ended yet wait. The writers' acknowledgements going backwards (the checker's ledger evidence, as
for ``group_skip``) mark offsets reused: none judged there, and a loss waits for the ledger as a
skip does. A committed offset sampled before any of this was known judges below where the rewrite
began only, and so does the group's offset while it stays at the value it had then (it passed the
old log); a second copy at a position (the pipeline consumed from there again) caps the samples
taken before at that position. A loss is counted once Vigil's reader read its offset again, from
the offset with a copy below it: a record gone or another there shows the log rewritten under
the judgement, and the loss is dropped.

Limits. Where the pipeline starts again at the log's start, it does consume the new record, and a
copy of it lost then is hidden by the old record's copy; a copy lost in the pipeline's first
transaction on the new log, or just below where a rewrite began, is inside the span (rare: a
broken pipeline and a rewrite at once). And one rewrite nothing shows: new records above the old
log's last record but below the offset the pipeline committed past the old log's tail of
transaction markers — no copy names an old record there, no acknowledgement goes back, no read
finds another record — so the stale committed offset passes them until the pipeline commits
again; live counts such a record lost if it judges it meanwhile (after a reset to the log's start
the pipeline copies it later and the audit counts nothing). Shown on generated histories
(``tests/unit/invariants/test_eos_rewrites.py``), not seen on the local cluster. Live knows more of
a rewrite than the final log shows the audit (its re-reads, the ledger), and its spans can be
wider: where the pipeline also lost a copy near a rewrite, or skipped a new record going on from
its committed offset where nothing in the final log shows the offset reused, the audit can count
what live does not (found by a review on generated histories; on a healthy pipeline under the
real fault both count nothing, the integration test). A span opened by a re-read ends only with a
copy of a record read after it: with no new records (writers stopped), what is above its start
waits, and the audit judges it.

Both are ``broken``: no configuration allows them. A record a reader of the source never read
(deleted by retention before it was read, a torn log) is not judged.

**After an abort.** Jepsen asked where a consumer resumes after its transaction is aborted
(KAFKA-17582). The worker reports, per partition of an aborted transaction, its position
``before`` the transaction's poll, its position at the ``end`` of that poll, the group's
``committed`` offset, its position right ``after`` ``abortTransaction``, the offsets of the
aborted poll's ``first`` and ``last`` records, and where it ``resumed``: the first record its next
poll returned (a rebalance in that poll may have moved it), before it seeks back to the committed
offset as an exactly-once application must. :func:`classify_resumed` names where it resumed by
records: ``advance`` (past the aborted records: they are skipped unless the application seeks),
``rewind`` (at the transaction's first record again), ``rewind_further`` (below it: records
already committed) or ``other`` (inside them). Records, not positions: a position also passes
the control records and aborted records that ``read_committed`` skips, so the next poll's first
record after a plain advance can stand past the position (transaction markers, another writer's
aborted records between), and a position where a transaction began may be a marker's. When the
next poll returned nothing there, only positions are known: :func:`classify_after_abort`.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from invariants.doc_runs import offset_runs, pack_runs, runs_in_order, unpack_runs
from invariants.model import Ident, is_canary

AFTER_ABORT_CLASSES = ("advance", "rewind", "rewind_further", "other")


def classify_resumed(first: int, last: int, resumed: int) -> str:
    """Where a consumer resumed after its transaction was aborted, by records: the aborted poll
    returned records ``first`` to ``last`` on the partition, the next poll's first record there
    is ``resumed``. A consumer fetches from its position; records between a position and the next
    record returned are ones ``read_committed`` does not return, so: past ``last`` is
    ``advance``, ``first`` is ``rewind`` (from its position before the poll or the committed
    offset: nothing it could return lay between those and ``first``), below ``first`` is
    ``rewind_further``, in between ``other``."""
    if resumed > last:
        return "advance"
    if resumed == first:
        return "rewind"
    return "rewind_further" if resumed < first else "other"


def classify_after_abort(before: int, end: int, after: int, committed: int = -1) -> str:
    """Where a consumer stands after its transaction was aborted, relative to that transaction:
    by positions (when its next poll returned no record there; else :func:`classify_resumed`):
    its position was ``before`` when the transaction's poll began and ``end`` after it (``before <
    end``); the group's committed offset was ``committed`` (-1: none). A committed offset can be
    below ``before``: it names the record after the last one consumed, while the position also
    passed the control records behind it. Back at either is a ``rewind``."""
    if after == end:
        return "advance"
    if after == before or after == committed:
        return "rewind"
    if after < before and (committed < 0 or after < committed):
        return "rewind_further"
    return "other"


Copy = Sequence  # (source partition, source offset[, the source record's identity, None when unknown])
# A copy remembered from a state saved before copies named their record: whatever record the next
# copy at its position names, it is a second copy (positions were matched then)
UNNAMED_BEFORE = "?"


def named_copy(copy: Copy) -> tuple[int, int, Ident | None]:
    """A copy as (source partition, source offset, the record's identity or None)."""
    return (int(copy[0]), int(copy[1]), tuple(copy[2]) if len(copy) > 2 and copy[2] is not None else None)


@dataclass(frozen=True)
class EosVerdict:
    losses: tuple[tuple[int, int], ...] = ()  # (partition, offset) of the source, ascending
    duplicates: tuple[tuple[int, int, int], ...] = ()  # (partition, offset, copies), ascending; one per record
    judged: Mapping[int, int] = field(default_factory=dict)  # partition -> source offsets judged below
    # source positions whose copies name more than one record: a rewritten source log reused them
    reused_positions: int = 0
    # partition -> [lo, resumed): offsets of a rewritten log the pipeline did not consume (rewritten_span)
    not_consumed: Mapping[int, tuple[int, int]] = field(default_factory=dict)


def rewritten_span(held: Mapping[int, Ident], read_from: int, read_to: int,
                   named: Mapping[int, Iterable[Ident | None]]) -> tuple[int, int] | None:
    """Where a rewritten source partition's new records were not the pipeline's to consume, from
    what its log holds now (``held``: offset -> the record's identity, read whole in ``[read_from,
    read_to)``) and the records its copies name per offset (``named``): from the lowest offset
    whose copies name a canary record the log does not hold there (an old record: the offset was
    reused), up to the lowest offset at or above it with a copy of the record the log holds there
    now — where the pipeline began consuming the new log. None when no copy names an old record.

    The pipeline's committed offset, past the old log's records, stays valid where the new log
    reaches it (it carries no leader epoch), so the pipeline goes on from there and the new records
    below it never reach it — among them records at offsets where the old log held only
    transaction markers, which no copy names (found on the local cluster: a partition wiped under
    the worker, 262 false ``eos_loss`` in the audit). Where it starts again at the log's start
    instead, its first copies are of the new log: nothing is left out.

    The span also takes in the records below that lowest offset without a copy of theirs, down to
    the first record with one: where the rewrite began at an offset the old log held a transaction
    marker at, no copy names an old record there, and the new record was not the pipeline's either.
    (A copy the pipeline lost right below a rewrite is left out with them.)"""
    lo = min((o for o, idents in named.items() if read_from <= o < read_to
              and (o not in held or is_canary(held[o]))  # (a malformed record there: a digest, no rewrite)
              and any(isinstance(i, tuple) and held.get(o) != i for i in idents)), default=None)
    if lo is None:
        return None
    for o in sorted((o for o in held if read_from <= o < lo), reverse=True):  # (see below)
        if held[o] in named.get(o, ()) or (not is_canary(held[o]) and o in named):
            break
        lo = o
    resumed = min((o for o, idents in named.items() if o >= lo and o in held and held[o] in idents),
                  default=read_to)
    return (lo, resumed)


def eos_verdict(source: Mapping[int, Iterable[int]], read_to: Mapping[int, int], committed: Mapping[int, int],
                output: Iterable[Copy], judge_from: Mapping[int, int] | None = None,
                held: Mapping[int, Mapping[int, Ident]] | None = None) -> EosVerdict:
    """The verdict on one pipeline.

    ``source``: per partition, the offsets a ``read_committed`` reader of the source read, whole
    below ``read_to[p]``. ``committed``: the group's committed offsets, taken *before* ``output``
    (every committed output record's :data:`Copy`) was read past the output's high watermarks.
    ``judge_from``: per partition, where judging starts (an output whose retention removed the
    oldest copies: the lowest source offset a surviving copy names). ``held``: per partition, the
    identity of the record at each offset read (the audit's): on a rewritten partition the new
    records the pipeline did not consume are not judged (:func:`rewritten_span`).
    """
    copies = Counter(named_copy(c) for c in output)
    named: dict[int, dict[int, set]] = {}  # partition -> offset -> the records its copies name
    for p, o, ident in copies:
        named.setdefault(p, {}).setdefault(o, set()).add(ident)
    start = judge_from or {}
    judged = {p: min(c, read_to.get(p, 0)) for p, c in committed.items()}
    spans: dict[int, tuple[int, int]] = {}
    if held:
        for p, records in held.items():
            span = rewritten_span(records, min(records, default=0), read_to.get(p, 0), named.get(p, {}))
            if span is not None:
                spans[p] = span
    losses = sorted((p, o) for p, offsets in source.items() for o in offsets
                    if start.get(p, 0) <= o < judged.get(p, 0) and o not in named.get(p, {})
                    and not (p in spans and spans[p][0] <= o < spans[p][1]))
    duplicates = sorted((p, o, n) for (p, o, _ident), n in copies.items() if n > 1)
    reused = sum(1 for per_offset in named.values() for idents in per_offset.values() if len(idents) > 1)
    return EosVerdict(tuple(losses), tuple(duplicates), judged, reused, spans)


@dataclass(frozen=True)
class EosFinding:
    invariant: str  # "eos_loss" | "eos_duplicate"
    partition: int  # of the source
    offset: int  # of the source
    copies: int  # in the committed output when judged
    record: Ident | None = None  # eos_duplicate: the source record its copies name (writer_id, inc, seq), if known
    # eos_loss: where its re-read starts (the highest offset below with a copy, else its own): a
    # record there gone or another one shows the log rewritten under the judgement
    since: int = field(default=-1, compare=False)


class EosLive:
    """The live form of the rule: fed in any split of the reads, it judges each source position
    once, as :func:`eos_verdict` does on the whole history.

    - ``read_source(p, offsets)``: what ``read_committed`` read of source partition p, in order;
      everything below the last offset read + 1 has been read.
    - ``read_output(q, records, reader_at)``: output records read on output partition q, as
      (output offset, :data:`Copy`), and the output reader's position after them (Spark's end
      offset of the batch: past control records too); a second copy of a record is
      ``eos_duplicate`` at once; records below a position already reached are not counted again.
    - ``committed(offsets, output_ends)``: a sample of the group's committed offsets, and the
      output's high watermarks taken *after* it (not its last stable offsets: see above). Once the output reader is at or past every one of those
      ends, each source position read below ``min(committed, source read)`` without a copy is
      ``eos_loss``; a later sample judges further. Positions are judged once.

    Copies of judged positions are remembered ``horizon`` offsets back (a copy further back than
    that is the audit's only, as the other families' far duplicates are). The live rule judges up
    to the highest committed offset it sampled, the audit up to the last: a group whose offsets were
    moved back (an operator's reset) is judged further live. A pipeline more than ``MAX_UNJUDGED``
    records behind the source reader on a partition leaves its oldest ones to the audit. Source positions are partitions and
    offsets of the topic as it is now: a recreated canary topic starts a new pipeline (a new group).
    """

    MAX_SAMPLES = 64
    MAX_UNJUDGED = 1_000_000  # source offsets per partition waiting for a committed offset to pass them

    def __init__(self, horizon: int = 100_000) -> None:
        self.horizon = horizon
        self.unjudged: dict[int, set[int]] = {}  # source p -> offsets read, not judged yet
        self.read_to: dict[int, int] = {}  # source p -> last offset read + 1
        # source p -> offset -> the first copy's record (None: named none; UNNAMED_BEFORE)
        self.copies: dict[int, dict[int, Ident | str | None]] = {}
        # (source p, offset) -> copies per record, at positions with more than one copy
        self.more: dict[tuple[int, int], dict[Ident | str | None, int]] = {}
        self.judged_to: dict[int, int] = {}  # source p -> offsets below are judged
        self.output_at: dict[int, int] = {}  # output q -> reader position
        self.samples: list[tuple[dict[int, int], dict[int, int]]] = []  # (committed, output ends), oldest first
        self.lowest_copy: dict[int, int] = {}  # source p -> the lowest source offset a copy named
        self.trimmed: set[int] = set()  # output partitions whose oldest copies retention removed
        # source p -> spans [lo, resumed] of a rewritten partition not judged (rewritten_span), oldest
        # first; the last one's resumed None while the pipeline has copied none of the new log there
        self.rewrites: dict[int, list[list]] = {}
        self.held: dict[int, dict[int, Ident]] = {}  # source p -> records read in the last span, not judged yet
        # source p -> offset -> the canary record read there, for the offsets not judged yet, in the
        # order read (a record read again moves to the end): a copy arriving after its offset was
        # read can show the partition rewritten too
        self.idents: dict[int, dict[int, Ident]] = {}
        # source p -> [lo, hi) ranges the writers' acknowledgements going backwards showed reused by a
        # rewrite (the checker's ledger evidence): not judged
        self.reused: dict[int, list[list[int]]] = {}
        # source p -> [the committed offset sampled when a rewrite was learnt, where it began]: while
        # the group's offset stays at that value it passed the old log, and judges below there only
        self.stale: dict[int, list[int]] = {}
        self.last_committed: dict[int, int] = {}  # source p -> the group's committed offset last sampled

    def read_source(self, partition: int, records: Iterable[int | tuple[int, Ident]]) -> None:
        """``records``: offsets, or (offset, the record's identity) — with identities, a record at
        an offset whose copy names another (old) record shows the partition rewritten."""
        items = [(r, None) if isinstance(r, int) else (r[0], r[1]) for r in records]
        below = self.judged_to.get(partition, 0)
        idents = self.idents.setdefault(partition, {})
        for o, ident in items:
            if o >= below:
                idents.pop(o, None)
                if ident is not None and is_canary(ident):
                    idents[o] = ident
        fresh = [o for o, _ident in items if o >= below]
        pending = self.unjudged.setdefault(partition, set())
        pending.update(fresh)
        self._rewritten(partition, items)
        if fresh:
            self.read_to[partition] = max(self.read_to.get(partition, 0), max(fresh) + 1)
            if len(pending) > self.MAX_UNJUDGED:  # the pipeline that far behind: its oldest are the audit's
                cut = sorted(pending)[len(pending) - self.MAX_UNJUDGED * 9 // 10]  # a tenth at a time
                pending.difference_update([o for o in pending if o < cut])
                self.judged_to[partition] = max(self.judged_to.get(partition, 0), cut)
                for kept in (self.held.get(partition, {}), idents):
                    for o in [o for o in kept if o < cut]:
                        del kept[o]

    def _names(self, p: int, o: int, ident: Ident) -> bool:
        """Whether a copy at (p, o) names ``ident``."""
        first = self.copies.get(p, {}).get(o, None)
        return first == ident or ident in self.more.get((p, o), ())

    def _rewritten(self, p: int, items: list[tuple[int, Ident | None]]) -> None:
        """The live :func:`rewritten_span`: from the canary records read, in order, with the copies
        seen — a copy naming another canary record than the one read at its offset starts a span
        (or lowers the last one's start), a copy of the record read there ends it."""
        seen = self.copies.get(p, {})
        for o, ident in items:
            if ident is None or not is_canary(ident):
                continue
            first = seen.get(o)
            if isinstance(first, tuple) and first != ident and not self._names(p, o, ident):
                self._span_from(p, o)
            spans = self.rewrites.get(p, [])
            if spans and o >= spans[-1][0]:
                if self._names(p, o, ident):  # the pipeline copied the record the log holds now
                    self._resumed(spans[-1], o)
                else:
                    held = self.held.setdefault(p, {})
                    held[o] = ident
                    if len(held) > self.MAX_UNJUDGED:
                        del held[min(held)]

    def _span_from(self, p: int, o: int) -> bool:
        """The log at ``o`` held another record than a copy there names: a span begins at ``o`` (or
        the last one, not ended, begins lower), and also covers the offsets below ``o`` not judged
        yet without a copy of the record read there, down to the first that has one — the new log
        where this reader read it before the copies showing the rewrite arrived, or where it never
        read the old log (behind the pipeline when the log was rewritten): among them the new records
        at offsets where the old log held only transaction markers, which no copy names. Whether a
        new span began."""
        spans = self.rewrites.setdefault(p, [])
        if spans and spans[-1][1] is None and o >= spans[-1][0]:
            return False  # inside the span not ended: it took in what lies below when it began
        idents, pending, seen = self.idents.get(p, {}), self.unjudged.get(p, set()), self.copies.get(p, {})
        lo = o
        for x in range(o - 1, self.judged_to.get(p, 0) - 1, -1):  # (down to the first copy of what was read)
            if x not in pending:
                continue
            ident = idents.get(x)
            if self._names(p, x, ident) if ident is not None else x in seen:
                break  # the pipeline copied the record read there (a foreign one: some record there)
            lo = x
        self._cap_samples(p, lo)  # taken before this was known: they passed the old log
        if not spans or (spans[-1][1] is not None and o >= spans[-1][1]):  # (a later rewrite)
            spans.append([lo, None])
            self.held[p] = {}
            return True
        if lo < spans[-1][0]:
            spans[-1][0] = lo
        return False

    def _cap_samples(self, p: int, o: int) -> None:
        """The committed offsets sampled so far judge partition p below ``o`` only."""
        for committed, _ends in self.samples:
            if committed.get(p, 0) > o:
                committed[p] = o

    def log_rewritten(self, p: int, o: int) -> None:
        """Vigil's reader read ``o`` again and found another record there, or none (the checker's
        re-reads): a span begins there, as where a copy names another record."""
        self._span_from(p, o)

    def rewritten(self, p: int, lo: int, hi: int) -> None:
        """Offsets ``[lo, hi)`` of p were reused by a rewrite (the writers' acknowledgements went
        backwards: :meth:`invariants.checker.Checker.log_went_back`): no record there is judged, and
        the group's committed offset as sampled last judges below ``lo`` only until it moves — it
        passed the old log there, where records above the last acknowledged one (transaction
        markers, aborted records) may be new records now."""
        merged: list[list[int]] = []
        for a, b in sorted([*self.reused.get(p, []), [lo, hi]]):  # kept as few ranges
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.reused[p] = merged
        self._cap_samples(p, lo)
        last = self.last_committed.get(p)
        if last is not None and last > lo:
            self.stale[p] = [last, lo]

    def in_span(self, p: int, o: int) -> bool:
        """Whether ``o`` is in a span of a rewritten log (ended or not), or in offsets a rewrite reused."""
        return (any(lo <= o and (resumed is None or o < resumed) for lo, resumed in self.rewrites.get(p, ()))
                or self._reused_at(p, o))

    def _reused_at(self, p: int, o: int) -> bool:
        return any(lo <= o < hi for lo, hi in self.reused.get(p, ()))

    @staticmethod
    def _resumed(span: list, o: int) -> None:
        span[1] = o if span[1] is None else min(span[1], o)

    def read_output(self, partition: int, records: Iterable[tuple[int, Copy]],
                    reader_at: int | None = None) -> list[EosFinding]:
        found = []
        below = self.output_at.get(partition, 0)
        for out_offset, copy in records:
            if out_offset < below:
                continue  # read before (a batch read again): counted once
            p, o, ident = named_copy(copy)
            seen = self.copies.setdefault(p, {})
            self.lowest_copy[p] = min(self.lowest_copy.get(p, o), o)
            below = max(below, out_offset + 1)
            read = self.idents.get(p, {}).get(o)
            if (isinstance(ident, tuple) and read is not None and read != ident and is_canary(ident)
                    and not self._names(p, o, read)):
                self._copy_shows_rewrite(p, o)
            spans = self.rewrites.get(p)
            if spans and o >= spans[-1][0] and ident is not None and self.held.get(p, {}).get(o) == ident:
                self._resumed(spans[-1], o)  # a copy of the record read there since
            if o not in seen:
                seen[o] = ident
                continue
            # a second copy at a position: the pipeline consumed from there again (an abort, a restart,
            # a reset to a rewritten log's start), so a committed offset sampled before may have
            # passed records it has still to consume
            self._cap_samples(p, o)
            if seen[o] == UNNAMED_BEFORE:
                ident = UNNAMED_BEFORE
            counts = self.more.setdefault((p, o), {seen[o]: 1})
            counts[ident] = counts.get(ident, 0) + 1
            if counts[ident] == 2:
                found.append(EosFinding("eos_duplicate", p, o, 2, ident if isinstance(ident, tuple) else None))
        self.output_at[partition] = max(below, reader_at or 0)
        return found

    def _copy_shows_rewrite(self, p: int, o: int) -> None:
        """A copy arrived naming another canary record than the one read at ``o`` (not judged yet):
        the live :func:`rewritten_span` from the copy's side. A new span's records are those read
        since the one at ``o`` (in the order read: what was read before it is the older log); any
        the pipeline has copied already end it."""
        if not self._span_from(p, o):
            return
        idents = self.idents.get(p, {})
        order = list(idents)
        since = order[order.index(o):]
        span = self.rewrites[p][-1]
        held = self.held[p] = {x: idents[x] for x in since if x >= span[0]}
        for x, ident in held.items():
            if self._names(p, x, ident):
                self._resumed(span, x)

    def committed(self, offsets: Mapping[int, int], output_ends: Mapping[int, int],
                  output_trimmed: Iterable[int] = ()) -> None:
        """``output_trimmed``: output partitions whose log start is past 0 (retention removed copies)."""
        offsets = dict(offsets)
        self.last_committed.update(offsets)
        for p, (value, lo) in list(self.stale.items()):
            if offsets.get(p) == value:
                offsets[p] = min(value, lo)
            elif p in offsets:
                del self.stale[p]  # the group committed since: on the new log
        self.samples.append((offsets, dict(output_ends)))
        self.trimmed = set(output_trimmed)
        # The oldest is the first to be ready, the newest judges the most: those two are kept.
        if len(self.samples) > self.MAX_SAMPLES:
            del self.samples[1:len(self.samples) - self.MAX_SAMPLES + 1]

    def judge(self, log_start: Mapping[int, int] | None = None) -> list[EosFinding]:
        """Losses below the newest sample whose output ends the reader has reached. Not judged: a
        source position below ``log_start`` (the canary topic's, now: retention took it, as it did
        from the audit), nor, on a partition whose output copies retention trimmed, below the
        lowest copy seen (the audit's rule)."""
        ready = [i for i, (_c, ends) in enumerate(self.samples)
                 if all(self.output_at.get(q, 0) >= end for q, end in ends.items())]
        if not ready:
            return []
        committed, _ends = self.samples[ready[-1]]
        del self.samples[:ready[-1] + 1]
        found = []
        for p, c in sorted(committed.items()):
            limit = min(c, self.read_to.get(p, 0))
            if limit <= self.judged_to.get(p, 0):
                continue
            pending = self.unjudged.get(p, set())
            idents = self.idents.get(p, {})
            seen = self.copies.get(p, {})
            floor = (log_start or {}).get(p, 0)
            if p in self.trimmed:
                floor = max(floor, self.lowest_copy.get(p, limit))
            spans = self.rewrites.get(p, [])
            waiting = spans[-1][0] if spans and spans[-1][1] is None else None
            copied: list[int] | None = None  # the offsets with a copy, in order, once a loss needs them
            for o in sorted(x for x in pending if x < limit):
                if waiting is not None and o >= waiting:
                    continue  # in a span not ended yet: judged once the pipeline's first copy there ends it
                pending.discard(o)
                idents.pop(o, None)
                if any(lo <= o < resumed for lo, resumed in spans if resumed is not None) or self._reused_at(p, o):
                    continue  # a rewritten log's record the pipeline did not consume
                if o >= floor and o not in seen:
                    copied = sorted(seen) if copied is None else copied
                    at = bisect.bisect_left(copied, o)
                    found.append(EosFinding("eos_loss", p, o, 0, since=copied[at - 1] if at else o))
            self.judged_to[p] = limit
            held = self.held.get(p)
            if held and waiting is None:
                for o in [o for o in held if o < limit]:
                    del held[o]
            for o in [o for o in seen if o < limit - self.horizon]:
                del seen[o]
                self.more.pop((p, o), None)
        return found

    def to_doc(self) -> dict:
        return {"horizon": self.horizon,
                "unjudged": {str(p): offset_runs(s) for p, s in self.unjudged.items() if s},
                "read_to": {str(p): v for p, v in self.read_to.items()},
                # most positions have one copy of a canary record, one writer's at consecutive
                # offsets: runs (doc_runs); copies naming no record by offset runs; the others by offset
                "copies": {str(p): {"named": pack_runs((*i, o) for o, i in m.items()
                                                       if isinstance(i, tuple) and (p, o) not in self.more),
                                    "once": offset_runs(o for o, i in m.items() if i is None and (p, o) not in self.more),
                                    "before": offset_runs(o for o, i in m.items()
                                                          if i == UNNAMED_BEFORE and (p, o) not in self.more),
                                    "more": [[o, [[list(i) if isinstance(i, tuple) else i, n]
                                                  for i, n in self.more[(p, o)].items()]]
                                             for o in sorted(m) if (p, o) in self.more]}
                           for p, m in self.copies.items() if m},
                "judged_to": {str(p): v for p, v in self.judged_to.items()},
                "lowest_copy": {str(p): v for p, v in self.lowest_copy.items()},
                "trimmed": sorted(self.trimmed),
                "rewrites": {str(p): [list(s) for s in spans] for p, spans in self.rewrites.items() if spans},
                "held": {str(p): [[o, list(i)] for o, i in sorted(h.items())] for p, h in self.held.items() if h},
                # in the order read: runs of a writer's records read one after another
                "idents": {str(p): runs_in_order((*i, o) for o, i in m.items()) for p, m in self.idents.items() if m},
                "reused": {str(p): r for p, r in self.reused.items() if r},
                "stale": {str(p): v for p, v in self.stale.items()},
                "last_committed": {str(p): v for p, v in self.last_committed.items()},
                "output_at": {str(q): v for q, v in self.output_at.items()},
                "samples": [[{str(k): v for k, v in c.items()}, {str(k): v for k, v in e.items()}]
                            for c, e in self.samples]}

    @classmethod
    def from_doc(cls, doc: Mapping) -> "EosLive":
        live = cls(int(doc.get("horizon", 100_000)))
        live.unjudged = {int(p): {first + i for first, n in runs for i in range(n)}
                         for p, runs in doc.get("unjudged", {}).items()}
        live.read_to = {int(p): int(v) for p, v in doc.get("read_to", {}).items()}
        live.copies, live.more = {}, {}
        for key, saved in doc.get("copies", {}).items():
            p = int(key)
            if "named" not in saved:  # saved before copies named their record (matched by position then)
                saved = {"before": saved["once"], "more": [[o, [[UNNAMED_BEFORE, n]]] for o, n in saved["more"]]}
            m = live.copies[p] = {first + i: None for first, count in saved.get("once", []) for i in range(count)}
            m.update({first + i: UNNAMED_BEFORE for first, count in saved.get("before", []) for i in range(count)})
            m.update({o: (w, inc, seq) for w, inc, seq, o in unpack_runs(saved.get("named", []))})
            for o, counts in saved["more"]:
                named = {tuple(i) if isinstance(i, list) else i: int(n) for i, n in counts}
                m[int(o)] = next(iter(named))
                if sum(named.values()) > 1:
                    live.more[(p, int(o))] = named
        live.judged_to = {int(p): int(v) for p, v in doc.get("judged_to", {}).items()}
        live.lowest_copy = {int(p): int(v) for p, v in doc.get("lowest_copy", {}).items()}
        live.trimmed = {int(q) for q in doc.get("trimmed", [])}
        live.rewrites = {int(p): [[int(lo), None if resumed is None else int(resumed)] for lo, resumed in spans]
                         for p, spans in doc.get("rewrites", {}).items()}
        live.held = {int(p): {int(o): tuple(i) for o, i in h} for p, h in doc.get("held", {}).items()}
        live.reused = {int(p): [[int(lo), int(hi)] for lo, hi in r] for p, r in doc.get("reused", {}).items()}
        live.stale = {int(p): [int(v), int(lo)] for p, (v, lo) in doc.get("stale", {}).items()}
        live.last_committed = {int(p): int(v) for p, v in doc.get("last_committed", {}).items()}
        live.idents = {int(p): {o + i: (w, inc, seq + i) for w, inc, seq, o, n in runs for i in range(n)}
                       for p, runs in doc.get("idents", {}).items()}
        live.output_at = {int(q): int(v) for q, v in doc.get("output_at", {}).items()}
        live.samples = [({int(k): int(v) for k, v in c.items()}, {int(k): int(v) for k, v in e.items()})
                        for c, e in doc.get("samples", [])]
        return live

