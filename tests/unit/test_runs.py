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

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import pyarrow as pa

from invariants.checker import Checker
from invariants.ledger_format import encode
from invariants.model import Read, ReadRun, Settings, in_runs, one_by_one
from monitor import record_format as rf
from monitor.audit.oracle import audit
from monitor.watch import executor as ex
from monitor.watch.batch import apply_batch, latencies_only, to_reads
from monitor.watch.executor import SRC_LEDGER
from tests.unit.histories import KINDS, RC, RU, TOPIC, answer_refetches, audit_input, build, restart, run_live
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


def test_in_runs_groups_stretches_of_one_writer_outside_or_inside_one_transaction():
    reads = [Read(0, (1, 1, 0)), Read(1, (1, 1, 1)), Read(2, (1, 1, 2)),  # a run
             Read(3, (2, 1, 0)),  # alone
             Read(4, (1, 1, 4)), Read(6, (1, 1, 5)),  # offsets not consecutive
             Read(7, (3, 1, 0), txn_id=5, txn_size=6, txn_index=0), Read(8, (3, 1, 1), txn_id=5, txn_size=6,
                                                                          txn_index=3),  # one transaction's
             Read(9, (3, 1, 2), txn_id=6, txn_size=6, txn_index=0),  # the next transaction: another run
             Read(10, (3, 1, 3), txn_id=6, txn_size=6, txn_index=3), Read(11, (3, 1, 4), txn_id=6, txn_size=6,
                                                                           txn_index=4),  # the step changed
             Read(12, ("x", 7, 3)), Read(13, (4, 1, 9)), Read(14, (4, 1, 10))]
    got = in_runs(reads)
    assert got == [ReadRun(0, 3, 1, 1, 0), Read(3, (2, 1, 0)), Read(4, (1, 1, 4)), Read(6, (1, 1, 5)),
                   ReadRun(7, 2, 3, 1, 0, 5, False, 6, 0, 3), ReadRun(9, 2, 3, 1, 2, 6, False, 6, 0, 3),
                   Read(11, (3, 1, 4), txn_id=6, txn_size=6, txn_index=4), Read(12, ("x", 7, 3)),
                   ReadRun(13, 2, 4, 1, 9)]
    assert one_by_one(got) == reads
    assert in_runs(reads[3:4], single_runs=True) == [ReadRun(3, 1, 2, 1, 0)]


# -- through the executors' code, on real Arrow batches -------------------------------------

def _wire_value(r: Read) -> bytes:
    """The record a history's read stands for, as a writer would have sent it."""
    if r.ident[0] == "x":
        return b"foreign-%d" % r.ident[1]
    w, inc, seq = r.ident
    flags = (rf.FLAG_TRANSACTIONAL if r.txn_id else 0) | (rf.FLAG_INTENDED_ABORT if r.intended_abort else 0)
    return rf.encode(rf.CanaryRecord(w, inc, seq, 1_000, r.txn_id, r.txn_size, r.txn_index, flags), 60)


def _on_the_wire(h) -> bool:
    """Whether every record of the history can be sent (some transactional ones carry no header)."""
    for iso in (RC, RU):
        for p in range(h.partitions):
            reads = h.reads(iso, p)
            back, _m, _ts = to_reads([r.offset for r in reads], [_wire_value(r) for r in reads])
            if any(a != b for a, b in zip(reads, back) if a.ident[0] != "x"):
                return False
    return True


WIRE_KINDS = tuple(k for k in KINDS if all(_on_the_wire(build(n, [(k, 0)], SETTLE, random.Random(seed), 0))
                                           for n in (1, 2) for seed in range(4)))


def _kafka_rows(src: int, topic: str, partition: int, offsets: list[int], vals: list[bytes]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_pydict({
        "src": pa.array([src] * n, pa.int8()), "topic": [topic] * n, "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()), "value": pa.array(vals, pa.binary()),
        "ts_us": pa.array([0] * n, pa.int64())})


@given(
    seed=st.integers(0, 2**32 - 1),
    partitions=st.integers(1, 3),
    incidents=st.lists(st.tuples(st.sampled_from(WIRE_KINDS), st.integers(0, 2)), max_size=10),
    background=st.integers(0, 16),
    arrow_rows=st.integers(1, 40),
)
@settings(max_examples=100, deadline=None)
def test_live_through_the_executor_code_equals_audit_equals_injected(seed, partitions, incidents, background,
                                                                   arrow_rows):
    """Each micro-batch as Spark hands it over: every source's Kafka rows in Arrow batches of at most
    ``arrow_rows`` (Spark cuts a partition into Arrow batches anywhere), through the executors'
    :func:`~monitor.watch.executor.decode_batch` and the driver's :func:`~monitor.watch.batch.apply_batch`;
    re-fetches answered record by record, as the re-fetcher does; restarts from the saved document."""
    rng = random.Random(seed)
    h = build(partitions, incidents, SETTLE, rng, background)
    assume(_on_the_wire(h))
    s = Settings(settle_offsets=SETTLE, horizon_offsets=100_000)
    streams = [("ledger", None, list(h.ledger))] + [
        ("reads", (iso, p), h.reads(iso, p)) for iso in (RC, RU) for p in range(partitions)]
    ck = Checker(s)
    ledger_at = 0

    def wire_reads(iso, p):  # what the re-fetcher reads: the same records, decoded from their bytes
        reads = h.reads(iso, p)
        return to_reads([r.offset for r in reads], [_wire_value(r) for r in reads])[0]

    while any(items for _k, _key, items in streams):
        decoded = []
        for kind, key, items in rng.sample(streams, len(streams)):
            k = rng.randint(0, min(len(items), 30))
            part, items[:] = items[:k], items[k:]
            if kind == "ledger":
                rows = _kafka_rows(SRC_LEDGER, "ledger", 0, list(range(ledger_at, ledger_at + k)), [encode(e) for e in part])
                ledger_at += k
            else:
                iso, p = key
                rows = _kafka_rows(0 if iso is RC else 1, TOPIC, p, [r.offset for r in part], [_wire_value(r) for r in part])
            decoded += [ex.decode_batch(rows.slice(lo, arrow_rows), now_us=2_000_000) for lo in range(0, k, arrow_rows)]
        table = pa.Table.from_batches(decoded, schema=ex.DECODED_SCHEMA)
        found, stats = apply_batch(ck, table, lambda _name: TOPIC, now=2.5)
        floor = latencies_only(table, now=2.5)  # (`vigil run --no-check`: the same latencies, nothing judged)
        assert {i: c.tolist() for i, c in floor.e2e_counts.items() if c.sum()} == \
            {i: c.tolist() for i, c in stats.e2e_counts.items() if c.sum()}
        assert {i: v for i, v in floor.e2e_sum.items() if v} == {i: v for i, v in stats.e2e_sum.items() if v}
        canary = sum(n for b in decoded for kind, n in zip(b.column("kind").to_pylist(), b.column("count").to_pylist())
                     if kind == ex.KIND_CANARY)  # records of a run, or single
        assert sum(int(c.sum()) for c in stats.e2e_counts.values()) == canary  # each one's latency measured
        if rng.random() < 0.5:
            answer_refetches(ck, wire_reads, rounds=1)
        if rng.random() < 0.2:
            ck = restart(ck, s)
    ck.settle()
    answer_refetches(ck, wire_reads)
    oracle = audit(h.ledger, audit_input(h), SETTLE,
                   read_log_start={iso: {(TOPIC, p): 0 for p in range(partitions)} for iso in (RC, RU)})
    expected = {k: v for k, v in h.expected.items() if v}
    assert history_counts(ck.counts) == expected == oracle.nonzero()
    assert ck.records_checked == oracle.records_checked
