"""The acked-writes family's per-view state (:mod:`invariants.acked_writes` holds the spec and
the verdicts): the expected writes not judged yet, those waiting inside the settle window, and
those judged fine, each with its durable form."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from invariants.doc_runs import DOC_CHUNK, keeping, merge_runs, pack_runs, unpack_runs
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

    def to_doc(self, t: ClassTable) -> list:
        return [self.first_offset, self.count, self.writer_id, self.inc, self.first_seq, self.done_ts_us,
                self.late_below, t.ref(self.cls)]

    @classmethod
    def from_doc(cls, d: list, t: ClassTable) -> "ExpectedRun":
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


class PlacedWrites:
    """Writes read where they were acked, by record (a mapping ``Ident -> Judged``), also grouped by
    chunk of acked offsets (:mod:`invariants.doc_runs`): the durable form repacks only the chunks
    that changed since the last save, and the horizon drops whole chunks."""

    def __init__(self, size: int = DOC_CHUNK) -> None:
        self.size = size
        self._by_ident: dict[Ident, Judged] = {}
        self._chunks: dict[int, dict[Ident, Judged]] = {}  # acked offset // size -> its writes
        self._runs: dict[int, list[list]] = {}  # chunk -> runs with local class numbers, until it changes
        self._classes = ClassTable()  # the local class numbers (the saved document has its own)

    def get(self, ident: Ident) -> Judged | None:
        return self._by_ident.get(ident)

    def __contains__(self, ident: object) -> bool:
        return ident in self._by_ident

    def __len__(self) -> int:
        return len(self._by_ident)

    def __iter__(self) -> Iterator[Ident]:
        return iter(self._by_ident)

    def items(self) -> Iterable[tuple[Ident, Judged]]:
        return self._by_ident.items()

    def __setitem__(self, ident: Ident, j: Judged) -> None:
        if ident in self._by_ident:
            del self[ident]
        self._by_ident[ident] = j
        c = j.acked_at // self.size
        self._chunks.setdefault(c, {})[ident] = j
        self._runs.pop(c, None)

    def __delitem__(self, ident: Ident) -> None:
        j = self._by_ident.pop(ident)
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
                self._runs.pop(c, None)
            else:
                for ident in [i for i, j in self._chunks[c].items() if j.acked_at < cut]:
                    del self[ident]

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

    def to_doc(self, t: ClassTable) -> dict[str, Any]:
        return {"pending": [r.to_doc(t) for r in self.pending],
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
        rows = [*d.get("placed", ()), *unpack_runs(d.get("placed_runs", ()))]  # "placed": one row per write, as saved before
        for row in rows:
            st.placed[tuple(row[:3])] = Judged.from_doc(row[3:], t)
        return st
