"""The prober's bookkeeping, with fake consumers (the live behaviour is in the integration tests)."""

from __future__ import annotations

import threading

from invariants.catalog import Invariant
from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, Start, TxnInfo, WriteOutcome, WriteRange, WriterRef, encode,
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


def test_the_prober_learns_in_flight_writes_from_the_ledger_for_producer_stalls():
    prober = Prober(parse({}), lambda _v: None, threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 2
    prober.ledger = FakeLedger([
        entry(0, Start("vigil-canary", "T", 2)),
        entry(1, Intent("T", (WriteRange(0, 0, 50), WriteRange(1, 0, 2)))),
        entry(2, Outcomes("T", (run(0, 0, 50, "acked", 100),))),
        entry(3, Intent("T", (WriteRange(1, 2, 1),), TxnInfo(1, 1, False))),
    ])
    prober._read_ledger()
    assert prober.fold.oldest_pending_us() == {("w", 1): 1}  # partition 1's writes wait for outcomes


def test_records_acknowledged_above_the_high_watermark_are_no_stall():
    """An acks=1 leader cut off from its followers acknowledges writes no reader may see: the high
    watermark stays put, and a reader that reached it is not stalled however long it waits."""
    prober = stuck_prober(high_watermark=10)
    assert [v for now in range(0, 60, 3) for v in prober._judge(now)] == []


class FakeAdmin:
    def __init__(self, ends: dict[str, dict[int, int]]) -> None:
        self.ends = ends

    def list_offsets(self, tps, isolation_level=None, request_timeout=None):
        from concurrent.futures import Future

        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        earliest = isinstance(next(iter(tps.values())), type(OffsetSpec.earliest()))
        attr = ("log_start" if earliest else
                "lso" if isolation_level == IsolationLevel.READ_COMMITTED else "high_watermark")
        out = {}
        for tp in tps:
            fut: Future = Future()
            value = self.ends[attr].get(tp.partition)
            if value is None:
                fut.set_exception(TimeoutError("the leader does not answer"))
            else:
                fut.set_result(type("Info", (), {"offset": value})())
            out[tp] = fut
        return out


def test_a_high_watermark_that_goes_backwards_is_evidence_of_a_rewrite_and_stale_ends_are_marked():
    prober = Prober(parse({}), lambda _v: None, threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 2
    prober.admin = FakeAdmin({"high_watermark": {0: 500, 1: 300}, "lso": {0: 500, 1: 300}, "log_start": {0: 0, 1: 0}})
    prober._list_ends()
    prober.admin = FakeAdmin({"high_watermark": {0: 420}, "lso": {0: 420}, "log_start": {0: 0}})  # 1 is away
    prober._list_ends()
    assert prober.take_rewinds() == [("T", 0, 420, 500)] and prober.take_rewinds() == []
    ends = prober.snapshot().ends
    assert (ends[0].high_watermark, ends[0].fresh) == (420, True)
    assert (ends[1].high_watermark, ends[1].fresh) == (300, False)  # the last known value, marked stale
    assert prober.snapshot().list_offsets_failures == 1


def stuck_prober(high_watermark: int = 20, **primed) -> Prober:
    """One partition whose read_uncommitted reader sits at 10 while the high watermark listed is 20."""
    prober = Prober(parse({"watch": {"stall_threshold_s": 5}}), lambda _v: None, threading.Event())
    if primed:
        prober.prime(primed["open_episodes"], now=primed["now"])
    prober.view.topic_id, prober.view.partitions = "T", 1
    prober.view.ends[0] = PartitionEnds(high_watermark=high_watermark, lso=10)
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
    after.view.ends[0] = PartitionEnds(high_watermark=30, lso=30)
    assert len([v for now in (130, 133, 136, 139) for v in after._judge(now)]) == 1  # a new one counts
