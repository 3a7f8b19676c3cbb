"""The ledger's wire format: one round trip per entry kind; only typed entries in, only typed out."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.ledger_format import (
    LEDGER_VERSION, Checkpoint, Intent, LedgerEntry, LedgerFormatError, OpenTxn, OutcomeRun, Outcomes, PendingWrites,
    Init, Retire, Start, Stop, TopicSettings, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome, WriteRange, WriterRef, WriterSettings,
    decode, encode,
)

WRITER = WriterRef("host-idempotent", 2**63 + 5, 7)

BODIES = {
    "start": Start("vigil-canary", "AbCdEf", 3, WriterSettings("idem", "canary", "1", False, False, 20000),
                   TopicSettings(3, 2, False)),
    "start_unknown_topic": Start("vigil-canary", "AbCdEf", 3, WriterSettings("idem"), None),
    "start_on_a_recreated_topic": Start("vigil-canary", "GhIjKl", 4, WriterSettings("idem"), None, replaces="AbCdEf"),
    "checkpoint": Checkpoint("vigil-canary", "AbCdEf", 3, WriterSettings("txn", transactional=True,
                                                                         outcome_within_ms=215_000),
                             TopicSettings(1, 1, True), (PendingWrites(0, 7, 2, 4, 99),),
                             (OpenTxn(4, 3, False, (WriteRange(0, 7, 2), WriteRange(1, 3, 1))),), (0, 120, 7)),
    "intent": Intent("AbCdEf", (WriteRange(0, 10, 3), WriteRange(2, 4, 1))),
    "intent_txn": Intent("AbCdEf", (WriteRange(1, 0, 4),), TxnInfo(9, 4, True)),
    "outcomes": Outcomes("AbCdEf", (OutcomeRun(0, 10, 3, WriteOutcome.ACKED, 500, 1, 2),
                                    OutcomeRun(2, 4, 1, WriteOutcome.INDETERMINATE, -1, 1, 3, "_MSG_TIMED_OUT"),
                                    OutcomeRun(1, 0, 4, WriteOutcome.ACKED, 9, 1, 3, None, 12))),
    "outcomes_listed_after_the_ack": Outcomes("AbCdEf", (OutcomeRun(0, 11, 1, WriteOutcome.ACKED, 0, 1, 2,
                                                                    log_start_after=4000),)),
    "txn": TxnEnd(9, TxnOutcome.ABORTED, None),
    "txn_indeterminate": TxnEnd(10, TxnOutcome.INDETERMINATE, "_FENCED"),
    "init": Init(),
    "retire": Retire("vigil-canary", "AbCdEf", "moving to a new cluster"),
    "stop": Stop(),
}


@pytest.mark.parametrize("name", BODIES)
def test_every_entry_kind_round_trips(name):
    entry = LedgerEntry(WRITER, 41, 1_700_000_000_000_000, BODIES[name])
    back = decode(encode(entry))
    assert back == entry and type(back.body) is type(entry.body)
    assert json.loads(encode(entry))["v"] == LEDGER_VERSION


def test_the_broker_append_time_comes_with_the_record_not_the_encoding():
    entry = LedgerEntry(WRITER, 3, 1_000, Stop())
    assert "append" not in encode(entry).decode()
    back = decode(encode(entry), append_ts_us=5_000)
    assert back.append_ts_us == 5_000 and back.time_us == 5_000
    assert decode(encode(entry)).time_us == 1_000  # unknown: the writer's clock


def test_version_2_entries_still_decode():
    cp = (b'{"v":2,"instance":"h","writer_id":3,"inc":2,"n":4,"ts_us":5,"kind":"checkpoint","topic":"c",'
          b'"topic_id":"T","partitions":2,"writer":{"name":"w"},"topic_settings":null,"pending":[],"open_txns":[]}')
    body = decode(cp).body
    assert isinstance(body, Checkpoint) and body.log_starts == ()


def test_the_encoder_takes_only_entry_dataclasses():
    with pytest.raises(TypeError):
        encode({"v": 1, "instance": "i", "writer_id": 1, "inc": 1, "n": 0, "ts_us": 0, "kind": "stop"})
    with pytest.raises(TypeError):
        encode(Stop())
    with pytest.raises(TypeError):
        encode(LedgerEntry(WRITER, 0, 0, {"kind": "stop"}))


def test_an_entry_of_another_version_names_the_version():
    raw = json.loads(encode(LedgerEntry(WRITER, 0, 0, Stop())))
    raw["v"] = 4
    with pytest.raises(LedgerFormatError, match="version 4 is not readable.*reads versions 1, 2, 3"):
        decode(json.dumps(raw).encode())


@pytest.mark.parametrize("raw, why", [
    (b"", "empty"), (b"garbage", "not JSON"), (b"[1]", "not a JSON object"),
    (b'{"v": 1, "instance": "i", "writer_id": 1, "inc": 1, "n": "x", "ts_us": 0, "kind": "stop"}', "'n'"),
    (b'{"v": 1, "instance": "i", "writer_id": 1, "inc": 1, "n": 0, "ts_us": 0, "kind": "nope"}', "unknown entry kind"),
    (b'{"v": 1, "instance": "i", "writer_id": 1, "inc": 1, "n": 0, "ts_us": 0, "kind": "outcomes", "topic_id": "T",'
     b' "runs": [[0, 0, 1, "lost", 5, 1, 2, null]]}', "unknown outcome"),
    (b'{"v": 3, "instance": "i", "writer_id": 1, "inc": 1, "n": 0, "ts_us": 0, "kind": "checkpoint", "topic": "c",'
     b' "topic_id": "T", "partitions": 1, "pending": [], "open_txns": [], "log_starts": ["x"]}', "log_starts"),
    (b'{"v": 3, "instance": "i", "writer_id": 1, "inc": 1, "n": 0, "ts_us": 0, "kind": "retire", "topic": "c"}',
     "topic_id"),
    (b'{"v": 3, "instance": "i", "writer_id": 1, "inc": 1, "n": 0, "ts_us": 0, "kind": "outcomes", "topic_id": "T",'
     b' "runs": [[0, 0, 1, "acked", 0, 1, 2, null, 0, -4]]}', "log start after -4 is negative"),
])
def test_what_is_not_an_entry_is_refused_with_the_reason(raw, why):
    with pytest.raises(LedgerFormatError, match=why):
        decode(raw)


def test_version_1_entries_written_by_vigil_0_1_still_decode():
    run = (b'{"v":1,"instance":"h","writer_id":3,"inc":2,"n":4,"ts_us":5,"kind":"outcomes","topic_id":"T",'
           b'"runs":[[0,10,2,"acked",40,1,2,null]]}')
    assert decode(run).body.runs == (OutcomeRun(0, 10, 2, WriteOutcome.ACKED, 40, 1, 2, None, 0),)
    """Entries exactly as the 0.1 writers, drills and bench wrote them (settings as a config dump)."""
    start = (b'{"v":1,"instance":"h-idempotent","writer_id":3,"inc":2,"n":0,"ts_us":5,"kind":"start","topic":"c",'
             b'"topic_id":"T","partitions":3,"writer":{"name":"idempotent","acks":"all","idempotence":true,'
             b'"transactional":false,"transaction":{"size":4},"rate":200.0,"message_timeout_ms":30000}}')
    assert decode(start).body.settings == WriterSettings("idempotent", "canary", "all", True, False, 30000)
    drill = b'{"v":1,"instance":"h-drill-x","writer_id":3,"inc":1,"n":0,"ts_us":5,"kind":"start","topic":"c",' \
            b'"topic_id":"T","partitions":3,"writer":{"drill":"lost_write"}}'
    assert decode(drill).body.settings.role == "drill"


@given(st.binary(max_size=200))
def test_decode_never_fails_other_than_with_a_format_error(raw):
    try:
        decode(raw)
    except LedgerFormatError:
        pass
