"""Sequence family: ``lost_write``, ``unseen``, ``duplicate``, ``reorder``.

Judged per reader (``read_committed`` and ``read_uncommitted`` separately), per topic ID and
partition, over the records that reader returned, in offset order.

**Expected writes.** For ``read_uncommitted``: every ``acked`` write. For ``read_committed``:
acked writes outside transactions and acked writes of transactions whose commit returned
(``committed``). Writes of aborted or undecided transactions are judged by the transaction
family instead; ``failed``, ``indeterminate``, ``unconfirmed`` and ``pending`` writes are
never expected (they may or may not exist — *late is not lost*, and neither is *maybe*).

**lost_write.** An expected write acked at offset ``o`` is judged once the reader's frontier
(highest offset read + 1) is past ``o``: read at ``o`` → fine; read at another offset ``r``
with ``r <= o + H - 1`` → ``offset_mismatch`` (offsets family); else, once the frontier
reaches ``o + H`` without it → ``lost_write``. ``H`` is the settle window
(:class:`invariants.model.Settings`), which lets a record that landed a few offsets away count
as mismatched rather than lost. Writes acked below the first offset the reader read, or below
the partition's log start offset when judged, are ``expired_unread`` — never violations
(Jepsen's rule: only writes below the highest offset read can be called lost).
Cannot be inferred: the fate of writes above the frontier; a write whose ack claims offset 0
while offset 0 holds another record is judged by ``zero_offset`` instead (its acked offset is
bogus, so "missing at o" means nothing). False positives: none from Kafka's documented
behaviour; a writer that lies in its ledger (a drill) or a ledger written by a different
canary version. Implies: a truncated log gives ``lost_write`` together with
``inconsistent_offset`` (the reused offsets) and, for records re-appended later,
``offset_mismatch``.

**unseen.** A gauge, not a loss: expected writes acked more than a deadline ago that the
reader has not reached yet (frontier not past their offset).

**duplicate.** One write (writer, incarnation, partition, seq) read at two or more distinct
offsets by one reader: counted once per write, when its second offset is read. Without
idempotence a retry can legitimately duplicate, which is why it is critical only *with*
idempotence (policy lives in the alert rules). Implies nothing else by itself.

**reorder.** Within one writer incarnation and partition, a record read for the first time
whose seq is lower than a seq already read from that writer at a lower offset: counted once
per such record. Writers assign seqs in send order per partition, so with idempotence the log
order must match. A duplicate re-read is not a reorder.

**Horizon.** The live checker remembers, per reader and partition, which write sits at each
offset for ``horizon_offsets`` behind the frontier; duplicates further apart and acks that
arrive later than that are left to the audit (an ack too late to judge is counted
``expired_unread``).
"""

from __future__ import annotations

from typing import Iterable

from invariants.model import Verdict


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


def is_reorder(seq: int, max_seq_before: int | None, first_read: bool) -> bool:
    """A first read of ``seq`` after a higher seq of the same writer at a lower offset."""
    return first_read and max_seq_before is not None and seq < max_seq_before
