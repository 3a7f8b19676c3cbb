"""Offsets a rewrite reused (a node back without its data, an unclean election) are judged by no
commit: the writers' acknowledgements going backwards in the ledger show them, the same way to the
audit and to the checker (:func:`invariants.groups.reused_by_rewrite`,
:meth:`invariants.groups.GroupJudge.rewritten`). Found in a targeted run of the wiped-partition
test: 241 false ``group_skip`` by the audit, 9 live — a member newly assigned the partition started
at its epoch-less committed offset inside the new log (no KIP-320 validation, no reset), so the new
log's records below it never reached the group, and the old log's consumption covered only its
records, not its transaction markers."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.checker import Checker
from invariants.groups import GroupJudge, reused_by_rewrite
from invariants.model import RC, Read
from monitor.audit.book import LedgerBook
from monitor.group import observations
from monitor.watch.batch import apply_batch
from tests.unit.invariants.tiny import TID, Story
from tests.unit.test_eos_wiring import read_again
from tests.unit.test_group_wiring import rows

OLD_RECORDS = [0, 1, 2, 4, 5, 6, 8, 9, 10]  # transaction markers at 3 and 7; the last ack at 10
OLD = [("a", "assigned", {"p": [0], "c": {"0": -1}}),
       ("a", "consumed", {"r": {"0": [[0, 3], [4, 3], [8, 3]]}}),
       ("a", "intent", {"o": {"0": 11}}), ("a", "ack", {"r": "ok"})]


def new(drop: int | None = None) -> list:
    """b takes over at the committed 11, inside the new log (no reset); ``drop``: a record it does
    not report (a real skip)."""
    runs = [[o, 1] for o in range(11, 30) if o != drop]
    return [("a", "revoked", {"p": [0]}), ("b", "assigned", {"p": [0], "c": {"0": 11}, "oor": [], "uk": [0]}),
            ("b", "consumed", {"r": {"0": runs}}), ("b", "intent", {"o": {"0": 30}}), ("b", "ack", {"r": "ok"})]


def steps(drop: int | None, audit: bool) -> list:
    """What the judge is fed, in order: the audit all observations then the final log; the
    checker the old log as far as Spark read it, its reader's rewrite, then the new log."""
    obs = [("obs", x) for x in OLD + new(drop)]
    if audit:
        return obs + [("read", list(range(30)), 30), ("judge",)]
    return (obs[:len(OLD)] + [("read", [o for o in OLD_RECORDS if o < 6], 6), ("judge",), ("rewrite_seen",)]
            + obs[len(OLD):] + [("read", list(range(4, 30)), 30), ("judge",)])


def skips(drop: int | None, audit: bool, window_at: int | None, restart_at: int = -1) -> list[int]:
    j, found, at = GroupJudge(), [], 0
    for i, step in enumerate(steps(drop, audit) + [("judge",)]):
        if i == window_at:
            j.rewritten(0, 0, 11)
        if i == restart_at:
            j = GroupJudge.from_doc(json.loads(json.dumps(j.to_doc())))
        if step[0] == "obs":
            m, k, f = step[1]
            j.observe(at, {"m": m, "k": k, "t": at, **f})
            at += 1
        elif step[0] == "read":
            j.read_reference(0, step[1], reader_at=step[2])
        elif step[0] == "rewrite_seen":
            j.log_rewritten(0, 0, consumed_again=False)  # (live: the re-fetch found other records)
        else:
            found += j.judge()
    return sorted(f.offset for f in found if f.invariant == "group_skip")


def test_without_the_reused_range_both_sides_count_the_old_logs_markers_and_differ():
    assert skips(None, audit=True, window_at=None) == [3, 7]
    assert skips(None, audit=False, window_at=None) == [7]


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.integers(0, 20), st.integers(-1, 20), st.sampled_from([None, 20]))
def test_a_reused_range_is_judged_by_no_commit_whenever_it_is_learnt(audit, window_at, restart_at, drop):
    window_at = min(window_at, len(steps(drop, audit)) - 1)  # before the commit on the new log is judged
    assert skips(drop, audit, window_at, restart_at) == ([] if drop is None else [20])  # a real skip above it stays


def test_a_reused_range_is_kept_only_above_what_is_judged_and_not_past_a_recreation():
    j = GroupJudge()
    j.rewritten(0, 0, 11)
    j.read_reference(0, range(30), reader_at=30)
    for at, (m, k, f) in enumerate(OLD[:1] + [("a", "consumed", {"r": {"0": [[o, 1] for o in range(11, 20)]}}),
                                              ("a", "intent", {"o": {"0": 20}}), ("a", "ack", {"r": "ok"})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert [f.offset for f in j.judge() if f.invariant == "group_skip"] == []
    assert j.judged_to[0] == 20 and not j.reused[0]  # all of it below what is judged: forgotten
    j.rewritten(0, 3, 11)  # the old log's end said again by a later acknowledgement below it
    assert not j.reused[0]
    j.rewritten(0, 15, 25)
    assert j.reused[0].to_runs() == [[20, 5]]  # only above what is judged
    j.recreated()  # another topic's offsets from here on
    assert j.reused == {}


def test_acks_going_backwards_name_the_reused_offsets():
    top: dict = {}
    assert reused_by_rewrite(top, "k", 0, 9) is None and reused_by_rewrite(top, "k", 10, 10) is None
    assert reused_by_rewrite(top, "k", 3, 5) == (3, 11)  # the old log reached 10
    assert reused_by_rewrite(top, "k", 6, 12) == (6, 11)  # still below the old end
    assert reused_by_rewrite(top, "k", 13, 14) is None and top == {"k": 14}
    assert reused_by_rewrite(top, "other", 0, 0) is None  # per writer incarnation and partition


def rewritten_story(back_at: int = 2, timed: bool = False) -> Story:
    """Seqs 0..10 acknowledged at 0..10, then 11..19 at ``back_at`` on (``timed``: the writer had
    the old acks at 0..10 ms, the new ones from 210 ms on; else all at once)."""
    s = Story()
    for seq in range(20):  # the log back at back_at: the same writer acknowledged at reused offsets
        new = seq >= 11
        s.acked(seq, seq - 11 + back_at if new else seq,
                done_us=(210_000 + 1_000 * (seq - 11) if new else 1_000 * seq) if timed else 2)
    return s


def test_the_audit_and_the_checker_find_the_same_reused_offsets_and_a_held_skip_there_is_dropped():
    story = rewritten_story()
    book = LedgerBook()
    for e in story.entries:
        book.apply(e)
    book.apply(story.entries[5])  # a ledger entry read twice is no acknowledgement going back
    # seqs 11.. acked at 2..10: each below the old end (10) says [its offset, 11); 10 itself does not
    assert {k: s.to_runs() for k, s in book.reused.items()} == {(TID, 0): [[2, 9]]}
    ck = Checker()
    ck.note_topic("canary", TID)
    ck.group_source = "canary"
    e = observations.encode
    ck.apply_reads(RC, TID, 0, [Read(o, ("x", o, 1)) for o in range(8)])
    apply_batch(ck, rows([e("a", "assigned", p=[0]), e("a", "consumed", r={"0": [[0, 4]]}),
                          e("a", "intent", o={"0": 6}), e("a", "ack", r="ok")]), lambda _n: TID,
                group_reader_at={0: 8})
    assert [(w.lo, w.hi) for w in ck.refetch_wanted()] == [(4, 6)]  # the skips at 4 and 5, held for a re-read
    ck.apply_ledger(story.entries)
    assert ck.rewrites == book.reused  # [2, 11), as the audit has it
    assert ck.groups.reused[0].to_runs() == [[6, 5]]  # the judge keeps what lies above what it judged (to 6)
    assert [v for v in read_again(ck) if v.invariant.value == "group_skip"] == []


def test_a_new_checker_takes_on_the_ranges_the_ledger_showed_before_the_group_topic_and_a_restart_keeps_them():
    ck = Checker()  # a new `vigil watch` or a rebuild: the ledger comes before any group observation
    ck.note_topic("canary", TID)
    ck.group_source = "canary"
    ck.apply_ledger(rewritten_story().entries)
    ck = Checker.from_doc(json.loads(json.dumps(ck.to_doc())), ck.settings)
    ck.group_source = "canary"
    apply_batch(ck, rows([observations.encode("a", "assigned", p=[0])]), lambda _n: TID, group_reader_at={0: 0})
    assert ck.groups.reused[0].to_runs() == [[2, 9]]


def test_a_writer_without_idempotence_going_back_shows_no_rewrite_to_the_group():
    from dataclasses import replace

    from invariants.ledger_format import WriterSettings

    story = rewritten_story()
    start = story.entries[0]
    plain = WriterSettings("w", "canary", "all", False, False, 30000)
    story.entries[0] = replace(start, body=replace(start.body, settings=plain))
    book = LedgerBook()
    for e in story.entries:
        book.apply(e)
    assert book.reused == {}  # a retried batch behind a later one is no rewrite
    ck = Checker()
    ck.note_topic("canary", TID)
    ck.group_source = "canary"
    apply_batch(ck, rows([observations.encode("a", "assigned", p=[0])]), lambda _n: TID, group_reader_at={0: 0})
    ck.apply_ledger(story.entries)
    assert not ck.groups.reused and not ck.rewrites
