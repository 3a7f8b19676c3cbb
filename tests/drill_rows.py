"""The drill table written out by hand, independently of ``monitor/drill_table.py``.

What one unit of ``vigil drill KIND`` must move, as (invariant, isolation) → count. The tests
hold the code's table, the drill reports and the live counters against this copy, so a
change to what a drill triggers has to be made here too, on purpose.
"""

RC, RU, NONE = "read_committed", "read_uncommitted", "none"

DRILL_ROWS: dict[str, dict[tuple[str, str], int]] = {
    "lost_write": {("lost_write", RC): 1, ("lost_write", RU): 1},
    "duplicate": {("duplicate", RC): 1, ("duplicate", RU): 1},
    "reorder": {("reorder", RC): 1, ("reorder", RU): 1},
    "zero_offset": {("zero_offset", RC): 1, ("zero_offset", RU): 1, ("offset_mismatch", RC): 1,
                    ("offset_mismatch", RU): 1},
    "offset_mismatch": {("offset_mismatch", RC): 1, ("offset_mismatch", RU): 1},
    "aborted_read": {("aborted_read", RC): 1},
    "partial_txn": {("partial_txn", RC): 1},
    "outcome_gap": {("outcome_gap", NONE): 1},
    "lso_stuck": {("lso_stuck", RC): 1},
    "g0_write_cycle": {("g0_write_cycle", RC): 1},
}


def drill_row(kind: str, count: int) -> dict[tuple[str, str], int]:
    """What ``count`` units of ``kind`` must move."""
    return {k: n * count for k, n in DRILL_ROWS[kind].items()}
