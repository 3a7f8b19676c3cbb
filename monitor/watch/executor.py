"""Work done on Spark's executors, before a micro-batch reaches the driver.

``decode_batches`` runs in Spark's Python workers (``DataFrame.mapInArrow``) over the union of the
Kafka sources, one Spark partition (one offset range of one topic-partition of one reader) at a
time, in offset order, with no shuffle. Only a few rows per producer batch leave it:

- a **run** row for every stretch of canary records of one writer incarnation at consecutive
  offsets with consecutive seqs, outside transactions or of one transaction (same intended-abort
  flag and header size, indexes ``txn_step`` apart): its first offset, ``count``, and the first
  record's decoded header (:class:`invariants.model.ReadRun` on the driver), and the newest
  timestamp of its records (``ts_us``); a canary record alone is a run of one;
- a row per record that is not a well-formed canary one: its kind (``foreign`` without the
  magic bytes, ``malformed`` with them) and its identity, the CRC-32 and length of the whole value
  (:func:`invariants.model.foreign_ident`);
- **latency** rows (``kind`` :data:`KIND_LATENCY`): how many canary records were how old when
  decoded, in bins 1 % wide (``offset`` is the bin, ``ts_us`` the decoding time); the driver adds
  the time from there to the check (:func:`latency_seconds`);
- ledger rows (``src`` 2), the EOS pipeline's output rows (``src`` 3) and the group canary's
  observations (``src`` 4), one each with their value: the driver decodes those.

The driver and the re-fetcher decode single records through the same :func:`decode_values`, so a
record has one identity whichever way it was read. This module imports only numpy, pyarrow and
:mod:`monitor.record_format`; it reaches the executors in the zip :mod:`monitor.watch.ship` builds,
not from an installed copy. 64-bit unsigned header fields travel as the same bits in signed
``bigint`` columns (Spark has no unsigned type); :func:`unsigned` turns them back.
"""

from __future__ import annotations

import time
import zlib
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from monitor.record_format import FLAG_INTENDED_ABORT, HEADER_SIZE, MAGIC, decode_header_rows

SRC_LEDGER = 2
SRC_EOS_OUTPUT = 3  # the EOS pipeline's output topic (rows keep their value, as the ledger's do)
SRC_GROUP_OBS = 4  # the group canary's observation log (rows keep their value too)
KIND_LEDGER, KIND_CANARY, KIND_FOREIGN, KIND_MALFORMED, KIND_LATENCY = -1, 0, 1, 2, 3
KIND_NAMES = {KIND_FOREIGN: "foreign", KIND_MALFORMED: "malformed"}

DECODED_FIELDS = (
    ("src", pa.int8(), "tinyint"), ("topic", pa.string(), "string"), ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "bigint"), ("ts_us", pa.int64(), "bigint"), ("value", pa.binary(), "binary"),
    ("kind", pa.int8(), "tinyint"), ("writer_id", pa.int64(), "bigint"), ("incarnation", pa.int64(), "bigint"),
    ("seq", pa.int64(), "bigint"), ("produce_ts_us", pa.int64(), "bigint"), ("txn_id", pa.int64(), "bigint"),
    ("flags", pa.int16(), "smallint"), ("txn_size", pa.int32(), "int"), ("txn_index", pa.int32(), "int"),
    ("digest", pa.int64(), "bigint"), ("length", pa.int32(), "int"), ("count", pa.int32(), "int"),
    ("txn_step", pa.int32(), "int"),
)
DECODED_SCHEMA = pa.schema([(name, typ) for name, typ, _ in DECODED_FIELDS])
DECODED_DDL = ", ".join(f"`{name}` {ddl}" for name, _, ddl in DECODED_FIELDS)
HEADER_COLUMNS = ("kind", "writer_id", "incarnation", "seq", "produce_ts_us", "txn_id", "flags", "txn_size",
                  "txn_index", "digest", "length")
# latency bins: 0 below 1 ms, then bin k >= 1 from 1 ms * 1.01 ** (k - 1) up, to past the largest
# int64 age; the edges are a table (not a logarithm per record) so the JVM's decoding (JvmDecode.java,
# handed these same doubles) bins every age as this module does
LATENCY_FLOOR_US = 1000.0
LATENCY_RATIO = 1.01
LATENCY_EDGES_US = LATENCY_FLOOR_US * LATENCY_RATIO ** np.arange(3700, dtype=np.float64)


def decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: each batch of Kafka rows as runs, single rows and latency rows
    (see the module docstring), in offset order."""
    for batch in batches:
        yield decode_batch(batch)


def decode_batch(batch: pa.RecordBatch, now_us: int | None = None, topics: dict[int, str] | None = None
                 ) -> pa.RecordBatch:
    """One batch of Kafka rows (``src``, ``topic``, ``partition``, ``offset``, ``value``, ``ts_us``;
    one Spark partition's, in offset order); ``now_us``: when it is decoded (default: now); ``topics``:
    each ``src``'s topic, for rows fetched without their ``topic`` (one topic per source)."""
    n = batch.num_rows
    now_us = int(time.time() * 1e6) if now_us is None else now_us
    src = batch.column("src").to_numpy(zero_copy_only=False).astype(np.int8)
    values = batch.column("value")
    ledger = src >= SRC_LEDGER
    names = batch.schema.names
    cols = decode_values(values, skip=ledger,  # (with headers_only, a canary value is its first 48 bytes)
                         lengths=batch.column("vlen").to_numpy(zero_copy_only=False) if "vlen" in names else None,
                         crcs=batch.column("vcrc").to_numpy(zero_copy_only=False) if "vcrc" in names else None)
    topic = batch.column("topic").cast(pa.string()) if "topic" in names else None
    partition = batch.column("partition").to_numpy(zero_copy_only=False).astype(np.int32)
    offset = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    ts = batch.column("ts_us") if "ts_us" in batch.schema.names else pa.nulls(n, pa.int64())
    kind = cols["kind"]
    canary = kind == KIND_CANARY
    abort = (cols["flags"] & FLAG_INTENDED_ABORT) != 0
    seq = unsigned(cols["seq"])
    index = cols["txn_index"].astype(np.int64)
    follows = np.zeros(n, dtype=bool)  # row i continues the run of row i - 1
    if n > 1:
        follows[1:] = (canary[1:] & canary[:-1] & (src[1:] == src[:-1]) & (partition[1:] == partition[:-1])
                       & (offset[1:] == offset[:-1] + 1) & (cols["writer_id"][1:] == cols["writer_id"][:-1])
                       & (cols["incarnation"][1:] == cols["incarnation"][:-1])
                       & (seq[:-1] != np.uint64(2**64 - 1)) & (seq[1:] == seq[:-1] + np.uint64(1))
                       & (cols["txn_id"][1:] == cols["txn_id"][:-1]) & (abort[1:] == abort[:-1])
                       & (cols["txn_size"][1:] == cols["txn_size"][:-1]))
        if follows.any() and topic is not None:  # (one topic per Spark partition, and per src: compared
            # only where the rest says a run goes on)
            same_topic = pc.equal(topic.slice(1), topic.slice(0, n - 1)).to_numpy(zero_copy_only=False)
            follows[1:] &= same_topic
        if n > 2:  # a transaction's indexes a constant step apart: the step into row i as the one into i - 1
            step = np.diff(index)
            follows[2:] &= ~follows[1:-1] | (step[1:] == step[:-1])
    starts = np.flatnonzero(~follows)
    counts = np.diff(np.append(starts, n)).astype(np.int32)
    steps = np.zeros(len(starts), dtype=np.int32)
    longer = counts > 1
    steps[longer] = (index[starts[longer] + 1] - index[starts[longer]]).astype(np.int32)
    kept = pc.if_else(pa.array(ledger[starts]), values.take(starts).cast(pa.binary()), pa.scalar(None, pa.binary())) \
        if ledger.any() else pa.nulls(len(starts), pa.binary())
    run_topics = topic.take(starts) if topic is not None else pa.array(
        [topics[s] for s in src[starts].tolist()], pa.string())  # (a src not in topics: KeyError)
    arrays = [pa.array(src[starts], pa.int8()), run_topics, pa.array(partition[starts], pa.int32()),
              pa.array(offset[starts], pa.int64()), _newest(ts, starts), kept]
    arrays += [pa.array(cols[name][starts], typ) for name, typ, _ in DECODED_FIELDS[6:-2]]
    arrays += [pa.array(counts, pa.int32()), pa.array(steps, pa.int32())]
    rows = pa.RecordBatch.from_arrays(arrays, schema=DECODED_SCHEMA)
    latency = _latency_rows(src[canary], now_us - unsigned(cols["produce_ts_us"])[canary].astype(np.int64), now_us)
    return rows if latency is None else pa.concat_batches([rows, latency])


def _newest(ts: pa.Array, starts: np.ndarray) -> pa.Array:
    """Each run's newest record timestamp, null where none of its records has one (the ledger hold
    compares the readers' progress with it: a run's first record's would understate it by the run's
    span)."""
    if not len(starts):
        return pa.array([], pa.int64())
    low = np.iinfo(np.int64).min
    values = ts.cast(pa.int64()).fill_null(low).to_numpy(zero_copy_only=False)
    newest = np.maximum.reduceat(values, starts)
    return pa.array(newest, pa.int64(), mask=newest == low)


def latency_bin(age_us: np.ndarray) -> np.ndarray:
    """The bin of each age (µs): how many edges of :data:`LATENCY_EDGES_US` are at or below it (0
    below 1 ms, else 1 + how many times 1 % above 1 ms)."""
    return np.searchsorted(LATENCY_EDGES_US, np.asarray(age_us, dtype=np.float64), side="right").astype(np.int64)


def latency_seconds(bins: np.ndarray) -> np.ndarray:
    """A bin's age in seconds: its middle (geometric; half a millisecond for bin 0)."""
    b = np.asarray(bins, dtype=np.float64)
    return np.where(b <= 0, LATENCY_FLOOR_US / 2, LATENCY_FLOOR_US * LATENCY_RATIO ** (b - 0.5)) / 1e6


def _latency_rows(src: np.ndarray, age_us: np.ndarray, now_us: int) -> pa.RecordBatch | None:
    if not len(age_us):
        return None
    key = src.astype(np.int64) * 1_000_000 + latency_bin(age_us)
    keys, counts = np.unique(key, return_counts=True)
    m = len(keys)
    zeros = np.zeros(m, dtype=np.int64)
    columns = {"src": pa.array(keys // 1_000_000, pa.int8()), "topic": pa.nulls(m, pa.string()),
               "partition": pa.array(np.full(m, -1), pa.int32()), "offset": pa.array(keys % 1_000_000, pa.int64()),
               "ts_us": pa.array(np.full(m, now_us), pa.int64()), "value": pa.nulls(m, pa.binary()),
               "kind": pa.array(np.full(m, KIND_LATENCY), pa.int8()), "count": pa.array(counts, pa.int32())}
    return pa.RecordBatch.from_arrays([columns[name] if name in columns else pa.array(zeros, typ)
                                       for name, typ, _ in DECODED_FIELDS], schema=DECODED_SCHEMA)


def decode_values(values: pa.Array | list, skip: np.ndarray | None = None, lengths: np.ndarray | None = None,
                  crcs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The header columns of many values (an Arrow binary array or a list of bytes/None); rows
    in ``skip`` get kind ``KIND_LEDGER`` and zeros. ``lengths`` and ``crcs``: each whole value's
    length and CRC-32 (NaN or None: unknown) where ``values`` holds only their first bytes."""
    if not isinstance(values, pa.Array):
        values = pa.array(values, pa.binary())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_large_binary(values.type) or not pa.types.is_binary(values.type):
        values = values.cast(pa.binary())
    n = len(values)
    rows, held, data, starts = _header_rows(values)
    whole = None if lengths is None else np.nan_to_num(np.asarray(lengths, dtype=np.float64), nan=-1.0)
    # each value's whole length (-1: null), where the values hold only their first bytes too
    sizes = held if whole is None else np.where(held < 0, -1, np.where(whole >= 0, whole, held)).astype(np.int64)
    headers, valid = decode_header_rows(rows, sizes)
    skip = np.zeros(n, dtype=bool) if skip is None else skip
    valid &= ~skip
    kind = np.where(valid, KIND_CANARY, np.where((rows[:, 0] == MAGIC[0]) & (rows[:, 1] == MAGIC[1])
                                                 & (sizes >= 2), KIND_MALFORMED, KIND_FOREIGN)).astype(np.int8)
    short = (sizes >= 2) & (sizes < HEADER_SIZE) & ~skip  # shorter than a header: its first bytes still count
    for i in np.flatnonzero(short):
        if bytes(data[starts[i]:starts[i] + 2]) == MAGIC:
            kind[i] = KIND_MALFORMED
    kind[skip] = KIND_LEDGER
    digest = np.zeros(n, dtype=np.int64)
    length = np.where(sizes < 0, 0, sizes).astype(np.int32)
    known = None if crcs is None else np.asarray(crcs, dtype=np.float64)
    for i in np.flatnonzero(~valid & ~skip & (sizes > 0)):
        if known is not None and not np.isnan(known[i]):
            digest[i] = int(known[i])
        else:
            digest[i] = zlib.crc32(data[starts[i]:starts[i] + held[i]].tobytes())
    length[skip] = 0
    return {
        "kind": kind, "writer_id": headers["writer_id"].astype(np.uint64).view(np.int64),
        "incarnation": headers["incarnation"].astype(np.int64), "seq": headers["seq"].astype(np.uint64).view(np.int64),
        "produce_ts_us": headers["produce_ts_us"].astype(np.uint64).view(np.int64),
        "txn_id": headers["txn_id"].astype(np.uint64).view(np.int64), "flags": headers["flags"].astype(np.int16),
        "txn_size": headers["txn_size"].astype(np.int32), "txn_index": headers["txn_index"].astype(np.int32),
        "digest": digest, "length": length,
    }


def _header_rows(values: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each value's first 48 bytes as an ``(n, 48)`` array (zeros where shorter), the lengths (-1:
    null), the data buffer and each value's start in it — without a Python object per value."""
    n = len(values)
    bufs = values.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[values.offset:values.offset + n + 1].astype(np.int64) \
        if n else np.zeros(1, dtype=np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if n and bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    if values.null_count:
        lengths = np.where(values.is_null().to_numpy(zero_copy_only=False), -1, lengths)
    rows = np.zeros((n, HEADER_SIZE), dtype=np.uint8)
    long_enough = lengths >= HEADER_SIZE
    if long_enough.any():  # (a view of every 48-byte window of the buffer: a copy of the rows only, no index matrix)
        rows[long_enough] = np.lib.stride_tricks.sliding_window_view(data, HEADER_SIZE)[starts[long_enough]]
    return rows, lengths, data, starts


def unsigned(column: np.ndarray) -> np.ndarray:
    """A 64-bit header field back from its signed column."""
    return np.asarray(column, dtype=np.int64).view(np.uint64)



def rows_read(table: pa.Table) -> int:
    """How many Kafka rows a fetched table stands for: its rows, or where they are decoded (``kind``),
    each run's records and every other row but the latency ones."""
    if "kind" not in table.column_names:
        return table.num_rows
    counted = pc.not_equal(table.column("kind"), KIND_LATENCY)
    return int(pc.sum(pc.filter(table.column("count"), counted)).as_py() or 0)


def decode_table(table: pa.Table, topics: dict[int, str] | None = None) -> pa.Table:
    """:func:`decode_batches` over a whole table: the driver's own decoding when the executors do
    not decode (``watch.decode_on``); ``topics`` as :func:`decode_batch`'s."""
    return pa.Table.from_batches([decode_batch(b, topics=topics) for b in table.to_batches()], schema=DECODED_SCHEMA)
