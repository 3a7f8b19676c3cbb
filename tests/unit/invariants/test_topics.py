"""Topics that vanish, are recreated or retired, and reads attributed to topic IDs by name."""

import json

import pytest

from invariants.attribution import TopicAttribution
from invariants.checker import Checker
from invariants.ledger_format import (
    Checkpoint, Intent, LedgerEntry, OutcomeRun, Outcomes, Retire, Start, WriteOutcome, WriteRange, WriterRef,
    WriterSettings,
)
from invariants.model import RC, RU, Read
from monitor.audit.oracle import audit
from tests.unit.histories import answer_refetches
from tests.unit.invariants.tiny import SETTINGS

W = WriterRef("w", 77, 1)


class Ledger:
    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []
        self.seq = 0

    def add(self, body, writer: WriterRef = W) -> "Ledger":
        n = sum(1 for e in self.entries if e.writer == writer)
        self.entries.append(LedgerEntry(writer, n, 1_000 + len(self.entries), body))
        return self

    def acked(self, tid: str, offsets: list[int], p: int = 0) -> list[tuple[int, tuple]]:
        """Writes acked at ``offsets`` (consecutive seqs): [(offset, record)]."""
        first = self.seq
        self.seq += len(offsets)
        self.add(Intent(tid, (WriteRange(p, first, len(offsets)),)))
        self.add(Outcomes(tid, tuple(OutcomeRun(p, first + i, 1, WriteOutcome.ACKED, o, 1, 2)
                                     for i, o in enumerate(offsets))))
        return [(o, (77, 1, first + i)) for i, o in enumerate(offsets)]


def reads(items):
    return [Read(o, ident) for o, ident in items]


def counts(ck: Checker) -> dict:
    out: dict = {}
    for (inv, iso, _d), n in ck.counts.items():
        if n:
            out[(inv.value, iso.value)] = out.get((inv.value, iso.value), 0) + n
    return out


def restarted(ck: Checker) -> Checker:
    return Checker.from_doc(json.loads(json.dumps(ck.to_doc())), SETTINGS)


# -- attribution -------------------------------------------------------------------------------


def test_a_new_stream_starts_on_its_contents_id_else_the_names_id_now():
    a = TopicAttribution()
    assert a.attribute("rc", "c", 0, reads([(0, (1, 1, 0))]), lambda r: None) is None  # nothing known of "c"
    a.note("c", "A")
    a.note("c", "B", after="A")
    content = {0: "A", 1: "A", 2: "B"}
    assert a.attribute("rc", "c", 0, reads([(7, (1, 1, 0)), (8, (1, 1, 1))]), lambda r: content[r.ident[2]]) == "A"
    assert a.attribute("rc", "c", 0, reads([(0, (1, 1, 2)), (1, ("x", 3, 4))]),
                       lambda r: content.get(r.ident[2])) == "B"  # a newer ID by content
    # the tail of A read first on a new stream while the name already points at B: content wins
    assert a.attribute("ru", "c", 0, reads([(0, (1, 1, 1))]), lambda r: "A", lambda n: "B") == "A"
    # no canary record of a known intent: the name's ID now, else the newest known
    assert a.attribute("ru", "c", 1, reads([(0, ("x", 1, 1))]), lambda r: None, lambda n: "A") == "A"
    assert a.attribute("ru", "c", 2, reads([(0, ("x", 1, 1))]), lambda r: None) == "B"


def test_stragglers_of_an_old_id_read_on_the_new_topic_belong_to_the_new_one():
    a = TopicAttribution()
    a.note("c", "A")
    a.note("c", "B", after="A")
    content = {5: "B", 3: "A", 6: "B"}
    assert a.attribute("ru", "c", 0, reads([(0, (1, 1, 5)), (1, (1, 1, 3))]), lambda r: content[r.ident[2]]) == "B"
    assert a.attribute("ru", "c", 0, reads([(2, (1, 1, 3))]), lambda r: "A") == "B"


def test_offsets_going_back_ask_where_the_name_points_unless_the_id_is_known_gone():
    a = TopicAttribution()
    a.note("c", "A")
    a.attribute("rc", "c", 0, reads([(10, ("x", 1, 1))]), lambda r: None)
    assert a.attribute("rc", "c", 0, reads([(4, ("x", 1, 2))]), lambda r: None, lambda n: "A") == "A"  # truncated
    assert a.attribute("rc", "c", 0, reads([(2, ("x", 1, 2))]), lambda r: None, lambda n: "B") == "B"  # recreated
    assert a.ids["c"] == ["A", "B"]
    a.note("c", "C", after="B")
    a.gone["B"] = "vanished"
    assert a.attribute("rc", "c", 0, reads([(0, ("x", 1, 3))]), lambda r: None) == "C"


def test_ids_are_ordered_by_what_replaced_what_whatever_order_they_were_seen_in():
    a = TopicAttribution()
    a.note("c", "B")
    a.note("c", "A")
    a.note("c", "B", after="A")
    assert a.ids["c"] == ["A", "B"] and a.newest("c") == "B" and a.name_of("A") == "c"


# -- topics that vanish ------------------------------------------------------------------------


def vanishing_story():
    """Topic A: writes acked at 0..5 of partition 0; the writer recorded log start 2; readers read
    0..3; then the topic is recreated as B and the writer carries on there."""
    led = Ledger().add(Start("c", "A", 1, WriterSettings("w")))
    written = led.acked("A", [0, 1, 2, 3, 4, 5])
    led.add(Checkpoint("c", "A", 1, WriterSettings("w"), None, log_starts=(2,)))
    return led, written


def test_a_recreated_topic_loses_every_tracked_acked_write_of_the_old_id_above_its_recorded_log_start():
    led, written = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    for iso in (RC, RU):
        assert ck.apply_named_reads(iso, "c", 0, reads(written[:4]))
    assert ck.settle() == []
    n = len(led.entries)
    led.add(Start("c", "B", 1, WriterSettings("w"), replaces="A"))
    on_b = led.acked("B", [0, 1])
    ck.apply_ledger(led.entries[n:])
    lost = ck.settle()
    assert {(v.invariant.value, v.isolation.value, v.offsets[0], v.cause) for v in lost} == {
        ("lost_write", iso, o, "topic_vanished") for iso in ("read_committed", "read_uncommitted")
        for o in (2, 3, 4, 5)}
    assert ck.expired_by_reason == {"log_start": 4}  # offsets 0 and 1, both readers
    late = len(led.entries)
    led.add(Outcomes("A", (OutcomeRun(0, 99, 1, WriteOutcome.ACKED, 9, 1, 2),)))  # a late ack on A
    ck.apply_ledger(led.entries[late:])
    assert [v.cause for v in ck.settle()] == ["topic_vanished", "topic_vanished"]
    ck = restarted(ck)
    for iso in (RC, RU):  # Spark goes on reading the new topic from 0 under the same name
        ck.apply_named_reads(iso, "c", 0, reads(on_b + [(2, ("x", 1, 1))] * 0))
        ck.apply_named_reads(iso, "c", 0, reads([(o, ("x", 9, o)) for o in range(2, 8)]))
    ck.settle()
    assert counts(ck) == {("lost_write", "read_committed"): 5, ("lost_write", "read_uncommitted"): 5}
    assert not any(k.topic_id == "A" for k in ck.views) and ck.refetch_wanted() == []
    # the audit, which finds only B under the name, agrees
    final = {iso: {("B", 0): [(o, ident, 0) for o, ident in on_b] + [(o, ("x", 9, o), 0) for o in range(2, 8)]}
             for iso in (RC, RU)}
    res = audit(led.entries, final, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": "B"})
    assert {(i.value, s.value): n for (i, s), n in res.nonzero().items()} == counts(ck)
    assert dict(res.expired) == ck.expired_by_reason


def test_the_runtime_seeing_a_new_id_under_the_name_ends_the_old_one():
    led, written = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    ck.note_topic("c", "A")
    ck.settle()
    ck.note_topic("c", "B")  # no writer said so (none running): the prober's metadata did
    assert ck.settle() == []  # not before the next batch, which holds what the writers recorded until then
    late = len(led.entries)
    led.add(Checkpoint("c", "A", 1, WriterSettings("w"), None, log_starts=(3,)))  # written before A vanished
    ck.begin_batch()
    ck.apply_ledger(led.entries[late:])
    assert len(ck.settle()) == 6 and ck.topics.gone == {"A": "vanished"}  # 3, 4, 5 in both readers
    ck.note_topic("c", "B")
    ck.begin_batch()
    assert ck.settle() == []


def test_a_topic_found_gone_for_good_ends_every_id_of_the_name():
    led, _ = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    ck.topic_vanished("c")
    ck.begin_batch()
    assert len(ck.settle()) == 8
    res = audit(led.entries, {RC: {}, RU: {}}, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": None})
    assert res.count(*next(iter(res.nonzero()))) == 4 and sum(res.nonzero().values()) == 8


def test_a_retired_topic_ends_its_writes_as_expired_even_when_recreated_in_the_same_batch():
    led, written = vanishing_story()
    led.add(Retire("c", "A", "moving"), writer=WriterRef("retire-1", 5, 0))
    led.add(Start("c", "B", 1, WriterSettings("w"), replaces="A"))
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    assert ck.settle() == [] and ck.topics.gone == {"A": "retired"}
    assert ck.expired_by_reason == {"retired": 12}
    res = audit(led.entries, {RC: {}, RU: {}}, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": "B"})
    assert res.nonzero() == {} and dict(res.expired) == {"retired": 12}


def test_another_topics_retirement_changes_nothing():
    led, _ = vanishing_story()
    led.add(Retire("other", "A"), writer=WriterRef("retire-1", 5, 0))
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    assert ck.settle() == [] and ck.topics.gone == {}


def test_a_log_that_restarted_empty_lost_the_write_acked_at_zero_it_held_no_bogus_zero_offset():
    """A broker back without the partition's data (the same topic ID): the log starts again at 0
    and the writer's next writes are acked at 0, 1, ... The write first acked at 0 is lost, not a
    bogus zero offset: live (which read it there before) and the audit (which sees only the
    final log) agree. A zero ack that follows higher acks and whose record is nowhere stays
    zero_offset in the audit."""
    led = Ledger().add(Start("c", "A", 1, WriterSettings("w")))
    before = led.acked("A", [0, 1, 2])
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    for iso in (RC, RU):
        assert ck.apply_named_reads(iso, "c", 0, reads(before))
    assert ck.settle() == []
    n = len(led.entries)
    after = led.acked("A", [0, 1])  # the restarted log
    ck.apply_ledger(led.entries[n:])
    filler = [(o, ("x", 9, o)) for o in range(2, 2 + SETTINGS.settle_offsets)]
    for iso in (RC, RU):  # Spark resumes lower on the restarted log
        assert ck.apply_named_reads(iso, "c", 0, reads(after + filler), lambda _n: "A")
    for _ in range(5):
        ck.begin_batch()
        ck.settle()
        for w in ck.refetch_wanted():
            for iso in (RC, RU):
                ck.apply_reads(iso, "A", 0, [r for r in reads(after + filler) if w.lo <= r.offset < w.hi],
                               covered=(w.lo, w.hi))
    live = counts(ck)
    assert live.get(("lost_write", "read_uncommitted")) == 3 and ("zero_offset", "read_uncommitted") not in live
    final = {iso: {("A", 0): [(o, ident, 0) for o, ident in after + filler]} for iso in (RC, RU)}
    res = audit(led.entries, final, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": "A"})
    assert {(i.value, s.value): n for (i, s), n in res.nonzero().items() if i.value == "lost_write"} == \
        {k: v for k, v in live.items() if k[0] == "lost_write"}
    assert not any(i.value == "zero_offset" for i, _s in res.nonzero())
    # the same final log with a lying ack: a third write acked at 0 after higher acks, nowhere to be read
    led.acked("A", [0])
    res = audit(led.entries, final, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": "A"})
    assert res.count(*next(k for k in res.nonzero() if k[0].value == "zero_offset")) == 1


def test_a_refetch_that_read_the_old_log_under_the_name_is_refused():
    """Right after a recreation a broker may still serve the old log under the name: a re-fetch
    of the new ID that returns records intended for the old one is not applied (still wanted)."""
    led, written = vanishing_story()
    n = len(led.entries)
    led.add(Start("c", "B", 1, WriterSettings("w"), replaces="A"))
    on_b = led.acked("B", [0, 1, 2])
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    old_log = reads(written[:3])  # A's records at offsets 0..2
    assert not ck.apply_refetched(RC, "B", 0, old_log, (0, 3))
    assert ck.view(RC, "B", 0).contents()[0] == {}  # nothing of it applied
    ck.apply_named_reads(RC, "c", 0, reads(on_b))  # Spark read B
    assert ck.apply_refetched(RC, "B", 0, reads(on_b), (0, 3))
    assert set(ck.view(RC, "B", 0).contents()[0]) == {0, 1, 2}
    assert not ck.apply_refetched(RC, "B", 0, old_log, (0, 3))
    assert ck.view(RC, "B", 0).contents()[0] == {o: ident for o, ident in on_b}  # B's records, untouched
    assert n


def read_then_recreated(ck: Checker, led: Ledger, written, b_offsets: list[int]):
    """Both readers read all of A (``written``); then A is recreated as B, the writer's writes acked
    at ``b_offsets`` of B: B's writes, and the ledger entries since, which the checker has not had."""
    for iso in (RC, RU):
        assert ck.apply_named_reads(iso, "c", 0, reads(written))
    ck.settle()
    n = len(led.entries)
    led.add(Start("c", "B", 1, WriterSettings("w"), replaces="A"))
    return led.acked("B", b_offsets), led.entries[n:]


@pytest.mark.parametrize("next_batch", [7, 12])
@pytest.mark.parametrize("one_batch", [False, True])
def test_a_batch_of_the_old_log_fetched_under_the_name_after_a_recreation_is_not_applied(next_batch, one_batch):
    """Spark plans a range on the new topic B, an executor whose client still holds A's ID fetches
    it from a broker that has not deleted A yet: A's records at B's offsets — a batch of its own,
    or (``one_batch``) the first part of a batch whose rest the client fetched from B once it
    learnt the new ID (seen in CI: the old log up to its end, then the new one). Not applied to B
    (counted as old-log reads); B's writes there, passed unread, are read again and found — also
    when the reader is still inside their settle window (read at 5..6 only: the write acked at 4
    waits, and the re-read finds it where it was acked)."""
    led, written = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    on_b, later = read_then_recreated(ck, led, written, list(range(12)))
    ck.apply_ledger(later)
    ck.begin_batch()
    ck.settle()
    for iso in (RC, RU):
        assert ck.apply_named_reads(iso, "c", 0, reads(on_b[:2]), lambda _n: "B")  # back to 0: B now
        if one_batch:
            assert ck.apply_named_reads(iso, "c", 0, reads(written[2:5]) + reads(on_b[5:next_batch]))
        else:
            assert ck.apply_named_reads(iso, "c", 0, reads(written[2:5]))  # A's records at 2..4
            assert ck.apply_named_reads(iso, "c", 0, reads(on_b[5:next_batch]))
    assert ck.old_log_reads == {RC: 3, RU: 3}
    assert all(ck.view(iso, "B", 0).ident_at(o) != ident for iso in (RC, RU) for o, ident in written[2:5])
    assert not any(v.topic_id == "B" for v in ck.settle())
    wanted = ck.refetch_wanted()
    assert [(w.topic_id, w.lo) for w in wanted] == [("B", 2)]
    for _ in range(3):  # records found where the reader had seen none: the rest is read once more too
        for w in wanted:
            for iso in (RC, RU):
                assert ck.apply_refetched(iso, "B", 0, reads(on_b[w.lo:w.hi]), (w.lo, w.hi))
        ck.settle()
        wanted = ck.refetch_wanted()
    for iso in (RC, RU):
        ck.apply_named_reads(iso, "c", 0, reads(on_b[next_batch:]))
    ck.settle()
    live = counts(ck)
    assert set(live) == {("lost_write", "read_committed"), ("lost_write", "read_uncommitted")}  # A's, vanished
    final = {iso: {("B", 0): [(o, ident, 0) for o, ident in on_b]} for iso in (RC, RU)}
    res = audit(led.entries, final, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": "B"})
    assert {(i.value, s.value): k for (i, s), k in res.nonzero().items()} == live
    assert ck.refetch_wanted() == []


def test_a_writers_records_above_its_folded_intents_are_not_put_on_an_id_the_name_has_left():
    """Seen in CI: a batch planned on A before A was recreated as B read B's new log (written after
    it was planned: its intents not folded yet, so presumed the writer's last ID, A) and was put on
    A, where the other reader had read A's records: false inconsistent offsets on both. Such
    records are left out once the name has a newer ID; A's own records in the batch are applied."""
    led, written = vanishing_story()  # A: seqs 0..5 acked at offsets 0..5
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries)
    assert ck.apply_named_reads(RU, "c", 0, reads(written[:2]))  # RU read A at 0..1
    ck.settle()
    ck.note_topic("c", "B")  # the prober sees the name's new ID
    n = len(led.entries)
    led.add(Start("c", "B", 1, WriterSettings("w"), replaces="A"))
    on_b = led.acked("B", [0, 1, 2])  # B: seqs 6..8 at offsets 0..2, not folded yet
    assert ck.fold.topic_of(77, 1, 0, 6) == "A" and ck.fold.beyond_intents(77, 1, 0, 6)
    assert not ck.fold.beyond_intents(77, 1, 0, 5)
    assert ck.apply_named_reads(RC, "c", 0, reads(on_b) + reads(written[3:]), lambda _n: "B")
    assert ck.apply_named_reads(RU, "c", 0, reads(written[2:]))
    assert ck.old_log_reads.get(RC) == 3 and not ck.old_log_reads.get(RU)
    assert all(ck.view(RC, "A", 0).ident_at(o) is None for o, _ in on_b)
    assert all(ck.view(RC, "A", 0).ident_at(o) == ident for o, ident in written[3:])
    ck.settle()
    assert "inconsistent_offset" not in {inv for inv, _ in counts(ck)}
    ck = restarted(ck)
    assert ck.fold.beyond_intents(77, 1, 0, 6)  # kept across a restart
    ck.apply_ledger(led.entries[n:])
    assert not ck.fold.beyond_intents(77, 1, 0, 8) and ck.fold.beyond_intents(77, 1, 0, 9)
    ck.begin_batch()
    ck.settle()
    assert "inconsistent_offset" not in {inv for inv, _ in counts(ck)}


def test_records_above_the_folded_intents_are_applied_while_the_name_has_no_newer_id():
    """The ledger may lag the canary (a catch-up's ledger is read at most maxOffsetsPerTrigger a
    batch): without a newer ID of the name, such records are the writer's last ID's as before."""
    led = Ledger().add(Start("c", "A", 1, WriterSettings("w")))
    written = led.acked("A", [0, 1, 2, 3])
    ck = Checker(SETTINGS, ["c"])
    ck.apply_ledger(led.entries[:2])  # the intent of seqs 0..3: known; later ones would not be
    more = [(4, (77, 1, 4)), (5, (77, 1, 5))]
    assert ck.fold.beyond_intents(77, 1, 0, 4)
    assert ck.apply_named_reads(RC, "c", 0, reads(written) + reads(more))
    assert all(ck.view(RC, "A", 0).ident_at(o) == ident for o, ident in written + more)
    assert not ck.old_log_reads.get(RC)


# -- a recreated topic that Spark resumes above its log start ------------------------------------


def resumed_above_the_start(fill):
    """A is read; recreated as B, the writer's writes acked at 0..5 of B; Spark, which planned no
    batch while the topic was gone, resumes B at offset 3 (the range up to B's end skipped): its
    first read there. ``fill`` answers the direct read of what lies below. Returns the checker
    after the run's end (everything settled) and what it was asked to read."""
    led, written = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.note_topic("c", "A")
    ck.apply_ledger(led.entries)
    on_b, later = read_then_recreated(ck, led, written, [0, 1, 2, 3, 4, 5])
    ck.begin_batch()
    ck.note_topic("c", "B")
    ck.apply_ledger(later)
    asked = []

    def answer(iso, name, tid, p, lo, hi):
        asked.append((iso, name, tid, p, lo, hi))
        return fill(on_b, lo, hi)

    for iso in (RC, RU):
        assert ck.apply_named_reads(iso, "c", 0, reads(on_b[3:]), fill=answer)
        assert ck.apply_named_reads(iso, "c", 0, reads([(o, ("x", 9, o)) for o in range(6, 6 + SETTINGS.settle_offsets)]),
                                    fill=answer)  # (Spark reads on: the verdicts below settle)
    ck.begin_batch()
    ck.settle()
    return ck, asked, led, on_b


def test_what_spark_skipped_below_its_first_read_of_a_recreated_topic_is_read_directly_and_checked():
    ck, asked, led, on_b = resumed_above_the_start(lambda on_b, lo, hi: reads(on_b[lo:hi]))
    assert asked == [(RC, "c", "B", 0, 0, 3), (RU, "c", "B", 0, 0, 3)]  # once per reader, nothing more
    assert ck.filled_reads == {RC: 3, RU: 3} and ck.fill_left_out == {}
    assert "below_first_read" not in ck.expired_by_reason
    assert counts(ck) == {("lost_write", "read_committed"): 4, ("lost_write", "read_uncommitted"): 4}  # A's, vanished
    assert ck.acked.undecided() == 0
    # the audit, which reads B from its start, agrees
    tail = [(o, ("x", 9, o), 0) for o in range(6, 6 + SETTINGS.settle_offsets)]
    final = {iso: {("B", 0): [(o, ident, 0) for o, ident in on_b] + tail} for iso in (RC, RU)}
    res = audit(led.entries, final, SETTINGS.settle_offsets, watched=["c"], topic_ids_now={"c": "B"})
    assert {(i.value, s.value): n for (i, s), n in res.nonzero().items()} == counts(ck)
    assert dict(res.expired) == ck.expired_by_reason
    # and a record missing below the first read is a loss, as anywhere else (once read again, as any gap)
    gone = [(o, ident) for o, ident in on_b if o != 1]
    ck, _asked, _led, _on_b = resumed_above_the_start(lambda on_b, lo, hi: reads(gone[lo:hi - 1]))
    assert ck.filled_reads == {RC: 2, RU: 2}
    answer_refetches(ck, lambda _iso, _p: reads(gone))
    assert counts(ck) == {("lost_write", "read_committed"): 5, ("lost_write", "read_uncommitted"): 5}


@pytest.mark.parametrize("answer", ["none", "old_log", "straggler"])
def test_a_direct_read_below_the_first_read_is_applied_only_after_its_last_record_of_another_id(answer):
    """None: not read whole (a broker away), or the name moved on: nothing applied. The old log
    served under the name (A's records at 0..2): nothing applied. A straggler of A at the new log's
    head, B's records after it: those are applied. What is not applied expires unread below the
    first read, as it did before reads were filled in."""
    _led, written = vanishing_story()
    answers = {"none": lambda on_b, lo, hi: None,
               "old_log": lambda on_b, lo, hi: reads(written[lo:hi]),
               "straggler": lambda on_b, lo, hi: reads(written[:1] + on_b[1:hi])}
    ck, asked, _led, _on_b = resumed_above_the_start(answers[answer])
    assert len(asked) == 2
    left_out, applied = {"none": (0, 0), "old_log": (3, 0), "straggler": (1, 2)}[answer]
    assert ck.fill_left_out == ({RC: left_out, RU: left_out} if left_out else {})
    assert ck.filled_reads == ({RC: applied, RU: applied} if applied else {})
    assert ck.expired_by_reason.get("below_first_read") == 2 * (3 - applied)  # per reader
    assert counts(ck) == {("lost_write", "read_committed"): 4, ("lost_write", "read_uncommitted"): 4}
    assert ck.acked.undecided() == 0


def test_the_first_id_a_checker_knows_of_a_name_is_never_filled_below_its_first_read():
    """A reader started at the log's end (startingOffsets latest), or a checker started late: where
    it was told to start is where it starts."""
    led, written = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.note_topic("c", "A")
    ck.apply_ledger(led.entries)
    asked = []
    for iso in (RC, RU):
        assert ck.apply_named_reads(iso, "c", 0, reads(written[3:]), fill=lambda *a: asked.append(a))
    assert asked == []


def test_a_batch_planned_before_a_recreation_that_reads_the_new_log_at_the_old_positions_looks_the_name_up():
    """Found on the local cluster, Spark paused across a recreation: a batch planned on A before it,
    run after it, fetched the new log at A's positions (the new log already longer). Its ledger rows
    end before the new log's intents, so its records are beyond every intent folded and the stream
    stays on A; the prober had not seen B yet, so nothing said A was left. Applied to A: 56 false
    inconsistent_offset per reader. Records beyond the intents on the name's newest known ID make the
    checker look the name up itself: B, and they are left out (the new log is read there for B)."""
    led, written = vanishing_story()
    ck = Checker(SETTINGS, ["c"])
    ck.note_topic("c", "A")
    ck.apply_ledger(led.entries)
    assert ck.apply_named_reads(RU, "c", 0, reads(written))
    assert ck.apply_named_reads(RC, "c", 0, reads(written[:4]))  # read_committed lagged at 4
    ck.settle()
    looked = []

    def fresh_id(name):
        looked.append(name)
        return "B"

    new_log = [(4, (77, 1, 50)), (5, (77, 1, 51))]  # B's records at A's offsets: seqs beyond A's intents
    assert ck.apply_named_reads(RC, "c", 0, reads(new_log), fresh_id)
    assert looked == ["c"] and ck.current_ids["c"] == "B"
    assert ck.old_log_reads == {RC: 2}
    assert [v.invariant.value for v in ck.settle()] == []
    # records within the intents look nothing up
    ck2 = Checker(SETTINGS, ["c"])
    ck2.note_topic("c", "A")
    ck2.apply_ledger(led.entries)
    assert ck2.apply_named_reads(RC, "c", 0, reads(written), fresh_id)
    assert looked == ["c"]
