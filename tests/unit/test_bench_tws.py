"""(d) of ``vigil bench`` (monitor/bench_tws.py): the per-partition judge its stateful processor runs,
without Spark (the bench runs it through transformWithStateInPandas)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.bench_tws import judge_rows
from monitor.record_format import HEADER_SIZE, CanaryRecord, encode


def batch(records: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, list, np.ndarray]:
    """(offset, writer, incarnation, seq) rows as the processor sees them: offsets, values, lengths."""
    values = [encode(CanaryRecord(w, i, s, 1)) for _o, w, i, s in records]
    return np.array([o for o, *_ in records], dtype=np.int64), values, np.array([len(v) for v in values])


def test_in_order_seqs_of_interleaved_writers_are_neither_gaps_nor_repeats() -> None:
    rows = batch([(10, 1, 0, 0), (11, 2, 0, 5), (12, 1, 0, 1), (13, 2, 0, 6), (14, 1, 0, 2)])
    gaps, repeats, last = judge_rows({}, *rows)
    assert (gaps, repeats, last) == (0, 0, {(1, 0): 2, (2, 0): 6})


def test_offsets_not_arrival_order_decide_and_the_state_carries_over() -> None:
    rows = batch([(22, 1, 0, 4), (20, 1, 0, 3), (21, 1, 0, 3)])  # 3, 3, 4 in offset order
    gaps, repeats, last = judge_rows({(1, 0): 1}, *rows)  # 1 then 3: one skipped
    assert (gaps, repeats, last) == (1, 1, {(1, 0): 4})


def test_a_new_incarnation_starts_afresh() -> None:
    rows = batch([(5, 1, 1, 0), (6, 1, 1, 1)])
    assert judge_rows({(1, 0): 900}, *rows) == (0, 0, {(1, 0): 900, (1, 1): 1})


def test_values_that_are_not_canary_records_are_left_out() -> None:
    """The checker's own decoder says what a canary record is (a foreign value, a short one, a null,
    one whose length disagrees with its header's padding are not)."""
    good = [encode(CanaryRecord(7, 0, s, 1)) for s in (3, 5)]
    values = [good[0], b"xx", None, b"Z" * HEADER_SIZE, good[0], good[1]]
    lengths = np.array([HEADER_SIZE, 2, -1, HEADER_SIZE, HEADER_SIZE + 10, HEADER_SIZE])
    assert judge_rows({}, np.arange(6), values, lengths) == (1, 0, {(7, 0): 5})  # (3 then 5: one skipped)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 1), st.integers(0, 40)), max_size=60),
       st.lists(st.integers(0, 60), max_size=4), st.randoms(use_true_random=False))
def test_any_split_into_batches_gives_the_whole_answer(rows, cuts, rnd) -> None:
    records = [(offset, w, i, s) for offset, (w, i, s) in enumerate(rows)]
    whole = judge_rows({}, *batch(records))
    carried: dict = {}
    gaps = repeats = 0
    bounds = sorted({0, len(records), *[c for c in cuts if c <= len(records)]})
    for lo, hi in zip(bounds, bounds[1:]):
        part = records[lo:hi]
        rnd.shuffle(part)  # (rows of a batch reach the processor in any order)
        g, r, carried = judge_rows(carried, *batch(part))
        gaps, repeats = gaps + g, repeats + r
    assert (gaps, repeats, carried) == whole


def test_the_processor_judges_a_keys_chunks_of_a_batch_at_once_in_any_order() -> None:
    """Spark hands a key's rows of a batch in pandas chunks; the processor judges them together, so
    chunks out of offset order are no gaps or repeats, and the state carries to the next batch."""
    import pandas as pd

    from monitor.bench_tws import processor

    class State:
        value = None

        def exists(self):
            return self.value is not None

        def get(self):
            return self.value

        def update(self, value):
            self.value = value

    state = State()
    proc = processor()
    proc.init(type("Handle", (), {"getValueState": lambda self, name, schema: state})())

    def chunk(first: int, count: int) -> pd.DataFrame:
        return pd.DataFrame({"offset": range(first, first + count), "vlen": [HEADER_SIZE] * count,
                             "value": [encode(CanaryRecord(9, 0, s, 1)) for s in range(first, first + count)]})

    out = pd.concat(list(proc.handleInputRows((0, 2), iter([chunk(5, 5), chunk(0, 5)]), None)))
    assert out[["reads", "gaps", "repeats"]].values.tolist() == [[10, 0, 0]]
    out = pd.concat(list(proc.handleInputRows((0, 2), iter([chunk(11, 2)]), None)))  # seq 10 never came
    assert out[["reads", "gaps", "repeats"]].values.tolist() == [[2, 1, 0]]
