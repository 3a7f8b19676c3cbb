"""Offsets family: ``zero_offset``, ``offset_mismatch``, ``inconsistent_offset``.

Judged per reader, per topic ID and partition.

**offset_mismatch.** An expected write (see :mod:`invariants.sequence`) acknowledged at offset
``o`` is read, but never at ``o``: judged when the reader's frontier passes ``o`` and the write
was read at some ``r <= o + H - 1`` (the settle window); for a write whose ack claimed a bogus
offset 0 (``zero_offset``), any read of it counts. Counted once per write. A write read at
``o`` *and* elsewhere is a ``duplicate``, not a mismatch. False positives: none from Kafka's
documented behaviour — the produce response's base offset is where the record is. Implies:
usually a truncation and re-append (with ``lost_write``/``inconsistent_offset`` nearby) or a
broker reporting wrong offsets.

**zero_offset.** A write acknowledged at offset 0 while this reader read a *different* record
at offset 0 of the same topic ID (the Jepsen "bogus offset 0" bug). Counted once per write,
judged once the reader has read offset 0. The write is then not judged ``lost_write`` (its
acked offset is meaningless) but is ``offset_mismatch`` when read anywhere. Cannot be
inferred: the log start offset *at ack time* (a legitimate ack at 0 followed by retention
looks the same as a bogus one afterwards), so a reader that never saw offset 0 counts such a
write ``expired_unread`` rather than guessing. Implies ``offset_mismatch`` once the record
is read.

**inconsistent_offset.** One (topic ID, partition, offset) read holding two different records:
the ``read_committed`` and the ``read_uncommitted`` reader disagree. Counted once per offset in
each reader's series. An offset that only one reader returned (``read_committed`` skips
aborted and control records) is not a disagreement. False positives: none — an offset's
record never changes in Kafka's log. Implies a truncation (unclean election) or a broker bug;
look for ``lost_write`` and ``offset_mismatch`` in the same incident.
"""

from __future__ import annotations

from invariants.model import Ident


def bogus_zero_ack(acked_offset: int, ident: Ident, ident_at_zero: Ident | None) -> bool:
    """A write acked at 0 while the reader found another record at offset 0."""
    return acked_offset == 0 and ident_at_zero is not None and ident_at_zero != ident


def disagree(a: Ident | None, b: Ident | None) -> bool:
    """Two readers' records at one offset differ (an offset one reader skipped is no disagreement)."""
    return a is not None and b is not None and a != b
