"""group_skip through the live checker: counted only once read_committed read the offset again
(invariants.reference_confirm), in any split of the reads, settles, re-reads and restarts — and never
on a record the reference reader handed over that the log no longer holds."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from invariants.checker import Checker
from invariants.ledger_format import Intent, OutcomeRun, Outcomes, WriteOutcome, WriteRange
from invariants.model import RC, Read, Settings
from monitor.group import observations
from monitor.watch.batch import apply_batch
from tests.unit.invariants.test_groups import Sim
from tests.unit.invariants.tiny import TID, Story, rec
from tests.unit.test_group_wiring import rows


def record(o: int) -> Read:
    return Read(o, ("x", o, 1))


def live_skips(sim: Sim, seed: int, phantoms: dict[int, list[int]] | None = None) -> set[tuple[int, int]]:
    """The checker fed the sim's observations and the reference reader's reads in random pieces,
    settled, re-read (with what the log holds) and restarted at random moments. ``phantoms``: offsets
    the reader hands over besides the log's (an old log's prefetched tail where the log holds
    markers); a re-read finds nothing there."""
    rng = random.Random(seed)

    def fresh(ck: Checker | None) -> Checker:
        ck = Checker(Settings()) if ck is None else Checker.from_doc(json.loads(json.dumps(ck.to_doc())), Settings())
        ck.note_topic("canary", "tid")
        ck.group_source = "canary"
        return ck

    ck = fresh(None)
    found: list = []
    served = {p: sorted(set(offsets) | set((phantoms or {}).get(p, []))) for p, offsets in sim.log.items()}
    cursor = {p: 0 for p in sim.log}

    def read_again() -> None:
        for w in ck.refetch_wanted():
            reads = [record(o) for o in sim.log[w.partition] if w.lo <= o < w.hi]
            ck.apply_refetched(RC, w.topic_id, w.partition, reads, (w.lo, w.hi))
            found.extend(ck.settle())

    for at, obs in enumerate(sim.obs):
        ck.apply_group_observations([(at, obs)])
        if rng.random() < 0.3:
            p = rng.choice(list(sim.log))
            n = rng.randint(0, 5)
            ck.apply_reads(RC, "tid", p, [record(o) for o in served[p][cursor[p]:cursor[p] + n]])
            cursor[p] += n
        if rng.random() < 0.3:
            found.extend(ck.settle())
        if rng.random() < 0.2:
            read_again()
        if rng.random() < 0.05:
            ck = fresh(ck)
    for p in sim.log:
        ck.apply_reads(RC, "tid", p, [record(o) for o in served[p][cursor[p]:]])
    ck.apply_group_observations([], reader_at={p: max(served[p]) + 3 for p in sim.log})
    found.extend(ck.settle())
    while ck.refetch_wanted():
        read_again()
    skips = [(v.partition, v.offsets[0]) for v in found if v.invariant.value == "group_skip"]
    assert len(skips) == len(set(skips)), "a skip counted twice"
    return set(skips)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9))
def test_live_skips_after_their_rereads_are_exactly_what_happened_in_any_split_and_restart(seed):
    sim = Sim(seed, concurrent=bool(seed % 2)).run(150)
    assert live_skips(sim, seed) == sim.true_skips


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9))
def test_a_record_the_reader_handed_over_that_the_log_does_not_hold_is_never_a_skip(seed):
    sim = Sim(seed).run(150)
    rng = random.Random(seed)
    phantoms = {p: [o for o in range(offsets[0], offsets[-1]) if o not in set(offsets) and rng.random() < 0.5]
                for p, offsets in sim.log.items()}
    skips = live_skips(sim, seed, phantoms)
    assert not any(o in phantoms[p] for p, o in skips)
    assert skips <= sim.true_skips  # (a re-read that finds the log changed judges older commits below it only)


# -- waiting for the ledger: a skip on a record whose write has no outcome yet ----------------------


def _group_checker() -> "Checker":
    ck = Checker()
    ck.note_topic("canary", TID)
    ck.group_source = "canary"
    return ck


def _skips(found: list) -> list[int]:
    return [v.offsets[0] for v in found if v.invariant.value == "group_skip"]


def _passed_offset_5(ck: "Checker", held: dict[int, tuple]) -> list:
    """read_committed reads offsets 0..10 (``held``), a member consumes all but 5 and commits 11,
    then the skip's re-read finds the same records: what was counted."""
    e = observations.encode
    ck.apply_reads(RC, TID, 0, [Read(o, held[o]) for o in range(11)])
    found, _ = apply_batch(ck, rows([e("a", "assigned", p=[0]), e("a", "consumed", r={"0": [[0, 5], [6, 5]]}),
                                     e("a", "intent", o={"0": 11}), e("a", "ack", r="ok")]),
                           lambda _n: TID, group_reader_at={0: 11})
    assert [(w.lo, w.hi) for w in ck.refetch_wanted()] == [(5, 6)]
    for w in ck.refetch_wanted():
        assert ck.apply_refetched(RC, w.topic_id, w.partition, [Read(o, held[o]) for o in range(w.lo, w.hi)],
                                  (w.lo, w.hi))
        found += ck.settle()
    return found


def _restarted(ck: "Checker") -> "Checker":
    ck = Checker.from_doc(json.loads(json.dumps(ck.to_doc())), ck.settings)
    ck.group_source = "canary"
    return ck


@pytest.mark.parametrize("restart", [False, True])
def test_a_skip_on_a_new_logs_record_waits_for_its_writes_outcome_and_a_rewrite_drops_it(restart):
    """A node back without its data: the writer's acks of seqs 11..19 land at 2..10, below its old
    acks at 0..10, and reach the checker a batch after the group passed offset 5 of the new log."""
    s = Story()
    for seq in range(11):
        s.acked(seq, seq)
    s.entry(Intent(TID, (WriteRange(0, 11, 9),)))
    first, outcomes = len(s.entries), s.entry(Outcomes(TID, (OutcomeRun(0, 11, 9, WriteOutcome.ACKED, 2, 1, 2),)))
    ck = _group_checker()
    ck.apply_ledger(s.entries[:first])  # intents folded, the outcome still on its way
    held = {o: ("x", o, 1) for o in range(2)} | {o: rec(o + 9) for o in range(2, 11)}
    found = _passed_offset_5(ck, held)
    assert _skips(found) == [] and len(ck.group_skips.waiting) == 1  # re-read, waiting for the ledger
    found += ck.settle()
    if restart:
        ck = _restarted(ck)
    assert _skips(found) == [] and len(ck.group_skips.waiting) + len(ck.group_skips.pending.items) == 1
    ck.apply_ledger(outcomes.entries[first:])  # the acks going back: offsets 2..10 reused
    found += ck.settle()
    assert _skips(found) == [] and not ck.group_skips.waiting and not ck.group_skips.pending.items


@pytest.mark.parametrize("restart", [False, True])
def test_a_skip_whose_record_has_an_ordinary_outcome_is_counted_once_it_arrives(restart):
    s = Story()
    for seq in range(11):
        s.entry(Intent(TID, (WriteRange(0, seq, 1),)))
    first = len(s.entries)
    s.entry(Outcomes(TID, (OutcomeRun(0, 0, 11, WriteOutcome.ACKED, 0, 1, 2),)))
    ck = _group_checker()
    ck.apply_ledger(s.entries[:first])
    found = _passed_offset_5(ck, {o: rec(o) for o in range(11)})
    found += ck.settle()
    assert _skips(found) == []
    if restart:
        ck = _restarted(ck)
    ck.apply_ledger(s.entries[first:])
    found += ck.settle() + ck.settle()
    assert _skips(found) == [5]


def test_a_skip_on_a_foreign_record_or_a_stopped_writers_waits_for_nothing():
    assert _skips(_passed_offset_5(_group_checker(), {o: ("x", o, 1) for o in range(11)})) == [5]
    s = Story()
    s.entry(Intent(TID, (WriteRange(0, 0, 11),)))
    ck = _group_checker()
    ck.apply_ledger(s.stop().entries)  # its pending writes are indeterminate: no outcome to come
    assert _skips(_passed_offset_5(ck, {o: rec(o) for o in range(11)})) == [5]


def test_a_waiting_skip_the_view_is_about_to_forget_is_judged_on_what_it_holds():
    s = Story()
    s.entry(Intent(TID, (WriteRange(0, 0, 11),)))
    ck = Checker(Settings(horizon_offsets=20))
    ck.note_topic("canary", TID)
    ck.group_source = "canary"
    ck.apply_ledger(s.entries)
    assert _skips(_passed_offset_5(ck, {o: rec(o) for o in range(11)})) == []
    ck.apply_reads(RC, TID, 0, [Read(o, ("x", o, 1)) for o in range(11, 40)])
    assert _skips(ck.settle()) == [5]
