"""Every Prometheus metric Vigil exports, created against a registry passed in.

Label sets are bounded: ``writer`` takes the configured writer names, ``outcome`` the outcome
vocabulary, ``kind`` a fixed list. Every error series is initialised to 0 at start so that
rate/increase and absent()-style alerts work from the first scrape.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from monitor.outcomes import TxnOutcome, WriteOutcome

WRITE_OUTCOMES = [o.value for o in WriteOutcome if o is not WriteOutcome.PENDING]
TXN_OUTCOMES = [o.value for o in TxnOutcome if o is not TxnOutcome.PENDING]
PRODUCER_ERROR_KINDS = ["init_producer_id", "transaction", "fatal", "client", "queue_full"]
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass
class ProducerMetrics:
    writes: Counter
    latency: Histogram
    transactions: Counter
    errors: Counter
    last_ack: Gauge
    incarnation: Gauge

    def init_writer(self, writer: str, transactional: bool) -> None:
        for outcome in WRITE_OUTCOMES:
            self.writes.labels(writer, outcome)
        for kind in PRODUCER_ERROR_KINDS:
            self.errors.labels(writer, kind)
        if transactional:
            for outcome in TXN_OUTCOMES:
                self.transactions.labels(writer, outcome)
        self.latency.labels(writer)
        self.last_ack.labels(writer)


def producer_metrics(registry: CollectorRegistry) -> ProducerMetrics:
    return ProducerMetrics(
        writes=Counter(
            "vigil_producer_writes", "Canary writes by final outcome as the client reported it "
            "(acked, failed, indeterminate, unconfirmed).", ["writer", "outcome"], registry=registry),
        latency=Histogram(
            "vigil_producer_ack_latency_seconds", "Time from send to acknowledgement of acked canary writes.",
            ["writer"], buckets=LATENCY_BUCKETS, registry=registry),
        transactions=Counter(
            "vigil_producer_transactions", "Canary transactions by outcome (committed/aborted only when the "
            "call returned, else indeterminate).", ["writer", "outcome"], registry=registry),
        errors=Counter(
            "vigil_producer_errors", "Producer errors by kind: init_producer_id (InitProducerId failed), "
            "transaction (begin/commit/abort failed), fatal (producer had to be recreated), client "
            "(other client errors), queue_full.", ["writer", "kind"], registry=registry),
        last_ack=Gauge(
            "vigil_producer_last_ack_timestamp_seconds", "Wall-clock time of the last acknowledged canary write.",
            ["writer"], registry=registry),
        incarnation=Gauge(
            "vigil_producer_incarnation", "Current incarnation number of the writer instance.", ["writer"],
            registry=registry),
    )
