"""The acked-writes family's per-view state (:mod:`invariants.acked_writes` holds the spec and
the verdicts): the expected writes not judged yet, those waiting inside the settle window, and
those judged fine, each with its durable form."""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from invariants.doc_runs import DOC_CHUNK, keeping, merge_runs, pack_runs
from invariants.model import Ident, WriteKey
from invariants.promises import ClassTable, WriteClass


@dataclass(order=True)
class ExpectedRun:
    """Expected acked writes not judged yet: seq ``first_seq + i`` at ``first_offset + i``."""

    first_offset: int
    count: int = field(compare=False)
    writer_id: int = field(compare=False)
    inc: int = field(compare=False)
    first_seq: int = field(compare=False)
    done_ts_us: int = field(compare=False)
    late_below: int = field(compare=False)  # the reader's frontier when the ack arrived
    cls: WriteClass = field(compare=False)

    @classmethod
    def from_doc(cls, d: list, t: ClassTable) -> "ExpectedRun":
        """The saved form, as :meth:`AckedState.to_doc` writes it: the fields in order, the class a reference."""
        return cls(*d[:7], t.get(d[7]))


@dataclass
class Judged:
    """A write whose verdict rests on the view: where it was acked, whether that was late, its class."""

    acked_at: int
    late_below: int
    cls: WriteClass

    def to_doc(self, t: ClassTable) -> list:
        return [self.acked_at, self.late_below, t.ref(self.cls)]

    @classmethod
    def from_doc(cls, d: list, t: ClassTable) -> "Judged":
        return cls(d[0], d[1], t.get(d[2]))


class PlacedRun:
    """``count`` writes ``(writer_id, inc, seq + i)`` read where they were acked, at ``acked_at + i``."""

    __slots__ = ("acked_at", "count", "writer_id", "inc", "seq", "late_below", "cls")

    def __init__(self, acked_at: int, count: int, writer_id: int, inc: int, seq: int, late_below: int,
                 cls: WriteClass) -> None:
        self.acked_at, self.count, self.writer_id, self.inc, self.seq = acked_at, count, writer_id, inc, seq
        self.late_below, self.cls = late_below, cls

    def judged(self, seq: int) -> Judged:
        return Judged(self.acked_at + seq - self.seq, self.late_below, self.cls)


def _run_seq(r: PlacedRun) -> int:
    return r.seq


class PlacedWrites:
    """Writes read where they were acked, by record (a mapping ``Ident -> Judged``). Kept in two
    forms that answer alike: runs of writes placed together (:meth:`add_run`, one writer's seqs and
    offsets both rising), and single writes, grouped by chunk of acked offsets
    (:mod:`invariants.doc_runs`) so the durable form repacks only the chunks that changed since the
    last save, and the horizon drops whole chunks. A run one of whose writes is set or deleted
    becomes single writes first."""

    def __init__(self, size: int = DOC_CHUNK) -> None:
        self.size = size
        self._by_ident: dict[Ident, Judged] = {}
        self._chunks: dict[int, dict[Ident, Judged]] = {}  # acked offset // size -> its writes
        self._runs: dict[int, list[list]] = {}  # chunk -> runs with local class numbers, until it changes
        self._classes = ClassTable()  # the local class numbers (the saved document has its own)
        self._placed_runs: dict[tuple[int, int], list[PlacedRun]] = {}  # per writer, by seq (and offset)
        self._in_runs = 0
        self._singles_of: Counter[tuple[int, int]] = Counter()  # single writes per writer

    def _run_of(self, ident: Ident) -> PlacedRun | None:
        runs = self._placed_runs.get((ident[0], ident[1]))
        if not runs:
            return None
        i = bisect.bisect_right(runs, ident[2], key=_run_seq) - 1
        if i >= 0 and ident[2] < runs[i].seq + runs[i].count:
            return runs[i]
        return None

    def get(self, ident: Ident) -> Judged | None:
        got = self._by_ident.get(ident)
        if got is not None or not self._in_runs:
            return got
        r = self._run_of(ident)
        return None if r is None else r.judged(ident[2])

    def __contains__(self, ident: object) -> bool:
        return self.get(ident) is not None  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._by_ident) + self._in_runs

    def __iter__(self) -> Iterator[Ident]:
        return (ident for ident, _j in self.items())

    def items(self) -> Iterable[tuple[Ident, Judged]]:
        out = list(self._by_ident.items())
        for runs in self._placed_runs.values():
            for r in runs:
                out += [((r.writer_id, r.inc, r.seq + i), Judged(r.acked_at + i, r.late_below, r.cls))
                        for i in range(r.count)]
        return out

    def add_run(self, acked_at: int, count: int, writer_id: int, inc: int, seq: int, late_below: int,
                cls: WriteClass) -> None:
        """``count`` writes read where acked: as ``self[(writer_id, inc, seq + i)] = Judged(acked_at + i,
        late_below, cls)`` each."""
        runs = self._placed_runs.get((writer_id, inc))
        last = runs[-1] if runs else None
        if ((last is not None and (last.seq + last.count > seq or last.acked_at + last.count > acked_at))
                or (self._singles_of[(writer_id, inc)]
                    and any((writer_id, inc, seq + i) in self._by_ident for i in range(count)))):
            for i in range(count):  # not above the writer's runs, or placed before: one by one
                self[(writer_id, inc, seq + i)] = Judged(acked_at + i, late_below, cls)
            return
        if (last is not None and last.seq + last.count == seq and last.acked_at + last.count == acked_at
                and last.late_below == late_below and last.cls is cls):
            last.count += count
        else:
            self._placed_runs.setdefault((writer_id, inc), []).append(
                PlacedRun(acked_at, count, writer_id, inc, seq, late_below, cls))
        self._in_runs += count

    def _explode(self, r: PlacedRun) -> None:
        runs = self._placed_runs[(r.writer_id, r.inc)]
        runs.pop(bisect.bisect_left(runs, r.seq, key=_run_seq))
        if not runs:
            del self._placed_runs[(r.writer_id, r.inc)]
        self._in_runs -= r.count
        for i in range(r.count):
            self._set_single((r.writer_id, r.inc, r.seq + i), r.judged(r.seq + i))

    def __setitem__(self, ident: Ident, j: Judged) -> None:
        if self._in_runs and (r := self._run_of(ident)) is not None:
            self._explode(r)
        if ident in self._by_ident:
            del self[ident]
        self._set_single(ident, j)

    def _set_single(self, ident: Ident, j: Judged) -> None:
        self._by_ident[ident] = j
        self._singles_of[(ident[0], ident[1])] += 1
        c = j.acked_at // self.size
        self._chunks.setdefault(c, {})[ident] = j
        self._runs.pop(c, None)

    def __delitem__(self, ident: Ident) -> None:
        if self._in_runs and ident not in self._by_ident and (r := self._run_of(ident)) is not None:
            self._explode(r)
        j = self._by_ident.pop(ident)
        w = (ident[0], ident[1])
        self._singles_of[w] -= 1
        if not self._singles_of[w]:
            del self._singles_of[w]
        c = j.acked_at // self.size
        chunk = self._chunks[c]
        del chunk[ident]
        if not chunk:
            del self._chunks[c]
        self._runs.pop(c, None)

    def drop_below(self, cut: int) -> None:
        """Forget the writes acked below ``cut``."""
        for c in [c for c in self._chunks if c * self.size < cut]:
            if (c + 1) * self.size <= cut:
                for ident in self._chunks.pop(c):
                    del self._by_ident[ident]
                    w = (ident[0], ident[1])
                    self._singles_of[w] -= 1
                    if not self._singles_of[w]:
                        del self._singles_of[w]
                self._runs.pop(c, None)
            else:
                for ident in [i for i, j in self._chunks[c].items() if j.acked_at < cut]:
                    del self[ident]
        for w in list(self._placed_runs):
            runs = self._placed_runs[w]
            while runs and runs[0].acked_at < cut:  # a writer's runs rise in offset as in seq
                r = runs[0]
                if r.acked_at + r.count <= cut:
                    runs.pop(0)
                    self._in_runs -= r.count
                else:
                    shift = cut - r.acked_at
                    r.acked_at, r.count, r.seq = cut, r.count - shift, r.seq + shift
                    self._in_runs -= shift
                    break
            if not runs:
                del self._placed_runs[w]

    def runs(self, t: ClassTable) -> list[list]:
        """``[writer_id, inc, first_seq, acked_at, count, late_below, class ref]`` runs
        (:func:`invariants.doc_runs.pack_runs`) of every write, class refs from ``t``."""
        out = []
        numbers: dict[int, int] = {}  # id(class) -> its number: hashing a class per write is most of the cost

        def number(cls: WriteClass) -> int:
            n = numbers.get(id(cls))
            if n is None:
                n = numbers[id(cls)] = self._classes.ref(cls)
            return n

        for c, chunk in self._chunks.items():
            got = self._runs.get(c) if keeping() else None
            if got is None:
                got = self._runs[c] = pack_runs((wid, inc, seq, j.acked_at, j.late_below, number(j.cls))
                                                for (wid, inc, seq), j in chunk.items())
            out.extend(got)
        for runs in self._placed_runs.values():
            out.extend([r.writer_id, r.inc, r.seq, r.acked_at, r.count, r.late_below, number(r.cls)] for r in runs)
        refs: dict[int, int] = {}  # in the order of the sorted runs: the same document whatever the chunks' order

        def ref(n: int) -> int:
            r = refs.get(n)
            if r is None:
                r = refs[n] = t.ref(self._classes.get(n))
            return r

        return [[*run[:6], ref(run[6])] for run in merge_runs(out)]


@dataclass
class AckedState:
    """One view's expected writes not judged yet, and those judged fine (a rewrite may undo that)."""

    pending: list[ExpectedRun] = field(default_factory=list)  # a heap by first offset
    waiting: dict[WriteKey, Judged] = field(default_factory=dict)  # missing at their offset, inside the window
    waiting_heap: list[tuple[int, WriteKey]] = field(default_factory=list)  # (deadline offset, write)
    zero_wait: dict[WriteKey, WriteClass] = field(default_factory=dict)  # bogus zero acks not read anywhere yet
    placed: PlacedWrites = field(default_factory=PlacedWrites)  # read where acked (within the horizon)
    last_pushed: ExpectedRun | None = field(default=None, repr=False, compare=False)  # still in pending: may grow

    def to_doc(self, t: ClassTable) -> dict[str, Any]:
        ref = t.ref  # (ExpectedRun.to_doc inline: some hundred thousand runs wait early in a catch-up)
        return {"pending": [[r.first_offset, r.count, r.writer_id, r.inc, r.first_seq, r.done_ts_us, r.late_below,
                             ref(r.cls)] for r in self.pending],
                "waiting": [[*w, *j.to_doc(t)] for w, j in self.waiting.items()],
                "zero_wait": [[*w, t.ref(c)] for w, c in self.zero_wait.items()],
                "placed_runs": self.placed.runs(t)}

    @classmethod
    def from_doc(cls, d: dict[str, Any], settle: int, t: ClassTable) -> "AckedState":
        st = cls([ExpectedRun.from_doc(r, t) for r in d["pending"]])
        heapq.heapify(st.pending)
        for row in d["waiting"]:
            wkey, j = WriteKey(*row[:5]), Judged.from_doc(row[5:], t)
            st.waiting[wkey] = j
            st.waiting_heap.append((j.acked_at + settle, wkey))
        heapq.heapify(st.waiting_heap)
        st.zero_wait = {WriteKey(*row[:5]): t.get(row[5]) for row in d["zero_wait"]}
        for row in d.get("placed", ()):  # one row per write, as saved before runs
            st.placed[tuple(row[:3])] = Judged.from_doc(row[3:], t)
        for wid, inc, seq, acked_at, n, late_below, c in sorted(d.get("placed_runs", ()), key=lambda r: r[3]):
            st.placed.add_run(acked_at, n, wid, inc, seq, late_below, t.get(c))
        return st
