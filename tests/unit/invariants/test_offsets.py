"""offsets: inconsistent_offset — one tiny history each."""

from invariants.ledger_format import TxnOutcome
from invariants.model import RC, RU
from tests.unit.invariants.tiny import Story, honest, rec

BOTH = {("inconsistent_offset", "read_committed"): 1, ("inconsistent_offset", "read_uncommitted"): 1}


def test_two_readers_holding_two_different_records_at_one_offset():
    s = Story().read(RC, *honest(0, 2), (3, ("x", 11, 100)), *honest(4, 8))
    s.read(RU, *honest(0, 2), (3, ("x", 12, 100)), *honest(4, 8))
    assert s.run()[0] == BOTH


def test_a_record_read_committed_skips_is_no_disagreement():
    s = Story().txn(1, {0: 3}, TxnOutcome.ABORTED)
    s.read(RC, *honest(0, 2), *honest(4, 8)).read(RU, *honest(0, 2), (3, rec(0)), *honest(4, 8), txn={3: 1})
    found, ck = s.run()
    assert found == {} and ck.aborted_allowed == 1


def test_both_readers_agreeing_on_foreign_records_is_fine():
    s = Story().read_both(*honest(0, 2), (3, ("x", 11, 100)), *honest(4, 8))
    found, ck = s.run()
    assert found == {} and ck.records_checked == {RC: 8, RU: 8}
