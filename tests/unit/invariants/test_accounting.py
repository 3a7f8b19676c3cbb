"""accounting: outcome_gap, and how the ledger fold turns entries into events."""

from invariants.accounting import (
    AckedRun, EntriesMissing, LedgerFold, TxnDecided, TxnWriteDecided, WriterClassified,
)
from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, Start, Stop, TxnInfo, TxnOutcome, WriteOutcome, WriteRange,
    WriterRef,
)
from invariants.model import TxnKey, WriteKey
from invariants.promises import UNKNOWN_CLASS
from tests.unit.invariants.tiny import Story

ONE, TWO = WriterRef("w", 9, 1), WriterRef("w", 9, 2)


def entry(writer, n, body):
    return LedgerEntry(writer, n, 100 + n, body)


def test_two_entries_missing_in_a_writers_numbering():
    s = Story().stop()
    s.entries[-1] = LedgerEntry(s.writer, 3, 0, Stop())  # n 1 and 2 never arrived
    found, _ = s.run()
    assert found == {("outcome_gap", "none"): 2}


def test_re_read_entries_are_not_gaps():
    fold = LedgerFold()
    first = [entry(ONE, 0, Start("c", "T", 1)), entry(ONE, 1, Stop())]
    assert not [ev for ev in fold.apply_all(first + first) if isinstance(ev, EntriesMissing)]


def test_acked_writes_come_out_as_the_runs_the_ledger_has():
    fold = LedgerFold()
    events = fold.apply_all([
        entry(ONE, 0, Intent("T", (WriteRange(0, 0, 5),))),
        entry(ONE, 1, Outcomes("T", (OutcomeRun(0, 0, 3, WriteOutcome.ACKED, 40, 1, 2),
                                     OutcomeRun(0, 3, 2, WriteOutcome.INDETERMINATE, -1, 1, 3, "t")))),
    ])
    assert events == [AckedRun("T", 0, 9, 1, 0, 3, 40, 2, UNKNOWN_CLASS)]
    assert fold.oldest_pending_us() == {}


def test_a_new_incarnation_settles_its_predecessor_and_ignores_what_it_writes_afterwards():
    fold = LedgerFold()
    fold.apply_all([entry(ONE, 0, Intent("T", (WriteRange(0, 0, 2),), TxnInfo(1, 2, False)))])
    assert fold.oldest_pending_us() == {("w", 1): 100}
    classified, *events = fold.apply(entry(TWO, 0, Start("c", "T", 1)))
    assert isinstance(classified, WriterClassified) and (classified.writer_id, classified.inc) == (9, 2)
    tkey = TxnKey(9, 1, 1)
    assert events == [TxnWriteDecided(WriteKey("T", 0, 9, 1, 0), tkey), TxnWriteDecided(WriteKey("T", 0, 9, 1, 1), tkey),
                      TxnDecided(tkey, TxnOutcome.INDETERMINATE)]
    late = fold.apply(entry(ONE, 1, Outcomes("T", (OutcomeRun(0, 0, 2, WriteOutcome.ACKED, 7, 1, 2),))))
    assert late == []  # the zombie's outcomes change nothing
