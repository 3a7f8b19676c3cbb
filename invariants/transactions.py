"""Transactions family: ``aborted_read`` (G1a) and ``partial_txn``, ``read_committed`` only.

A transaction is identified by (writer, incarnation, txn id); its intended writes come from
the writer's ``intent`` entry, its outcome from the ``txn`` entry (``committed``/``aborted``
when the commit or abort call returned, otherwise ``indeterminate``; a writer that stopped or
restarted turns its undecided transactions ``indeterminate``).

**aborted_read.** A ``read_committed`` reader returns a record of a transaction whose abort
returned. Counted once per write (not per re-read). The ``read_uncommitted`` reader sees such
records by design: counted as *allowed* (``vigil_aborted_records_read_total``), never a
violation. Cannot be inferred for ``indeterminate`` transactions (visible means committed) unless their
records carry the intended-abort flag (below).
False positives: none. Implies: the broker or the coordinator lost the abort marker.

**Header truth.** A record whose header carries the intended-abort flag belongs to a
transaction its writer never meant to commit (only a commit call commits, and the writer makes
none for it): read by ``read_committed`` it is ``aborted_read`` whatever the ledger says of the
transaction — also when the abort call never returned (``indeterminate``) or the ledger holds no
outcome of it in the part read so far. Counted once the ledger says anything of the
transaction (its class comes from there); a transaction the ledger never mentions (a ledger read
from the middle) is not judged, live or in the audit. Such a transaction is never
``partial_txn`` (what is visible of it is aborted_read).

**partial_txn.** A ``read_committed`` reader that has read past all of a transaction's
acknowledged records (on every partition that has one) saw some, but not all, of its
intended records. Judged once the transaction is decided (``committed``, or
``indeterminate`` — then any visible record means it committed), every one of its writes has
an outcome, and at least one was acked. "Saw" counts a record read at or below the highest
acked offset of the transaction in that record's partition. Counted once per transaction.
A committed transaction of which nothing is visible is not partial: its acked records are
``lost_write`` instead. Cannot be inferred: transactions without any acked record. False
positives: none for a committed transaction (Kafka's atomicity promise); Jepsen found torn
transactions before KIP-890. Implies ``lost_write`` in ``read_uncommitted`` when the missing
records were acked.

A transaction with an acknowledged record before the first offset the reader read, or below the
partition's log start (retention), cannot be judged: what is missing may simply be gone. One with
an acknowledged record missing at an offset whose reading waits to be confirmed (an
acknowledgement that went backwards, a suspected rewrite: :mod:`invariants.confirm`) is judged
after the re-read: the reader may remember the old log there, and the new one hold the record.
And any transaction missing an acknowledged record is judged only once ``read_committed`` read
the offsets of its missing records again after it found them missing: what a reader hands over
may have been fetched before the log changed (Spark's consumer serves a micro-batch from what it
fetched for the previous one; measured on the local cluster, a wiped partition's old tail served
that way gave 5 torn transactions the final log does not hold).

**Logs that change.** A record of a committed transaction that ``read_committed`` read and a
later re-read no longer finds (a truncated log) makes the transaction be judged again: if only
part of it is still visible, it is ``partial_txn`` then (counted once per transaction). Without
its ``intent`` (a ledger read from the middle) a transaction is never judged ``partial_txn``: the
set of its writes is not known — unless its records' headers show it torn (below).

**Torn, by the records' headers.** Every canary record of a transaction carries the transaction's
size and its own index. A transaction T of writer incarnation W whose ``intent`` the ledger does
not hold — a ledger read from the middle (retention), or entries lost — is judged from them: once
the ledger holds the intent of a later transaction of W (so T's intent is missing, not late) and
read_committed has read, on every partition of the topic it reads, records of an earlier and of a
later transaction of W (W's transactions are sequential: T's records there lie between, and are
all read), T is ``partial_txn`` when it saw some, but fewer than the size, of T's distinct
indexes. Never for records flagged intended-abort, nor for a transaction the ledger says was
aborted. Its class is the one the ledger gives it (an outcome entry), else unknown. Counted once
per transaction; forgotten, judged or not, once both readers are a horizon past its records.

**Classes.** ``guaranteed`` on a durable topic (replication factor >= 3, ``min.insync.replicas``
>= 2, no unclean election), else ``at_risk`` (:mod:`invariants.promises`).

**Topics that vanish.** A transaction on a topic ID that is gone is not judged ``partial_txn``
(nothing of it can be read any more); its acknowledged writes are judged as the topic's
(:mod:`invariants.acked_writes`).

**Horizon.** A transaction is remembered until both readers have read ``horizon_offsets`` past
its known offsets (and past where they were when it was decided): a write of an aborted one that
timed out may still have landed and be read later, a committed one may still be truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Container

from invariants.accounting import TxnDecided, TxnWritesAcked, TxnWritesIntended
from invariants.catalog import Invariant
from invariants.doc_runs import keeping, unpack_runs
from invariants.ledger_format import TxnOutcome
from invariants.model import RC, RU, Isolation, TxnKey, ViewKey, Violation, WriteKey, write_keys
from invariants.promises import UNKNOWN_CLASS, ClassTable, WriteClass
from invariants.read_index import PartitionView
from invariants.txn_headers import judge_by_headers, read_past

DECIDED_FOR_PARTIAL = (TxnOutcome.COMMITTED, TxnOutcome.INDETERMINATE)


@dataclass
class TxnTrack:
    key: TxnKey
    writes: set[WriteKey] = field(default_factory=set)  # intended (from intents)
    outcome: TxnOutcome = TxnOutcome.PENDING
    undecided_writes: int = 0
    acked: dict[WriteKey, int] = field(default_factory=dict)
    rc_reads: dict[WriteKey, int] = field(default_factory=dict)  # write -> lowest offset read
    aborted_counted: set[WriteKey] = field(default_factory=set)
    ru_reads: set[WriteKey] = field(default_factory=set)
    judged: bool = False
    decided_at: dict[ViewKey, int] | None = None  # reader frontier per view when first seen decided
    partial_counted: bool = False
    cls: WriteClass = UNKNOWN_CLASS
    decided: set[WriteKey] = field(default_factory=set)  # writes with an outcome other than acked
    classed: bool = False
    intended_abort: bool = False  # a record of it carried the header's intended-abort flag
    size: int = 0  # the header's transaction size (0: no record of it read yet)
    indexes: dict[WriteKey, int] = field(default_factory=dict)  # the header's index of each record read_committed read
    reread: bool = False  # the offsets of its writes read_committed missed were asked to be read again

    # the highest and lowest acknowledged offset per partition and the partitions of its writes,
    # the highest offset read_committed read per partition, and the saved form of its writes, acks
    # and reads: each made once per change of what it comes from (writes_changed, reads_changed)
    _acked_span: tuple[dict, dict, set] | None = field(default=None, repr=False, compare=False)
    _read_top: dict[tuple[str, int], int] | None = field(default=None, repr=False, compare=False)
    _packed: dict[str, list] = field(default_factory=dict, repr=False, compare=False)
    # the longest list of write keys made so far per (topic, partition, writer, incarnation), with its
    # first seq: the ack and both readers of a write use the intent's key object (one, not four)
    _keys: dict[tuple[str, int, int, int], tuple[int, list[WriteKey]]] = field(default_factory=dict, repr=False,
                                                                             compare=False)

    def keys(self, topic_id: str, partition: int, writer_id: int, inc: int, first_seq: int,
             count: int) -> list[WriteKey]:
        """The keys of seqs ``first_seq ..`` of ``count`` writes on one partition (equal keys
        whichever objects they are: taken from a list made before where it covers them)."""
        where = (topic_id, partition, writer_id, inc)
        got = self._keys.get(where)
        if got is not None:
            start = first_seq - got[0]
            if 0 <= start and start + count <= len(got[1]):
                return got[1][start:start + count]
        keys = write_keys(topic_id, partition, writer_id, inc, first_seq, count)
        if got is None or count > len(got[1]):
            self._keys[where] = (first_seq, keys)
        return keys

    def writes_changed(self) -> None:
        """Its writes or acknowledgements are about to change."""
        self._acked_span = None
        self._packed.pop("writes", None)
        self._packed.pop("acked", None)

    def reads_changed(self) -> None:
        """What the readers read of it is about to change."""
        self._read_top = None
        self._packed.pop("rc_reads", None)
        self._packed.pop("ru_reads", None)
        self._packed.pop("indexes", None)

    def read_top(self) -> dict[tuple[str, int], int]:
        """The highest offset read_committed read of it per partition (not to be changed)."""
        if self._read_top is None:
            top: dict[tuple[str, int], int] = {}
            for w, off in self.rc_reads.items():
                part = w.part
                if off > top.get(part, -1):
                    top[part] = off
            self._read_top = top
        return self._read_top

    def _pack(self, name: str) -> list:
        got = self._packed.get(name) if keeping() else None
        if got is None:
            got = self._packed[name] = (_pack_indexes(self.indexes) if name == "indexes" else _pack_writes(
                {"writes": self.writes, "acked": self.acked.items(), "rc_reads": self.rc_reads.items(),
                 "ru_reads": self.ru_reads}[name]))
        return got

    def _span(self) -> tuple[dict, dict, set]:
        if self._acked_span is None:
            top: dict[tuple[str, int], int] = {}
            low: dict[tuple[str, int], int] = {}
            for w, off in self.acked.items():
                part = w.part
                if off > top.get(part, -1):
                    top[part] = off
                if off < low.get(part, off + 1):
                    low[part] = off
            self._acked_span = (top, low, {w.part for w in self.writes} | set(top))
        return self._acked_span

    def max_acked(self) -> dict[tuple[str, int], int]:
        return dict(self._span()[0])

    def min_acked(self) -> dict[tuple[str, int], int]:
        return dict(self._span()[1])

    def ready(self) -> bool:
        return (not self.judged and self.outcome in DECIDED_FOR_PARTIAL
                and self.undecided_writes == 0 and bool(self.acked))

    def write_decided(self, wkey: WriteKey) -> None:
        if wkey in self.writes and self.undecided_writes > 0 and wkey not in self.acked and wkey not in self.decided:
            self.undecided_writes -= 1

    def doc_without_class(self) -> dict[str, Any]:
        """The durable form but its class, whose reference is the saved document's
        (:meth:`TransactionsFamily._doc` adds it)."""
        return {"key": list(self.key), "writes_runs": self._pack("writes"), "outcome": self.outcome.value,
                "undecided_writes": self.undecided_writes, "acked_runs": self._pack("acked"),
                "rc_reads_runs": self._pack("rc_reads"),
                "aborted_counted": [list(w) for w in self.aborted_counted],
                "ru_reads_runs": self._pack("ru_reads"), "judged": self.judged,
                "decided_at": None if self.decided_at is None else [[*k.to_doc(), f]
                                                                    for k, f in self.decided_at.items()],
                "partial_counted": self.partial_counted,
                "decided": [list(w) for w in self.decided], "classed": self.classed,
                "intended_abort": self.intended_abort, "size": self.size,
                "indexes_runs": self._pack("indexes"), "reread": self.reread}

    @classmethod
    def from_doc(cls, d: dict[str, Any], t: ClassTable) -> "TxnTrack":
        # (writes, acked, rc_reads and ru_reads one row per write as saved before they were packed)
        return cls(TxnKey(*d["key"]), _unpack_writes(d, "writes"), TxnOutcome(d["outcome"]),
                   d["undecided_writes"], _unpack_writes(d, "acked", valued=True),
                   _unpack_writes(d, "rc_reads", valued=True), {WriteKey(*w) for w in d["aborted_counted"]},
                   _unpack_writes(d, "ru_reads"), d["judged"],
                   None if d["decided_at"] is None else {ViewKey.from_doc(k[:3]): k[3] for k in d["decided_at"]},
                   d["partial_counted"], t.get(d["cls"]), {WriteKey(*w) for w in d["decided"]}, d["classed"],
                   d.get("intended_abort", False), d.get("size", 0),
                   _unpack_indexes(d), d.get("reread", False))


def _pack_writes(writes: Any) -> list:
    """Writes (a set of them, or (write, offset) pairs) as ``[topic_id, partition, runs]`` per
    partition, the runs those of :func:`invariants.doc_runs.pack_runs` (a write's offset, or its seq
    again for a set): a transaction's writes on a partition are consecutive seqs, and where they were
    acknowledged and read consecutive offsets, so a write is a few bytes, not a row."""
    # (one pass over the sorted writes, no numpy: a transaction's few hundred rows, packed once per
    # change; the keys are distinct, so pairs sort by their write)
    items = sorted(writes)
    valued = bool(items) and not isinstance(items[0], WriteKey)
    out: list = []
    runs: list[list[int]] = []
    part: tuple[str, int] | None = None
    last: list[int] | None = None
    for item in items:
        if valued:
            (tid, p, wid, inc, seq), at = item
        else:
            tid, p, wid, inc, seq = item
            at = seq
        if part != (tid, p):
            part, runs, last = (tid, p), [], None
            out.append([tid, p, runs])
        if last is not None and seq == last[2] + last[4] and at == last[3] + last[4] and wid == last[0] \
                and inc == last[1]:
            last[4] += 1
        else:
            last = [wid, inc, seq, at, 1]
            runs.append(last)
    return out


def _pack_indexes(indexes: dict[WriteKey, int]) -> list:
    """The header's index of each write read (``TxnTrack.indexes``) as ``[topic_id, partition,
    runs]`` per partition, a run ``[writer_id, inc, first_seq, first_index, count, step]`` standing
    for the writes ``first_seq + i`` of index ``first_index + i * step``: a transaction spread over
    n partitions has indexes n apart on each (one row per write, they were 80 % of the bench's state)."""
    by_part: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for w, index in indexes.items():
        by_part.setdefault((w.topic_id, w.partition), []).append((w.writer_id, w.inc, w.seq, index))
    out = []
    for (tid, p), rows in sorted(by_part.items()):
        runs: list[list[int]] = []
        for wid, inc, seq, index in sorted(rows):
            last = runs[-1] if runs else None
            if (last is not None and last[0] == wid and last[1] == inc and last[2] + last[4] == seq
                    and (last[4] == 1 or last[3] + last[4] * last[5] == index)):
                if last[4] == 1:
                    last[5] = index - last[3]
                last[4] += 1
            else:
                runs.append([wid, inc, seq, index, 1, 0])
        out.append([tid, p, runs])
    return out


def _unpack_indexes(d: dict[str, Any]) -> dict[WriteKey, int]:
    if "indexes_runs" not in d:  # saved one row per write (state version 4)
        return {WriteKey(*w): i for *w, i in d.get("indexes", ())}
    return {WriteKey(tid, p, wid, inc, seq + i): first + i * step for tid, p, runs in d["indexes_runs"]
            for wid, inc, seq, first, n, step in runs for i in range(n)}


def _unpack_writes(d: dict[str, Any], name: str, valued: bool = False) -> Any:
    if f"{name}_runs" not in d:  # saved one row per write
        return {WriteKey(*w[:5]): w[5] for w in d[name]} if valued else {WriteKey(*w) for w in d[name]}
    rows = [(WriteKey(tid, p, wid, inc, seq), at) for tid, p, runs in d[f"{name}_runs"]
            for wid, inc, seq, at in unpack_runs(runs)]
    return dict(rows) if valued else {w for w, _at in rows}


def _readable(v: PartitionView, offset: int, log_start: int) -> bool:
    """Whether the reader could have read ``offset``: at or after where it started and the log start."""
    return v.start is not None and offset >= max(v.start, log_start)


def partial_verdict(intended: int, visible: int, outcome: TxnOutcome) -> bool:
    """Whether a decided transaction is torn, given how many of its records were visible."""
    if outcome not in DECIDED_FOR_PARTIAL:
        return False
    return 0 < visible < intended


class TransactionsFamily:
    def __init__(self, horizon: int) -> None:
        self.horizon = horizon
        self.txns: dict[TxnKey, TxnTrack] = {}
        self.judge_queue: set[TxnKey] = set()
        self.aborted_allowed = 0
        # for transactions without an intent, judged from their records' headers:
        self.headed: set[TxnKey] = set()  # read by read_committed, not judged yet
        self.spans: dict[tuple[int, int, str, int], list[int]] = {}  # (writer, inc, topic, p) -> [lowest, highest] txn read
        self.intents_up_to: dict[tuple[int, int], int] = {}  # (writer, inc) -> highest txn id with an intent
        # each transaction's durable form (without its class) as of the last save, until it changes:
        # most are decided and judged, and only wait for the readers to pass a horizon
        self._docs: dict[TxnKey, dict[str, Any]] = {}

    def track(self, tkey: TxnKey) -> TxnTrack:
        """The transaction, to be changed (its durable form is made again at the next save)."""
        self._docs.pop(tkey, None)
        t = self.txns.get(tkey)
        if t is None:
            t = self.txns[tkey] = TxnTrack(tkey)
        return t

    def _changed(self, t: TxnTrack) -> TxnTrack:
        self._docs.pop(t.key, None)
        return t

    def _drop(self, tkey: TxnKey) -> None:
        del self.txns[tkey]
        self._docs.pop(tkey, None)

    # -- ledger events ---------------------------------------------------------------------

    def on_intended(self, ev: TxnWritesIntended) -> None:
        tkey = ev.txn
        w = (tkey.writer_id, tkey.inc)
        self.intents_up_to[w] = max(tkey.txn_id, self.intents_up_to.get(w, 0))
        t = self.track(tkey)
        t.writes_changed()
        self._first_class(t, ev.cls)
        new = set(t.keys(ev.topic_id, ev.partition, ev.writer_id, ev.inc, ev.first_seq, ev.count))
        new -= t.writes
        if new:
            t.writes |= new
            # (a checkpoint may name writes already decided: those are not waiting)
            t.undecided_writes += len(new.difference(t.acked, t.decided))

    def on_acked(self, ev: TxnWritesAcked) -> bool:
        """Writes of the transaction were acked; True when read_committed must expect them now."""
        t = self.track(ev.txn)
        t.writes_changed()
        self._first_class(t, ev.cls)
        pairs = list(zip(t.keys(ev.topic_id, ev.partition, ev.writer_id, ev.inc, ev.first_seq, ev.count),
                         range(ev.first_offset, ev.first_offset + ev.count)))
        if t.undecided_writes > 0:  # what TxnTrack.write_decided does for each (the keys are distinct)
            waiting = {w for w, _ in pairs}
            waiting &= t.writes
            t.undecided_writes = max(0, t.undecided_writes - len(waiting.difference(t.acked, t.decided)))
        t.acked.update(pairs)
        self.judge_queue.add(ev.txn)
        return t.outcome is TxnOutcome.COMMITTED

    def on_write_decided(self, wkey: WriteKey, tkey: TxnKey, cls: WriteClass) -> None:
        t = self.track(tkey)
        self._first_class(t, cls)
        t.write_decided(wkey)
        t.decided.add(wkey)
        self.judge_queue.add(tkey)

    def on_decided(self, ev: TxnDecided) -> tuple[list[tuple[WriteKey, int]], list[Violation]]:
        """The transaction's outcome: the writes read_committed must now expect, and the aborted
        reads that were waiting for it."""
        t = self.track(ev.txn)
        self._first_class(t, ev.cls)
        if t.outcome is not TxnOutcome.PENDING:
            return [], []
        t.outcome = ev.outcome
        self.judge_queue.add(ev.txn)
        if ev.outcome is TxnOutcome.COMMITTED:
            return list(t.acked.items()), []
        if ev.outcome is TxnOutcome.ABORTED:
            self.aborted_allowed += len(t.ru_reads)
            return [], [v for wkey, off in sorted(t.rc_reads.items(), key=lambda kv: kv[1])
                        for v in self._aborted_read(t, wkey, off)]
        return [], []

    @staticmethod
    def _first_class(t: TxnTrack, cls: WriteClass) -> None:
        """A transaction is classed as of the first ledger entry about it (its intent, usually)."""
        if not t.classed:
            t.cls, t.classed = cls, True

    # -- reads -----------------------------------------------------------------------------

    def on_read(self, iso: Isolation, tkey: TxnKey, wkey: WriteKey, off: int,
                intended_abort: bool = False, size: int = 0, index: int = 0) -> list[Violation]:
        t = self.track(tkey)
        t.reads_changed()
        t.intended_abort |= intended_abort
        if iso is RC:
            t.size = t.size or size
            t.indexes.setdefault(wkey, index)
            span = self.spans.setdefault((tkey.writer_id, tkey.inc, wkey.topic_id, wkey.partition),
                                         [tkey.txn_id, tkey.txn_id])
            span[0], span[1] = min(span[0], tkey.txn_id), max(span[1], tkey.txn_id)
            if not t.judged:
                self.headed.add(tkey)
            if wkey not in t.rc_reads:
                t.rc_reads[wkey] = off
                if t.outcome is TxnOutcome.ABORTED or (t.intended_abort and t.classed):
                    return self._aborted_read(t, wkey, off)
                if t.intended_abort:  # counted once the ledger says anything of it (its class)
                    self.judge_queue.add(tkey)
        elif wkey not in t.ru_reads:
            t.ru_reads.add(wkey)
            if t.outcome is TxnOutcome.ABORTED:
                self.aborted_allowed += 1
        return []

    def on_read_run(self, iso: Isolation, tkey: TxnKey, topic_id: str, partition: int, run: Any) -> list[Violation]:
        """A run of the transaction's records (:class:`~invariants.model.ReadRun`) read for the first
        time: what :meth:`on_read` of each, in order, does."""
        t = self.track(tkey)
        t.reads_changed()
        t.intended_abort |= run.intended_abort
        writes = t.keys(topic_id, partition, run.writer_id, run.inc, run.seq, run.count)
        out: list[Violation] = []
        if iso is not RC:
            seen = t.ru_reads
            before = len(seen)
            seen.update(writes)
            if t.outcome is TxnOutcome.ABORTED:
                self.aborted_allowed += len(seen) - before
            return out
        t.size = t.size or run.txn_size
        indexes = t.indexes
        first, step = run.txn_index, run.txn_step
        for i, wkey in enumerate(writes):
            if wkey not in indexes:
                indexes[wkey] = first + i * step
        span = self.spans.setdefault((tkey.writer_id, tkey.inc, topic_id, partition), [tkey.txn_id, tkey.txn_id])
        span[0], span[1] = min(span[0], tkey.txn_id), max(span[1], tkey.txn_id)
        if not t.judged:
            self.headed.add(tkey)
        rc = t.rc_reads
        judged_now = t.outcome is TxnOutcome.ABORTED or (t.intended_abort and t.classed)
        for wkey, off in zip(writes, range(run.offset, run.offset + run.count)):
            if wkey not in rc:
                rc[wkey] = off
                if judged_now:
                    out.extend(self._aborted_read(t, wkey, off))
                elif t.intended_abort:  # counted once the ledger says anything of it (its class)
                    self.judge_queue.add(tkey)
        return out

    def on_vanished(self, wkey: WriteKey, off: int) -> None:
        """read_committed no longer finds a record it read: its transaction is judged again."""
        for t in self.txns.values():
            if t.rc_reads.get(wkey) == off:
                self._changed(t).reads_changed()
                del t.rc_reads[wkey]
                if t.judged and not t.partial_counted:
                    t.judged = False
                    self.judge_queue.add(t.key)
                    if not t.writes:  # judged by its headers: again so
                        self.headed.add(t.key)

    def _aborted_read(self, t: TxnTrack, wkey: WriteKey, off: int) -> list[Violation]:
        if wkey in t.aborted_counted:
            return []
        self._changed(t).aborted_counted.add(wkey)
        return [Violation(Invariant.ABORTED_READ, RC, wkey.topic_id, wkey.partition, (off,),
                          (wkey.writer_id, wkey.inc), wkey.seq, txn_id=t.key.txn_id,
                          durability=t.cls.txn.durability, reason=t.cls.txn.reason, writer_name=t.cls.writer)]

    # -- judging ---------------------------------------------------------------------------

    def judge(self, view: Callable[[Isolation, str, int], PartitionView],
              log_start: Callable[[str, int], int] = lambda _t, _p: 0,
              gone: Container[str] = (),
              unsettled: Callable[[str, int, int], bool] = lambda _t, _p, _o: False,
              read_again: Callable[[str, int, int], None] = lambda _t, _p, _o: None) -> list[Violation]:
        """``gone``: topic IDs no longer read; a transaction on one is never judged, and is dropped
        once decided (its acknowledged writes are judged as the topic's). ``unsettled(topic_id,
        partition, offset)``: whether read_committed's memory of that offset waits to be read
        again (a suspected rewrite); a transaction with an acknowledged write missing there waits too.
        ``read_again(topic_id, partition, offset)``: asks for that offset to be read again (then
        unsettled until it was): a transaction missing a write is judged only once read_committed
        read the offsets of its missing writes again after it saw them missing."""
        out: list[Violation] = []
        for tkey in sorted(self.judge_queue):
            t = self.txns.get(tkey)
            if t is None:
                self.judge_queue.discard(tkey)
                continue
            if t.intended_abort and t.classed:
                for wkey, off in sorted(t.rc_reads.items(), key=lambda kv: kv[1]):
                    out.extend(self._aborted_read(t, wkey, off))
            if t.outcome is TxnOutcome.PENDING or t.undecided_writes:
                continue
            if any(tid in gone for tid, _p in t._span()[2]):
                self.judge_queue.discard(tkey)
                self._drop(tkey)
                continue
            tops = t.max_acked()
            rc_past = all(view(RC, tid, p).frontier > top for (tid, p), top in tops.items())
            if t.ready() and rc_past and t.writes:  # without an intent: judged by the headers (below)
                missing = [(w, off) for w, off in t.acked.items() if w not in t.rc_reads]
                if any(unsettled(w.topic_id, w.partition, off) for w, off in missing):
                    continue  # what read_committed remembers there may be a log since rewritten
                if missing and not t.reread:  # or what a reader fetched before it was: read again first
                    self._changed(t).reread = True
                    for w, off in missing:
                        read_again(w.topic_id, w.partition, off)
                    continue
                visible = sum(1 for w, off in t.rc_reads.items() if off <= tops.get(w.part, -1))
                readable = all(_readable(view(RC, tid, p), low, log_start(tid, p))
                               for (tid, p), low in t.min_acked().items())
                if readable and not t.intended_abort and partial_verdict(len(t.writes), visible, t.outcome):
                    tid, p = min(tops)
                    self._changed(t).partial_counted = True
                    out.append(Violation(Invariant.PARTIAL_TXN, RC, tid, p, tuple(sorted(tops.values())),
                                         (tkey.writer_id, tkey.inc), txn_id=tkey.txn_id,
                                         detail=f"{visible} of {len(t.writes)} records visible",
                                         durability=t.cls.txn.durability, reason=t.cls.txn.reason,
                                         writer_name=t.cls.writer))
                if not t.judged:
                    self._changed(t).judged = True
            # Records of it may still be read (a write that timed out can have landed) or vanish (a
            # truncation): kept until both readers are a horizon past everything known of it.
            if ((t.outcome is not TxnOutcome.ABORTED and not rc_past) or (tkey in self.headed and not t.writes)
                    or not self._past_horizon(t, view)):
                continue
            self.judge_queue.discard(tkey)
            self._drop(tkey)
        return out

    def judge_headers(self, partitions: Callable[[str], Container[int] | Any],
                      view: Callable[[Isolation, str, int], PartitionView]) -> list[Violation]:
        """Transactions without an intent, judged from their records' headers (see the module doc).
        ``partitions(topic_id)``: the partitions read_committed reads of that topic. Kept (so a
        re-read of their records does not judge them twice) until both readers are a horizon past
        them, then forgotten, judged or not."""
        out: list[Violation] = []
        for tkey in sorted(self.headed):
            t = self.txns.get(tkey)
            if t is None or t.writes or not t.rc_reads:
                self.headed.discard(tkey)  # gone, or its intent is known: judged as above
                continue
            if not t.judged:
                out.extend(judge_by_headers(self._changed(t), self.intents_up_to, self.spans, partitions))
            if read_past(t, view, self.horizon):
                self.headed.discard(tkey)
                self.judge_queue.discard(tkey)
                self._drop(tkey)
        return out

    def _past_horizon(self, t: TxnTrack, view: Callable[[Isolation, str, int], PartitionView]) -> bool:
        top, _low, parts = t._span()
        if t.decided_at is None:
            self._changed(t).decided_at = {ViewKey(iso, *part): view(iso, *part).frontier for part in parts for iso in (RC, RU)}
        if any(  # short of the horizon past its acknowledged records: not yet
                view(iso, *part).frontier <= max(top.get(part, -1), t.decided_at.get(ViewKey(iso, *part), 0))
                + self.horizon for part in parts for iso in (RC, RU)):
            return False
        known = {part: -1 for part in parts}
        for part, off in [*top.items(), *t.read_top().items()]:
            known[part] = max(known.get(part, -1), off)
        return all(view(iso, *part).frontier > max(known.get(part, -1), t.decided_at.get(ViewKey(iso, *part), 0))
                   + self.horizon for part in known for iso in (RC, RU))

    def to_doc(self, tab: ClassTable) -> dict[str, Any]:
        return {"aborted_allowed": self.aborted_allowed, "txns": [self._doc(t, tab) for t in self.txns.values()],
                "judge_queue": sorted(list(k) for k in self.judge_queue),
                "headed": sorted(list(k) for k in self.headed),
                "spans": [[*k, *v] for k, v in self.spans.items()],
                "intents_up_to": [[*k, n] for k, n in self.intents_up_to.items()]}

    def _doc(self, t: TxnTrack, tab: ClassTable) -> dict[str, Any]:
        d = self._docs.get(t.key) if keeping() else None
        if d is None:
            d = self._docs[t.key] = t.doc_without_class()
        return {**d, "cls": tab.ref(t.cls)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], horizon: int, tab: ClassTable) -> "TransactionsFamily":
        fam = cls(horizon)
        fam.aborted_allowed = doc["aborted_allowed"]
        for d in doc["txns"]:
            t = TxnTrack.from_doc(d, tab)
            fam.txns[t.key] = t
        fam.judge_queue = {TxnKey(*k) for k in doc["judge_queue"]}
        fam.headed = {TxnKey(*k) for k in doc.get("headed", ())}
        fam.spans = {(wid, inc, tid, p): [lo, hi] for wid, inc, tid, p, lo, hi in doc.get("spans", ())}
        fam.intents_up_to = {(wid, inc): n for wid, inc, n in doc.get("intents_up_to", ())}
        return fam
