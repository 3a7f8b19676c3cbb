"""A checker state lost part-way and rebuilt: the violations counted before come back from their
evidence, the whole retained history is read again, and every count equals an uninterrupted run's
(and the audit's) — nothing counted twice, nothing forgotten."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.checker import Checker
from invariants.catalog import Invariant, Isolation
from invariants.ledger_entries import Start, TopicSettings, WriterRef, WriterSettings
from invariants.ledger_format import Intent, OutcomeRun, Outcomes, WriteOutcome, WriteRange
from invariants.model import RC, RU, Read, Violation
from monitor.audit.oracle import audit
from tests.unit.histories import KINDS, audit_input, build, restart, run_live
from tests.unit.invariants.tiny import SETTINGS as TINY, TID, Story, honest, rec
from tests.unit.test_checker_properties import SETTINGS, SETTLE, history_counts


def evidence_round_trip(found: list[Violation]) -> list[Violation]:
    """Through the evidence file's form: one JSON line per violation, with what the watch adds."""
    lines = [json.dumps({**v.to_json(), "batch_id": i, "incident": "x", "topic": "t"}) for i, v in enumerate(found)]
    return [Violation.from_json(json.loads(line)) for line in lines]


@given(
    seed=st.integers(0, 2**32 - 1),
    partitions=st.integers(1, 3),
    incidents=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2)), max_size=10),
    lost_after=st.integers(0, 40),
)
@settings(max_examples=200, deadline=None)
def test_a_rebuilt_checker_counts_what_an_uninterrupted_one_does(seed, partitions, incidents, lost_after):
    rng = random.Random(seed)
    h = build(partitions, incidents, SETTLE, rng)
    whole = run_live(h, SETTINGS, random.Random(seed + 1))
    found: list[Violation] = []
    run_live(h, SETTINGS, rng, found=found, batches=lost_after)  # its state is then lost
    rebuilt = Checker(SETTINGS)
    rebuilt.sink.seed(evidence_round_trip(found))
    if rng.random() < 0.5:
        rebuilt = restart(rebuilt, SETTINGS)  # what is still to be found again survives a restart
    again: list[Violation] = []
    rebuilt = run_live(h, SETTINGS, rng, checker=rebuilt, found=again)
    assert rebuilt.counts == whole.counts
    assert rebuilt.sink.lost_by_writer == whole.sink.lost_by_writer
    assert history_counts(rebuilt.counts) == audit(h.ledger, audit_input(h), SETTLE).nonzero()
    assert len(found) + len(again) == sum(whole.counts.values())  # evidence: each violation once
    assert not rebuilt.sink.counted_before  # every earlier violation was found again


def test_a_violation_seeded_is_not_reported_again_and_a_second_one_like_it_is():
    ck = Checker(SETTINGS)
    v = Violation(Invariant.DUPLICATE, Isolation.READ_COMMITTED, "t", 0, (4, 7), (1, 0), 3)
    ck.sink.seed([v])
    assert ck.count(Invariant.DUPLICATE, Isolation.READ_COMMITTED) == 1
    ck.sink.add(v)
    assert ck.sink.take() == [] and ck.count(Invariant.DUPLICATE, Isolation.READ_COMMITTED) == 1
    ck.sink.add(v)
    assert ck.sink.take() == [v] and ck.count(Invariant.DUPLICATE, Isolation.READ_COMMITTED) == 2


def test_the_evidence_line_gives_back_the_violation():
    v = Violation(Invariant.LOST_WRITE, Isolation.READ_UNCOMMITTED, "t", 2, (9,), (0xABCDEF, 3), 17, 5, "gone",
                  cause="vanished", writer_name="acks1")
    assert Violation.from_json(json.loads(json.dumps(v.to_json()))) == v
    assert Violation.identity_from_doc(json.loads(json.dumps(Violation.identity_doc(v.identity())))) == v.identity()


def test_a_write_that_vanished_is_the_same_loss_when_the_log_read_again_never_shows_it():
    ck = Checker(SETTINGS)
    vanished = Violation(Invariant.LOST_WRITE, Isolation.READ_COMMITTED, "t", 0, (4,), (1, 0), 3, cause="vanished")
    ck.sink.seed([vanished])
    ck.sink.add(Violation(Invariant.LOST_WRITE, Isolation.READ_COMMITTED, "t", 0, (4,), (1, 0), 3, cause="never_read"))
    assert ck.sink.take() == [] and ck.count(Invariant.LOST_WRITE, Isolation.READ_COMMITTED) == 1
    assert set(ck.sink.lost_by_writer) == {("", Isolation.READ_COMMITTED, vanished.durability, "vanished")}


# -- identities that must hold although the re-read shows the violation differently -------------

def _refetched(ck: Checker, log) -> list[Violation]:
    found = []
    for _ in range(5):
        wanted = ck.refetch_wanted()
        if not wanted:
            break
        for w in wanted:
            for iso in (RC, RU):
                ck.apply_reads(iso, TID, w.partition, [r for r in log(iso, w.partition) if w.lo <= r.offset < w.hi],
                               covered=(w.lo, w.hi))
        found += ck.settle()
    return found


def test_a_bogus_ack_below_the_log_start_is_found_again_from_the_ledger_not_counted_again():
    s = Story()
    s.entry(Intent(TID, (WriteRange(0, 0, 1),)))
    s.entry(Outcomes(TID, (OutcomeRun(0, 0, 1, WriteOutcome.ACKED, 3, 1, 2, log_start_after=10),)))
    s.stop()
    first = Checker(TINY)
    first.apply_ledger(s.entries)
    found = first.settle()
    assert found
    rebuilt = Checker(TINY)
    rebuilt.sink.seed(found)
    rebuilt.set_log_start(TID, 0, 10)  # the runtime notes the log start before the first batch
    rebuilt.apply_ledger(s.entries)
    assert rebuilt.settle() == [] and rebuilt.counts == first.counts and not rebuilt.sink.counted_before


def test_a_duplicate_read_three_times_is_the_same_whichever_batches_showed_its_copies():
    s = Story().acked(0, 1)
    s.read_both(*[(0, rec(0, wid=5)), (1, rec(0)), (2, rec(2, wid=5)), (3, rec(0)), (4, rec(4, wid=5)),
                  (5, rec(0))] + honest(6, 12))
    s.stop()

    def run(splits: list[int], ck: Checker) -> list[Violation]:
        ck.apply_ledger(s.entries)
        bounds, found = [0, *splits, len(s.reads[RC][0])], []
        for a, b in zip(bounds, bounds[1:]):
            for iso in (RC, RU):
                ck.apply_reads(iso, TID, 0, s.reads[iso][0][a:b])
            found += ck.settle() + _refetched(ck, lambda iso, p: s.reads[iso].get(p, []))
        return found

    original = Checker(TINY)
    found = run([2], original)  # the first copies in an earlier batch than the third
    rebuilt = Checker(TINY)
    rebuilt.sink.seed(found)
    assert run([], rebuilt) == []  # the re-read's first batch holds all three
    assert rebuilt.counts == original.counts and not rebuilt.sink.counted_before


def test_a_write_gone_after_it_was_read_is_the_same_loss_whatever_promise_classes_it():
    s = Story(writer=WriterRef("w", 77, 1))
    s.entries.clear()
    s.entry(Start("canary", TID, 2, WriterSettings("w", acks="1"), TopicSettings(3, 2, False)))
    s.acked(0, 3).stop()
    before = [Read(o, i) for o, i in honest(0, 2) + [(3, rec(0))] + honest(4, 12)]
    after = [r for r in before if r.offset != 3]  # offset 3 gone from every replica
    original, found = Checker(TINY), []
    original.apply_ledger(s.entries)
    for iso in (RC, RU):
        original.apply_reads(iso, TID, 0, before)
    found += original.settle()
    for iso in (RC, RU):
        original.apply_reads(iso, TID, 0, after, covered=(0, 13))  # read again: gone
    found += original.settle()
    assert {v.cause for v in found if v.invariant is Invariant.LOST_WRITE} == {"vanished"}
    rebuilt = Checker(TINY)
    rebuilt.sink.seed(found)
    rebuilt.apply_ledger(s.entries)
    for iso in (RC, RU):
        rebuilt.apply_reads(iso, TID, 0, after)  # from the start: never read (classed by its ack)
    assert rebuilt.settle() + _refetched(rebuilt, lambda iso, p: after) == []
    assert sum(rebuilt.counts.values()) == sum(original.counts.values()) and not rebuilt.sink.counted_before


def test_two_ledger_gaps_are_two_violations_although_neither_has_a_writer_or_offsets():
    a = Violation(Invariant.OUTCOME_GAP, Isolation.NONE, detail="w incarnation 1: ledger entry n=4 missing")
    b = Violation(Invariant.OUTCOME_GAP, Isolation.NONE, detail="w incarnation 1: ledger entry n=9 missing")
    ck = Checker(SETTINGS)
    ck.sink.seed([a])
    ck.sink.add(b)
    assert ck.sink.take() == [b]
