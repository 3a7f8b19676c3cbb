"""The prober's bookkeeping, with fake consumers (the live behaviour is in the integration tests)."""

from __future__ import annotations

import threading

from invariants.catalog import Invariant
from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, TxnInfo, WriteOutcome, WriteRange, WriterRef, encode,
)
from invariants.model import RU
from monitor.config import parse
from monitor.watch.prober import PartitionEnds, Prober


class Msg:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def error(self):
        return None

    def value(self) -> bytes:
        return self._value


class FakeLedger:
    def __init__(self, entries: list[dict]) -> None:
        self.batches = [[Msg(encode(e)) for e in entries]]

    def consume(self, _n: int, _timeout: float) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []


def entry(n: int, body) -> LedgerEntry:
    return LedgerEntry(WriterRef("w", 7, 1), n, 1, body)


def run(p, first, count, outcome, offset):
    return OutcomeRun(p, first, count, WriteOutcome(outcome), offset, 1, 2, None if outcome == "acked" else "timeout")


def test_acked_offsets_from_the_ledger_extend_what_is_available():
    prober = Prober(parse({}), lambda _v: None, threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 2
    prober.ledger = FakeLedger([
        entry(0, Intent("T", (WriteRange(0, 0, 50), WriteRange(1, 0, 2)))),
        entry(1, Outcomes("T", (run(0, 0, 50, "acked", 100), run(1, 0, 2, "indeterminate", -1)))),
        entry(2, Intent("T", (WriteRange(1, 2, 1),), TxnInfo(1, 1, False))),
        entry(3, Outcomes("T", (run(1, 2, 1, "acked", 9),))),
        entry(4, Outcomes("OTHER", (run(0, 0, 5, "acked", 999),))),
    ])
    prober._read_ledger()
    assert prober.view.ends[0].acked_end == 150  # a run of 50 acked from offset 100
    assert prober.view.ends[1].acked_end == 10  # a transaction's write at 9


def stuck_prober(**primed) -> Prober:
    """One partition whose read_uncommitted reader sits at 10 while records are acked up to 20."""
    prober = Prober(parse({"watch": {"stall_threshold_s": 5}}), lambda _v: None, threading.Event())
    if primed:
        prober.prime(primed["open_episodes"], now=primed["now"])
    prober.view.topic_id, prober.view.partitions = "T", 1
    prober.view.ends[0] = PartitionEnds(high_watermark=10, lso=10, acked_end=20)
    prober.readers = {RU: object()}
    prober._position = lambda iso, p, consumer: 10
    return prober


def test_a_stall_is_counted_once_when_records_wait_and_the_position_does_not_move():
    prober = stuck_prober()
    found = [v for now in (0, 3, 6, 9) for v in prober._judge(now)]
    assert [(v.invariant, v.isolation, v.partition) for v in found] == [(Invariant.STALLED_POLL, RU, 0)]
    prober._position = lambda iso, p, consumer: 20  # it progressed: the episode ends
    assert prober._judge(12) == [] and prober.view.open_stalls[(Invariant.STALLED_POLL, RU)] == 0


def test_an_episode_open_before_a_restart_is_not_counted_again():
    before = stuck_prober()
    assert len([v for now in (0, 3, 6, 9) for v in before._judge(now)]) == 1
    saved = before.snapshot().open_episodes

    after = stuck_prober(open_episodes=saved, now=100)  # the restarted monitor
    assert [v for now in (100, 103, 110, 120) for v in after._judge(now)] == []  # the same episode
    after._position = lambda iso, p, consumer: 20
    after._judge(121)  # it ended
    after._position = lambda iso, p, consumer: 20
    after.view.ends[0] = PartitionEnds(high_watermark=30, lso=30, acked_end=30)
    assert len([v for now in (130, 133, 136, 139) for v in after._judge(now)]) == 1  # a new one counts
