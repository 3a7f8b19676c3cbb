"""The executors' decoding (monitor.watch.executor) agrees record by record with the reference
decoder, keeps ledger values, and its zip imports without the checkout."""

from __future__ import annotations

import subprocess
import zlib
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.model import foreign_ident
from monitor import record_format as rf
from monitor.watch import executor as ex
from monitor.watch import ship
from monitor.watch.batch import to_reads

CHECKOUT = Path(__file__).resolve().parents[2]

records = st.builds(
    rf.CanaryRecord, writer_id=st.integers(0, 2**64 - 1), incarnation=st.integers(0, 2**32 - 1),
    seq=st.integers(0, 2**64 - 1), produce_ts_us=st.integers(0, 2**64 - 1),
    flags=st.sampled_from([0, rf.FLAG_DRILL, rf.FLAG_TRANSACTIONAL | rf.FLAG_INTENDED_ABORT]),
)
values = st.lists(st.one_of(records.map(lambda r: rf.encode(r, 60)), records.map(lambda r: rf.encode(r, 48)),
                            st.binary(max_size=80), st.just(rf.MAGIC), st.just(b"V"), st.none()), max_size=30)


@settings(max_examples=300, deadline=None)
@given(values, st.integers(0, 5))
def test_each_row_decodes_as_the_reference_decoder_says(vals, cut):
    array = pa.array([b"pad"] * cut + vals, pa.binary()).slice(cut)  # a slice: buffers start elsewhere
    cols = ex.decode_values(array)
    for i, v in enumerate(vals):
        single = rf.decode(v)
        if isinstance(single, rf.CanaryRecord):
            assert cols["kind"][i] == ex.KIND_CANARY
            got = (int(ex.unsigned(cols["writer_id"])[i]), int(cols["incarnation"][i]),
                   int(ex.unsigned(cols["seq"])[i]), int(ex.unsigned(cols["produce_ts_us"])[i]), int(cols["flags"][i]))
            assert got == (single.writer_id, single.incarnation, single.seq, single.produce_ts_us, single.flags)
        else:
            assert ex.KIND_NAMES[int(cols["kind"][i])] == rf.malformed_kind(v)
            assert ("x", int(cols["digest"][i]), int(cols["length"][i])) == foreign_ident(v)


@given(values)
def test_the_refetch_path_gives_the_same_reads_as_the_executor_path(vals):
    reads, malformed, _ts = to_reads(list(range(len(vals))), vals)
    for r, v in zip(reads, vals):
        single = rf.decode(v)
        expected = single.writer + (single.seq,) if isinstance(single, rf.CanaryRecord) else foreign_ident(v)
        assert r.ident == expected
    assert sum(malformed.values()) == sum(1 for v in vals if not isinstance(rf.decode(v), rf.CanaryRecord))


def test_a_batch_keeps_order_ledger_values_and_drops_canary_values():
    good = rf.encode(rf.CanaryRecord(7, 1, 3, 99), 100)
    batch = pa.RecordBatch.from_pydict({
        "src": pa.array([0, 2, 1, 0], pa.int8()), "topic": ["c", "l", "c", "c"],
        "partition": pa.array([0, 0, 1, 0], pa.int32()), "offset": pa.array([5, 9, 6, 7], pa.int64()),
        "value": pa.array([good, b"ledger-bytes", b"junk", None], pa.binary()),
        "ts_us": pa.array([1, 2, 3, 4], pa.int64()),
    })
    out = ex.decode_batch(batch, now_us=1_000_099)
    assert out.schema == ex.DECODED_SCHEMA
    rows, latency = out.slice(0, 4), out.slice(4)
    assert rows.column("offset").to_pylist() == [5, 9, 6, 7]
    assert rows.column("value").to_pylist() == [None, b"ledger-bytes", None, None]
    assert rows.column("kind").to_pylist() == [ex.KIND_CANARY, ex.KIND_LEDGER, ex.KIND_FOREIGN, ex.KIND_FOREIGN]
    assert rows.column("ts_us").to_pylist() == [1, 2, 3, 4]
    assert rows.column("count").to_pylist() == [1, 1, 1, 1]
    # the canary record, one second old when decoded: one latency row of its reader
    assert latency.column("kind").to_pylist() == [ex.KIND_LATENCY] and latency.column("count").to_pylist() == [1]
    assert latency.column("src").to_pylist() == [0] and latency.column("ts_us").to_pylist() == [1_000_099]
    assert abs(ex.latency_seconds(latency.column("offset").to_numpy())[0] - 1.0) < 0.01
    assert list(ex.decode_batches([batch.slice(0, 0)]))[0].num_rows == 0


def _kafka_rows(src: int, partition: int, offsets: list[int], vals: list, headers_only: bool = False) -> pa.RecordBatch:
    """Spark's rows of a source; ``headers_only``: as the watch's query selects them (``value`` its
    first 48 bytes, ``vlen`` and ``vcrc`` the whole value's length and CRC-32, null for a null value)."""
    n = len(offsets)
    cols = {"src": pa.array([src] * n, pa.int8()), "topic": ["c"] * n, "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(offsets, pa.int64()), "value": pa.array(vals, pa.binary()),
            "ts_us": pa.array([0] * n, pa.int64())}
    if headers_only:
        cols["value"] = pa.array([None if v is None else v[:rf.HEADER_SIZE] for v in vals], pa.binary())
        cols["vlen"] = pa.array([None if v is None else len(v) for v in vals], pa.int32())
        cols["vcrc"] = pa.array([None if v is None else zlib.crc32(v) for v in vals], pa.int64())
    return pa.RecordBatch.from_pydict(cols)


def test_runs_span_one_writer_s_consecutive_seqs_at_consecutive_offsets_outside_or_inside_one_transaction():
    def canary(w: int, seq: int, **kw) -> bytes:
        return rf.encode(rf.CanaryRecord(w, 1, seq, 5, **kw), 60)

    def txn(seq: int, txn_id: int, index: int) -> bytes:
        return canary(3, seq, txn_id=txn_id, txn_size=9, txn_index=index, flags=rf.FLAG_TRANSACTIONAL)

    vals = [canary(1, 0), canary(1, 1), canary(1, 2),  # a run of three
            canary(2, 7),  # another writer: alone
            canary(1, 3), canary(1, 5),  # a seq skipped: two runs of one
            txn(0, 9, 0), txn(1, 9, 3), txn(2, 9, 6),  # one transaction, indexes 3 apart: a run
            txn(3, 10, 0), txn(4, 10, 1), txn(5, 10, 3),  # the next transaction; its step changes
            b"junk", canary(4, 2**64 - 1), canary(4, 0)]  # the highest seq does not run on into 0
    out = ex.decode_batch(_kafka_rows(1, 0, list(range(10, 10 + len(vals))), vals), now_us=10)
    rows = out.filter(pa.compute.not_equal(out.column("kind"), ex.KIND_LATENCY))
    assert rows.column("offset").to_pylist() == [10, 13, 14, 15, 16, 19, 21, 22, 23, 24]
    assert rows.column("count").to_pylist() == [3, 1, 1, 1, 3, 2, 1, 1, 1, 1]
    assert rows.column("txn_step").to_pylist() == [0, 0, 0, 0, 3, 1, 0, 0, 0, 0]
    assert ex.unsigned(rows.column("writer_id").to_numpy()).tolist() == [1, 2, 1, 1, 3, 3, 3, 0, 4, 4]
    latency = out.filter(pa.compute.equal(out.column("kind"), ex.KIND_LATENCY))
    assert sum(latency.column("count").to_pylist()) == 14  # every canary record, in runs or not


@settings(max_examples=200, deadline=None)
@given(values, st.integers(1, 12), st.booleans(), st.booleans())
def test_the_executor_s_rows_are_the_records_one_by_one(vals, split, headers_only, without_topic):
    """Whatever the records, however Spark cuts a partition into Arrow batches, whether the
    whole values or only their headers, lengths and CRCs left the JVM, and whether the rows' topic
    or only their source's (the driver's fetch), the rows the driver gets, taken one by one, are
    exactly the reads of the re-fetch path (the reference)."""
    from invariants.model import one_by_one
    from monitor.watch.batch import BatchStats, _items

    offsets = list(range(100, 100 + len(vals)))
    got = []
    for lo in range(0, len(vals), split):
        rows = _kafka_rows(0, 3, offsets[lo:lo + split], vals[lo:lo + split], headers_only)
        if without_topic:
            rows = rows.select([n for n in rows.schema.names if n != "topic"])
        out = ex.decode_batch(rows, now_us=0, topics={0: "c", 1: "other"} if without_topic else None)
        rows = out.filter(pa.compute.not_equal(out.column("kind"), ex.KIND_LATENCY))
        assert set(rows.column("topic").to_pylist()) <= {"c"}
        got += _items(pa.Table.from_batches([rows]), BatchStats())
    expected, _malformed, _ts = to_reads(offsets, vals)
    assert one_by_one(got) == expected


def test_the_shipped_zip_imports_the_executor_code_without_the_checkout(tmp_path):
    path = ship.executor_zip(tmp_path)
    assert ship.executor_zip(tmp_path) == path  # one zip per content
    with zipfile.ZipFile(path) as z:
        assert "monitor/watch/executor.py" in z.namelist() and "monitor/record_format.py" in z.namelist()
    probe = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()];"
             f"sys.path[:] = [p for p in sys.path if p and ('site-packages' in p or not p.startswith({str(CHECKOUT)!r}))];"
             "import importlib.util as u; assert u.find_spec('monitor') is None, 'checkout importable';"
             f"sys.path.insert(0, {str(path)!r}); import monitor.watch.executor as e; print(e.__file__)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(path))


def test_each_source_s_topic_is_the_one_it_subscribes_to():
    from monitor.config import parse
    from monitor.watch.topics import topics_by_src

    cfg = parse({"canary": {"name": "cn"}, "ledger": {"topic": "led"}, "eos": {"enabled": True},
                 "groups": {"enabled": True}})
    assert topics_by_src(cfg) == {0: "cn", 1: "cn", 2: "led", 3: cfg.eos.output_topic, 4: cfg.groups.observation_topic}
    off = parse({"eos": {"enabled": False}, "groups": {"enabled": False}})
    assert sorted(topics_by_src(off)) == [0, 1, 2]


def test_the_jvm_decodes_in_local_mode_and_the_executors_python_on_a_cluster(monkeypatch):
    from monitor.config import parse
    from monitor.watch import jvm_decode
    from monitor.watch.spark import decode_mode

    def on(master: str, mode: str = "auto") -> str:
        return decode_mode(parse({"watch": {"spark_master": master, "decode_on": mode}}))

    monkeypatch.setattr(jvm_decode, "javac_for_spark", lambda _home="": "/usr/bin/javac")
    assert on("local[2]") == "jvm" and on("spark://127.0.0.1:7077") == "executors"
    assert on("") == "executors"  # empty: spark-submit's (Kubernetes)
    assert on("local[2]", "executors") == "executors" and on("spark://127.0.0.1:7077", "driver") == "driver"
    assert on("spark://127.0.0.1:7077", "jvm") == "jvm"
    monkeypatch.setattr(jvm_decode, "javac_for_spark", lambda _home="": None)  # Spark's Java a JRE only
    assert on("local[2]") == "driver" and on("local[2]", "jvm") == "jvm"


def test_a_jar_cut_short_is_built_again_and_no_javac_is_a_clear_error(tmp_path, monkeypatch):
    import pytest

    from monitor.eos.build import BuildError
    from monitor.watch import jvm_decode

    monkeypatch.setenv("VIGIL_JAR_CACHE", str(tmp_path))
    monkeypatch.setattr(jvm_decode, "javac_for_spark", lambda _home="": None)
    with pytest.raises(BuildError, match="no javac beside it.*watch.decode_on: driver"):
        jvm_decode.decoder_jar()
    cut = jvm_decode.jar_path()
    assert cut.parent == tmp_path
    cut.write_bytes(b"")  # the name of a jar whose content a crash lost
    with pytest.raises(BuildError):  # not taken as built: it would be compiled again
        jvm_decode.decoder_jar()
    with zipfile.ZipFile(cut, "w") as z:
        z.writestr("JvmDecode.class", b"\xca\xfe")
    assert jvm_decode.decoder_jar() == cut  # a whole one is used as it is
