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

**Confirmed before counted.** Both rest on records read at two or more offsets, and what a reader
hands over may predate a rewrite of the log: a record read in an earlier batch, or one Spark's
consumer fetched for an earlier batch and served with this one (measured on the local cluster: a
wiped partition's old tail, served after the new log's records at lower offsets were read again,
gave 16 reorders the final log does not hold). So every such verdict is counted only once each of
its offsets was read again by a later read and still holds what the verdict says
(:mod:`invariants.confirm`): a truncated leader's record read once, and its retry appended
elsewhere by the new leader, is not a duplicate. A re-read that does not come before the horizon
forgets those offsets leaves the verdict to what the view holds then.

**Classes.** ``guaranteed`` for an idempotent writer on a topic without unclean election, else
``at_risk`` (:mod:`invariants.promises`). Judged for writers the ledger announced (their ``start``
or a ``checkpoint``): a verdict on records of a writer not announced yet waits for it, so it is
classed by what the writer said it does.

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

    def __init__(self, class_of: Callable[[Writer], WriteClass | None] = lambda _w: UNKNOWN_CLASS) -> None:
        self.class_of = class_of
        self.max_seq: dict[ViewKey, dict[Writer, tuple[int, int]]] = {}  # writer -> (seq, offset)
        self.duplicates: dict[ViewKey, set[Ident]] = {}
        self.candidates = Pending()
        self.parked: list[tuple[ViewKey, tuple]] = []  # confirmed, waiting for the writer's announcement

    def on_read(self, key: ViewKey, v: PartitionView, off: int, ident: Ident, prev: list[int] | None,
                new_offset: bool) -> None:
        """A canary record read at ``off`` for the first time at this offset; ``prev``: the offsets it
        is read at now (None for its first read). Its verdicts wait to be confirmed (:meth:`_confirm`)."""
        if new_offset and prev is not None and len(prev) >= 2:
            self._duplicate(key, v, ident, prev)
        writer, seq = (ident[0], ident[1]), ident[2]
        tops = self.max_seq.setdefault(key, {})
        top = tops.get(writer)
        if is_reorder(seq, None if top is None else top[0], prev is None):
            self._confirm(key, v, [off, top[1]], ("reorder", ident, off, top[1], top[0]))
        if top is None or seq > top[0]:
            tops[writer] = (seq, off)

    def on_plain_run(self, key: ViewKey, writer: Writer, last_seq: int, last_offset: int) -> None:
        """A run of first reads above the writer's highest seq (:meth:`Checker._plain_run`): what
        :meth:`on_read` does for each of its records — nothing but raise the highest seq."""
        self.max_seq.setdefault(key, {})[writer] = (last_seq, last_offset)

    def on_reread(self, key: ViewKey, v: PartitionView, new: list[tuple[int, Ident]], lo: int) -> None:
        """Records a re-read of [lo, ...) found where the view held something else, in offset order:
        duplicates, and reorders against the writer's records at lower offsets of the view (to be
        confirmed, as every verdict of this family)."""
        if not new:
            return
        running: dict[Writer, tuple[int, int]] = {}  # writer -> (highest seq below, its offset)
        floor = max(v.start or 0, v.forgotten_below)
        for off in range(lo - 1, floor - 1, -1):
            ident = v.ident_at(off)
            if ident is not None and ident[0] != "x":
                w = (ident[0], ident[1])
                if ident[2] > running.get(w, (-1, -1))[0]:
                    running[w] = (ident[2], off)
        for off, ident in new:
            offs = v.offsets_of(ident) or []
            if len(offs) >= 2:
                self._duplicate(key, v, ident, offs)
            w, seq = (ident[0], ident[1]), ident[2]
            top = running.get(w)
            if top is not None and top[0] > seq and offs == [off]:
                self._confirm(key, v, [off, top[1]], ("reorder", ident, off, top[1], top[0]))
            if top is None or seq > top[0]:
                running[w] = (seq, off)
            tops = self.max_seq.setdefault(key, {})
            if w not in tops or seq > tops[w][0]:
                tops[w] = (seq, off)

    def _duplicate(self, key: ViewKey, v: PartitionView, ident: Ident, offsets: list[int]) -> None:
        if ident not in self.duplicates.get(key, ()):
            self._confirm(key, v, offsets, ("duplicate", ident))

    def _confirm(self, key: ViewKey, v: PartitionView, offsets: list[int], data: tuple) -> None:
        """A verdict resting on what was read at ``offsets``: judged again once every one of them was
        read again by a later read than the one being applied (:meth:`judge_ready`)."""
        self.candidates.add(key, [(o, o + 1) for o in offsets], v.epoch + 1, data)

    def _count(self, key: ViewKey, v: PartitionView, data: tuple) -> list[Violation]:
        """A confirmed verdict: counted, classed by its writer — or parked until the ledger announces it."""
        ident = tuple(data[1])
        cls = self.class_of((ident[0], ident[1]))
        if cls is None:
            self.parked.append((key, data))
            return []
        if data[0] == "duplicate":
            counted = self.duplicates.setdefault(key, set())
            if ident in counted or len(v.offsets_of(ident) or ()) < 2:  # (parked: a re-read may have removed a copy)
                return []
            counted.add(ident)
            return [Violation(Invariant.DUPLICATE, key.iso, key.topic_id, key.partition, tuple(v.offsets_of(ident)),
                              (ident[0], ident[1]), ident[2], durability=cls.order.durability,
                              reason=cls.order.reason, writer_name=cls.writer)]
        off, top = data[2], data[4]
        return [Violation(Invariant.REORDER, key.iso, key.topic_id, key.partition, (off,), (ident[0], ident[1]),
                          ident[2], detail=f"seq {ident[2]} after seq {top}", durability=cls.order.durability,
                          reason=cls.order.reason, writer_name=cls.writer)]

    def judge_ready(self, view: Callable[[ViewKey], PartitionView]) -> list[Violation]:
        """Verdicts whose earlier offsets were read again: counted if the fresh view still shows them."""
        out: list[Violation] = []
        for c in self.candidates.take_ready():
            out += self._judge(c.key, view(c.key), c.data)
        parked, self.parked = self.parked, []
        for key, data in parked:
            out += self._count(key, view(key), data)
        return out

    def _judge(self, key: ViewKey, v: PartitionView, data: tuple) -> list[Violation]:
        """A verdict counted if the view still shows it."""
        ident = tuple(data[1])
        if data[0] == "duplicate":
            return self._count(key, v, data) if len(v.offsets_of(ident) or ()) >= 2 else []
        _, _, off, top_off, top_seq = data
        if v.ident_at(off) == ident and v.ident_at(top_off) == (ident[0], ident[1], top_seq):
            return self._count(key, v, data)
        return []

    def judge_unconfirmed(self, key: ViewKey, v: PartitionView, cut: int) -> list[Violation]:
        """Candidates resting on offsets below ``cut``, which the view is about to forget: judged on
        what it holds now (a re-read did not come within the horizon)."""
        out: list[Violation] = []
        for c in self.candidates.forget_below(key, cut):
            out += self._judge(key, v, c.data)
        return out

    def forget(self, key: ViewKey, v: PartitionView) -> None:
        counted = self.duplicates.get(key)
        if counted:
            self.duplicates[key] = {i for i in counted if v.was_read(i)}
        self.candidates.forget_below(key, v.forgotten_below)
        self.parked = [(k, d) for k, d in self.parked if k != key or _remembered(v, d)]

    def forget_topic(self, topic_id: str) -> None:
        """A topic ID that is gone: nothing of it is judged any more."""
        for table in (self.max_seq, self.duplicates):
            for key in [k for k in table if k.topic_id == topic_id]:
                del table[key]
        self.candidates.items = [c for c in self.candidates.items if c.key.topic_id != topic_id]
        self.parked = [(k, d) for k, d in self.parked if k.topic_id != topic_id]

    def to_doc(self) -> dict[str, Any]:
        return {"max_seq": [[key.to_doc(), [[wid, inc, s, o] for (wid, inc), (s, o) in tops.items()]]
                            for key, tops in self.max_seq.items()],
                "duplicates": [[key.to_doc(), [list(i) for i in ids]] for key, ids in self.duplicates.items()],
                "candidates": self.candidates.to_doc(_data_doc),
                "parked": [[k.to_doc(), _data_doc(d)] for k, d in self.parked]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], class_of: Callable[[Writer], WriteClass]) -> "SequenceFamily":
        fam = cls(class_of)
        for key, tops in doc["max_seq"]:
            fam.max_seq[ViewKey.from_doc(key)] = {(wid, inc): (s, o) for wid, inc, s, o in tops}
        for key, ids in doc["duplicates"]:
            fam.duplicates[ViewKey.from_doc(key)] = {tuple(i) for i in ids}
        fam.candidates = Pending.from_doc(doc["candidates"], lambda d: tuple(d))
        fam.parked = [(ViewKey.from_doc(k), tuple(d)) for k, d in doc["parked"]]
        return fam


def _remembered(v: PartitionView, data: tuple) -> bool:
    """Whether the view still remembers what a parked verdict rests on."""
    if data[0] == "duplicate":
        return v.was_read(tuple(data[1]))
    return data[2] >= v.forgotten_below


def _data_doc(d: tuple) -> list:
    return [d[0], *[list(x) if isinstance(x, tuple) else x for x in d[1:]]]
