"""The checker on logs that change under it: truncations and rewrites (with and without Spark
resuming lower), readers starting mid-log, a log start that moves, a ledger read from the middle.

The truth is the simulation's own: which acknowledged writes a truncation removed, and what each
reader read at each offset over the run (:mod:`tests.unit.changing_logs`). The audit, which sees
only the final log, must agree on everything but the offsets rewritten after they were read.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings, strategies as st

from invariants.catalog import Invariant
from invariants.model import Durability, Read
from monitor.audit.oracle import HISTORY_INVARIANTS, audit
from tests.unit.changing_logs import DURABLE, RC, READERS, RU, TOPIC, UNCLEAN, Sim, SimWriter, Slot

H = 4


def live_counts(sim: Sim) -> dict:
    out: Counter = Counter()
    for (inv, iso, _d), n in sim.checker.counts.items():
        if n and inv in HISTORY_INVARIANTS:
            out[(inv, iso)] += n
    return dict(out)


def live_classes(sim: Sim) -> set:
    return {d for (_i, _s, d), n in sim.checker.counts.items() if n}


def final_audit(sim: Sim, ledger_from: int = 0):
    log_start = {(sim.tid, p): s for p, s in sim.log_start.items()}
    return audit(sim.ledger[ledger_from:], {iso: sim.final_reads(iso) for iso in READERS}, H, log_start,
                 watched=[TOPIC], topic_ids_now={TOPIC: sim.tid}, read_log_start={iso: log_start for iso in READERS})


@given(seed=st.integers(0, 2**32 - 1), resume_lower=st.booleans(), unclean=st.booleans(), cut=st.integers(0, 7),
       extra=st.integers(0, 6), prefetch=st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_log_truncated_after_it_was_read_and_rewritten(seed, resume_lower, unclean, cut, extra, prefetch):
    """Readers read a partition; it is truncated at t and new records land at the reused offsets.
    Every acknowledged write the truncation removed is lost (live and audit), every rewritten offset
    a reader read is inconsistent for it (live; the audit cannot see it), in the topic's class."""
    rng = random.Random(seed)
    sim = Sim(2, rng, resume_lower=resume_lower, prefetch=prefetch)
    topic = UNCLEAN if unclean else DURABLE
    background = SimWriter(sim, topic)
    for p in range(2):
        background.write(p, 3)
    sim.drive(20)
    victim = SimWriter(sim, topic)
    first = victim.write(0, 8)[0][1]
    background.write(0, H + extra)
    sim.deliver(len(sim.ledger))
    sim.catch_up()  # both readers read past everything: the truncated records were read
    sim.drive(10)
    old_end = len(sim.logs[0])
    t = first + cut
    removed = sum(1 for s in sim.logs[0][t:] if s is not None)  # all acked
    sim.logs[0] = sim.logs[0][:t]
    sim.drive(rng.randint(0, 15))
    rewriter = SimWriter(sim, topic)
    while len(sim.logs[0]) < old_end + H + 2:
        rewriter.write(0, rng.randint(1, 5))
        background.write(1, 1)
        sim.drive(rng.randint(0, 8))
    sim.finish()

    want = {(Invariant.LOST_WRITE, RC): removed, (Invariant.LOST_WRITE, RU): removed}
    inconsistent = sim.inconsistent_truth()
    assert inconsistent == {(Invariant.INCONSISTENT_OFFSET, iso): old_end - t for iso in READERS}
    assert live_counts(sim) == {**want, **inconsistent}
    assert live_classes(sim) == {Durability.AT_RISK if unclean else Durability.GUARANTEED}
    oracle = final_audit(sim)
    assert oracle.nonzero() == want  # the final log shows the losses, not the offsets read twice


def _wipe_and_write_again(sim: Sim, w: SimWriter, rng: random.Random, gap: int) -> tuple[int, dict]:
    """Partition 0's log emptied (a broker back without its data); ``gap`` steps later ``w`` writes
    there again, past the old end and the settle window, then everything is read and re-read.
    Returns the old end and what the audit must find: every write of the old log lost."""
    old_end = len(sim.logs[0])
    removed = sum(1 for s in sim.logs[0] if s is not None)
    sim.logs[0] = []
    sim.drive(gap)
    while len(sim.logs[0]) < old_end + H + 2:
        w.write(0, rng.randint(1, 5))
        w.write(1, 1)
        sim.drive(rng.randint(0, 8))
    sim.finish()
    return old_end, {(Invariant.LOST_WRITE, RC): removed, (Invariant.LOST_WRITE, RU): removed}


@given(seed=st.integers(0, 2**32 - 1), resume_lower=st.booleans(), gap=st.integers(0, 15), prefetch=st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_log_wiped_and_written_again_from_zero_by_the_same_writer(seed, resume_lower, gap, prefetch):
    """A broker back without the partition's data (the same topic ID): the log empties and the
    same writer goes on writing there from offset 0, its acks going back to 0. Every write the
    wiped log held is lost — its first one too, acked at 0 when the log was new, which is no
    bogus zero offset — live and audit alike; every offset read before and written again is
    inconsistent (live only)."""
    rng = random.Random(seed)
    sim = Sim(2, rng, resume_lower=resume_lower, prefetch=prefetch)
    w = SimWriter(sim, DURABLE)
    for p in range(2):
        w.write(p, 3)
    sim.drive(20)
    w.write(0, 8)
    sim.deliver(len(sim.ledger))
    sim.catch_up()  # both readers read everything the log will lose
    sim.drive(10)
    old_end, want = _wipe_and_write_again(sim, w, rng, gap)
    inconsistent = sim.inconsistent_truth()
    assert inconsistent == {(Invariant.INCONSISTENT_OFFSET, iso): old_end for iso in READERS}
    assert live_counts(sim) == {**want, **inconsistent}
    assert final_audit(sim).nonzero() == want


@given(seed=st.integers(0, 2**32 - 1), read=st.integers(0, 10), gap=st.integers(0, 15))
@settings(max_examples=80, deadline=None)
def test_a_wiped_log_s_unread_tail_served_from_spark_s_fetched_data_after_the_new_log_s_acks(seed, read, gap):
    """Measured on the local cluster (a broker back without an RF-1 partition's data, writers
    started after the checker's first batch): Spark's consumer had fetched the old log past where
    its micro-batch ended, and served that tail with its next batch once the new log had grown past
    it, after the new log's writes at those offsets were acknowledged. The old tail is what the
    readers read there; the new writes are where they were acknowledged, and the final log holds
    them: not lost (live counted 32 of them, and 16 reorders of the old tail after new records
    read again below it). Every write of the old log is lost, live and audit alike."""
    rng = random.Random(seed)
    sim = Sim(2, rng, prefetch=True)
    w = SimWriter(sim, DURABLE)
    for p in range(2):
        w.write(p, 3)
    sim.drive(10)
    w.write(0, 12)
    sim.deliver(len(sim.ledger))
    for iso in READERS:  # both readers stop short of the old end; their consumers fetched all of it
        while sim.pos[(iso, 0)] < 3 + read:
            sim.read(iso, 0, 3 + read - sim.pos[(iso, 0)])
    sim.settle()
    _old_end, want = _wipe_and_write_again(sim, w, rng, gap)
    assert final_audit(sim).nonzero() == want
    assert live_counts(sim) == {**want, **sim.inconsistent_truth()}


@given(seed=st.integers(0, 2**32 - 1), resume_lower=st.booleans())
@settings(max_examples=30, deadline=None)
def test_a_log_truncated_before_the_readers_got_there(seed, resume_lower):
    """acks=1 failover: acknowledged records the old leader held, cut before anyone read them."""
    rng = random.Random(seed)
    sim = Sim(1, rng, resume_lower=resume_lower)
    w = SimWriter(sim, UNCLEAN)
    w.write(0, 5)
    sim.deliver(len(sim.ledger))
    sim.catch_up()
    t = len(sim.logs[0])
    SimWriter(sim, UNCLEAN).write(0, 6)  # acked, never read
    sim.deliver(len(sim.ledger))
    sim.logs[0] = sim.logs[0][:t]
    rewriter = SimWriter(sim, UNCLEAN)
    while len(sim.logs[0]) < t + 6 + H + 2:
        rewriter.write(0, rng.randint(1, 4))
        sim.drive(rng.randint(0, 6))
    sim.finish()
    want = {(Invariant.LOST_WRITE, RC): 6, (Invariant.LOST_WRITE, RU): 6}
    assert live_counts(sim) == want == final_audit(sim).nonzero()
    assert sim.inconsistent_truth() == {}


@given(seed=st.integers(0, 2**32 - 1), start=st.integers(1, 20))
@settings(max_examples=30, deadline=None)
def test_readers_that_start_mid_log_judge_only_what_they_read(seed, start):
    rng = random.Random(seed)
    sim = Sim(2, rng)
    w = SimWriter(sim)
    for p in range(2):
        w.write(p, 25)
    for key in sim.pos:
        sim.pos[key] = start
    sim.drive(40)
    for p in range(2):
        w.write(p, 5)
    sim.finish()
    oracle = final_audit(sim)
    expired = 2 * 2 * start  # both partitions, both readers
    assert live_counts(sim) == {} == oracle.nonzero()
    assert sim.checker.expired_unread == expired
    assert oracle.expired_unread == 0  # the audit reads from offset 0: nothing is below its start
    assert sim.checker.acked.undecided() == oracle.undecided == 0


@given(seed=st.integers(0, 2**32 - 1), moved=st.integers(1, 30))
@settings(max_examples=30, deadline=None)
def test_a_log_start_that_moves_past_unread_writes_expires_them(seed, moved):
    """Retention deletes the head of a partition before the readers read it."""
    rng = random.Random(seed)
    sim = Sim(1, rng)
    w = SimWriter(sim)
    w.write(0, 30)
    sim.deliver(len(sim.ledger))
    for o in range(moved):
        sim.logs[0][o] = None
    sim.log_start[0] = moved
    sim.probe()
    sim.drive(20)
    w.write(0, 8)
    sim.finish()
    oracle = final_audit(sim)
    assert live_counts(sim) == {} == oracle.nonzero()
    assert sim.checker.expired_unread == oracle.expired_unread == 2 * moved
    assert sim.checker.acked.undecided() == oracle.undecided == 0


@given(seed=st.integers(0, 2**32 - 1), joined=st.integers(1, 30))
@settings(max_examples=30, deadline=None)
def test_a_ledger_read_from_the_middle_has_no_gaps_and_judges_what_it_can(seed, joined):
    """The checker (and the audit) see the ledger only from entry ``joined`` on (retention, or a
    checker started with `latest`): no outcome_gap, nothing expected that was never announced."""
    rng = random.Random(seed)
    sim = Sim(2, rng)
    writers = [SimWriter(sim) for _ in range(2)]
    for _ in range(12):
        w = rng.choice(writers)
        w.write(rng.randrange(2), rng.randint(1, 4))
        if rng.random() < 0.3:
            w.checkpoint()
    sim.delivered = min(joined, len(sim.ledger))  # what the checker never got
    skipped = sim.delivered
    sim.drive(30)
    for w in writers:
        w.checkpoint()
        w.write(0, 3)
        w.stop()
    sim.finish()
    oracle = final_audit(sim, ledger_from=skipped)
    assert live_counts(sim) == {} == oracle.nonzero()
    assert (sim.checker.expired_unread, sim.checker.acked.undecided()) == (oracle.expired_unread, oracle.undecided)
    assert sim.checker.records_checked == oracle.records_checked


@given(seed=st.integers(0, 2**32 - 1), from_earliest=st.booleans(), notice=st.booleans(), moved=st.integers(0, 6),
       stragglers=st.integers(0, 3), old_log_reads=st.integers(0, 3), fill=st.booleans())
@settings(max_examples=80, deadline=None)
def test_a_topic_recreated_under_the_writers(seed, from_earliest, notice, moved, stragglers, old_log_reads, fill):
    """Topic A is written and partly read, retention moves partition 0's log start (the writers
    record it), then A is deleted and recreated as B. The writers notice and carry on on B (a
    ``start`` that replaces A), or stop and new ones start on B (only the prober's metadata says
    A is gone). Sends of A's writer may land in B (stragglers), interleaved with a writer already
    on B, right after the recreation (below A's end, readers caught up on A). Every acked write of A at or
    above its recorded log start is lost with cause topic_vanished, below it expired; B is judged
    as any topic; live == audit. Reads carry the topic's name only: which ID they belong to is
    the checker's to work out (a batch holds the intents of its records, as Spark's do). Spark
    goes on either from the new log's end (its positions fell above it) or from its start (it saw
    the partitions gone, then new). Up to ``old_log_reads`` of its batches and re-fetches after
    the recreation return the old log's records at the offsets planned on the new one, up to some
    offset, and the new log's after it (a broker that had not deleted the old log yet, then the
    client learnt the new ID): they change no verdict. ``fill``: what Spark skipped below its first
    read of B is read directly (TopicLifecycle._fill_below; applied after its last record meant for
    A: an old log's, or a straggler); where nothing was left out, live then expires exactly what the
    audit does."""
    rng = random.Random(seed)
    sim = Sim(2, rng, resume_lower=not from_earliest, intents_first=True, fill=fill)
    writers = [SimWriter(sim), SimWriter(sim)]
    for _ in range(6):
        rng.choice(writers).write(rng.randrange(2), rng.randint(1, 4))
        sim.drive(rng.randint(0, 5))
    for p in range(2):  # both readers have read every partition once, as Spark's have by then
        writers[0].write(p, 1)
        for iso in READERS:
            sim.read(iso, p, 1)
    moved = min(moved, len(sim.logs[0]))
    for o in range(moved):
        sim.logs[0][o] = None
    sim.log_start[0] = moved
    for w in writers:
        w.checkpoint()
    sim.drive(rng.randint(0, 20))
    if stragglers:  # readers caught up on A, as attribution needs (invariants.attribution, rule 1)
        sim.catch_up()
    a_ends = {p: len(sim.logs[p]) for p in range(2)}
    old = sim.recreate(writers_notice=False)
    sim.old_log_reads = old_log_reads
    if from_earliest:
        sim.pos = {key: 0 for key in sim.pos}
    if stragglers:  # a writer on B already, and A's writer whose sends (intended for A) land in B,
        fresh = SimWriter(sim)  # below A's end: right after the recreation
        for _ in range(stragglers):
            p = rng.randrange(2)
            if len(sim.logs[p]) + 2 < a_ends[p]:
                writers[0].write(p, rng.randint(1, 2))  # acknowledged at B's offsets, as A's
            fresh.write(rng.randrange(2), rng.randint(1, 3))
    if notice:
        for w in writers:
            w.notice()
    else:
        writers = [SimWriter(sim) for _ in range(2)]
    for _ in range(8):
        rng.choice(writers).write(rng.randrange(2), rng.randint(1, 4))
        sim.drive(rng.randint(0, 5))
    for p in range(2):  # the canary goes on writing: B grows past where the readers were on A
        while len(sim.logs[p]) <= a_ends[p] + H:
            rng.choice(writers).write(p, rng.randint(1, 4))
    for w in writers:
        w.write(0, H)
        w.write(1, H)
    sim.finish()

    on_a = [(p, o) for tid, p, first, k in sim.acked if tid == old for o in range(first, first + k)]
    lost = sum(1 for p, o in on_a if o >= (moved if p == 0 else 0))
    want = {(Invariant.LOST_WRITE, iso): lost for iso in READERS if lost}
    assert live_counts(sim) == want
    assert {v.cause for v in sim.violations} == ({"topic_vanished"} if lost else set())
    assert sim.checker.topics.gone == {old: "vanished"}
    oracle = final_audit(sim)
    assert oracle.nonzero() == want
    below = 2 * (len(on_a) - lost)  # A's writes below its recorded log start, both readers
    assert oracle.expired.get("log_start", 0) == below
    live_expired = sim.checker.expired_by_reason  # live may have judged some before A vanished,
    assert live_expired.get("log_start", 0) + live_expired.get("below_first_read", 0) >= below  # when retention hid them
    assert sim.checker.acked.undecided() == oracle.undecided == 0
    if fill and not sim.checker.fill_left_out:  # what Spark skipped below its first read of B was read and
        assert live_expired == dict(oracle.expired)  # judged: live expired what the audit did, nothing more


def test_a_wiped_log_that_begins_with_records_read_committed_never_returns_is_judged_from_its_log_start():
    """Measured on the local cluster (fresh-clone preview, a node back without an RF-1 partition):
    the new log began with an aborted transaction's records, so read_committed's first record was
    at offset 3. The audit called the old log's acknowledged writes at offsets 1 and 2 expired
    (below its reader's first record, as if retention had taken them) and live, which had read
    them there and seen them vanish, lost: 1,005 against 1,003. The offsets below the first record
    were in the log all along (the log start after the read says so), holding other records: the
    writes there are missing, in read_committed as in read_uncommitted. Where the log start after
    the read is higher (retention), they are expired, as before."""
    sim = Sim(1, random.Random(7))
    w = SimWriter(sim, DURABLE)
    w.write(0, 6)  # offsets 0-5, acknowledged, then the partition is wiped
    sim.deliver(len(sim.ledger))
    sim.catch_up()
    sim.logs[0] = [Slot(("x", "aborted", i)) for i in range(3)]  # (a reader of the final log: ru only)
    SimWriter(sim, DURABLE).write(0, 3 + H + 3)
    reads = {iso: sim.final_reads(iso) for iso in READERS}
    reads[RC] = {part: [r for r in recs if r[1][0] != "x"] for part, recs in reads[RC].items()}
    part = (sim.tid, 0)

    def lost(read_log_start):
        res = audit(sim.ledger, reads, H, {part: 0}, watched=[TOPIC], topic_ids_now={TOPIC: sim.tid},
                    read_log_start=read_log_start)
        return {iso: res.count(Invariant.LOST_WRITE, iso) for iso in READERS}, res.expired["below_first_read"]

    assert lost({RC: {part: 0}, RU: {part: 0}}) == ({RC: 6, RU: 6}, 0)
    assert lost({RC: {part: 3}, RU: {part: 0}}) == ({RC: 3, RU: 6}, 3)  # retention took 0-2 before rc read
    assert lost(None) == ({RC: 3, RU: 6}, 3)  # (not known: the first record read, as before)


def test_live_reads_a_log_that_went_back_again_from_the_lowest_offset_it_remembers_and_agrees_with_the_audit():
    """The live side of the same history (measured on the local cluster, the fix above alone: the new
    log began with a transaction marker at offset 0, the audit called the old log's write at 0 lost
    and live, whose re-read began at the new end the prober saw, never read offset 0 again — 1,369
    against 1,368). A log end that went back says the log was cut at or below the new end, not where:
    read_committed reads everything it remembers again, from its lowest offset, and finds the offsets
    below the first record it returns empty."""
    sim = Sim(1, random.Random(7))
    w = SimWriter(sim, DURABLE)
    w.write(0, 6)
    sim.deliver(len(sim.ledger))
    sim.catch_up()
    sim.probe()
    sim.logs[0] = [Slot(("x", "aborted", i)) for i in range(3)]  # read_committed never returns them
    sim.probe()  # the end went back from 6 to 3
    SimWriter(sim, DURABLE).write(0, 3 + H + 3)
    sim.deliver(len(sim.ledger))
    wanted = sim.checker.refetch_wanted()
    assert [(r.lo, r.hi) for r in wanted] == [(0, 6)]
    for _ in range(5):
        for r in sim.checker.refetch_wanted():
            for iso in READERS:
                reads = [Read(o, s.ident) for o, s in enumerate(sim.logs[0][:r.hi]) if o >= r.lo
                         and (iso is RU or s.ident[0] != "x")]
                assert sim.checker.apply_refetched(iso, sim.tid, 0, reads, (r.lo, r.hi))
        sim.catch_up()
        sim.settle()
    assert not sim.checker.refetch_wanted()
    live = {iso: sim.checker.count(Invariant.LOST_WRITE, iso) for iso in READERS}
    reads = {iso: sim.final_reads(iso) for iso in READERS}
    reads[RC] = {part: [r for r in recs if r[1][0] != "x"] for part, recs in reads[RC].items()}
    part = (sim.tid, 0)
    res = audit(sim.ledger, reads, H, {part: 0}, watched=[TOPIC], topic_ids_now={TOPIC: sim.tid},
                read_log_start={RC: {part: 0}, RU: {part: 0}})
    assert live == {iso: res.count(Invariant.LOST_WRITE, iso) for iso in READERS} == {RC: 6, RU: 6}
