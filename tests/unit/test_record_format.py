import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.model import foreign_ident, is_canary
from monitor import record_format as rf

records = st.builds(
    rf.CanaryRecord,
    writer_id=st.integers(0, 2**64 - 1),
    incarnation=st.integers(0, 2**32 - 1),
    seq=st.integers(0, 2**64 - 1),
    produce_ts_us=st.integers(0, 2**64 - 1),
    flags=st.sampled_from([0, rf.FLAG_DRILL]),
)


@given(records, st.integers(rf.HEADER_SIZE, 512))
def test_roundtrip(rec, size):
    value = rf.encode(rec, size)
    assert len(value) == size
    assert rf.decode(value) == rec


def test_transaction_fields_roundtrip():
    rec = rf.CanaryRecord(1, 2, 3, 4, txn_id=9, txn_size=4, txn_index=3,
                          flags=rf.FLAG_TRANSACTIONAL | rf.FLAG_INTENDED_ABORT)
    out = rf.decode(rf.encode(rec, 100))
    assert out == rec and out.transactional and out.intended_abort and not out.drill


@given(st.binary(max_size=200))
def test_decode_never_raises_on_foreign_bytes(value):
    out = rf.decode(value)
    assert isinstance(out, (rf.CanaryRecord, rf.Malformed))


def test_malformed_reasons():
    good = rf.encode(rf.CanaryRecord(1, 1, 1, 1), 64)
    assert rf.decode(None).reason == "null value"
    assert "too short" in rf.decode(b"hello").reason
    assert "bad magic" in rf.decode(b"XX" + good[2:]).reason
    assert "unsupported version" in rf.decode(good[:2] + b"\x09" + good[3:]).reason
    assert "unknown flags" in rf.decode(good[:3] + b"\x80" + good[4:]).reason
    assert "length" in rf.decode(good + b"x").reason
    no_txn_but_size = rf.HEADER.pack(rf.MAGIC, 1, 0, 1, 1, 1, 1, 0, 3, 0, 0)
    assert "without a transaction id" in rf.decode(no_txn_but_size).reason
    bad_index = rf.HEADER.pack(rf.MAGIC, 1, 1, 1, 1, 1, 1, 5, 2, 2, 0)
    assert "txn_index" in rf.decode(bad_index).reason


@settings(max_examples=200)
@given(st.lists(st.one_of(records.map(lambda r: rf.encode(r, 60)), st.binary(max_size=80), st.none()), max_size=30))
def test_vectorised_decode_agrees_with_decode(values):
    from monitor.watch.executor import KIND_CANARY, decode_values, unsigned

    cols = decode_values(values)  # the one vectorised decoder (executors, driver, re-fetcher)
    headers = {"seq": unsigned(cols["seq"]), "writer_id": unsigned(cols["writer_id"]),
               "incarnation": cols["incarnation"]}
    valid = cols["kind"] == KIND_CANARY
    assert len(valid) == len(values)
    for i, v in enumerate(values):
        single = rf.decode(v)
        assert bool(valid[i]) == isinstance(single, rf.CanaryRecord)
        if valid[i]:
            assert int(headers["seq"][i]) == single.seq
            assert int(headers["writer_id"][i]) == single.writer_id
            assert int(headers["incarnation"][i]) == single.incarnation
        else:
            assert int(headers["seq"][i]) == 0


def test_writer_id_is_stable_and_distinct():
    assert rf.writer_id_for("a") == rf.writer_id_for("a") != rf.writer_id_for("b")
    assert rf.HEADER_SIZE == 48 == rf.HEADER_DTYPE.itemsize
    assert isinstance(rf.decode_header_rows(np.zeros((0, rf.HEADER_SIZE), np.uint8), np.zeros(0, np.int64))[0],
                      np.ndarray)


def test_values_that_are_not_canary_records_are_classified_and_identified_by_content():
    canary_like = rf.encode(rf.CanaryRecord(1, 1, 1, 1), rf.HEADER_SIZE)[:-1]  # magic, but cut short
    assert rf.malformed_kind(canary_like) == "malformed"
    assert rf.malformed_kind(b"hello") == rf.malformed_kind(None) == "foreign"
    assert not is_canary(foreign_ident(b"hello"))
    assert foreign_ident(b"hello") == foreign_ident(b"hello") != foreign_ident(b"hellp")
    assert foreign_ident(None) == foreign_ident(b"") != foreign_ident(b"\0")
