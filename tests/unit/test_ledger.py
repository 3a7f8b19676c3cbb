import json

from monitor.ledger import LedgerBook, LedgerWriter, decode_entry, encode_runs
from monitor.outcomes import TxnOutcome, WriteOutcome

from tests.unit.fakes import FakeProducer

A, F, I = WriteOutcome.ACKED, WriteOutcome.FAILED, WriteOutcome.INDETERMINATE


def test_runs_merge_consecutive_seqs_and_offsets_only():
    runs = encode_runs([
        (0, 0, A, 10, 1, 2, None), (0, 1, A, 11, 1, 3, None), (0, 2, A, 15, 1, 4, None),
        (1, 0, A, 3, 1, 2, None), (0, 3, I, -1, 1, 5, "_MSG_TIMED_OUT"), (0, 4, I, -1, 1, 6, "_MSG_TIMED_OUT"),
    ])
    assert [r.as_list()[:5] for r in runs] == [
        [0, 0, 2, "acked", 10], [0, 2, 1, "acked", 15], [0, 3, 2, "indeterminate", -1], [1, 0, 1, "acked", 3]]


def _entries(producer):
    return [json.loads(v) for (_t, _p), vals in sorted(producer.log.items()) for v in vals]


def test_writer_numbers_entries_and_book_folds_them():
    prod = FakeProducer()
    w = LedgerWriter(prod, "ledger", "inst", 7, 1)
    w.append("start", {"topic": "c", "topic_id": "T", "partitions": 2, "writer": {}})
    w.append("intent", {"topic_id": "T", "writes": [[0, 0, 3], [1, 0, 1]], "txn": None}, sync=True)
    runs = encode_runs([(0, 0, A, 5, 0, 0, None), (0, 1, A, 6, 0, 0, None), (1, 0, F, -1, 0, 0, "MSG_SIZE_TOO_LARGE")])
    w.append("outcomes", {"topic_id": "T", "runs": [r.as_list() for r in runs]}, sync=True)
    entries = _entries(prod)
    assert [e["n"] for e in entries] == [0, 1, 2]
    book = LedgerBook()
    for e in entries:
        book.apply(e)
    assert book.writes[(7, 1, "T", 0, 0)].offset == 5
    assert book.writes[(7, 1, "T", 0, 1)].offset == 6
    assert book.writes[(7, 1, "T", 0, 2)].outcome is WriteOutcome.PENDING
    assert book.writes[(7, 1, "T", 1, 0)].outcome is F
    assert book.gaps() == {}

    # the next incarnation of the same instance closes the predecessor's pending writes
    w2 = LedgerWriter(prod, "ledger", "inst", 7, 2)
    w2.append("start", {"topic": "c", "topic_id": "T", "partitions": 2, "writer": {}}, sync=True)
    book.apply(_entries(prod)[-1])
    st = book.writes[(7, 1, "T", 0, 2)]
    assert st.outcome is I and st.error == "writer restarted"
    assert book.writes[(7, 1, "T", 0, 0)].outcome is A  # decided writes stay as they were


def test_gaps_are_detected_and_duplicates_ignored():
    book = LedgerBook()
    base = {"v": 1, "instance": "i", "writer_id": 1, "inc": 1, "ts_us": 0}
    for n in (0, 1, 4, 4, 5):
        book.apply({**base, "n": n, "kind": "stop" if n == 5 else "start", "topic_id": "T"})
    assert book.gaps() == {("i", 1): [2, 3]}


def test_skip_leaves_numbers_unused():
    prod = FakeProducer()
    w = LedgerWriter(prod, "ledger", "inst", 1, 1)
    w.append("start", {})
    w.append("stop", {}, skip=3)
    assert [e["n"] for e in _entries(prod)] == [0, 4]


def test_transactions_and_stop():
    book = LedgerBook()
    base = {"v": 1, "instance": "i", "writer_id": 1, "inc": 1, "ts_us": 0}
    book.apply({**base, "n": 0, "kind": "intent", "topic_id": "T", "writes": [[0, 0, 2]],
                "txn": {"id": 1, "size": 2, "abort": True}})
    book.apply({**base, "n": 1, "kind": "txn", "id": 1, "outcome": "aborted", "error": None})
    book.apply({**base, "n": 2, "kind": "intent", "topic_id": "T", "writes": [[0, 2, 1]],
                "txn": {"id": 2, "size": 1, "abort": False}})
    book.apply({**base, "n": 3, "kind": "stop"})
    assert book.txns[(1, 1, 1)].outcome is TxnOutcome.ABORTED and book.txns[(1, 1, 1)].intended_abort
    assert book.txns[(1, 1, 2)].outcome is TxnOutcome.INDETERMINATE
    assert book.by_outcome()[WriteOutcome.PENDING] == 0


def test_decode_rejects_foreign_entries():
    book = LedgerBook()
    for raw in (b"", b"garbage", b"[1]", json.dumps({"v": 2}).encode(), json.dumps({"v": 1, "n": "x"}).encode()):
        assert decode_entry(raw) is None
        book.apply_raw(raw)
    assert book.malformed == 5
