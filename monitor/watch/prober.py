"""The direct per-partition poll prober: ``stalled_poll``, ``lso_stuck``, ``producer_stalled``.

A Spark query plans all partitions together and a hung fetch blocks the whole batch for
``kafkaConsumer.pollTimeoutMs``, so Spark alone cannot say which partition stalled. The
prober runs in the monitor process with one confluent-kafka consumer per isolation level,
assigned to every canary partition from the end, and every ``probe_interval_s``:

1. reads the ledger (from the end) into its own :class:`~invariants.accounting.LedgerFold`:
   acked offsets tell it records exist even when the leader no longer answers, pending
   intents tell it a writer waits for an outcome;
2. polls both consumers and takes their positions;
3. lists the high watermark and the last stable offset per partition (keeping the last
   known values when the leader does not answer);
4. feeds the liveness trackers of :mod:`invariants.liveness`.

It never blocks longer than a few seconds per round, whatever the brokers do.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import OFFSET_END, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from invariants import liveness
from invariants.accounting import LedgerFold
from invariants.catalog import Invariant
from invariants.model import NONE, RC, RU, Violation
from monitor import clients
from monitor.config import Config
from monitor.ledger import decode_entry


@dataclass
class PartitionEnds:
    high_watermark: int = -1
    lso: int = -1
    log_start: int = 0
    acked_end: int = -1  # highest acked offset + 1 seen in the ledger


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
    open_keys: dict[str, set] = field(default_factory=dict)  # tracker -> keys of counted, open episodes


class Prober(threading.Thread):
    def __init__(self, config: Config, on_violations: Callable[[list[Violation]], None],
                 stop: threading.Event) -> None:
        super().__init__(name="vigil-prober", daemon=True)
        self.cfg = config
        self.on_violations = on_violations
        self.stop_event = stop
        self.view = ProbeView()
        self.lock = threading.Lock()
        w = config.watch
        self.stalls = liveness.StallTracker(w.stall_threshold_s)
        self.lso = liveness.StallTracker(w.lso_stuck_threshold_s)
        self.producers = liveness.StallTracker(0.0)
        self.fold = LedgerFold()
        self.prev: dict[tuple, liveness.PollProgress] = {}
        self.prev_lso: dict[int, int] = {}
        self.eof: dict[tuple, int] = {}
        self.error: str | None = None

    # -- setup -----------------------------------------------------------------------------

    def _open(self) -> None:
        cfg = self.cfg
        bootstrap = clients.canary_bootstrap(cfg)
        self.admin = clients.admin(cfg.kafka, bootstrap)
        extra = {"enable.partition.eof": True, "fetch.wait.max.ms": 100, "socket.timeout.ms": 10000}
        self.readers = {iso: clients.consumer(cfg.kafka, bootstrap, iso.value, group=f"vigil-prober-{iso.value}",
                                              **extra) for iso in (RC, RU)}
        self.ledger = clients.consumer(cfg.ledger_kafka(), clients.ledger_bootstrap(cfg), "read_committed",
                                       group="vigil-prober-ledger", **extra)
        self.assigned_topic_id = ""

    def _refresh_metadata(self) -> None:
        info = clients.describe_topic(self.admin, self.cfg.canary.name, timeout=3)
        if info is None:
            return
        brokers = sorted(b.id for b in self.admin.describe_cluster(request_timeout=3).result().nodes)
        with self.lock:
            self.view.leaders, self.view.brokers, self.view.partitions = dict(info.leaders), brokers, info.partitions
            self.view.topic_id = info.topic_id
        if info.topic_id != self.assigned_topic_id:
            tps = [TopicPartition(self.cfg.canary.name, p, OFFSET_END) for p in range(info.partitions)]
            for consumer in self.readers.values():
                consumer.assign(tps)
            ledger_md = self.ledger.list_topics(self.cfg.ledger.topic, timeout=3).topics.get(self.cfg.ledger.topic)
            if ledger_md is not None and ledger_md.partitions:
                self.ledger.assign([TopicPartition(self.cfg.ledger.topic, p, OFFSET_END) for p in ledger_md.partitions])
            self.assigned_topic_id = info.topic_id
            self.prev.clear()
            self.eof.clear()

    # -- one round -------------------------------------------------------------------------

    def _read_ledger(self) -> None:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            msgs = self.ledger.consume(2000, 0.05)
            if not msgs:
                return
            for m in msgs:
                if m.error() is not None:
                    continue
                entry = decode_entry(m.value())
                if entry is None:
                    continue
                for ev in self.fold.apply(entry):
                    if ev[0] == "acked_run":  # (_, topic_id, p, writer, inc, first_seq, count, first_offset, done)
                        tid, p, end = ev[1], ev[2], ev[7] + ev[6]
                    elif ev[0] == "acked":  # a transaction's write: (_, wkey, offset, txn, done)
                        tid, p, end = ev[1][0], ev[1][1], ev[2] + 1
                    else:
                        continue
                    if tid == self.view.topic_id:
                        ends = self.view.ends.setdefault(p, PartitionEnds())
                        ends.acked_end = max(ends.acked_end, end)

    def _end(self, iso: Any, p: int) -> int:
        ends = self.view.ends.get(p, PartitionEnds())
        return ends.lso if iso is RC else max(ends.high_watermark, ends.acked_end)

    def _poll_readers(self) -> None:
        """Fetch only during a probe: resume, read up to the ends known now, pause again.

        Between probes the consumers are paused, so records acknowledged since the last probe
        wait unread; if their leader then stops answering, the next probe sees them waiting.
        """
        tps = [TopicPartition(self.cfg.canary.name, p) for p in range(self.view.partitions)]
        budget = min(2.0, self.cfg.watch.probe_interval_s)
        for iso, consumer in self.readers.items():
            consumer.resume(tps)
            deadline = time.monotonic() + budget
            while time.monotonic() < deadline:
                for msg in consumer.consume(5000, 0.1):
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        self.eof[(iso, msg.partition())] = msg.offset()
                if all(self._position(iso, p, consumer) >= self._end(iso, p) for p in range(self.view.partitions)):
                    break
            consumer.pause(tps)

    def _position(self, iso: Any, p: int, consumer: Any) -> int:
        """How far this reader got: the consumed position, or the end it reached (read_committed
        skips control and aborted records, which only the end-of-partition event accounts for)."""
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
        for attr, futures in requests.items():
            for tp, fut in futures.items():
                try:
                    offset = fut.result(timeout=4).offset
                except Exception:  # that leader did not answer: keep what we knew
                    continue
                if offset < 0:  # an error result (e.g. OFFSET_INVALID): keep what we knew
                    continue
                setattr(self.view.ends.setdefault(tp.partition, PartitionEnds()), attr, offset)

    def _judge(self, now: float) -> list[Violation]:
        out: list[Violation] = []
        tid = self.view.topic_id
        for iso, consumer in self.readers.items():
            for p in range(self.view.partitions):
                try:
                    pos = self._position(iso, p, consumer)
                except KafkaException:
                    continue
                end = self._end(iso, p)
                key = (iso, p)
                prev = self.prev.get(key)
                if pos < 0:  # no position yet (nothing fetched since the assignment at the end)
                    pos = prev.position if prev else end
                # the first observation after a start says nothing (an episode counted before a
                # restart stays open until a real observation ends it)
                if prev is not None and self.stalls.observe(key, liveness.poll_stuck(prev, pos, end), now):
                    out.append(Violation(Invariant.STALLED_POLL, iso, tid, p, (pos, end),
                                         detail=f"position {pos}, records available up to {end}, no progress "
                                                f"for {self.cfg.watch.stall_threshold_s:.0f} s"))
                self.prev[key] = liveness.PollProgress(pos, end)
        for p, ends in self.view.ends.items():
            prev_lso = self.prev_lso.get(p)
            observed = prev_lso is not None and ends.lso >= 0
            if observed and self.lso.observe(p, liveness.lso_stuck(prev_lso, ends.lso, ends.high_watermark), now):
                out.append(Violation(Invariant.LSO_STUCK, RC, tid, p, (ends.lso, ends.high_watermark),
                                     detail=f"LSO {ends.lso} frozen below high watermark {ends.high_watermark}"))
            if ends.lso >= 0:
                self.prev_lso[p] = ends.lso
        pending = self.fold.oldest_pending_us()
        for key, w in self.fold.writers.items():
            oldest = pending.get(key)
            stuck = oldest is not None and now - oldest / 1e6 > self.cfg.watch.producer_stall_s
            if self.producers.observe(key, stuck, now):
                out.append(Violation(Invariant.PRODUCER_STALLED, NONE, writer=(w.writer_id, w.inc),
                                     detail=f"{key[0]}: a write waiting for its outcome for more than "
                                            f"{self.cfg.watch.producer_stall_s:.0f} s"))
        with self.lock:
            self.view.open_stalls = {
                (Invariant.STALLED_POLL, RC): sum(1 for k in self.stalls.open_episodes() if k[0] is RC),
                (Invariant.STALLED_POLL, RU): sum(1 for k in self.stalls.open_episodes() if k[0] is RU),
                (Invariant.LSO_STUCK, RC): len(self.lso.open_episodes()),
                (Invariant.PRODUCER_STALLED, NONE): len(self.producers.open_episodes()),
            }
            self.view.open_keys = {name: tracker.open_episodes() for name, tracker in self._trackers().items()}
        return out

    def _trackers(self) -> dict[str, liveness.StallTracker]:
        return {"stalls": self.stalls, "lso": self.lso, "producers": self.producers}

    def prime(self, open_keys: dict[str, set], now: float | None = None) -> None:
        """Episodes counted before a restart (from the durable state)."""
        for name, tracker in self._trackers().items():
            tracker.prime(set(open_keys.get(name, ())), time.time() if now is None else now)
        self.view.open_keys = {name: set(keys) for name, keys in open_keys.items()}

    def probe_once(self, now: float | None = None) -> list[Violation]:
        if self.view.rounds % 5 == 0 or not self.view.partitions:
            try:
                self._refresh_metadata()
            except Exception as exc:  # a broker away: judge with what we knew
                self.error = f"metadata: {type(exc).__name__}: {exc}"
        if not self.view.partitions:
            return []
        self._read_ledger()
        self._list_ends()
        self._poll_readers()
        out = self._judge(time.time() if now is None else now)
        self.view.rounds += 1
        return out

    def snapshot(self) -> ProbeView:
        with self.lock:
            return ProbeView(self.view.topic_id, self.view.partitions, dict(self.view.leaders),
                             list(self.view.brokers), dict(self.view.ends),
                             dict(self.view.open_stalls), self.view.rounds,
                             {k: set(v) for k, v in self.view.open_keys.items()})

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
                self.stop_event.wait(max(0.0, self.cfg.watch.probe_interval_s - (time.monotonic() - started)))
        finally:
            for consumer in [*self.readers.values(), self.ledger]:
                consumer.close()
