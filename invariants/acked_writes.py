"""Acked-writes family: ``lost_write``, ``unseen``, ``offset_mismatch``, ``zero_offset`` — where an
acknowledged write is, compared with where its acknowledgement says it is.

Judged per reader (``read_committed`` and ``read_uncommitted`` separately), per topic ID and
partition, over the records that reader returned, in offset order.

**Expected writes.** For ``read_uncommitted``: every ``acked`` write. For ``read_committed``:
acked writes outside transactions and acked writes of transactions whose commit returned
(``committed``). Writes of aborted or undecided transactions are judged by the transaction
family instead; ``failed``, ``indeterminate``, ``unconfirmed`` and ``pending`` writes are
never expected (they may or may not exist — *late is not lost*, and neither is *maybe*).

**lost_write.** An expected write acked at offset ``o`` is judged once the reader's frontier
(highest offset read + 1) is past ``o``: read at ``o`` → fine; read at another offset ``r``
with ``r <= o + H - 1`` → ``offset_mismatch``; else, once the frontier reaches ``o + H``
without it → ``lost_write``. ``H`` is the settle window (:class:`invariants.model.Settings`),
which lets a record that landed a few offsets away count as mismatched rather than lost.
Writes acked below the first offset the reader read, or below the partition's log start
offset when judged, are ``expired_unread`` — never violations (Jepsen's rule: only writes below
the highest offset read can be called lost). Cannot be inferred: the fate of writes above the
frontier. False positives: none from Kafka's documented behaviour; a writer that lies in its
ledger (a drill) or a ledger written by a different canary version. Implies: a truncated log
gives ``lost_write`` together with ``inconsistent_offset`` (the reused offsets) and, for
records re-appended later, ``offset_mismatch``.

**unseen.** A gauge, not a loss: expected writes acked more than a deadline ago that the
reader has not reached yet (frontier not past their offset).

**offset_mismatch.** An expected write acknowledged at offset ``o`` is read, but never at ``o``:
judged when the reader's frontier passes ``o`` and the write was read at some
``r <= o + H - 1`` (the settle window); for a write whose ack claimed a bogus offset 0
(``zero_offset``), any read of it counts. Counted once per write. A write read at ``o`` *and*
elsewhere is a ``duplicate``, not a mismatch. False positives: none from Kafka's documented
behaviour — the produce response's base offset is where the record is. Implies: usually a
truncation and re-append (with ``lost_write``/``inconsistent_offset`` nearby) or a broker
reporting wrong offsets.

**zero_offset.** A write acknowledged at offset 0 while this reader read a *different* record
at offset 0 of the same topic ID (the Jepsen "bogus offset 0" bug). Counted once per write,
judged once the reader has read offset 0. The write is then not judged ``lost_write`` (its
acked offset is meaningless) but is ``offset_mismatch`` when read anywhere. Cannot be
inferred: the log start offset *at ack time* (a legitimate ack at 0 followed by retention
looks the same as a bogus one afterwards), so a reader that never saw offset 0 counts such a
write ``expired_unread`` rather than guessing. Implies ``offset_mismatch`` once the record
is read.

**Horizon.** An ack that arrives when its offset is more than ``horizon_offsets`` behind the
reader's frontier can no longer be compared with what was read there: ``expired_unread``
(the audit's to judge).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Iterable

from invariants.catalog import Invariant
from invariants.model import Ident, Verdict, ViewKey, Violation, WriteKey
from invariants.read_index import PartitionView


def acked_write_verdict(acked_offset: int, read_offsets: Iterable[int], frontier: int, start: int | None,
                        settle: int, log_start: int = 0) -> Verdict:
    """The verdict on one expected write, given where this reader has read it so far.

    Stable: once decided, reading further (offsets at or above ``frontier``) cannot change it.
    """
    offsets = list(read_offsets)
    if acked_offset in offsets:
        return Verdict.OK
    if start is None or frontier <= acked_offset:
        return Verdict.UNDECIDED
    if acked_offset < start:
        return Verdict.EXPIRED
    if any(r <= acked_offset + settle - 1 for r in offsets):
        return Verdict.MISMATCH
    if frontier >= acked_offset + settle:
        return Verdict.EXPIRED if acked_offset < log_start else Verdict.LOST
    return Verdict.UNDECIDED


def bogus_zero_ack(acked_offset: int, ident: Ident, ident_at_zero: Ident | None) -> bool:
    """A write acked at 0 while the reader found another record at offset 0."""
    return acked_offset == 0 and ident_at_zero is not None and ident_at_zero != ident


@dataclass
class AckedState:
    """One view's expected writes not judged yet."""

    # runs of expected acked writes, a heap of (first_offset, count, writer_id, inc, first_seq, done_ts_us)
    pending: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    waiting: dict[WriteKey, int] = field(default_factory=dict)  # missing at their offset, inside the window
    waiting_heap: list[tuple[int, WriteKey]] = field(default_factory=list)  # (deadline offset, write)
    zero_wait: set[WriteKey] = field(default_factory=set)  # bogus zero acks not read anywhere yet

    def to_doc(self) -> dict[str, Any]:
        return {"pending": [list(r) for r in self.pending], "waiting": [[*w, o] for w, o in self.waiting.items()],
                "zero_wait": [list(w) for w in self.zero_wait]}

    @classmethod
    def from_doc(cls, d: dict[str, Any], settle: int) -> "AckedState":
        st = cls([tuple(r) for r in d["pending"]])
        heapq.heapify(st.pending)
        for *w, o in d["waiting"]:
            wkey = WriteKey(*w)
            st.waiting[wkey] = o
            st.waiting_heap.append((o + settle, wkey))
        heapq.heapify(st.waiting_heap)
        st.zero_wait = {WriteKey(*w) for w in d["zero_wait"]}
        return st


class AckedWritesFamily:
    def __init__(self, settle: int) -> None:
        self.settle = settle
        self.views: dict[ViewKey, AckedState] = {}
        self.expired_unread = 0

    def state(self, key: ViewKey) -> AckedState:
        st = self.views.get(key)
        if st is None:
            st = self.views[key] = AckedState()
        return st

    def expect(self, key: ViewKey, first_offset: int, count: int, writer_id: int, inc: int, first_seq: int,
               done_ts_us: int) -> None:
        heapq.heappush(self.state(key).pending, (first_offset, count, writer_id, inc, first_seq, done_ts_us))

    def on_read(self, key: ViewKey, off: int, wkey: WriteKey) -> list[Violation]:
        """A canary record read at ``off``: settles a write that waited for it inside its window."""
        st = self.views.get(key)
        if st is None:
            return []
        out = []
        acked_at = st.waiting.get(wkey)
        if acked_at is not None and off <= acked_at + self.settle - 1:
            del st.waiting[wkey]
            out.append(self._mismatch(key, wkey, acked_at, off))
        if wkey in st.zero_wait:
            st.zero_wait.discard(wkey)
            out.append(self._mismatch(key, wkey, 0, off))
        return out

    def settle_view(self, key: ViewKey, v: PartitionView, log_start: int) -> list[Violation]:
        """Judge the expected writes the reader has passed."""
        st = self.views.get(key)
        if st is None:
            return []
        out: list[Violation] = []
        while st.pending and st.pending[0][0] < v.frontier:
            first_off, count, wid, inc, first_seq, done = heapq.heappop(st.pending)
            for i in range(count):
                off = first_off + i
                if off >= v.frontier:  # the rest of the run is still ahead of the reader
                    heapq.heappush(st.pending, (off, count - i, wid, inc, first_seq + i, done))
                    break
                wkey = WriteKey(key.topic_id, key.partition, wid, inc, first_seq + i)
                out.extend(self._judge(key, st, v, off, wkey, log_start))
        while st.waiting_heap and st.waiting_heap[0][0] <= v.frontier:
            _, wkey = heapq.heappop(st.waiting_heap)
            off = st.waiting.pop(wkey, None)
            if off is not None:
                out.extend(self._verdict(Verdict.EXPIRED if off < log_start else Verdict.LOST, key, st, v, off, wkey))
        return out

    def _judge(self, key: ViewKey, st: AckedState, v: PartitionView, off: int, wkey: WriteKey,
               log_start: int) -> list[Violation]:
        ident = wkey.ident
        seen = v.reads_of.get(ident)
        if seen is not None and off in seen:
            return []  # the common case: read exactly where it was acked
        if off == 0 and v.start == 0 and ident == v.zero:
            return []
        if off == 0 and v.start == 0 and bogus_zero_ack(0, ident, v.zero):
            out = [Violation(Invariant.ZERO_OFFSET, key.iso, key.topic_id, key.partition, (0,), ident[:2], ident[2],
                             detail=f"acked at 0, offset 0 holds {v.zero}")]
            if seen:
                out.append(self._mismatch(key, wkey, 0, seen[0]))
            else:
                st.zero_wait.add(wkey)
            return out
        if off < v.forgotten_below:
            self.expired_unread += 1  # acked later than the horizon reaches back: the audit's
            return []
        verdict = acked_write_verdict(off, seen or (), v.frontier, v.start, self.settle, log_start)
        return self._verdict(verdict, key, st, v, off, wkey)

    def _verdict(self, verdict: Verdict, key: ViewKey, st: AckedState, v: PartitionView, off: int,
                 wkey: WriteKey) -> list[Violation]:
        if verdict is Verdict.EXPIRED:
            self.expired_unread += 1
        elif verdict is Verdict.LOST:
            return [Violation(Invariant.LOST_WRITE, key.iso, key.topic_id, key.partition, (off,),
                              (wkey.writer_id, wkey.inc), wkey.seq, detail=f"acked at {off}, reader at {v.frontier}")]
        elif verdict is Verdict.MISMATCH:
            return [self._mismatch(key, wkey, off, min(v.reads_of[wkey.ident]))]
        elif verdict is Verdict.UNDECIDED:
            st.waiting[wkey] = off
            heapq.heappush(st.waiting_heap, (off + self.settle, wkey))
        return []

    @staticmethod
    def _mismatch(key: ViewKey, wkey: WriteKey, acked_at: int, read_at: int) -> Violation:
        return Violation(Invariant.OFFSET_MISMATCH, key.iso, key.topic_id, key.partition, (acked_at, read_at),
                         (wkey.writer_id, wkey.inc), wkey.seq, detail=f"acked at {acked_at}, read at {read_at}")

    def unseen(self, cutoff_us: int) -> dict[Any, int]:
        """Per reader, expected writes acked before ``cutoff_us`` that the reader has not reached."""
        out: dict[Any, int] = {}
        for key, st in self.views.items():
            n = sum(run[1] for run in st.pending if 0 < run[5] < cutoff_us)
            out[key.iso] = out.get(key.iso, 0) + n
        return out

    def to_doc(self) -> dict[str, Any]:
        return {"expired_unread": self.expired_unread,
                "views": [[key.to_doc(), st.to_doc()] for key, st in self.views.items()]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], settle: int) -> "AckedWritesFamily":
        fam = cls(settle)
        fam.expired_unread = doc["expired_unread"]
        fam.views = {ViewKey.from_doc(k): AckedState.from_doc(d, settle) for k, d in doc["views"]}
        return fam
