"""What one reader has read of one partition: the shared index every family judges against.

Per reader (isolation level), topic ID and partition, a :class:`PartitionView` keeps the first
offset read (``start``), the ``frontier`` (highest offset read + 1), the record at offset 0,
which record sits at each offset read (``at``) and where each canary record was read
(``reads_of``). It is the reader's *current view* of the log: when a range is read again (Spark
resuming lower after a truncation, or the prober re-fetching a range on evidence of a
rewrite), :meth:`PartitionView.replace` and :meth:`PartitionView.remove` bring it up to date
and say what changed, so a rewritten log is compared, never ignored.

``epoch`` counts the reads applied to the view; a verdict that rests on offsets read in an
earlier read is only counted once those offsets have been read again (see
:mod:`invariants.confirm`).

Offsets more than ``horizon_offsets`` behind the frontier are forgotten (``start``,
``frontier`` and the record at offset 0 are kept), so the index is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from invariants.doc_runs import ChunkRuns, keeping, merge_runs, pack_runs, unpack_runs
from invariants.model import Ident, is_canary


@dataclass
class PartitionView:
    start: int | None = None
    frontier: int = 0
    forgotten_below: int = 0
    zero: Ident | None = None  # the record read at offset 0
    at: dict[int, Ident] = field(default_factory=dict)
    reads_of: dict[Ident, list[int]] = field(default_factory=dict)  # canary records only
    epoch: int = 0
    # for the durable form, kept as the view changes: the runs of records read once, per chunk of
    # offsets, until one of them changes; the records read at more than one offset; the offsets
    # holding a foreign record
    _doc_runs: ChunkRuns = field(default_factory=ChunkRuns, repr=False, compare=False)
    _multi: set[Ident] = field(default_factory=set, repr=False, compare=False)
    _foreign: set[int] = field(default_factory=set, repr=False, compare=False)
    # records left with offsets the horizon forgot only (a re-read removed the copy above it):
    # never visited by `forget` again, so kept as they are
    _forgotten: set[Ident] = field(default_factory=set, repr=False, compare=False)

    def record(self, off: int, ident: Ident) -> tuple[list[int] | None, bool]:
        """Note a first read of offset ``off`` (at or above the frontier).

        Returns the offsets this canary record was read at before (None for a first read of the
        record, or a foreign one) and whether the record was read at a new offset now.
        """
        if self.start is None:
            self.start = off
        if off == 0:
            self.zero = ident
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
            return prev, False
        for o in prev:  # read at one offset no more
            self._doc_runs.changed(o)
        prev.append(off)
        prev.sort()
        self._multi.add(ident)
        self._forgotten.discard(ident)
        return prev, True

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
        old = self.held(off)
        if old == ident:
            return old
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
        old = self.held(off)
        self.at.pop(off, None)
        self._foreign.discard(off)
        if old is not None:
            self._drop(off, old)
            if off == 0:
                self.zero = None
        return old

    def held(self, off: int) -> Ident | None:
        """What the view holds at ``off`` (offset 0 is remembered beyond the horizon)."""
        return self.zero if off == 0 and self.start == 0 else self.at.get(off)

    def forget(self, horizon: int) -> None:
        """Forget offsets more than ``horizon`` behind the frontier."""
        cut = self.frontier - horizon
        if cut <= self.forgotten_below:
            return
        for off in range(max(self.forgotten_below, self.start or 0), cut):
            ident = self.at.pop(off, None)
            if ident is not None:
                seen = self.reads_of.get(ident)
                if seen is not None and max(seen) < cut:
                    del self.reads_of[ident]
                    self._multi.discard(ident)
        self.forgotten_below = cut
        self._doc_runs.changed_below(cut)
        if self._foreign:
            self._foreign = {off for off in self._foreign if off >= cut}

    def remembers(self, off: int) -> bool:
        """Whether ``off`` was read and is still remembered (offset 0 always is, once read)."""
        if self.start is None or off >= self.frontier:
            return False
        return off >= max(self.start, self.forgotten_below) or (off == 0 and self.start == 0)

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
        return {"start": self.start, "frontier": self.frontier, "forgotten_below": self.forgotten_below,
                "zero": None if self.zero is None else list(self.zero), "epoch": self.epoch,
                "read_runs": runs, "reads": [[*ident, *self.reads_of[ident]] for ident in multi],
                "foreign": [[off, *self.at[off][1:]] for off in foreign]}

    def _read_once_runs(self) -> list[list]:
        """The runs of every canary record read at one offset only, from a walk of the whole index."""
        return pack_runs([(*ident, offs[0]) for ident, offs in self.reads_of.items() if len(offs) == 1])

    def _read_once_in(self, lo: int, hi: int) -> list[tuple]:
        """``(writer_id, inc, seq, offset)`` of the canary records read at one offset only, in [lo, hi)."""
        rows = []
        for off in range(lo, hi):
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
        for wid, inc, seq, *offs in [*d["reads"], *unpack_runs(d.get("read_runs", ()))]:
            ident = (wid, inc, seq)
            v.reads_of[ident] = offs
            if len(offs) > 1:
                v._multi.add(ident)
            if max(offs) < v.forgotten_below:
                v._forgotten.add(ident)
            for off in offs:
                if off >= v.forgotten_below:
                    v.at[off] = ident
        for off, *digest in d["foreign"]:
            v.at[off] = ("x", *digest)
            v._foreign.add(off)
        return v
