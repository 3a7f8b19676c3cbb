"""Unconfirmed writes (``acks=0``): counted when missing, never a violation.

A writer with ``acks=0`` is never told whether a write landed, so none of its writes can be
``lost_write``. What can be measured is how many never showed up: an ``unconfirmed`` write (writer,
incarnation, partition, seq ``s``) is *missing* for a reader once that reader has read a record of
the same writer and partition with seq ``>= s + H`` (the settle window, in seqs) and never read
``s``. A writer's records to one partition travel over one connection in order, so a write that
landed is read before any of its successors; the window only absorbs what a reconnect may
shuffle. Exported as ``vigil_unconfirmed_missing_total{isolation}`` — the field reports' measure of
what ``acks=0`` costs when a leader dies.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from invariants.model import Isolation, ViewKey
from invariants.read_index import PartitionView

Writer = tuple[int, int]


class UnconfirmedFamily:
    def __init__(self, settle: int) -> None:
        self.settle = settle
        self.waiting: dict[ViewKey, dict[Writer, list[list[int]]]] = {}  # seq ranges [first, end) not read yet
        self.missing: Counter[Isolation] = Counter()

    def expect(self, key: ViewKey, v: PartitionView, writer: Writer, first: int, count: int,
               top_seq: int | None) -> None:
        """Unconfirmed writes ``first .. first + count - 1``; ``top_seq``: the writer's highest seq read."""
        seqs = [s for s in range(first, first + count) if not v.was_read((*writer, s))]
        ranges = self.waiting.setdefault(key, {}).setdefault(writer, [])
        for s in seqs:
            if ranges and ranges[-1][1] == s:
                ranges[-1][1] += 1
            else:
                ranges.append([s, s + 1])
        ranges.sort()
        if top_seq is not None:
            self._judge(key, writer, top_seq)

    def on_read(self, key: ViewKey, writer: Writer, seq: int) -> None:
        by_writer = self.waiting.get(key)
        ranges = None if by_writer is None else by_writer.get(writer)
        if not ranges:
            return
        kept = []
        for a, b in ranges:
            if a <= seq < b:
                kept += [r for r in ([a, seq], [seq + 1, b]) if r[0] < r[1]]
            else:
                kept.append([a, b])
        by_writer[writer] = kept
        self._judge(key, writer, seq)

    def _judge(self, key: ViewKey, writer: Writer, top_seq: int) -> None:
        """Every seq still waiting at or below ``top_seq - H`` is missing."""
        ranges = self.waiting[key].get(writer, [])
        limit = top_seq - self.settle + 1  # seqs below this are missing
        kept = []
        for a, b in ranges:
            if a < limit:
                self.missing[key.iso] += min(b, limit) - a
                if b > limit:
                    kept.append([limit, b])
            else:
                kept.append([a, b])
        self.waiting[key][writer] = kept

    def forget_topic(self, topic_id: str) -> None:
        self.waiting = {k: v for k, v in self.waiting.items() if k.topic_id != topic_id}

    def to_doc(self) -> dict[str, Any]:
        return {"missing": {iso.value: n for iso, n in self.missing.items()},
                "waiting": [[k.to_doc(), [[wid, inc, rs] for (wid, inc), rs in ws.items() if rs]]
                            for k, ws in self.waiting.items()]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], settle: int) -> "UnconfirmedFamily":
        fam = cls(settle)
        fam.missing = Counter({Isolation(k): n for k, n in doc["missing"].items()})
        fam.waiting = {ViewKey.from_doc(k): {(wid, inc): rs for wid, inc, rs in ws} for k, ws in doc["waiting"]}
        return fam
