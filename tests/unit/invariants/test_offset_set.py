"""OffsetSet answers as a plain set of offsets does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.offset_set import OffsetSet, ranges_of

ops = st.lists(st.one_of(
    st.tuples(st.just("add_range"), st.integers(0, 60), st.integers(0, 12)),
    st.tuples(st.just("add"), st.integers(0, 60), st.integers(0, 60)),
    st.tuples(st.just("discard_below"), st.integers(0, 70), st.just(0)),
    st.tuples(st.just("discard_from"), st.integers(0, 70), st.just(0)),
    st.tuples(st.just("discard_range"), st.integers(0, 70), st.integers(0, 12)),
), max_size=40)


@settings(max_examples=500, deadline=None)
@given(ops)
def test_an_offset_set_is_the_set_of_its_offsets(given_ops):
    s, model = OffsetSet(), set()
    for op, a, b in given_ops:
        if op == "add_range":
            s.add_range(a, a + b)
            model |= set(range(a, a + b))
        elif op == "add":
            s.add([a, b, a])
            model |= {a, b}
        elif op == "discard_below":
            s.discard_below(a)
            model = {o for o in model if o >= a}
        elif op == "discard_from":
            s.discard_from(a)
            model = {o for o in model if o < a}
        else:
            s.discard_range(a, a + b)
            model -= set(range(a, a + b))
        assert list(s) == sorted(model) and len(s) == len(model) and bool(s) == bool(model)
        assert list(s.below(30)) == sorted(o for o in model if o < 30)
        assert all(s.nth(k) == o for k, o in enumerate(sorted(model)))
        runs = s.to_runs()
        assert all(a[0] + a[1] < b[0] for a, b in zip(runs, runs[1:]))  # disjoint, never touching
        assert OffsetSet.from_runs(runs) == s
        assert all(s.covers(lo, lo + n) == (set(range(lo, lo + n)) <= model) for lo in range(0, 75, 5) for n in (0, 1, 4))


def test_ranges_of_offsets():
    assert ranges_of([1, 2, 3, 5, 5, 6, 9]) == [(1, 4), (5, 7), (9, 10)]
    assert ranges_of([]) == []
