"""The run-length durable form gives back exactly the rows it was given."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from invariants.doc_runs import pack_runs, unpack_runs

rows = st.lists(st.tuples(st.sampled_from([0, 1, 2**64 - 1]), st.integers(0, 1),
                          st.one_of(st.integers(0, 30), st.integers(2**64 - 3, 2**64 - 1)), st.integers(-1, 40),
                          st.integers(-1, 1)), unique_by=lambda r: r[:3])


@given(rows)
def test_unpack_gives_back_the_rows(given_rows):
    assert sorted(unpack_runs(pack_runs(given_rows))) == sorted(given_rows)


def test_consecutive_seqs_at_consecutive_offsets_are_one_run():
    writer = [(7, 1, s, 100 + s, 3) for s in range(1000)]
    other = [(8, 1, s, 5000 + 2 * s, 3) for s in range(3)]  # offsets with gaps: runs of one
    assert pack_runs(writer + other) == [[7, 1, 0, 100, 1000, 3], [8, 1, 0, 5000, 1, 3], [8, 1, 1, 5002, 1, 3],
                                         [8, 1, 2, 5004, 1, 3]]
    assert pack_runs([(7, 1, 0, 0, 5), (7, 1, 1, 1, 6)]) == [[7, 1, 0, 0, 1, 5], [7, 1, 1, 1, 1, 6]]
    assert pack_runs([]) == []
