"""The live checker against the audit oracle and against what was injected."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.checker import Checker
from invariants.model import Settings
from monitor.audit.oracle import HISTORY_INVARIANTS, audit
from invariants.model import Durability
from tests.unit.histories import CLASS_OF_INCIDENT, EFFECTS, KINDS, RC, RU, TOPIC, audit_input, build, run_live

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
    # the generated logs begin at offset 0: read_committed's view begins there too, whatever the
    # first records are (aborted ones, which it never returns)
    oracle = audit(h.ledger, audit_input(h), SETTLE,
                   read_log_start={iso: {(TOPIC, p): 0 for p in range(partitions)} for iso in (RC, RU)})
    expected = {k: v for k, v in h.expected.items() if v}
    assert history_counts(live.counts) == expected
    assert oracle.nonzero() == expected
    assert live.records_checked == oracle.records_checked
    assert live.aborted_allowed == oracle.aborted_allowed
    assert {k: v for k, v in live.counts.items() if v and k[0] in HISTORY_INVARIANTS} == oracle.by_class()
    assert live.unconfirmed.missing == {iso: h.unconfirmed_missing for iso in (RC, RU) if h.unconfirmed_missing}
    assert oracle.unconfirmed_missing == {RC: h.unconfirmed_missing, RU: h.unconfirmed_missing}
    assert (live.expired_unread, live.acked.undecided()) == (oracle.expired_unread, oracle.undecided)


@pytest.mark.parametrize("order", ["random", "ledger_first", "reads_first"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_incident_alone(kind, order):
    h = build(2, [(kind, 1)], SETTLE, random.Random(1))
    live = run_live(h, SETTINGS, random.Random(2), restart_p=0.5, order=order)
    assert history_counts(live.counts) == {k: v for k, v in EFFECTS[kind].items()}
    oracle = audit(h.ledger, audit_input(h), SETTLE)
    assert oracle.nonzero() == EFFECTS[kind]
    durability = CLASS_OF_INCIDENT.get(kind, Durability.GUARANTEED)
    want = {(inv, iso, durability): n for (inv, iso), n in EFFECTS[kind].items()}
    assert {k: v for k, v in live.counts.items() if v and k[0] in HISTORY_INVARIANTS} == want == oracle.by_class()


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
        at, reads = view.contents()
        assert len(at) <= 50 and len(reads) <= 50
    assert not history_counts(live.counts)


@pytest.mark.parametrize("kind", ["zero_offset", "lost_write", "duplicate", "reorder", "partial_txn_unwritten"])
def test_anomalies_within_the_horizon_are_found_far_into_a_partition(kind):
    """The horizon forgets old offsets, not the record at offset 0 or recent anomalies."""
    small = Settings(settle_offsets=SETTLE, horizon_offsets=60)
    h = build(1, [("clean", 0)] * 100 + [(kind, 0)], SETTLE, random.Random(7))
    live = run_live(h, small, random.Random(8), restart_p=0.1)
    assert history_counts(live.counts) == EFFECTS[kind]


def _encoded(ident, txn_id: int, intended_abort: bool = False, size: int = 0, index: int = 0) -> bytes:
    """The bytes a reader would get for a record of the history (a transactional record whose
    history gives no size: size 2, index 0)."""
    from monitor import record_format

    if ident[0] == "x":
        return f"foreign-{ident[1]}".encode()
    flags = (record_format.FLAG_TRANSACTIONAL if txn_id else 0) | (record_format.FLAG_INTENDED_ABORT if intended_abort else 0)
    return record_format.encode(record_format.CanaryRecord(ident[0], ident[1], ident[2], 1, txn_id,
                                                           (size or 2) if txn_id else 0, index, flags), 64)


def streams_of(rows: list[tuple]) -> dict:
    """Rows (src, topic, partition, offset, ...) as Spark's sources hand them: per (source,
    partition), in the order given."""
    streams: dict = {}
    for row in rows:
        streams.setdefault((row[0], row[2]), []).append(row)
    return streams


def next_batch(streams: dict, rng: random.Random) -> list[tuple]:
    """A micro-batch: up to 5 more rows of each stream, taken off it."""
    batch = []
    for key in list(streams):
        k = rng.randint(0, 5)
        batch += streams[key][:k]
        streams[key] = streams[key][k:]
    return batch


@given(seed=st.integers(0, 2**32 - 1), partitions=st.integers(1, 3),
       incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=8))
@settings(max_examples=40, deadline=None)
def test_through_the_batch_adapter_on_arrow_tables(seed, partitions, incidents):
    """The same histories as Spark hands them: encoded values in Arrow micro-batches of the three
    sources, decoded by the executors' code (record batches of a few rows, as mapInArrow hands them)
    and the driver's batch adapter; re-fetches answered from encoded values too."""
    import pyarrow as pa

    from invariants.checker import Checker
    from invariants.ledger_format import encode
    from monitor.watch.batch import SRC_LEDGER, apply_batch, to_reads
    from monitor.watch.executor import DECODED_SCHEMA, decode_batches
    from tests.unit.histories import TOPIC, answer_refetches

    def decoded(table, rng):
        batches = table.to_batches(max_chunksize=rng.randint(1, 8))
        return pa.Table.from_batches(list(decode_batches(batches)), schema=DECODED_SCHEMA)

    rng = random.Random(seed)
    h = build(partitions, incidents, SETTLE, rng)
    rows = [(SRC_LEDGER, "ledger", 0, i, encode(e)) for i, e in enumerate(h.ledger)]
    for src, iso in ((0, RC), (1, RU)):
        rows += [(src, "canary", p, r.offset, _encoded(r.ident, r.txn_id, r.intended_abort, r.txn_size, r.txn_index))
                 for p in range(partitions) for r in h.reads(iso, p)]
    rng.shuffle(rows)
    rows.sort(key=lambda r: (r[0], r[2], r[3]))  # each source's partitions stay in offset order
    streams = streams_of(rows)
    checker = Checker(SETTINGS)
    while any(streams.values()):
        batch = next_batch(streams, rng)
        src, topic, part, off, val = zip(*batch) if batch else ((), (), (), (), ())
        table = pa.table({"src": pa.array(src, pa.int8()), "topic": list(topic), "partition": pa.array(part, pa.int32()),
                          "offset": pa.array(off, pa.int64()), "value": pa.array(val, pa.binary())})
        apply_batch(checker, decoded(table, rng), lambda name: TOPIC)
        if rng.random() < 0.3:
            checker = Checker.from_doc(json.loads(json.dumps(checker.to_doc())), SETTINGS)

    def log(iso, p):  # the re-fetch reads bytes and decodes them like the runtime's re-fetcher
        reads = h.reads(iso, p)
        decoded, _mal, _ts = to_reads([r.offset for r in reads], [_encoded(r.ident, r.txn_id, r.intended_abort,
                                                                           r.txn_size, r.txn_index) for r in reads])
        return decoded

    answer_refetches(checker, log)
    checker.settle()
    oracle = audit(h.ledger, audit_input(h), SETTLE)
    assert history_counts(checker.counts) == oracle.nonzero() == {k: v for k, v in h.expected.items() if v}
    assert checker.records_checked == oracle.records_checked
