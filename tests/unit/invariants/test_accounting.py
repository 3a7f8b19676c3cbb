"""accounting: outcome_gap, and how the ledger fold turns entries into events."""

import json

from invariants.accounting import (
    AckedRun, EntriesMissing, LedgerFold, TopicObserved, TopicReplaced, TopicRetired, TxnDecided, TxnWriteDecided,
    WriterClassified,
)
from invariants.ledger_format import (
    Checkpoint, Init, Intent, LedgerEntry, OutcomeRun, Outcomes, PendingWrites, Retire, Start, Stop, TxnInfo,
    TxnOutcome, WriteOutcome, WriteRange, WriterRef, WriterSettings,
)
from invariants.model import TxnKey, WriteKey
from invariants.promises import UNKNOWN_CLASS
from tests.unit.invariants.tiny import INC, TID, WID, Story

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
    # the acknowledgement counts from the append of the entry reporting it (not the writer's clock);
    # the writer's own time of it goes along (rewrites' start, invariants.groups)
    assert events == [AckedRun("T", 0, 9, 1, 0, 3, 40, 101, UNKNOWN_CLASS, ack_ts_us=2)]
    assert fold.oldest_pending_us() == {}


def test_durations_run_on_the_brokers_append_times_where_known():
    fold = LedgerFold()
    fold.apply(LedgerEntry(ONE, 0, 5, Intent("T", (WriteRange(0, 0, 1),)), append_ts_us=9_000))
    assert fold.oldest_pending_us() == {("w", 1): 9_000}  # not the writer's 5


def test_a_writer_stuck_initialising_is_waiting_since_its_init_entry():
    fold = LedgerFold()
    fold.apply_all([entry(ONE, 0, Start("c", "T", 1)), entry(ONE, 1, Init())])
    assert fold.oldest_pending_us() == {("w", 1): 101}
    fold.apply(entry(ONE, 2, Intent("T", (WriteRange(0, 0, 1),))))  # it got past init
    assert fold.oldest_pending_us() == {("w", 1): 102}  # now its intent waits
    fold.apply(entry(ONE, 3, Outcomes("T", (OutcomeRun(0, 0, 1, WriteOutcome.ACKED, 0, 1, 2),))))
    assert fold.oldest_pending_us() == {}


def test_a_late_reader_translates_a_checkpoints_pending_times_to_the_brokers_clock():
    fold = LedgerFold()
    fold.apply(LedgerEntry(ONE, 7, 1_000, Checkpoint("c", "T", 1, WriterSettings(), None,
                                                     (PendingWrites(0, 3, 1, 0, 400),)), append_ts_us=50_000))
    assert fold.oldest_pending_us() == {("w", 1): 49_400}  # pending 600 us before the checkpoint


def test_which_topic_id_a_writers_seqs_were_meant_for():
    fold = LedgerFold()
    fold.apply_all([entry(ONE, 0, Start("c", "A", 1)), entry(ONE, 1, Intent("A", (WriteRange(0, 0, 5),))),
                    entry(ONE, 2, Start("c", "B", 1, replaces="A")), entry(ONE, 3, Intent("B", (WriteRange(0, 5, 2),)))])
    assert [fold.topic_of(9, 1, 0, s) for s in (0, 4, 5, 9)] == ["A", "A", "B", "B"]
    assert fold.topic_of(9, 1, 1, 0) is None and fold.topic_of(9, 2, 0, 0) is None
    back = LedgerFold.from_doc(fold.to_doc())
    assert back.topic_of(9, 1, 0, 6) == "B"


def test_topic_events_a_replaced_and_a_retired_topic():
    fold = LedgerFold(["c"])
    events = fold.apply_all([entry(ONE, 0, Start("c", "B", 2, replaces="A")),
                             entry(ONE, 1, Checkpoint("c", "B", 2, WriterSettings(), None, log_starts=(0, 7))),
                             LedgerEntry(WriterRef("retire-1", 1, 0), 0, 5, Retire("c", "B"))])
    assert [e for e in events if isinstance(e, (TopicObserved, TopicReplaced, TopicRetired))] == [
        TopicObserved("c", "B", 2), TopicReplaced("c", "A", "B"), TopicObserved("c", "B", 2, (0, 7)),
        TopicRetired("c", "B")]
    other = LedgerFold(["c"]).apply(LedgerEntry(WriterRef("retire-2", 1, 0), 0, 5, Retire("d", "D")))
    assert other == []  # another topic's retirement


def test_a_new_incarnation_settles_its_predecessor_and_ignores_what_it_writes_afterwards():
    fold = LedgerFold()
    fold.apply_all([entry(ONE, 0, Intent("T", (WriteRange(0, 0, 2),), TxnInfo(1, 2, False)))])
    assert fold.oldest_pending_us() == {("w", 1): 100}
    classified, observed, *events = fold.apply(entry(TWO, 0, Start("c", "T", 1)))
    assert observed == TopicObserved("c", "T", 1)
    assert isinstance(classified, WriterClassified) and (classified.writer_id, classified.inc) == (9, 2)
    tkey = TxnKey(9, 1, 1)
    assert events == [TxnWriteDecided(WriteKey("T", 0, 9, 1, 0), tkey), TxnWriteDecided(WriteKey("T", 0, 9, 1, 1), tkey),
                      TxnDecided(tkey, TxnOutcome.INDETERMINATE)]
    late = fold.apply(entry(ONE, 1, Outcomes("T", (OutcomeRun(0, 0, 2, WriteOutcome.ACKED, 7, 1, 2),))))
    assert late == []  # the zombie's outcomes change nothing


def test_a_writes_outcome_is_open_until_the_ledger_gives_it_one_or_none_can_come():
    s = Story()
    s.entry(Intent(TID, (WriteRange(0, 0, 3),)))
    s.entry(Outcomes(TID, (OutcomeRun(0, 0, 1, WriteOutcome.ACKED, 0, 1, 2),)))
    fold = LedgerFold()
    fold.apply_all(s.entries)
    assert not fold.outcome_open(WID, INC, TID, 0, 0)  # acknowledged
    assert fold.outcome_open(WID, INC, TID, 0, 1)  # intended, no outcome yet
    assert fold.outcome_open(WID, INC, TID, 0, 5)  # its intent not folded yet
    assert fold.outcome_open(WID, INC + 1, TID, 0, 0)  # a next incarnation whose start is on its way
    assert not fold.outcome_open(WID + 1, 1, TID, 0, 0)  # a writer this ledger never knew
    fold = LedgerFold.from_doc(json.loads(json.dumps(fold.to_doc())))
    assert fold.outcome_open(WID, INC, TID, 0, 1)
    nxt = Story(writer=WriterRef("w", WID, INC + 1))
    fold.apply_all(nxt.entries[:1])  # the next incarnation starts: the predecessor's writes indeterminate
    assert not fold.outcome_open(WID, INC, TID, 0, 1) and fold.outcome_open(WID, INC + 1, TID, 0, 0)
    stopped = LedgerFold()
    stopped.apply_all(Story().entry(Intent(TID, (WriteRange(0, 0, 3),))).stop().entries)
    assert not stopped.outcome_open(WID, INC, TID, 0, 1)
