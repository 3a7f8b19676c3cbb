"""A from-scratch catch-up of a rewritten log counts the group_skip the audit counts (invariants only,
plus the audit's own LedgerBook, which is pure Python).

The fix (Checker._intent_unread): a skip's wait for the ledger starts once the ledger has folded the
skipped record's own intent. Without it: the split catch-up below counted 2 (offsets 3 and 7).

History (one in-order idempotent writer W; canary partition 0 wiped; partition 1 only advances
the ledger's clock):
  old log p0: W's seqs 0..8 acked at offsets 0,1,2,4,5,6,8,9,10 (3 and 7: transaction markers,
              read_committed returns nothing there); ledger entries at 1..10 s.
  member a consumed the old log's records and committed 11 (ack at 11 s by its clock).
  filler:     W acks on p1 every 20 s (20..180 s): ledger entries only.
  at 200 s:   node back without p0's data; W's next seqs 9..28 land at offsets 0..19 (its acks go
              backwards: the ledger shows [0, 11) reused, the rewrite beginning at 200 s).
  member b:   assigned p0, committed 11 read (no reset), consumed 11..19, committed 20.
The final log of p0: W's seqs 9..28 at 0..19. Its records at 3 and 7 were never consumed by the
group, but the old log's commit of 11 passed the old log there (markers): not a skip (the audit
exempts [0, 11) from the ledger's backward acks).

The catch-up: batches cut short; the observation log and the head of the ledger come first,
read_committed reads the (short) new log of p0 in batch 1 (records written at 200 s+ while the
ledger's clock is at ~10 s); the ledger's backward acks come in batch 3. The commit of 11 judges
the new records at 3 and 7 against the old consumption (none there): two skips, held for a re-read
and then for the ledger (Checker._ledger_behind) — whose wait ends 30 s of LEDGER clock after the
skip was first asked (LEDGER_WAIT_MAX_US), not after the ledger reaches the record's write. Batch 2
advances the ledger clock by 170 s: both skips counted; batch 3's exemption (take_exempted -> drop)
comes too late.
"""
from __future__ import annotations

from collections import Counter

import pytest




from invariants.checker import Checker
from invariants.groups import GroupJudge
from invariants.ledger_entries import Intent, LedgerEntry, OutcomeRun, Outcomes, Start, Stop, WriteRange, WriterRef
from invariants.ledger_format import WriteOutcome
from invariants.model import RC, RU, Read, Settings
from monitor.audit.book import LedgerBook  # (the audit's ledger reading: pure)
from tests.unit.histories import answer_refetches

TID, WID, INC = "topic-1", 77, 1
W = WriterRef("w", WID, INC)
S = 1_000_000  # µs per s
OLD_OFFSETS = [0, 1, 2, 4, 5, 6, 8, 9, 10]


def ledger(ledger_goes_on_at_s=(20, 40, 60, 80, 100, 120, 140, 160, 180, 220, 240, 260, 280),
           new_outcomes_after_us: int = 1) -> list[LedgerEntry]:
    """The history above, entries in the writer's clock order. ``ledger_goes_on_at_s``: W's acks on
    p1, which only move the ledger's clock; ``new_outcomes_after_us``: how long after its intent
    each write of the new log of p0 gets its outcome."""
    timed: list[tuple[int, object]] = [(S // 2, Start("canary", TID, 2))]

    def ack(p, seq, off, intent_us, outcome_us):
        timed.append((intent_us, Intent(TID, (WriteRange(p, seq, 1),))))
        timed.append((outcome_us, Outcomes(TID, (OutcomeRun(p, seq, 1, WriteOutcome.ACKED, off, intent_us,
                                                            outcome_us),))))

    for seq, off in enumerate(OLD_OFFSETS):  # the old log of p0
        ack(0, seq, off, (1 + seq) * S, (1 + seq) * S + 1)
    for i, t in enumerate(ledger_goes_on_at_s):  # p1 (live, the ledger goes on after the rewrite too)
        ack(1, i, i, round(t * S), round(t * S) + 1)
    for i in range(20):  # the new log of p0 from 0: W's seqs 9.. (acks going backwards)
        intent_us = 200 * S + i * 1000
        ack(0, 9 + i, i, intent_us, intent_us + new_outcomes_after_us)
    timed.append((300 * S, Stop()))  # the run stopped before the catch-ups (as the test's run.stop())
    timed.sort(key=lambda t: t[0])
    return [LedgerEntry(W, n, ts, body) for n, (ts, body) in enumerate(timed)]


OBS = [("a", "assigned", 1_000, {"p": [0], "c": {"0": -1}}),
       ("a", "consumed", 5_000, {"r": {"0": [[0, 3], [4, 3], [8, 3]]}}),
       ("a", "intent", 10_500, {"o": {"0": 11}}), ("a", "ack", 11_000, {"r": "ok"}),
       ("a", "revoked", 190_000, {"p": [0]}),
       ("b", "assigned", 205_000, {"p": [0], "c": {"0": 11}, "oor": [], "uk": []}),
       ("b", "consumed", 206_000, {"r": {"0": [[o, 1] for o in range(11, 20)]}}),
       ("b", "intent", 207_000, {"o": {"0": 20}}), ("b", "ack", 207_500, {"r": "ok"})]
def observations(obs) -> list:
    return [(at, {"v": 1, "m": m, "k": k, "t": t, **f}) for at, (m, k, t, f) in enumerate(obs)]


FINAL = {0: [Read(o, (WID, INC, 9 + o)) for o in range(20)],  # p0: the new log only
         1: [Read(i, (WID, INC, i)) for i in range(13)]}


def audit(entries, observed) -> int:
    """As monitor/group/audit.py: the ledger's reused ranges and marks first, every observation,
    then the final log, judged once."""
    book = LedgerBook()
    for e in entries:
        book.apply(e)
    j = GroupJudge()
    for (tid, p), offs in book.reused.items():
        for first, count in offs.to_runs():
            j.rewritten(p, first, first + count)
    for (tid, p), marks in book.rewrite_marks.items():
        for since, lo in marks:
            j.rewritten(p, lo, lo, since_ms=since)
    for at, obs in observed:
        j.observe(at, obs)
    j.read_reference(0, [r.offset for r in FINAL[0]], reader_at=20)
    return sum(f.invariant == "group_skip" for f in j.judge({0: 0}))


def catch_up(ledger_batches: list[list[LedgerEntry]], observed, reads_in: int = 0) -> int:
    """A new checker (a catch-up from the history's start): batch i applies ledger_batches[i], then
    (in batch ``reads_in``) the final log's reads and the whole observation log, then settles; the
    re-fetches it asks for are answered from the final log between batches."""
    ck = Checker(Settings(settle_offsets=4, horizon_offsets=1000))
    ck.note_topic("canary", TID)
    ck.group_source = "canary"
    found = []
    for i, chunk in enumerate(ledger_batches):
        ck.apply_ledger(chunk)
        if i == reads_in:
            for p, reads in FINAL.items():
                for iso in (RC, RU):
                    ck.apply_reads(iso, TID, p, reads)
            ck.apply_group_observations(observed, reader_at={0: 20})
        found += ck.settle()
        answer_refetches(ck, lambda _iso, p: FINAL.get(p, []), found=found)  # (what the watch does between batches)
    return Counter(v.invariant.value for v in found)["group_skip"]


@pytest.mark.parametrize("real", [False, True])
def test_a_catch_up_of_a_rewritten_log_counts_the_group_skips_the_audit_counts(real):
    """The reads of the new log come with the ledger's clock at its head; the acknowledgements that
    show [0, 11) reused come 170 s of ledger later. ``real``: b did not consume offset 15, a skip on
    the new log that every order must count."""
    obs = list(OBS)
    if real:
        obs[6] = ("b", "consumed", 206_000, {"r": {"0": [[o, 1] for o in range(11, 20) if o != 15]}})
    observed = observations(obs)
    es = ledger()
    head = [e for e in es if e.time_us <= 12 * S]
    middle = [e for e in es if 12 * S < e.time_us < 200 * S]
    tail = [e for e in es if e.time_us >= 200 * S]
    near = [e for e in middle if e.time_us <= 30 * S]
    expected = 1 if real else 0
    assert audit(es, observed) == expected
    assert catch_up([es], observed) == expected  # the whole ledger first (live order, near enough)
    assert catch_up([head, middle, tail], observed) == expected  # the ledger's clock far behind the reads
    assert catch_up([head, near, [e for e in es if e.time_us > 30 * S]], observed) == expected


@pytest.mark.parametrize("real", [False, True])
def test_a_skip_waits_from_when_its_intent_was_folded_and_as_long_as_the_writer_may_take(real):
    """The ledger's clock jumps from 180 s (the skip asked, the intent still unread) to 201 s (the
    intents folded) to 230.1 s, and the acknowledgements that show [0, 11) reused come at 230.3 s.
    Counted from the last ask before the intents were folded (180 s), the wait ran out at 210 s: 2
    false skips at 230.1 s (the CI run of 2026-11-29 counted 7 so, on the local cluster). Counted from
    when the intents were folded (200.02 s) but capped at 30 s (the writer's message timeout itself),
    it ran out at 230.02 s, before the outcomes: the cap is the message timeout plus the grace."""
    # b's commit comes after the rewrite began (by the writer's clock, 230.3 s): one before it would
    # have passed the old log only, and exempts what it passed
    obs = [(m, k, t + 30_000 if m == "b" else t, f) for m, k, t, f in OBS]
    if real:
        obs[6] = ("b", "consumed", 236_000, {"r": {"0": [[o, 1] for o in range(11, 20) if o != 15]}})
    observed = observations(obs)
    # as on the local cluster: W's writes queued to the wiped node timed out first, and an in-order
    # writer reports the next ones after them (30.3 s after their intents)
    es = ledger((20, 40, 60, 80, 100, 120, 140, 160, 180, 220, 230.1, 250, 270), new_outcomes_after_us=30_300_000)
    cuts = [12 * S, 199 * S, 201 * S, 230_200_000]
    chunks = [[e for e in es if (cuts[i - 1] if i else -1) < e.time_us <= c] for i, c in enumerate(cuts)]
    chunks.append([e for e in es if e.time_us > cuts[-1]])
    expected = 1 if real else 0
    assert audit(es, observed) == expected
    assert catch_up([es], observed) == expected
    assert catch_up(chunks, observed) == expected
