"""Commits acknowledged before a rewrite began passed the old log only, also above the writers'
highest acknowledgement there (:meth:`invariants.groups.GroupJudge.rewritten`, ``since_ms``).

The timeline of the wiped-partition test (a stop-30 preview failed on it: ``group_skip`` live 9,
audit 140): the old log holds acknowledged writes at 0..10 and, above the last of them, an aborted
transaction's records and its marker (11..13); member ``a`` consumed it and committed 14. The node
goes down (``a`` commits 14 again meanwhile), comes back empty, and the writers' queued records
fill a new log from 0; the first acknowledgement below the old end reaches a writer at 210 ms.
Member ``b``, newly assigned, starts at the committed 14 inside the new log (an epoch-less offset
is not validated), so the new records at 0..13 never reach the group — as Kafka specifies. Below
11 the writers' backward acks exempted them already; 11..13 only the commits acknowledged before
210 ms do. The audit judges the final log after the fact; live judges each commit as far as its
reader read, wherever the ledger's news of the rewrite falls."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.checker import Checker
from invariants.groups import GroupJudge, add_rewrite_mark, begins_rewrite, reused_by_rewrite
from invariants.ledger_format import Intent, OutcomeRun, Outcomes, WriteOutcome, WriteRange
from monitor.audit.book import LedgerBook
from tests.unit.invariants.test_groups_reused import rewritten_story
from tests.unit.invariants.tiny import TID, Story

OLD_REFERENCE = list(range(11))  # read_committed: the aborted records and the marker are not read
OLD = [(100, "a", "assigned", {"p": [0], "c": {"0": -1}}),
       (110, "a", "consumed", {"r": {"0": [[0, 11]]}}),
       (120, "a", "intent", {"o": {"0": 14}}), (130, "a", "ack", {"r": "ok"}),
       (150, "a", "intent", {"o": {"0": 14}}), (160, "a", "ack", {"r": "ok"})]  # (the node down)
SINCE = 210


def new(drop: int | None) -> list:
    """b takes over at 14 in the new log; ``drop``: a record it does not report (a real skip)."""
    runs = [[o, 1] for o in range(14, 30) if o != drop]
    return [(220, "a", "revoked", {"p": [0]}),
            (230, "b", "assigned", {"p": [0], "c": {"0": 14}, "oor": [], "uk": []}),
            (240, "b", "consumed", {"r": {"0": runs}}),
            (250, "b", "intent", {"o": {"0": 30}}), (260, "b", "ack", {"r": "ok"})]


def steps(drop: int | None, audit: bool, reader_at_wipe: int) -> list:
    """What the judge is fed: the audit every observation, then the final log (the new one); live
    the old log's observations, its reader's old-log reads up to ``reader_at_wipe``, then the new
    log's observations and reads (its reader carries on at its position: no re-read shows it the
    rewrite)."""
    obs = [("obs", x) for x in OLD + new(drop)]
    if audit:
        return obs + [("read", list(range(30)), 30), ("judge",)]
    old_reads = [o for o in OLD_REFERENCE if o < reader_at_wipe]
    return (obs[:len(OLD)] + [("read", old_reads, reader_at_wipe), ("judge",)] + obs[len(OLD):]
            + [("judge",), ("read", list(range(reader_at_wipe, 30)), 30), ("judge",)])


def skips(drop: int | None, audit: bool, mark_at: int | None, restart_at: int = -1, reader_at_wipe: int = 6,
          since: int = SINCE) -> list[int]:
    """The group_skip offsets found; the ledger's news of the rewrite (the writers' acks below the
    old end: [0, 11), beginning at ``since``) comes before step ``mark_at``."""
    j, found, at, exempt = GroupJudge(), [], 0, []
    for i, step in enumerate(steps(drop, audit, reader_at_wipe) + [("judge",)]):
        if i == mark_at:
            j.rewritten(0, 0, 11, since_ms=since)
        if i == restart_at:
            j = GroupJudge.from_doc(json.loads(json.dumps(j.to_doc())))
        if step[0] == "obs":
            ts, m, k, f = step[1]
            j.observe(at, {"m": m, "k": k, "t": ts, **f})
            at += 1
        elif step[0] == "read":
            j.read_reference(0, step[1], reader_at=step[2])
        else:
            found += j.judge()
            exempt += j.take_exempted()
    # live holds a skip until it is read again; one in a range made exempt since is dropped then
    held = [f.offset for f in found if f.invariant == "group_skip"]
    return sorted(o for o in held if not any(lo <= o < hi for _p, lo, hi in exempt))


def test_without_the_rewrites_start_the_audit_counts_the_new_records_the_old_commit_passed():
    # the writers' highest acknowledgement exempts [0, 11) only: above it the old commit (14)
    # passes the new log's 11..13, which nobody consumed
    j = GroupJudge()
    j.rewritten(0, 0, 11)
    for at, (ts, m, k, f) in enumerate(OLD + new(None)):
        j.observe(at, {"m": m, "k": k, "t": ts, **f})
    j.read_reference(0, range(30), reader_at=30)
    assert sorted(f.offset for f in j.judge() if f.invariant == "group_skip") == [11, 12, 13]


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.integers(0, 20), st.integers(-1, 20), st.sampled_from([None, 20]), st.integers(0, 11))
def test_commits_acknowledged_before_the_rewrite_began_exempt_what_they_passed(audit, mark_at, restart_at, drop,
                                                                                reader_at_wipe):
    n = len(steps(drop, audit, reader_at_wipe))
    # live learns the rewrite before it reads the new log's records (the writers' acknowledgements
    # come first: the new log has to grow past the old commit first)
    mark_at = min(mark_at, n - (2 if audit else 3))
    assert skips(drop, audit, mark_at, restart_at, reader_at_wipe) == ([] if drop is None else [20])


def test_a_commit_acknowledged_after_the_rewrite_began_is_judged():
    # the same history with the writers seeing the rewrite begin before the old commits (a clock
    # far behind): the old log's commits count as new-log ones, 11..13 are judged, as without it
    assert skips(None, audit=True, mark_at=0, since=125) == [11, 12, 13]  # the second commit (14) acked at 160
    assert skips(None, audit=True, mark_at=0, since=135) == []  # the first one (14) acked at 130


def test_a_rewrite_learnt_after_the_commits_exempts_as_much_as_one_learnt_before():
    before, after = GroupJudge(), GroupJudge()
    before.rewritten(0, 0, 11, since_ms=SINCE)
    for at, (ts, m, k, f) in enumerate(OLD + new(None)):
        for j in (before, after):
            j.observe(at, {"m": m, "k": k, "t": ts, **f})
    after.rewritten(0, 0, 11, since_ms=SINCE)
    assert before.reused[0].to_runs() == after.reused[0].to_runs() == [[0, 14]]
    assert after.take_exempted() == [(0, 0, 14)]


def test_a_writers_first_acknowledgement_going_back_begins_a_rewrite_once():
    top, rewriting = {}, set()
    seen = []
    for first, last in [(0, 9), (10, 10), (3, 5), (6, 8), (9, 14), (2, 2), (3, 3)]:
        seen.append(begins_rewrite(rewriting, "k", reused_by_rewrite(top, "k", first, last), last))
    # (9..14 reaches past the old end, 10: the rewrite over; 2 begins another)
    assert seen == [False, False, True, False, False, True, False]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=12), st.randoms())
def test_the_marks_kept_are_the_same_in_any_order_and_exempt_what_all_of_them_do(marks, rnd):
    kept = []
    for since, lo in marks:
        add_rewrite_mark(kept, since, lo)
    shuffled = list(marks)
    rnd.shuffle(shuffled)
    again = []
    for since, lo in shuffled:
        add_rewrite_mark(again, since, lo)
    assert sorted(kept) == sorted(again)
    for ts in range(52):  # a commit acknowledged at ts is exempt from the lowest offset of the marks after it
        lows = [lo for since, lo in marks if ts < since]
        assert min(lows, default=None) == min([lo for since, lo in kept if ts < since], default=None)


def split_story() -> Story:
    """One writer: the old log at 0..10, then a ledger run of two intents acknowledged at 6..15 (it
    crosses the old end: the checker takes it in two pieces, the audit whole), then a second rewrite
    (an acknowledgement at 3)."""
    s = Story()
    for seq in range(11):
        s.acked(seq, seq, done_us=1_000 * (seq + 1))
    s.entry(Intent(TID, (WriteRange(0, 11, 5),)))
    s.entry(Intent(TID, (WriteRange(0, 16, 5),)))
    s.entry(Outcomes(TID, (OutcomeRun(0, 11, 10, WriteOutcome.ACKED, 6, 1, 200_000),)))
    return s.acked(21, 3, done_us=500_000)


def test_a_run_split_into_pieces_marks_what_the_whole_run_does():
    story = split_story()
    book = LedgerBook.of(story.entries)
    ck = Checker()
    ck.note_topic("canary", TID)
    ck.apply_ledger(story.entries)
    # (the second, later and lower, covers the first; without the split's fix the checker saw the
    # first rewrite end inside the run and the audit did not, and only one of them marked the second)
    assert book.rewrite_marks == ck.rewrite_marks == {(TID, 0): [(500, 3)]}
    assert book.rewriting == ck.rewriting


def test_several_rewrites_and_partitions_exempt_each_their_own():
    j = GroupJudge()
    j.rewritten(0, 5, 8, since_ms=100)
    j.rewritten(1, 0, 3, since_ms=300)
    for at, (ts, m, k, f) in enumerate([(50, "a", "intent", {"o": {"0": 12, "1": 12}}), (60, "a", "ack", {"r": "ok"}),
                                        (200, "a", "intent", {"o": {"0": 20, "1": 20}}),
                                        (210, "a", "ack", {"r": "ok"})]):
        j.observe(at, {"m": m, "k": k, "t": ts, **f})
    # p0: the first commit only (acknowledged before 100 ms); p1: both (before 300 ms)
    assert sorted(j.take_exempted()) == [(0, 5, 12), (1, 0, 20)] and j.take_exempted() == []
    assert j.reused[0].to_runs() == [[5, 7]] and j.reused[1].to_runs() == [[0, 20]]


def test_the_audit_and_the_checker_take_the_same_rewrite_start_from_the_ledger():
    story = rewritten_story(back_at=0, timed=True)  # the log back at 0, the first ack below the old end at 210 ms
    book = LedgerBook()
    for e in story.entries:
        book.apply(e)
    assert book.rewrite_marks == {(TID, 0): [(210, 0)]}
    ck = Checker()
    ck.note_topic("canary", TID)
    ck.apply_ledger(story.entries)
    assert ck.rewrite_marks == book.rewrite_marks
    ck = Checker.from_doc(json.loads(json.dumps(ck.to_doc())), ck.settings)  # a restart keeps it, and where
    assert ck.rewrite_marks == book.rewrite_marks and ck.rewriting == book.rewriting  # each writer stands
    ck.group_source = "canary"
    ck.groups.observe(0, {"m": "a", "k": "assigned", "t": 1, "p": [0]})
    ck._group(TID)  # the judge takes on the topic: what the ledger showed comes with it
    assert ck.groups.rewrite_marks == {0: [(210, 0)]}
