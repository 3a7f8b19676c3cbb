"""Write cycles: ``g0_write_cycle``, ``read_committed`` only, severity info.

Kafka's transactions are atomic (all of a transaction's records become visible, or none) but
not isolated from each other: two transactions open at the same time append to each partition in
whatever order their produce requests reach that partition's leader, so one can come first on one
partition and second on another (Jepsen's G0, a write cycle; Kafka's documentation implies it
cannot happen, Kafka's design allows it). Vigil counts them as a measurement, never a page.

**Definition.** The *position* of a transaction T on a partition p is the lowest offset at which
``read_committed`` read a record of T on p. Two transactions T and U (any two, of any writers) on
the same topic ID form a write cycle when there are partitions p and q holding positions of both
with T before U on p and U before T on q. Counted once per pair of transactions, when the last of
the four positions is read. Records carrying the intended-abort flag are not positions (what
``read_committed`` shows of such a transaction is ``aborted_read``). A transaction's records
interleaved with another's on one partition are not a cycle by themselves: only the positions
(the first record on each partition) are ordered. Only transactions read whole (every index
their records' headers name) are judged: where the reading began inside one (a log start on a
segment boundary, a rebuild from the log start, a reader started at the end) a later record of it
would stand for its position, and made-up cycles came of it (found by a review: one reader starting
an offset later, the audit after retention, counted a cycle where the whole log holds none).

**Class.** ``at_risk`` (reason ``kafka_allows``): Kafka makes no promise against it.

**Horizon.** A position is forgotten once ``read_committed`` is ``horizon_offsets`` past it on
its partition (with the rest of what the reader remembers there); what the transaction showed
there is remembered (a later record of it on that partition is no new position), and so are the
pairs it was counted in, until every record of it was read (the header's transaction size) and
all its positions are forgotten. So a cycle is missed only where a position was forgotten before
the other transaction's on that partition was read (positions further apart than the horizon on
one partition, or one partition's reader more than a horizon ahead of another's): the audit's
only. A transaction never read whole (a torn one, one cut by the log start where the reader
began) stays remembered in that small form: a few per reader start. A copy of a record of a
transaction already forgotten, read more than a horizon later (a duplicate that far apart, which
the live duplicate check also leaves to the audit), is taken for a new position.

**Logs that change.** A position is the lowest offset read; a record read again lower (a
rewritten log) moves it down and judges its pairs again. A record read and then found changed or
gone (a re-read finds another record or none there) takes the position on it away: the
transaction is judged on that partition no more — and so are all positions above it there, which
rest on the old log or on a mix of both (old positions against a new log's reused offsets made up
cycles: 19 and 26 on the wiped-partition test before this rule, where the audit counted none).
A cycle counted before a rewrite stays counted; the audit, reading the final log, judges what is
left. Live and the audit are **not** held equal on a log rewritten under the reader: live
reads a log that restarted at lower offsets (a node back empty, an unclean election) only where it
reads again, the audit reads the final log whole — measured on the local cluster with a node's
partitions wiped under one transactional writer, live 0, audit 5 in one run (one writer's
transactions are sequential: which records of the new log order them both ways is not
established yet). A topic ID that is gone is forgotten.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Any

from invariants.catalog import Invariant
from invariants.model import RC, TxnKey, Violation
from invariants.promises import KAFKA_ALLOWS

Part = tuple[str, int]  # (topic ID, partition)
MAX_KEY = TxnKey(1 << 64, 1 << 32, 1 << 64)  # above every transaction key: bisects past a position
MIN_KEY = TxnKey(-1, -1, -1)  # below every transaction key: bisects to a position


def inversions(positions: dict[TxnKey, tuple[int, int]]) -> list[tuple[TxnKey, TxnKey]]:
    """The pairs of transactions whose two positions (on partitions p and q) are in opposite
    orders, each as (first on p, first on q). Sorted by position on p, then each one against
    the earlier ones with a later position on q: O(n log n) plus the pairs found."""
    order = sorted(positions.items(), key=lambda kv: kv[1])  # equal on p: never a pair (ties are no order)
    seen_q: list[tuple[int, TxnKey]] = []  # (position on q, transaction) of those earlier on p, sorted
    out: list[tuple[TxnKey, TxnKey]] = []
    for tkey, (_on_p, on_q) in order:
        for _later_q, earlier in seen_q[bisect_right(seen_q, on_q, key=lambda e: e[0]):]:
            out.append((earlier, tkey))
        insort(seen_q, (on_q, tkey), key=lambda e: e[0])
    return out


def cycle_violation(topic_id: str, first: TxnKey, second: TxnKey, p: int, q: int,
                    pos: dict[TxnKey, dict[Part, int]]) -> Violation:
    """One cycle, named by the pair (the lower transaction key as the writer and transaction, the
    other in ``other_txn``): the same however and wherever it was found."""
    a, b = sorted((first, second))
    pa, pb = pos[a], pos[b]
    detail = (f"txn {a.txn_id} of writer {a.writer_id:016x}/{a.inc} and txn {b.txn_id} of writer "
              f"{b.writer_id:016x}/{b.inc}: partition {p} at offsets {pa[(topic_id, p)]} / {pb[(topic_id, p)]}, "
              f"partition {q} at offsets {pa[(topic_id, q)]} / {pb[(topic_id, q)]}")
    return Violation(Invariant.G0_WRITE_CYCLE, RC, topic_id, -1, (), (a.writer_id, a.inc), txn_id=a.txn_id,
                     detail=detail, durability=KAFKA_ALLOWS.durability, reason=KAFKA_ALLOWS.reason,
                     other_txn=tuple(b))


class WriteCyclesFamily:
    sweep_slack = 64  # tails longer than 4 x the transactions on both partitions plus this: one sweep

    def __init__(self) -> None:
        self.pos: dict[TxnKey, dict[Part, int]] = {}  # transaction -> its position per partition
        self.order: dict[Part, list[tuple[int, TxnKey]]] = {}  # partition -> (position, transaction), sorted
        self.counted: set[tuple[TxnKey, TxnKey]] = set()  # pairs counted (lower key first)
        self.fresh: dict[Part, set[TxnKey]] = {}  # positions new since the last judgement
        self.gone: dict[TxnKey, set[Part]] = {}  # partitions where its position was forgotten
        self.read: dict[TxnKey, list[Any]] = {}  # [the header's size, {indexes read}]

    def on_read(self, tkey: TxnKey, topic_id: str, partition: int, offset: int, intended_abort: bool,
                size: int = 0, index: int = 0) -> None:
        """A record of a transaction read by ``read_committed`` (``size``/``index``: its header's)."""
        if intended_abort:
            return
        seen = self.read.setdefault(tkey, [0, set()])
        was_whole = bool(seen[1]) and self._read_whole(tkey)
        seen[0] = seen[0] or size
        seen[1].add(index)
        part = (topic_id, partition)
        if not was_whole and self._read_whole(tkey):  # read whole now: its pairs can be judged
            for known in self.pos.get(tkey, {}):
                self.fresh.setdefault(known, set()).add(tkey)
        if part in self.gone.get(tkey, ()):  # its position there was forgotten: a later record is no new one
            if not self.pos.get(tkey) and self._read_whole(tkey):
                self._drop({tkey})  # read whole now, and nothing of it left to compare
            return
        mine = self.pos.setdefault(tkey, {})
        old = mine.get(part)
        if old is not None and old <= offset:
            return
        order = self.order.setdefault(part, [])
        if old is not None:  # read again lower (a rewritten log): the position moves
            order.remove((old, tkey))
        mine[part] = offset
        if order and order[-1][0] > offset:
            insort(order, (offset, tkey))
        else:
            order.append((offset, tkey))
        self.fresh.setdefault(part, set()).add(tkey)

    def on_read_run(self, tkey: TxnKey, topic_id: str, partition: int, run: Any) -> None:
        """A run of the transaction's records read by ``read_committed``: :meth:`on_read` of each."""
        for i in range(run.count):
            self.on_read(tkey, topic_id, partition, run.offset + i, run.intended_abort, run.txn_size,
                         run.txn_index + i * run.txn_step)

    def judge(self) -> list[Violation]:
        """Cycles among the positions known: each new position against the transactions on the
        other partitions of its transaction, found from the transactions after it on either
        partition, or (when those are many: a reader far ahead on one) by one sweep of both."""
        pairs: dict[tuple[str, int, int], set[TxnKey]] = {}
        for (tid, p), new in self.fresh.items():
            for f in new:
                for t2, q in self.pos.get(f, ()):
                    if t2 == tid and q != p:
                        pairs.setdefault((tid, min(p, q), max(p, q)), set()).add(f)
        self.fresh.clear()
        out: list[Violation] = []
        for (tid, p, q), new in sorted(pairs.items()):
            for first, second in self._inversions(tid, p, q, new):
                pair = (first, second) if first < second else (second, first)
                if pair not in self.counted and self._read_whole(first) and self._read_whole(second):
                    self.counted.add(pair)
                    out.append(cycle_violation(tid, first, second, p, q, self.pos))
        return out

    def _inversions(self, tid: str, p: int, q: int, new: set[TxnKey]) -> list[tuple[TxnKey, TxnKey]]:
        """The pairs ordered differently on p and q with one of ``new`` in them (and maybe others)."""
        kp, kq = (tid, p), (tid, q)
        order_p, order_q = self.order[kp], self.order[kq]
        mine = [(t, self.pos[t][kp], self.pos[t][kq]) for t in new if kp in self.pos[t] and kq in self.pos[t]]
        after = [(bisect_right(order_p, (fp, MAX_KEY)), bisect_right(order_q, (fq, MAX_KEY))) for _t, fp, fq in mine]
        work = sum(len(order_p) - ap + len(order_q) - aq for ap, aq in after)
        if work > 4 * min(len(order_p), len(order_q)) + self.sweep_slack:
            small, other = (order_p, kq) if len(order_p) <= len(order_q) else (order_q, kp)
            both = [t for _o, t in small if other in self.pos[t]]
            return inversions({t: (self.pos[t][kp], self.pos[t][kq]) for t in both})
        out: list[tuple[TxnKey, TxnKey]] = []
        for (f, fp, fq), (ap, aq) in zip(mine, after):
            out.extend((u, f) for _o, u in order_q[aq:] if self.pos[u].get(kp, fp) < fp)  # u first on p, f on q
            out.extend((f, u) for _o, u in order_p[ap:] if self.pos[u].get(kq, fq) < fq)  # f first on p, u on q
        return out

    def on_rewritten(self, topic_id: str, partition: int, offset: int) -> None:
        """A re-read by read_committed found the record it had read at ``offset`` changed or gone:
        the log was rewritten from there, and every position at or above it rests on the old log
        (or on a mix of both). They are taken away — those transactions are judged on that
        partition no more — before what the re-read found is read in."""
        part = (topic_id, partition)
        order = self.order.get(part)
        if not order:
            return
        i = bisect_left(order, (offset, MIN_KEY))
        old = [t for _o, t in order[i:]]
        del order[i:]
        self._drop({t for t in old if self._take_away(t, part)})

    def forget(self, topic_id: str, partition: int, below: int) -> None:
        """Positions below ``below`` on a partition are forgotten (the reader's horizon); a
        transaction read whole with none left is forgotten, with the pairs it was counted in."""
        part = (topic_id, partition)
        order = self.order.get(part)
        if not order or order[0][0] >= below:
            return
        cut = bisect_right(order, (below - 1, MAX_KEY))
        old = [t for _o, t in order[:cut]]
        del order[:cut]
        self._drop({t for t in old if self._take_away(t, part)})

    def _take_away(self, t: TxnKey, part: Part) -> bool:
        """Its position on ``part`` (already out of the partition's order) is gone, marked so; True
        when nothing of it is left to compare and it was read whole."""
        del self.pos[t][part]
        self.fresh.get(part, set()).discard(t)
        self.gone.setdefault(t, set()).add(part)
        return not self.pos[t] and self._read_whole(t)

    def _drop(self, txns: set[TxnKey]) -> None:
        """Forget transactions that have no position left, with the pairs they were counted in."""
        if not txns:
            return
        for t in txns:
            for held in (self.pos, self.gone, self.read):
                held.pop(t, None)
        self.counted = {pair for pair in self.counted if pair[0] not in txns and pair[1] not in txns}

    def _read_whole(self, t: TxnKey) -> bool:
        size, indexes = self.read.get(t, (0, ()))
        return len(indexes) >= size  # a header without a size (0): as good as whole

    def forget_topic(self, topic_id: str) -> None:
        """A topic ID that is gone: nothing of it is read any more."""
        for part in [k for k in self.order if k[0] == topic_id]:
            for _o, t in self.order.pop(part):
                del self.pos[t][part]
            self.fresh.pop(part, None)
        for t, parts in self.gone.items():
            parts.difference_update({k for k in parts if k[0] == topic_id})
        self._drop({t for t in self.read if not self.pos.get(t) and not self.gone.get(t)})

    def to_doc(self) -> dict[str, Any]:
        return {"pos": [[*t, tid, p, off] for t, mine in self.pos.items() for (tid, p), off in mine.items()],
                "counted": [[*a, *b] for a, b in self.counted],
                "fresh": [[tid, p, *t] for (tid, p), ts in self.fresh.items() for t in ts],
                "gone": [[*t, tid, p] for t, parts in self.gone.items() for tid, p in parts],
                "read": [[*t, size, sorted(indexes)] for t, (size, indexes) in self.read.items()]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> "WriteCyclesFamily":
        fam, doc = cls(), doc or {}  # absent: a state saved before write cycles were judged
        for wid, inc, txn, tid, p, off in doc.get("pos", ()):
            t = TxnKey(wid, inc, txn)
            fam.pos.setdefault(t, {})[(tid, p)] = off
            fam.order.setdefault((tid, p), []).append((off, t))
        for order in fam.order.values():
            order.sort()
        fam.counted = {(TxnKey(*row[:3]), TxnKey(*row[3:])) for row in doc.get("counted", ())}
        for tid, p, *t in doc.get("fresh", ()):
            fam.fresh.setdefault((tid, p), set()).add(TxnKey(*t))
        for wid, inc, txn, tid, p in doc.get("gone", ()):
            fam.gone.setdefault(TxnKey(wid, inc, txn), set()).add((tid, p))
        fam.read = {TxnKey(wid, inc, txn): [size, set(indexes)] for wid, inc, txn, size, indexes in doc.get("read", ())}
        return fam
