"""Offsets family: ``inconsistent_offset`` — one offset, two records.

Judged per topic ID and partition, over what both readers returned.

**inconsistent_offset.** One (topic ID, partition, offset) read holding two different records:
the ``read_committed`` and the ``read_uncommitted`` reader disagree. Counted once per offset in
each reader's series. An offset that only one reader returned (``read_committed`` skips
aborted and control records) is not a disagreement. False positives: none — an offset's
record never changes in Kafka's log. Implies a truncation (unclean election) or a broker bug;
look for ``lost_write`` and ``offset_mismatch`` in the same incident.
"""

from __future__ import annotations

from invariants.catalog import Invariant
from invariants.model import READERS, Ident, ViewKey, Violation
from invariants.read_index import PartitionView


def disagree(a: Ident | None, b: Ident | None) -> bool:
    """Two readers' records at one offset differ (an offset one reader skipped is no disagreement)."""
    return a is not None and b is not None and a != b


def cross_reader(key: ViewKey, off: int, ident: Ident, other: PartitionView | None) -> list[Violation]:
    """The record one reader just read at ``off``, against what the other reader read there."""
    theirs = None if other is None else other.at.get(off)
    if not disagree(ident, theirs):
        return []
    detail = f"{key.iso.value} read {ident}, the other reader {theirs}"
    return [Violation(Invariant.INCONSISTENT_OFFSET, side, key.topic_id, key.partition, (off,), detail=detail)
            for side in READERS]
