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


class _FakeWriter:
    """A pre-fill writer as far as monitor.bench.prefill drives it: plans ``step`` records at a time,
    as many as ``allowed`` lets it; ``slow`` seconds a step; fails at ``fail_at`` records."""

    def __init__(self, w, progress: list, slow: float = 0.0, fail_at: int | None = None) -> None:
        self.cfg, self.planned, self.progress, self.slow, self.fail_at = w, 0, progress, slow, fail_at
        self.identity, self.observer = SimpleNamespace(release=lambda: None), None

    def run(self, stop, _duration, max_records, allowed=None) -> None:
        step = TXN_SIZE if self.cfg.transactional else 50
        while not stop.is_set() and self.planned < max_records:
            if self.fail_at is not None and self.planned >= self.fail_at:
                raise RuntimeError("broker gone")
            n = min(step, max_records - self.planned)
            if allowed is not None and allowed() - self.planned < n:
                stop.wait(0.0005)
                continue
            self.planned += n
            self.progress.append(self)
            if self.slow:
                stop.wait(self.slow)


def _prefill(monkeypatch, records, slow, fail_at=None):
    import time

    from monitor import bench
    from monitor.config import parse

    cfg = parse({"canary": {"name": "c"}}, "t.yaml")
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: real_sleep(min(s, 0.01)))
    monkeypatch.setattr(bench, "prepare_topics", lambda _cfg: SimpleNamespace(canary=SimpleNamespace(partitions=3)))
    monkeypatch.setattr(bench.clients, "consumer", lambda *_a, **_k: SimpleNamespace(
        get_watermark_offsets=lambda *_a, **_k: (0, 0), close=lambda: None))
    steps: list = []
    writers: list = []

    def open_writer(_cfg, w, _topics, instance_id):
        writers.append(_FakeWriter(w, steps, slow if w.transactional else 0.0,
                                   fail_at if w.transactional else None))
        return writers[-1]

    monkeypatch.setattr(bench, "open_writer", open_writer)
    shares = {w.name: n for w, n in bench.prefill_writers(cfg, records)}
    return bench, cfg, writers, steps, shares


def test_the_prefill_keeps_its_writers_side_by_side(monkeypatch):
    """The transactional writer is the slow one here; unpaced, the others would finish at once."""
    bench, cfg, writers, steps, shares = _prefill(monkeypatch, 30_000, slow=0.002)
    assert bench.prefill(cfg, 30_000, lambda _m: None) == 30_000
    assert len(writers) == 4 and {w.cfg.name: w.planned for w in writers} == shares
    ahead = 0.0
    seen = {w.cfg.name: 0 for w in writers}
    for w in steps:  # replay the steps in order: how far ahead of the slowest any writer ever was
        seen[w.cfg.name] += TXN_SIZE if w.cfg.transactional else 50
        fractions = {n: seen[n] / shares[n] for n in seen}
        ahead = max(ahead, max(fractions.values()) - min(fractions.values()))
    # a writer's lead: PREFILL_LEAD of its share, PREFILL_SLACK records and one step (its last)
    assert ahead <= PREFILL_LEAD + (PREFILL_SLACK + 50) / min(shares.values()) + 1e-9


def test_a_failed_prefill_writer_stops_the_others_and_is_raised(monkeypatch):
    bench, cfg, writers, _steps, shares = _prefill(monkeypatch, 30_000, slow=0.0, fail_at=1000)
    import pytest

    with pytest.raises(RuntimeError, match="prefill writer bench-txn failed: broker gone"):
        bench.prefill(cfg, 30_000, lambda _m: None)
    assert all(w.planned < shares[w.cfg.name] for w in writers)  # stopped, not run to the end
