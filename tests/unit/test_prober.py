"""The prober's bookkeeping, with fake consumers (the live behaviour is in the integration tests)."""

from __future__ import annotations

import threading
import time

from invariants.catalog import Invariant
from invariants.ledger_format import (
    Init, Intent, LedgerEntry, OutcomeRun, Outcomes, Start, TxnInfo, WriteOutcome, WriteRange, WriterRef,
    WriterSettings, encode,
)
from invariants.model import NONE, RU
from monitor.config import parse
from monitor.watch.prober import PartitionEnds, Prober


class Msg:
    def __init__(self, value: bytes, append_ms: int = 0, partition: int = 0, offset: int = 0) -> None:
        self._value = value
        self._append_ms = append_ms
        self._partition = partition
        self._offset = offset

    def error(self):
        return None

    def value(self) -> bytes:
        return self._value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (2, self._append_ms) if self._append_ms else (0, -1)


class Eof(Msg):
    def __init__(self, partition: int = 0, offset: int = 0) -> None:
        super().__init__(b"", partition=partition, offset=offset)

    def error(self):
        from confluent_kafka import KafkaError

        return KafkaError(KafkaError._PARTITION_EOF)


class FakeLedger:
    def __init__(self, entries: list[dict], append_ms: list[int] | None = None, eof: bool = False) -> None:
        stamps = append_ms or [0] * len(entries)
        self.batches = [[Msg(encode(e), t, offset=i) for i, (e, t) in enumerate(zip(entries, stamps))]
                        + ([Eof(offset=len(entries))] if eof else [])]

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


def stall_prober(entries, append_ms, eof=True):
    prober = Prober(parse({"watch": {"producer_stall_s": 10}}), lambda _v: None, threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 1
    prober.ledger = FakeLedger(entries, append_ms, eof)
    prober.ledger_at_end = {0: False}
    prober.readers = {}
    prober._read_ledger()
    return prober


def producer_stalls(prober, monitor_now):
    return [v for v in prober._judge(monitor_now) if v.invariant is Invariant.PRODUCER_STALLED]


def test_a_stall_is_measured_on_the_brokers_clock_not_the_writers_or_the_monitors():
    """The writer's clock is an hour behind (its entries say ts_us=1 µs): no effect. The monitor's
    clock runs 100 s ahead of the brokers': it is corrected by what the ledger's append times show."""
    t0 = 1_700_000_000_000  # the brokers' time of the intent, in ms
    prober = stall_prober([entry(0, Start("vigil-canary", "T", 1, WriterSettings("w", message_timeout_ms=5000))),
                           entry(1, Intent("T", (WriteRange(0, 0, 1),)))], [t0, t0])
    skewed = 100.0  # the monitor read the entries "100 s after" they were appended, by its own clock
    prober.clock.offsets.clear()
    prober.clock.observe(t0 * 1000, int((t0 / 1000 + skewed) * 1e6))
    assert producer_stalls(prober, t0 / 1000 + skewed + 9) == []  # 9 s on the brokers' clock
    assert producer_stalls(prober, t0 / 1000 + skewed + 10.5) + producer_stalls(prober, t0 / 1000 + skewed + 11) \
        != []
    assert prober.snapshot().clock_skew["w"] < -1e6  # the writer's clock: far behind the brokers'


def test_a_lagging_prober_never_sees_a_stall_it_has_not_read():
    t0 = 1_700_000_000_000
    prober = stall_prober([entry(0, Start("vigil-canary", "T", 1, WriterSettings("w", message_timeout_ms=5000))),
                           entry(1, Intent("T", (WriteRange(0, 0, 1),)))], [t0, t0], eof=False)
    assert producer_stalls(prober, t0 / 1000 + 3600) == []  # the outcome may be in what it has not read yet


def test_the_producer_stall_threshold_sits_above_the_writers_message_timeout():
    t0 = 1_700_000_000_000
    prober = stall_prober([entry(0, Start("vigil-canary", "T", 1, WriterSettings("w", message_timeout_ms=30000))),
                           entry(1, Intent("T", (WriteRange(0, 0, 1),)))], [t0, t0])
    prober.clock.offsets.clear()
    prober.clock.observe(t0 * 1000, t0 * 1000)
    assert producer_stalls(prober, t0 / 1000 + 34) == []  # configured 10 s, but the client may take 30 s
    assert producer_stalls(prober, t0 / 1000 + 34.5) == []
    assert len(producer_stalls(prober, t0 / 1000 + 35.5) + producer_stalls(prober, t0 / 1000 + 36)) == 1


class Partition:
    def __init__(self, leader: int, isrs: int = 2) -> None:
        self.leader = leader
        self.isrs = list(range(isrs))


class LedgerMetadata:
    """What list_topics answers for the ledger topic: its partitions' (leader, in-sync replicas),
    or no answer."""

    def __init__(self, parts: list[tuple[int, int]] | None) -> None:
        self.parts = parts

    def list_topics(self, topic: str, timeout: float):
        from types import SimpleNamespace

        from confluent_kafka import KafkaError, KafkaException

        if self.parts is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        parts = {i: Partition(leader, isrs) for i, (leader, isrs) in enumerate(self.parts)}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=parts)})


UP, AWAY = LedgerMetadata([(1, 2), (2, 2), (0, 2)]), LedgerMetadata(None)
T0 = 1_700_000_000_000  # the brokers' time of the intent, in ms


def ledger_prober(placement: str):
    """A writer with one write waiting for its outcome since T0; threshold 10 s."""
    extra = {"kafka": {"bootstrap_servers": "127.0.0.1:1"}} if placement == "separate" else {}
    prober = Prober(parse({"watch": {"producer_stall_s": 10}, "ledger": extra}), lambda _v: None, threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 1
    prober.ledger = FakeLedger([entry(0, Start("vigil-canary", "T", 1, WriterSettings("w", message_timeout_ms=1000))),
                                entry(1, Intent("T", (WriteRange(0, 0, 1),)))], [T0, T0], eof=True)
    prober.ledger_at_end = {0: False}
    prober.readers = {}
    prober._read_ledger()
    prober.clock.offsets.clear()
    prober.clock.observe(T0 * 1000, T0 * 1000)
    assert prober.snapshot().ledger_placement == placement
    return prober


def look(prober, metadata, at_s: float) -> None:
    fold = prober.ledger
    prober.ledger = metadata
    prober._check_ledger(T0 / 1000 + at_s)
    prober.ledger = fold


def stalls_at(prober, *at_s: float) -> int:
    return sum(len(producer_stalls(prober, T0 / 1000 + t)) for t in at_s)


def test_the_ledger_is_away_without_an_answer_a_leader_or_its_min_isr():
    prober = ledger_prober("separate")
    look(prober, UP, 1)
    assert prober.snapshot().ledger_reachable
    for metadata in (AWAY, LedgerMetadata([(1, 2), (-1, 0), (0, 2)]), LedgerMetadata([(1, 2), (2, 1), (0, 2)])):
        look(prober, UP, 2)
        look(prober, metadata, 3)
        assert not prober.snapshot().ledger_reachable
    look(prober, UP, 20)
    assert prober.snapshot().ledger_reachable and prober.snapshot().ledger_back_us == (T0 / 1000 + 20) * 1e6


class Reader(LedgerMetadata):
    """A ledger reader that never finds a broker (or, ``parts`` given, answers), and what was done to it."""

    def __init__(self, parts=None) -> None:
        super().__init__(parts)
        self.assigned: list | None = None
        self.closing = threading.Event()

    def assign(self, tps) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def close(self) -> None:
        self.closing.set()

    @property
    def closed(self) -> bool:
        return self.closing.wait(5)  # (closed in a thread of its own)


def test_a_ledger_reader_that_finds_no_broker_for_a_while_is_made_anew_where_the_old_one_read():
    """librdkafka may be left knowing no broker at all after a broker answered with none (issue
    5301; a one-node ledger's restart left the prober's reader so for over a minute): a reader
    whose metadata requests found no broker for LEDGER_READER_RENEW_S is replaced by a new one that
    reads on where the old one stood — the next offset after what it read, the end where it saw
    the end, the start it was given where it read nothing — at most once per that interval; an
    answer (even one of a ledger without leaders) resets the count."""
    from monitor.watch.prober import LEDGER_READER_RENEW_S as RENEW

    prober = ledger_prober("separate")  # read entries 0 and 1 of partition 0
    prober.ledger = FakeLedger([])
    # then partition 0's end, past a control record at 2, and a record at 40 of partition 1 (not an entry)
    prober.ledger.batches = [[Eof(0, offset=3), Msg(b"not an entry", partition=1, offset=40)]]
    prober.ledger_next.update({1: 0, 2: -1})  # as assigned; 2: OFFSET_END (no broker told its end), nothing read
    prober._read_ledger()
    topic = prober.cfg.ledger.topic
    made: list[Reader] = []
    prober._ledger_reader = lambda: made.append(Reader()) or made[-1]
    first = prober.ledger = Reader()
    said: list[str] = []
    prober.say = said.append
    t0 = T0 / 1000
    prober._check_ledger(t0)
    prober._check_ledger(t0 + RENEW - 0.1)
    assert made == [] and not first.closing.is_set()
    prober._check_ledger(t0 + RENEW)
    assert len(made) == 1 and first.closed and prober.ledger is made[0]
    assert made[0].assigned == [(topic, 0, 3), (topic, 1, 41), (topic, 2, -1)]
    assert "made anew" in said[-1] and "15 s" in said[-1]
    prober._check_ledger(t0 + 2 * RENEW - 0.1)  # not again within the interval
    assert len(made) == 1
    prober._check_ledger(t0 + 2 * RENEW)
    assert len(made) == 2 and made[0].closed
    assert not prober.snapshot().ledger_reachable
    # an answer resets the count: no renewal until the interval has passed again from the next failure
    prober.ledger = Reader([(1, 2), (-1, 0), (0, 2)])  # answers, one partition without a leader
    prober._check_ledger(t0 + 3 * RENEW)
    prober.ledger = Reader()
    for at in (3 * RENEW + 1, 4 * RENEW + 0.9):
        prober._check_ledger(t0 + at)
    assert len(made) == 2
    prober._check_ledger(t0 + 4 * RENEW + 1)
    assert len(made) == 3


def test_a_wait_for_a_ledger_of_its_own_that_is_away_is_the_ledgers_then_counts_from_its_return():
    """The ledger's own cluster does not answer: the writer's outcome (it may have been
    acknowledged at once) sits in its queue, so the wait is the ledger's — not judged while it is
    away, and counted from its return: a wait still there a threshold later is a stall."""
    prober = ledger_prober("separate")
    look(prober, AWAY, 5)
    assert stalls_at(prober, 12, 19) == 0  # away: not judged
    look(prober, UP, 20)
    assert stalls_at(prober, 25, 29.5) == 0  # measured from the return
    assert stalls_at(prober, 30.5, 31) == 1
    # on the canary's own cluster a ledger away is the canary's cluster away: judged as always
    shared = ledger_prober("shared")
    look(shared, AWAY, 5)
    assert stalls_at(shared, 12, 13) == 1


def test_a_wait_observed_before_the_ledger_stopped_is_not_counted_on_time_nobody_could_read():
    """The ledger stopped while entries were arriving (no end of partition seen since): the
    brokers' time stands at the newest append time read until it is back, whatever the placement,
    so a wait observed before cannot pass its threshold meanwhile — its outcome may sit in the
    writer's queue."""
    for placement in ("separate", "shared"):
        prober = ledger_prober(placement)
        prober.ledger_at_end = {0: False}
        assert stalls_at(prober, 1) == 0  # observed waiting
        look(prober, AWAY, 5)
        assert prober._broker_now(T0 / 1000 + 30) == T0 / 1000
        assert stalls_at(prober, 30, 60) == 0, placement


def test_a_stall_counted_before_the_ledger_went_away_stays_open_and_is_not_counted_again():
    prober = ledger_prober("separate")
    assert stalls_at(prober, 11, 12) == 1
    look(prober, AWAY, 13)
    assert stalls_at(prober, 14, 40) == 0
    assert prober.snapshot().open_stalls[(Invariant.PRODUCER_STALLED, NONE)] == 1
    look(prober, UP, 41)
    assert stalls_at(prober, 42, 60) == 0


def test_a_writer_stuck_initialising_its_producer_is_stalled():
    t0 = 1_700_000_000_000
    prober = stall_prober([entry(0, Start("vigil-canary", "T", 1, WriterSettings("w", message_timeout_ms=1000))),
                           entry(1, Init())], [t0, t0])
    prober.clock.offsets.clear()
    prober.clock.observe(t0 * 1000, t0 * 1000)
    assert len(producer_stalls(prober, t0 / 1000 + 11) + producer_stalls(prober, t0 / 1000 + 12)) == 1


def test_records_acknowledged_above_the_high_watermark_are_no_stall():
    """An acks=1 leader cut off from its followers acknowledges writes no reader may see: the high
    watermark stays put, and a reader that reached it is not stalled however long it waits."""
    prober = stuck_prober(high_watermark=10)
    assert [v for now in range(0, 60, 3) for v in prober._judge(now)] == []


def test_acks_all_acknowledgements_are_records_a_reader_may_read_even_when_the_leader_stops_answering():
    """The last listing may predate the writes that now wait (the leader froze right after it):
    an acks=all ack says the high watermark passed the write, an acks=1 ack does not."""
    for acks, stalls in (("all", 1), ("1", 0)):
        prober = stuck_prober(high_watermark=10)
        prober.ledger = FakeLedger([
            entry(0, Start("vigil-canary", "T", 1, WriterSettings(acks=acks, idempotence=acks == "all"))),
            entry(1, Intent("T", (WriteRange(0, 0, 5),))),
            entry(2, Outcomes("T", (run(0, 0, 5, "acked", 10),))),
            entry(3, Outcomes("U", (run(0, 5, 1, "acked", 90),))),  # another topic ID: not this log
        ])
        prober._read_ledger()
        assert prober.view.ends[0].acked_end == (15 if acks == "all" else -1)
        assert len([v for now in range(0, 30, 3) for v in prober._judge(now)]) == stalls


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
    prober.view.ends[0].acked_end = 510  # acks=all acknowledgements the ledger reported
    assert not prober.recheck_topic
    prober.admin = FakeAdmin({"high_watermark": {0: 420}, "lso": {0: 420}, "log_start": {0: 0}})  # 1 is away
    prober._list_ends()
    assert prober.take_rewinds() == [("T", 0, 420, 500)] and prober.take_rewinds() == []
    # truncated, or another topic under the name (recreated): look it up at once, and what was
    # acknowledged on the old log is no end a reader can reach
    assert prober.recheck_topic and prober.view.ends[0].acked_end == -1
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


def test_a_deleted_topic_is_no_stall_of_its_partitions():
    """Readers cannot read a topic that was deleted: a listing told so makes the prober look the
    topic up at once, and while it is missing nothing is judged on its partitions."""
    from confluent_kafka import KafkaError, KafkaException

    prober = stuck_prober()
    assert [v for now in (0, 3) for v in prober._judge(now)] == []  # stuck, not yet past 5 s

    class GoneAdmin(FakeAdmin):
        def list_offsets(self, tps, isolation_level=None, request_timeout=None):
            from concurrent.futures import Future

            out = {}
            for tp in tps:
                fut: Future = Future()
                fut.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
                out[tp] = fut
            return out

    prober.admin = GoneAdmin({})
    prober._list_ends()
    assert prober.recheck_topic
    prober.view.missing_since = 4.0
    prober.judge.forget_positions()
    assert [v for now in range(6, 40, 3) for v in prober._judge(now)] == []
    assert prober.view.open_stalls[(Invariant.STALLED_POLL, RU)] == 0


def test_the_prober_starts_reading_the_ledger_ten_minutes_back_so_an_init_written_before_it_is_seen():
    from confluent_kafka import OFFSET_END, KafkaException

    from monitor.watch.prober import LEDGER_LOOKBACK_S

    class Ledger:
        def __init__(self, fail=False, ends_fail=False):
            self.fail, self.ends_fail, self.asked, self.assigned, self.ends_asked = fail, ends_fail, [], None, 0

        def offsets_for_times(self, tps, timeout):
            if self.fail:
                raise KafkaException("no broker answered")
            self.asked = [(tp.partition, tp.offset) for tp in tps]
            return [type(tp)(tp.topic, tp.partition, {0: 120, 1: -1}[tp.partition]) for tp in tps]

        def get_watermark_offsets(self, tp, timeout):
            self.ends_asked += 1
            if self.ends_fail:
                raise KafkaException("no broker answered")
            return (3, {0: 200, 1: 77}[tp.partition])

        def assign(self, tps):
            self.assigned = [(tp.partition, tp.offset) for tp in tps]

    prober = Prober(parse({}), lambda _v: None, threading.Event())
    prober.ledger = Ledger()
    start = prober._ledger_start([0, 1])
    # partition 1: nothing that recent, so its end — as an offset: a reader made anew starts there too
    assert [(tp.partition, tp.offset) for tp in start] == [(0, 120), (1, 77)]
    assert all(abs(ms / 1000 - (time.time() - LEDGER_LOOKBACK_S)) < 5 for _p, ms in prober.ledger.asked)
    prober._assign_ledger([0, 1])
    assert prober.ledger.assigned == [(0, 120), (1, 77)] and prober.ledger_next == {0: 120, 1: 77}
    prober.ledger = Ledger(fail=True)
    assert [tp.offset for tp in prober._ledger_start([0, 1])] == [200, 77]
    prober.ledger = Ledger(fail=True, ends_fail=True)
    assert [tp.offset for tp in prober._ledger_start([0])] == [OFFSET_END]
    prober.ledger = Ledger(fail=True, ends_fail=True)
    assert [tp.offset for tp in prober._ledger_start([0, 1])] == [OFFSET_END, OFFSET_END]
    assert prober.ledger.ends_asked == 1  # no broker answered: the second partition's end is not asked (3 s)


class FetchingConsumer:
    """A probe reader on one partition: a fetch returns everything the leader holds (``log_end``)
    unless the leader stopped answering; after a seek it has no position until it consumes again."""

    def __init__(self, at: int, log_end: int) -> None:
        self.at, self.fetch_from, self.log_end, self.answering, self.seeks = at, at, log_end, True, []

    def resume(self, _tps) -> None:
        pass

    def pause(self, _tps) -> None:
        pass

    def consume(self, _n: int, _timeout: float) -> list:
        if not self.answering or self.fetch_from >= self.log_end:
            return []
        got = [Msg(b"x") for _ in range(self.log_end - self.fetch_from)]
        self.at = self.fetch_from = self.log_end
        return got

    def position(self, tps):
        from confluent_kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in tps]

    def seek(self, tp) -> None:
        self.seeks.append(tp.offset)
        self.at, self.fetch_from = -1001, tp.offset


def test_a_reader_polling_when_its_leader_stops_answering_is_held_at_the_end_its_round_knew():
    """The round began knowing the end at 100; the fetch returned up to 130, all of it acknowledged
    (acks=all) by then. The leader then stops answering: held at 100, the reader has the 30
    acknowledged records waiting unread and is stalled; without being held it would stand at the
    very end, with nothing beyond it, and no stall would ever show."""
    prober = Prober(parse({"watch": {"stall_threshold_s": 5, "probe_interval_s": 0.3}}), lambda _v: None,
                    threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 1
    prober.view.ends[0] = PartitionEnds(high_watermark=100, lso=100, fresh=True)
    reader = FetchingConsumer(at=90, log_end=130)
    prober.readers = {RU: reader}
    prober._poll_readers()
    assert reader.seeks == [100] and prober._position(RU, 0, reader) == 100
    prober.view.ends[0].acked_end = 130  # the ledger: acknowledged up to 130 before the leader froze
    reader.answering = False
    found = []
    for now in (0, 3, 6, 9):
        prober._poll_readers()
        found += prober._judge_partitions(now)
    assert [(v.invariant, v.isolation, v.offsets) for v in found] == [(Invariant.STALLED_POLL, RU, (100, 130))]
    # the leader back: the reader fetches from where it was held and its position is its own again
    reader.answering = True
    prober._poll_readers()
    assert prober._position(RU, 0, reader) == 130 and reader.seeks == [100]  # (not put back again)


def test_a_reader_that_reached_the_end_its_round_knew_and_no_further_is_left_where_it_is():
    prober = Prober(parse({"watch": {"probe_interval_s": 0.3}}), lambda _v: None, threading.Event())
    prober.view.topic_id, prober.view.partitions = "T", 1
    prober.view.ends[0] = PartitionEnds(high_watermark=130, lso=130, fresh=True)
    reader = FetchingConsumer(at=90, log_end=130)
    prober.readers = {RU: reader}
    prober._poll_readers()
    assert reader.seeks == [] and prober._position(RU, 0, reader) == 130
