"""The evidence topic: a record it refuses is counted and said, the file keeps every line."""

from __future__ import annotations

from confluent_kafka import KafkaError

from invariants.catalog import Invariant, Isolation
from invariants.model import Violation
from monitor.client_errors import ClientErrors
from monitor.watch.evidence import EvidenceLog


class RefusingProducer:
    """Delivers nothing: every delivery report says the topic's Write ACL is missing."""

    def __init__(self) -> None:
        self.reports = []

    def produce(self, topic, key=None, value=None, on_delivery=None):
        self.reports.append(on_delivery)

    def flush(self, _timeout=None):
        for report in self.reports:
            report(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed"), None)
        self.reports = []
        return 0


def test_records_the_evidence_topic_refuses_are_counted_and_said_once_and_the_file_keeps_them(tmp_path):
    said: list[str] = []
    errors = ClientErrors(say=said.append)
    log = EvidenceLog(tmp_path / "evidence.jsonl", RefusingProducer(), "vigil-evidence",
                      errors.callback("evidence", "kafka.security", "vigil-canary"))
    lost = [Violation(Invariant.LOST_WRITE, Isolation.READ_COMMITTED, "tid", 1, (7,), (1, 0), seq=3),
            Violation(Invariant.DUPLICATE, Isolation.READ_UNCOMMITTED, "tid", 2, (8, 9), (1, 0), seq=4)]
    size = log.write(0, lost, 0, {}, lambda _t: "canary", lambda _t, _p: 1, now=1000.0)
    assert len(log.path.read_text().splitlines()) == 2 and size == log.path.stat().st_size
    assert errors.snapshot() == {("evidence", "authorization"): 3,  # two lines and the end marker
                                 ("evidence", "authentication"): 0, ("evidence", "tls"): 0}
    assert len(said) == 1 and said[0].startswith("vigil: evidence: an ACL does not allow this to 'vigil-canary'")
