import threading

from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from monitor.canary.writer import CanaryWriter
from monitor.clients import TopicInfo
from monitor.config import WriterConfig
from monitor.identity import WriterIdentity
from monitor.ledger import LedgerWriter
from monitor.metrics import PRODUCER_ERROR_KINDS, WRITE_OUTCOMES, producer_metrics
from tests.unit.fakes import FakeProducer


def test_series_exist_from_the_start_and_count_outcomes():
    registry = CollectorRegistry()
    metrics = producer_metrics(registry)
    log = {}

    def fail(topic, partition, value):
        return KafkaError(KafkaError._MSG_TIMED_OUT) if partition == 0 else None

    writer = CanaryWriter(WriterConfig(name="w", rate=0), TopicInfo("c", "T", 2, {}),
                          WriterIdentity("i", 3, 1), LedgerWriter(FakeProducer(log), "l", "i", 1, 3),
                          lambda _cb: FakeProducer(log, fail=fail), metrics)
    for outcome in WRITE_OUTCOMES:
        assert registry.get_sample_value("vigil_producer_writes_total", {"writer": "w", "outcome": outcome}) == 0
    for kind in PRODUCER_ERROR_KINDS:
        assert registry.get_sample_value("vigil_producer_errors_total", {"writer": "w", "kind": kind}) == 0
    assert registry.get_sample_value("vigil_producer_incarnation", {"writer": "w"}) == 3

    writer.run(threading.Event(), max_records=10)
    sample = registry.get_sample_value
    assert sample("vigil_producer_writes_total", {"writer": "w", "outcome": "acked"}) == 5
    assert sample("vigil_producer_writes_total", {"writer": "w", "outcome": "indeterminate"}) == 5
    assert sample("vigil_producer_ack_latency_seconds_count", {"writer": "w"}) == 5
    assert sample("vigil_producer_last_ack_timestamp_seconds", {"writer": "w"}) > 1.7e9
