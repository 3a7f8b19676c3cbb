"""The audit's lso_stuck: a transaction counts on a partition where its records are in the final log
and the high watermark was past its first record there (an acknowledgement at or above it) for more
than the threshold before it ended (committed or aborted); times on the brokers' clock."""

from __future__ import annotations

from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome, WriteRange, WriterRef,
)
from monitor.audit.hanging import hanging_transactions

TID = "topic-1"
TXN_W = WriterRef("t", 1, 1)
PLAIN_W = WriterRef("p", 2, 1)
S = 1_000_000  # µs


class Log:
    """A ledger whose writers' clocks agree with the brokers' (entry time == append time), and the
    final read_uncommitted log."""

    def __init__(self, skew_s: float = 0.0) -> None:
        self.entries: list[LedgerEntry] = []
        self.ru: dict = {}
        self.skew_s = skew_s  # the writers' clocks are this far ahead of the brokers'
        self.ledger_away: tuple[float, float] | None = None  # entries written meanwhile land at its end

    def at(self, t_s: float, writer: WriterRef, body) -> "Log":
        appended = t_s
        if self.ledger_away and self.ledger_away[0] <= t_s < self.ledger_away[1]:
            appended = self.ledger_away[1]
        self.entries.append(LedgerEntry(writer, len(self.entries), int((t_s + self.skew_s) * S), body,
                                        append_ts_us=int(appended * S)))
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
            OutcomeRun(p, seqs[p], 1, WriteOutcome.ACKED, off, 0, int((acked_s + self.skew_s) * S))
            for p, off in parts.items())))
        for p, off in parts.items():
            if in_log is None or p in in_log:
                self.ru.setdefault((TID, p), []).append((off, (writer.writer_id, writer.inc, seqs[p]), txn, False))
        if end_s is not None:
            self.at(end_s, writer, TxnEnd(txn, outcome))
        return self

    def plain(self, t_s: float, p: int, offset: int, seq: int, in_log: bool = True) -> "Log":
        """A write of another writer acknowledged at ``offset`` at ``t_s``."""
        self.at(t_s - 0.01, PLAIN_W, Intent(TID, (WriteRange(p, seq, 1),)))
        self.at(t_s, PLAIN_W, Outcomes(TID, (OutcomeRun(p, seq, 1, WriteOutcome.ACKED, offset, 0,
                                                        int((t_s + self.skew_s) * S)),)))
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
