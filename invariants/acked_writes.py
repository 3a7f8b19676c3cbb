"""Acked-writes family: ``lost_write``, ``unseen``, ``offset_mismatch``, ``zero_offset`` — where an
acknowledged write is, compared with where its acknowledgement says it is.

Judged per reader (``read_committed`` and ``read_uncommitted`` separately), per topic ID and
partition, against the reader's current view of the log (:mod:`invariants.read_index`).

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
**A record that was read and later disappeared from its offset** — a re-read found another
record there, or none — is also ``lost_write`` when it was an expected write acknowledged there
(``cause="vanished"``; or ``offset_mismatch`` if it now sits elsewhere inside the window): an
acknowledged write that vanished is lost even if it was read once. Writes acked below the first
offset the reader read, or below the partition's log start offset when judged, are
``expired_unread`` — never violations (Jepsen's rule: only writes below the highest offset read
can be called lost). Cannot be inferred: the fate of writes above the frontier. False
positives: none from Kafka's documented behaviour; a writer that lies in its ledger (a drill).
Implies: a truncated log gives ``lost_write`` together with ``inconsistent_offset`` (the reused
offsets).

**Confirmed before counted.** When the acknowledgement arrives after the reader had already
passed its offset, what the reader remembers of that range may predate a rewrite (a truncated
leader; a new leader writing new records at reused offsets). Such a verdict is counted only
after the range was read again (:mod:`invariants.confirm`): the fresh read either confirms it or
shows the write where it was acknowledged (and the old content as ``inconsistent_offset``).

**A loss is read again first.** A write is counted lost only after its acknowledged offset was
read again once the verdict was formed: the re-read finds the write (no loss), another record
(lost), nothing within the log (lost), or the offset below the log start (expired). What a reader
hands over may have been fetched before the acknowledgement it is compared with: Spark's consumer
serves a micro-batch from what it fetched for the previous one, so after a log started again (a
broker back without the partition's data) the old log's unread tail reached the checker after the
new log's writes at those offsets were acknowledged — measured on the local cluster, 32 such
writes counted lost that the final log holds where they were acknowledged. The same holds when
the reader read *no* record there (retention deleted it first, or the reader skipped it). A
re-read that does not come before the horizon forgets the offset (the partition cannot be read
again, or one catch-up batch spans more than the horizon) leaves the verdict to what the reader
read there: another record, and the acknowledgement came before the reader got there — lost; else
expired (``horizon``).

**unseen.** A gauge, not a loss: expected writes acked more than a deadline ago that the
reader has not reached yet (frontier not past their offset).

**offset_mismatch.** An expected write acknowledged at offset ``o`` is read, but never at ``o``:
judged when the reader's frontier passes ``o`` and the write was read at some
``r <= o + H - 1`` (the settle window); for a write whose ack claimed a bogus offset 0
(``zero_offset``), any read of it counts. Counted once per write. A write read at ``o`` *and*
elsewhere is a ``duplicate``, not a mismatch. False positives: none from Kafka's documented
behaviour — the produce response's base offset is where the record is.

**zero_offset.** A write acknowledged at offset 0 while this reader read a *different* record
at offset 0 of the same topic ID (the Jepsen "bogus offset 0" bug). Counted once per write,
judged once the reader has read offset 0. The write is then not judged ``lost_write`` (its
acked offset is meaningless) but is ``offset_mismatch`` when read anywhere. Cannot be
inferred: the log start offset *at ack time* (a legitimate ack at 0 followed by retention
looks the same as a bogus one afterwards), so a reader that never saw offset 0 counts such a
write ``expired_unread`` rather than guessing. Implies ``offset_mismatch`` once the record
is read.

**Checked at acknowledgement time.** A writer that gets an ack at offset 0, or below an earlier
ack of the same partition, lists the partition's log start offset right after and records it with
the outcome (``log_start_after``; :mod:`monitor.canary.ack_check`). An ack below the log start
listed after it named an offset the log no longer had when the ack was given: at offset 0
``zero_offset``, elsewhere ``offset_mismatch``, both ``cause="below_log_start"``, counted at once
in both isolations and never judged again by where the record is read (live and audit alike). This
catches the bogus zero offset after retention deleted offset 0, which the read-time rule cannot
see. Transactional writes are left to the read-time rules (the transaction family needs their
acknowledged offsets). An ack that only goes backwards is rewrite evidence: the checker reads that
range again before it counts what it remembers of it (a truncated log, a log that started again).
An ack at 0 above a listed log start of 0 is judged at read time, where offset 0 is readable.

**zero_offset** in the audit, which sees only the final log: counted only when the write is
read elsewhere or its ack followed a higher ack of the same writer incarnation, partition and
topic ID (an offset going back to 0 at ack time). A write acked at 0 that offset 0 no longer
holds, read nowhere, first of its writer there, is a ``lost_write``: a log that started again
from 0 under the same topic ID (a broker back without the partition's data) — measured on the
local cluster, the audit called the first write of a wiped RF-1 partition a bogus zero offset
while live, which had read it at 0, counted it lost. Known gap: a live checker that never read
offset 0 before the log started again still counts ``zero_offset`` there.

**Classes.** A write never read is classed by its writer and topic (acks, idempotence,
replication, ``min.insync.replicas``, unclean election); a vanished record by the topic's
unclean election setting; a bogus or mismatched offset is always ``guaranteed``
(:mod:`invariants.promises`).

**Horizon.** An ack that arrives when its offset is more than ``horizon_offsets`` behind the
reader's frontier can no longer be compared with what was read there: ``expired_unread``
(the audit's to judge).

**Expired, by reason** (``vigil_expired_unread_total{reason}``, never violations):
``below_first_read`` (acked below the first offset the reader read; on a topic ID that replaced
another under its name, what Spark skipped there is read directly before its first read:
``TopicLifecycle._fill_below``), ``log_start`` (below the
partition's log start when judged), ``horizon`` (acked, or waiting for a re-read, further back
than the live horizon remembers), ``retired`` (the topic ID was retired with ``vigil retire``).

**Topics that vanish.** When a topic ID is gone — deleted, recreated under its name (a writer's
``start`` entry says which ID it replaced), or seen gone by the prober — every acknowledged write
of it that this checker still tracks (not judged yet, waiting, or read where acknowledged) is
judged at once against the last log start offset the writers recorded for its partition
(``checkpoint`` entries): at or above it, ``lost_write`` with ``cause="topic_vanished"`` in the
write's class (deleting a topic breaks no Kafka promise, a broker that forgets one does: policy
tells them apart by the cause); below it, expired (``log_start``). Acknowledgements of it that
arrive later are judged the same way on arrival. A *retired* ID ends the same writes as expired
(``retired``): nothing stays unseen forever. Cannot be inferred: writes judged earlier stay as
they were judged, and writes read more than ``horizon_offsets`` before the topic vanished are no
longer remembered (the audit counts them too).
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any, Iterable

from invariants.catalog import Invariant, Isolation
from invariants.confirm import Pending
from invariants.model import Ident, Verdict, ViewKey, Violation, WriteKey
from invariants.promises import GUARANTEED, ClassTable, Promise, WriteClass
from invariants.acked_state import AckedState, ExpectedRun, Judged  # noqa: F401 - part of this family
from invariants.read_index import PartitionView


def acked_write_verdict(acked_offset: int, read_offsets: Iterable[int], frontier: int, start: int | None,
                        settle: int, log_start: int = 0) -> Verdict:
    """The verdict on one expected write, given where this reader has read it so far."""
    offsets = list(read_offsets)
    if acked_offset in offsets:
        return Verdict.OK
    if start is None or frontier <= acked_offset:
        return Verdict.UNDECIDED
    if acked_offset < start:
        return Verdict.EXPIRED  # below the first offset read
    if any(r <= acked_offset + settle - 1 for r in offsets):
        return Verdict.MISMATCH
    if frontier >= acked_offset + settle:
        return Verdict.EXPIRED if acked_offset < log_start else Verdict.LOST
    return Verdict.UNDECIDED


EXPIRED_REASONS = ("below_first_read", "log_start", "horizon", "retired")


class AckedWritesFamily:
    def __init__(self, settle: int) -> None:
        self.settle = settle
        self.views: dict[ViewKey, AckedState] = {}
        self.expired: Counter[str] = Counter()  # reason -> writes
        self.candidates = Pending()

    @property
    def expired_unread(self) -> int:
        return sum(self.expired.values())

    def state(self, key: ViewKey) -> AckedState:
        st = self.views.get(key)
        if st is None:
            st = self.views[key] = AckedState()
        return st

    def expect(self, key: ViewKey, v: PartitionView, first_offset: int, count: int, writer_id: int, inc: int,
               first_seq: int, done_ts_us: int, cls: WriteClass) -> None:
        st = self.state(key)
        last = st.last_pushed
        if (last is not None and last.first_offset + last.count == first_offset and last.writer_id == writer_id
                and last.inc == inc and last.first_seq + last.count == first_seq and last.done_ts_us == done_ts_us
                and last.late_below == v.frontier and last.cls == cls):
            last.count += count  # the writes right after it (a transaction's, one by one): one run
            return
        st.last_pushed = ExpectedRun(first_offset, count, writer_id, inc, first_seq, done_ts_us, v.frontier, cls)
        heapq.heappush(st.pending, st.last_pushed)

    # -- reads -----------------------------------------------------------------------------

    def on_read(self, key: ViewKey, v: PartitionView, off: int, wkey: WriteKey) -> list[Violation]:
        """A canary record read at ``off``: settles a write that waited for it inside its window."""
        st = self.views.get(key)
        if st is None:
            return []
        out = []
        j = st.waiting.get(wkey)
        if j is not None and off <= j.acked_at + self.settle - 1:
            del st.waiting[wkey]
            if off == j.acked_at:  # a range the reader had jumped over, read again: where it was acked
                st.placed[wkey.ident] = j
            elif j.acked_at < j.late_below:  # the acked offset was read before the ack: read it again first
                self._candidate(key, v, wkey, j, off)
            else:
                out.append(self._mismatch(key, wkey, j.acked_at, off))
        cls = st.zero_wait.pop(wkey, None)
        if cls is not None:
            out.append(self._mismatch(key, wkey, 0, off))
        return out

    def on_vanished(self, key: ViewKey, v: PartitionView, off: int, ident: Ident) -> list[Violation]:
        """A re-read no longer finds ``ident`` at ``off``: if it was an expected write placed there,
        it is judged again against the view as it is now."""
        st = self.views.get(key)
        j = None if st is None else st.placed.get(ident)
        if j is None or j.acked_at != off:
            return []
        del st.placed[ident]
        wkey = WriteKey(key.topic_id, key.partition, *ident)
        seen = [r for r in v.offsets_of(ident) or () if r <= off + self.settle - 1]
        if seen:
            return [self._mismatch(key, wkey, off, seen[0], cause="vanished")]
        return [Violation(Invariant.LOST_WRITE, key.iso, key.topic_id, key.partition, (off,), (wkey.writer_id, wkey.inc),
                          wkey.seq, detail=f"acked and read at {off}, later gone from it", cause="vanished",
                          **_cls(j.cls.read, j.cls))]

    # -- judging ---------------------------------------------------------------------------

    def settle_view(self, key: ViewKey, v: PartitionView, log_start: int) -> list[Violation]:
        """Judge the expected writes the reader has passed."""
        st = self.views.get(key)
        if st is None:
            return []
        out: list[Violation] = []
        while st.pending and st.pending[0].first_offset < v.frontier:
            run = heapq.heappop(st.pending)
            st.last_pushed = None
            i = 0
            while i < run.count:
                off = run.first_offset + i
                if off >= v.frontier:  # the rest of the run is still ahead of the reader
                    heapq.heappush(st.pending, ExpectedRun(off, run.count - i, run.writer_id, run.inc,
                                                           run.first_seq + i, run.done_ts_us, run.late_below, run.cls))
                    break
                k = self._read_where_acked(v, run, i)
                if k:  # k writes read once each, exactly where acked: placed together
                    st.placed.add_run(off, k, run.writer_id, run.inc, run.first_seq + i, run.late_below, run.cls)
                    i += k
                    continue
                wkey = WriteKey(key.topic_id, key.partition, run.writer_id, run.inc, run.first_seq + i)
                out.extend(self._judge(key, st, v, wkey, Judged(off, run.late_below, run.cls), log_start))
                i += 1
        while st.waiting_heap and st.waiting_heap[0][0] <= v.frontier:
            _, wkey = heapq.heappop(st.waiting_heap)
            j = st.waiting.pop(wkey, None)
            if j is not None:
                out.extend(self._judge(key, st, v, wkey, j, log_start))
        return out

    @staticmethod
    def _read_where_acked(v: PartitionView, run: ExpectedRun, i: int) -> int:
        """How many of the run's writes from its ``i``-th on the view holds in one segment, each read
        once exactly where acked (:meth:`_judge` places each of them and judges nothing else)."""
        off = run.first_offset + i
        s = v.segment_covering(off)
        if (s is None or s.writer_id != run.writer_id or s.inc != run.inc
                or s.seq + off - s.offset != run.first_seq + i):
            return 0
        return min(s.end, v.frontier, run.first_offset + run.count) - off

    def judge_ready(self, view: Any, log_start: Any) -> list[Violation]:
        """Candidates whose offsets were read again: judged on the fresh view (counted or dropped)."""
        out: list[Violation] = []
        for c in self.candidates.take_ready():
            wkey, j = c.data
            v = view(c.key)
            out.extend(self._judge(c.key, self.state(c.key), v, wkey, Judged(j.acked_at, -1, j.cls),
                                   log_start(c.key), confirmed=True))
        return out

    def _candidate(self, key: ViewKey, v: PartitionView, wkey: WriteKey, j: Judged, *also: int,
                   gap: bool = False) -> None:
        need = [(j.acked_at, 1 if j.acked_at == 0 else min(j.acked_at + self.settle, j.late_below))]
        if gap:
            need = [(j.acked_at, j.acked_at + 1)]
        need += [(o, o + 1) for o in also if o < j.late_below]
        self.candidates.add(key, need, v.epoch, (wkey, j))

    def _judge(self, key: ViewKey, st: AckedState, v: PartitionView, wkey: WriteKey, j: Judged,
               log_start: int, confirmed: bool = False) -> list[Violation]:
        off, ident = j.acked_at, wkey.ident
        seen = v.offsets_of(ident)
        late = off < j.late_below
        if seen is not None and off in seen:
            st.placed[ident] = j  # the common case: read exactly where it was acked
            return []
        if off == 0 and v.start == 0 and v.zero is not None:
            if ident == v.zero:
                st.placed[ident] = j
                return []
            if late:
                self._candidate(key, v, wkey, j, *(seen or ()))
                return []
            out = [Violation(Invariant.ZERO_OFFSET, key.iso, key.topic_id, key.partition, (0,), ident[:2], ident[2],
                             detail=f"acked at 0, offset 0 holds {v.zero}", **_cls(GUARANTEED, j.cls))]
            if seen:
                out.append(self._mismatch(key, wkey, 0, seen[0]))
            else:
                st.zero_wait[wkey] = j.cls
            return out
        if off < v.forgotten_below:
            self.expired["horizon"] += 1  # acked later than the horizon reaches back: the audit's
            return []
        verdict = acked_write_verdict(off, seen or (), v.frontier, v.start, self.settle, log_start)
        if verdict is Verdict.OK:
            st.placed[ident] = j
        elif verdict is Verdict.EXPIRED:
            self.expired["below_first_read" if v.start is not None and off < v.start else "log_start"] += 1
        elif verdict is Verdict.UNDECIDED:
            st.waiting[wkey] = j
            heapq.heappush(st.waiting_heap, (off + self.settle, wkey))
        elif late:
            self._candidate(key, v, wkey, j, *(seen or ()))
        elif verdict is Verdict.LOST and not confirmed:
            self._candidate(key, v, wkey, j, gap=True)  # read its offset again, after the ack, first
        elif verdict is Verdict.LOST:
            return [Violation(Invariant.LOST_WRITE, key.iso, key.topic_id, key.partition, (off,),
                              (wkey.writer_id, wkey.inc), wkey.seq, detail=f"acked at {off}, reader at {v.frontier}",
                              **_cls(j.cls.acked, j.cls))]
        else:
            return [self._mismatch(key, wkey, off, min(v.offsets_of(ident)), cls=j.cls)]
        return []

    @staticmethod
    def _mismatch(key: ViewKey, wkey: WriteKey, acked_at: int, read_at: int, cause: str = "",
                  cls: WriteClass | None = None) -> Violation:
        return Violation(Invariant.OFFSET_MISMATCH, key.iso, key.topic_id, key.partition, (acked_at, read_at),
                         (wkey.writer_id, wkey.inc), wkey.seq, detail=f"acked at {acked_at}, read at {read_at}",
                         cause=cause, writer_name=cls.writer if cls else "")

    @staticmethod
    def below_log_start(iso: Isolation, tid: str, p: int, first_offset: int, count: int, writer: tuple[int, int],
                        first_seq: int, log_start_after: int, cls: WriteClass) -> list[Violation]:
        """Acks below the log start listed after them (checked at acknowledgement time): at 0,
        ``zero_offset``; elsewhere ``offset_mismatch``; both with ``cause="below_log_start"``."""
        out = []
        for i in range(count):
            off = first_offset + i
            inv = Invariant.ZERO_OFFSET if off == 0 else Invariant.OFFSET_MISMATCH
            out.append(Violation(inv, iso, tid, p, (off,), writer, first_seq + i, cause="below_log_start",
                                 detail=f"acked at {off}, below the log start {log_start_after} listed after the ack",
                                 **_cls(GUARANTEED, cls)))
        return out

    # -- bookkeeping -----------------------------------------------------------------------

    def judge_unconfirmed(self, key: ViewKey, v: PartitionView, cut: int, log_start: int) -> list[Violation]:
        """Candidates resting on offsets below ``cut``, which the view is about to forget, judged on
        what it holds now: a write acknowledged before the reader got there, another record read
        where it was acknowledged, is lost (as counted before a re-read was asked for: the re-read
        did not come within the horizon); the rest expire (``horizon``)."""
        out: list[Violation] = []
        st = self.state(key)
        for c in self.candidates.forget_below(key, cut):
            wkey, j = c.data
            held = v.held(j.acked_at)
            if j.acked_at >= j.late_below and held is not None and held != wkey.ident:
                out.extend(self._judge(key, st, v, wkey, Judged(j.acked_at, -1, j.cls), log_start, confirmed=True))
            else:
                self.expired["horizon"] += 1
        return out

    def forget(self, key: ViewKey, v: PartitionView) -> None:
        st = self.views.get(key)
        if st is not None:
            st.placed.drop_below(v.forgotten_below)
        self.expired["horizon"] += len(self.candidates.forget_below(key, v.forgotten_below))

    # -- topics that end -------------------------------------------------------------------

    def end_topic(self, topic_id: str, log_start: Any, reason: str) -> list[Violation]:
        """Every write of ``topic_id`` this family still tracks, judged now that the topic is gone
        (``reason``: ``vanished`` or ``retired``); ``log_start(partition)``: the last recorded one."""
        out: list[Violation] = []
        keys = [k for k in self.views if k.topic_id == topic_id]
        ending = [c for c in self.candidates.items if c.key.topic_id == topic_id]
        if ending:
            self.candidates.items = [c for c in self.candidates.items if c.key.topic_id != topic_id]
        for c in ending:
            wkey, j = c.data
            out.extend(self.ended(c.key, j.acked_at, 1, wkey.writer_id, wkey.inc, wkey.seq, j.cls,
                                  log_start(c.key.partition), reason))
        for key in keys:
            st = self.views.pop(key)
            L = log_start(key.partition)
            for run in st.pending:
                out.extend(self.ended(key, run.first_offset, run.count, run.writer_id, run.inc, run.first_seq,
                                      run.cls, L, reason))
            for wkey, j in st.waiting.items():
                out.extend(self.ended(key, j.acked_at, 1, wkey.writer_id, wkey.inc, wkey.seq, j.cls, L, reason))
            for ident, j in st.placed.items():
                out.extend(self.ended(key, j.acked_at, 1, ident[0], ident[1], ident[2], j.cls, L, reason))
        return out

    def ended(self, key: ViewKey, first_offset: int, count: int, writer_id: int, inc: int, first_seq: int,
              cls: WriteClass, log_start: int, reason: str) -> list[Violation]:
        """Acknowledged writes of a topic ID that is gone: lost at or above its last recorded log
        start (expired below it), or expired as ``retired``."""
        if reason == "retired":
            self.expired["retired"] += count
            return []
        below = min(count, max(0, log_start - first_offset))
        self.expired["log_start"] += below
        return [Violation(Invariant.LOST_WRITE, key.iso, key.topic_id, key.partition, (first_offset + i,),
                          (writer_id, inc), first_seq + i, cause="topic_vanished",
                          detail=f"acked at {first_offset + i}; topic ID {key.topic_id} is gone "
                                 f"(log start recorded {log_start})", **_cls(cls.acked, cls))
                for i in range(below, count)]

    def unseen(self, cutoff_us: int) -> dict[Any, int]:
        """Per reader, expected writes acked before ``cutoff_us`` that the reader has not reached."""
        out: dict[Any, int] = {}
        for key, st in self.views.items():
            n = sum(run.count for run in st.pending if 0 < run.done_ts_us < cutoff_us)
            out[key.iso] = out.get(key.iso, 0) + n
        return out

    def undecided(self) -> int:
        return (sum(r.count for st in self.views.values() for r in st.pending)
                + sum(len(st.waiting) for st in self.views.values()) + len(self.candidates.items))

    def to_doc(self, t: ClassTable) -> dict[str, Any]:
        return {"expired": dict(self.expired),
                "views": [[key.to_doc(), st.to_doc(t)] for key, st in self.views.items()],
                "candidates": self.candidates.to_doc(lambda d: [*d[0], *d[1].to_doc(t)])}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], settle: int, t: ClassTable) -> "AckedWritesFamily":
        fam = cls(settle)
        fam.expired = Counter(doc["expired"])
        fam.views = {ViewKey.from_doc(k): AckedState.from_doc(d, settle, t) for k, d in doc["views"]}
        fam.candidates = Pending.from_doc(doc["candidates"],
                                          lambda d: (WriteKey(*d[:5]), Judged.from_doc(d[5:], t)))
        return fam


def _cls(p: Promise, cls: WriteClass) -> dict[str, Any]:
    """The violation fields that say how it is classed and whose write it was."""
    return {"durability": p.durability, "reason": p.reason, "writer_name": cls.writer}
