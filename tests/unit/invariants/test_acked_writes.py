"""acked_writes: lost_write, unseen, offset_mismatch, zero_offset — one tiny history each."""

from invariants.ledger_format import Intent, WriteOutcome, WriteRange
from invariants.model import RC, RU
from tests.unit.invariants.tiny import SETTINGS, TID, Story, honest, rec

LOST = {("lost_write", "read_committed"): 1, ("lost_write", "read_uncommitted"): 1}
MISMATCH = {("offset_mismatch", "read_committed"): 1, ("offset_mismatch", "read_uncommitted"): 1}


def test_the_empty_history_has_no_violation():
    found, ck = Story().run()
    assert found == {} and ck.expired_unread == 0


def test_a_write_read_where_it_was_acked_is_fine():
    s = Story().acked(0, 3).read_both(*honest(0, 2), (3, rec(0)), *honest(4, 10))
    found, ck = s.run()
    assert found == {} and ck.records_checked == {RC: 11, RU: 11}


def test_a_lost_write():
    """Acked at 3; the readers read past 3 + H and offset 3 holds another writer's record."""
    s = Story().acked(0, 3).read_both(*honest(0, 10))
    assert s.run()[0] == LOST


def test_a_write_found_one_offset_late_is_an_offset_mismatch():
    s = Story().acked(0, 3).read_both(*honest(0, 3), (4, rec(0)), *honest(5, 10))
    assert s.run()[0] == MISMATCH


def test_a_write_found_outside_the_settle_window_is_lost():
    late = 3 + SETTINGS.settle_offsets  # the first offset outside the window
    s = Story().acked(0, 3).read_both(*honest(0, late - 1), (late, rec(0)), *honest(late + 1, late + 5))
    assert s.run()[0] == LOST


def test_a_write_not_reached_yet_is_undecided_and_unseen_after_the_deadline():
    s = Story().acked(0, 30).read_both(*honest(0, 10))
    found, ck = s.run()
    assert found == {}
    assert ck.unseen(now_us=10_000_000, deadline_s=1) == {RC: 1, RU: 1}  # acked at t=2 µs, long ago
    assert ck.unseen(now_us=3, deadline_s=1) == {RC: 0, RU: 0}  # not yet due


def test_a_write_missing_just_inside_the_window_waits_for_the_window_to_pass():
    s = Story().acked(0, 3).read_both(*honest(0, 3 + SETTINGS.settle_offsets - 2))
    assert s.run()[0] == {}  # the record may still turn up within the window


def test_writes_acked_below_the_first_offset_read_are_expired_not_lost():
    s = Story().acked(0, 3).read_both(*honest(5, 20))
    found, ck = s.run()
    assert found == {} and ck.expired_unread == 2


def test_writes_acked_below_the_log_start_are_expired_not_lost():
    s = Story().acked(0, 3).read_both(*honest(0, 20))
    found, ck = s.run(log_start=10)
    assert found == {} and ck.expired_unread == 2


def test_unacknowledged_outcomes_are_never_expected():
    s = Story()
    for seq, outcome in enumerate([WriteOutcome.FAILED, WriteOutcome.INDETERMINATE, WriteOutcome.UNCONFIRMED]):
        s.outcome(seq, outcome)
    s.entry(Intent(TID, (WriteRange(0, 3, 1),)))  # pending: intent without outcome
    assert s.read_both(*honest(0, 20)).run()[0] == {}


def test_a_write_acked_at_zero_while_zero_holds_another_record_is_a_bogus_zero_offset():
    s = Story().acked(0, 0).read_both(*honest(0, 3), (4, rec(0)), *honest(5, 10))
    assert s.run()[0] == {("zero_offset", "read_committed"): 1, ("zero_offset", "read_uncommitted"): 1, **MISMATCH}


def test_a_bogus_zero_ack_never_read_anywhere_is_zero_offset_only():
    s = Story().acked(0, 0).read_both(*honest(0, 10))
    assert s.run()[0] == {("zero_offset", "read_committed"): 1, ("zero_offset", "read_uncommitted"): 1}


def test_a_true_ack_at_zero_is_fine():
    assert Story().acked(0, 0).read_both((0, rec(0)), *honest(1, 10)).run()[0] == {}
