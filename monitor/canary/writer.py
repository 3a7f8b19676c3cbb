"""The canary writer: sequence-numbered records on every partition, every outcome in the ledger.

One writer is one (instance id, incarnation). Each step it

1. plans the records owed by the rate, round-robin over *all* partitions of the canary topic
   (so every broker that leads a partition gets canary traffic; partitions are never
   reassigned), each with the next sequence number of its partition;
2. appends an ``intent`` ledger entry and waits until it is durable;
3. sends the records, and
4. appends the outcomes of whatever delivery reports arrived (``outcomes`` entries).

Every ``checkpoint_s`` it also appends a ``checkpoint``: the topic's settings as last observed
(:mod:`monitor.canary.topic_watch`), the writes still waiting for an outcome and the open
transaction, so a checker that starts reading the ledger in the middle knows where it stands.

Sequence numbers only ever grow within an incarnation, whatever happens to a send, so a seq
is never reused after an ambiguous failure. A fatal producer error (e.g. an idempotence
failure) replaces the Kafka producer and carries on as the same writer. On a clean stop it
waits for the last delivery reports and appends ``stop``.

**The topic changes under it** (seen by its :class:`~monitor.canary.topic_watch.TopicObserver`
within ``ledger.checkpoint_interval_s``): a topic that is gone is created again with its
configured settings (nothing is written while it is missing, so the canary never goes blind for
long); a topic with a new ID (recreated, by the writer or anyone else) is written to from then on
— the Kafka producer is replaced first, so what the old one had in flight is ``indeterminate``
and nothing of it is sent to the new topic after the switch — and a ``start`` entry says which ID
it replaces; more partitions are written to as soon as the producer's metadata has them (a new
``start`` with the same ID). Seqs keep growing across topic IDs, so each of its records says by
its seq which ID it was meant for.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException

from invariants.ledger_format import (
    Checkpoint, Intent, OpenTxn, OutcomeRun, Outcomes, PendingWrites, Start, Stop, TopicSettings, TxnInfo, WriteOutcome,
    WriteRange, WriterSettings,
)
from monitor import record_format
from monitor.client_errors import REFUSED, classify
from monitor.canary.ack_check import AckChecking
from monitor.canary.topic_following import TopicFollowing
from monitor.canary.topic_watch import TopicObserver
from monitor.clients import ProducerLike, TopicInfo
from monitor.config import WriterConfig
from monitor.identity import WriterIdentity
from monitor.ledger import Delivery, LedgerError, LedgerWriter, encode_runs, now_us
from monitor.metrics import ProducerMetrics
from monitor.outcomes import classify_delivery

MAX_BATCH = 10_000
OUTCOME_FLUSH_S = 0.05
FINISH_LEDGER_S = 30.0  # how long a stopping writer waits for its last ledger entries


class CanaryWriter(TopicFollowing, AckChecking):
    def __init__(self, cfg: WriterConfig, topic: TopicInfo, identity: WriterIdentity, ledger: LedgerWriter,
                 producer_factory: Callable[[Callable[[Any], None]], ProducerLike],
                 metrics: ProducerMetrics | None = None, observer: TopicObserver | None = None,
                 checkpoint_s: float = 10.0, recreate: Callable[[], TopicInfo] | None = None) -> None:
        self.cfg = cfg
        self.topic = topic
        self.observer = observer
        self.recreate_topic = recreate
        self._last_recreate = 0.0
        self.checkpoint_s = checkpoint_s
        self._last_checkpoint = time.monotonic()
        self._pending: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, seq) -> (txn id, intent time)
        self.open_txn: OpenTxn | None = None
        self.identity = identity
        self.ledger = ledger
        self._factory = producer_factory
        self.metrics = metrics
        self.partitions = sorted(range(topic.partitions))
        self.next_seq = {p: 0 for p in self.partitions}
        self._cursor = 0
        self.planned = 0
        self.counts: dict[WriteOutcome, int] = {o: 0 for o in WriteOutcome}
        self._results: list[Delivery] = []
        self._highest_ack: dict[int, int] = {}  # partition -> the highest offset acked (see ack_check)
        self._to_list: list[int] = []  # indexes into _results of acks to list the log start after
        self._last_outcome_flush = time.monotonic()
        self._fatal: KafkaError | None = None
        # where a write refused by the brokers (an ACL, the credentials) is reported: librdkafka
        # says those in the delivery report only, not to error_cb (set by monitor.canary.runner)
        self.on_refused: Callable[[KafkaError], None] = lambda _err: None
        self.producer = self._factory(self._on_error)
        if metrics is not None:
            metrics.init_writer(cfg.name, cfg.transactional, cfg.acks, cfg.idempotence)
            metrics.incarnation.labels(cfg.name).set(identity.incarnation)
            metrics.ledger_wait.labels(cfg.name, ledger.placement).set_function(lambda: self.ledger.waiting_s())

    # -- callbacks (run inside producer.poll/flush on the writer thread) -------------------

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err
            self._count_error("fatal")
        else:
            self._count_error("client")

    def _count_error(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.errors.labels(self.cfg.name, kind).inc()

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        rec = record_format.decode(msg.value())  # always a canary record: this writer encoded it
        if err is not None and classify(err) in REFUSED:
            self.on_refused(err)
        classified = classify_delivery(err, msg.offset() if err is None else None, self.cfg.acks)
        self._record(msg.partition(), rec.seq, classified.outcome, classified.offset, rec.produce_ts_us,
                     classified.error)

    def _record(self, partition: int, seq: int, outcome: WriteOutcome, offset: int, send_ts: int,
                error: str | None) -> None:
        done = now_us()
        pending = self._pending.pop((partition, seq), None)
        if pending is None:
            return  # already decided (a report of a producer given up as dead, arriving late)
        txn_id = pending[0]
        self._results.append(Delivery(partition, seq, outcome, offset, send_ts, done, error, txn_id))
        if outcome is WriteOutcome.ACKED:
            self._note_ack(len(self._results) - 1, partition, offset)
        self.counts[outcome] += 1
        if self.metrics is not None:
            self.metrics.writes.labels(self.cfg.name, outcome.value).inc()
            if outcome is WriteOutcome.ACKED:
                self.metrics.latency.labels(self.cfg.name).observe(max(0, done - send_ts) / 1e6)
                self.metrics.last_ack.labels(self.cfg.name).set(done / 1e6)

    # -- planning and sending --------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Writes with a durable intent and no outcome yet."""
        decided = sum(v for k, v in self.counts.items() if k is not WriteOutcome.PENDING)
        return self.planned - decided

    def plan(self, count: int) -> list[tuple[int, int]]:
        """The next ``count`` writes as (partition, seq), round-robin over all partitions."""
        writes = []
        n = len(self.partitions)
        for i in range(count):
            p = self.partitions[(self._cursor + i) % n]
            writes.append((p, self.next_seq[p]))
            self.next_seq[p] += 1
        self._cursor = (self._cursor + count) % n
        self.planned += count
        return writes

    @staticmethod
    def intent_ranges(writes: list[tuple[int, int]]) -> tuple[WriteRange, ...]:
        """(partition, seq) pairs as ranges of consecutive seqs, per partition in seq order."""
        ranges: list[WriteRange] = []
        for p, seq in sorted(writes):
            last = ranges[-1] if ranges else None
            if last is not None and last.partition == p and last.first_seq + last.count == seq:
                ranges[-1] = WriteRange(p, last.first_seq, last.count + 1)
            else:
                ranges.append(WriteRange(p, seq, 1))
        return tuple(ranges)

    def write_intent(self, writes: list[tuple[int, int]], txn: TxnInfo | None, stop: threading.Event) -> None:
        self.ledger.append(Intent(self.topic.topic_id, self.intent_ranges(writes), txn))
        ts = now_us()
        for p, seq in writes:
            self._pending[(p, seq)] = (txn.id if txn else 0, ts)
        self.ledger.sync(stop)

    def send(self, partition: int, seq: int, flags: int = 0, txn_id: int = 0, txn_size: int = 0,
             txn_index: int = 0) -> None:
        rec = record_format.CanaryRecord(self.identity.writer_id, self.identity.incarnation, seq, now_us(),
                                         txn_id, txn_size, txn_index, flags)
        value = record_format.encode(rec, self.cfg.record_size)
        key = record_format.record_key(self.identity.writer_id, partition)
        while True:
            if self._fatal is not None:  # a dead producer sends nothing: never written
                self._record(partition, seq, WriteOutcome.FAILED, -1, rec.produce_ts_us,
                             f"not sent: producer failed ({self._fatal.name()})")
                return
            try:
                self.producer.produce(self.topic.name, value=value, key=key, partition=partition,
                                      on_delivery=self._on_delivery)
                return
            except BufferError:
                self._count_error("queue_full")
                self._serve(0.05)
            except KafkaException as exc:  # the record never entered the client
                err = _kafka_error(exc)
                if not err.fatal():  # e.g. _UNKNOWN_PARTITION, _UNKNOWN_TOPIC: refused, not sent
                    self._count_error("client")
                    self._record(partition, seq, WriteOutcome.FAILED, -1, rec.produce_ts_us, f"not sent: {err.name()}")
                    return
                self._fatal = self._fatal or err
                self._count_error("fatal")

    def flush_outcomes(self, force: bool = False) -> list[OutcomeRun]:
        now = time.monotonic()
        if not self._results or (not force and now - self._last_outcome_flush < OUTCOME_FLUSH_S):
            return []
        self._list_after_acks()
        runs = encode_runs(self._results)
        self._results = []
        self._last_outcome_flush = now
        self.ledger.append(Outcomes(self.topic.topic_id, tuple(runs)))
        return runs

    def _serve(self, timeout: float, flush: bool = False) -> int:
        """Serve delivery reports (poll, or flush). A producer in a fatal state raises from these
        calls, and confluent-kafka may even leave the fatal error pending while it runs the
        delivery callbacks (each then fails with a SystemError): the producer is dead from then on,
        and is renewed by the writer's loop."""
        try:
            return self.producer.flush(timeout) if flush else self.producer.poll(timeout)
        except (KafkaException, SystemError) as exc:
            if self._fatal is None:
                self._fatal = _kafka_error(exc)
                self._count_error("fatal")
            return 0

    def _renew_producer(self, reason: str | None = None) -> None:
        """Replace the Kafka producer (after a fatal error, or a topic recreated under it); the
        writer identity stays.

        The old producer is never flushed (see :meth:`_serve`): what it still had queued or in
        flight may or may not have reached the log, so those writes are ``indeterminate`` now —
        never more is claimed — and any report it still delivers later is ignored."""
        old = self.producer
        try:
            old.purge(in_queue=True, in_flight=True, blocking=False)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a broken producer may refuse to purge
            pass
        error = reason or (self._fatal.name() if self._fatal is not None else "producer renewed")
        for (p, seq), (_txn, ts) in list(self._pending.items()):
            self._record(p, seq, WriteOutcome.INDETERMINATE, -1, ts, f"{error}: producer renewed with it in flight")
        self._fatal = None
        self.producer = self._factory(self._on_error)

    def _replace_producer_if_fatal(self) -> None:
        if self._fatal is not None:
            self._renew_producer()

    # -- the topic under it ------------------------------------------------------------------

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        self.ledger.append(Start(self.topic.name, self.topic.topic_id, self.topic.partitions, self.settings(),
                                 self.topic_settings()))

    def settings(self) -> WriterSettings:
        cfg = self.cfg
        return WriterSettings(cfg.name, "canary", cfg.acks, cfg.idempotence, cfg.transactional,
                              cfg.effective_message_timeout_ms)

    def topic_settings(self) -> TopicSettings | None:
        return None if self.observer is None else self.observer.latest.settings

    def checkpoint(self) -> None:
        """Where this writer stands, for a reader that joins the ledger later."""
        self.flush_outcomes(force=True)  # so that "pending" means pending in ledger order too
        pending: list[PendingWrites] = []
        for (p, seq), (txn_id, ts) in sorted(self._pending.items()):
            last = pending[-1] if pending else None
            if last and (last.partition, last.first_seq + last.count, last.txn_id) == (p, seq, txn_id):
                pending[-1] = PendingWrites(p, last.first_seq, last.count + 1, txn_id, last.intent_ts_us)
            else:
                pending.append(PendingWrites(p, seq, 1, txn_id, ts))
        view = None if self.observer is None else self.observer.latest
        starts = view.log_starts if view is not None and view.info is not None and \
            view.info.topic_id == self.topic.topic_id else ()
        self.ledger.append(Checkpoint(self.topic.name, self.topic.topic_id, self.topic.partitions, self.settings(),
                                      self.topic_settings(), tuple(pending),
                                      () if self.open_txn is None else (self.open_txn,), starts))
        self._last_checkpoint = time.monotonic()

    def intend(self, writes: list[tuple[int, int]], txn: TxnInfo | None, stop: threading.Event) -> None:
        """Make the intent durable; if that fails the writes were never sent: ``failed``."""
        try:
            self.write_intent(writes, txn, stop)
        except LedgerError:
            for p, seq in writes:
                self._record(p, seq, WriteOutcome.FAILED, -1, now_us(), "not sent: intent not durable")
            raise

    def step(self, due: int, stop: threading.Event) -> None:
        writes = self.plan(due)
        self.intend(writes, None, stop)
        for p, seq in writes:
            self.send(p, seq)
        self._serve(0)

    def records_per_step(self) -> int:
        return 1

    def run(self, stop: threading.Event, duration: float | None = None, max_records: int | None = None,
            allowed: Callable[[], int] | None = None) -> None:
        """Write at the configured rate until ``stop`` is set, ``duration`` passes or
        ``max_records`` were planned; then finish cleanly. ``allowed``: how many records may be
        planned by now (the bench's pre-fill keeps its writers side by side with it)."""
        self.start()
        started = time.monotonic()
        per_step = self.records_per_step()
        try:
            while not stop.is_set():
                if not self.follow_topic():  # the topic is missing: write nothing, owe nothing
                    paused = time.monotonic()
                    self._serve(0.5)
                    started += time.monotonic() - paused
                    self.flush_outcomes()
                    if time.monotonic() - self._last_checkpoint >= self.checkpoint_s:
                        self.checkpoint()
                    continue
                now = time.monotonic()
                elapsed = now - started
                if duration is not None and elapsed >= duration:
                    break
                if max_records is not None and self.planned >= max_records:
                    break
                if self.cfg.rate > 0:
                    owed = int(self.cfg.rate * elapsed) - self.planned
                else:
                    owed = MAX_BATCH
                if allowed is not None:
                    owed = min(owed, allowed() - self.planned)
                step = per_step
                if max_records is not None:
                    owed = min(owed, max_records - self.planned)
                    step = min(per_step, max_records - self.planned)  # the last transaction may be smaller
                if owed >= step:
                    self._replace_producer_if_fatal()
                    try:
                        self.step(min(owed, MAX_BATCH) if per_step == 1 else step, stop)
                    except LedgerError:
                        if stop.is_set():
                            break
                        raise
                else:
                    wait = (self.planned + per_step) / self.cfg.rate - elapsed if self.cfg.rate > 0 else 0.0
                    if allowed is not None:  # (it may be what holds the writer back: asked again soon, not spun on)
                        wait = max(wait, 0.01)
                    self._serve(min(max(wait, 0.0), 0.05))
                self.flush_outcomes()
                if time.monotonic() - self._last_checkpoint >= self.checkpoint_s:
                    self.checkpoint()
        finally:
            self.finish()

    def drain(self, grace_s: float) -> None:
        """Wait for the delivery report of every record sent, at most message.timeout.ms (as the
        client runs with it: a client_overrides one wins) plus ``grace_s`` (librdkafka reports each
        record within message.timeout.ms)."""
        deadline = time.monotonic() + self.cfg.effective_message_timeout_ms / 1000 + grace_s
        while len(self.producer) > 0 and time.monotonic() < deadline:
            self._serve(1.0, flush=True)
            if self._fatal is not None:
                self._renew_producer()  # what it had in flight is indeterminate now
                return

    def finish(self) -> None:
        self.drain(10)
        self._serve(0)
        self.flush_outcomes(force=True)
        self.finish_transactions()
        if self.in_flight == 0:
            self.ledger.append(Stop())
        try:  # a ledger that is away must not hold the stop forever
            self.ledger.sync(timeout_s=FINISH_LEDGER_S)
        except LedgerError as exc:
            print(f"vigil: writer-{self.cfg.name}: {exc}: stopping without them (what this incarnation left "
                  "in flight becomes indeterminate when the next one starts)", file=sys.stderr, flush=True)

    def finish_transactions(self) -> None:
        """Hook for the transactional writer."""


def _kafka_error(exc: BaseException) -> KafkaError:
    """The KafkaError behind an exception raised by a producer call (a SystemError wraps it)."""
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
            return e.args[0]
    return KafkaError(KafkaError._FATAL, str(exc), fatal=True)
