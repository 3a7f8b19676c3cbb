"""Ledger entries fetched far ahead of the canary readers, held until the readers come near.

**Why.** The ledger is small beside the canary (an outcome entry stands for a whole producer
batch), so in a catch-up Spark reads it far ahead of the canary: over a backlog of 10M records the
first batch read the whole ledger, and the checker then tracked every acknowledgement and
transaction of the backlog from its first batch on (its saved state 18.9 MB at most, against 0.8 at
the end; 96.8 MB over 50M reads). Held here instead, an entry reaches the checker once the readers
are near it, and the saved state stays about as large as it is live.

**The rule.** Every micro-batch, before its reads are applied:

- its ledger rows are *admitted* behind those held, per ledger partition, in offset order;
- the *threshold* becomes the newest timestamp of a canary record read so far (either reader,
  this batch's included) plus the *lead* (``watch.ledger_lead_s``); it never goes back;
- an entry is *due* when its writer wrote it at or before the threshold (its own clock, as the
  canary records' timestamps are the writers'), or when it acknowledges a write at an offset the
  readers have reached, this batch's reads included (the highest offset read so far per canary
  partition: the *offset floor*, which needs no clock; an acknowledgement that comes after the
  readers passed its offset, as live, is due at once);
- per ledger partition, everything up to its last entry due is *released* (an entry not due before
  it goes with it: a writer's entries must reach the checker in their order — the ledger fold drops
  an entry numbered below one it has seen — and early is always safe), then every entry after those
  that acknowledges nothing (a transaction's end, the next intent, a checkpoint: nothing to wait for);
- everything is released when the batch was not cut short by ``maxOffsetsPerTrigger`` (the
  readers are at the end of the canary: live, every batch), and between batches once Spark says a
  trigger read everything there was (:mod:`monitor.watch.ledger_hold`).

**Why no verdict on the canary's history changes.** Those verdicts do not depend on when the
checker learns an entry (they are stable under any batch split and interleaving,
:mod:`invariants.checker`; before the hold the whole ledger came first), but for the horizon: an acknowledgement applied after the readers passed
its offset by more than ``horizon_offsets`` is ``expired_unread``, the audit's to judge. The offset
floor applies every acknowledgement before the first read at or past its lowest offset (or in the
batch it comes in, when the readers passed it already, as live), whatever
the clocks say (a writer behind the brokers, a ledger leader's clock that jumped), so none expires
that way; a transaction's end follows its acknowledgements. The threshold only releases earlier,
to keep what is fetched of the ledger about ``lead`` ahead of the readers rather than waiting for
the readers to reach each offset. What may wait longer than live are entries that acknowledge
nothing and are followed by nothing: a stopped writer's last checkpoint or ``stop``; they wait
for the threshold, or for the end of the catch-up. The threshold assumes the canary topic keeps
its writers' timestamps (``CreateTime``, as Vigil creates it): with ``LogAppendTime`` the brokers'
clock stands in for the writers', and only entries that acknowledge nothing can wait longer for it.
The threshold is the newest record read in *any* partition, not in the partition read least far,
though a partition far ahead in time (a wiped or recreated partition's new log, all late records,
read from the first batch on) then carries it towards the end of the backlog and the hold releases
more (memory, not verdicts). Taken from the partition read least far, a transaction's end, which
acknowledges nothing, waited behind its acknowledgement on a partition read at older times while
its records on the partition ahead were read far past: read_committed registered them too late,
expired (horizon) where the whole ledger judges them (a review found it; the unit test
``test_a_transaction_end_is_released_once_any_partition_is_read_past_its_time``).

**What does change.** The ``group_skip`` and ``eos_loss`` confirmations wait for the ledger to be
read a few seconds further than when the skip or loss was found (``Checker._ledger_behind``, on
the ledger's clock): in a catch-up the hold keeps that clock near the readers instead of at the
end of the backlog, so those waits end later (and a skip's wait starts only once the ledger folded the
skipped record's intent: ``Checker._intent_unread``).

Pure: no I/O and no Kafka. The items are opaque (the adapter's ledger rows); the hold keeps their
order and their timestamps, and can be rebuilt from what it held at each batch
(:meth:`LedgerHold.rebuild`), so a restart holds exactly what was held when the state was saved.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

NO_THRESHOLD = -(2**63)


@dataclass(slots=True)
class Held:
    """One ledger row held: the batch that fetched it and its place among the rows that batch left
    held (``index``, its row in that batch's file), its ledger partition, its writer's clock (µs;
    None: not an entry, never held), the lowest canary offset it acknowledges per canary partition,
    and the row itself (opaque here)."""

    batch_id: int
    key: int
    ts_us: int | None
    acked: tuple[tuple[int, int], ...]
    item: Any
    index: int = -1
    n: int = -1  # its place in its partition's queue since the hold was made (the due index's)


@dataclass
class _DueIndex:
    """One ledger partition's held rows by when they fall due: min-heaps of (writer's clock, n) and,
    per canary partition, of (lowest acknowledged offset, n). The threshold and the offsets read
    only grow, so a row once due stays due: each is popped once, and the highest ``n`` popped is
    the last row due (``last``). Rows released meanwhile leave stale entries, dropped as they
    surface or when the heaps are rebuilt from the queue."""

    by_ts: list = field(default_factory=list)
    by_offset: dict[int, list] = field(default_factory=dict)
    last: int = -1
    pushed: int = 0  # entries pushed since the index was made
    live: int = 0  # entries of rows still held

    def add(self, h: Held) -> None:
        if h.ts_us is None:
            self.last = max(self.last, h.n)
            return
        heapq.heappush(self.by_ts, (h.ts_us, h.n))
        for p, off in h.acked:
            heapq.heappush(self.by_offset.setdefault(p, []), (off, h.n))
        self.pushed += 1 + len(h.acked)
        self.live += 1 + len(h.acked)

    def released(self, h: Held) -> None:
        if h.ts_us is not None:
            self.live -= 1 + len(h.acked)

    def stale(self) -> bool:
        """Mostly entries of rows released (then made again from the queue)."""
        return self.pushed > 2 * self.live + 1024

    def due_through(self, threshold_us: int, read_high: Mapping[int, int]) -> int:
        while self.by_ts and self.by_ts[0][0] <= threshold_us:
            self.last = max(self.last, heapq.heappop(self.by_ts)[1])
        for p, heap in self.by_offset.items():
            high = read_high.get(p, -1)
            while heap and heap[0][0] <= high:
                self.last = max(self.last, heapq.heappop(heap)[1])
        return self.last


@dataclass
class LedgerHold:
    lead_us: int
    threshold_us: int = NO_THRESHOLD  # entries written at or before it are due
    released_through: int = -1  # every row of this batch and the ones before it was released
    queues: dict[int, deque] = field(default_factory=dict)  # ledger partition -> rows held, in order
    read_high: dict[int, int] = field(default_factory=dict)  # canary partition -> the highest offset read so far
    _index: dict[int, _DueIndex] = field(default_factory=dict, repr=False)  # ledger partition -> its rows by due
    _next: dict[int, int] = field(default_factory=dict, repr=False)  # ledger partition -> the next row's n
    _per_batch: dict[int, int] = field(default_factory=dict, repr=False)  # batch -> its rows still held

    def _admit(self, h: Held) -> None:
        h.n = self._next.get(h.key, 0)
        self._next[h.key] = h.n + 1
        self.queues.setdefault(h.key, deque()).append(h)
        self._index.setdefault(h.key, _DueIndex()).add(h)
        self._per_batch[h.batch_id] = self._per_batch.get(h.batch_id, 0) + 1

    def _released(self, h: Held) -> None:
        left = self._per_batch[h.batch_id] - 1
        if left:
            self._per_batch[h.batch_id] = left
        else:
            del self._per_batch[h.batch_id]

    def batches(self) -> list[int]:
        """The batches with a row still held: the files the hold needs."""
        return sorted(self._per_batch)

    def held(self) -> int:
        return sum(len(q) for q in list(self.queues.values()))  # (a copy: read without the batch lock too)

    def oldest_batch(self) -> int | None:
        """The oldest batch with a row still held (None: nothing held)."""
        firsts = [q[0].batch_id for q in self.queues.values() if q]
        return min(firsts) if firsts else None

    def take(self, batch_id: int, rows: Iterable[tuple[int, int | None, tuple[tuple[int, int], ...], Any]],
             newest_read_us: int | None, read_ends: Mapping[int, int], drained: bool) -> tuple[list[Any], list[Held]]:
        """One batch: admit its ledger ``rows`` ((ledger partition, writer's clock µs, acknowledged
        (canary partition, lowest offset) pairs, item), in offset order per partition), raise the
        threshold to ``newest_read_us`` (the newest canary record this batch read; None: none) plus
        the lead, and release what is due before the batch's reads (``read_ends``: the highest
        offset it read per canary partition). Returns the items released (in the order to apply
        them: each partition's in offset order) and the rows of this batch left held, numbered as
        their batch's file holds them (what :meth:`rebuild` needs of it)."""
        admitted = [Held(batch_id, key, ts, tuple(acked), item) for key, ts, acked, item in rows]
        for h in admitted:
            self._admit(h)
        if newest_read_us is not None:
            self.threshold_us = max(self.threshold_us, newest_read_us + self.lead_us)
        for p, off in read_ends.items():  # (an acknowledgement the readers passed before it came is due)
            self.read_high[p] = max(off, self.read_high.get(p, off))
        released = self.release_all(batch_id) if drained else self._release_due()
        by_key: dict[int, list[Held]] = {}
        for h in admitted:
            by_key.setdefault(h.key, []).append(h)
        still = []  # per partition, the rows held are the last ones admitted
        for key, hs in by_key.items():
            left = len(self.queues.get(key, ()))
            still.extend(hs[len(hs) - min(left, len(hs)):])
        for i, h in enumerate(still):
            h.index = i
        return released, still

    def release_all(self, batch_id: int) -> list[Any]:
        """Everything held, in order (the readers are at the end of the canary)."""
        out = [h.item for key in sorted(self.queues) for h in self.queues[key]]
        self.queues.clear()
        self._index.clear()
        self._per_batch.clear()
        self.released_through = max(self.released_through, batch_id)
        return out

    def _release_due(self) -> list[Any]:
        """Per partition, everything up to its last row due (a row not due yet before it is released
        with it: early is safe, and a writer's entries keep their order), then every row that
        acknowledges nothing after it (a transaction's end, a writer's next intent, a checkpoint:
        nothing to wait for). Logarithmic in the rows held (:class:`_DueIndex`), not linear: a
        catch-up may hold the whole ledger of its backlog, every batch."""
        out = []
        for key in sorted(self.queues):
            q, index = self.queues[key], self._index[key]
            last = index.due_through(self.threshold_us, self.read_high)
            while q and (q[0].n <= last or not q[0].acked):  # (then those that acknowledge nothing)
                index.released(q[0])
                self._released(q[0])
                out.append(q.popleft().item)
            if not q:
                del self.queues[key], self._index[key]
            elif index.stale():
                self._index[key] = fresh = _DueIndex(last=last)
                for h in q:
                    fresh.add(h)
        return out

    def heads(self) -> list[list[int]]:
        """Per partition holding rows, where its first row held sits: [partition, batch, index]."""
        return [[key, q[0].batch_id, q[0].index] for key, q in sorted(self.queues.items()) if q]

    @classmethod
    def rebuild(cls, lead_us: int, doc: Mapping[str, Any],
                files: Iterable[tuple[int, list[tuple[int, int | None, tuple[tuple[int, int], ...], Any]]]]
                ) -> "LedgerHold":
        """The hold as it was saved (``doc``: :meth:`to_doc`): ``files`` are the rows each batch left
        held (:meth:`take`'s second result, in its order), batch by batch in order; of each
        partition, the rows from its saved head on are held."""
        hold = cls(lead_us, doc["threshold_us"], doc["released_through"])
        hold.read_high = {p: off for p, off in doc.get("read_high", [])}
        heads = {key: (b, i) for key, b, i in doc.get("heads", [])}
        for batch_id, rows in files:
            if batch_id <= hold.released_through:
                continue
            for index, (key, ts, acked, item) in enumerate(rows):
                if key in heads and (batch_id, index) >= heads[key]:
                    hold._admit(Held(batch_id, key, ts, tuple(acked), item, index))
        return hold

    def to_doc(self) -> dict[str, Any]:
        return {"threshold_us": self.threshold_us, "released_through": self.released_through, "heads": self.heads(),
                "read_high": sorted([p, off] for p, off in self.read_high.items()), "batches": self.batches()}
