"""The live checker against the audit oracle and against what was injected."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.checker import Checker
from invariants.model import Settings
from monitor.audit.oracle import HISTORY_INVARIANTS, audit
from tests.unit.histories import EFFECTS, KINDS, RC, RU, audit_input, build, run_live

SETTLE = 4
SETTINGS = Settings(settle_offsets=SETTLE, horizon_offsets=100_000)


def history_counts(counter) -> dict:
    """(invariant, isolation) -> count over every class, for the invariants the audit recomputes."""
    out: dict = {}
    for (inv, iso, _dur), n in counter.items():
        if n and inv in HISTORY_INVARIANTS:
            out[(inv, iso)] = out.get((inv, iso), 0) + n
    return out


@given(
    seed=st.integers(0, 2**32 - 1),
    partitions=st.integers(1, 3),
    incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=12),
)
@settings(max_examples=300, deadline=None)
def test_live_equals_audit_equals_injected(seed, partitions, incidents):
    rng = random.Random(seed)
    h = build(partitions, incidents, SETTLE, rng)
    live = run_live(h, SETTINGS, rng)
    oracle = audit(h.ledger, audit_input(h), SETTLE)
    expected = {k: v for k, v in h.expected.items() if v}
    assert history_counts(live.counts) == expected
    assert oracle.nonzero() == expected
    assert live.records_checked == oracle.records_checked
    assert live.aborted_allowed == oracle.aborted_allowed


@pytest.mark.parametrize("order", ["random", "ledger_first", "reads_first"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_incident_alone(kind, order):
    h = build(2, [(kind, 1)], SETTLE, random.Random(1))
    live = run_live(h, SETTINGS, random.Random(2), restart_p=0.5, order=order)
    assert history_counts(live.counts) == {k: v for k, v in EFFECTS[kind].items()}
    assert audit(h.ledger, audit_input(h), SETTLE).nonzero() == EFFECTS[kind]


def test_empty_history_yields_nothing():
    checker = Checker(SETTINGS)
    checker.apply_ledger([])
    assert checker.settle() == []
    assert not checker.counts
    assert audit([], {}, SETTLE).nonzero() == {}


def test_clean_history_yields_nothing_and_counts_every_record():
    h = build(3, [("clean", p) for p in range(3)] * 3 + [("clean_abort", 0)], SETTLE, random.Random(3))
    live = run_live(h, SETTINGS, random.Random(4))
    assert not history_counts(live.counts)
    assert live.records_checked[RU] == sum(len(h.reads(RU, p)) for p in range(3))
    assert live.records_checked[RC] == sum(len(h.reads(RC, p)) for p in range(3)) == live.records_checked[RU] - 3
    assert live.aborted_allowed == 3


def test_horizon_bounds_the_state():
    small = Settings(settle_offsets=SETTLE, horizon_offsets=50)
    h = build(1, [("clean", 0)] * 200, SETTLE, random.Random(5))
    live = run_live(h, small, random.Random(6), restart_p=0.0)
    for view in live.views.values():
        assert len(view.at) <= 50 and len(view.reads_of) <= 50
    assert not history_counts(live.counts)


@pytest.mark.parametrize("kind", ["zero_offset", "lost_write", "duplicate", "reorder", "partial_txn_unwritten"])
def test_anomalies_within_the_horizon_are_found_far_into_a_partition(kind):
    """The horizon forgets old offsets, not the record at offset 0 or recent anomalies."""
    small = Settings(settle_offsets=SETTLE, horizon_offsets=60)
    h = build(1, [("clean", 0)] * 100 + [(kind, 0)], SETTLE, random.Random(7))
    live = run_live(h, small, random.Random(8), restart_p=0.1)
    assert history_counts(live.counts) == EFFECTS[kind]
