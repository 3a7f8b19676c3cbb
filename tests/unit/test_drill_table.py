from invariants.catalog import CATALOG, Invariant, Isolation, series
from monitor.drill_table import DRILL_KINDS, DRILL_TABLE, expected_counts
from tests.drill_rows import DRILL_ROWS

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE


def test_the_table_is_pinned():
    assert set(DRILL_KINDS) == set(DRILL_ROWS)
    for kind in DRILL_KINDS:
        assert {(inv.value, iso.value): n for (inv, iso), n in expected_counts(kind, 1).items()} == DRILL_ROWS[kind]


def test_every_effect_is_an_exported_series():
    exported = set(series())
    for effects in DRILL_TABLE.values():
        for e in effects:
            assert (e.invariant, e.isolation) in exported


def test_expected_counts_scale_with_count():
    assert expected_counts("duplicate", 3) == {(Invariant.DUPLICATE, RC): 3, (Invariant.DUPLICATE, RU): 3}


def test_catalog_covers_every_invariant():
    assert set(CATALOG) == set(Invariant)
    assert len(series()) == 2 * 8 + 9 + 2  # both-level invariants, rc-only, writer-side


def test_zero_offset_claims_below_the_listed_log_start_count_no_mismatch():
    assert expected_counts("zero_offset", 3, below_log_start=2) == {
        (Invariant.ZERO_OFFSET, RC): 3, (Invariant.ZERO_OFFSET, RU): 3,
        (Invariant.OFFSET_MISMATCH, RC): 1, (Invariant.OFFSET_MISMATCH, RU): 1}
    assert (Invariant.OFFSET_MISMATCH, RU) not in expected_counts("zero_offset", 1, below_log_start=1)
