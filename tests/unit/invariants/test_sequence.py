"""sequence: duplicate and reorder — one tiny history each."""

from invariants.model import RC, Read
from tests.unit.invariants.tiny import Story, honest, rec


def test_a_duplicate_acked_at_its_first_offset():
    s = Story().acked(0, 3).read_both(*honest(0, 2), (3, rec(0)), *honest(4, 4), (5, rec(0)),
                                      *honest(6, 12))
    assert s.run()[0] == {("duplicate", "read_committed"): 1, ("duplicate", "read_uncommitted"): 1}


def test_a_duplicate_acked_at_its_second_offset_is_a_duplicate_not_a_mismatch():
    s = Story().acked(0, 5).read_both(*honest(0, 2), (3, rec(0)), *honest(4, 4), (5, rec(0)),
                                      *honest(6, 12))
    assert s.run()[0] == {("duplicate", "read_committed"): 1, ("duplicate", "read_uncommitted"): 1}


def test_a_reorder():
    s = Story().acked(0, 4).acked(1, 3).read_both(*honest(0, 2), (3, rec(1)), (4, rec(0)), *honest(5, 10))
    assert s.run()[0] == {("reorder", "read_committed"): 1, ("reorder", "read_uncommitted"): 1}


def test_seqs_in_order_with_other_writers_between_them_are_fine():
    s = Story().acked(0, 1).acked(1, 3).read_both(*honest(0, 0), (1, rec(0)), *honest(2, 2), (3, rec(1)),
                                                  *honest(4, 10))
    assert s.run()[0] == {}


def test_reading_one_offset_again_is_neither_a_duplicate_nor_a_reorder():
    s = Story().acked(0, 3).read_both(*honest(0, 2), (3, rec(0)), *honest(4, 10))
    first, ck = s.run()
    ck.apply_reads(RC, "topic-1", 0, [Read(3, rec(0))])  # a re-read below the frontier
    assert first == {} and ck.settle() == []
