"""How a client error maps onto the outcome vocabulary (the client-error table).

The vocabulary itself (``WriteOutcome``, ``TxnOutcome``) belongs to the ledger's wire format,
:mod:`invariants.ledger_format`. Outcomes of a single write:

``acked``
    the broker acknowledged the write at a known offset.
``failed``
    definitely not written: the client gave up before sending, or the broker rejected the
    whole request with a non-retriable error that proves no append happened.
``indeterminate``
    may or may not be in the log: request or message timeouts, a transport error with the
    request in flight, ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``, purged in-flight requests, a
    producer that died (or was fenced) with the write in flight.
``unconfirmed``
    sent with ``acks=0``: the client never learns whether the broker has it.

A transaction is ``committed`` or ``aborted`` only when ``commit_transaction`` or
``abort_transaction`` returned; otherwise it is ``indeterminate`` (``TxnOutcome``), and the
checker decides it later from what a ``read_committed`` reader sees.

The error table
---------------
librdkafka retries retriable errors by itself until ``message.timeout.ms`` expires, so the
error in a delivery report is only the *last* attempt's. An attempt before it may have
reached the log, so any retriable error is ``indeterminate``. Only errors that librdkafka
never retries, or that happen before the request leaves the client, are ``failed``:

==================================================  ==============  ============================
error                                               outcome         why
==================================================  ==============  ============================
none, acks >= 1                                     acked(offset)   broker reported the offset
none, acks = 0                                      unconfirmed     no acknowledgement exists
none, acks >= 1, no offset                          indeterminate   acknowledgement incomplete
``_PURGE_QUEUE``                                    failed          purged before it was sent
``_QUEUE_FULL`` (raised by ``produce``)             failed          never entered the client
``_UNKNOWN_TOPIC``, ``_UNKNOWN_PARTITION``          failed          no request was ever made
``_INVALID_ARG``, ``_BAD_MSG``                      failed          rejected by the client
``MSG_SIZE_TOO_LARGE``, ``RECORD_LIST_TOO_LARGE``   failed          non-retriable, no append
``INVALID_RECORD``, ``INVALID_REQUIRED_ACKS``       failed          non-retriable, no append
``POLICY_VIOLATION``                                failed          non-retriable, no append
``TOPIC_AUTHORIZATION_FAILED``,                     failed          non-retriable, no append
``CLUSTER_AUTHORIZATION_FAILED``,
``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``
``_MSG_TIMED_OUT``, ``REQUEST_TIMED_OUT``,          indeterminate   may have been appended
``_TIMED_OUT``, ``_TIMED_OUT_QUEUE``
``NOT_ENOUGH_REPLICAS_AFTER_APPEND``                indeterminate   appended to the leader
``NOT_ENOUGH_REPLICAS``                             indeterminate   last of several attempts
``_PURGE_INFLIGHT``, ``_TRANSPORT``                 indeterminate   request was in flight
``_FATAL``, ``_FENCED``, ``PRODUCER_FENCED``,       indeterminate   producer died mid-flight
``INVALID_PRODUCER_EPOCH``,
``OUT_OF_ORDER_SEQUENCE_NUMBER``, ``_DESTROY``
anything else                                       indeterminate   unknown: never claim more
==================================================  ==============  ============================

Defaulting to ``indeterminate`` is the safe side: an ``indeterminate`` write can never be
called lost, whereas a wrongly ``acked`` or wrongly ``failed`` write would create false
verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError

from invariants.ledger_format import WriteOutcome

FAILED_CODES: frozenset[int] = frozenset(
    code
    for code in (
        KafkaError._PURGE_QUEUE,
        KafkaError._QUEUE_FULL,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._INVALID_ARG,
        KafkaError._BAD_MSG,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.POLICY_VIOLATION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    )
)


@dataclass(frozen=True)
class Classified:
    outcome: WriteOutcome
    offset: int  # -1 unless acked
    error: str | None


def classify_delivery(error: KafkaError | None, offset: int | None, acks: str) -> Classified:
    """Map a delivery report (error, offset) to an outcome, per the table above."""
    if error is None:
        if acks == "0":
            return Classified(WriteOutcome.UNCONFIRMED, -1, None)
        if offset is None or offset < 0:
            return Classified(WriteOutcome.INDETERMINATE, -1, "no offset in acknowledgement")
        return Classified(WriteOutcome.ACKED, offset, None)
    return Classified(classify_error_code(error.code()), -1, error.name())


def classify_error_code(code: int) -> WriteOutcome:
    if code in FAILED_CODES:
        return WriteOutcome.FAILED
    return WriteOutcome.INDETERMINATE
