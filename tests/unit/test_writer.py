import collections
import random
import threading

import pytest
from confluent_kafka import KafkaError

from invariants.ledger_format import Intent, TxnOutcome, WriteOutcome, decode
from invariants.model import WriteKey
from monitor import record_format
from monitor.audit.book import LedgerBook
from monitor.canary.transactional import TransactionalWriter
from monitor.canary.writer import CanaryWriter
from monitor.clients import TopicInfo
from monitor.config import WriterConfig
from monitor.identity import WriterIdentity
from monitor.ledger import LedgerWriter
from tests.unit.fakes import FakeProducer

TOPIC = TopicInfo("canary", "TID", 3, {0: 1, 1: 2, 2: 3})


def _setup(cfg, fail=None, cls=CanaryWriter, producer_cls=FakeProducer, **kw):
    log = {}
    ledger_prod = FakeProducer(log)
    ident = WriterIdentity("inst", 4, record_format.writer_id_for("inst"))
    ledger = LedgerWriter(ledger_prod, "ledger", "inst", ident.writer_id, 4)
    order = []

    def factory(_cb):
        p = producer_cls(log, fail=fail, acks=cfg.acks)
        order.append(p)
        return p

    return cls(cfg, TOPIC, ident, ledger, factory, **kw), log, order


def _book(log):
    book = LedgerBook()
    for v in log.get(("ledger", 0), []):
        book.apply_raw(v)
    return book


def test_round_robin_over_every_partition_and_seqs_only_grow():
    w, log, _ = _setup(WriterConfig(name="w", rate=0))
    w.run(threading.Event(), max_records=30)
    canary = {p: [record_format.decode(v) for v in log[("canary", p)]] for p in range(3)}
    assert {p: len(v) for p, v in canary.items()} == {0: 10, 1: 10, 2: 10}
    for recs in canary.values():
        assert [r.seq for r in recs] == list(range(10))
        assert {(r.writer_id, r.incarnation) for r in recs} == {(w.identity.writer_id, 4)}
    book = _book(log)
    assert len(book.writes) == 30 and book.by_outcome()[WriteOutcome.ACKED] == 30
    assert book.gaps() == {} and w.in_flight == 0
    kinds = [decode(v).kind for v in log[("ledger", 0)]]
    assert kinds[0] == "start" and kinds[-1] == "stop" and "intent" in kinds


@pytest.mark.parametrize("overrides, recorded", [
    ({}, 45000), ({"message.timeout.ms": 90000}, 90000), ({"delivery.timeout.ms": "120000"}, 120000),
    ({"message.timeout.ms": 90000, "delivery.timeout.ms": 60000}, 60000)])
def test_the_start_records_the_message_timeout_the_producer_runs_with(overrides, recorded):
    """client_overrides are applied last (monitor/client_config.py): the checker waits for an
    outcome as long as the producer may take to give one (Checker._ledger_behind)."""
    w, log, _ = _setup(WriterConfig(name="w", rate=0, message_timeout_ms=45000, client_overrides=overrides))
    w.run(threading.Event(), max_records=3)
    (start,) = [e for e in map(decode, log[("ledger", 0)]) if e.kind == "start"]
    assert start.body.settings.message_timeout_ms == recorded


@pytest.mark.parametrize("overrides, waited_s", [
    ({}, 45.0), ({"message.timeout.ms": "2000"}, 2.0), ({"delivery.timeout.ms": 90000}, 90.0)])
def test_the_drain_waits_as_long_as_the_producer_runs_with(monkeypatch, overrides, waited_s):
    """A producer that reports nothing more: the drain gives up after the message timeout the
    client really runs with (client_overrides win), and ``grace_s``, not the configured one."""
    clock = [1000.0]

    class Silent(FakeProducer):
        def flush(self, timeout=None):
            clock[0] += timeout
            return len(self.queue)

    monkeypatch.setattr("monitor.canary.writer.time.monotonic", lambda: clock[0])
    w, _log, _ = _setup(WriterConfig(name="w", rate=0, message_timeout_ms=45000, client_overrides=overrides),
                        producer_cls=Silent)
    w.producer.produce("canary", b"x", partition=0)
    w.drain(grace_s=3)
    assert clock[0] - 1000.0 == pytest.approx(waited_s + 3, abs=1.0)


def test_intent_is_durable_before_the_records_are_sent():
    w, log, _ = _setup(WriterConfig(name="w", rate=0))
    seen_intents = []
    original = w.send

    def send(p, seq, *a, **k):
        intents = [e.body for e in map(decode, log.get(("ledger", 0), [])) if isinstance(e.body, Intent)]
        seen_intents.append(any(r.partition == p and r.first_seq <= seq < r.first_seq + r.count
                                for i in intents for r in i.writes))
        return original(p, seq, *a, **k)

    w.send = send
    w.run(threading.Event(), max_records=9)
    assert seen_intents and all(seen_intents)


def test_errors_are_classified_and_seqs_never_reused():
    def fail(topic, partition, value):
        seq = record_format.decode(value).seq
        if partition == 1 and seq % 2 == 0:
            return KafkaError(KafkaError._MSG_TIMED_OUT)
        if partition == 2 and seq == 1:
            return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        return None

    w, log, _ = _setup(WriterConfig(name="w", rate=0), fail=fail)
    w.run(threading.Event(), max_records=12)
    book = _book(log)
    outcomes = collections.Counter(st.outcome for st in book.writes.values())
    assert outcomes == {WriteOutcome.ACKED: 9, WriteOutcome.INDETERMINATE: 2, WriteOutcome.FAILED: 1}
    assert book.writes[WriteKey("TID", 1, w.identity.writer_id, 4, 0)].error == "_MSG_TIMED_OUT"
    # the ambiguous seqs were not reused: every planned seq is distinct per partition
    assert sorted(k.seq for k in book.writes if k.partition == 1) == [0, 1, 2, 3]


def test_writes_an_acl_refuses_are_failed_and_reported_as_refused():
    """librdkafka says a missing ACL in the delivery report only (not to error_cb): the writer
    hands those to ``on_refused`` (monitor.client_errors: the line and the metric)."""
    def fail(topic, partition, value):
        return KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED) if partition == 0 else None

    w, log, _ = _setup(WriterConfig(name="w", rate=0), fail=fail)
    refused = []
    w.on_refused = refused.append
    w.run(threading.Event(), max_records=9)
    outcomes = collections.Counter(st.outcome for st in _book(log).writes.values())
    assert outcomes == {WriteOutcome.ACKED: 6, WriteOutcome.FAILED: 3}
    assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3


def test_acks0_is_unconfirmed():
    w, log, _ = _setup(WriterConfig(name="w", rate=0, acks="0", idempotence=False))
    w.run(threading.Event(), max_records=6)
    assert {st.outcome for st in _book(log).writes.values()} == {WriteOutcome.UNCONFIRMED}


class FakeTxnProducer(FakeProducer):
    def __init__(self, *a, commit_error=None, **k):
        super().__init__(*a, **k)
        self.commit_error = commit_error
        self.txn_calls = []

    def init_transactions(self, timeout=None):
        self.txn_calls.append("init")

    def begin_transaction(self):
        self.txn_calls.append("begin")

    def commit_transaction(self, timeout=None):
        self.txn_calls.append("commit")
        if self.commit_error is not None:
            from confluent_kafka import KafkaException
            raise KafkaException(self.commit_error)

    def abort_transaction(self, timeout=None):
        self.txn_calls.append("abort")


def test_transactional_writer_records_intents_and_outcomes():
    cfg = WriterConfig(name="t", transactional=True, rate=0)
    log = {}
    ident = WriterIdentity("inst", 1, 99)
    ledger = LedgerWriter(FakeProducer(log), "ledger", "inst", 99, 1)
    prods = []

    def factory(_cb):
        prods.append(FakeTxnProducer(log))
        return prods[-1]

    w = TransactionalWriter(cfg, TOPIC, ident, ledger, factory, rng=random.Random(1))
    w.run(threading.Event(), max_records=40)
    book = _book(log)
    assert len(book.txns) == 10
    assert sum(t.outcome is TxnOutcome.ABORTED for t in book.txns.values()) == w.txn_counts[TxnOutcome.ABORTED] > 0
    assert all(t.outcome in (TxnOutcome.COMMITTED, TxnOutcome.ABORTED) for t in book.txns.values())
    for t in book.txns.values():
        assert len(t.writes) == 4 and len({k.partition for k in t.writes}) == 3  # spans partitions
        assert t.intended_abort == (t.outcome is TxnOutcome.ABORTED)
    assert prods[0].txn_calls[0] == "init"


def test_a_transactional_writer_records_how_late_its_outcomes_may_come_and_the_others_do_not():
    """Its records' outcomes reach the ledger when the transaction ends: after the drain (the
    message timeout the client runs with, and 5 s) and the commit or abort, each try bounded by
    transaction.timeout.ms, up to 3 (Checker._ledger_behind waits that long for one)."""
    cfg = WriterConfig(name="t", transactional=True, rate=0, message_timeout_ms=20000,
                       client_overrides={"message.timeout.ms": "25000"}, transaction={"timeout_ms": 10000})
    w, log, _ = _setup(cfg, cls=TransactionalWriter, producer_cls=FakeTxnProducer, rng=random.Random(1))
    w.run(threading.Event(), max_records=8)
    w.checkpoint()
    recorded = [e.body.settings.outcome_within_ms for e in map(decode, log[("ledger", 0)])
                if e.kind in ("start", "checkpoint")]
    assert len(recorded) >= 2 and set(recorded) == {25000 + 5000 + 3 * 10000}
    plain, plain_log, _ = _setup(WriterConfig(name="w", rate=0))
    plain.run(threading.Event(), max_records=3)
    (start,) = [e for e in map(decode, plain_log[("ledger", 0)]) if e.kind == "start"]
    assert start.body.settings.outcome_within_ms == 0  # (its message timeout bounds them)


def test_a_transactional_writer_asked_for_a_count_its_transactions_do_not_divide_writes_exactly_that_many():
    cfg = WriterConfig(name="t", transactional=True, rate=0, transaction={"size": 4})
    log = {}
    ledger = LedgerWriter(FakeProducer(log), "ledger", "inst", 99, 1)
    w = TransactionalWriter(cfg, TOPIC, WriterIdentity("inst", 1, 99), ledger, lambda _cb: FakeTxnProducer(log),
                            rng=random.Random(1))
    w.run(threading.Event(), max_records=10)  # it waited forever for 2 records to make a transaction of 4
    book = _book(log)
    assert w.planned == 10 and sorted(len(t.writes) for t in book.txns.values()) == [2, 4, 4]


def test_commit_that_never_returns_is_indeterminate_and_producer_renewed():
    cfg = WriterConfig(name="t", transactional=True, rate=0, transaction={"abort_ratio": 0.0, "size": 2})
    log = {}
    ledger = LedgerWriter(FakeProducer(log), "ledger", "inst", 5, 1)
    prods = []

    def factory(_cb):
        prods.append(FakeTxnProducer(log, commit_error=KafkaError(KafkaError._FATAL, fatal=True)
                                     if not prods else None))
        return prods[-1]

    w = TransactionalWriter(cfg, TOPIC, WriterIdentity("inst", 1, 5), ledger, factory, rng=random.Random(0))
    w.run(threading.Event(), max_records=4)
    book = _book(log)
    assert book.txns[(5, 1, 1)].outcome is TxnOutcome.INDETERMINATE
    assert book.txns[(5, 1, 2)].outcome is TxnOutcome.COMMITTED
    assert len(prods) == 2


class DyingProducer(FakeProducer):
    """A producer whose fatal error surfaces as confluent-kafka surfaces it: poll/flush raise (a
    SystemError from the callbacks run with the fatal error pending) and nothing more is delivered."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.dead = False

    def _deliver(self):
        if self.dead:
            raise SystemError("<class 'monitor.record_format.CanaryRecord'> returned a result with an exception set")
        return super()._deliver()

    def purge(self, **_kw):
        self.queue.clear()


def test_a_producer_that_dies_fatally_is_renewed_and_its_writes_in_flight_are_indeterminate():
    w, log, producers = _setup(WriterConfig(name="w", rate=0), producer_cls=DyingProducer)
    w.start()
    w.step(6, threading.Event())
    producers[0].dead = True  # the fatal error: nothing of these is reported
    w.step(6, threading.Event())
    w.finish()  # must not crash; renews the producer
    book = _book(log)
    outcomes = collections.Counter(st.outcome for st in book.writes.values())
    assert outcomes == {WriteOutcome.ACKED: 6, WriteOutcome.INDETERMINATE: 6}
    assert len(producers) == 2 and w.in_flight == 0
    assert {st.error for st in book.writes.values() if st.outcome is WriteOutcome.INDETERMINATE} == {
        "_FATAL: producer renewed with it in flight"}


class RefusingProducer(DyingProducer):
    def produce(self, *a, **k):
        if self.dead:
            from confluent_kafka import KafkaException

            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error",
                                            fatal=True))
        return super().produce(*a, **k)


def test_writes_a_dead_producer_refuses_are_failed_and_the_writer_carries_on():
    w, log, producers = _setup(WriterConfig(name="w", rate=0), producer_cls=RefusingProducer)
    w.start()
    producers[0].dead = True
    w.step(4, threading.Event())  # refused: never written
    w._replace_producer_if_fatal()
    w.step(3, threading.Event())  # the renewed producer writes
    w.finish()
    outcomes = collections.Counter(st.outcome for st in _book(log).writes.values())
    assert outcomes == {WriteOutcome.FAILED: 4, WriteOutcome.ACKED: 3} and w.in_flight == 0


def _drive(w, steps, per_step=6):
    """The writer's loop, step by step: follow the topic, then write ``per_step`` records."""
    stop = threading.Event()
    w.start()
    for _ in range(steps):
        if w.follow_topic():
            w.step(per_step, stop)
        w.flush_outcomes(force=True)
    w.finish()


class ScriptedObserver:
    """What the writer's topic observer reports, as a function of how far the writer got."""

    def __init__(self, view_at):
        self.view_at = view_at
        self.writer = None
        self.refreshes = 0
        self.listings = 0

    @property
    def latest(self):
        return self.view_at(self.writer.planned)

    def refresh(self):
        self.refreshes += 1
        return self.latest

    def list_log_starts(self, info, timeout):
        self.listings += 1
        return self.latest.log_starts


def _view(info=None, missing=False, starts=()):
    from monitor.canary.topic_watch import TopicView

    return TopicView(info, None, 0.0, missing, starts)


def _ledger_bodies(log):
    return [decode(v).body for v in log.get(("ledger", 0), [])]


def test_a_topic_recreated_under_the_writer_is_written_to_under_its_new_id_with_seqs_still_growing():
    from invariants.ledger_format import Start

    new = TopicInfo("canary", "TID2", 3, {0: 1, 1: 2, 2: 3})
    obs = ScriptedObserver(lambda planned: _view(TOPIC if planned < 9 else new, starts=(0, 0, 0)))
    w, log, producers = _setup(WriterConfig(name="w", rate=0), observer=obs)
    obs.writer = w
    _drive(w, 4)
    starts = [b for b in _ledger_bodies(log) if isinstance(b, Start)]
    assert [(s.topic_id, s.replaces) for s in starts] == [("TID", ""), ("TID2", "TID")]
    intents = [b for b in _ledger_bodies(log) if isinstance(b, Intent)]
    assert {i.topic_id for i in intents[:1]} == {"TID"} and intents[-1].topic_id == "TID2"
    seqs = {p: [record_format.decode(v).seq for v in log[("canary", p)]] for p in range(3)}
    assert all(s == sorted(set(s)) for s in seqs.values())  # never reused across the two IDs
    assert len(producers) == 2  # the producer of the old topic was replaced before the switch
    book = _book(log)
    assert {k.topic_id for k in book.writes} == {"TID", "TID2"} and w.in_flight == 0


def test_a_missing_topic_is_created_again_and_nothing_is_written_while_it_is_missing():
    from invariants.ledger_format import Start
    import monitor.canary.topic_following as writer_module

    new = TopicInfo("canary", "TID3", 3, {0: 1, 1: 2, 2: 3})
    state = {"missing": False, "created": 0, "refuse": True, "exists": False}

    def recreate():
        state["created"] += 1
        if state["refuse"]:
            raise RuntimeError("no broker answered")
        state["exists"] = True
        return new

    obs = ScriptedObserver(lambda planned: _view(new) if state["exists"] else
                           _view(None, missing=True) if state["missing"] else _view(TOPIC))
    w, log, _ = _setup(WriterConfig(name="w", rate=0), observer=obs, recreate=recreate)
    obs.writer = w
    stop = threading.Event()
    w.start()
    w.step(6, stop)
    state["missing"] = True
    assert not w.follow_topic() and state["created"] == 1  # creating it failed: write nothing
    assert not w.follow_topic() and state["created"] == 1  # and do not hammer the cluster
    state["refuse"] = False
    w._last_recreate -= writer_module.RECREATE_EVERY_S
    assert w.follow_topic() and state["created"] == 2 and w.topic == new
    w.step(3, stop)
    w.finish()
    assert [(s.topic_id, s.replaces) for s in _ledger_bodies(log) if isinstance(s, Start)] == [
        ("TID", ""), ("TID3", "TID")]
    assert w.planned == 9


def test_new_partitions_are_written_to_once_the_producer_knows_them():
    from invariants.ledger_format import Start

    grown = TopicInfo("canary", "TID", 5, {p: 1 for p in range(5)})
    obs = ScriptedObserver(lambda planned: _view(TOPIC if planned < 6 else grown))
    w, log, producers = _setup(WriterConfig(name="w", rate=0), observer=obs)
    obs.writer = w
    listed = []
    producers[0].list_topics = lambda topic, timeout: listed.append(topic)
    _drive(w, 4, per_step=5)
    assert listed == ["canary"]
    assert [(s.partitions, s.topic_id) for s in _ledger_bodies(log) if isinstance(s, Start)] == [(3, "TID"), (5, "TID")]
    assert {p for (t, p) in log if t == "canary"} == {0, 1, 2, 3, 4}
    assert [record_format.decode(v).seq for v in log[("canary", 4)]] == list(range(len(log[("canary", 4)])))


def test_a_record_the_client_refuses_without_a_fatal_error_is_failed_and_the_producer_kept():
    from confluent_kafka import KafkaException

    w, log, producers = _setup(WriterConfig(name="w", rate=0))
    original = producers[0].produce

    def produce(topic, value=None, key=None, partition=0, on_delivery=None):
        if partition == 2:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        return original(topic, value, key, partition, on_delivery)

    producers[0].produce = produce
    w.run(threading.Event(), max_records=9)
    assert len(producers) == 1 and w.counts[WriteOutcome.FAILED] == 3 and w.counts[WriteOutcome.ACKED] == 6


def test_checkpoints_carry_the_log_starts_of_the_topic_written_to():
    from invariants.ledger_format import Checkpoint

    obs = ScriptedObserver(lambda planned: _view(TOPIC, starts=(4, 0, 9)))
    w, log, _ = _setup(WriterConfig(name="w", rate=0), observer=obs)
    obs.writer = w
    w.checkpoint()
    cp = [b for b in _ledger_bodies(log) if isinstance(b, Checkpoint)][-1]
    assert cp.log_starts == (4, 0, 9)


def test_the_topic_observer_remembers_the_most_partitions_for_a_recreation(monkeypatch):
    from monitor import clients
    from monitor.canary.topic_watch import TopicObserver

    seen = [TopicInfo("c", "A", 2, {0: 1, 1: 2}, 3), TopicInfo("c", "A", 3, {0: 1, 1: 2, 2: 3}, 3), None]
    monkeypatch.setattr(clients, "describe_topic", lambda *_a, **_k: seen.pop(0))
    monkeypatch.setattr(clients, "topic_exists", lambda *_a, **_k: False)
    monkeypatch.setattr(clients, "topic_settings", lambda *_a, **_k: None)
    monkeypatch.setattr(clients, "log_starts", lambda *_a, **_k: ())
    observer = TopicObserver(object(), "c")
    for _ in range(3):
        observer.refresh()
    assert observer.latest.missing and observer.most_partitions == 3  # an operator added one, then it vanished


class ZeroAckingProducer(FakeProducer):
    """Acknowledges the record it appends at offset 3 of partition 0 as if it sat at offset 0."""

    def reported_offset(self, partition, offset):
        return 0 if (partition, offset) == (0, 3) else offset


def _outcome_runs(log):
    from invariants.ledger_format import Outcomes

    return [r for b in _ledger_bodies(log) if isinstance(b, Outcomes) for r in b.runs]


def test_an_ack_at_0_or_backwards_is_followed_by_a_listing_of_the_log_start_recorded_with_it():
    # offset 0 of partition 0 deleted by retention once the writer got that far (the listing says so)
    obs = ScriptedObserver(lambda planned: _view(TOPIC, starts=(0, 0, 0) if planned <= 6 else (2, 0, 0)))
    w, log, _ = _setup(WriterConfig(name="w", rate=0), producer_cls=ZeroAckingProducer, observer=obs)
    obs.writer = w
    _drive(w, steps=4)
    listed = {(r.partition, r.first_seq): r.log_start_after for r in _outcome_runs(log) if r.log_start_after >= 0}
    # the first ack of each partition (at 0: legitimately, the log was new) and the bogus one
    assert listed == {(0, 0): 0, (1, 0): 0, (2, 0): 0, (0, 3): 2}
    assert obs.listings == 2  # one listing per flush that had suspect acks, not one per ack
    audit = _book(log)
    bogus = [k for k, st in audit.writes.items() if st.offset < st.log_start_after]
    assert [(k.partition, k.seq) for k in bogus] == [(0, 3)]


def test_a_listing_that_fails_records_nothing_and_is_counted():
    from prometheus_client import CollectorRegistry

    from monitor.metrics import producer_metrics

    obs = ScriptedObserver(lambda planned: _view(TOPIC, starts=()))
    metrics = producer_metrics(CollectorRegistry())
    w, log, _ = _setup(WriterConfig(name="w", rate=0), producer_cls=ZeroAckingProducer, observer=obs, metrics=metrics)
    obs.writer = w
    _drive(w, steps=4)
    assert all(r.log_start_after == -1 for r in _outcome_runs(log))
    assert metrics.errors.labels("w", "list_offsets")._value.get() == 2


def test_a_stop_while_the_coordinator_never_answers_ends_the_writer_cleanly():
    """init_transactions timing out until the run stops (a coordinator down for the rest of a chaos
    run): the writer stops as asked — no exception, no write — instead of failing the run."""
    from confluent_kafka import KafkaException

    cfg = WriterConfig(name="t", transactional=True, rate=0)
    log = {}
    ledger = LedgerWriter(FakeProducer(log), "ledger", "inst", 7, 1)
    stop = threading.Event()

    class NoCoordinator(FakeTxnProducer):
        def init_transactions(self, timeout=None):
            self.txn_calls.append("init")
            if len(self.txn_calls) >= 3:
                stop.set()
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish"))

    prods = []

    def factory(_cb):
        prods.append(NoCoordinator(log))
        return prods[-1]

    w = TransactionalWriter(cfg, TOPIC, WriterIdentity("inst", 1, 7), ledger, factory, rng=random.Random(0))
    w.run(stop, max_records=8)
    book = _book(log)
    assert prods[0].txn_calls == ["init"] * 3 and not book.txns and not book.writes


def test_a_writer_plans_no_more_than_it_is_allowed_and_goes_on_when_allowed_more():
    """The bench's pre-fill keeps its writers side by side (monitor.bench.side_by_side)."""
    w, log, _ = _setup(WriterConfig(name="w", rate=0))
    asked = []

    def allowed() -> int:
        asked.append(w.planned)
        return 12 if len(asked) < 20 else 30  # held at 12 for a while, then let through

    w.run(threading.Event(), max_records=30, allowed=allowed)
    assert w.planned == 30
    assert max(n for n in asked[:19]) == 12  # never past what it was allowed
    assert sum(len(log[("canary", p)]) for p in range(3)) == 30
