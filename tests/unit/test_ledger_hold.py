"""The ledger hold (invariants/ledger_hold.py): the rule, its files, and the checker fed through it."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.ledger_hold import NO_THRESHOLD, Held, LedgerHold
from monitor.watch import ledger_hold as held_ledger
from monitor.watch import state as state_store
from tests.unit.test_checker_properties import (
    KINDS, RC, RU, SETTINGS, SETTLE, _encoded, audit, audit_input, build, history_counts, next_batch, streams_of,
)

# a batch: its ledger rows as (partition, writer's clock, canary partition acknowledged or None), the
# newest canary record it read (None: none), the highest offset it read per canary partition (by
# a row's position: offsets 0..), and whether it was cut short (else: everything released)
BATCH = st.tuples(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.one_of(st.none(), st.integers(0, 1))),
                           max_size=6),
                  st.one_of(st.none(), st.integers(0, 100)), st.dictionaries(st.integers(0, 1), st.integers(0, 60)),
                  st.booleans())


def brute_force_release(queues: dict[int, list], threshold: int, high: dict[int, int]) -> list:
    """The rule as written, scanning every row held (the hold indexes it): per partition, up to
    the last row due, then the rows that acknowledge nothing."""
    out = []
    for key in sorted(queues):
        q = queues[key]
        due = [i for i, (ts, acked, _item) in enumerate(q)
               if ts is None or ts <= threshold or any(off <= high.get(cp, -1) for cp, off in acked)]
        cut = (due[-1] + 1) if due else 0
        while cut < len(q) and not q[cut][1]:
            cut += 1
        out += [item for _ts, _acked, item in q[:cut]]
        queues[key] = q[cut:]
    return out


@settings(max_examples=300, deadline=None)
@given(lead=st.integers(0, 20), batches=st.lists(BATCH, max_size=12), restarts=st.sets(st.integers(0, 11)))
def test_each_row_is_released_once_in_its_partition_s_order_and_none_stays_held_past_its_time(lead, batches, restarts):
    hold = LedgerHold(lead)
    model: dict[int, list] = {}  # the brute-force rule's queues
    admitted: dict[int, list] = {}
    released: dict[int, list] = {}
    files = []
    newest = None
    high: dict[int, int] = {}
    n = 0
    for b, (rows, read, ends, cut) in enumerate(batches):
        items = []
        for p, ts, canary_p in rows:
            items.append((p, ts, () if canary_p is None else ((canary_p, n),), (b, n, p)))
            n += 1
        for p, _ts, _acked, item in items:
            admitted.setdefault(p, []).append(item)
        before = hold.threshold_us
        out, still = hold.take(b, items, read, ends, drained=not cut)
        for p, ts, acked, item in items:
            model.setdefault(p, []).append((ts, acked, item))
        if cut:
            assert out == brute_force_release(model, hold.threshold_us, hold.read_high)
        else:
            assert out == [item for p in sorted(model) for _ts, _a, item in model[p]]
            model.clear()
        for item in out:
            released.setdefault(item[2], []).append(item)
        files.append((b, [(h.key, h.ts_us, h.acked, h.item) for h in still]))
        if read is not None:
            newest = read if newest is None else max(newest, read)
        for cp, off in ends.items():
            high[cp] = max(off, high.get(cp, off))
        # the threshold: the newest record read so far plus the lead, never back
        assert hold.threshold_us == (NO_THRESHOLD if newest is None else newest + lead) >= before
        if not cut:
            assert hold.held() == 0 and hold.released_through == b
        # nothing left held that was due: no row written at or before the threshold, none that
        # acknowledges an offset the readers reached (in this batch or before)
        # acknowledges offsets (a row that acknowledges nothing waits for nothing), and none after it due
        for q in hold.queues.values():
            assert q[0].acked
            for h in q:
                assert h.ts_us > hold.threshold_us and all(off > high.get(cp, -1) for cp, off in h.acked)
        # released, then held: each partition's rows exactly once, in the order admitted
        for p, items_p in admitted.items():
            assert released.get(p, []) + [h.item for h in hold.queues.get(p, ())] == items_p
        # what a restart rebuilds from the saved document and the files is what is held
        back = LedgerHold.rebuild(lead, json.loads(json.dumps(hold.to_doc())), files)
        assert {p: [h.item for h in q] for p, q in back.queues.items()} == \
               {p: [h.item for h in q] for p, q in hold.queues.items() if q}
        # the batches whose files the rows held need (loading checks each is there)
        assert hold.batches() == back.batches() == sorted({h.batch_id for q in hold.queues.values() for h in q})
        if b in restarts:
            hold = back  # a restart: the rebuilt hold (and its index) carries on
    assert hold.oldest_batch() == (min(q[0].batch_id for q in hold.queues.values()) if hold.held() else None)


def test_a_row_not_due_before_one_that_is_goes_with_it_so_a_writer_s_entries_keep_their_order():
    hold = LedgerHold(0)
    # "a" is stamped far ahead (a clock that jumped): it does not hold back "b", due after it
    out, still = hold.take(0, [(0, 10**9, ((0, 7),), "a"), (0, 10, ((0, 8),), "b"), (0, 60, ((0, 9),), "c"),
                               (0, 61, (), "c'"), (1, 10, (), "d")], newest_read_us=20, read_ends={}, drained=False)
    assert out == ["a", "b", "d"] and [h.item for h in still] == ["c", "c'"]
    # an acknowledgement is due once the batch read up to its offset, whatever the clocks say
    out, still = hold.take(1, [(0, 10**9, ((2, 500),), "e")], newest_read_us=20, read_ends={2: 499}, drained=False)
    assert out == [] and [h.item for h in still] == ["e"]
    out, still = hold.take(2, [], newest_read_us=20, read_ends={2: 500}, drained=False)
    assert out == ["c", "c'", "e"]


def rows(*specs) -> list:
    """Ledger rows as the hold admits them: acknowledgements far ahead of any read, written at ``ts``
    (the writer's clock and the append time alike) into ledger partition ``p``."""
    from invariants.ledger_format import LedgerEntry, OutcomeRun, Outcomes, WriteOutcome, WriterRef, encode

    values = [encode(LedgerEntry(WriterRef("w", 7, 1), ts, ts, Outcomes("T", (
        OutcomeRun(0, ts, 1, WriteOutcome.ACKED, 10**6 + ts, 0, 0),)))) for _p, ts in specs]
    return [(p, *held_ledger.due_of(v, ts), (ts, v)) for (p, ts), v in zip(specs, values)]  # (its value with it)


def values(items) -> list:
    from invariants.ledger_format import decode

    return [decode(v).n for _ts, v in items]


def held_values(directory, hold) -> dict:
    """What each ledger partition holds, its values read back from the files; and none in memory."""
    assert all(isinstance(h.item[1], held_ledger.Spilled) for q in hold.queues.values() for h in q)
    return {p: values(held_ledger.values_of(directory, [h.item for h in q])) for p, q in hold.queues.items()}


def test_held_rows_survive_a_restart_and_their_files_go_once_released(tmp_path):
    st = state_store.WatchState(SETTINGS)
    hold = st.ledger_hold
    hold.lead_us = 10
    out, still = hold.take(0, rows((0, 5), (0, 30), (1, 12)), newest_read_us=0, read_ends={}, drained=False)
    assert values(out) == [5]
    held_ledger.write_held(tmp_path, 0, still)
    assert held_values(tmp_path, hold) == {0: [30], 1: [12]}  # the values left in the file, not in memory
    st.batch_id = 0
    state_store.save(tmp_path, st)
    doc = json.loads((tmp_path / state_store.STATE_FILE).read_bytes())
    assert doc["version"] == state_store.STATE_VERSION  # a Vigil without the hold must not read it
    # a batch applied and not saved (the monitor died): its file is not the state's
    held_ledger.write_held(tmp_path, 1, hold.take(1, rows((2, 99)), 1, {}, False)[1])
    back = state_store.load(tmp_path, SETTINGS)
    assert held_values(tmp_path, back.ledger_hold) == {0: [30], 1: [12]}
    assert json.loads(json.dumps(back.to_doc())) == doc  # as saved
    # the next batch reads further: partition 1's row is due, partition 0's still held
    back.ledger_hold.lead_us = 10
    out, still = back.ledger_hold.take(1, [], newest_read_us=5, read_ends={}, drained=False)
    assert values(held_ledger.values_of(tmp_path, out)) == [12]
    held_ledger.write_held(tmp_path, 1, still)
    back.batch_id = 1
    state_store.save(tmp_path, back)
    held_ledger.prune(tmp_path, back.ledger_hold, 1)
    assert held_ledger.path_of(tmp_path, 0).exists() and not held_ledger.path_of(tmp_path, 1).exists()
    again = state_store.load(tmp_path, SETTINGS)
    assert held_values(tmp_path, again.ledger_hold) == {0: [30]}
    # the readers at the end: everything released, the files gone, saved as the version before
    out, still = again.ledger_hold.take(2, rows((0, 40)), newest_read_us=6, read_ends={}, drained=True)
    assert values(held_ledger.values_of(tmp_path, out)) == [30, 40] and still == []
    held_ledger.write_held(tmp_path, 2, still)
    again.batch_id = 2
    state_store.save(tmp_path, again)
    held_ledger.prune(tmp_path, again.ledger_hold, 2)
    assert not list(held_ledger.directory_of(tmp_path).glob("*.arrow"))
    assert json.loads((tmp_path / state_store.STATE_FILE).read_bytes())["version"] == state_store.HOLDLESS_VERSION
    assert state_store.load(tmp_path, SETTINGS).ledger_hold.held() == 0


def test_a_state_saved_before_the_hold_holds_nothing(tmp_path):
    st = state_store.WatchState(SETTINGS, batch_id=4)
    state_store.save(tmp_path, st)
    doc = json.loads((tmp_path / state_store.STATE_FILE).read_bytes())
    del doc["ledger_hold"]
    (tmp_path / state_store.STATE_FILE).write_bytes(json.dumps(doc).encode())
    held_ledger.write_held(tmp_path, 3, [])
    back = state_store.load(tmp_path, SETTINGS)
    assert back.ledger_hold.held() == 0 and back.ledger_hold.released_through == 4


def test_the_readers_progress_and_a_batch_cut_short_from_the_decoded_rows(tmp_path):
    from monitor.watch.executor import DECODED_SCHEMA, decode_batches

    records = [_encoded((7, 1, s), 0) for s in range(10)]
    kafka = pa.table({"src": pa.array([1] * 10 + [0] * 4 + [1, 2], pa.int8()), "topic": ["c"] * 15 + ["l"],
                      "partition": pa.array([0] * 14 + [1, 0], pa.int32()),
                      "offset": pa.array(list(range(10)) + [0, 1, 2, 6] + [30, 0], pa.int64()),
                      "ts_us": pa.array([100 + i for i in range(10)] + [500, 1, 2, 3] + [10**12, 10**9], pa.int64()),
                      "value": pa.array(records + records[:3] + records[5:6] + [b"foreign", b"{}"], pa.binary())})
    decoded = pa.Table.from_batches(list(decode_batches(kafka.to_batches())), schema=DECODED_SCHEMA)
    runs = decoded.filter(pa.compute.equal(decoded.column("src"), 1))
    assert runs.column("count").to_pylist()[0] == 10 and runs.column("ts_us").to_pylist()[0] == 109  # the run's newest
    # either reader's canary records; not a foreign record's time, not the ledger's, not a latency row's
    assert held_ledger.newest_read_us(decoded) == 500
    assert held_ledger.read_ends(decoded) == {0: 9, 1: 30}
    ledger = held_ledger.ledger_table(decoded)
    # not an entry: never held; its value left in the batch's ledger rows
    assert held_ledger.ledger_rows(ledger) == [(0, None, (), (10**9, held_ledger.InBatch(0)))]
    assert held_ledger.values_of(tmp_path, [(10**9, held_ledger.InBatch(0))], ledger) == [(10**9, b"{}")]
    # read_uncommitted read offsets 0..9 of partition 0 and 30 of partition 1: 11; read_committed 0..6: 7
    assert held_ledger.cut_short(decoded, 12) and not held_ledger.cut_short(decoded, 13)
    assert not held_ledger.cut_short(decoded.filter(pa.compute.equal(decoded.column("src"), 2)), 1)


def test_a_transaction_end_is_released_once_any_partition_is_read_past_its_time():
    """Why the threshold is the newest record read in any partition, not in the partition read least
    far: a catch-up over a wiped partition's new log (late records only, read from the first batch on
    beside an old partition's early ones). A transaction wrote to both; its commit acknowledges
    nothing and comes after its acknowledgement on the old partition. Held behind it until the old
    partition's readers came near (the partition read least far), the commit would reach the checker
    after the new log's readers went on far past the transaction's records there: read_committed
    would register them too late and count them expired (horizon) where the whole ledger judges them.
    A review found it; the threshold taken as the oldest partition's (tried for a flaky test) did so."""
    from monitor.watch.executor import DECODED_SCHEMA, decode_batches

    def batch(reads):  # (partition, offset, ts_us) read by read_uncommitted
        kafka = pa.table({"src": pa.array([1] * len(reads), pa.int8()), "topic": ["c"] * len(reads),
                          "partition": pa.array([p for p, _o, _t in reads], pa.int32()),
                          "offset": pa.array([o for _p, o, _t in reads], pa.int64()),
                          "ts_us": pa.array([t for _p, _o, t in reads], pa.int64()),
                          "value": pa.array([_encoded((7, p, o), 0) for p, o, _t in reads], pa.binary())})
        return pa.Table.from_batches(list(decode_batches(kafka.to_batches())), schema=DECODED_SCHEMA)

    sec = 1_000_000
    read = batch([(0, o, 1 * sec + o) for o in range(5)] + [(2, o, 89 * sec + o) for o in range(20)])
    assert held_ledger.newest_read_us(read) == 89 * sec + 19  # (the new log's, not the old partition's)
    hold = LedgerHold(lead_us=5 * sec)
    ledger = [(0, 89 * sec, ((2, 10),), "T acked on the new log"), (0, 89 * sec, ((0, 5000),), "T acked on the old"),
              (0, 89 * sec + 1, (), "T committed")]
    out, still = hold.take(0, ledger, held_ledger.newest_read_us(read), held_ledger.read_ends(read), drained=False)
    assert out == ["T acked on the new log", "T acked on the old", "T committed"] and still == []


@given(seed=st.integers(0, 2**32 - 1), partitions=st.integers(1, 3),
       incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=8))
@settings(max_examples=40, deadline=None)
def test_live_equals_audit_through_the_hold_with_restarts(tmp_path_factory, seed, partitions, incidents):
    """The histories of the checker's properties as Spark hands them, their ledger held: the ledger
    in two partitions, appended at times spread over the history, canary records read at random
    times, batches cut short at random, the monitor restarted at random from what it saved (the
    state and the held rows' files). Whatever the hold did, the counts are the audit's and the
    injected ones."""
    from invariants.checker import Checker
    from invariants.ledger_format import encode
    from monitor.watch.batch import SRC_LEDGER, apply_batch, to_reads
    from monitor.watch.executor import DECODED_SCHEMA, decode_batches
    from tests.unit.histories import TOPIC, answer_refetches

    directory = tmp_path_factory.mktemp("hold")
    rng = random.Random(seed)
    h = build(partitions, incidents, SETTLE, rng)
    by_writer: dict = {}  # a writer's entries in one ledger partition (as the writers key them)
    rows = []
    for i, e in enumerate(h.ledger):
        lp = by_writer.setdefault(e.writer.writer_id, len(by_writer) % 2)
        rows.append((SRC_LEDGER, "ledger", lp, i, encode(e), 1000 * i + rng.randint(-1500, 1500)))  # (clocks)
    span = 1000 * max(1, len(h.ledger))
    for src, iso in ((0, RC), (1, RU)):  # read at times that grow with the offset, as a log's do
        for p in range(partitions):
            reads = h.reads(iso, p)
            last = max([r.offset for r in reads], default=0) + 1
            rows += [(src, "canary", p, r.offset, _encoded(r.ident, r.txn_id, r.intended_abort, r.txn_size,
                                                           r.txn_index), span * r.offset // last + rng.randint(-2000, 2000))
                     for r in reads]
    rows.sort(key=lambda r: (r[0], r[2], r[3]))
    streams = streams_of(rows)
    state = state_store.WatchState(SETTINGS)
    state.ledger_hold.lead_us = rng.choice([0, 500, 5000])
    # a held file written in one piece or in many (held_ledger.WRITE_CHUNK)
    with patch.object(held_ledger, "WRITE_CHUNK", rng.choice([1, 3, held_ledger.WRITE_CHUNK])):
        b = 0
        while any(streams.values()):
            batch = next_batch(streams, rng)
            src, topic, part, off, val, ts = zip(*batch) if batch else ((), (), (), (), (), ())
            table = pa.table({"src": pa.array(src, pa.int8()), "topic": list(topic),
                              "partition": pa.array(part, pa.int32()), "offset": pa.array(off, pa.int64()),
                              "ts_us": pa.array(ts, pa.int64()), "value": pa.array(val, pa.binary())})
            table = pa.Table.from_batches(list(decode_batches(table.to_batches(max_chunksize=rng.randint(1, 8)))),
                                          schema=DECODED_SCHEMA)
            released = held_ledger.take(directory, state.ledger_hold, b, table, drained=rng.random() < 0.1)
            apply_batch(state.checker, table, lambda name: TOPIC, ledger=released)
            state.batch_id = b
            state_store.save(directory, state)
            held_ledger.prune(directory, state.ledger_hold, b)
            b += 1
            if rng.random() < 0.3:
                lead = state.ledger_hold.lead_us
                state = state_store.load(directory, SETTINGS)
                state.ledger_hold.lead_us = lead
    checker: Checker = state.checker
    from monitor.watch.batch import BatchStats, apply_ledger_rows

    checker.begin_batch()
    apply_ledger_rows(checker, held_ledger.values_of(directory, state.ledger_hold.release_all(b)),
                      BatchStats())  # the readers at the end
    checker.settle()  # (what is to be read again is asked here, as after every batch)

    def log(iso, p):
        reads = h.reads(iso, p)
        decoded, _mal, _ts = to_reads([r.offset for r in reads], [_encoded(r.ident, r.txn_id, r.intended_abort,
                                                                           r.txn_size, r.txn_index) for r in reads])
        return decoded

    answer_refetches(checker, log)
    checker.settle()
    oracle = audit(h.ledger, audit_input(h), SETTLE)
    assert history_counts(checker.counts) == oracle.nonzero() == {k: v for k, v in h.expected.items() if v}
    assert checker.records_checked == oracle.records_checked


def parts(first_seq: int, lie_seq: int) -> tuple[pa.Table, pa.Table]:
    """The canary rows and the ledger rows of a batch_with_lost_write (offsets = seqs from first_seq;
    the ledger acknowledges them, and lie_seq at first_seq + 5)."""
    from tests.unit.test_watch_runtime import batch_with_lost_write

    full = batch_with_lost_write(first_seq, 40, lie_seq).t
    return (full.filter(pa.compute.less(full.column("src"), 2)), full.filter(pa.compute.equal(full.column("src"), 2)))


def next_n(rt) -> int:
    """How far the checker has applied the ledger's writer (its next entry number)."""
    return max([w["next_n"] for w in rt.state.checker.fold.to_doc()["writers"]], default=0)


def test_the_watch_holds_a_cut_short_batch_s_ledger_and_applies_it_once_spark_read_everything(
        tmp_path, monkeypatch):
    """The runtime: a batch cut short by maxOffsetsPerTrigger, its ledger acknowledging offsets
    ahead of its reads, holds those rows beside the state; a restart holds them again; once Spark
    reports a trigger that read everything there was they are applied."""
    from tests.unit.test_watch_runtime import Df, lost, runtime_maker

    make = runtime_maker(tmp_path, monkeypatch)
    rt = make()
    rt.cfg.watch.max_offsets_per_trigger = 40  # the batch's 40 offsets per reader: cut short
    below, _ = parts(960, 4999)
    _, ledger = parts(1000, 5000)
    rt.handle_batch(Df(pa.concat_tables([below, ledger])), 0)
    # the intent applied (it acknowledges nothing), the outcomes (offsets 1000.. and the lie) held
    assert rt.state.ledger_hold.held() == 1 and rt.ledger_held_peak == 1 and rt.published.ledger_held == 1
    assert next_n(rt) == 51 and held_ledger.path_of(rt.dir, 0).exists()
    rt.release_held_ledger()  # Spark has not said it read everything: nothing released
    assert rt.state.ledger_hold.held() == 1
    rt.owner.release()
    rt = make()  # restarted: held again, from the file
    assert rt.state.ledger_hold.held() == 1 and next_n(rt) == 51
    rt.on_progress(caught_up_trigger_start=time.time())
    assert rt.state.ledger_hold.held() == 0 and next_n(rt) == 52
    assert not held_ledger.path_of(rt.dir, 0).exists()
    rt.owner.release()
    rt = make()
    assert rt.state.ledger_hold.held() == 0 and next_n(rt) == 52
    # the next batch reads the offsets acknowledged: the lie at 1005 found, once
    above, _ = parts(1000, 5000)
    rt.handle_batch(Df(above), 1)
    assert lost(rt) == [1, 1]
    rt.owner.release()


def test_an_acknowledgement_is_applied_before_the_reads_that_reach_its_offset(tmp_path, monkeypatch):
    """Batches cut short, the ledger ahead, no time to go by: the outcomes (offsets 1000.. and the
    lie, seq 5000 at 1005) are held while the readers are below offset 1000, and applied in the
    batch that reads there, before its reads: the lie is found."""
    from tests.unit.test_watch_runtime import Df, lost, runtime_maker

    make = runtime_maker(tmp_path, monkeypatch, overlap=True)
    rt = make()
    rt.cfg.watch.max_offsets_per_trigger = 40
    below, _ = parts(960, 4999)
    above, ledger = parts(1000, 5000)
    rt.handle_batch(Df(pa.concat_tables([below, ledger])), 0)
    assert rt.state.ledger_hold.held() == 1 and lost(rt) == [0, 0]
    rt.handle_batch(Df(above), 1)  # also cut short
    rt.service_refetches()
    assert rt.state.ledger_hold.held() == 0 and lost(rt) == [1, 1]
    rt.owner.release()


@given(seed=st.integers(0, 2**32 - 1), partitions=st.integers(1, 3),
       incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=6),
       skew_us=st.sampled_from([0, 10**6, -(10**6), 10**9, -(10**9)]))
@settings(max_examples=60, deadline=None)
def test_with_a_short_horizon_the_hold_changes_no_verdict_whatever_the_clocks(seed, partitions, incidents, skew_us):
    """The horizon is what the hold could break: an acknowledgement applied after the readers passed
    its offset by more than it is expired, not judged. A 20-offset horizon over long histories, the same batches fed
    with the ledger as it comes and through the hold (batches cut short at random, no lead, the canary
    records' clock skewed from the writers' ledger clock by up to ±1000 s): the same counts, and the
    same acknowledgements expired."""
    from invariants.checker import Checker
    from invariants.ledger_format import encode
    from invariants.model import Settings
    from monitor.watch.batch import SRC_LEDGER, BatchStats, apply_batch, apply_ledger_rows, to_reads
    from monitor.watch.executor import DECODED_SCHEMA, decode_batches
    from tests.unit.histories import TOPIC, answer_refetches

    short = Settings(settle_offsets=SETTLE, horizon_offsets=20)
    rng = random.Random(seed)
    h = build(partitions, incidents + [("clean", i % partitions) for i in range(40)], SETTLE, rng)
    by_writer: dict = {}
    rows = [(SRC_LEDGER, "ledger", by_writer.setdefault(e.writer.writer_id, len(by_writer) % 2), i, encode(e),
             e.ts_us) for i, e in enumerate(h.ledger)]
    first, span = h.ledger[0].ts_us, h.ledger[-1].ts_us - h.ledger[0].ts_us + 1
    for src, iso in ((0, RC), (1, RU)):  # written at times that grow with the offset, on a clock skewed from the ledger's
        for p in range(partitions):
            reads = h.reads(iso, p)
            last = max([r.offset for r in reads], default=0) + 1
            rows += [(src, "canary", p, r.offset, _encoded(r.ident, r.txn_id, r.intended_abort, r.txn_size,
                                                           r.txn_index), max(1, first + span * r.offset // last + skew_us))
                     for r in reads]
    rows.sort(key=lambda r: (r[0], r[2], r[3]))
    streams = streams_of(rows)
    whole, held = Checker(short), Checker(short)
    ledger_pace = rng.choice([1, 2, 12])
    hold = LedgerHold(0)
    directory = Path(tempfile.mkdtemp())  # (the rows held: in files, as the watch holds them)
    b = 0
    while any(streams.values()):
        batch = []
        for key in list(streams):
            # the ledger ahead of the readers (a catch-up) or behind them (live: it comes after the records)
            k = rng.randint(0, ledger_pace) if key[0] == SRC_LEDGER else rng.randint(0, 6)
            batch += streams[key][:k]
            streams[key] = streams[key][k:]
        src, topic, part, off, val, ts = zip(*batch) if batch else ((), (), (), (), (), ())
        table = pa.table({"src": pa.array(src, pa.int8()), "topic": list(topic), "partition": pa.array(part, pa.int32()),
                          "offset": pa.array(off, pa.int64()), "ts_us": pa.array(ts, pa.int64()),
                          "value": pa.array(val, pa.binary())})
        table = pa.Table.from_batches(list(decode_batches(table.to_batches())), schema=DECODED_SCHEMA)
        apply_batch(whole, table, lambda name: TOPIC)
        released = held_ledger.take(directory, hold, b, table, drained=rng.random() < 0.1)
        apply_batch(held, table, lambda name: TOPIC, ledger=released)
        b += 1
    held.begin_batch()
    apply_ledger_rows(held, held_ledger.values_of(directory, hold.release_all(b)), BatchStats())
    shutil.rmtree(directory)

    def log(iso, p):
        reads = h.reads(iso, p)
        decoded, _mal, _ts = to_reads([r.offset for r in reads], [_encoded(r.ident, r.txn_id, r.intended_abort,
                                                                           r.txn_size, r.txn_index) for r in reads])
        return decoded

    for ck in (whole, held):
        ck.settle()
        answer_refetches(ck, log)
        ck.settle()
    assert dict(held.counts) == dict(whole.counts)
    assert held.expired_by_reason == whole.expired_by_reason


def test_a_held_file_no_partition_begins_in_gone_is_a_clear_error_too(tmp_path):
    """Rows held from three batches, the middle one's file gone: no partition's held rows begin in
    it, and loading still names it (the state lists every batch a held row needs)."""
    import pytest

    st = state_store.WatchState(SETTINGS)
    for b, ts in enumerate((10, 20, 30)):
        _out, still = st.ledger_hold.take(b, rows((0, ts)), newest_read_us=0, read_ends={}, drained=False)
        held_ledger.write_held(tmp_path, b, still)
        st.batch_id = b
    state_store.save(tmp_path, st)
    assert st.ledger_hold.heads() == [[0, 0, 0]] and st.ledger_hold.batches() == [0, 1, 2]
    held_ledger.path_of(tmp_path, 1).unlink()
    with pytest.raises(state_store.StateError, match="ledger rows held from batch 1 are missing.*vigil state rebuild"):
        state_store.load(tmp_path, SETTINGS)


def test_a_held_file_gone_while_the_watch_runs_stops_every_save(tmp_path, monkeypatch):
    """The rows held are read back from their files when released: a file gone meanwhile fails the
    release, the saved state cannot be loaded again (its rows are missing), and the state in memory,
    which released them, is never saved (it would say they were applied); the files are kept."""
    import pytest

    from tests.unit.test_watch_runtime import Df, runtime_maker

    make = runtime_maker(tmp_path, monkeypatch)
    rt = make()
    rt.cfg.watch.max_offsets_per_trigger = 40  # cut short: the outcomes held
    below, _ = parts(960, 4999)
    _, ledger = parts(1000, 5000)
    rt.handle_batch(Df(pa.concat_tables([below, ledger])), 0)
    assert rt.state.ledger_hold.held() == 1
    saved = (rt.dir / state_store.STATE_FILE).read_bytes()
    held_ledger.path_of(rt.dir, 0).rename(tmp_path / "aside.arrow")
    with pytest.raises(state_store.StateError, match="ledger rows held from batch 0 .* missing"):
        rt.release_held_ledger(at_end=True)
    assert rt.stop.is_set()  # the watch stops, and fails with it (run_watch)
    with pytest.raises(state_store.StateError, match="half applied.*restart the watch"):
        rt._save()
    assert (rt.dir / state_store.STATE_FILE).read_bytes() == saved
    (tmp_path / "aside.arrow").rename(held_ledger.path_of(rt.dir, 0))  # put back: held again, as saved
    rt._revert()
    assert rt.unloadable is None and rt.state.ledger_hold.held() == 1
    rt._save()
    rt.owner.release()
    assert make().state.ledger_hold.held() == 1


def test_a_held_file_gone_is_a_clear_error_never_rows_silently_lost(tmp_path):
    import pytest

    st = state_store.WatchState(SETTINGS)
    out, still = st.ledger_hold.take(0, rows((0, 5), (0, 30)), newest_read_us=0, read_ends={}, drained=False)
    held_ledger.write_held(tmp_path, 0, still)
    state_store.save(tmp_path, st)
    held_ledger.path_of(tmp_path, 0).unlink()
    with pytest.raises(state_store.StateError, match="ledger rows held from batch 0 .* missing.*vigil state rebuild"):
        state_store.load(tmp_path, SETTINGS)
    # gone while the monitor runs, its rows about to be released: the batch fails, naming the file
    out, _still = st.ledger_hold.take(1, [], newest_read_us=100, read_ends={}, drained=True)
    with pytest.raises(ValueError, match="ledger rows held from batch 0 cannot be read back from .*000000000000.arrow"):
        held_ledger.values_of(tmp_path, out)


def test_the_due_index_over_many_rows_agrees_with_the_rule_and_stays_small():
    """Thousands of rows held in one partition, released a little at a time (the index's heaps are
    made again once mostly stale): the same releases as the rule scanning every row, and the index
    never much larger than what is held."""
    rng = random.Random(7)
    hold, model = LedgerHold(10), {}
    off = 0
    for b in range(400):
        rows = []
        for _ in range(50):
            off += 1
            acked = () if rng.random() < 0.3 else ((rng.randrange(3), off + rng.randrange(-50, 50)),)
            rows.append((0, 4 * off + rng.randrange(-300, 300), acked, off))
        for p, ts, acked, item in rows:
            model.setdefault(p, []).append((ts, acked, item))
        reached = {cp: 20 * b for cp in range(3)}  # (the readers half-way behind the ledger, by offsets and clock)
        out, _still = hold.take(b, rows, 100 * b, reached, drained=False)
        assert out == brute_force_release(model, hold.threshold_us, hold.read_high)
        for index in hold._index.values():
            assert index.pushed <= 2 * index.live + 1024 + 100
    assert hold.held() > 1000  # (it held a lot throughout)


def test_a_held_file_in_many_record_batches_gives_back_rows_without_copying_the_file(tmp_path):
    """A held file is written WRITE_CHUNK rows at a time; releasing a few of its rows takes them within
    their record batches: a take over the whole column joined the file's every value first (a review
    measured 100 MB for 4 rows of a 300,000-row file), once per batch that released some."""
    n, chunk = 20_000, 1_000
    ledger = pa.table({"partition": pa.array([0] * n, pa.int32()), "ts_us": pa.array(range(n), pa.int64()),
                       "value": pa.array([b"%07d" % i + b"x" * 300 for i in range(n)], pa.binary())},
                      schema=held_ledger.HELD_SCHEMA)
    still = [Held(0, 0, i, ((0, i),), (i, held_ledger.InBatch(i)), i) for i in range(n)]
    with patch.object(held_ledger, "WRITE_CHUNK", chunk):
        held_ledger.write_held(tmp_path, 0, still, ledger)
    with pa.memory_map(str(held_ledger.path_of(tmp_path, 0))) as source:
        assert pa.ipc.open_file(source).num_record_batches == n // chunk
    wanted = [n - 1, 0, chunk - 1, chunk, 5 * chunk + 7]  # (either side of a batch's boundary, in any order)
    default = pa.default_memory_pool()
    counted = pa.proxy_memory_pool(default)
    pa.set_memory_pool(counted)
    try:
        got = held_ledger.values_of(tmp_path, [(i, held_ledger.Spilled(0, i)) for i in wanted])
    finally:
        pa.set_memory_pool(default)
    assert [v[:7] for _ts, v in got] == [b"%07d" % i for i in wanted]
    assert counted.max_memory() < 2**20  # (the whole value column is 6 MB)
    with pytest.raises(ValueError, match="cannot be read back"):
        held_ledger.values_of(tmp_path, [(0, held_ledger.Spilled(0, n))])
