"""The transactional canary writer: transactions that span partitions, some aborted on purpose.

Each step is one transaction of ``transaction.size`` records, spread round-robin over the
partitions. Its intent (with the transaction id, size and whether it is meant to be aborted)
is durable before ``begin_transaction``; before each ``init_transactions`` (the first, and after a
producer was replaced) an ``init`` entry says it is initialising. All records are flushed (so every one has a delivery
report and is in the log) before ``commit_transaction`` or ``abort_transaction``: an aborted
canary transaction really leaves aborted records for ``read_committed`` readers to skip.

The transaction outcome is ``committed`` or ``aborted`` only when that call returned. An
abortable error leads to ``abort_transaction`` (outcome ``aborted`` if it returns); a
retriable commit error is retried; anything else — or a call that never returned — is
``indeterminate``, and the Kafka producer is replaced (a new ``init_transactions`` fences the
old one and completes or aborts what it left open).
"""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from typing import Any, Callable

from confluent_kafka import KafkaException

from invariants.ledger_format import Init, OpenTxn, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome, WriterSettings
from monitor import record_format
from monitor.canary.topic_watch import TopicObserver
from monitor.canary.writer import CanaryWriter
from monitor.clients import TopicInfo, TransactionalProducerLike
from monitor.config import WriterConfig
from monitor.identity import WriterIdentity
from monitor.ledger import LedgerWriter, now_us
from monitor.metrics import ProducerMetrics

COMMIT_RETRIES = 3
DRAIN_GRACE_S = 5  # beyond message.timeout.ms, for the delivery reports before the commit or abort


class TransactionalWriter(CanaryWriter):
    producer: TransactionalProducerLike

    def __init__(self, cfg: WriterConfig, topic: TopicInfo, identity: WriterIdentity, ledger: LedgerWriter,
                 producer_factory: Callable[[Callable[[Any], None]], TransactionalProducerLike],
                 metrics: ProducerMetrics | None = None, rng: random.Random | None = None,
                 observer: TopicObserver | None = None, checkpoint_s: float = 10.0,
                 recreate: Callable[[], TopicInfo] | None = None) -> None:
        super().__init__(cfg, topic, identity, ledger, producer_factory, metrics, observer, checkpoint_s, recreate)
        self.rng = rng or random.Random()
        self.txn_seq = 0
        self.txn_counts: dict[TxnOutcome, int] = {o: 0 for o in TxnOutcome}
        self._timeout = cfg.transaction.timeout_ms / 1000
        self._initialised = False

    def settings(self) -> WriterSettings:
        """With the longest a record's outcome may take to reach the ledger: its outcomes are recorded
        when the transaction ends — after the records' delivery reports (the drain) and the commit or
        abort, each call bounded by transaction.timeout.ms and tried up to COMMIT_RETRIES times."""
        bound_ms = (self.cfg.effective_message_timeout_ms + DRAIN_GRACE_S * 1000
                    + COMMIT_RETRIES * self.cfg.transaction.timeout_ms)
        return replace(super().settings(), outcome_within_ms=bound_ms)

    def records_per_step(self) -> int:
        return self.cfg.transaction.size

    def _init_transactions(self, stop: threading.Event) -> bool:
        """``init_transactions`` until it succeeds (True) or the writer is asked to stop (False:
        nothing was sent, nothing is pending — a stop, not a failure); an ``init`` ledger entry
        first, so a coordinator that never answers shows as ``producer_stalled``."""
        if self._initialised:
            return True
        self.ledger.append(Init())
        backoff = 0.5
        while not self._initialised:
            try:
                self.producer.init_transactions(self._timeout)
                self._initialised = True
            except KafkaException as exc:
                self._count_error("init_producer_id")
                if exc.args[0].fatal():
                    self._renew_producer()
                if stop.wait(backoff):
                    return False
                backoff = min(backoff * 2, 10.0)
        return True

    def _renew_producer(self, reason: str | None = None) -> None:
        super()._renew_producer(reason)
        self._initialised = False

    def step(self, due: int, stop: threading.Event) -> None:
        if not self._init_transactions(stop):
            return
        size = min(self.cfg.transaction.size, due)  # (smaller only for the last of a run with max_records)
        writes = self.plan(size)
        self.txn_seq += 1
        abort = self.rng.random() < self.cfg.transaction.abort_ratio
        self.open_txn = OpenTxn(self.txn_seq, size, abort, self.intent_ranges(writes))
        self.intend(writes, TxnInfo(self.txn_seq, size, abort), stop)
        outcome, error = self._run_transaction(writes, self.txn_seq, abort)
        self._serve(0)
        self.flush_outcomes(force=True)
        self.ledger.append(TxnEnd(self.txn_seq, outcome, error))
        self.open_txn = None
        self.txn_counts[outcome] += 1
        if self.metrics is not None:
            self.metrics.transactions.labels(self.cfg.name, outcome.value).inc()

    def _run_transaction(self, writes: list[tuple[int, int]], txn_id: int, abort: bool) -> tuple[TxnOutcome, str | None]:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            self._count_error("transaction")
            for p, seq in writes:
                self._record(p, seq, WriteOutcome.FAILED, -1, now_us(), "not sent: begin_transaction failed")
            self._renew_producer()
            return TxnOutcome.INDETERMINATE, exc.args[0].name()
        flags = record_format.FLAG_TRANSACTIONAL | (record_format.FLAG_INTENDED_ABORT if abort else 0)
        for index, (p, seq) in enumerate(writes):
            self.send(p, seq, flags, txn_id, len(writes), index)
        self.drain(DRAIN_GRACE_S)
        return self._end_transaction(abort)

    def _end_transaction(self, abort: bool) -> tuple[TxnOutcome, str | None]:
        error: str | None = None
        for _attempt in range(COMMIT_RETRIES):
            try:
                if abort:
                    self.producer.abort_transaction(self._timeout)
                    return TxnOutcome.ABORTED, error
                self.producer.commit_transaction(self._timeout)
                return TxnOutcome.COMMITTED, error
            except KafkaException as exc:
                err = exc.args[0]
                self._count_error("transaction")
                error = err.name()
                if err.txn_requires_abort() and not abort:
                    abort = True
                    continue
                if err.retriable():
                    continue
                break
        self._renew_producer()
        return TxnOutcome.INDETERMINATE, error
