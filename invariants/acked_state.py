"""The acked-writes family's per-view state (:mod:`invariants.acked_writes` holds the spec and
the verdicts): the expected writes not judged yet, those waiting inside the settle window, and
those judged fine, each with its durable form."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Iterable

from invariants.doc_runs import pack_runs, unpack_runs
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


@dataclass
class AckedState:
    """One view's expected writes not judged yet, and those judged fine (a rewrite may undo that)."""

    pending: list[ExpectedRun] = field(default_factory=list)  # a heap by first offset
    waiting: dict[WriteKey, Judged] = field(default_factory=dict)  # missing at their offset, inside the window
    waiting_heap: list[tuple[int, WriteKey]] = field(default_factory=list)  # (deadline offset, write)
    zero_wait: dict[WriteKey, WriteClass] = field(default_factory=dict)  # bogus zero acks not read anywhere yet
    placed: dict[Ident, Judged] = field(default_factory=dict)  # read where acked (within the horizon)

    def to_doc(self, t: ClassTable) -> dict[str, Any]:
        return {"pending": [r.to_doc(t) for r in self.pending],
                "waiting": [[*w, *j.to_doc(t)] for w, j in self.waiting.items()],
                "zero_wait": [[*w, t.ref(c)] for w, c in self.zero_wait.items()],
                "placed_runs": pack_runs(self._placed_rows(t))}

    def _placed_rows(self, t: ClassTable) -> Iterable[tuple]:
        refs: dict[int, int] = {}  # id(class) -> its reference: hashing a class per write is most of the cost
        for (wid, inc, seq), j in self.placed.items():
            ref = refs.get(id(j.cls))
            if ref is None:
                ref = refs[id(j.cls)] = t.ref(j.cls)
            yield (wid, inc, seq, j.acked_at, j.late_below, ref)

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
        st.placed = {tuple(row[:3]): Judged.from_doc(row[3:], t) for row in rows}
        return st
