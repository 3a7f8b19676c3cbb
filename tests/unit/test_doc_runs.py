"""The run-length durable form gives back exactly the rows it was given."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from invariants.doc_runs import ChunkRuns, computed_afresh, merge_runs, pack_runs, unpack_runs
from invariants.acked_state import Judged, PlacedWrites
from invariants.promises import GUARANTEED, ClassTable, WriteClass
from invariants.read_index import PartitionView

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


@given(rows, st.lists(st.integers(0, 3), min_size=60, max_size=60))
def test_runs_of_disjoint_sets_merged_are_the_runs_of_their_union(given_rows, groups):
    parts: dict[int, list] = {}
    for row, g in zip(given_rows, groups):
        parts.setdefault(g, []).append(row)
    assert merge_runs([run for part in parts.values() for run in pack_runs(part)]) == pack_runs(given_rows)


ops = st.lists(st.one_of(
    st.tuples(st.just("read"), st.integers(0, 3), st.integers(0, 12)),  # a first read of the next offsets
    st.tuples(st.just("run"), st.integers(0, 6), st.integers(0, 1)),  # a run of fresh records (a gap before it)
    st.tuples(st.just("replace"), st.integers(0, 60), st.integers(0, 40)),  # 13-40: records not read yet
    st.tuples(st.just("remove"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("forget"), st.integers(5, 40), st.just(0)),
    st.tuples(st.just("save"), st.just(0), st.just(0)),
), max_size=80)


def _ident(k: int) -> tuple:
    return ("x", k, 9) if k == 12 else (k % 3, 1, k)  # a few writers' seqs; 12: a foreign record


@settings(max_examples=500, deadline=None)
@given(ops)
@example([("read", 3, 2), ("replace", 3, 0)])  # a record read again where none was: its chunk changed
@example([("read", 1, 4), ("read", 3, 0), ("read", 0, 0), ("forget", 5, 0), ("remove", 9, 0)])  # left: a forgotten offset
def test_a_view_s_saved_runs_kept_per_chunk_are_those_of_all_its_records(given_ops):
    """... whether its records came one by one or in runs (``single``: the same view, fed every run
    record by record: it holds the same records and saves the same document)."""
    v, single = PartitionView(), PartitionView()
    v._doc_runs = ChunkRuns(size=4)  # small chunks, so that most are whole and kept
    used = [100]  # writer 5's next seq never read: runs take seqs from there
    for op, a, b in given_ops:
        if op == "read":
            for k in range(a + 1):  # now and then an offset without a record (a control record, a gap)
                off, ident = v.frontier + int((b + k) % 5 == 0), _ident((b + k) % 13)
                v.record(off, ident)
                single.record(off, ident)
        elif op == "run":
            off, first = v.frontier + b, used[0]
            used[0] += a + 1
            v.record_run(off, a + 1, 5, 1, first)
            for i in range(a + 1):
                single.record(off + i, (5, 1, first + i))
        elif op == "replace" and v.start is not None and v.start <= a < v.frontier:
            ident = (5, 1, 100 + b % (used[0] - 100)) if b % 4 == 0 and used[0] > 100 else _ident(b)  # a run's
            v.replace(a, ident)
            single.replace(a, ident)
        elif op == "remove" and v.start is not None and v.start <= a < v.frontier:
            v.remove(a)
            single.remove(a)
        elif op == "forget":
            v.forget(a)
            single.forget(a)
        _at, reads = v.contents()
        once = [(*ident, offs[0]) for ident, offs in reads.items() if len(offs) == 1]
        kept = v.to_doc()
        assert kept["read_runs"] == pack_runs(once)
        assert v.contents() == single.contents() and kept == single.to_doc()
        assert all(v.ident_at(o) == single.ident_at(o) and v.held(o) == single.held(o) for o in range(v.frontier + 1))
        assert all(v.offsets_of(i) == single.offsets_of(i) for i in reads)
        with computed_afresh():
            assert kept == v.to_doc()
    assert PartitionView.from_doc(v.to_doc()).contents() == v.contents()


placed_ops = st.lists(st.one_of(
    st.tuples(st.just("set"), st.integers(0, 15), st.integers(0, 30), st.integers(0, 1)),  # seq, acked at, class
    st.tuples(st.just("del"), st.integers(0, 15), st.just(0), st.just(0)),
    st.tuples(st.just("drop_below"), st.integers(0, 30), st.just(0), st.just(0)),
    st.tuples(st.just("save"), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("run"), st.integers(0, 15), st.integers(0, 30), st.integers(0, 1)),  # 3 writes from seq, at
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(placed_ops)
def test_placed_writes_saved_per_chunk_are_all_the_placed_writes(given_ops):
    classes = [WriteClass("a", *[GUARANTEED] * 4), WriteClass("b", *[GUARANTEED] * 4)]
    placed, model = PlacedWrites(size=4), {}
    for op, seq, off, c in given_ops:
        ident = (seq % 2, 1, seq)
        if op == "set":
            placed[ident] = model[ident] = Judged(off, off - seq % 3, classes[c])
        elif op == "run":
            placed.add_run(off, 3, seq % 2, 1, seq, off - 1, classes[c])
            for i in range(3):
                model[(seq % 2, 1, seq + i)] = Judged(off + i, off - 1, classes[c])
        elif op == "del" and ident in model:
            del placed[ident], model[ident]
        elif op == "drop_below":
            placed.drop_below(seq)
            model = {i: j for i, j in model.items() if j.acked_at >= seq}
        t = ClassTable()
        runs = placed.runs(t)
        assert set(t.classes) == {j.cls for j in model.values()}  # no class of a write dropped since
        assert sorted(unpack_runs(runs)) == sorted((*i, j.acked_at, j.late_below, t.ref(j.cls)) for i, j in model.items())
        assert dict(placed.items()) == model and len(placed) == len(model)
        assert all(placed.get(i) == j and i in placed for i, j in model.items())


def test_a_record_left_with_a_forgotten_offset_only_is_saved_without_walking_the_whole_view(monkeypatch):
    import invariants.read_index as read_index

    v = PartitionView()
    for off in range(30):
        v.record(off, (1, 0, 5 if off == 20 else off))  # (1, 0, 5) read at 5 and again at 20
    v.forget(20)  # offset 5 forgotten, the copy at 20 kept
    v.remove(20)  # a re-read finds nothing at 20: (1, 0, 5) is left with its forgotten offset
    for off in range(30, 5000):
        v.record(off, (1, 0, off))
    v.forget(100)
    assert v.reads_of[(1, 0, 5)] == [5]  # kept, as before
    walks = []
    real = read_index.pack_runs
    monkeypatch.setattr(read_index, "pack_runs", lambda rows: walks.append(len(rows)) or real(rows))
    kept = v.to_doc()
    assert walks == [1]  # only that record packed, not the whole view
    with computed_afresh():
        assert kept == v.to_doc()
    assert PartitionView.from_doc(kept).contents() == v.contents()
