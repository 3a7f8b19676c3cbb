"""group_skip through the live checker: counted only once read_committed read the offset again
(invariants.reference_confirm), in any split of the reads, settles, re-reads and restarts — and never
on a record the reference reader handed over that the log no longer holds."""

from __future__ import annotations

import json
from dataclasses import replace
import random

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from invariants.checker import Checker
from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, Stop, WriteOutcome, WriteRange, WriterRef, WriterSettings,
)
from invariants.model import RC, Read, Settings
from monitor.group import observations
from monitor.watch.batch import apply_batch
from tests.unit.invariants.test_groups import Sim
from tests.unit.invariants.tiny import TID, WID, Story, rec
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


# -- waiting for the ledger: read further, and the write of the record there given an outcome ---------


def _group_checker(settings: Settings | None = None) -> "Checker":
    ck = Checker(settings)
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


def _ledger_read_to(ck: "Checker", seconds: float) -> list:
    """The ledger read further: an entry (of a writer of nothing) appended ``seconds`` after the
    first; then what was counted."""
    ck.apply_ledger([LedgerEntry(WriterRef("clock", 99, 1), 0, 1_000 + int(seconds * 1e6), Stop())])
    return ck.settle()


def _restarted(ck: "Checker") -> "Checker":
    ck = Checker.from_doc(json.loads(json.dumps(ck.to_doc())), ck.settings)
    ck.group_source = "canary"
    return ck


def _old_log_then_intents() -> tuple[Story, int]:
    """One writer: seqs 0..10 acked at offsets 0..10, then intents for seqs 11..19; the index of
    the entry that acknowledges those at 2..10, below the old ones (a node back without its data)."""
    s = Story()
    for seq in range(11):
        s.acked(seq, seq)
    s.entry(Intent(TID, (WriteRange(0, 11, 9),)))
    s.entry(Outcomes(TID, (OutcomeRun(0, 11, 9, WriteOutcome.ACKED, 2, 1, 2),)))
    return s, len(s.entries) - 1


NEW_LOG = {o: ("x", o, 1) for o in range(2)} | {o: rec(o + 9) for o in range(2, 11)}


@pytest.mark.parametrize("restart", [False, True])
def test_a_skip_on_a_new_logs_record_waits_for_its_writes_outcome_and_a_rewrite_drops_it(restart):
    """A node back without its data: the writer's acks of seqs 11..19 land at 2..10, below its old
    acks at 0..10, and reach the checker batches after the group passed offset 5 of the new log."""
    s, last = _old_log_then_intents()
    ck = _group_checker()
    ck.apply_ledger(s.entries[:last])  # intents folded, the acknowledgement still on its way
    found = _passed_offset_5(ck, NEW_LOG)
    assert _skips(found) == [] and len(ck.group_skips.waiting) == 1  # re-read, waiting for the ledger
    found += _ledger_read_to(ck, 10)  # read further, but the record's write has no outcome yet
    if restart:
        ck = _restarted(ck)
    assert _skips(found) == [] and len(ck.group_skips.waiting) + len(ck.group_skips.pending.items) == 1
    ck.apply_ledger(s.entries[last:])  # the acks going back: offsets 2..10 reused
    found += ck.settle() + _ledger_read_to(ck, 60)
    assert _skips(found) == [] and not ck.group_skips.waiting and not ck.group_skips.pending.items


def test_another_writers_acks_going_back_within_the_grace_drop_a_skip_whose_own_record_is_acknowledged():
    """Writer B's record at 5 is acknowledged (and not going back: B had nothing above 5); writer
    A's acks showing 2..10 reused reach the checker a batch later, within the grace."""
    a, last = _old_log_then_intents()
    b = Story(writer=WriterRef("b", WID + 1, 1))
    b.acked(0, 5)
    ck = _group_checker()
    ck.apply_ledger(a.entries[:last] + b.entries)
    found = _passed_offset_5(ck, NEW_LOG | {5: rec(0, wid=WID + 1)})
    assert _skips(found) == [] and len(ck.group_skips.waiting) == 1
    ck.apply_ledger(a.entries[last:])
    found += ck.settle() + _ledger_read_to(ck, 60)
    assert _skips(found) == [] and not ck.group_skips.waiting


@pytest.mark.parametrize("restart", [False, True])
def test_a_skip_whose_record_has_an_ordinary_outcome_is_counted_once_it_arrives_and_the_ledger_moved_on(restart):
    s = Story()
    for seq in range(11):
        s.entry(Intent(TID, (WriteRange(0, seq, 1),)))
    first = len(s.entries)
    s.entry(Outcomes(TID, (OutcomeRun(0, 0, 11, WriteOutcome.ACKED, 0, 1, 2),)))
    ck = _group_checker()
    ck.apply_ledger(s.entries[:first])
    found = _passed_offset_5(ck, {o: rec(o) for o in range(11)})
    found += _ledger_read_to(ck, 10)
    assert _skips(found) == []  # the ledger read further, the write still without an outcome
    if restart:
        ck = _restarted(ck)
    ck.apply_ledger(s.entries[first:])
    found += ck.settle()
    if restart:  # restored, it waits again from where the ledger stood
        assert _skips(found) == []
        found += _ledger_read_to(ck, 16)
    assert _skips(found) == [5]


def test_a_skip_on_a_foreign_record_or_a_stopped_writers_waits_for_the_ledger_to_move_on_only_while_one_writes():
    ck = _group_checker()
    ck.apply_ledger(Story().entries)
    assert _skips(_passed_offset_5(ck, {o: ("x", o, 1) for o in range(11)})) == []
    assert _skips(_ledger_read_to(ck, 4)) == []
    assert _skips(_ledger_read_to(ck, 6)) == [5]
    s = Story()
    s.entry(Intent(TID, (WriteRange(0, 0, 11),)))
    ck = _group_checker()
    ck.apply_ledger(s.stop().entries)  # the only writer stopped: nothing more will come
    assert _skips(_passed_offset_5(ck, {o: rec(o) for o in range(11)})) == [5]
    other = Story(writer=WriterRef("b", WID + 1, 1))
    ck = _group_checker()
    ck.apply_ledger(s.entries + other.entries)  # another writer still writing: read further first
    assert _skips(_passed_offset_5(ck, {o: rec(o) for o in range(11)})) == []
    assert _skips(_ledger_read_to(ck, 6)) == [5]


@pytest.mark.parametrize("settings, longest_s", [
    (WriterSettings(message_timeout_ms=30_000), 35), (WriterSettings(message_timeout_ms=60_000), 65),
    (WriterSettings(message_timeout_ms=5_000), 30),
    # a transactional writer's outcomes come when its transaction ends (its start records the bound)
    (WriterSettings(transactional=True, message_timeout_ms=30_000, outcome_within_ms=215_000), 220)])
@pytest.mark.parametrize("restart", [False, True])
def test_a_skip_whose_records_outcome_never_comes_waits_at_most_the_longest_wait(settings, longest_s, restart):
    """The entry holding the outcome lost from the ledger (an outcome_gap), the writer carrying on:
    the wait ends 30 s on, or the writer's message timeout — or the longer bound its start recorded —
    and the grace (5 s) on if longer (an outcome may come that late: Checker._ledger_behind); the
    same after a restart from the saved state."""
    s = Story()
    start = s.entries[0]
    s.entries[0] = replace(start, body=replace(start.body, settings=settings))
    s.entry(Intent(TID, (WriteRange(0, 0, 11),)))
    ck = _group_checker()
    ck.apply_ledger(s.entries)
    found = _passed_offset_5(ck, {o: rec(o) for o in range(11)}) + _ledger_read_to(ck, longest_s - 1)
    assert _skips(found) == [] and len(ck.group_skips.waiting) == 1
    if restart:  # (restored waiting skips start waiting again: the next read of the ledger asks afresh)
        ck = _restarted(ck)
        assert _skips(_ledger_read_to(ck, longest_s - 1)) == []
        assert _skips(_ledger_read_to(ck, 2 * longest_s - 2)) == []
        assert _skips(_ledger_read_to(ck, 2 * longest_s)) == [5]
        return
    assert _skips(_ledger_read_to(ck, longest_s + 1)) == [5]


def test_a_waiting_skip_the_view_is_about_to_forget_is_judged_on_what_it_holds():
    s = Story()
    s.entry(Intent(TID, (WriteRange(0, 0, 11),)))
    ck = _group_checker(Settings(horizon_offsets=20))
    ck.apply_ledger(s.entries)
    assert _skips(_passed_offset_5(ck, {o: rec(o) for o in range(11)})) == []
    ck.apply_reads(RC, TID, 0, [Read(o, ("x", o, 1)) for o in range(11, 40)])
    assert _skips(ck.settle()) == [5]


def test_without_a_ledger_read_nothing_waits():
    assert _skips(_passed_offset_5(_group_checker(), {o: rec(o) for o in range(11)})) == [5]
