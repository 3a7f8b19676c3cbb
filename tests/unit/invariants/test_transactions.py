"""transactions: aborted_read and partial_txn — one tiny history each."""

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.ledger_format import TxnOutcome
from invariants.model import RC, RU, TxnKey, WriteKey
from tests.unit.invariants.tiny import FILLER, Story, honest, rec

LOST = {("lost_write", "read_committed"): 1, ("lost_write", "read_uncommitted"): 1}


def txn_reads(offsets: dict[int, int]) -> dict[int, int]:
    return {off: 1 for off in offsets}


def test_an_aborted_transaction_read_by_read_committed():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.ABORTED)
    s.read(RC, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    found, ck = s.run()
    assert found == {("aborted_read", "read_committed"): 2}
    assert ck.aborted_allowed == 2  # read_uncommitted may see them


def test_an_honest_abort_is_fine():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.ABORTED)
    s.read(RC, *honest(0, 2), *honest(5, 10)).read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10),
                                                   txn={3: 1, 4: 1})
    assert s.run()[0] == {}


def test_a_committed_transaction_of_which_read_committed_saw_only_part():
    """Two records acked at 3 and 4, both read by read_uncommitted; read_committed saw only 3."""
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED)
    s.read(RC, *honest(0, 2), (3, rec(0)), *honest(5, 10), txn={3: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    assert s.run()[0] == {("partial_txn", "read_committed"): 1, ("lost_write", "read_committed"): 1}


def test_a_committed_transaction_with_a_write_that_never_landed_is_partial():
    s = Story().txn(1, {0: 3}, TxnOutcome.COMMITTED, size=2)  # the second write: indeterminate, never written
    s.read(RC, *honest(0, 2), (3, rec(0)), *honest(4, 10), txn={3: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), *honest(4, 10), txn={3: 1})
    assert s.run()[0] == {("partial_txn", "read_committed"): 1}


def test_a_committed_transaction_nobody_sees_is_lost_not_partial():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED)
    s.read_both(*honest(0, 10))
    assert s.run()[0] == {("lost_write", "read_committed"): 2, ("lost_write", "read_uncommitted"): 2}


def test_a_whole_committed_transaction_is_fine():
    s = Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED)
    for iso in (RC, RU):
        s.read(iso, *honest(0, 2), (3, rec(0)), (4, rec(1)), *honest(5, 10), txn={3: 1, 4: 1})
    assert s.run()[0] == {}


def test_an_undecided_transaction_that_is_visible_in_part_is_torn():
    s = Story().txn(1, {0: 3, 1: 4, 2: 5}, TxnOutcome.INDETERMINATE)
    s.read(RC, *honest(0, 2), (3, rec(0)), *honest(6, 10), txn={3: 1})
    s.read(RU, *honest(0, 2), (3, rec(0)), (4, rec(1)), (5, rec(2)), *honest(6, 10), txn={3: 1, 4: 1, 5: 1})
    assert s.run()[0] == {("partial_txn", "read_committed"): 1}


def test_a_transaction_partly_below_the_log_start_is_not_judged():
    """Retention deleted its first record: the rest being visible is no torn transaction."""
    s = Story().txn(1, {0: 3, 1: 8}, TxnOutcome.COMMITTED)
    s.read(RC, *honest(5, 7), (8, rec(1)), *honest(9, 14), txn={8: 1})
    s.read(RU, *honest(5, 7), (8, rec(1)), *honest(9, 14), txn={8: 1})
    found, ck = s.run(log_start=5)
    assert found == {} and ck.expired_unread == 2  # the deleted write, in each reader


def test_a_transaction_in_a_rewritten_log_waits_for_the_re_read_before_it_is_judged():
    """The reader read offsets 0-12 of partition 0; the broker came back empty and the new log
    reuses them: a committed transaction acknowledged at 3 (new log) and 4 on partition 1. The
    reader's memory of 3 holds the old record, and the acknowledgement going backwards (the writer
    had an ack at 9) says so: the verdict waits for the re-read, which finds the record — whole,
    not partial (found live in a wiped-partition run: 10 false partial_txn the audit did not count)."""
    from invariants.checker import Checker
    from invariants.ledger_format import Intent, OutcomeRun, Outcomes, TxnEnd, TxnInfo, WriteOutcome, WriteRange
    from invariants.model import Read
    from tests.unit.invariants.tiny import SETTINGS, TID, answer_refetches

    s = Story().acked(0, 9)  # seq 0 at 9 of the old log
    old = [Read(o, rec(0) if o == 9 else (7, 1, o)) for o in range(13)]
    new = {0: [Read(o, rec(1), 1) if o == 3 else Read(o, (8, 1, o)) for o in range(13)],
           1: [Read(o, rec(2), 1) if o == 4 else Read(o, (9, 1, o)) for o in range(11)]}
    ck = Checker(SETTINGS)
    ck.apply_ledger(s.entries)
    for iso in (RC, RU):
        ck.apply_reads(iso, TID, 0, old)
    ck.settle()
    seen = len(s.entries)
    s.entry(Intent(TID, (WriteRange(0, 1, 1), WriteRange(1, 2, 1)), TxnInfo(1, 2, False)))
    s.entry(Outcomes(TID, (OutcomeRun(0, 1, 1, WriteOutcome.ACKED, 3, 1, 2),
                           OutcomeRun(1, 2, 1, WriteOutcome.ACKED, 4, 1, 2))))
    s.entry(TxnEnd(1, TxnOutcome.COMMITTED))
    ck.apply_ledger(s.entries[seen:])
    for iso in (RC, RU):
        ck.apply_reads(iso, TID, 1, new[1])
    ck.settle()
    found = {(inv.value, iso.value) for (inv, iso, _d), n in ck.counts.items() if n}
    assert ("partial_txn", "read_committed") not in found  # waiting for the re-read
    assert ck.refetch_wanted()  # of partition 0, 3-10
    answer_refetches(ck, lambda iso, p: new[p])
    found = {(inv.value, iso.value) for (inv, iso, _d), n in ck.counts.items() if n}
    assert ("partial_txn", "read_committed") not in found, found
    assert ("lost_write", "read_committed") in found  # seq 0 went with the old log


def test_a_transaction_read_from_data_fetched_before_it_was_written_waits_for_the_re_read():
    """A committed transaction at 3 and 4, acknowledged before the reader's batch that covers them
    arrives; that batch was served up to 4 from what Spark's consumer had fetched before the log
    started again (another record at 3), and from the log after. No acknowledgement went
    backwards: only the re-read of 3, asked for by the transaction itself, shows it whole (found
    live in a wiped-partition run: 5 false partial_txn). A re-read that finds the other record
    there still leaves it torn."""
    from invariants.checker import Checker
    from invariants.model import Read
    from tests.unit.invariants.tiny import SETTINGS, TID, answer_refetches

    # read up to 5: the write at 3 is still inside its settle window (4), its own verdict not formed
    log = [Read(o, {3: rec(0), 4: rec(1)}.get(o, rec(o, wid=FILLER)), 1 if o in (3, 4) else 0) for o in range(6)]
    served = [Read(o, (8, 1, o)) for o in range(4)] + log[4:]
    for torn in (False, True):
        ck = Checker(SETTINGS)
        ck.apply_ledger(Story().txn(1, {0: 3, 1: 4}, TxnOutcome.COMMITTED).entries)
        for iso in (RC, RU):
            ck.apply_reads(iso, TID, 0, served)
        ck.settle()
        assert not any(n for (inv, _i, _d), n in ck.counts.items() if inv.value == "partial_txn")
        assert ck.refetch_wanted()
        answer_refetches(ck, lambda iso, p: served if torn else log)
        found = {(inv.value, iso.value) for (inv, iso, _d), n in ck.counts.items() if n}
        assert (("partial_txn", "read_committed") in found) == torn, (torn, found)


# -- torn by the headers: transactions whose intent the ledger does not hold ----------------------

def _headed_story(t2_visible: set[int], t3_on: tuple[int, ...] = (0, 1), t3_intent: bool = True,
                  t2_end: TxnOutcome | None = None):
    """Writer transactions T1 (intent, committed: offset 3 of partitions 0 and 1), T2 (no intent: a
    ledger read from the middle; size 3, indexes 0 and 2 on partition 0 at 4 and 5, index 1 on
    partition 1 at 4) and T3 (committed, at 6 and 5 of the partitions in ``t3_on``). read_committed
    sees T2's indexes in ``t2_visible``; read_uncommitted sees all of it."""
    from invariants.ledger_format import Intent, OutcomeRun, Outcomes, TxnEnd, TxnInfo, WriteOutcome, WriteRange
    from invariants.model import Read
    from tests.unit.invariants.tiny import TID

    s = Story()

    def txn(txn_id: int, offsets: dict[int, int], seq: int) -> None:
        s.entry(Intent(TID, tuple(WriteRange(p, seq, 1) for p in offsets), TxnInfo(txn_id, len(offsets), False)))
        s.entry(Outcomes(TID, tuple(OutcomeRun(p, seq, 1, WriteOutcome.ACKED, o, 1, 2) for p, o in offsets.items())))
        s.entry(TxnEnd(txn_id, TxnOutcome.COMMITTED))

    txn(1, {0: 3, 1: 3}, 0)
    if t2_end is not None:  # the ledger holds T2's outcome, not its intent
        s.entry(TxnEnd(2, t2_end))
    t3 = {p: {0: 6, 1: 5}[p] for p in t3_on}
    if t3_intent:
        txn(3, t3, 3)
    t2 = {0: [(4, 1, 0), (5, 2, 2)], 1: [(4, 1, 1)]}  # partition -> (offset, seq, index)
    for iso in (RC, RU):
        for p in (0, 1):
            reads = [Read(o, (5, 1, o)) for o in range(3)] + [Read(3, rec(0), 1, False, 2, p)]
            reads += [Read(o, rec(seq), 2, False, 3, i) for o, seq, i in t2[p] if iso is RU or i in t2_visible]
            if p in t3:
                reads.append(Read(t3[p], rec(3), 3, False, len(t3), p))
            top = max(r.offset for r in reads)
            reads += [Read(o, (5, 1, o)) for o in range(top + 1, top + 6)]
            s.reads[iso][p] = reads
    return s


def test_a_transaction_without_intent_seen_in_part_is_torn_by_its_headers():
    found, ck = _headed_story({0, 1}).run()
    assert found == {("partial_txn", "read_committed"): 1}
    assert {(inv.value, d.value) for (inv, _iso, d), n in ck.counts.items() if n} == {("partial_txn", "unknown")}


def test_a_whole_transaction_without_intent_is_fine():
    assert _headed_story({0, 1, 2}).run()[0] == {}


def test_no_verdict_without_a_later_transaction_read_on_every_partition_or_a_later_intent():
    assert _headed_story({0, 1}, t3_on=(0,)).run()[0] == {}  # partition 1: nothing read after T2
    assert _headed_story({0, 1}, t3_intent=False).run()[0] == {}  # T2's intent may still come


def test_a_transaction_the_ledger_says_was_aborted_is_not_torn_by_its_headers():
    found, _ck = _headed_story({0, 1}, t2_end=TxnOutcome.ABORTED).run()
    assert found == {("aborted_read", "read_committed"): 2}
    found, _ck = _headed_story({0, 1}, t2_end=TxnOutcome.COMMITTED).run()
    assert found == {("partial_txn", "read_committed"): 1}


def test_a_transaction_judged_by_its_headers_is_forgotten_once_both_readers_are_a_horizon_past():
    from tests.unit.invariants.tiny import SETTINGS, TID
    from invariants.model import Read

    _found, ck = _headed_story({0, 1}).run()
    assert any(k.txn_id == 2 for k in ck.txns.txns)
    top = SETTINGS.horizon_offsets + 20
    for iso in (RC, RU):
        for p in (0, 1):
            ck.apply_reads(iso, TID, p, [Read(o, (5, 1, o)) for o in range(11, top)])
    ck.settle()
    assert not any(k.txn_id == 2 for k in ck.txns.txns) and not ck.txns.headed
    assert {(inv.value, iso.value) for (inv, iso, _d), n in ck.counts.items() if n} == {
        ("partial_txn", "read_committed")}  # counted once, not again


def test_a_suspected_rewrite_below_the_log_start_is_waited_for_no_longer():
    from invariants.checker import Checker
    from invariants.model import Read
    from tests.unit.invariants.tiny import SETTINGS, TID

    ck = Checker(SETTINGS)
    for iso in (RC, RU):
        ck.apply_reads(iso, TID, 0, [Read(o, (7, 1, o)) for o in range(13)])
    ck.suspect(TID, 0, 3, 10)
    assert [(w.lo, w.hi) for w in ck.refetch_wanted()] == [(3, 10)]
    ck.set_log_start(TID, 0, 8)
    assert [(w.lo, w.hi) for w in ck.refetch_wanted()] == [(8, 10)]
    ck.set_log_start(TID, 0, 10)
    assert ck.refetch_wanted() == []


def test_a_transaction_saved_one_row_per_write_loads_as_the_packed_form_does():
    from invariants.promises import ClassTable
    from invariants.transactions import TxnTrack

    t = TxnTrack(TxnKey(7, 1, 3))
    writes = [WriteKey("T", p, 7, 1, s) for p in (0, 1) for s in range(10, 14)]
    t.writes = set(writes)
    t.acked = {w: 100 + w.seq for w in writes}  # consecutive offsets: runs
    t.rc_reads = {w: 100 + w.seq for w in writes[:3]}
    t.ru_reads = set(writes[2:5])
    t.indexes = {w: 2 * (w.seq - 10) + w.partition for w in writes[:3]}  # two partitions: indexes 2 apart
    tab = ClassTable()
    packed = {**t.doc_without_class(), "cls": tab.ref(t.cls)}
    assert len(packed["acked_runs"]) == 2 and all(len(runs) == 1 for _t, _p, runs in packed["acked_runs"])
    assert packed["indexes_runs"] == [["T", 0, [[7, 1, 10, 0, 3, 2]]]]
    rows = {k: v for k, v in packed.items() if not k.endswith("_runs")}
    rows.update(writes=[list(w) for w in t.writes], acked=[[*w, o] for w, o in t.acked.items()],
                rc_reads=[[*w, o] for w, o in t.rc_reads.items()], ru_reads=[list(w) for w in t.ru_reads],
                indexes=[[*w, i] for w, i in t.indexes.items()])  # (state version 4)
    for doc in (packed, rows):
        back = TxnTrack.from_doc(doc, tab)
        assert ((back.writes, back.acked, back.rc_reads, back.ru_reads, back.indexes)
                == (t.writes, t.acked, t.rc_reads, t.ru_reads, t.indexes))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from(["T", "U"]), st.integers(0, 2), st.sampled_from([7, 2**64 - 1]),
                                 st.integers(0, 2), st.integers(0, 12)),
                       st.integers(-5, 40), max_size=40))
def test_header_indexes_packed_as_stepped_runs_unpack_to_the_same_indexes(rows):
    """Any header indexes, saved as runs of a constant step, load back exactly (a run of one has
    step 0; two rows make any step; a third joins only on that step)."""
    from invariants.transactions import _pack_indexes, _unpack_indexes

    indexes = {WriteKey(*k): i for k, i in rows.items()}
    packed = _pack_indexes(indexes)
    assert _unpack_indexes({"indexes_runs": packed}) == indexes


def test_the_writes_a_transaction_waits_for_count_each_once_whatever_the_order_of_intents_and_acks():
    """A transaction is judged when none of its intended writes waits for an outcome: an intent
    naming writes already acknowledged or decided (read again after a restart) adds only the others,
    an ack takes off only writes intended and still waiting, and a repeated entry changes nothing."""
    from invariants.ledger_events import TxnWritesAcked, TxnWritesIntended
    from invariants.transactions import TransactionsFamily

    fam = TransactionsFamily(1000)
    tkey = TxnKey(7, 1, 3)

    def intended(first, count):
        fam.on_intended(TxnWritesIntended("t", 0, 7, 1, first, count, tkey))

    def acked(first, count, at):
        fam.on_acked(TxnWritesAcked("t", 0, 7, 1, first, count, at, tkey, 0))

    acked(0, 2, 10)  # seqs 0, 1 acked before any intent names them
    fam.on_write_decided(WriteKey("t", 0, 7, 1, 2), tkey, fam.txns[tkey].cls)  # seq 2 decided otherwise
    t = fam.txns[tkey]
    assert t.undecided_writes == 0
    intended(0, 6)  # seqs 0..5: only 3, 4, 5 wait
    assert t.undecided_writes == 3 and len(t.writes) == 6
    intended(0, 6)  # the same intent again
    assert t.undecided_writes == 3
    acked(3, 2, 13)  # 3, 4
    assert t.undecided_writes == 1 and t.acked[WriteKey("t", 0, 7, 1, 4)] == 14
    acked(3, 3, 13)  # 3, 4 again and 5
    assert t.undecided_writes == 0
    acked(9, 2, 20)  # never intended: nothing was waiting for them
    assert t.undecided_writes == 0 and len(t.acked) == 7


PACKED = ("writes", "acked", "rc_reads", "ru_reads", "indexes")  # what TxnTrack._pack keeps between saves


def test_what_a_transaction_keeps_made_once_follows_every_change_of_what_it_comes_from():
    """A transaction's highest read offset per partition and its saved form are made once and kept
    until what they come from changes: after reads, a vanished record and new acks they are what
    making them again gives."""
    from invariants.ledger_events import TxnWritesAcked
    from invariants.model import ReadRun
    from invariants.transactions import TransactionsFamily, TxnTrack

    fam = TransactionsFamily(1000)
    tkey = TxnKey(7, 1, 3)

    def fresh(t):
        again = TxnTrack(t.key, set(t.writes), t.outcome, t.undecided_writes, dict(t.acked), dict(t.rc_reads),
                         set(t.aborted_counted), set(t.ru_reads), indexes=dict(t.indexes))
        return again.read_top(), {k: again._pack(k) for k in PACKED}

    def check():
        t = fam.txns[tkey]
        assert (t.read_top(), {k: t._pack(k) for k in PACKED}) == fresh(t)

    fam.on_read_run(RC, tkey, "t", 0, ReadRun(100, 3, 7, 1, 0, txn_id=3, txn_size=6, txn_index=0, txn_step=1))
    check()
    fam.on_read_run(RU, tkey, "t", 0, ReadRun(100, 4, 7, 1, 0, txn_id=3, txn_size=6, txn_index=0, txn_step=1))
    check()
    fam.on_read_run(RC, tkey, "t", 0, ReadRun(103, 2, 7, 1, 3, txn_id=3, txn_size=6, txn_index=3, txn_step=1))
    check()
    assert fam.txns[tkey].read_top() == {("t", 0): 104}
    fam.on_acked(TxnWritesAcked("t", 0, 7, 1, 0, 5, 100, tkey, 0))
    check()
    fam.on_vanished(WriteKey("t", 0, 7, 1, 4), 104)
    check()
    assert fam.txns[tkey].read_top() == {("t", 0): 103}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from(["T", "U"]), st.integers(0, 2), st.sampled_from([7, 2**64 - 1]),
                                 st.integers(0, 2), st.integers(0, 12)),
                       st.integers(0, 3), max_size=40), st.booleans())
def test_a_transactions_writes_packed_as_runs_unpack_to_the_same_writes_in_the_fewest_runs(rows, valued):
    """A transaction's writes (a set) or its acks and reads (write -> offset; the offsets here the
    seq plus a small shift, so that runs form and break) load back exactly, and no run could join
    the next: same partition, writer and incarnation, the next seq at the next offset."""
    from invariants.transactions import _pack_writes, _unpack_writes

    writes = {WriteKey(*k): k[4] + shift for k, shift in rows.items()}
    packed = _pack_writes(writes.items() if valued else set(writes))
    back = _unpack_writes({"w_runs": packed}, "w", valued=valued)
    assert back == (writes if valued else set(writes))
    for _tid, _p, runs in packed:
        for a, b in zip(runs, runs[1:]):
            assert (a[0], a[1], a[2] + a[4], a[3] + a[4]) != (b[0], b[1], b[2], b[3])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 20), st.integers(0, 12)), max_size=12))
def test_a_transactions_write_keys_are_the_same_values_whether_made_or_taken_from_an_earlier_list(asks):
    """TxnTrack.keys hands the intent's key objects to its acks and reads where they cover them:
    any sequence of asks gets exactly the keys it names."""
    from invariants.model import write_keys
    from invariants.transactions import TxnTrack

    t = TxnTrack(TxnKey(7, 1, 3))
    for p, first, count in asks:
        assert t.keys("T", p, 7, 1, first, count) == write_keys("T", p, 7, 1, first, count)
    assert all(k.partition == p for (_t, p, _w, _i), (_f, keys) in t._keys.items() for k in keys)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T", "U"]), st.integers(0, 1), st.sampled_from([7, 8]),
                          st.integers(0, 1), st.integers(0, 6), st.integers(0, 8)), max_size=25))
def test_a_decided_transactions_writes_are_expected_in_groups_each_the_next_seq_at_the_next_offset(rows):
    """The checker expects a committed transaction's acknowledged writes group by group, in their
    order: each group is the next seq of the same writer incarnation and partition at the next
    offset (what the acked family joins into one expected run when told them one by one), and no
    group could have joined the one before."""
    from invariants.checker import _consecutive

    pairs = [(WriteKey(*r[:5]), r[5]) for r in {r[:5]: r for r in rows}.values()]
    groups = _consecutive(pairs)
    assert [(WriteKey(w.topic_id, w.partition, w.writer_id, w.inc, w.seq + i), at + i)
            for w, at, n in groups for i in range(n)] == pairs
    for (w, at, n), (w2, at2, _n2) in zip(groups, groups[1:]):
        assert (w.topic_id, w.partition, w.writer_id, w.inc, w.seq + n, at + n) != (*w2, at2)
