"""Verdicts that wait for a re-read (invariants.confirm) when the re-read does not come before the
view's horizon forgets their offsets: judged on what the view holds then, never dropped."""

from __future__ import annotations

from invariants.checker import Checker
from invariants.model import RC, RU, Read, Settings
from tests.unit.invariants.tiny import FILLER, TID, Story, answer_refetches, rec

SETTINGS = Settings(settle_offsets=4, horizon_offsets=100)
ALL = {("lost_write", "read_committed"): 1, ("lost_write", "read_uncommitted"): 1,
       ("duplicate", "read_committed"): 1, ("duplicate", "read_uncommitted"): 1,
       ("reorder", "read_committed"): 1, ("reorder", "read_uncommitted"): 1}


def _log() -> list[Read]:
    """Seq 0 acknowledged at 10 (another record there), seq 1 at 20 and 22, seq 5 at 30 before seq 4 at 31."""
    at = {o: rec(o, wid=FILLER) for o in range(300)}
    at.update({20: rec(1), 22: rec(1), 30: rec(5), 31: rec(4)})
    return [Read(o, at[o]) for o in range(300)]


def _found(ck: Checker) -> dict:
    return {(i.value, s.value): n for (i, s, _d), n in ck.counts.items() if n}


def test_a_batch_longer_than_the_horizon_counts_what_its_first_part_holds():
    """A catch-up batch (a restart, a query restarted with backoff) spans more than the horizon:
    the verdicts in its first part are judged before the view forgets them."""
    ck = Checker(SETTINGS)
    ck.apply_ledger(Story().acked(0, 10).entries)
    for iso in (RC, RU):
        ck.apply_reads(iso, TID, 0, _log())
    ck.settle()
    answer_refetches(ck, lambda iso, p: _log())
    assert _found(ck) == ALL and ck.expired_unread == 0


def test_re_reads_that_never_come_do_not_drop_verdicts():
    """The re-fetcher fails (a refused consumer, a broker away) while the readers read on past the
    horizon: the verdicts are judged on the view before it forgets them, as counted before re-reads."""
    ck = Checker(SETTINGS)
    ck.apply_ledger(Story().acked(0, 10).entries)
    log = _log()
    for lo, hi in ((0, 50), (50, 300)):
        for iso in (RC, RU):
            ck.apply_reads(iso, TID, 0, log[lo:hi])
        ck.settle()
        if hi == 50:
            assert _found(ck) == {} and ck.refetch_wanted()  # waiting for the re-read
    assert _found(ck) == ALL and ck.expired_unread == 0 and not ck.refetch_wanted()


def test_a_late_acknowledgement_waiting_for_its_re_read_still_expires_at_the_horizon():
    """Acknowledged after the reader had passed its offset (another record there): what the reader
    remembers may predate a rewrite, so without a re-read it is expired, not lost."""
    ck = Checker(SETTINGS)
    log = _log()
    for iso in (RC, RU):
        ck.apply_reads(iso, TID, 0, log[:50])
    ck.settle()
    ck.apply_ledger(Story().acked(0, 10).entries)
    ck.settle()
    for iso in (RC, RU):
        ck.apply_reads(iso, TID, 0, log[50:])
    ck.settle()
    assert ("lost_write", "read_committed") not in _found(ck) and ck.acked.expired["horizon"] == 2
