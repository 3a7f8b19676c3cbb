"""Errors the Kafka clients report: counted per client and kind, the ones to act on said once a
minute naming the setting, never a secret."""

from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry, generate_latest

from monitor import clients
from monitor.client_errors import ClientErrors, classify
from monitor.config import parse
from monitor.metrics import ClientErrorsCollector

AUTH = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed during "
                  "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
ACL = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")


def test_kinds():
    assert classify(AUTH) == "authentication" and classify(ACL) == "authorization"
    assert classify(KafkaError(KafkaError._TRANSPORT)) == "transport"
    assert classify(KafkaError(KafkaError._SSL)) == "tls" and classify(KafkaError(KafkaError._FAIL)) == "other"


def test_an_authentication_failure_is_one_line_a_minute_naming_the_settings_and_every_one_is_counted():
    said: list[str] = []
    errors = ClientErrors(say=said.append)
    for t in (0.0, 1.0, 30.0, 61.0):
        errors.report("prober", AUTH, "kafka.security", "vigil-canary", now=t)
    errors.report("prober", KafkaError(KafkaError._TRANSPORT, "down"), now=62.0)
    assert errors.snapshot() == {("prober", "authentication"): 4, ("prober", "transport"): 1}
    assert len(said) == 2  # at 0 and 61; transport errors are counted, not said
    assert said[0].startswith("vigil: prober: ") and "kafka.security.sasl_password" in said[0]
    assert "'vigil-canary'" in said[0] and "\n" not in said[0]
    errors.report("writer-txn", ACL, "kafka.security", "vigil-canary", now=0.0)
    assert "ACL" in said[-1] and said[-1].startswith("vigil: writer-txn: ")


def test_every_client_reports_under_its_name_and_the_ledgers_settings_are_named_for_the_ledger():
    cfg = parse({"kafka": {"security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                        "sasl_username": "canary", "sasl_password": "pw-not-shown"}},
                 "ledger": {"kafka": {"bootstrap_servers": "ledger:9092", "security": {
                     "protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "led",
                     "sasl_password": "pw2"}}}}, "t.yaml")
    said: list[str] = []
    errors = ClientErrors(say=said.append)
    original, clients.ERRORS = clients.ERRORS, errors
    try:
        seen = []
        conf = clients.reporting({}, "ledger", cfg, ledger=True, also=seen.append)
        conf["error_cb"](AUTH)
        assert seen == [AUTH] and "ledger.kafka.security.sasl_username" in said[-1] and "'led'" in said[-1]
        clients.reporting({}, "admin", cfg)["error_cb"](AUTH)
        assert said[-1].startswith("vigil: admin: ") and "'canary'" in said[-1]
    finally:
        clients.ERRORS = original
    assert not any("pw" in line for line in said)
    registry = CollectorRegistry()
    registry.register(ClientErrorsCollector(errors.snapshot))
    text = generate_latest(registry).decode()
    assert 'vigil_client_errors_total{client="ledger",kind="authentication"} 1.0' in text


def test_a_spark_query_ended_by_a_refusal_is_counted_under_spark_with_the_java_line():
    from monitor.client_errors import classify_java

    text = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to stage failure\n"
            "Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512\n\tat org.apache.kafka...")
    kind, line = classify_java(text)
    assert kind == "authentication"
    assert line.startswith("org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed")
    assert classify_java("x org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized")[0] == \
        "authorization"
    assert classify_java("Caused by: org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake")[0] == \
        "tls"
    assert classify_java("org.apache.kafka.common.errors.TimeoutException: Timed out waiting") is None
    said = []
    errors = ClientErrors(said.append)
    errors.report_kind("spark", kind, line, "kafka.security", "vigil-canary", now=0.0)
    errors.report_kind("spark", kind, line, "kafka.security", "vigil-canary", now=1.0)
    assert errors.snapshot() == {("spark", "authentication"): 2} and len(said) == 1
    assert said[0].startswith("vigil: spark: the brokers refused the credentials of 'vigil-canary'")


def test_a_client_with_a_callback_exports_its_alerting_kinds_from_zero():
    """An alert on increase() sees nothing of a series that first appears at 1: the kinds an
    operator must act on are exported at 0 for every client from the moment it has a callback."""
    errors = ClientErrors(say=lambda _line: None)
    assert errors.snapshot() == {}
    on_error = errors.callback("writer-txn")
    assert errors.snapshot() == {("writer-txn", k): 0 for k in ("authentication", "authorization", "tls")}
    on_error(AUTH)
    assert errors.snapshot()[("writer-txn", "authentication")] == 1
    registry = CollectorRegistry()
    registry.register(ClientErrorsCollector(errors.snapshot))
    text = generate_latest(registry).decode()
    assert 'vigil_client_errors_total{client="writer-txn",kind="tls"} 0.0' in text
