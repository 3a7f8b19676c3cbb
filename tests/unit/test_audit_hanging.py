"""The audit's lso_stuck: a transaction counts on a partition where its records are in the final log
and the high watermark was past its first record there (an acknowledgement at or above it) for more
than the threshold before it ended (committed or aborted); times on the brokers' clock."""

from __future__ import annotations

from typing import Callable

import pytest

from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome, WriteRange, WriterRef,
)
from monitor.audit.hanging import hanging_transactions

TID = "topic-1"
TXN_W = WriterRef("t", 1, 1)
PLAIN_W = WriterRef("p", 2, 1)
S = 1_000_000  # µs
EPOCH_S = 1_700_000_000  # the times below are seconds after this


class Log:
    """A ledger whose writers' clocks agree with the brokers' (entry time == append time), and the
    final read_uncommitted log."""

    def __init__(self, skew_s: float | Callable[[float], float] = 0.0) -> None:
        self.entries: list[LedgerEntry] = []
        self.ru: dict = {}
        # how far the writers' clocks are ahead of the brokers' (a function of the time: steps, slews)
        self.skew: Callable[[float], float] = skew_s if callable(skew_s) else (lambda _t: skew_s)
        self.ledger_away: tuple[float, float] | None = None  # entries written meanwhile land at its end

    def wts(self, t_s: float) -> int:
        """The writers' clock at ``t_s`` (brokers' time), in µs."""
        return int((EPOCH_S + t_s + self.skew(t_s)) * S)

    def at(self, t_s: float, writer: WriterRef, body) -> "Log":
        appended = t_s
        if self.ledger_away and self.ledger_away[0] <= t_s < self.ledger_away[1]:
            appended = self.ledger_away[1]
        self.entries.append(LedgerEntry(writer, len(self.entries), self.wts(t_s), body,
                                        append_ts_us=int((EPOCH_S + appended) * S)))
        return self

    def txn(self, begin_s: float, txn: int, parts: dict[int, int], end_s: float | None,
            outcome: TxnOutcome = TxnOutcome.COMMITTED, acked_s: float | None = None,
            written_s: float | None = None, writer: WriterRef = TXN_W, in_log: tuple[int, ...] | None = None) -> "Log":
        """Transaction ``txn``, one record per partition at ``parts[p]``, acknowledged at ``acked_s``
        (default just after it began), its outcomes written at ``written_s`` (default: right away;
        the canary writer writes them after the commit returned), ended at ``end_s`` (None: never).
        ``in_log``: the partitions whose final log holds its record (default all)."""
        acked_s = begin_s + 0.01 if acked_s is None else acked_s
        written_s = acked_s if written_s is None else written_s
        seqs = {p: 100 * txn + p for p in parts}
        self.at(begin_s, writer, Intent(TID, tuple(WriteRange(p, seqs[p], 1) for p in parts),
                                        TxnInfo(txn, len(parts), outcome is TxnOutcome.ABORTED)))
        self.at(written_s, writer, Outcomes(TID, tuple(
            OutcomeRun(p, seqs[p], 1, WriteOutcome.ACKED, off, self.wts(begin_s + 0.001), self.wts(acked_s))
            for p, off in parts.items())))
        for p, off in parts.items():
            if in_log is None or p in in_log:
                self.ru.setdefault((TID, p), []).append((off, (writer.writer_id, writer.inc, seqs[p]), txn, False))
        if end_s is not None:
            self.at(end_s, writer, TxnEnd(txn, outcome))
        return self

    def plain(self, t_s: float, p: int, offset: int, seq: int, in_log: bool = True,
              intent_s: float | None = None, sent_s: float | None = None) -> "Log":
        """A write of another writer acknowledged at ``offset`` at ``t_s``, its intent appended at
        ``intent_s`` and the record sent at ``sent_s`` (default: 10 and 9 ms before)."""
        self.at(t_s - 0.01 if intent_s is None else intent_s, PLAIN_W, Intent(TID, (WriteRange(p, seq, 1),)))
        sent_s = t_s - 0.009 if sent_s is None else sent_s
        self.at(t_s, PLAIN_W, Outcomes(TID, (OutcomeRun(p, seq, 1, WriteOutcome.ACKED, offset,
                                                        self.wts(sent_s), self.wts(t_s)),)))
        if in_log:
            self.ru.setdefault((TID, p), []).append((offset, (PLAIN_W.writer_id, PLAIN_W.inc, seq), 0, False))
        return self

    def count(self, threshold_s: float = 6.0) -> int:
        return hanging_transactions(self.entries, threshold_s, self.ru)


def test_a_transaction_held_open_after_its_records_were_replicated_counts_per_partition():
    # the lso_stuck drill on a quiet topic: its own acknowledgements show the high watermark past it
    assert Log().txn(0, 1, {0: 10, 1: 20}, end_s=10).count() == 2


def test_one_that_ended_within_the_threshold_does_not():
    assert Log().txn(0, 1, {0: 10}, end_s=5).count() == 0
    assert Log().txn(0, 1, {0: 10}, end_s=6.01).count() == 0  # live needs more than the threshold too
    assert Log().txn(0, 1, {0: 10}, end_s=6.02).count() == 1


def test_the_canary_writer_writes_outcomes_after_the_commit_and_their_ack_time_is_recovered():
    # acknowledged at 0.01 s, written to the ledger only when the commit returned at 10 s
    assert Log().txn(0, 1, {0: 10}, end_s=10, written_s=10).count() == 1
    # acknowledged only at 5 s (its leader away until then), ended at 10 s: held 5 s
    assert Log().txn(0, 1, {0: 10}, end_s=10, acked_s=5, written_s=10).count() == 0


def test_records_that_vanished_with_their_partition_held_no_lso_there():
    # the broker of partition 0 came back empty: T's record there is not in the final log
    assert Log().txn(0, 1, {0: 10, 1: 20}, end_s=30, in_log=(1,)).count() == 1


def test_another_writes_acknowledgement_above_counts_when_the_transactions_own_came_late():
    log = Log().txn(0, 1, {0: 10}, end_s=10, acked_s=9, written_s=10)
    assert log.count() == 0
    log.plain(2, 0, 11, 1)
    assert log.count() == 1


def test_an_acknowledgement_whose_record_the_final_log_does_not_hold_there_counts_not():
    # offset 11 acked at 2 s in a log since rewritten: the final log holds another record there
    log = Log().txn(0, 1, {0: 10}, end_s=10, acked_s=9, written_s=10).plain(2, 0, 11, 1, in_log=False)
    assert log.count() == 0


def test_acknowledgements_from_before_the_transaction_do_not_count():
    log = Log().plain(1, 0, 11, 1).plain(1, 0, 12, 2)
    log.txn(20, 1, {0: 10}, end_s=40, acked_s=39, written_s=40)
    assert log.count() == 0


def test_ends_the_ledger_cannot_place_are_live_only():
    assert Log().txn(0, 1, {0: 10}, end_s=30, outcome=TxnOutcome.INDETERMINATE).count() == 0
    assert Log().txn(0, 1, {0: 10}, end_s=None).count() == 0
    assert Log().txn(0, 1, {0: 10}, end_s=30, outcome=TxnOutcome.ABORTED).count() == 1


def test_an_end_that_waited_for_a_ledger_that_was_away_is_dated_when_it_happened():
    """CI, stop 24: the ledger's own cluster stopped for 45 s right after a transaction committed;
    its ``txn`` entry waited in the writer's producer and was appended at the ledger's return,
    while the other writer's acknowledgements above its record had landed before. Dated by its
    append time the transaction held the LSO 45 s; it ended within a second."""
    for skew in (0.0, 500.0, -500.0):  # the writers' clock off the brokers': same verdicts
        log = Log(skew_s=skew).plain(0.5, 0, 9, 1)
        log.ledger_away = (1.2, 46.0)
        log.txn(1.0, 1, {0: 10}, end_s=1.3, written_s=1.25).plain(1.1, 0, 11, 2)
        for t in range(2, 40, 2):  # the plain writer's checkpoints and outcomes wait too
            log.plain(float(t), 1, 100 + t, 10 + t)
        assert log.count() == 0, skew
        # a transaction that really hung past the threshold before the ledger went away still counts
        hung = Log(skew_s=skew)
        hung.ledger_away = (20.0, 46.0)
        hung.txn(1.0, 1, {0: 10}, end_s=20.5, written_s=20.4)
        for t in range(2, 40, 2):
            hung.plain(float(t), 1, 100 + t, 10 + t)
        assert hung.count() == 1, skew


def test_with_no_prompt_entry_near_it_a_moment_is_dated_no_later_than_its_append_time():
    log = Log(skew_s=30.0)
    log.ledger_away = (0.0, 200.0)  # every entry waited: only the append times are known
    log.txn(1.0, 1, {0: 10}, end_s=1.5)
    assert log.count() == 0


@pytest.mark.parametrize("skew", [
    lambda t: -1.0 if t >= -25 else 0.0,  # stepped back 1 s, 25 s before the transaction began
    lambda t: -0.05 if t >= -30 else 0.0,  # stepped back 50 ms
    lambda t: 5.0 if t >= 45 else 0.0,  # stepped forward 5 s, 5 s after the hang ended
    lambda t: -5.0 if t >= 45 else 0.0,  # stepped back 5 s
    lambda t: 500e-6 * (t + 100),  # slewing at 500 ppm
], ids=["back-1s-before", "back-50ms-before", "forward-5s-after", "back-5s-after", "slew-500ppm"])
def test_a_real_hang_counts_whatever_the_writers_clock_did_outside_it(skew):
    """A reviewer's cases: a 40 s hang on a quiet partition (only the transaction's own
    acknowledgement shows the high watermark past it), threshold 30 s, the writer's clock
    corrected near it but not inside it."""
    for hang_s, counted in ((40, 1), (20, 0)):
        log = Log(skew_s=skew)
        for i, t in enumerate(range(-100, 100, 5)):  # the same writer's other, short transactions around it
            if not 0 <= t <= hang_s:
                log.txn(float(t), 2 + i, {1: 1000 + i}, end_s=t + 0.05)
        log.txn(0, 1, {0: 10}, end_s=hang_s, written_s=hang_s)
        log.entries.sort(key=lambda e: e.append_ts_us)
        assert log.count(threshold_s=30) == counted, hang_s


def test_an_intent_that_waited_for_the_ledger_does_not_stretch_the_transaction_after_it():
    """The intent was written while the ledger was away and appended at its return (the writer
    waits for it before it begins): the transaction ran 0.3 s after that, not 45 s."""
    log = Log()
    log.ledger_away = (1.0, 46.0)
    log.entries.append(LedgerEntry(TXN_W, 0, log.wts(1.0), Intent(TID, (WriteRange(0, 100, 1),), TxnInfo(1, 1, False)),
                                   append_ts_us=(EPOCH_S + 46) * S))
    log.at(46.3, TXN_W, Outcomes(TID, (OutcomeRun(0, 100, 1, WriteOutcome.ACKED, 10, log.wts(46.01),
                                                  log.wts(46.02)),)))
    log.at(46.3, TXN_W, TxnEnd(1, TxnOutcome.COMMITTED))
    log.ru[(TID, 0)] = [(10, (TXN_W.writer_id, TXN_W.inc, 100), 1, False), (11, (PLAIN_W.writer_id, PLAIN_W.inc, 1), 0, False)]
    log.plain(46.05, 0, 11, 1)
    assert log.count(threshold_s=6) == 0


def test_another_writers_ack_is_never_dated_before_it_came_though_its_intent_took_long_to_be_durable():
    """A reviewer's case: T's own record was acknowledged only at 5 s (its leader elected anew), T
    committed at 10 s: held 5 s, under the 6 s threshold. Another writer's intent was appended at
    1 s but durable only at 5.5 s (a ledger follower stalling), so its record, above T's, was sent
    then and acknowledged at 5.51 s. Dated from its intent's append and its send it would have
    come at 1.01 s; it came at 5.51 s."""
    log = Log().txn(0, 1, {0: 10}, end_s=10, acked_s=5.0, written_s=10)
    log.plain(5.51, 0, 11, 1, intent_s=1.0, sent_s=5.5)
    log.entries.sort(key=lambda e: e.append_ts_us)
    assert log.count(threshold_s=6) == 0
    assert log.count(threshold_s=4) == 1  # its own ack at 5 s: held 5 s, past a 4 s threshold
