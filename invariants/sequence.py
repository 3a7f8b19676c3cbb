"""Sequence family: ``duplicate``, ``reorder``.

Judged per reader (``read_committed`` and ``read_uncommitted`` separately), per topic ID and
partition, over the canary records of the reader's current view of the log, in offset order.

**duplicate.** One write (writer, incarnation, partition, seq) present at two or more distinct
offsets of one reader's view: counted once per write, when its second offset is read. Without
idempotence a retry can legitimately duplicate (``at_risk``). Implies nothing else by itself.

**reorder.** Within one writer incarnation and partition, a record read for the first time
whose seq is lower than a seq of that writer at a lower offset: counted once per such record.
Writers assign seqs in send order per partition, so with idempotence the log order must match.
A duplicate re-read is not a reorder.

**Confirmed before counted.** Both rest on a record read earlier at another offset. If that
earlier read could predate a rewrite of the log (it was read in an earlier batch), the verdict
is counted only once that offset was read again and still holds what the verdict says
(:mod:`invariants.confirm`): a truncated leader's record read once, and its retry appended
elsewhere by the new leader, is not a duplicate.

**Classes.** ``guaranteed`` for an idempotent writer on a topic without unclean election, else
``at_risk`` (:mod:`invariants.promises`).

**Horizon.** Duplicates further apart than ``horizon_offsets`` are left to the audit (the
reader's index no longer remembers the first offset).
"""

from __future__ import annotations

from typing import Any, Callable

from invariants.catalog import Invariant
from invariants.confirm import Pending
from invariants.model import Ident, ViewKey, Violation
from invariants.promises import UNKNOWN_CLASS, WriteClass
from invariants.read_index import PartitionView

Writer = tuple[int, int]  # writer_id, incarnation


def is_reorder(seq: int, max_seq_before: int | None, first_read: bool) -> bool:
    """A first read of ``seq`` after a higher seq of the same writer at a lower offset."""
    return first_read and max_seq_before is not None and seq < max_seq_before


class SequenceFamily:
    """Per view, the highest seq read of each writer incarnation (and where), the writes already
    counted as duplicates, and the verdicts waiting for a fresh read."""

    def __init__(self, class_of: Callable[[Writer], WriteClass] = lambda _w: UNKNOWN_CLASS) -> None:
        self.class_of = class_of
        self.max_seq: dict[ViewKey, dict[Writer, tuple[int, int]]] = {}  # writer -> (seq, offset)
        self.duplicates: dict[ViewKey, set[Ident]] = {}
        self.candidates = Pending()

    def on_read(self, key: ViewKey, v: PartitionView, off: int, ident: Ident, prev: list[int] | None,
                new_offset: bool, fresh_from: int) -> list[Violation]:
        """A canary record read at ``off`` for the first time at this offset; ``prev``: the offsets it
        is read at now (None for its first read); offsets >= ``fresh_from`` were read in this call."""
        out: list[Violation] = []
        if new_offset and prev is not None and len(prev) >= 2:
            out += self._duplicate(key, v, ident, [o for o in prev if o != off and o < fresh_from])
        writer, seq = (ident[0], ident[1]), ident[2]
        tops = self.max_seq.setdefault(key, {})
        top = tops.get(writer)
        if is_reorder(seq, None if top is None else top[0], prev is None):
            if top[1] < fresh_from:
                self.candidates.add(key, [(top[1], top[1] + 1)], v.epoch, ("reorder", ident, off, top[1], top[0]))
            else:
                out.append(self._reorder(key, ident, off, top[0]))
        if top is None or seq > top[0]:
            tops[writer] = (seq, off)
        return out

    def on_reread(self, key: ViewKey, v: PartitionView, new: list[tuple[int, Ident]], lo: int) -> list[Violation]:
        """Records a re-read of [lo, ...) found where the view held something else, in offset order:
        duplicates, and reorders against the writer's records at lower offsets of the view."""
        out: list[Violation] = []
        below: dict[Writer, int] = {}
        floor = max(v.start or 0, v.forgotten_below)
        for off in range(lo - 1, floor - 1, -1):
            ident = v.at.get(off)
            if ident is not None and ident[0] != "x":
                w = (ident[0], ident[1])
                below[w] = max(below.get(w, -1), ident[2])
        running = dict(below)
        for off, ident in new:
            offs = v.reads_of.get(ident, [])
            if len(offs) >= 2:
                out += self._duplicate(key, v, ident, [o for o in offs if o != off and o < lo])
            w, seq = (ident[0], ident[1]), ident[2]
            if running.get(w, -1) > seq and offs == [off]:
                out.append(self._reorder(key, ident, off, running[w]))
            running[w] = max(running.get(w, -1), seq)
            tops = self.max_seq.setdefault(key, {})
            if w not in tops or seq > tops[w][0]:
                tops[w] = (seq, off)
        return out

    def _duplicate(self, key: ViewKey, v: PartitionView, ident: Ident, stale: list[int]) -> list[Violation]:
        counted = self.duplicates.setdefault(key, set())
        if ident in counted:
            return []
        if stale:  # the other copy was read in an earlier batch: it is counted once read again
            self.candidates.add(key, [(o, o + 1) for o in stale], v.epoch, ("duplicate", ident))
            return []
        counted.add(ident)
        cls = self.class_of((ident[0], ident[1]))
        return [Violation(Invariant.DUPLICATE, key.iso, key.topic_id, key.partition, tuple(v.reads_of[ident]),
                          (ident[0], ident[1]), ident[2], durability=cls.order.durability, reason=cls.order.reason,
                          writer_name=cls.writer)]

    def _reorder(self, key: ViewKey, ident: Ident, off: int, top: int) -> Violation:
        cls = self.class_of((ident[0], ident[1]))
        return Violation(Invariant.REORDER, key.iso, key.topic_id, key.partition, (off,), (ident[0], ident[1]),
                         ident[2], detail=f"seq {ident[2]} after seq {top}", durability=cls.order.durability,
                         reason=cls.order.reason, writer_name=cls.writer)

    def judge_ready(self, view: Callable[[ViewKey], PartitionView]) -> list[Violation]:
        """Verdicts whose earlier offsets were read again: counted if the fresh view still shows them."""
        out: list[Violation] = []
        for c in self.candidates.take_ready():
            v = view(c.key)
            if c.data[0] == "duplicate":
                ident = tuple(c.data[1])
                if len(v.reads_of.get(ident, ())) >= 2:
                    out += self._duplicate(c.key, v, ident, [])
            else:
                _, ident, off, top_off, top_seq = c.data
                ident = tuple(ident)
                if v.at.get(off) == ident and v.at.get(top_off) == (ident[0], ident[1], top_seq):
                    out.append(self._reorder(c.key, ident, off, top_seq))
        return out

    def forget(self, key: ViewKey, v: PartitionView) -> None:
        counted = self.duplicates.get(key)
        if counted:
            self.duplicates[key] = {i for i in counted if i in v.reads_of}
        self.candidates.forget_below(key, v.forgotten_below)

    def to_doc(self) -> dict[str, Any]:
        return {"max_seq": [[key.to_doc(), [[wid, inc, s, o] for (wid, inc), (s, o) in tops.items()]]
                            for key, tops in self.max_seq.items()],
                "duplicates": [[key.to_doc(), [list(i) for i in ids]] for key, ids in self.duplicates.items()],
                "candidates": self.candidates.to_doc(lambda d: [d[0], *[list(x) if isinstance(x, tuple) else x
                                                                         for x in d[1:]]])}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], class_of: Callable[[Writer], WriteClass]) -> "SequenceFamily":
        fam = cls(class_of)
        for key, tops in doc["max_seq"]:
            fam.max_seq[ViewKey.from_doc(key)] = {(wid, inc): (s, o) for wid, inc, s, o in tops}
        for key, ids in doc["duplicates"]:
            fam.duplicates[ViewKey.from_doc(key)] = {tuple(i) for i in ids}
        fam.candidates = Pending.from_doc(doc["candidates"], lambda d: tuple(d))
        return fam
