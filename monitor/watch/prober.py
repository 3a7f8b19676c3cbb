"""The direct per-partition poll prober: what ``stalled_poll``, ``lso_stuck`` and
``producer_stalled`` are judged on (the verdicts are :class:`invariants.liveness.LivenessJudge`'s).

A Spark query plans all partitions together and a hung fetch blocks the whole batch for
``kafkaConsumer.pollTimeoutMs``, so Spark alone cannot say which partition stalled. The
prober runs in the monitor process with one confluent-kafka consumer per isolation level,
assigned to every canary partition from the end, and every ``probe_interval_s``:

1. reads the ledger (from ten minutes back, so that a writer stuck initialising its producer
   since before the prober started is seen) into its own :class:`~invariants.accounting.LedgerFold`:
   pending intents tell it a writer waits for an outcome (a writer's checkpoint entries tell
   it what was in flight before it started reading), the entries' append times give it the
   brokers' clock (:class:`~invariants.liveness.BrokerClock`) and each writer's clock skew;
2. polls both consumers up to the ends it listed in the previous round, and takes their
   positions;
3. lists the high watermark, the last stable offset and the log start per partition (keeping
   the last known values, marked stale, when a leader does not answer; a high watermark that
   went backwards is handed to the checker as evidence of a rewrite);
4. hands what it saw to the liveness judge: a reader that made no progress although the end it
   may read (the high watermark for ``read_uncommitted``, the last stable offset for
   ``read_committed``) was already beyond its position when the round began.

Listing *after* polling is what lets a stall show: the ends listed at the end of one round are
what the readers must reach in the next; if their leader stops answering, the readers stay
behind them. The ledger's ``acks=all`` acknowledgements are a second lower bound of the high
watermark (such an ack is given only once the high watermark passed the write), known even
when the leader stops answering before the next listing. Records acknowledged with ``acks=1``
but above the high watermark (a leader cut off from its followers) are not available to any
reader, and are not a stall.

It never blocks longer than a few seconds per round, whatever the brokers do.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from confluent_kafka import OFFSET_END, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from invariants.accounting import LedgerFold
from invariants.ledger_format import LedgerFormatError, Outcomes, WriteOutcome, decode
from invariants.liveness import BrokerClock, LivenessJudge
from invariants.model import RC, RU, Violation
from monitor import clients
from monitor.config import Config

LEDGER_LOOKBACK_S = 600.0  # how far back the prober starts reading the ledger (see _ledger_start)
# A ledger reader whose metadata requests found no broker for this long is made anew (_renew_ledger_reader)
LEDGER_READER_RENEW_S = 15.0


_UNKNOWN_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID}


def _close_aside(client: Any) -> None:
    """Close a client in a thread of its own: closing joins its broker threads, and one stuck
    resolving a name that is gone could hold up the prober's round."""
    threading.Thread(target=client.close, name="vigil-prober-close", daemon=True).start()


@dataclass
class PartitionEnds:
    high_watermark: int = -1
    lso: int = -1
    log_start: int = 0
    fresh: bool = False  # listed in the latest round (else: the last values known)
    acked_end: int = -1  # highest offset + 1 the ledger says an acks=all write was acknowledged at


@dataclass
class ProbeView:
    """What the prober last knew, for gauges and evidence."""

    topic_id: str = ""
    partitions: int = 0
    leaders: dict[int, int] = field(default_factory=dict)
    brokers: list[int] = field(default_factory=list)
    ends: dict[int, PartitionEnds] = field(default_factory=dict)
    open_stalls: dict[tuple, int] = field(default_factory=dict)  # (Invariant, Isolation) -> open episodes
    rounds: int = 0
    open_episodes: dict[str, Any] = field(default_factory=dict)  # counted, still open (LivenessJudge.open_doc)
    list_offsets_failures: int = 0  # partitions whose ends could not be listed, summed over rounds
    missing_since: float = 0.0  # when the canary topic was first found missing (0: it is there)
    clock_latest_us: int = 0  # the newest ledger append time read
    clock_offset_us: int | None = None  # the prober's clock minus the brokers' (least recent delay)
    clock_skew: dict[str, float] = field(default_factory=dict)  # writer name -> its clock minus the brokers'
    ledger_reachable: bool = True  # the ledger answered last round (metadata; every partition led, min ISR in sync)
    ledger_back_us: int = 0  # brokers' time the ledger was last found answering again after it was away (0: never)
    ledger_placement: str = "shared"  # "separate": the ledger on a cluster of its own (Config.ledger_placement)

    def broker_now_us(self, now: float) -> int:
        """The brokers' time now, from the prober's clock (its own clock before it read anything)."""
        now_us = int(now * 1e6)
        if self.clock_offset_us is None:
            return now_us
        return max(self.clock_latest_us, now_us - self.clock_offset_us)


class Prober(threading.Thread):
    def __init__(self, config: Config, on_violations: Callable[[list[Violation]], None],
                 stop: threading.Event, on_round: Callable[[], None] = lambda: None,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        super().__init__(name="vigil-prober", daemon=True)
        self.cfg = config
        self.on_violations = on_violations
        self.on_round = on_round
        self.say = say
        self.stop_event = stop
        self.view = ProbeView(ledger_placement=config.ledger_placement())
        self.lock = threading.Lock()
        w = config.watch
        self.judge = LivenessJudge(w.stall_threshold_s, w.lso_stuck_threshold_s, w.producer_stall_s)
        self.fold = LedgerFold([config.canary.name])
        self.clock = BrokerClock()
        self.ledger_at_end: dict[int, bool] = {}  # ledger partition -> read to its end
        self.ledger_next: dict[int, int] = {}  # ledger partition -> the next offset to read (OFFSET_END: its end)
        self.ledger_unanswered_since: float | None = None  # no broker answered the ledger's metadata since
        self.ledger_renewed_at = 0.0
        self.rewinds: list[tuple[str, int, int, int]] = []  # (topic id, partition, new high watermark, old)
        self.eof: dict[tuple, int] = {}
        # the last listing was told the topic does not exist, or saw a log end go backwards: the
        # topic may be gone or recreated under its name (a new ID), so look it up at once
        self.recheck_topic = False
        self.error: str | None = None

    # -- setup -----------------------------------------------------------------------------

    def _open(self) -> None:
        cfg = self.cfg
        self.admin = clients.admin(cfg)
        self.readers = {iso: clients.consumer(cfg, iso.value, group=f"vigil-prober-{iso.value}", profile="probe")
                        for iso in (RC, RU)}
        self.ledger = self._ledger_reader()
        self.assigned_topic_id = ""

    def _ledger_reader(self) -> Any:
        return clients.consumer(self.cfg, "read_committed", group="vigil-prober-ledger", ledger=True,
                                profile="probe")

    def _refresh_metadata(self) -> None:
        info = clients.describe_topic(self.admin, self.cfg.canary.name, timeout=3)
        if info is None:
            if not clients.topic_exists(self.admin, self.cfg.canary.name, timeout=3):
                with self.lock:
                    if not self.view.missing_since:
                        self.judge.forget_positions()
                    self.view.missing_since = self.view.missing_since or time.time()
            return
        brokers = sorted(b.id for b in self.admin.describe_cluster(request_timeout=3).result().nodes)
        grown = info.topic_id == self.assigned_topic_id and info.partitions > self.view.partitions
        with self.lock:
            self.view.leaders, self.view.brokers, self.view.partitions = dict(info.leaders), brokers, info.partitions
            self.view.topic_id = info.topic_id
            self.view.missing_since = 0.0
        if info.topic_id != self.assigned_topic_id or grown:
            tps = [TopicPartition(self.cfg.canary.name, p, OFFSET_END) for p in range(info.partitions)]
            for consumer in self.readers.values():
                consumer.assign(tps)
            ledger_md = self.ledger.list_topics(self.cfg.ledger.topic, timeout=3).topics.get(self.cfg.ledger.topic)
            if ledger_md is not None and ledger_md.partitions and not self.ledger_at_end:
                self._assign_ledger(list(ledger_md.partitions))
                self.ledger_at_end = {p: False for p in ledger_md.partitions}
            if info.topic_id != self.assigned_topic_id:  # a new topic: its ends start afresh
                with self.lock:
                    self.view.ends = {}
                self.judge.forget_positions()
                self.eof.clear()
            self.assigned_topic_id = info.topic_id

    def _assign_ledger(self, partitions: list[int]) -> None:
        starts = self._ledger_start(partitions)
        self.ledger_next = {tp.partition: tp.offset for tp in starts}
        self.ledger.assign(starts)

    def _ledger_start(self, partitions: list[int]) -> list[TopicPartition]:
        """Where the prober starts reading the ledger: ``LEDGER_LOOKBACK_S`` back (its end, as an
        offset, where nothing is that recent). A writer stuck initialising its producer writes its
        ``init`` entry and then nothing at all, so a prober that started at the end after it would
        never know. The end is an offset, not ``OFFSET_END``, where the brokers say it: a reader made
        anew (:meth:`_renew_ledger_reader_if_stuck`) must start where this one did, not at an end
        that has moved on meanwhile (``OFFSET_END`` only when no broker answered either question)."""
        topic = self.cfg.ledger.topic
        since_ms = int((time.time() - LEDGER_LOOKBACK_S) * 1000)
        try:
            found = {tp.partition: tp.offset
                     for tp in self.ledger.offsets_for_times([TopicPartition(topic, p, since_ms) for p in partitions],
                                                             timeout=3)}
        except KafkaException:
            found = {}
        starts, answering = [], True
        for p in partitions:
            offset = found.get(p, -1)
            if offset < 0 and answering:  # (once no broker answered, the others are not asked: 3 s each)
                try:  # (the ledger is not transactional: its end is the high watermark)
                    offset = self.ledger.get_watermark_offsets(TopicPartition(topic, p), timeout=3)[1]
                except KafkaException:
                    answering = False
            starts.append(TopicPartition(topic, p, offset if offset >= 0 else OFFSET_END))
        return starts

    # -- one round -------------------------------------------------------------------------

    def _check_ledger(self, now: float) -> None:
        """Whether the ledger takes entries: its metadata answers (librdkafka asks a broker, never
        its cache), every partition has a leader and at least ``ledger.min_insync_replicas`` in
        sync. A ledger that does not holds back every outcome its writers learn meanwhile, and each
        writer's next intent (it sends nothing until that is durable)."""
        try:
            md = self.ledger.list_topics(self.cfg.ledger.topic, timeout=2).topics.get(self.cfg.ledger.topic)
            reachable = (md is not None and md.error is None and bool(md.partitions)
                         and all(part.leader >= 0 and len(part.isrs) >= self.cfg.ledger.min_insync_replicas
                                 for part in md.partitions.values()))
            self.ledger_unanswered_since = None
        except KafkaException as exc:
            reachable = False
            self._renew_ledger_reader_if_stuck(now, exc)
        with self.lock:
            if reachable and not self.view.ledger_reachable:  # back: on the brokers' clock, as the waits are
                self.view.ledger_back_us = self.clock.now_us(int(now * 1e6), True)
            self.view.ledger_reachable = reachable

    def _renew_ledger_reader_if_stuck(self, now: float, exc: KafkaException) -> None:
        """A ledger reader that has found no broker to answer for ``LEDGER_READER_RENEW_S`` is made
        anew, reading on where the old one stood (at most once per that interval). librdkafka 2.10+
        drops every broker a metadata answer does not list, and a broker that is starting or
        stopping may answer with no broker at all (seen here from a one-node ledger cluster's
        controlled shutdown): the client then knows no broker, and need not find one again
        (librdkafka issue 5301) — the ledger back, this prober would still call it unreachable,
        as it did for over 60 s in one CI run. A new client starts from ``bootstrap.servers``."""
        if self.ledger_unanswered_since is None:
            self.ledger_unanswered_since = now
        if now - max(self.ledger_unanswered_since, self.ledger_renewed_at) < LEDGER_READER_RENEW_S:
            return
        self.ledger_renewed_at = now
        topic = self.cfg.ledger.topic
        new = self._ledger_reader()
        try:
            new.assign([TopicPartition(topic, p, off) for p, off in sorted(self.ledger_next.items())])
        except Exception:
            _close_aside(new)
            raise
        old, self.ledger = self.ledger, new
        _close_aside(old)
        self.say(f"prober: no ledger broker answered for {now - self.ledger_unanswered_since:.0f} s "
                 f"({exc.args[0].str() if exc.args else exc}); its ledger reader made anew")

    def _read_ledger(self) -> None:
        deadline = time.monotonic() + 0.5
        skew: dict[str, float] = {}
        while time.monotonic() < deadline:
            msgs = self.ledger.consume(2000, 0.05)
            if not msgs:
                break
            read_at = time.time_ns() // 1000
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self.ledger_at_end[m.partition()] = True
                        self.ledger_next[m.partition()] = m.offset()
                    continue
                self.ledger_at_end[m.partition()] = False
                self.ledger_next[m.partition()] = m.offset() + 1
                try:
                    entry = decode(m.value(), append_ts_us=max(0, m.timestamp()[1]) * 1000)
                except LedgerFormatError:
                    continue
                self.clock.observe(entry.append_ts_us, read_at)
                self.fold.apply(entry)
                w = self.fold.writers.get((entry.writer.instance, entry.writer.inc))
                self._note_acks(entry.body, w)
                if entry.append_ts_us and w is not None and w.settings is not None:
                    gap = (entry.ts_us - entry.append_ts_us) / 1e6
                    skew[w.settings.name] = max(gap, skew.get(w.settings.name, gap))
        with self.lock:
            self.view.clock_skew.update(skew)
            self.view.clock_latest_us = self.clock.latest_us
            if self.clock.offsets:
                self.view.clock_offset_us = min(self.clock.offsets)

    def _note_acks(self, body: Any, w: Any) -> None:
        """An ``acks=all`` acknowledgement means the high watermark had passed the write when it
        was given: a lower bound of the end a read_uncommitted reader may reach, known even when
        the leader no longer answers a listing. Not so for ``acks=1``/``0``: such a write may sit
        above the high watermark (a leader cut off from its followers), where no reader waits."""
        if not isinstance(body, Outcomes) or w is None or w.settings is None or w.settings.acks != "all":
            return
        with self.lock:
            if body.topic_id != self.view.topic_id:
                return
            for run in body.runs:
                if run.outcome is WriteOutcome.ACKED and run.first_offset >= 0:
                    ends = self.view.ends.setdefault(run.partition, PartitionEnds())
                    ends.acked_end = max(ends.acked_end, run.first_offset + run.count)

    def _broker_now(self, now: float) -> float:
        """The brokers' time now; while the ledger is not read to its end, the newest append time read.
        Only producer waits are judged on it (polls and LSOs on the prober's own clock). A ledger
        that stopped while this prober had not read it to its end leaves that time standing until
        it is back: a wait observed before cannot pass its threshold on time nobody could read (its
        outcome may sit in the writer's queue)."""
        caught_up = bool(self.ledger_at_end) and all(self.ledger_at_end.values())
        return self.clock.now_us(int(now * 1e6), caught_up) / 1e6

    def _end(self, iso: Any, p: int) -> int:
        ends = self.view.ends.get(p, PartitionEnds())
        return ends.lso if iso is RC else max(ends.high_watermark, ends.acked_end)

    def _poll_readers(self) -> None:
        """Fetch only during a probe: resume, read up to the ends known now, pause again, and
        go back to those ends where a fetch returned more (:meth:`_hold_at`).

        Between probes the consumers are paused, so records acknowledged since the last probe
        wait unread; if their leader then stops answering, the next probe sees them waiting.
        """
        tps = [TopicPartition(self.cfg.canary.name, p) for p in range(self.view.partitions)]
        budget = min(2.0, self.cfg.watch.probe_interval_s)
        for iso, consumer in self.readers.items():
            ends = {p: self._end(iso, p) for p in range(self.view.partitions)}
            consumer.resume(tps)
            deadline = time.monotonic() + budget
            while time.monotonic() < deadline:
                for msg in consumer.consume(5000, 0.1):
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        self.eof[(iso, msg.partition())] = msg.offset()
                if all(self._position(iso, p, consumer) >= ends[p] for p in ends):
                    break
            consumer.pause(tps)
            self._hold_at(iso, consumer, ends)

    def _hold_at(self, iso: Any, consumer: Any, ends: dict[int, int]) -> None:
        """A reader that got past the end known when its round began goes back to it. A fetch
        returns whatever the leader holds, so a reader polling when its leader stops answering
        could otherwise be at the very end, with nothing acknowledged beyond it and nothing
        acknowledged any more: no stall, though the partition cannot be read (which fits the
        paused-leader test's misses in two of eight runs). Held at the end it knew, the records
        acknowledged since wait unread, and the next round must fetch them."""
        for p, end in ends.items():
            if end >= 0 and self._position(iso, p, consumer) > end:
                consumer.seek(TopicPartition(self.cfg.canary.name, p, end))
                # where it stands now: a client has no position after a seek until it consumes again
                self.eof[(iso, p)] = end

    def _position(self, iso: Any, p: int, consumer: Any) -> int:
        """How far this reader got: the consumed position, or the end it reached (read_committed
        skips control and aborted records, which only the end-of-partition event accounts for),
        or where :meth:`_hold_at` put it back."""
        (tp,) = consumer.position([TopicPartition(self.cfg.canary.name, p)])
        return max(tp.offset, self.eof.get((iso, p), -1))

    def _list_ends(self) -> None:
        tps = {TopicPartition(self.cfg.canary.name, p): OffsetSpec.latest() for p in range(self.view.partitions)}
        earliest = {TopicPartition(self.cfg.canary.name, p): OffsetSpec.earliest() for p in range(self.view.partitions)}
        requests = {
            "high_watermark": self.admin.list_offsets(tps, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                                      request_timeout=3),
            "lso": self.admin.list_offsets(tps, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=3),
            "log_start": self.admin.list_offsets(earliest, request_timeout=3),
        }
        listed: dict[int, dict[str, int]] = {}
        self.recheck_topic = False
        for attr, futures in requests.items():
            for tp, fut in futures.items():
                try:
                    offset = fut.result(timeout=4).offset
                except KafkaException as exc:  # that leader did not answer: keep what we knew
                    self.recheck_topic |= exc.args[0].code() in _UNKNOWN_TOPIC
                    continue
                except Exception:  # noqa: BLE001 - no answer in time: keep what we knew
                    continue
                if offset >= 0:  # an error result (e.g. OFFSET_INVALID): keep what we knew
                    listed.setdefault(tp.partition, {})[attr] = offset
        with self.lock:
            for p in range(self.view.partitions):
                old = self.view.ends.get(p, PartitionEnds())
                got = listed.get(p, {})
                fresh = len(got) == len(requests)
                if not fresh:
                    self.view.list_offsets_failures += 1
                hw = got.get("high_watermark", old.high_watermark)
                acked_end = old.acked_end
                if fresh and 0 <= hw < old.high_watermark:  # the log end went backwards: a rewrite, or
                    self.rewinds.append((self.view.topic_id, p, hw, old.high_watermark))  # a new topic
                    self.recheck_topic = True
                    acked_end = -1  # what was acknowledged there may be gone with it
                self.view.ends[p] = PartitionEnds(hw, got.get("lso", old.lso), got.get("log_start", old.log_start),
                                                  fresh, acked_end)

    def take_rewinds(self) -> list[tuple[str, int, int, int]]:
        """High watermarks seen going backwards since the last call: (topic id, partition, new, old)."""
        with self.lock:
            out, self.rewinds = self.rewinds, []
        return out

    def _judge_partitions(self, now: float) -> list[Violation]:
        out: list[Violation] = []
        tid = self.view.topic_id
        for iso, consumer in self.readers.items():
            for p in range(self.view.partitions):
                try:
                    pos = self._position(iso, p, consumer)
                except KafkaException:
                    continue
                out += self.judge.poll(iso, tid, p, pos, self._end(iso, p), now)
        for p, ends in self.view.ends.items():
            if ends.fresh:  # a leader that did not answer says nothing about its LSO
                out += self.judge.lso(tid, p, ends.lso, ends.high_watermark, now)
        return out

    def _judge(self, now: float) -> list[Violation]:
        # a topic that is missing has no partition anyone could read: nothing to judge there
        out = [] if self.view.missing_since else self._judge_partitions(now)
        pending = self.fold.oldest_pending_us()
        broker_now = self._broker_now(now)
        # A ledger on a cluster of its own that is away holds every writer's outcomes in its queue:
        # the waits are the ledger's (VigilLedgerUnavailable), not producer_stalled of the canary.
        # They are not judged while it is away, and those that began before it came back count
        # from its return. (A ledger on the canary's cluster away is the canary's cluster away.)
        own = self.view.ledger_placement == "separate"
        for key, w in self.fold.writers.items():
            timeout_ms = w.settings.message_timeout_ms if w.settings is not None else 0
            since = pending.get(key)
            if own and since is not None and (w.instance, w.inc) not in self.judge.producers.since:
                if not self.view.ledger_reachable:
                    continue  # an episode counted before stays as it is
                since = max(since, self.view.ledger_back_us)
            out += self.judge.producer(w.instance, (w.writer_id, w.inc), since, broker_now, timeout_ms)
        with self.lock:
            self.view.open_stalls = self.judge.open_counts()
            self.view.open_episodes = self.judge.open_doc()
        return out

    def prime(self, open_episodes: dict[str, Any], now: float | None = None) -> None:
        """Episodes counted before a restart (from the durable state)."""
        self.judge.prime(open_episodes, time.time() if now is None else now)
        self.view.open_episodes = self.judge.open_doc()

    def probe_once(self, now: float | None = None) -> list[Violation]:
        # metadata every fifth round, and at once after a round whose listings failed (the topic
        # may be gone: its partitions are then not judged)
        if self.view.rounds % 5 == 0 or not self.view.partitions or self.recheck_topic or self.view.missing_since:
            try:
                self._refresh_metadata()
            except Exception as exc:  # a broker away: judge with what we knew
                self.error = f"metadata: {type(exc).__name__}: {exc}"
        if not self.view.partitions:
            return []
        self._check_ledger(time.time() if now is None else now)
        self._read_ledger()
        self._poll_readers()
        self._list_ends()
        out = self._judge(time.time() if now is None else now)
        self.view.rounds += 1
        return out

    def snapshot(self) -> ProbeView:
        with self.lock:
            return ProbeView(self.view.topic_id, self.view.partitions, dict(self.view.leaders),
                             list(self.view.brokers), {p: replace(e) for p, e in self.view.ends.items()},
                             dict(self.view.open_stalls), self.view.rounds, dict(self.view.open_episodes),
                             self.view.list_offsets_failures, self.view.missing_since, self.view.clock_latest_us,
                             self.view.clock_offset_us, dict(self.view.clock_skew), self.view.ledger_reachable,
                             self.view.ledger_back_us, self.view.ledger_placement)

    def run(self) -> None:
        self._open()
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                try:
                    found = self.probe_once()
                except Exception as exc:  # brokers away: keep probing, never die
                    found, self.error = [], f"{type(exc).__name__}: {exc}"
                if found:
                    self.on_violations(found)
                try:
                    self.on_round()
                except Exception as exc:  # noqa: BLE001 - the prober must keep probing
                    self.error = f"after round: {type(exc).__name__}: {exc}"
                self.stop_event.wait(max(0.0, self.cfg.watch.probe_interval_s - (time.monotonic() - started)))
        finally:
            for consumer in [*self.readers.values(), self.ledger]:
                consumer.close()
