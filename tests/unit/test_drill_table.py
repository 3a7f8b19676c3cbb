from invariants.catalog import CATALOG, Invariant, Isolation, series
from monitor.drill_table import DRILL_KINDS, DRILL_TABLE, expected_counts

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE


def test_the_table_is_pinned():
    pinned = {
        "lost_write": {("lost_write", RC), ("lost_write", RU)},
        "duplicate": {("duplicate", RC), ("duplicate", RU)},
        "reorder": {("reorder", RC), ("reorder", RU)},
        "zero_offset": {("zero_offset", RC), ("zero_offset", RU), ("offset_mismatch", RC), ("offset_mismatch", RU)},
        "offset_mismatch": {("offset_mismatch", RC), ("offset_mismatch", RU)},
        "aborted_read": {("aborted_read", RC)},
        "partial_txn": {("partial_txn", RC)},
        "outcome_gap": {("outcome_gap", NONE)},
        "lso_stuck": {("lso_stuck", RC)},
    }
    assert set(DRILL_KINDS) == set(pinned)
    for kind, effects in DRILL_TABLE.items():
        assert {(e.invariant.value, e.isolation) for e in effects} == pinned[kind]
        assert all(e.per_count == 1 for e in effects)


def test_every_effect_is_an_exported_series():
    exported = set(series())
    for effects in DRILL_TABLE.values():
        for e in effects:
            assert (e.invariant, e.isolation) in exported


def test_expected_counts_scale_with_count():
    assert expected_counts("duplicate", 3) == {(Invariant.DUPLICATE, RC): 3, (Invariant.DUPLICATE, RU): 3}


def test_catalog_covers_every_invariant():
    assert set(CATALOG) == set(Invariant)
    assert len(series()) == 2 * 8 + 3 + 2  # both-level invariants, rc-only, writer-side
