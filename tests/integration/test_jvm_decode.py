"""The JVM's decoding (monitor/watch/JvmDecode.java, ``watch.decode_on: jvm``) gives the rows of the
Python one (monitor.watch.executor.decode_batch) on random Kafka rows run through a real local Spark:
the very same rows where both see the rows as one stretch, the same records once runs are expanded
where Spark cuts them into partitions. Needs Spark and javac, not the Kafka cluster; the session is
this module's own and is stopped at its end."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor import record_format as rf
from monitor.watch import executor as ex
from monitor.watch.jvm_decode import decoded_in_jvm, decoder_jar

pytestmark = pytest.mark.integration

NOW_US = 1_800_000_000_000_000
TOPICS = {0: "canary", 1: "canary", 2: "canary-ledger", 3: "canary-eos-out", 4: "canary-group-obs"}
HEADER = rf.encode(rf.CanaryRecord(5, 1, 1, 1), 48)
ODD = [  # well-formed but for one rule each (monitor.record_format.decode)
    HEADER[:2] + b"\x02" + HEADER[3:],  # version 2
    HEADER[:3] + b"\x80" + HEADER[4:],  # an unknown flag
    HEADER[:44] + (12).to_bytes(4, "big"),  # padding said 12, none there
    rf.encode(rf.CanaryRecord(1, 1, 1, 1, txn_id=0, txn_size=2), 48),  # transaction fields without a transaction
    rf.encode(rf.CanaryRecord(1, 1, 1, 1, txn_id=4, txn_size=2, txn_index=2), 48),  # index past the size
]
WRITERS = [(0x0123_4567_89AB_CDEF, 1), (2**64 - 5, 7), (99, 0)]
INPUT = pa.schema([("src", pa.int8()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary()),
                   ("vlen", pa.int32()), ("vcrc", pa.int64()), ("ts_us", pa.int64())])


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("vigil-test-jvm-decode")
               .config("spark.jars", str(decoder_jar())).config("spark.ui.enabled", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    yield session
    session.stop()


@st.composite
def stretch(draw, seqs: dict) -> list[bytes | None]:
    """Some consecutive records of one kind: a writer's run (maybe of one transaction, maybe past seq
    2**64 - 1, maybe with a gap), or odd values."""
    kind = draw(st.sampled_from(["run", "run", "run", "txn", "odd"]))
    if kind == "odd":
        return draw(st.lists(st.one_of(st.binary(max_size=70), st.just(rf.MAGIC), st.just(b"V"), st.none(),
                                       st.sampled_from(ODD)), min_size=1, max_size=3))
    writer, incarnation = draw(st.sampled_from(WRITERS))
    key = (writer, incarnation)
    seq = draw(st.sampled_from([seqs.get(key, 0), seqs.get(key, 0) + 2, 2**64 - 2, 2**63 - 2]))
    produced = draw(st.sampled_from([NOW_US, 2**64 - 3]))  # (a clock past 2**63 µs: an age that wraps)
    n = draw(st.integers(1, 8))
    size = draw(st.sampled_from([48, 60]))
    out = []
    if kind == "txn":
        txn_size = draw(st.integers(1, 40))
        step = draw(st.integers(0, 3))
        index = draw(st.integers(0, txn_size - 1))
        flags = draw(st.sampled_from([rf.FLAG_TRANSACTIONAL, rf.FLAG_TRANSACTIONAL | rf.FLAG_INTENDED_ABORT]))
        txn_id = draw(st.integers(1, 3))
        for k in range(n):
            at = index + k * step + draw(st.sampled_from([0, 0, 0, 1]))  # now and then a broken step
            out.append(rf.encode(rf.CanaryRecord(writer, incarnation, (seq + k) % 2**64, (produced - draw(st.integers(
                -5, 10**8))) % 2**64, txn_id=txn_id, txn_size=txn_size, txn_index=min(at, 2**16 - 1), flags=flags), size))
    else:
        flags = draw(st.sampled_from([0, 0, rf.FLAG_DRILL]))
        for k in range(n):
            out.append(rf.encode(rf.CanaryRecord(writer, incarnation, (seq + k) % 2**64,
                                                 (produced - draw(st.integers(-5, 10**10))) % 2**64, flags=flags), size))
    seqs[key] = (seq + n) % 2**64
    return out


@st.composite
def kafka_rows(draw) -> pa.Table:
    """A few topic-partitions of the two readers and the ledger, in offset order, as
    monitor.watch.spark.union_of_sources gives them with headers_only."""
    rows = []
    offset, seqs = 0, {}
    for src, partition in draw(st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 2)), min_size=1,
                                        max_size=4, unique=True)):
        if draw(st.booleans()):  # else the offsets and seqs go on where the last topic-partition's stopped:
            offset, seqs = draw(st.integers(0, 10**6)), {}  # no run may span the two
        for _ in range(draw(st.integers(1, 6))):
            for value in draw(stretch(seqs)):
                whole = value
                if src < 2 and value is not None:
                    value = value[:rf.HEADER_SIZE]
                rows.append({"src": src, "partition": partition, "offset": offset, "value": value,
                             "vlen": None if whole is None else len(whole),
                             "vcrc": None if whole is None or src >= 2 else zlib.crc32(whole),
                             "ts_us": draw(st.one_of(st.none(), st.integers(0, 2**50)))})
                offset += draw(st.sampled_from([1, 1, 1, 2]))
    return pa.Table.from_pylist(rows, schema=INPUT)


def jvm_rows(spark, table: pa.Table, partitions: int) -> list[dict]:
    df = spark.createDataFrame(table)
    df = df.coalesce(1) if partitions == 1 else df.repartitionByRange(partitions, "src", "partition", "offset")
    got = decoded_in_jvm(spark, df.sortWithinPartitions("src", "partition", "offset") if partitions > 1 else df,
                         TOPICS, fixed_now_us=NOW_US).toArrow()
    assert got.schema == ex.DECODED_SCHEMA
    return got.to_pylist()


def python_rows(table: pa.Table) -> list[dict]:
    batch = table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], INPUT)
    return ex.decode_batch(batch, now_us=NOW_US, topics=TOPICS).to_pylist()


def expanded(rows: list[dict]) -> tuple[list, dict]:
    """The records the rows stand for, and the latency counts by (src, bin). A run stands for its
    records as the checker reads them (monitor.watch.batch, ``ReadRun``): what a run carries of its
    first record only — the drill flag, the value's length, the timestamps — is not a run's (a run
    may join records of other lengths), so a run cut elsewhere gives other values there."""
    records, latency = [], {}
    for r in rows:
        if r["kind"] == ex.KIND_LATENCY:
            latency[(r["src"], r["offset"])] = latency.get((r["src"], r["offset"]), 0) + r["count"]
        elif r["kind"] == ex.KIND_CANARY:
            for k in range(r["count"]):
                records.append((r["src"], r["topic"], r["partition"], r["offset"] + k, r["kind"], r["writer_id"],
                                r["incarnation"], (r["seq"] + k + 2**63) % 2**64 - 2**63, r["txn_id"],
                                r["flags"] & rf.FLAG_INTENDED_ABORT, r["txn_size"], r["txn_index"] + k * r["txn_step"]))
        else:
            assert r["count"] == 1
            records.append(tuple(v for name, v in r.items() if name != "count"))
    return sorted(records, key=repr), latency


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kafka_rows())
def test_the_jvm_decodes_as_the_python_decoder(spark, table):
    expected = python_rows(table)
    assert jvm_rows(spark, table, 1) == expected  # one stretch for both: the very same rows
    assert expanded(jvm_rows(spark, table, 3)) == expanded(expected)  # cut by Spark: the same records


def test_every_kind_of_row_is_there(spark):
    """A fixed mix, so the property above is known to see runs, transactions, odd values and ledger rows."""
    canary = [rf.encode(rf.CanaryRecord(5, 1, s, NOW_US - 2_000_000), 60) for s in range(4)]
    txn = [rf.encode(rf.CanaryRecord(5, 1, 4 + k, NOW_US - 1500, txn_id=1, txn_size=8, txn_index=2 * k,
                                     flags=rf.FLAG_TRANSACTIONAL), 48) for k in range(3)]
    values = canary + txn + [b"junk", rf.MAGIC + b"x", None, b""]
    rows = [{"src": 0, "partition": 0, "offset": 10 + i, "value": None if v is None else v[:48],
             "vlen": None if v is None else len(v), "vcrc": None if v is None else zlib.crc32(v), "ts_us": i}
            for i, v in enumerate(values)]
    rows.append({"src": 2, "partition": 0, "offset": 0, "value": b"ledger-entry", "vlen": 12, "vcrc": None,
                 "ts_us": 1})
    got = jvm_rows(spark, pa.Table.from_pylist(rows, schema=INPUT), 1)
    assert got == python_rows(pa.Table.from_pylist(rows, schema=INPUT))
    kinds = [(r["kind"], r["count"], r["txn_step"]) for r in got]
    assert kinds[:2] == [(ex.KIND_CANARY, 4, 0), (ex.KIND_CANARY, 3, 2)]
    assert [r["ts_us"] for r in got[:2]] == [3, 6]  # a run's newest record's timestamp (the ledger hold's)
    assert [k for k, _, _ in kinds[2:6]] == [ex.KIND_FOREIGN, ex.KIND_MALFORMED, ex.KIND_FOREIGN, ex.KIND_FOREIGN]
    assert got[6]["kind"] == ex.KIND_LEDGER and got[6]["value"] == b"ledger-entry" and got[6]["topic"] == "canary-ledger"
    assert got[2]["digest"] == zlib.crc32(b"junk") and got[2]["length"] == 4
    bins = {r["offset"]: r["count"] for r in got if r["kind"] == ex.KIND_LATENCY}
    assert bins == {int(ex.latency_bin([2_000_000])[0]): 4, int(ex.latency_bin([1500])[0]): 3}


def test_no_run_spans_two_readers_or_two_partitions(spark):
    """Records that would make one run but for their source or partition (the generator above meets
    this case only now and then): a run each."""
    def row(src: int, partition: int, offset: int, seq: int) -> dict:
        v = rf.encode(rf.CanaryRecord(5, 1, seq, NOW_US - 3000), 48)
        return {"src": src, "partition": partition, "offset": offset, "value": v, "vlen": 48, "vcrc": zlib.crc32(v),
                "ts_us": offset}

    rows = [row(0, 0, 10 + i, i) for i in range(3)] + [row(1, 0, 13 + i, 3 + i) for i in range(3)] + [
        row(1, 1, 16 + i, 6 + i) for i in range(3)]
    table = pa.Table.from_pylist(rows, schema=INPUT)
    got = jvm_rows(spark, table, 1)
    assert got == python_rows(table)
    assert [(r["src"], r["partition"], r["offset"], r["count"]) for r in got if r["kind"] == ex.KIND_CANARY] == [
        (0, 0, 10, 3), (1, 0, 13, 3), (1, 1, 16, 3)]
