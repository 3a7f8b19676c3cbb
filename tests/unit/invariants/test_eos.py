"""eos_loss / eos_duplicate: the verdict against injected faults over simulated pipelines, and the
after-abort classes; the output record format never raises."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.catalog import Invariant
from invariants.checker import Checker
from invariants.model import RC, Read, Settings
from invariants.eos import (
    AFTER_ABORT_CLASSES, EosFinding, EosLive, classify_after_abort, classify_resumed, eos_verdict,
)
from monitor.eos import output_format
from monitor.eos.worker import after_abort_class


def simulate(seed: int, partitions: int = 3, steps: int = 60):
    """A consume-transform-produce worker over a source with gaps (control records, aborted
    records), committing, aborting (and rewinding), crashing, and now and then doing what the
    drills do: skipping an aborted transaction's records, or writing one record twice.

    Returns the source, the committed offsets, the committed output (copies naming the source
    record, :func:`name`), what was injected, and the committed transactions in order as (output
    copies, offsets committed)."""
    rng = random.Random(seed)
    source = {}
    for p in range(partitions):
        offsets, o = [], 0
        for _ in range(rng.randint(0, 40)):
            o += rng.choice([1, 1, 1, 2, 3])  # gaps: what read_committed skips
            offsets.append(o)
        source[p] = offsets
    committed = {}  # p -> next offset
    position = {p: 0 for p in range(partitions)}  # index into source[p]
    output: list[tuple[int, int]] = []
    lost, duplicated = set(), set()
    events: list[tuple[list, dict]] = []
    for _ in range(steps):
        txn = []
        for p in rng.sample(range(partitions), rng.randint(1, partitions)):
            take = source[p][position[p]:position[p] + rng.randint(1, 5)]
            txn += [(p, o, name(p, o)) for o in take]
            position[p] += len(take)
        if not txn:
            continue
        outcome = rng.choice(["commit", "commit", "commit", "abort", "crash", "skip", "dup"])
        ends = {}
        for p, o, _ident in txn:
            ends[p] = o + 1
        if outcome in ("commit", "dup"):
            out = list(txn)
            if outcome == "dup":
                out.append(txn[0])
                duplicated.add(txn[0][:2])
            output += out
            committed.update(ends)
            events.append((out, ends))
            continue
        if outcome == "skip":  # aborted, not rewound, its position committed at once
            lost |= {c[:2] for c in txn}
            committed.update(ends)
            events.append(([], ends))
            continue
        for p in {c[0] for c in txn}:  # abort or crash: back to the committed offset
            c = committed.get(p, 0)
            position[p] = sum(1 for o in source[p] if o < c)
    return source, committed, output, lost, duplicated, events


def name(p: int, o: int, generation: int = 0) -> tuple[int, int, int]:
    """The identity of the simulated source's record at (p, o): one writer per partition
    (``generation``: a rewritten log's records are another incarnation's)."""
    return (1000 + p, generation, o)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 4), st.floats(0.0, 1.2), st.integers(1, 40))
def test_the_verdict_finds_exactly_what_was_injected_below_what_is_known(seed, partitions, cut, steps):
    source, committed, output, lost, duplicated, _events = simulate(seed, partitions, steps)
    # the source reader read some of each partition: only what it read, below the committed offset, is judged
    read_to = {p: int(max(offsets, default=0) * cut) + 1 for p, offsets in source.items()}
    seen = {p: [o for o in offsets if o < read_to[p]] for p, offsets in source.items()}
    verdict = eos_verdict(seen, read_to, committed, output)
    # the records the source holds (what the audit passes): nothing rewritten, the same verdict
    held = {p: {o: name(p, o) for o in offsets} for p, offsets in seen.items()}
    assert eos_verdict(seen, read_to, committed, output, held=held) == verdict
    assert set(verdict.losses) == {(p, o) for p, o in lost if o < min(read_to[p], committed.get(p, 0))}
    assert list(verdict.losses) == sorted(verdict.losses)
    assert verdict.duplicates == tuple(sorted((p, o, 2) for p, o in duplicated))


def test_a_healthy_pipeline_with_aborts_and_crashes_is_clean():
    for seed in range(200):
        source, committed, output, lost, duplicated, _events = simulate(seed)
        if lost or duplicated:
            continue
        read_to = {p: max(offsets, default=0) + 1 for p, offsets in source.items()}
        verdict = eos_verdict(source, read_to, committed, output)
        assert verdict.losses == () and verdict.duplicates == ()


def test_loss_is_judged_only_below_the_committed_offset_and_what_the_source_reader_read():
    source = {0: [0, 1, 2, 4, 5]}
    output = [(0, 0), (0, 2)]
    assert eos_verdict(source, {0: 6}, {0: 5}, output).losses == ((0, 1), (0, 4))
    assert eos_verdict(source, {0: 2}, {0: 5}, output).losses == ((0, 1),)
    assert eos_verdict(source, {0: 6}, {}, output).losses == ()
    assert eos_verdict(source, {0: 6}, {0: 5}, output).judged == {0: 5}


def test_an_output_that_lost_its_oldest_copies_to_retention_is_judged_from_the_oldest_left():
    source = {0: [0, 1, 2, 3], 1: [0, 1]}
    output = [(0, 2), (1, 0)]
    assert eos_verdict(source, {0: 4, 1: 2}, {0: 4, 1: 2}, output, {0: 2}).losses == ((0, 3), (1, 1))
    assert eos_verdict(source, {0: 4, 1: 2}, {0: 4, 1: 2}, output).losses == ((0, 0), (0, 1), (0, 3), (1, 1))


def test_a_record_in_the_output_three_times_is_one_duplicate_position_with_its_copies():
    verdict = eos_verdict({0: [7]}, {0: 8}, {0: 8}, [(0, 7)] * 3)
    assert verdict.duplicates == ((0, 7, 3),) and verdict.losses == ()


def test_after_abort_classes():
    assert classify_after_abort(10, 20, 20, 10) == "advance"
    assert classify_after_abort(10, 20, 10, 10) == "rewind"
    assert classify_after_abort(11, 20, 10, 10) == "rewind"  # committed trails the position by a control record
    assert classify_after_abort(10, 20, 10) == "rewind"  # no committed offset yet
    assert classify_after_abort(10, 20, 5, 10) == "rewind_further"
    assert classify_after_abort(10, 20, 5) == "rewind_further"
    assert classify_after_abort(10, 20, 15, 10) == "other"
    assert classify_after_abort(10, 20, 25, 10) == "other"


def test_after_abort_classes_by_records_see_past_the_markers_between():
    """The aborted poll returned records 10..12; its position passed the marker at 13. A marker at
    14 (another transaction's) lies between that position and the next record: by positions an
    advance to 15 read ``other``; by records it is past the aborted ones. A transaction that began
    at a marker's position (9, the committed offset there) is rewound to its first record, 10."""
    advance = {"before": 10, "end": 14, "after": 14, "resumed": 15, "resumed_record": True, "committed": 10,
               "first": 10, "last": 12}
    assert classify_after_abort(10, 14, 15, 10) == "other"
    assert after_abort_class(advance) == classify_resumed(10, 12, 15) == "advance"
    rewind = {**advance, "before": 9, "committed": 9, "resumed": 10}
    assert classify_after_abort(9, 14, 10, 9) == "other"
    assert after_abort_class(rewind) == "rewind"
    assert after_abort_class({**advance, "resumed": 5}) == "rewind_further"
    assert after_abort_class({**advance, "resumed": 11}) == "other"
    # the next poll returned nothing there: its position, as before; so for an event without records
    assert after_abort_class({**advance, "resumed": 14, "resumed_record": False}) == "advance"
    assert after_abort_class({"before": 10, "end": 14, "after": 14, "resumed": -1, "committed": 10}) == "advance"


@given(st.integers(0, 100), st.integers(0, 100), st.integers(0, 300))
def test_every_record_resumed_at_after_an_abort_has_one_class(first, length, resumed):
    last = first + length
    cls = classify_resumed(first, last, resumed)
    assert cls in AFTER_ABORT_CLASSES
    assert (cls == "advance") == (resumed > last) and (cls == "rewind") == (resumed == first)
    assert (cls == "rewind_further") == (resumed < first)


@given(st.integers(0, 100), st.integers(1, 100), st.integers(0, 300), st.integers(-1, 100))
def test_every_position_after_an_abort_has_one_class(before, length, after, committed):
    end = before + length
    cls = classify_after_abort(before, end, after, committed)
    assert cls in AFTER_ABORT_CLASSES
    assert (cls == "advance") == (after == end)
    if cls == "rewind_further":
        assert after < before


@given(st.binary(max_size=80))
def test_output_decode_never_raises(value):
    decoded = output_format.decode(value)
    assert decoded is None or (decoded[0] >= 0 and decoded[1] >= 0)


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.binary(max_size=100))
def test_output_round_trip(partition, offset, source_value):
    value = output_format.encode(partition, offset, source_value)
    assert output_format.decode(value) == (partition, offset)
    assert len(value) == output_format.HEAD.size + min(48, len(source_value))
    assert output_format.decode(None) is None and output_format.decode(b"VG" + value[2:]) is None


@given(st.binary(max_size=120))
def test_a_copys_source_record_decodes_without_raising(value):
    copy = output_format.decode_copy(value)
    assert copy is None or (copy[:2] == output_format.decode(value) and (copy[2] is None or len(copy[2]) == 3))


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
       st.integers(0, 2**64 - 1), st.integers(0, 200))
def test_a_copy_names_the_canary_record_it_copied(partition, offset, writer_id, inc, seq, padding):
    from monitor.record_format import CanaryRecord, encode as encode_record

    source = encode_record(CanaryRecord(writer_id, inc, seq, 1, 0, 0, 0, 0), 48 + padding)
    assert output_format.decode_copy(output_format.encode(partition, offset, source)) == (
        partition, offset, (writer_id, inc, seq))
    # not a canary record (or too little of one copied): named by position alone
    assert output_format.decode_copy(output_format.encode(partition, offset, b"x" + source)) == (partition, offset, None)
    assert output_format.decode_copy(output_format.encode(partition, offset, source[:47])) == (partition, offset, None)


def test_copies_of_two_records_at_one_position_are_no_duplicate_live_in_the_checker_or_in_the_verdict():
    """A rewritten source log (a partition wiped under the worker): the worker's committed offset is
    past the new log's end, so it starts again at its start and copies the new records at offsets
    whose old records it had copied. Found on the local cluster: 1,265 false eos_duplicate, live
    and in the audit, while copies were matched by position. A record that survived below the
    rewrite and is copied again is a duplicate (offset 0 here); so is a new record copied twice."""
    old = [(0, o, name(0, o)) for o in range(6)]
    new = [(0, 0, name(0, 0))] + [(0, o, name(0, o, 1)) for o in range(1, 5)]  # offset 0 survived
    twice = (0, 4, name(0, 4, 1))
    output = old + new + [twice]
    verdict = eos_verdict({0: range(5)}, {0: 5}, {0: 5}, output)
    assert verdict.duplicates == ((0, 0, 2), (0, 4, 2)) and verdict.losses == () and verdict.reused_positions == 4
    # positions alone (what a copy naming no record is matched by) would make every one a duplicate
    assert len(eos_verdict({0: range(5)}, {0: 5}, {0: 5}, [c[:2] for c in output]).duplicates) == 5
    for make in (EosLive, CheckerPipeline):
        live = make(100_000)
        live.read_source(0, range(6))
        found = live.read_output(0, list(enumerate(old)), 6)
        live = type(live).from_doc(json.loads(json.dumps(live.to_doc())))  # saved between the logs
        live.read_source(0, range(5))
        found += live.read_output(0, [(6 + i, c) for i, c in enumerate(new + [twice])], 12)
        live = type(live).from_doc(json.loads(json.dumps(live.to_doc())))
        live.committed({0: 5}, {0: 12})
        found += live.judge()
        assert sorted((f.invariant, f.offset) for f in found) == [("eos_duplicate", 0), ("eos_duplicate", 4)], make
        # a duplicate names the record copied twice (the checker's violation: its writer and seq)
        assert sorted((f.offset, f.record) for f in found) == [(0, name(0, 0)), (4, name(0, 4, 1))], make


def test_a_saved_document_of_copies_by_position_alone_is_read_and_a_second_copy_there_is_a_duplicate():
    """Saved before copies named their record: one copy per offset as runs, more by count. Those
    copies name no record, and the next copy at their position, whatever it names, is a second
    one — as the audit, which reads every copy's record, finds it (a review: restored as naming no
    record, a canary record's second copy was not counted live)."""
    old = {"copies": {"0": {"once": [[0, 10]], "more": [[12, 2]]}}}
    live = EosLive.from_doc(old)
    assert live.copies[0][3] == live.copies[0][12] == "?" and live.more == {(0, 12): {"?": 2}}
    assert live.read_output(0, [(0, (0, 12, name(0, 12)))]) == []  # a third copy: counted when the second was
    assert live.read_output(0, [(1, (0, 3, name(0, 3)))]) == [EosFinding("eos_duplicate", 0, 3, 2)]
    assert eos_verdict({0: range(10)}, {0: 10}, {0: 10},
                       [(0, o, name(0, o)) for o in range(10)] + [(0, 3, name(0, 3))]).duplicates == ((0, 3, 2),)
    again = EosLive.from_doc(json.loads(json.dumps(live.to_doc())))  # and saved again in the new form
    assert again.copies == live.copies and again.more == live.more
    assert again.read_output(0, [(2, (0, 4, name(0, 4)))]) == [EosFinding("eos_duplicate", 0, 4, 2)]


def _live_run(seed: int, partitions: int, steps: int, horizon: int = 100_000, make=EosLive):
    """Feed :class:`EosLive` a simulated pipeline as the watch would: the source and the output
    read in random chunks, committed offsets sampled at random moments (with the output's high
    watermarks right after), batches now and then read again, judged at random, saved and
    restored at random; then everything read, a last sample, a last judgement.

    As on a real cluster, a transaction's offsets become visible before its output's commit
    marker does on each output partition (a random lag per partition): until then a
    ``read_committed`` reader of the output stops below its records, though the high watermark
    is past them."""
    source, committed, output, lost, duplicated, events = simulate(seed, partitions, steps)
    rng = random.Random(seed ^ 0x5EED)
    # The output log per output partition (q = the source partition): each transaction's records,
    # then its commit marker (an offset no reader returns), tagged with the transaction's number.
    log: dict[int, list[tuple[int, int, tuple | None]]] = {}
    state_at = []  # after event i: (committed offsets, output high watermarks)
    offsets_now: dict[int, int] = {}
    for i, (out, ends) in enumerate(events):
        for q in sorted({c[0] for c in out}):
            part = log.setdefault(q, [])
            base = len(part)
            part.extend([(base + k, i, copy) for k, copy in enumerate(x for x in out if x[0] == q)])
            part.append((len(part), i, None))
        offsets_now.update(ends)
        state_at.append((dict(offsets_now), {q: len(part) - 1 for q, part in log.items()}))
    live = make(horizon)
    found = []
    src_at = {p: 0 for p in source}
    out_at = {q: 0 for q in log}
    now = -1  # events whose offsets are visible
    lag = {q: rng.randint(0, 2) for q in log}  # events whose output marker is not yet there

    def step(final: bool = False) -> None:
        nonlocal live, now
        if final:
            now = len(events) - 1
        elif rng.random() < 0.4 and now < len(events) - 1:
            now = min(now + rng.randint(1, 3), len(events) - 1)
        for p in source:  # the source reader: a chunk (all when final)
            take = source[p][src_at[p]:] if final else source[p][src_at[p]:src_at[p] + rng.randint(0, 6)]
            live.read_source(p, take)
            src_at[p] += len(take)
        for q in log:  # the output reader: up to the first transaction whose marker is not there yet
            marked = now if final else now - lag[q]
            visible = next((off for off, i, _pos in log[q] if i > marked), len(log[q]))
            end = visible if final else min(visible, out_at[q] + rng.randint(0, 8))
            if out_at[q] and rng.random() < 0.2:  # a batch read again
                again = rng.randint(0, out_at[q])
                found.extend(live.read_output(q, [(off, pos) for off, _i, pos in log[q][again:out_at[q]]
                                                  if pos is not None]))
            chunk = [(off, pos) for off, _i, pos in log[q][out_at[q]:end] if pos is not None]
            found.extend(live.read_output(q, chunk, end))
            out_at[q] = max(out_at[q], end)
        if now >= 0 and (final or rng.random() < 0.5):
            live.committed(*state_at[now])
        if final or rng.random() < 0.5:
            found.extend(live.judge())
        if rng.random() < 0.2:
            live = type(live).from_doc(json.loads(json.dumps(live.to_doc())))

    while now < len(events) - 1 or any(src_at[p] < len(source[p]) for p in source):
        step()
    step(final=True)
    step(final=True)
    return source, committed, output, lost, duplicated, found


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(1, 40))
def test_live_in_any_split_with_restarts_equals_the_verdict_and_what_was_injected(seed, partitions, steps):
    source, committed, output, lost, duplicated, found = _live_run(seed, partitions, steps)
    read_to = {p: max(offsets, default=-1) + 1 for p, offsets in source.items()}
    verdict = eos_verdict(source, read_to, committed, output)
    losses = [(f.partition, f.offset) for f in found if f.invariant == "eos_loss"]
    dups = [(f.partition, f.offset) for f in found if f.invariant == "eos_duplicate"]
    assert len(losses) == len(set(losses)) and len(dups) == len(set(dups))  # each judged once
    assert set(losses) == set(verdict.losses) == {x for x in lost if x[1] < committed.get(x[0], 0)}
    assert set(dups) == {(p, o) for p, o, _n in verdict.duplicates} == duplicated


def test_a_loss_waits_for_the_output_reader_to_reach_the_ends_sampled_after_the_offsets():
    live = EosLive()
    live.read_source(0, [0, 1, 2])
    live.read_output(0, [(0, (0, 0))], reader_at=1)
    live.committed({0: 3}, {0: 4})  # the output of offsets 1 and 2 may sit in [1, 4)
    assert live.judge() == []
    assert live.read_output(0, [(1, (0, 1))], reader_at=3) == []
    assert live.judge() == []  # still short of 4
    live.read_output(0, [], reader_at=4)
    assert live.judge() == [EosFinding("eos_loss", 0, 2, 0)]
    assert live.judge() == []  # judged once
    live.committed({0: 3}, {0: 4})
    assert live.judge() == []
    assert live.read_output(0, [(1, (0, 1))], reader_at=4) == []  # read again: not a second copy
    assert live.read_output(0, [(4, (0, 1))], reader_at=5) == [EosFinding("eos_duplicate", 0, 1, 2)]
    assert live.read_output(0, [(5, (0, 1))], reader_at=6) == []  # one finding per position


class CheckerPipeline:
    """:class:`EosLive`'s interface, through a whole :class:`Checker` (its reads, its settle, its
    saved document): what the watch does."""

    NAME, TID = "canary", "tid-1"

    def __init__(self, horizon: int = 100_000, checker: Checker | None = None) -> None:
        self.checker = checker or Checker(Settings(horizon_offsets=max(horizon, 20_000)))
        self.source: dict[int, set[int]] = {}  # what the source holds, as read
        if checker is None:
            self.checker.note_topic(self.NAME, self.TID)
            self.checker.eos_source = self.NAME

    def read_source(self, partition, offsets, generation=0):
        reads = [Read(o, name(partition, o, generation)) for o in offsets]
        self.source.setdefault(partition, set()).update(offsets)
        self.checker.apply_reads(RC, self.TID, partition, reads)

    def settle(self) -> list:
        """A batch's settle, then the watch's re-fetches (a loss waits for a re-read of its source
        offset: the source still holds what was read) and their settles."""
        found = self.checker.settle()
        for w in self.checker.refetch_wanted():
            held = self.source.get(w.partition, set())
            self.checker.apply_refetched(RC, w.topic_id, w.partition,
                                         [Read(o, name(w.partition, o)) for o in range(w.lo, w.hi) if o in held],
                                         (w.lo, w.hi))
            found += self.checker.settle()
        return found

    def read_output(self, partition, records, reader_at=None):
        self.checker.apply_eos_output(partition, list(records), reader_at)
        return self.judge()  # a batch ends with a settle (and only then is it saved)

    def committed(self, offsets, ends):
        self.checker.eos_committed(offsets, ends)

    def judge(self):
        return [EosFinding(v.invariant.value, v.partition, v.offsets[0], 0, None if v.writer is None else (*v.writer, v.seq))
                for v in self.settle() if v.invariant in (Invariant.EOS_LOSS, Invariant.EOS_DUPLICATE)]

    def to_doc(self):
        return {**self.checker.to_doc(), "test_source": {p: sorted(o) for p, o in self.source.items()}}

    @classmethod
    def from_doc(cls, doc):
        pipe = cls(checker=Checker.from_doc(doc, Settings()))
        pipe.source = {int(p): set(offsets) for p, offsets in doc.get("test_source", {}).items()}
        return pipe


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 3), st.integers(1, 30))
def test_the_checker_judges_the_pipeline_as_the_verdict_does_through_its_saved_document(seed, partitions, steps):
    source, committed, output, lost, duplicated, found = _live_run(seed, partitions, steps, make=CheckerPipeline)
    read_to = {p: max(offsets, default=-1) + 1 for p, offsets in source.items()}
    verdict = eos_verdict(source, read_to, committed, output)
    losses = [(f.partition, f.offset) for f in found if f.invariant == "eos_loss"]
    dups = [(f.partition, f.offset) for f in found if f.invariant == "eos_duplicate"]
    assert sorted(losses) == list(verdict.losses)
    assert sorted(dups) == [(p, o) for p, o, _n in verdict.duplicates]


def test_the_checker_counts_them_and_a_recreated_topic_starts_a_new_pipeline():
    pipe = CheckerPipeline()
    ck = pipe.checker
    pipe.read_source(0, [0, 1])
    ck.apply_eos_output(0, [(0, (0, 0)), (1, (0, 0))], 2)
    ck.eos_committed({0: 2}, {0: 2})
    assert sorted(v.invariant.value for v in pipe.settle()) == ["eos_duplicate", "eos_loss"]
    assert ck.count(Invariant.EOS_LOSS, RC) == 1 and ck.count(Invariant.EOS_DUPLICATE, RC) == 1
    ck.note_topic(pipe.NAME, "tid-2")
    ck.apply_eos_output(0, [(0, (0, 5))], 1)
    assert ck.eos_topic_id == "tid-2" and ck.eos.copies == {0: {5: None}}  # (a copy naming no canary record)


def test_a_loss_the_reader_read_long_before_the_pipeline_passed_it_is_counted_as_the_audit_counts_it():
    """The worker lags Spark's read_committed reader by more than its horizon (a backlog at start,
    a stalled worker): the source offset it skipped is no longer remembered when the loss is found,
    so no re-read can confirm it — counted at once (found by a review: live 0, the audit 1)."""
    n, lost = 30_000, 5_000
    pipe = CheckerPipeline(horizon=20_000)
    ck = pipe.checker
    for lo in range(0, n, 1000):
        pipe.read_source(0, range(lo, lo + 1000))
        ck.apply_eos_output(0, [], 0)
        ck.eos_committed({0: 0}, {0: 0})
        pipe.settle()
    out = [(i, (0, o)) for i, o in enumerate(o for o in range(n) if o != lost)]
    ck.apply_eos_output(0, out, len(out))
    ck.eos_committed({0: n}, {0: len(out)})
    pipe.settle()
    pipe.settle()
    assert ck.view(RC, pipe.TID, 0).forgotten_below > lost
    assert ck.count(Invariant.EOS_LOSS, RC) == 1
    assert eos_verdict({0: range(n)}, {0: n}, {0: n}, [p for _o, p in out]).losses == ((0, lost),)


def test_a_loss_held_on_a_recreated_topics_old_id_is_counted_under_that_id():
    """Found by a review: counted at the old ID's end, it was labelled with the new ID."""
    pipe = CheckerPipeline()
    ck = pipe.checker
    pipe.read_source(0, [0, 1])
    ck.apply_eos_output(0, [(0, (0, 0))], 1)
    ck.eos_committed({0: 2}, {0: 1})
    assert ck.settle() == [] and len(ck.eos_losses.pending.items) == 1  # (0, 1) waits for its re-read
    ck.note_topic(pipe.NAME, "tid-2")  # recreated: the pipeline follows the new ID
    ck.apply_eos_output(0, [], 1)
    ck.begin_batch()
    ck.begin_batch()
    assert [(v.invariant, v.topic_id, v.offsets) for v in ck.settle()] == [(Invariant.EOS_LOSS, pipe.TID, (1,))]


def test_new_records_a_rewritten_partitions_pipeline_never_consumed_are_not_judged():
    """A partition wiped under the worker (found in the fresh-clone suite: 262 false eos_loss in the
    audit, live 0): the old log held records 0..9 and transaction markers at 10 and 11, all copied,
    the group committed 12. The new log holds other records at 0..14; still reaching 12, the worker
    goes on from there: records 0..11 of the new log never reach it, and at 10 and 11 no copy names
    any record. Not judged from the first offset whose copy names an old record (0) to the first
    copy of a record the log holds now (12)."""
    old = [(0, o, name(0, o)) for o in range(10)]
    new = [(0, o, name(0, o, 1)) for o in range(12, 15)]
    held = {0: {o: name(0, o, 1) for o in range(15)}}
    verdict = eos_verdict({0: range(15)}, {0: 15}, {0: 15}, old + new, held=held)
    assert verdict.losses == () and verdict.not_consumed == {0: (0, 12)}
    assert eos_verdict({0: range(15)}, {0: 15}, {0: 15}, old + new).losses == ((0, 10), (0, 11))  # positions alone
    # a worker that starts again at the log's start consumes the new log: a copy it lost there is a loss
    again = [(0, o, name(0, o, 1)) for o in range(15) if o != 10]
    verdict = eos_verdict({0: range(15)}, {0: 15}, {0: 15}, old + again, held=held)
    assert verdict.losses == ((0, 10),) and verdict.not_consumed == {0: (0, 0)}
    # survivors below the rewrite: judged as ever (a copy of the record held there is no old one)
    held = {0: {**{o: name(0, o) for o in range(5)}, **{o: name(0, o, 1) for o in range(5, 15)}}}
    verdict = eos_verdict({0: range(15)}, {0: 15}, {0: 15}, [c for c in old if c[1] != 3] + new, held=held)
    assert verdict.losses == ((0, 3),) and verdict.not_consumed == {0: (5, 12)}
    # nothing rewritten: nothing left out
    held = {0: {o: name(0, o) for o in range(10)}}
    assert eos_verdict({0: range(10)}, {0: 10}, {0: 10}, old, held=held).not_consumed == {}


def test_live_leaves_out_the_new_records_a_rewritten_partitions_pipeline_never_consumed():
    """The audit's rule live: judged up to 5 when the partition was wiped (the group had committed 12,
    past the markers at 10 and 11), Vigil's reader reads the new log from its start; the worker goes
    on from 12. Without the rule, live counted the new records at 10 and 11 lost."""
    old = [(0, o, name(0, o)) for o in range(10)]
    new = [(0, o, name(0, o, 1)) for o in range(12, 15)]
    for make in (EosLive, CheckerPipeline):
        live = make(100_000)
        if make is EosLive:
            live.read_source(0, [(o, name(0, o)) for o in range(10)])
        else:
            live.read_source(0, range(10))
        found = live.read_output(0, list(enumerate(old)), 11)
        live.committed({0: 5}, {0: 11})
        found += live.judge()
        live = type(live).from_doc(json.loads(json.dumps(live.to_doc())))
        if make is EosLive:
            live.read_source(0, [(o, name(0, o, 1)) for o in range(15)])
        else:
            live.read_source(0, range(15), generation=1)
        live = type(live).from_doc(json.loads(json.dumps(live.to_doc())))
        found += live.read_output(0, [(11 + i, c) for i, c in enumerate(new)], 15)
        live.committed({0: 15}, {0: 15})
        found += live.judge()
        assert found == [], (make, found)
    verdict = eos_verdict({0: range(15)}, {0: 15}, {0: 15}, old + new, held={0: {o: name(0, o, 1) for o in range(15)}})
    assert verdict.losses == () and verdict.not_consumed == {0: (0, 12)}


def _judged(live, *steps):
    found = []
    for step in steps:
        found += step(live) or []
    return [f.offset for f in found if f.invariant == "eos_loss"]


def test_a_span_not_ended_waits_two_rewrites_keep_both_spans_and_a_digest_starts_none():
    """Found by a review of the live rule. A stale committed offset judged before the worker, reset to
    the log's start, copied anything: the new records wait for its first copy there, and a copy it
    lost is counted, as the audit counts it. Two rewrites before a judgement: the first span still
    leaves out its records. A malformed record (its identity a digest) under a copy naming a canary
    record is no rewrite: the copies lost after it are counted."""
    n = name
    old = [(0, o, n(0, o)) for o in range(10)]
    again = [(0, o, n(0, o, 1)) for o in range(15) if o != 10]
    found = _judged(EosLive(), lambda L: L.read_source(0, [(o, n(0, o)) for o in range(10)]),
                    lambda L: L.read_output(0, list(enumerate(old)), 10), lambda L: L.committed({0: 12}, {0: 10}),
                    lambda L: L.judge(), lambda L: L.read_source(0, [(o, n(0, o, 1)) for o in range(15)]),
                    lambda L: L.committed({0: 12}, {0: 10}), lambda L: L.judge(),
                    lambda L: L.read_output(0, [(10 + i, c) for i, c in enumerate(again)], 24),
                    lambda L: L.committed({0: 15}, {0: 24}), lambda L: L.judge())
    held = {0: {o: n(0, o, 1) for o in range(15)}}
    assert found == [10] and eos_verdict({0: range(15)}, {0: 15}, {0: 15}, old + again, held=held).losses == ((0, 10),)
    g1 = [(0, o, n(0, o, 1)) for o in range(12, 15)]
    g2 = [(0, o, n(0, o, 2)) for o in range(15, 21)]
    found = _judged(EosLive(), lambda L: L.read_source(0, [(o, n(0, o)) for o in range(10)]),
                    lambda L: L.read_output(0, list(enumerate(old)), 10), lambda L: L.committed({0: 12}, {0: 10}),
                    lambda L: L.judge(), lambda L: L.read_source(0, [(o, n(0, o, 1)) for o in range(15)]),
                    lambda L: L.read_output(0, [(10 + i, c) for i, c in enumerate(g1)], 13),
                    lambda L: L.read_source(0, [(o, n(0, o, 2)) for o in range(21)]),
                    lambda L: L.read_output(0, [(13 + i, c) for i, c in enumerate(g2)], 19),
                    lambda L: L.committed({0: 21}, {0: 19}), lambda L: L.judge())
    held = {0: {o: n(0, o, 2) for o in range(21)}}
    assert found == [] and eos_verdict({0: range(21)}, {0: 21}, {0: 21}, old + g1 + g2, held=held).losses == ()
    digest = ("x", 123, 60)
    held = {o: (digest if o == 5 else n(0, o)) for o in range(12)}
    copies = [(0, o, n(0, o)) for o in range(12) if o not in (6, 7, 8)]
    found = _judged(EosLive(), lambda L: L.read_output(0, list(enumerate(copies)), len(copies)),
                    lambda L: L.read_source(0, list(held.items())), lambda L: L.committed({0: 12}, {0: len(copies)}),
                    lambda L: L.judge())
    verdict = eos_verdict({0: range(12)}, {0: 12}, {0: 12}, copies, held={0: held})
    assert found == [6, 7, 8] and verdict.losses == ((0, 6), (0, 7), (0, 8)) and verdict.not_consumed == {}


def test_copies_arriving_after_the_new_log_was_read_show_the_rewrite():
    """Found on the local cluster (the wiped-partition test with the pipeline on): Vigil's reader had
    read the old log up to 8 when the partition was wiped, the pipeline had copied it up to 15 (its
    copies reach Vigil's output reader later); the reader then read the new log from 8 on, the
    pipeline went on from its committed offset 15. The new records at 10 and 11, where the old log
    held transaction markers, were never the pipeline's: live counted them lost (5 such, the audit
    0), as it saw no rewrite — no copy of an old record had arrived when the new ones were read, and
    none at all names 10 or 11. A copy naming another record than the one read at its offset now
    starts the span too, and the span takes in the offsets below it read without a copy of their
    record, down to the first with one."""
    n = name
    old = [(0, o, n(0, o)) for o in [*range(10), 12, 13, 14]]
    new = [(0, o, n(0, o, 1)) for o in range(15, 21)]
    for reader_read_old_tail in (False, True):
        live = EosLive()
        found = _judged(live, lambda L: L.read_source(0, [(o, n(0, o)) for o in range(8)]),
                        lambda L: L.read_output(0, list(enumerate(old[:8])), 8),
                        lambda L: L.committed({0: 8}, {0: 8}), lambda L: L.judge(),
                        # the reader's last read of the old log, no copy of it arrived yet
                        lambda L: L.read_source(0, [(o, n(0, o)) for o in (8, 9)] if reader_read_old_tail else []),
                        lambda L: L.read_source(0, [(o, n(0, o, 1)) for o in range(8, 21)]),
                        lambda L: L.committed({0: 21}, {0: 19}),
                        lambda L: L.read_output(0, [(8 + i, c) for i, c in enumerate(old[8:] + new)], 19),
                        lambda L: L.judge())
        assert found == [] and live.rewrites == {0: [[8, 15]]}, (reader_read_old_tail, found, live.rewrites)
        # saved and restored mid-way, the same
        live = EosLive()
        live.read_source(0, [(o, n(0, o)) for o in range(8)])
        live.read_output(0, list(enumerate(old[:8])), 8)
        live.read_source(0, [(o, n(0, o, 1)) for o in range(8, 21)])
        live = EosLive.from_doc(json.loads(json.dumps(live.to_doc())))
        live.read_output(0, [(8 + i, c) for i, c in enumerate(old[8:] + new)], 19)
        live.committed({0: 21}, {0: 19})
        assert live.judge() == [] and live.rewrites == {0: [[8, 15]]}
    held = {0: {o: n(0, o, 1) for o in range(21)}}
    verdict = eos_verdict({0: range(21)}, {0: 21}, {0: 21}, old + new, held=held)
    assert verdict.losses == () and verdict.not_consumed == {0: (0, 15)}
    # the pipeline lost the copy of a record it consumed on the new log: counted on both sides
    lossy = [c for c in new if c[1] != 17]
    found = _judged(EosLive(), lambda L: L.read_source(0, [(o, n(0, o)) for o in range(8)]),
                    lambda L: L.read_output(0, list(enumerate(old[:8])), 8),
                    lambda L: L.read_source(0, [(o, n(0, o, 1)) for o in range(8, 21)]),
                    lambda L: L.read_output(0, [(8 + i, c) for i, c in enumerate(old[8:] + lossy)], 18),
                    lambda L: L.committed({0: 21}, {0: 18}), lambda L: L.judge())
    assert found == [17] and eos_verdict({0: range(21)}, {0: 21}, {0: 21}, old + lossy, held=held).losses == ((0, 17),)


def test_a_span_takes_in_new_records_below_it_the_reader_read_behind_the_pipeline():
    """Vigil's reader behind the pipeline when the log was rewritten (it never read the old log at
    8..14, the pipeline had copied it): the first offset whose copy names an old record is 9 (8 held
    a transaction marker in the old log); the new record at 8, read without a copy, is in the span
    too, as the audit's span starts where the log's first reused offset is."""
    n = name
    old = [(0, o, n(0, o)) for o in [*range(8), *range(9, 15)]]
    new = [(0, o, n(0, o, 1)) for o in range(15, 21)]
    live = EosLive()
    found = _judged(live, lambda L: L.read_source(0, [(o, n(0, o)) for o in range(8)]),
                    lambda L: L.read_output(0, list(enumerate(old)), 14),
                    lambda L: L.committed({0: 8}, {0: 14}), lambda L: L.judge(),
                    lambda L: L.read_source(0, [(o, n(0, o, 1)) for o in range(8, 21)]),
                    lambda L: L.read_output(0, [(14 + i, c) for i, c in enumerate(new)], 20),
                    lambda L: L.committed({0: 21}, {0: 20}), lambda L: L.judge())
    assert found == [] and live.rewrites == {0: [[8, 15]]}, (found, live.rewrites)
    held = {0: {**{o: n(0, o) for o in range(8)}, **{o: n(0, o, 1) for o in range(8, 21)}}}
    verdict = eos_verdict({0: range(21)}, {0: 21}, {0: 21}, old + new, held=held)
    assert verdict.losses == () and verdict.not_consumed == {0: (8, 15)}


def test_the_groups_offset_sampled_when_a_rewrite_was_learnt_judges_below_it_until_it_moves():
    """Found by a review: the rule was dead (the samples were capped before the last value was read).
    The group committed 8 on the old log (past its transaction markers at 6 and 7); the ledger shows
    4..5 reused; the new records at 6 and 7 are read; a sample still at 8 passed the old log only."""
    n = name
    live = EosLive()
    live.read_source(0, [(o, n(0, o)) for o in range(6)])
    live.read_output(0, [(o, (0, o, n(0, o))) for o in range(6)], 6)
    live.committed({0: 8}, {0: 6})
    assert live.judge() == []
    live.rewritten(0, 4, 6)
    live.read_source(0, [(6, n(0, 6, 1)), (7, n(0, 7, 1))])
    live.committed({0: 8}, {0: 6})
    live = EosLive.from_doc(json.loads(json.dumps(live.to_doc())))
    live.committed({0: 8}, {0: 6})
    assert live.judge() == [] and live.judged_to[0] <= 6
    # the group commits on the new log: judged from then on (the pipeline lost the copy of 7)
    live.read_output(0, [(6, (0, 6, n(0, 6, 1)))], 7)
    live.committed({0: 9}, {0: 7})
    assert [f.offset for f in live.judge()] == [7]
