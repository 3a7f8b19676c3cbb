"""What one reader has read of one partition: the shared index every family judges against.

Per reader (isolation level), topic ID and partition, a :class:`PartitionView` keeps the first
offset read (``start``), the ``frontier`` (highest offset read + 1), the record at offset 0,
which record sits at each offset read (:meth:`PartitionView.ident_at`) and where each canary
record was read (:meth:`PartitionView.offsets_of`). It is the reader's *current view* of the log:
when a range is read again (Spark resuming lower after a truncation, or the prober re-fetching a
range on evidence of a rewrite), :meth:`PartitionView.replace` and :meth:`PartitionView.remove`
bring it up to date and say what changed, so a rewritten log is compared, never ignored.

**Two forms, one view.** Most records come in runs: one writer's consecutive seqs at consecutive
offsets, each read once. :meth:`PartitionView.record_run` keeps such a run whole, as a
:class:`Segment` (constant space, whatever its length); every other record is kept one by one
(``at``: offset -> record, ``reads_of``: canary record -> offsets). A segment holds only records
read at one offset whose offsets no single record of ``at`` holds; whatever would break that — a
record read again, replaced, removed, or read a second time elsewhere — first turns the segment
into single records (:meth:`PartitionView._explode`), so every rule that looks at single records
sees exactly what it would have seen had each record been recorded alone. The two forms answer
every question alike and save the same document.

``epoch`` counts the reads applied to the view; a verdict that rests on offsets read in an
earlier read is only counted once those offsets have been read again (see
:mod:`invariants.confirm`).

Offsets more than ``horizon_offsets`` behind the frontier are forgotten (``start``,
``frontier`` and the record at offset 0 are kept), so the index is bounded.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterator

from invariants.doc_runs import ChunkRuns, keeping, merge_runs, pack_runs, unpack_runs
from invariants.model import Ident, is_canary


class Segment:
    """``count`` canary records ``(writer_id, inc, seq + i)`` read once each, at ``offset + i``."""

    __slots__ = ("offset", "count", "writer_id", "inc", "seq")

    def __init__(self, offset: int, count: int, writer_id: int, inc: int, seq: int) -> None:
        self.offset, self.count, self.writer_id, self.inc, self.seq = offset, count, writer_id, inc, seq

    @property
    def end(self) -> int:
        return self.offset + self.count

    def ident(self, off: int) -> Ident:
        return (self.writer_id, self.inc, self.seq + off - self.offset)

    def run(self) -> list:
        """As a saved read run (:func:`invariants.doc_runs.pack_runs`)."""
        return [self.writer_id, self.inc, self.seq, self.offset, self.count]

    def __repr__(self) -> str:
        return f"Segment({self.offset}, {self.count}, {self.writer_id}, {self.inc}, {self.seq})"


def _seg_offset(s: Segment) -> int:
    return s.offset


def _seg_seq(s: Segment) -> int:
    return s.seq


@dataclass
class PartitionView:
    start: int | None = None
    frontier: int = 0
    forgotten_below: int = 0
    zero: Ident | None = None  # the record read at offset 0
    at: dict[int, Ident] = field(default_factory=dict)  # the records not in a segment, by offset
    reads_of: dict[Ident, list[int]] = field(default_factory=dict)  # ... and where each was read (canary only)
    epoch: int = 0
    # runs of records read once (record_run), by offset, and per writer incarnation by seq
    _segs: list[Segment] = field(default_factory=list, repr=False, compare=False)
    _by_writer: dict[tuple[int, int], list[Segment]] = field(default_factory=dict, repr=False, compare=False)
    # for the durable form, kept as the view changes: the runs of single records read once, per
    # chunk of offsets, until one of them changes; the records read at more than one offset; the
    # offsets holding a foreign record
    _doc_runs: ChunkRuns = field(default_factory=ChunkRuns, repr=False, compare=False)
    _multi: set[Ident] = field(default_factory=set, repr=False, compare=False)
    _foreign: set[int] = field(default_factory=set, repr=False, compare=False)
    # records left with offsets the horizon forgot only (a re-read removed the copy above it):
    # never visited by `forget` again, so kept as they are
    _forgotten: set[Ident] = field(default_factory=set, repr=False, compare=False)

    # -- questions -------------------------------------------------------------------------

    def ident_at(self, off: int) -> Ident | None:
        """The record this view holds at ``off`` (None: none, or forgotten)."""
        got = self.at.get(off)
        if got is not None or not self._segs:
            return got
        s = self._seg_at(off)
        return None if s is None else s.ident(off)

    def held(self, off: int) -> Ident | None:
        """What the view holds at ``off`` (offset 0 is remembered beyond the horizon)."""
        return self.zero if off == 0 and self.start == 0 else self.ident_at(off)

    def offsets_of(self, ident: Ident) -> list[int] | None:
        """The offsets a canary record was read at (a copy: None when never read, or forgotten)."""
        got = self.reads_of.get(ident)
        if got is not None:
            return list(got)
        s = self._seg_of(ident) if self._segs else None
        return None if s is None else [s.offset + ident[2] - s.seq]

    def was_read(self, ident: Ident) -> bool:
        return ident in self.reads_of or (bool(self._segs) and self._seg_of(ident) is not None)

    def records(self) -> int:
        """How many offsets with a record this view remembers."""
        return len(self.at) + sum(s.count for s in self._segs)

    def contents(self) -> tuple[dict[int, Ident], dict[Ident, list[int]]]:
        """Every record held, by offset, and every canary record's offsets, whatever form they are
        kept in (for comparisons; walks the whole view)."""
        at, reads = dict(self.at), {i: list(o) for i, o in self.reads_of.items()}
        for s in self._segs:
            for i in range(s.count):
                ident = (s.writer_id, s.inc, s.seq + i)
                at[s.offset + i] = ident
                reads[ident] = [s.offset + i]
        return at, reads

    def agrees_with_run(self, off: int, count: int, writer_id: int, inc: int, seq: int) -> bool:
        """Whether every offset of ``[off, off + count)`` holds either nothing or the run's record
        there, ``(writer_id, inc, seq + i)`` at ``off + i``."""
        end = off + count
        if self.start is None or off >= self.frontier:
            return True
        if self.at and not self.at.keys().isdisjoint(range(off, min(end, self.frontier))):
            for o in range(off, min(end, self.frontier)):
                got = self.at.get(o)
                if got is not None and got != (writer_id, inc, seq + o - off):
                    return False
        if self._segs:
            i = max(0, bisect.bisect_right(self._segs, off, key=_seg_offset) - 1)
            while i < len(self._segs) and self._segs[i].offset < end:
                s = self._segs[i]
                if s.end > off and not (s.writer_id == writer_id and s.inc == inc
                                        and s.seq - s.offset == seq - off):
                    return False
                i += 1
        return True

    def segment_covering(self, off: int) -> Segment | None:
        return self._seg_at(off) if self._segs else None

    def remembers(self, off: int) -> bool:
        """Whether ``off`` was read and is still remembered (offset 0 always is, once read)."""
        if self.start is None or off >= self.frontier:
            return False
        return off >= max(self.start, self.forgotten_below) or (off == 0 and self.start == 0)

    def _seg_at(self, off: int) -> Segment | None:
        i = bisect.bisect_right(self._segs, off, key=_seg_offset) - 1
        if i >= 0:
            s = self._segs[i]
            if off < s.offset + s.count:
                return s
        return None

    def _seg_of(self, ident: Ident) -> Segment | None:
        segs = self._by_writer.get((ident[0], ident[1]))
        if not segs:
            return None
        i = bisect.bisect_right(segs, ident[2], key=_seg_seq) - 1
        if i >= 0:
            s = segs[i]
            if ident[2] < s.seq + s.count:
                return s
        return None

    # -- reads -----------------------------------------------------------------------------

    def record_run(self, off: int, count: int, writer_id: int, inc: int, seq: int) -> None:
        """A first read of ``count`` canary records ``(writer_id, inc, seq + i)`` at ``off + i``
        (``off`` at or above the frontier), none of which this view holds: kept as one segment."""
        if self.start is None:
            self.start = off
        if off == 0:
            self.zero = (writer_id, inc, seq)
        self.frontier = off + count
        last = self._segs[-1] if self._segs else None
        if (last is not None and last.writer_id == writer_id and last.inc == inc and last.end == off
                and last.seq + last.count == seq):
            last.count += count
            return
        s = Segment(off, count, writer_id, inc, seq)
        self._segs.append(s)
        segs = self._by_writer.setdefault((writer_id, inc), [])
        if segs and segs[-1].seq > seq:
            segs.insert(bisect.bisect_right(segs, seq, key=_seg_seq), s)
        else:
            segs.append(s)

    def record(self, off: int, ident: Ident) -> tuple[list[int] | None, bool]:
        """Note a first read of offset ``off`` (at or above the frontier).

        Returns the offsets this canary record was read at before (None for a first read of the
        record, or a foreign one) and whether the record was read at a new offset now.
        """
        if self.start is None:
            self.start = off
        if off == 0:
            self.zero = ident
        self._explode_ident(ident)
        self.at[off] = ident
        self.frontier = off + 1
        return self._add(off, ident)

    def _add(self, off: int, ident: Ident) -> tuple[list[int] | None, bool]:
        """``ident`` now at ``off`` in ``at``: the index of where records were read follows."""
        if not is_canary(ident):
            self._foreign.add(off)
            return None, False
        self._foreign.discard(off)
        prev = self.reads_of.get(ident)
        self._doc_runs.changed(off)
        if prev is None:
            self.reads_of[ident] = [off]
            return None, True
        if off in prev:
            return list(prev), False
        for o in prev:  # read at one offset no more
            self._doc_runs.changed(o)
        prev.append(off)
        prev.sort()
        self._multi.add(ident)
        self._forgotten.discard(ident)
        return list(prev), True

    def _drop(self, off: int, ident: Ident) -> None:
        offs = self.reads_of.get(ident)
        if offs is not None and off in offs:
            for o in offs:  # the offset that stays may be the record's only one now
                self._doc_runs.changed(o)
            offs.remove(off)
            if len(offs) < 2:
                self._multi.discard(ident)
            if not offs:
                del self.reads_of[ident]
            elif max(offs) < self.forgotten_below:
                self._forgotten.add(ident)

    def replace(self, off: int, ident: Ident) -> Ident | None:
        """A re-read found ``ident`` at ``off`` (below the frontier); returns what the view held
        there before (None: nothing, e.g. an offset this reader passed without a record)."""
        self._explode_at(off)
        old = self.held(off)
        if old == ident:
            return old
        self._explode_ident(ident)
        if old is not None:
            self._drop(off, old)
        if off == 0:
            self.zero = ident
        if off >= self.forgotten_below:
            self.at[off] = ident
            self._add(off, ident)
        return old

    def remove(self, off: int) -> Ident | None:
        """A re-read covering ``off`` returned nothing there: what the view held is gone."""
        self._explode_at(off)
        old = self.held(off)
        self.at.pop(off, None)
        self._foreign.discard(off)
        if old is not None:
            self._drop(off, old)
            if off == 0:
                self.zero = None
        return old

    # -- segments into single records ------------------------------------------------------

    def _explode_at(self, off: int) -> None:
        if self._segs:
            s = self._seg_at(off)
            if s is not None:
                self._explode(s)

    def _explode_ident(self, ident: Ident) -> None:
        if self._segs and is_canary(ident) and ident not in self.reads_of:
            s = self._seg_of(ident)
            if s is not None:
                self._explode(s)

    def _explode(self, s: Segment) -> None:
        """The segment's records kept one by one from now on."""
        self._segs.pop(bisect.bisect_left(self._segs, s.offset, key=_seg_offset))
        segs = self._by_writer[(s.writer_id, s.inc)]
        segs.pop(bisect.bisect_left(segs, s.seq, key=_seg_seq))
        if not segs:
            del self._by_writer[(s.writer_id, s.inc)]
        for i in range(s.count):
            off, ident = s.offset + i, (s.writer_id, s.inc, s.seq + i)
            self.at[off] = ident
            self.reads_of[ident] = [off]
        for c in range(s.offset // self._doc_runs.size, (s.end - 1) // self._doc_runs.size + 1):
            self._doc_runs.changed(c * self._doc_runs.size)

    # -- horizon ---------------------------------------------------------------------------

    def forget(self, horizon: int) -> None:
        """Forget offsets more than ``horizon`` behind the frontier."""
        cut = self.frontier - horizon
        if cut <= self.forgotten_below:
            return
        lo = max(self.forgotten_below, self.start or 0)
        below = range(lo, cut) if cut - lo <= len(self.at) else sorted(o for o in self.at if o < cut)
        for off in below:
            ident = self.at.pop(off, None)
            if ident is not None:
                seen = self.reads_of.get(ident)
                if seen is not None and max(seen) < cut:
                    del self.reads_of[ident]
                    self._multi.discard(ident)
        while self._segs and self._segs[0].offset < cut:
            s = self._segs[0]
            if s.end <= cut:
                self._segs.pop(0)
                segs = self._by_writer[(s.writer_id, s.inc)]
                segs.pop(bisect.bisect_left(segs, s.seq, key=_seg_seq))
                if not segs:
                    del self._by_writer[(s.writer_id, s.inc)]
            else:
                shift = cut - s.offset
                s.offset, s.count, s.seq = cut, s.count - shift, s.seq + shift
                break
        self.forgotten_below = cut
        self._doc_runs.changed_below(cut)
        if self._foreign:
            self._foreign = {off for off in self._foreign if off >= cut}

    # -- durable form ----------------------------------------------------------------------

    def to_doc(self) -> dict[str, Any]:
        """Every canary record with all offsets it was read at: ``read_runs`` (run-length form,
        :mod:`invariants.doc_runs`) those read at one offset, ``reads`` the others; ``at`` is rebuilt
        from them: its canary entries are exactly those offsets not yet forgotten."""
        if keeping():
            multi, foreign = sorted(self._multi), sorted(self._foreign)
            lo = self.frontier if self.start is None else max(self.start, self.forgotten_below)
            runs = self._doc_runs.runs(lo, self.frontier, self._read_once_in)
            below = [(*ident, offs[0]) for ident in self._forgotten
                     if len(offs := self.reads_of.get(ident, ())) == 1 and offs[0] < lo]
            if below:
                runs = merge_runs(runs + pack_runs(below))
            if sum(r[4] for r in runs) != len(self.reads_of) - len(multi):  # (never seen: the walk, to be exact)
                runs = self._read_once_runs()
        else:  # from the index itself
            multi = sorted(ident for ident, offs in self.reads_of.items() if len(offs) != 1)
            foreign = sorted(off for off, ident in self.at.items() if not is_canary(ident))
            runs = self._read_once_runs()
        if self._segs:
            runs = merge_runs(runs + [s.run() for s in self._segs])
        return {"start": self.start, "frontier": self.frontier, "forgotten_below": self.forgotten_below,
                "zero": None if self.zero is None else list(self.zero), "epoch": self.epoch,
                "read_runs": runs, "reads": [[*ident, *self.reads_of[ident]] for ident in multi],
                "foreign": [[off, *self.at[off][1:]] for off in foreign]}

    def _read_once_runs(self) -> list[list]:
        """The runs of every single canary record read at one offset only, from a walk of the index."""
        return pack_runs([(*ident, offs[0]) for ident, offs in self.reads_of.items() if len(offs) == 1])

    def _read_once_in(self, lo: int, hi: int) -> list[tuple]:
        """``(writer_id, inc, seq, offset)`` of the single canary records read at one offset only, in [lo, hi)."""
        rows = []
        offsets: Iterator[int] | range = range(lo, hi) if hi - lo <= len(self.at) else \
            iter(sorted(o for o in self.at if lo <= o < hi))
        for off in offsets:
            ident = self.at.get(off)
            if ident is not None and is_canary(ident):
                offs = self.reads_of.get(ident)
                if offs is not None and len(offs) == 1 and offs[0] == off:
                    rows.append((*ident, off))
        return rows

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> "PartitionView":
        v = cls(d["start"], d["frontier"], d["forgotten_below"], None if d["zero"] is None else tuple(d["zero"]),
                epoch=d["epoch"])
        for wid, inc, seq, off, n in sorted(d.get("read_runs", ()), key=lambda r: r[3]):
            if off >= v.forgotten_below:  # read once, remembered: a segment again
                v._segs.append(Segment(off, n, wid, inc, seq))
            else:
                for wid_, inc_, seq_, off_ in unpack_runs([[wid, inc, seq, off, n]]):
                    v._add_loaded((wid_, inc_, seq_), [off_])
        for s in v._segs:
            segs = v._by_writer.setdefault((s.writer_id, s.inc), [])
            segs.append(s)
        for segs in v._by_writer.values():
            segs.sort(key=_seg_seq)
        for wid, inc, seq, *offs in d["reads"]:
            v._add_loaded((wid, inc, seq), offs)
        for off, *digest in d["foreign"]:
            v.at[off] = ("x", *digest)
            v._foreign.add(off)
        return v

    def _add_loaded(self, ident: Ident, offs: list[int]) -> None:
        self.reads_of[ident] = offs
        if len(offs) > 1:
            self._multi.add(ident)
        if max(offs) < self.forgotten_below:
            self._forgotten.add(ident)
        for off in offs:
            if off >= self.forgotten_below:
                self.at[off] = ident
