"""Sequence family: ``duplicate``, ``reorder``.

Judged per reader (``read_committed`` and ``read_uncommitted`` separately), per topic ID and
partition, over the canary records that reader returned, in offset order.

**duplicate.** One write (writer, incarnation, partition, seq) read at two or more distinct
offsets by one reader: counted once per write, when its second offset is read. Without
idempotence a retry can legitimately duplicate, which is why it is critical only *with*
idempotence (policy lives in the alert rules). Implies nothing else by itself.

**reorder.** Within one writer incarnation and partition, a record read for the first time
whose seq is lower than a seq already read from that writer at a lower offset: counted once
per such record. Writers assign seqs in send order per partition, so with idempotence the log
order must match. A duplicate re-read is not a reorder.

**Horizon.** Duplicates further apart than ``horizon_offsets`` are left to the audit (the
reader's index no longer remembers the first offset).
"""

from __future__ import annotations

from typing import Any

from invariants.catalog import Invariant
from invariants.model import Ident, ViewKey, Violation


def is_reorder(seq: int, max_seq_before: int | None, first_read: bool) -> bool:
    """A first read of ``seq`` after a higher seq of the same writer at a lower offset."""
    return first_read and max_seq_before is not None and seq < max_seq_before


class SequenceFamily:
    """Per view, the highest seq read of each writer incarnation."""

    def __init__(self) -> None:
        self.max_seq: dict[ViewKey, dict[tuple[int, int], int]] = {}

    def on_read(self, key: ViewKey, off: int, ident: Ident, prev: list[int] | None,
                new_offset: bool) -> list[Violation]:
        """A canary record read at ``off``; ``prev``: the offsets it was read at so far, this one
        included when ``new_offset`` (None for its first read)."""
        iso, tid, p = key.iso, key.topic_id, key.partition
        wid, inc, seq = ident
        out: list[Violation] = []
        if new_offset and prev is not None and len(prev) == 2:
            out.append(Violation(Invariant.DUPLICATE, iso, tid, p, tuple(prev), (wid, inc), seq))
        tops = self.max_seq.setdefault(key, {})
        top = tops.get((wid, inc))
        if is_reorder(seq, top, prev is None):
            out.append(Violation(Invariant.REORDER, iso, tid, p, (off,), (wid, inc), seq,
                                 detail=f"seq {seq} after seq {top}"))
        if top is None or seq > top:
            tops[(wid, inc)] = seq
        return out

    def to_doc(self) -> list[Any]:
        return [[key.to_doc(), [[wid, inc, s] for (wid, inc), s in tops.items()]] for key, tops in self.max_seq.items()]

    @classmethod
    def from_doc(cls, doc: list[Any]) -> "SequenceFamily":
        fam = cls()
        for key, tops in doc:
            fam.max_seq[ViewKey.from_doc(key)] = {(wid, inc): s for wid, inc, s in tops}
        return fam
