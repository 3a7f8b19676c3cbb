"""Work done on Spark's executors, before a micro-batch reaches the driver.

``decode_batches`` runs in Spark's Python workers (``DataFrame.mapInArrow``) over the union of the
three Kafka sources, one Spark partition (one offset range of one topic-partition of one reader) at
a time, in offset order. A canary row leaves the executor as its decoded header — writer id,
incarnation, seq, produce time, transaction id, flags, transaction size and index — plus what the
checker needs of anything that is not a well-formed canary record: its kind (``foreign`` without
the magic bytes, ``malformed`` with them) and its identity, the CRC-32 and length of the whole value
(:func:`invariants.model.foreign_ident`). The value itself stays on the executor; only ledger rows
(``src`` 2) and the EOS pipeline's output rows (``src`` 3, 16-64 bytes) keep theirs, the driver
decodes those.

The driver and the re-fetcher decode through the same :func:`decode_values`, so a record has one
identity whichever way it was read. This module imports only numpy, pyarrow and
:mod:`monitor.record_format`; it reaches the executors in the zip :mod:`monitor.watch.ship` builds,
not from an installed copy. 64-bit unsigned header fields travel as the same bits in signed
``bigint`` columns (Spark has no unsigned type); :func:`unsigned` turns them back.
"""

from __future__ import annotations

import zlib
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from monitor.record_format import HEADER_SIZE, MAGIC, decode_header_rows

SRC_LEDGER = 2
SRC_EOS_OUTPUT = 3  # the EOS pipeline's output topic (rows keep their value, as the ledger's do)
SRC_GROUP_OBS = 4  # the group canary's observation log (rows keep their value too)
KIND_LEDGER, KIND_CANARY, KIND_FOREIGN, KIND_MALFORMED = -1, 0, 1, 2
KIND_NAMES = {KIND_FOREIGN: "foreign", KIND_MALFORMED: "malformed"}

DECODED_FIELDS = (
    ("src", pa.int8(), "tinyint"), ("topic", pa.string(), "string"), ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "bigint"), ("ts_us", pa.int64(), "bigint"), ("value", pa.binary(), "binary"),
    ("kind", pa.int8(), "tinyint"), ("writer_id", pa.int64(), "bigint"), ("incarnation", pa.int64(), "bigint"),
    ("seq", pa.int64(), "bigint"), ("produce_ts_us", pa.int64(), "bigint"), ("txn_id", pa.int64(), "bigint"),
    ("flags", pa.int16(), "smallint"), ("txn_size", pa.int32(), "int"), ("txn_index", pa.int32(), "int"),
    ("digest", pa.int64(), "bigint"), ("length", pa.int32(), "int"),
)
DECODED_SCHEMA = pa.schema([(name, typ) for name, typ, _ in DECODED_FIELDS])
DECODED_DDL = ", ".join(f"`{name}` {ddl}" for name, _, ddl in DECODED_FIELDS)
HEADER_COLUMNS = ("kind", "writer_id", "incarnation", "seq", "produce_ts_us", "txn_id", "flags", "txn_size",
                  "txn_index", "digest", "length")


def decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: each batch of Kafka rows as decoded rows, in the same order."""
    for batch in batches:
        yield decode_batch(batch)


def decode_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    n = batch.num_rows
    src = batch.column("src").to_numpy(zero_copy_only=False).astype(np.int8)
    values = batch.column("value")
    ledger = src >= SRC_LEDGER
    cols = decode_values(values, skip=ledger)
    kept = pc.if_else(pa.array(ledger), values.cast(pa.binary()), pa.scalar(None, pa.binary())) \
        if ledger.any() else pa.nulls(n, pa.binary())
    ts = batch.column("ts_us") if "ts_us" in batch.schema.names else pa.nulls(n, pa.int64())
    arrays = [pa.array(src, pa.int8()), batch.column("topic").cast(pa.string()), batch.column("partition").cast(pa.int32()),
              batch.column("offset").cast(pa.int64()), ts.cast(pa.int64()), kept]
    arrays += [pa.array(cols[name], typ) for name, typ, _ in DECODED_FIELDS[6:]]
    return pa.RecordBatch.from_arrays(arrays, schema=DECODED_SCHEMA)


def decode_values(values: pa.Array | list, skip: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The header columns of many values (an Arrow binary array or a list of bytes/None); rows
    in ``skip`` get kind ``KIND_LEDGER`` and zeros."""
    if not isinstance(values, pa.Array):
        values = pa.array(values, pa.binary())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_large_binary(values.type) or not pa.types.is_binary(values.type):
        values = values.cast(pa.binary())
    n = len(values)
    rows, lengths, data, starts = _header_rows(values)
    headers, valid = decode_header_rows(rows, lengths)
    skip = np.zeros(n, dtype=bool) if skip is None else skip
    valid &= ~skip
    kind = np.where(valid, KIND_CANARY, np.where((rows[:, 0] == MAGIC[0]) & (rows[:, 1] == MAGIC[1])
                                                 & (lengths >= 2), KIND_MALFORMED, KIND_FOREIGN)).astype(np.int8)
    short = (lengths >= 2) & (lengths < HEADER_SIZE) & ~skip  # shorter than a header: its first bytes still count
    for i in np.flatnonzero(short):
        if bytes(data[starts[i]:starts[i] + 2]) == MAGIC:
            kind[i] = KIND_MALFORMED
    kind[skip] = KIND_LEDGER
    digest = np.zeros(n, dtype=np.int64)
    length = np.where(lengths < 0, 0, lengths).astype(np.int32)
    for i in np.flatnonzero(~valid & ~skip & (lengths > 0)):
        digest[i] = zlib.crc32(data[starts[i]:starts[i] + lengths[i]].tobytes())
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
    if long_enough.any():
        rows[long_enough] = data[starts[long_enough][:, None] + np.arange(HEADER_SIZE)]
    return rows, lengths, data, starts


def unsigned(column: np.ndarray) -> np.ndarray:
    """A 64-bit header field back from its signed column."""
    return np.asarray(column, dtype=np.int64).view(np.uint64)



def decode_table(table: pa.Table) -> pa.Table:
    """:func:`decode_batches` over a whole table: the driver's own decoding when the executors do
    not decode (``watch.decode_on``)."""
    return pa.Table.from_batches(list(decode_batches(table.to_batches())), schema=DECODED_SCHEMA)
