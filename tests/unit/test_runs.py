"""Runs (what the executors send for most of a partition) are judged exactly as their records.

The checker keeps a plain run whole (:meth:`invariants.checker.Checker.apply_reads`,
:class:`invariants.read_index.Segment`, :class:`invariants.acked_state.PlacedRun`) and falls back
to record-by-record judging wherever a record of it would do more than be read where it was
acknowledged. The oracle here is the record path itself: the same history, split into the same
micro-batches with the same restarts, fed once record by record and once in runs, must report
the same violations in the same order and leave the same saved document after every batch.
"""

from __future__ import annotations

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from invariants.model import Read, ReadRun, Settings, in_runs, one_by_one
from monitor.audit.oracle import audit
from tests.unit.histories import KINDS, RC, RU, TOPIC, audit_input, build, run_live
from tests.unit.test_checker_properties import history_counts

SETTLE = 4


@given(
    seed=st.integers(0, 2**32 - 1),
    partitions=st.integers(1, 3),
    incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=10),
    background=st.integers(0, 12),
    chunk=st.integers(1, 24),
    horizon=st.sampled_from([30, 80, 100_000]),
    restart_p=st.sampled_from([0.0, 0.3]),
)
@settings(max_examples=300, deadline=None)
@example(seed=1, partitions=1, incidents=[("duplicate", 0), ("reorder", 0), ("lost_write_in_run", 0)],
         background=10, chunk=20, horizon=100_000, restart_p=0.3)
def test_runs_are_judged_exactly_as_their_records(seed, partitions, incidents, background, chunk, horizon, restart_p):
    s = Settings(settle_offsets=SETTLE, horizon_offsets=horizon)
    h = build(partitions, incidents, SETTLE, random.Random(seed), background)
    found, trace, found_runs, trace_runs = [], [], [], []
    by_record = run_live(h, s, random.Random(seed + 1), restart_p, found=found, trace=trace, chunk=chunk)
    in_runs_ = run_live(h, s, random.Random(seed + 1), restart_p, found=found_runs, trace=trace_runs, chunk=chunk,
                        runs=True)
    assert found_runs == found
    assert trace_runs == trace
    assert in_runs_.to_doc() == by_record.to_doc()


@given(
    seed=st.integers(0, 2**32 - 1),
    partitions=st.integers(1, 3),
    incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=12),
    background=st.integers(2, 16),
)
@settings(max_examples=150, deadline=None)
def test_live_in_runs_equals_audit_equals_injected(seed, partitions, incidents, background):
    rng = random.Random(seed)
    h = build(partitions, incidents, SETTLE, rng, background)
    live = run_live(h, Settings(settle_offsets=SETTLE, horizon_offsets=100_000), rng, runs=True, chunk=30)
    oracle = audit(h.ledger, audit_input(h), SETTLE,
                   read_log_start={iso: {(TOPIC, p): 0 for p in range(partitions)} for iso in (RC, RU)})
    expected = {k: v for k, v in h.expected.items() if v}
    assert history_counts(live.counts) == expected == oracle.nonzero()
    assert live.records_checked == oracle.records_checked


def test_a_long_clean_run_is_kept_whole():
    h = build(2, [("clean", 0)] * 5, SETTLE, random.Random(3), background=200)
    live = run_live(h, Settings(settle_offsets=SETTLE, horizon_offsets=100_000), random.Random(4), restart_p=0.0,
                    runs=True, chunk=1000, order="ledger_first")
    assert not history_counts(live.counts)
    view = live.views[next(k for k in live.views if k.iso is RC)]
    assert view.records() > 200 and len(view.at) < 20  # all but the incidents' records in segments
    placed = live.acked.views[next(k for k in live.acked.views if k.iso is RC)].placed
    assert len(placed) > 200 and len(placed._by_ident) < 20


def test_in_runs_groups_plain_stretches_only():
    reads = [Read(0, (1, 1, 0)), Read(1, (1, 1, 1)), Read(2, (1, 1, 2)),  # a run
             Read(3, (2, 1, 0)),  # alone
             Read(4, (1, 1, 4)), Read(6, (1, 1, 5)),  # offsets not consecutive
             Read(7, (3, 1, 0), txn_id=5), Read(8, (3, 1, 1), txn_id=5),  # transactional: one by one
             Read(9, ("x", 7, 3)), Read(10, (4, 1, 9)), Read(11, (4, 1, 10))]
    got = in_runs(reads)
    assert got == [ReadRun(0, 3, 1, 1, 0), Read(3, (2, 1, 0)), Read(4, (1, 1, 4)), Read(6, (1, 1, 5)),
                   Read(7, (3, 1, 0), txn_id=5), Read(8, (3, 1, 1), txn_id=5), Read(9, ("x", 7, 3)),
                   ReadRun(10, 2, 4, 1, 9)]
    assert one_by_one(got) == reads
