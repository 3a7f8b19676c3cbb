"""The ledger writer (numbering, run encoding) and the audit's whole-history reading of it."""

import time

import pytest

from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, Start, Stop, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome, WriteRange,
    WriterRef, decode, encode,
)
from invariants.model import TxnKey, WriteKey
from monitor.audit.book import LedgerBook
from monitor.ledger import Delivery, LedgerError, LedgerWriter, encode_runs
from tests.unit.fakes import FakeProducer

A, F, I = WriteOutcome.ACKED, WriteOutcome.FAILED, WriteOutcome.INDETERMINATE


def test_runs_merge_consecutive_seqs_and_offsets_only():
    runs = encode_runs([
        Delivery(0, 0, A, 10, 1, 2), Delivery(0, 1, A, 11, 1, 3), Delivery(0, 2, A, 15, 1, 4),
        Delivery(1, 0, A, 3, 1, 2), Delivery(0, 3, I, -1, 1, 5, "_MSG_TIMED_OUT"),
        Delivery(0, 4, I, -1, 1, 6, "_MSG_TIMED_OUT"),
    ])
    assert [(r.partition, r.first_seq, r.count, r.outcome, r.first_offset) for r in runs] == [
        (0, 0, 2, A, 10), (0, 2, 1, A, 15), (0, 3, 2, I, -1), (1, 0, 1, A, 3)]
    assert runs[0].done_ts_us == 3 and runs[2].error == "_MSG_TIMED_OUT"


def test_runs_keep_acks_listed_after_apart_from_the_others():
    runs = encode_runs([Delivery(0, 0, A, 0, 1, 2, log_start_after=0), Delivery(0, 1, A, 1, 1, 2),
                        Delivery(0, 2, A, 2, 1, 2)])
    assert [(r.first_seq, r.count, r.log_start_after) for r in runs] == [(0, 1, 0), (1, 2, -1)]


def _entries(producer):
    return [decode(v) for (_t, _p), vals in sorted(producer.log.items()) for v in vals]


def test_writer_numbers_entries_and_book_folds_them():
    prod = FakeProducer()
    w = LedgerWriter(prod, "ledger", "inst", 7, 1)
    w.append(Start("c", "T", 2))
    w.append(Intent("T", (WriteRange(0, 0, 3), WriteRange(1, 0, 1))), sync=True)
    runs = encode_runs([Delivery(0, 0, A, 5, 0, 0), Delivery(0, 1, A, 6, 0, 0),
                        Delivery(1, 0, F, -1, 0, 0, "MSG_SIZE_TOO_LARGE")])
    w.append(Outcomes("T", tuple(runs)), sync=True)
    entries = _entries(prod)
    assert [e.n for e in entries] == [0, 1, 2]
    assert {e.writer for e in entries} == {WriterRef("inst", 7, 1)}
    book = LedgerBook()
    for e in entries:
        book.apply(e)
    assert book.writes[WriteKey("T", 0, 7, 1, 0)].offset == 5
    assert book.writes[WriteKey("T", 0, 7, 1, 1)].offset == 6
    assert book.writes[WriteKey("T", 0, 7, 1, 2)].outcome is WriteOutcome.PENDING
    assert book.writes[WriteKey("T", 1, 7, 1, 0)].outcome is F
    assert book.gaps() == {}

    # the next incarnation of the same instance closes the predecessor's pending writes
    w2 = LedgerWriter(prod, "ledger", "inst", 7, 2)
    w2.append(Start("c", "T", 2), sync=True)
    book.apply(_entries(prod)[-1])
    st = book.writes[WriteKey("T", 0, 7, 1, 2)]
    assert st.outcome is I and st.error == "writer restarted"
    assert book.writes[WriteKey("T", 0, 7, 1, 0)].outcome is A  # decided writes stay as they were


def _entry(n: int, body) -> LedgerEntry:
    return LedgerEntry(WriterRef("i", 1, 1), n, 0, body)


def test_gaps_are_detected_and_duplicates_ignored():
    book = LedgerBook()
    for n in (0, 1, 4, 4, 5):
        book.apply(_entry(n, Stop() if n == 5 else Start("c", "T", 1)))
    assert book.gaps() == {("i", 1): [2, 3]}


def test_skip_leaves_numbers_unused():
    prod = FakeProducer()
    w = LedgerWriter(prod, "ledger", "inst", 1, 1)
    w.append(Start("c", "T", 1))
    w.append(Stop(), skip=3)
    assert [e.n for e in _entries(prod)] == [0, 4]


def test_transactions_and_stop():
    book = LedgerBook()
    book.apply(_entry(0, Intent("T", (WriteRange(0, 0, 2),), TxnInfo(1, 2, True))))
    book.apply(_entry(1, TxnEnd(1, TxnOutcome.ABORTED)))
    book.apply(_entry(2, Intent("T", (WriteRange(0, 2, 1),), TxnInfo(2, 1, False))))
    book.apply(_entry(3, Stop()))
    assert book.txns[TxnKey(1, 1, 1)].outcome is TxnOutcome.ABORTED and book.txns[TxnKey(1, 1, 1)].intended_abort
    assert book.txns[TxnKey(1, 1, 2)].outcome is TxnOutcome.INDETERMINATE
    assert book.by_outcome()[WriteOutcome.PENDING] == 0


def test_bytes_that_are_no_entry_are_counted_not_applied():
    book = LedgerBook()
    for raw in (b"", b"garbage", b"[1]", b'{"v": 2}', b'{"v": 1, "n": "x"}'):
        book.apply_raw(raw)
    assert book.malformed == 5 and not book.writers
    book.apply_raw(encode(_entry(0, Stop())))
    assert book.malformed == 5 and book.writers[("i", 1)].stopped


def test_outcome_runs_record_offsets_only_for_acked_writes():
    book = LedgerBook()
    book.apply(_entry(0, Outcomes("T", (OutcomeRun(0, 0, 2, A, 40, 1, 2), OutcomeRun(0, 2, 1, I, -1, 1, 2, "x")))))
    assert [book.writes[WriteKey("T", 0, 1, 1, s)].offset for s in range(3)] == [40, 41, -1]


def test_the_wait_for_a_durable_entry_is_measured_while_it_lasts():
    """A ledger that does not take the entry: the writer waits (and sends nothing meanwhile); the
    wait shows from its first second, and is 0 again once the entry is durable."""
    import threading

    seen = []

    class SlowProducer:
        def __init__(self) -> None:
            self.rounds = 3

        def produce(self, *_a, **_kw) -> None:
            pass

        def poll(self, _t) -> int:
            return 0

        def flush(self, _t) -> int:
            seen.append(ledger.waiting_s())
            if self.rounds:
                self.rounds -= 1
                time.sleep(0.05)
                return 1
            return 0

    ledger = LedgerWriter(SlowProducer(), "L", "w", 7, 1)
    assert ledger.waiting_s() == 0
    ledger.append(Stop(), sync=True)
    assert seen[0] == 0 and seen[-1] > 0.1  # measured from the start of the wait
    assert ledger.waiting_s() == 0
    stop = threading.Event()
    stop.set()
    slow = SlowProducer()
    ledger.producer = slow
    with pytest.raises(LedgerError):
        ledger.sync(stop)
    assert ledger.waiting_s() == 0


def test_a_wait_with_a_deadline_ends_with_an_error_naming_what_was_not_taken():
    """A stopping writer does not wait forever for a ledger that is away."""

    class Away:
        def produce(self, *_a, **_kw) -> None:
            pass

        def poll(self, _t) -> int:
            return 0

        def flush(self, _t) -> int:
            time.sleep(0.05)
            return 2

    ledger = LedgerWriter(Away(), "L", "w", 7, 1)
    started = time.monotonic()
    with pytest.raises(LedgerError, match="did not take 2 entries within 0 s"):
        ledger.sync(timeout_s=0.2)
    assert 0.2 <= time.monotonic() - started < 1 and ledger.waiting_s() == 0
