import pytest
from confluent_kafka import KafkaError

from monitor.outcomes import WriteOutcome, classify_delivery, classify_error_code


def test_acked_unconfirmed():
    assert classify_delivery(None, 42, "all").outcome is WriteOutcome.ACKED
    assert classify_delivery(None, 42, "all").offset == 42
    assert classify_delivery(None, -1, "0").outcome is WriteOutcome.UNCONFIRMED
    assert classify_delivery(None, -1001, "1").outcome is WriteOutcome.INDETERMINATE


@pytest.mark.parametrize("code", [
    KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError._PURGE_INFLIGHT, KafkaError._TRANSPORT, KafkaError._FATAL,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError.PRODUCER_FENCED, 12345,
])
def test_ambiguous_errors_are_indeterminate(code):
    assert classify_error_code(code) is WriteOutcome.INDETERMINATE


@pytest.mark.parametrize("code", [
    KafkaError._PURGE_QUEUE, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._UNKNOWN_PARTITION, KafkaError.INVALID_RECORD,
])
def test_proven_non_appends_are_failed(code):
    assert classify_error_code(code) is WriteOutcome.FAILED


def test_error_name_is_kept():
    c = classify_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), None, "all")
    assert c.outcome is WriteOutcome.INDETERMINATE and c.error == "_MSG_TIMED_OUT" and c.offset == -1
