"""The bench's pre-fill writers stay side by side (monitor.bench.side_by_side): none runs ahead of
the slowest by more than a small share of its records, and the slowest can always go on."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, strategies as st

from monitor.bench import PREFILL_LEAD, PREFILL_SLACK, TXN_SIZE, side_by_side


def _threads(done_and_total, error=None):
    return [SimpleNamespace(writer=SimpleNamespace(planned=d), max_records=n, error=error) for d, n in done_and_total]


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 10**6)).map(lambda t: (min(t), t[1])),
                min_size=1, max_size=5))
def test_each_writer_is_allowed_the_slowest_writers_share_of_its_records_and_a_little_more(shares):
    threads = _threads(shares)
    slowest = min(d / n for d, n in shares)
    for d, n in shares:
        allowed = side_by_side(threads, n)()
        assert allowed == int(n * (slowest + PREFILL_LEAD)) + PREFILL_SLACK
    d, n = min(shares, key=lambda s: s[0] / s[1])  # the slowest may always write its next transaction
    assert side_by_side(threads, n)() >= d + TXN_SIZE


def test_a_writer_ahead_of_the_slowest_waits_for_it():
    threads = _threads([(500_000, 1_000_000), (10_000, 200_000)])  # 50 % and 5 % through
    assert side_by_side(threads, 1_000_000)() == int(1_000_000 * (0.05 + PREFILL_LEAD)) + PREFILL_SLACK < 500_000


def test_a_writer_that_failed_holds_no_one_back():
    threads = _threads([(500_000, 1_000_000)]) + _threads([(10_000, 200_000)], error=RuntimeError("gone"))
    assert side_by_side(threads, 1_000_000)() > 500_000
