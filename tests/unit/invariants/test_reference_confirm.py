"""group_skip through the live checker: counted only once read_committed read the offset again
(invariants.reference_confirm), in any split of the reads, settles, re-reads and restarts — and never
on a record the reference reader handed over that the log no longer holds."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.checker import Checker
from invariants.model import RC, Read, Settings
from tests.unit.invariants.test_groups import Sim


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
