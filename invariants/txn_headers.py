"""A transaction judged by its records' headers when the ledger holds no intent of it (the rule
is specified in :mod:`invariants.transactions`, "Torn, by the records' headers"): kept apart so
the family module stays one screenful of state and ledger/read handling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Container

from invariants.catalog import Invariant
from invariants.ledger_format import TxnOutcome
from invariants.model import RC, RU, Isolation, Violation
from invariants.read_index import PartitionView

if TYPE_CHECKING:
    from invariants.transactions import TxnTrack

Spans = dict[tuple[int, int, str, int], list[int]]  # (writer, inc, topic, partition) -> [lowest, highest] txn read


def judge_by_headers(t: "TxnTrack", intents_up_to: dict[tuple[int, int], int], spans: Spans,
                     partitions: Callable[[str], Container[int] | Any]) -> list[Violation]:
    """Judge ``t`` (no intent known) once it can be: sets ``t.judged`` then; the violation if torn."""
    tkey = t.key
    w = (tkey.writer_id, tkey.inc)
    if t.outcome is TxnOutcome.ABORTED or intents_up_to.get(w, 0) <= tkey.txn_id:
        return []  # aborted (what is visible of it is aborted_read), or its intent may still come
    tid = min(t.rc_reads).topic_id
    around = [spans.get((*w, tid, p)) for p in partitions(tid)]
    if not around or not all(sp is not None and sp[0] < tkey.txn_id < sp[1] for sp in around):
        return []  # read_committed has not read around it everywhere yet
    t.judged = True
    visible = len({t.indexes[wk] for wk in t.rc_reads if wk in t.indexes})
    if t.intended_abort or not 0 < visible < t.size:
        return []
    t.partial_counted = True
    first = min(t.rc_reads)
    return [Violation(Invariant.PARTIAL_TXN, RC, first.topic_id, first.partition, tuple(sorted(t.rc_reads.values())),
                      (tkey.writer_id, tkey.inc), txn_id=tkey.txn_id,
                      detail=f"{visible} of {t.size} records visible (by the records' headers: the ledger has no "
                             f"intent of it)",
                      durability=t.cls.txn.durability, reason=t.cls.txn.reason, writer_name=t.cls.writer)]


def read_past(t: "TxnTrack", view: Callable[[Isolation, str, int], PartitionView], horizon: int) -> bool:
    """Both readers a horizon past every record of ``t`` read_committed read."""
    return all(view(iso, w.topic_id, w.partition).frontier > off + horizon
               for w, off in t.rc_reads.items() for iso in (RC, RU))
