"""The audit's lso_stuck: a transaction counts on a partition only where its records are in the log
and the log grew past them while it was open, for longer than the threshold (ledger append times)."""

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
    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []
        self.ru: dict = {}

    def at(self, t_s: float, writer: WriterRef, body) -> "Log":
        self.entries.append(LedgerEntry(writer, len(self.entries), 0, body, append_ts_us=int(t_s * S)))
        return self

    def txn_begins(self, t_s: float, txn: int, parts: dict[int, int], writer: WriterRef = TXN_W,
                   later: dict[int, int] | None = None) -> "Log":
        """Transaction ``txn`` with one record per partition acknowledged at ``parts[p]`` (its
        acknowledgements do not name the transaction, as a drill's do not: the intent does), and
        ``later`` ones of its intent not acknowledged yet (see :meth:`txn_acked_later`)."""
        seqs = {p: 100 * txn + p for p in parts}
        more = tuple(WriteRange(p, 100 * txn + 50 + p, 1) for p in (later or {}))
        self.at(t_s, writer, Intent(TID, tuple(WriteRange(p, seqs[p], 1) for p in parts) + more,
                                    TxnInfo(txn, len(parts) + len(more), False)))
        return self.at(t_s + 0.01, writer, Outcomes(TID, tuple(
            OutcomeRun(p, seqs[p], 1, WriteOutcome.ACKED, off, 0, 0) for p, off in parts.items())))

    def txn_acked_later(self, t_s: float, txn: int, p: int, offset: int, writer: WriterRef = TXN_W) -> "Log":
        return self.at(t_s, writer, Outcomes(TID, (
            OutcomeRun(p, 100 * txn + 50 + p, 1, WriteOutcome.ACKED, offset, 0, 0, txn_id=txn),)))

    def in_log(self, txn: int, parts: dict[int, int], writer: WriterRef = TXN_W) -> "Log":
        for p, off in parts.items():
            self.ru.setdefault((TID, p), []).append((off, (writer.writer_id, writer.inc, 100 * txn + p), txn, False))
        return self

    def plain_acked(self, t_s: float, p: int, offset: int, seq: int) -> "Log":
        self.at(t_s - 0.01, PLAIN_W, Intent(TID, (WriteRange(p, seq, 1),)))
        return self.at(t_s, PLAIN_W, Outcomes(TID, (OutcomeRun(p, seq, 1, WriteOutcome.ACKED, offset, 0, 0),)))

    def ends(self, t_s: float, txn: int, outcome: TxnOutcome = TxnOutcome.COMMITTED,
             writer: WriterRef = TXN_W) -> "Log":
        return self.at(t_s, writer, TxnEnd(txn, outcome))

    def count(self, threshold_s: float = 6.0) -> int:
        return hanging_transactions(self.entries, threshold_s, self.ru)


def test_a_transaction_open_while_others_were_acked_past_it_counts_per_partition():
    log = Log().txn_begins(0, 1, {0: 10, 1: 20}).in_log(1, {0: 10, 1: 20})
    log.plain_acked(1, 0, 11, 1).plain_acked(1, 1, 21, 2)
    assert log.ends(10, 1).count() == 2


def test_a_short_wait_after_the_last_ack_above_does_not_count():
    # acked past it at 5 s, ended at 10 s: the LSO was frozen with the log beyond it for 5 s < 6 s
    log = Log().txn_begins(0, 1, {0: 10}).in_log(1, {0: 10}).plain_acked(5, 0, 11, 1)
    assert log.ends(10, 1).count() == 0
    assert log.count(threshold_s=4.0) == 1


def test_a_transaction_open_long_with_nothing_written_past_it_held_nothing_back():
    # open 60 s (a down leader stalled everyone), the log grew past it only afterwards
    log = Log().txn_begins(0, 1, {0: 10}).in_log(1, {0: 10}).ends(60, 1).plain_acked(61, 0, 11, 1)
    assert log.count() == 0


def test_records_that_vanished_with_their_partition_held_no_lso_there():
    # the broker of partition 0 came back empty: T's record there is not in the final log
    log = Log().txn_begins(0, 1, {0: 10, 1: 20}).in_log(1, {1: 20})
    log.plain_acked(1, 0, 11, 1).plain_acked(1, 1, 21, 2)
    assert log.ends(30, 1).count() == 1


def test_the_transactions_own_records_do_not_count_as_the_log_growing():
    log = Log().txn_begins(0, 1, {0: 10}, later={0: 11}).in_log(1, {0: 10}).txn_acked_later(0.02, 1, 0, 11)
    assert log.ends(30, 1).count() == 0
    log.plain_acked(2, 0, 12, 1)
    assert log.count() == 1


def test_an_indeterminate_end_lasts_until_the_writers_next_intent():
    log = Log().txn_begins(0, 1, {0: 10}).in_log(1, {0: 10}).plain_acked(1, 0, 11, 1)
    log.ends(3, 1, TxnOutcome.INDETERMINATE)
    assert log.count() == 0  # no next intent: the end is unknown
    log.txn_begins(20, 2, {0: 12}).ends(20.5, 2)  # the new producer fenced the old one by then
    assert log.count() == 1
    assert log.count(threshold_s=25.0) == 0


def test_an_earlier_ack_by_another_transaction_counts_and_the_earliest_not_of_t_is_used():
    other = WriterRef("u", 3, 1)
    log = Log().txn_begins(0, 1, {0: 10}, later={0: 12}).in_log(1, {0: 10})
    log.txn_begins(0.5, 7, {0: 11}, writer=other).in_log(7, {0: 11}, writer=other).ends(0.6, 7, writer=other)
    log.txn_acked_later(0.7, 1, 0, 12)
    assert log.ends(8, 1).count() == 1


def test_acks_from_before_the_transaction_on_offsets_a_rewritten_log_reuses_do_not_count():
    # offsets 11.. were acknowledged at 1 s in the old log; the partition came back empty and T
    # (begun at 20 s) got offset 10 of the new one: those old acks say nothing about T's time
    log = Log().plain_acked(1, 0, 11, 1).plain_acked(1, 0, 12, 2)
    log.txn_begins(20, 1, {0: 10}).in_log(1, {0: 10}).ends(40, 1)
    assert log.count() == 0
    log.plain_acked(25, 0, 11, 3)
    assert log.count() == 1
