"""Exactly-once pipelines: ``eos_loss`` and ``eos_duplicate``, and where a consumer stands after an abort.

The EOS canary (``monitor/eos/EosWorker.java``, the Java client) is a consume-transform-produce
worker: it reads the canary topic in a consumer group with ``read_committed``, and for each record
it consumed writes one output record naming the record's *source position* (partition, offset),
in a transaction that also commits the group's offsets (``sendOffsetsToTransaction``). Kafka
promises that the output and the offsets commit together or not at all, so:

**``eos_loss``.** A source position a ``read_committed`` reader read, below the group's
committed offset on its partition, with no copy in the committed output — the group moved past a
record whose output never committed. Judged only where the output is known whole: the committed
offsets are taken first, the output is then read to the ends it had after that (offsets and
output commit in one transaction, so an offset that was committed has its output below those
ends), and the source is judged only below what its reader read.

**``eos_duplicate``.** A source position with more than one copy in the committed output (after
an abort or a restart the worker consumes again from the committed offsets, so it writes a record
again; only one of the copies may commit). Counted once per source position.

Both are ``broken``: no configuration allows them. A record a reader of the source never read
(deleted by retention before it was read, a torn log) is not judged.

**After an abort.** Jepsen asked where a consumer resumes after its transaction is aborted
(KAFKA-17582). The worker reports, per partition of an aborted transaction, its position
``before`` the transaction's poll, its position at the ``end`` of that poll, the group's
``committed`` offset, and its position ``after`` ``abortTransaction`` (before it seeks back to the
committed offset, as an exactly-once application must); :func:`classify_after_abort` names it:
``advance`` (still at the end: the aborted records are skipped unless the application seeks),
``rewind`` (back where the transaction began: its position then, or the committed offset),
``rewind_further`` (below both) or ``other``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

AFTER_ABORT_CLASSES = ("advance", "rewind", "rewind_further", "other")


def classify_after_abort(before: int, end: int, after: int, committed: int = -1) -> str:
    """Where a consumer stands after its transaction was aborted, relative to that transaction:
    its position was ``before`` when the transaction's poll began and ``end`` after it (``before <
    end``); the group's committed offset was ``committed`` (-1: none). A committed offset can be
    below ``before``: it names the record after the last one consumed, while the position also
    passed the control records behind it. Back at either is a ``rewind``."""
    if after == end:
        return "advance"
    if after == before or after == committed:
        return "rewind"
    if after < before and (committed < 0 or after < committed):
        return "rewind_further"
    return "other"


@dataclass(frozen=True)
class EosVerdict:
    losses: tuple[tuple[int, int], ...] = ()  # (partition, offset) of the source, ascending
    duplicates: tuple[tuple[int, int, int], ...] = ()  # (partition, offset, copies), ascending
    judged: Mapping[int, int] = field(default_factory=dict)  # partition -> source offsets judged below


def eos_verdict(source: Mapping[int, Iterable[int]], read_to: Mapping[int, int], committed: Mapping[int, int],
                output: Iterable[tuple[int, int]]) -> EosVerdict:
    """The verdict on one pipeline.

    ``source``: per partition, the offsets a ``read_committed`` reader of the source read, whole
    below ``read_to[p]``. ``committed``: the group's committed offsets, taken *before* ``output``
    (the source positions of every committed output record) was read to its ends.
    """
    copies = Counter(output)
    judged = {p: min(c, read_to.get(p, 0)) for p, c in committed.items()}
    losses = sorted((p, o) for p, offsets in source.items() for o in offsets
                    if o < judged.get(p, 0) and (p, o) not in copies)
    duplicates = sorted((p, o, n) for (p, o), n in copies.items() if n > 1)
    return EosVerdict(tuple(losses), tuple(duplicates), judged)
