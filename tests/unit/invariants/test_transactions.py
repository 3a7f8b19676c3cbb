"""transactions: aborted_read and partial_txn — one tiny history each."""

from invariants.ledger_format import TxnOutcome
from invariants.model import RC, RU
from tests.unit.invariants.tiny import Story, honest, rec

LOST = {("lost_write", "read_committed"): 1, ("lost_write", "read_uncommitted"): 1}


def txn_reads(offsets: dict[int, int]) -> dict[int, int]:
    return {off: 1 for off in offsets}


def test_an_aborted_transaction_read_by_read_committed():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.ABORTED)
    s.read(RC, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    found, ck = s.run()
    assert found == {("aborted_read", "read_committed"): 2}
    assert ck.aborted_allowed == 2  # read_uncommitted may see them


def test_an_honest_abort_is_fine():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.ABORTED)
    s.read(RC, *honest(0, 2), *honest(5, 10)).read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10),
                                                   txn={3: 1, 4: 1})
    assert s.run()[0] == {}


def test_a_committed_transaction_of_which_read_committed_saw_only_part():
    """Two records acked at 3 and 4, both read by read_uncommitted; read_committed saw only 3."""
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED)
    s.read(RC, *honest(0, 2), (3, rec(0)), *honest(5, 10), txn={3: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    assert s.run()[0] == {("partial_txn", "read_committed"): 1, ("lost_write", "read_committed"): 1}


def test_a_committed_transaction_with_a_write_that_never_landed_is_partial():
    s = Story().txn(1, {0: 3}, TxnOutcome.COMMITTED, size=2)  # the second write: indeterminate, never written
    s.read(RC, *honest(0, 2), (3, rec(0)), *honest(4, 10), txn={3: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), *honest(4, 10), txn={3: 1})
    assert s.run()[0] == {("partial_txn", "read_committed"): 1}


def test_a_committed_transaction_nobody_sees_is_lost_not_partial():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED)
    s.read_both(*honest(0, 10))
    assert s.run()[0] == {("lost_write", "read_committed"): 2, ("lost_write", "read_uncommitted"): 2}


def test_a_whole_committed_transaction_is_fine():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED)
    for iso in (RC, RU):
        s.read(iso, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    assert s.run()[0] == {}


def test_an_undecided_transaction_that_is_visible_in_part_is_torn():
    s = Story().txn(1, {0: 3, 1: 4, 2: 5}, TxnOutcome.INDETERMINATE)
    s.read(RC, *honest(0, 2), (3, rec(0)), *honest(6, 10), txn={3: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), (5, rec(2)), *honest(6, 10), txn={3: 1, 4: 1, 5: 1})
    assert s.run()[0] == {("partial_txn", "read_committed"): 1}


def test_a_transaction_partly_below_the_log_start_is_not_judged():
    """Retention deleted its first record: the rest being visible is no torn transaction."""
    s = Story().txn(1, {0: 3, 1: 8}, TxnOutcome.COMMITTED)
    s.read(RC, *honest(5, 7), (8, rec(1)), *honest(9, 14), txn={8: 1})
    s.read(RU, *honest(5, 7), (8, rec(1)), *honest(9, 14), txn={8: 1})
    found, ck = s.run(log_start=5)
    assert found == {} and ck.expired_unread == 2  # the deleted write, in each reader
