"""Offsets family: ``inconsistent_offset`` — one offset, two records — and the rewrites seen.

Judged per topic ID and partition, over what the readers returned, over time.

**inconsistent_offset.** One (topic ID, partition, offset) read holding two different records:
the ``read_committed`` and the ``read_uncommitted`` reader disagree, or one reader read the
offset again (Spark resuming lower after a truncation, the prober re-fetching a range on
evidence of a rewrite) and found another record than before. Counted once per offset and
reader. An offset that only one reader returned (``read_committed`` skips aborted and control
records) is not a disagreement; an offset that held a record and now holds none is a rewrite
(and possibly a ``lost_write``), not a second record. False positives: none — an offset's record
never changes in Kafka's log unless it was truncated. Implies a truncation (an unclean election,
an ``acks=1`` failover, a broker that came back empty) or a broker bug; look for ``lost_write``
in the same incident. Class: ``guaranteed`` unless unclean leader election is on (a reader only
reads below the high watermark, which a clean election never truncates).

**Rewrites** (``vigil_log_rewrites_total``, not a violation): every offset whose content a
re-read found changed — another record, a record where there was none, none where there was one
— counted once per offset.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from invariants.catalog import Invariant
from invariants.model import READERS, Ident, Isolation, ViewKey, Violation
from invariants.promises import Promise
from invariants.read_index import PartitionView


def disagree(a: Ident | None, b: Ident | None) -> bool:
    """Two records at one offset differ (an offset one reader skipped is no disagreement)."""
    return a is not None and b is not None and a != b


class OffsetsFamily:
    """``promise_of(topic_id, ident)``: the class of a change of the record ``ident`` (the old one)."""

    def __init__(self, promise_of: Callable[[str, Ident], Promise]) -> None:
        self.promise_of = promise_of
        self.flagged: dict[ViewKey, set[int]] = {}  # offsets already counted per reader
        self.rewritten: dict[tuple[str, int], set[int]] = {}
        self.rewrites: Counter[tuple[str, int]] = Counter()

    def _flag(self, iso: Isolation, tid: str, p: int, off: int, old: Ident, detail: str) -> list[Violation]:
        seen = self.flagged.setdefault(ViewKey(iso, tid, p), set())
        if off in seen:
            return []
        seen.add(off)
        promise = self.promise_of(tid, old)
        return [Violation(Invariant.INCONSISTENT_OFFSET, iso, tid, p, (off,), detail=detail,
                          durability=promise.durability, reason=promise.reason)]

    def cross_reader(self, key: ViewKey, off: int, ident: Ident, other: PartitionView | None) -> list[Violation]:
        """The record one reader just read at ``off``, against what the other reader holds there."""
        theirs = None if other is None else other.at.get(off)
        if not disagree(ident, theirs):
            return []
        detail = f"{key.iso.value} read {ident}, the other reader {theirs}"
        return [v for side in READERS for v in self._flag(side, key.topic_id, key.partition, off, theirs, detail)]

    def on_change(self, key: ViewKey, off: int, old: Ident | None, new: Ident | None) -> list[Violation]:
        """A re-read found ``new`` (None: nothing) where the view held ``old`` (None: nothing)."""
        part = (key.topic_id, key.partition)
        done = self.rewritten.setdefault(part, set())
        if off not in done:
            done.add(off)
            self.rewrites[part] += 1
        if not disagree(old, new):
            return []
        return self._flag(key.iso, key.topic_id, key.partition, off, old,
                          f"{key.iso.value} read {old} here before, {new} now")

    def forget(self, key: ViewKey, v: PartitionView) -> None:
        cut = v.forgotten_below
        flagged = self.flagged.get(key)
        if flagged:
            self.flagged[key] = {o for o in flagged if o >= cut}
        done = self.rewritten.get((key.topic_id, key.partition))
        if done:
            self.rewritten[(key.topic_id, key.partition)] = {o for o in done if o >= cut}

    def to_doc(self) -> dict[str, Any]:
        return {"flagged": [[k.to_doc(), sorted(offs)] for k, offs in self.flagged.items()],
                "rewritten": [[tid, p, sorted(offs)] for (tid, p), offs in self.rewritten.items()],
                "rewrites": [[tid, p, n] for (tid, p), n in self.rewrites.items()]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any], promise_of: Callable[[str, Ident], Promise]) -> "OffsetsFamily":
        fam = cls(promise_of)
        fam.flagged = {ViewKey.from_doc(k): set(offs) for k, offs in doc["flagged"]}
        fam.rewritten = {(tid, p): set(offs) for tid, p, offs in doc["rewritten"]}
        fam.rewrites = Counter({(tid, p): n for tid, p, n in doc["rewrites"]})
        return fam
