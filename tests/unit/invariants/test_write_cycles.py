"""g0_write_cycle: the family against the definition, brute force, and against the audit."""

from __future__ import annotations

import itertools
import json
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from invariants.catalog import Invariant
from invariants.model import RC, Durability, TxnKey, Violation
from invariants.write_cycles import WriteCyclesFamily, inversions
from monitor.audit.oracle import audit

TOPIC = "t-0001"


def brute_force(pos: dict[TxnKey, dict[int, int]]) -> set[tuple[TxnKey, TxnKey]]:
    """The definition, as written: T before U on some partition and after it on another."""
    out = set()
    for a, b in itertools.combinations(sorted(pos), 2):
        shared = set(pos[a]) & set(pos[b])
        signs = {pos[a][p] < pos[b][p] for p in shared if pos[a][p] != pos[b][p]}
        if len(signs) == 2:
            out.add((a, b))
    return out


@st.composite
def logs(draw):
    """Transactions of a few writers, each with records on some partitions, appended in a random
    interleaving: per partition, a log of (transaction, intended-abort flag)."""
    partitions = draw(st.integers(1, 4))
    n = draw(st.integers(0, 9))
    txns = [TxnKey(draw(st.integers(1, 3)), 1, i + 1) for i in range(n)]
    log: dict[int, list[tuple[TxnKey, bool]]] = {p: [] for p in range(partitions)}
    for t in txns:
        aborted = draw(st.booleans()) and draw(st.booleans())
        for p in draw(st.sets(st.integers(0, partitions - 1), min_size=1)):
            for _ in range(draw(st.integers(1, 2))):
                at = draw(st.integers(0, len(log[p])))
                log[p].insert(at, (t, aborted))
    return log


def positions(log: dict[int, list[tuple[TxnKey, bool]]]) -> dict[TxnKey, dict[int, int]]:
    pos: dict[TxnKey, dict[int, int]] = {}
    for p, recs in log.items():
        for off, (t, aborted) in enumerate(recs):
            if not aborted:
                pos.setdefault(t, {}).setdefault(p, off)
    return pos


def headers(log) -> dict[tuple[int, int], tuple[int, int]]:
    """(partition, offset) -> the header's (transaction size, index) of each record."""
    size: dict[TxnKey, int] = {}
    out = {}
    for p, recs in sorted(log.items()):
        for off, (t, _aborted) in enumerate(recs):
            out[(p, off)] = size.get(t, 0)
            size[t] = size.get(t, 0) + 1
    return {(p, off): (size[log[p][off][0]], i) for (p, off), i in out.items()}


def feed(log, rng: random.Random, restart: bool = True, sweep_slack: int = 64,
         horizon: int | None = None) -> tuple[WriteCyclesFamily, list]:
    """The records in random batches, partition by partition in offset order, judged after each
    batch, positions more than ``horizon`` behind a partition's reader forgotten, the family saved
    and loaded at random. ``sweep_slack``: -1 judges by sweeps only, a large one by the
    transactions after each new position only."""
    WriteCyclesFamily.sweep_slack = sweep_slack
    fam, found = WriteCyclesFamily(), []
    head = headers(log)
    cursors = {p: 0 for p in log}
    while any(cursors[p] < len(log[p]) for p in log):
        for p in rng.sample(sorted(log), len(log)):
            k = rng.choice([0, 1, 2, 3, 8])
            for off in range(cursors[p], min(len(log[p]), cursors[p] + k)):
                t, aborted = log[p][off]
                fam.on_read(t, TOPIC, p, off, aborted, *head[(p, off)])
            cursors[p] = min(len(log[p]), cursors[p] + k)
        found.extend(fam.judge())
        if horizon is not None:
            for p in log:
                fam.forget(TOPIC, p, cursors[p] - horizon)
        if restart and rng.random() < 0.3:
            fam = WriteCyclesFamily.from_doc(json.loads(json.dumps(fam.to_doc())))
    found.extend(fam.judge())
    WriteCyclesFamily.sweep_slack = 64
    return fam, found


def pair_of(v) -> tuple:
    return (*v.writer, v.txn_id), v.other_txn


@given(log=logs(), seed=st.integers(0, 2**32 - 1), sweep_slack=st.sampled_from([-1, 1 << 30]))
@settings(max_examples=400, deadline=None)
@example(log={0: [(TxnKey(1, 1, 1), False), (TxnKey(2, 1, 2), False)],
              1: [(TxnKey(2, 1, 2), False), (TxnKey(1, 1, 1), False)]}, seed=0, sweep_slack=-1)
def test_live_counts_each_cycle_once_whatever_the_batches(log, seed, sweep_slack):
    want = brute_force(positions(log))
    _fam, found = feed(log, random.Random(seed), sweep_slack=sweep_slack)
    assert len(found) == len(want)
    assert sorted((v.writer, v.txn_id) for v in found) == sorted(((a.writer_id, a.inc), a.txn_id) for a, _b in want)
    assert all(v.invariant is Invariant.G0_WRITE_CYCLE and v.isolation is RC and v.durability is Durability.AT_RISK
               and v.reason == "kafka_allows" for v in found)
    assert len({pair_of(v) for v in found}) == len(found)  # never the same pair twice
    assert {pair_of(v) for v in found} == {(tuple(a), tuple(b)) for a, b in want}


@given(log=logs(), seed=st.integers(0, 2**32 - 1), horizon=st.integers(1, 6),
       sweep_slack=st.sampled_from([-1, 1 << 30]))
@settings(max_examples=400, deadline=None)
def test_with_a_horizon_never_a_cycle_that_is_not_one_nor_one_twice(log, seed, horizon, sweep_slack):
    """Positions forgotten behind each partition's reader, which runs ahead of the others at
    random: a cycle can be missed (the audit's only), never made up nor counted twice. A
    transaction read whole with all its positions forgotten is forgotten."""
    want = {(tuple(a), tuple(b)) for a, b in brute_force(positions(log))}
    fam, found = feed(log, random.Random(seed), sweep_slack=sweep_slack, horizon=horizon)
    got = [pair_of(v) for v in found]
    assert len(set(got)) == len(got) and set(got) <= want
    for p in log:
        fam.forget(TOPIC, p, len(log[p]) + 1)
    whole = {t for t, (size, idx) in fam.read.items() if len(idx) >= size}
    assert not whole and not fam.pos and not any(fam.order.values()) and not fam.counted

@given(log=logs())
@settings(max_examples=200, deadline=None)
def test_audit_agrees_with_the_definition(log):
    reads = {RC: {(TOPIC, p): [(off, (t.writer_id, t.inc, off), t.txn_id, aborted)
                               for off, (t, aborted) in enumerate(recs)] for p, recs in log.items()}}
    assert audit([], reads, 4).count(Invariant.G0_WRITE_CYCLE, RC) == len(brute_force(positions(log)))


@given(st.dictionaries(st.builds(TxnKey, st.integers(1, 3), st.just(1), st.integers(1, 30)),
                       st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=25))
def test_inversions_are_the_pairs_in_opposite_orders(pos):
    want = {frozenset((a, b)) for a, b in itertools.combinations(pos, 2)
            if (pos[a][0] - pos[b][0]) * (pos[a][1] - pos[b][1]) < 0}
    got = inversions(pos)
    assert len(got) == len(want) and {frozenset(p) for p in got} == want
    assert all(pos[a][0] < pos[b][0] and pos[a][1] > pos[b][1] for a, b in got)


def test_records_meant_to_be_aborted_are_no_positions():
    fam = WriteCyclesFamily()
    t, u = TxnKey(1, 1, 1), TxnKey(2, 1, 1)
    fam.on_read(t, TOPIC, 0, 0, False)
    fam.on_read(u, TOPIC, 0, 1, False)
    fam.on_read(u, TOPIC, 1, 0, True)  # aborted_read's business, not an order
    fam.on_read(t, TOPIC, 1, 1, False)
    assert fam.judge() == []


def test_the_same_cycle_is_named_alike_whichever_partitions_show_it():
    t, u = TxnKey(1, 1, 1), TxnKey(2, 1, 7)
    names = set()
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        fam = WriteCyclesFamily()
        for p in order:  # t first on 0, u first on 1 and 2
            first, second = (t, u) if p == 0 else (u, t)
            fam.on_read(first, TOPIC, p, 10, False)
            fam.on_read(second, TOPIC, p, 11, False)
        (v,) = [v for v in fam.judge()]
        names.add(v.identity())
        assert v.writer == (1, 1) and v.txn_id == 1 and v.other_txn == (2, 1, 7) and "txn 7 of writer" in v.detail
    assert len(names) == 1
    (ident,) = names  # kept in the state for a rebuild, and read back from the evidence
    assert Violation.identity_from_doc(json.loads(json.dumps(Violation.identity_doc(ident)))) == ident
    assert Violation.from_json(json.loads(json.dumps(v.to_json()))).identity() == ident
    other = Violation.from_json({**v.to_json(), "other_txn": [f"{3:016x}", 1, 7]})
    assert other.identity() != ident  # another pair with the same lower transaction is another cycle


def test_forgotten_positions_are_no_longer_compared_and_pairs_are_forgotten_with_them():
    fam = WriteCyclesFamily()
    t, u, x = TxnKey(1, 1, 1), TxnKey(2, 1, 1), TxnKey(3, 1, 1)
    fam.on_read(t, TOPIC, 0, 5, False)
    fam.on_read(u, TOPIC, 0, 6, False)
    fam.on_read(u, TOPIC, 1, 5, False)
    fam.on_read(t, TOPIC, 1, 6, False)
    assert len(fam.judge()) == 1 and fam.counted
    fam.forget(TOPIC, 0, 7)
    fam.forget(TOPIC, 1, 7)
    assert not fam.pos and not fam.counted and not any(fam.order.values())
    fam.on_read(x, TOPIC, 0, 100, False)
    fam.forget(TOPIC, 0, 50)  # only what is below goes
    assert fam.pos == {x: {(TOPIC, 0): 100}}


def test_a_topic_that_is_gone_is_forgotten():
    fam = WriteCyclesFamily()
    fam.on_read(TxnKey(1, 1, 1), TOPIC, 0, 5, False)
    fam.on_read(TxnKey(1, 1, 1), "other", 0, 5, False)
    fam.forget_topic(TOPIC)
    assert fam.pos == {TxnKey(1, 1, 1): {("other", 0): 5}} and set(fam.order) == {("other", 0)}
    assert fam.fresh == {("other", 0): {TxnKey(1, 1, 1)}} and set(fam.order) == {("other", 0)}


def test_a_record_read_again_lower_moves_the_position():
    """A rewritten log read again: a transaction's record found below its position moves it."""
    fam = WriteCyclesFamily()
    t, u = TxnKey(1, 1, 1), TxnKey(2, 1, 1)
    for tkey, p, off in ((t, 0, 10), (u, 0, 12), (t, 1, 3), (u, 1, 4)):
        fam.on_read(tkey, TOPIC, p, off, False)
    assert fam.judge() == []  # t first on both
    fam.on_read(u, TOPIC, 0, 8, False)
    fam.on_read(u, TOPIC, 0, 9, False)  # not its first record there
    (v,) = fam.judge()
    assert "partition 0 at offsets 10 / 8" in v.detail
    assert fam.order[(TOPIC, 0)] == [(8, u), (10, t)] and (fam.pos[t][(TOPIC, 0)], fam.pos[u][(TOPIC, 0)]) == (10, 8)


def test_positions_from_a_rewritten_offset_up_are_taken_away():
    """A node back empty: the new log reuses the offsets. The old transaction's position there is
    gone with its record; a new transaction read again at a reused (lower) offset is not ordered
    against it — that made up cycles the final log does not hold. Every position from the first
    changed offset up rests on the old log (or a mix): all are taken away."""
    fam = WriteCyclesFamily()
    old, new, later = TxnKey(1, 1, 1), TxnKey(1, 1, 2), TxnKey(1, 1, 3)
    fam.on_read(old, TOPIC, 0, 100, False, 2, 0)  # p0: the log to be wiped
    fam.on_read(later, TOPIC, 0, 120, False, 2, 0)
    fam.on_read(old, TOPIC, 1, 50, False, 2, 1)
    fam.on_read(new, TOPIC, 1, 60, False, 2, 1)  # p1 keeps its log: old before new
    fam.on_read(later, TOPIC, 1, 70, False, 2, 1)
    assert fam.judge() == []
    fam.on_rewritten(TOPIC, 0, 100)  # re-read: offset 100 holds something else now
    fam.on_read(new, TOPIC, 0, 3, False, 2, 0)  # the new log's record, at a reused offset
    assert fam.judge() == []
    assert fam.gone[old] == fam.gone[later] == {(TOPIC, 0)} and fam.pos[old] == {(TOPIC, 1): 50}
    assert fam.order[(TOPIC, 0)] == [(3, new)]
    fam.on_read(old, TOPIC, 0, 101, False, 2, 0)  # a record of it there again: no position
    assert fam.judge() == [] and (TOPIC, 0) not in fam.pos[old]
    fam.on_rewritten(TOPIC, 1, 50)  # nothing of old left to compare, and read whole: forgotten
    assert old not in fam.pos and old not in fam.read
    assert fam.pos[new] == {(TOPIC, 0): 3} and fam.order[(TOPIC, 1)] == []


@given(log=logs(), cuts=st.lists(st.integers(0, 4), min_size=4, max_size=4), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=300, deadline=None)
@example(log={0: [(TxnKey(1, 1, 7), False), (TxnKey(2, 1, 9), False), (TxnKey(1, 1, 7), False),
                  (TxnKey(2, 1, 9), False)], 1: [(TxnKey(1, 1, 7), False), (TxnKey(2, 1, 9), False)]},
         cuts=[1, 0, 0, 0], seed=0)
def test_a_reading_that_begins_inside_transactions_makes_up_no_cycle_live_or_in_the_audit(log, cuts, seed):
    """Each partition read from some offset on (a log start on a segment boundary, a rebuild from
    the log start, a reader started at the end): a transaction whose first records there are cut
    off is not read whole, and is judged by neither side (found by a review: the example's T and U
    are in the same order on both partitions, but read from offset 1 on p0 a later record of T
    stood for its position, and live and the audit each counted a cycle)."""
    want = {(tuple(a), tuple(b)) for a, b in brute_force(positions(log))}
    head = headers(log)
    kept = {p: [(off, t, aborted) for off, (t, aborted) in enumerate(recs) if off >= cuts[p]] for p, recs in log.items()}
    rng = random.Random(seed)
    fam, found = WriteCyclesFamily(), []
    cursors = {p: 0 for p in kept}
    while any(cursors[p] < len(kept[p]) for p in kept):
        for p in rng.sample(sorted(kept), len(kept)):
            k = rng.choice([1, 2, 8])
            for off, t, aborted in kept[p][cursors[p]:cursors[p] + k]:
                fam.on_read(t, TOPIC, p, off, aborted, *head[(p, off)])
            cursors[p] += k
        found.extend(fam.judge())
    live = {pair_of(v) for v in found}
    reads = {RC: {(TOPIC, p): [(off, (t.writer_id, t.inc, off), t.txn_id, aborted, *head[(p, off)])
                               for off, t, aborted in recs] for p, recs in kept.items()}}
    res = audit([], reads, 4)
    assert live <= want and len(found) == len(live)
    assert res.count(Invariant.G0_WRITE_CYCLE, RC) == len(live)
    shown = {frozenset(map(tuple, e["txns"])) for e in res.examples[(Invariant.G0_WRITE_CYCLE, RC)]}
    assert shown <= {frozenset(pair) for pair in live}  # (the audit shows five at most)
