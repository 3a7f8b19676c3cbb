"""The thin adapter between a micro-batch (an Arrow table) and the pure checker.

Columns (:data:`monitor.watch.executor.DECODED_SCHEMA`, what the executors send): ``src`` (0 =
canary read_committed, 1 = canary read_uncommitted, 2 = ledger, 3 = the EOS pipeline's output), ``topic``, ``partition``,
``offset``, ``ts_us`` (the record's timestamp: the broker's append time on the ``LogAppendTime``
ledger topic), the ledger's ``value`` and the canary records' decoded headers. Anything that is
not a well-formed canary record is counted (``foreign`` without the magic bytes, ``malformed``
with them) and still takes part in the offset checks under a digest identity. Ledger values that are
not entries are counted as ``ledger``. Reads go to the checker under their topic *name*: which
topic ID they belong to is the checker's to work out (:mod:`invariants.attribution`), with
``fresh_id(name)`` — a metadata lookup of the name's ID now — when it asks. Nothing here raises
on bad data.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from invariants.checker import Checker
from invariants.ledger_format import LedgerFormatError, decode
from invariants.model import RC, RU, Read, ReadRun, Violation
from invariants.topic_lifecycle import Fill
from monitor.metrics import E2E_BUCKETS
from monitor.record_format import FLAG_INTENDED_ABORT
from monitor.eos import output_format
from monitor.group import observations
from monitor.watch.executor import (
    KIND_CANARY, KIND_LATENCY, KIND_NAMES, SRC_EOS_OUTPUT, SRC_GROUP_OBS, SRC_LEDGER, decode_values, latency_seconds,
    unsigned,
)

SRC_RC, SRC_RU = 0, 1
ISOLATION_OF = {SRC_RC: RC, SRC_RU: RU}


@dataclass
class BatchStats:
    malformed: Counter = field(default_factory=Counter)  # kind -> rows
    e2e_counts: dict[Any, np.ndarray] = field(default_factory=dict)  # iso -> bucket counts (+Inf last)
    e2e_sum: Counter = field(default_factory=Counter)


def apply_batch(checker: Checker, table: pa.Table, fresh_id: Callable[[str], str | None],
                now: float | None = None, eos: EosInput | None = None,
                group_reader_at: dict[int, int] | None = None,
                ledger: list[tuple[int, bytes | None]] | None = None,
                fill: Fill | None = None) -> tuple[list[Violation], BatchStats]:
    """Feed one micro-batch to the checker: ledger first, then each reader's partitions, then
    the EOS pipeline's output and what the watch knows of the pipeline (``eos``), then the group
    canary's observations with where the read_committed reader of the canary stands
    (``group_reader_at``, None: no group watched). ``ledger``: the ledger rows to apply, (append
    time µs, value) in order, where the ledger hold chose them (:mod:`monitor.watch.ledger_hold`);
    None: the batch's own. ``fill``: reads directly what Spark skipped below its first read of a
    recreated topic (:meth:`invariants.topic_lifecycle.TopicLifecycle._fill_below`)."""
    now = time.time() if now is None else now
    stats = BatchStats()
    checker.begin_batch()
    apply_ledger_rows(checker, [(ts, v) for _p, ts, v in ledger_of(table)] if ledger is None else ledger, stats)
    for s, iso in ISOLATION_OF.items():
        part = table.filter(pc.equal(table.column("src"), s))
        if not part.num_rows:
            continue
        _apply_reads(checker, iso, part, fresh_id, now, stats, fill)
    if eos is not None:
        _apply_eos(checker, table, eos, stats)
    if group_reader_at is not None:
        _apply_group(checker, table, group_reader_at, stats)
    return checker.settle(), stats


def latencies_only(table: pa.Table, now: float | None = None) -> BatchStats:
    """A batch's produce → read latencies and nothing else: what ``vigil run --no-check`` keeps of
    a batch (the pipeline's own floor, :mod:`monitor.bench_live`). Every other row is left unread."""
    now = time.time() if now is None else now
    stats = BatchStats()
    for s, iso in ISOLATION_OF.items():
        rows = table.filter(pc.and_(pc.equal(table.column("src"), s), pc.equal(table.column("kind"), KIND_LATENCY)))
        if rows.num_rows:
            _latencies(iso, rows, now, stats)
    return stats


LEDGER_ROWS_SCHEMA = pa.schema([("partition", pa.int32()), ("ts_us", pa.int64()), ("value", pa.binary())])


def ledger_table(table: pa.Table) -> pa.Table:
    """The batch's ledger rows (partition, append time µs (0: none), value), in offset order per partition.
    One ``take`` of the rows' indices, in order (a filter and then a sort copied the values once more: a
    catch-up's first batch may bring most of its backlog's ledger; the take itself joins a chunked value
    column first)."""
    rows = pc.indices_nonzero(pc.equal(table.column("src"), SRC_LEDGER))
    if len(rows):
        where = pa.table({c: table.column(c).take(rows) for c in ("partition", "offset")})
        rows = rows.take(pc.sort_indices(where, sort_keys=[("partition", "ascending"), ("offset", "ascending")]))
    ledger = table.select([c for c in ("partition", "ts_us", "value") if c in table.column_names]).take(rows)
    stamps = (pc.fill_null(ledger.column("ts_us"), 0) if "ts_us" in ledger.column_names
              else pa.array([0] * ledger.num_rows, pa.int64()))
    return pa.table({"partition": pc.cast(ledger.column("partition"), pa.int32()), "ts_us": pc.cast(stamps, pa.int64()),
                     "value": pc.cast(ledger.column("value"), pa.binary())}, schema=LEDGER_ROWS_SCHEMA)


def ledger_of(table: pa.Table) -> list[tuple[int, int, bytes | None]]:
    """The batch's ledger rows, (partition, append time µs, value), in offset order per partition."""
    ledger = ledger_table(table)
    return list(zip(*(ledger.column(c).to_pylist() for c in LEDGER_ROWS_SCHEMA.names)))


def apply_ledger_rows(checker: Checker, rows: list[tuple[int, bytes | None]], stats: BatchStats) -> None:
    """Ledger rows decoded and applied in order; a value that is not an entry is counted."""
    if not rows:
        return
    entries = []
    for ts, value in rows:
        try:
            entries.append(decode(value, append_ts_us=ts or 0))
        except LedgerFormatError:
            stats.malformed["ledger"] += 1
    checker.apply_ledger(entries)


@dataclass
class EosInput:
    """The EOS pipeline beside its output records: where the output reader stands (per output
    partition) and a sample of the group's committed offsets with the output's high watermarks."""

    positions: dict[int, int] = field(default_factory=dict)
    sample: tuple | None = None  # (committed, output high watermarks, output partitions trimmed)


def _apply_eos(checker: Checker, table: pa.Table, eos: EosInput, stats: BatchStats) -> None:
    out = table.filter(pc.equal(table.column("src"), SRC_EOS_OUTPUT))
    by_partition: dict[int, list[tuple[int, tuple]]] = {}
    if out.num_rows:
        out = out.sort_by([("partition", "ascending"), ("offset", "ascending")])
        for q, off, value in zip(out.column("partition").to_pylist(), out.column("offset").to_pylist(),
                                 out.column("value").to_pylist()):
            copy = output_format.decode_copy(value)
            if copy is None:
                stats.malformed["eos_output"] += 1
            else:
                by_partition.setdefault(q, []).append((off, copy))
    for q in sorted(set(by_partition) | set(eos.positions)):
        checker.apply_eos_output(q, by_partition.get(q, []), eos.positions.get(q))
    if eos.sample is not None:
        checker.eos_committed(*eos.sample)


def _apply_group(checker: Checker, table: pa.Table, reader_at: dict[int, int], stats: BatchStats) -> None:
    rows = table.filter(pc.equal(table.column("src"), SRC_GROUP_OBS)).sort_by([("offset", "ascending")])
    log = observations.in_order(zip(rows.column("offset").to_pylist(), rows.column("value").to_pylist()),
                                checker.group_source)
    if log.malformed:
        stats.malformed["group_observation"] += log.malformed
    if log.foreign:
        stats.malformed["foreign_group_observation"] += log.foreign
    checker.apply_group_observations(log.seen, reader_at)


def to_reads(offsets: Any, values: list[bytes | None]) -> tuple[list[Read], Counter, np.ndarray]:
    """Records of one partition read as bytes (the re-fetcher's), decoded as the executors decode
    Spark's rows (:func:`monitor.watch.executor.decode_values`), so a record has one identity
    whichever way it was read."""
    return reads_of(np.asarray(offsets, dtype=np.int64), decode_values(values))


def reads_of(offsets: np.ndarray, cols: dict[str, Any]) -> tuple[list[Read], Counter, np.ndarray]:
    """Decoded rows of one partition as the checker reads them, the malformed ones counted by kind,
    and the produce timestamps (µs) of the canary ones."""
    kind = np.asarray(cols["kind"])
    valid = kind == KIND_CANARY
    wid, inc = unsigned(cols["writer_id"]).tolist(), np.asarray(cols["incarnation"]).tolist()
    seq = unsigned(cols["seq"]).tolist()
    txn = unsigned(cols["txn_id"]).tolist()
    abort = ((np.asarray(cols["flags"]) & FLAG_INTENDED_ABORT) != 0).tolist()
    size, index = np.asarray(cols["txn_size"]).tolist(), np.asarray(cols["txn_index"]).tolist()
    digest, length = np.asarray(cols["digest"]).tolist(), np.asarray(cols["length"]).tolist()
    malformed: Counter = Counter()
    reads = []
    for i, (ok, k) in enumerate(zip(valid.tolist(), kind.tolist())):
        if ok:
            reads.append(Read(int(offsets[i]), (wid[i], inc[i], seq[i]), txn[i], abort[i], size[i], index[i]))
        else:
            malformed[KIND_NAMES[k]] += 1
            reads.append(Read(int(offsets[i]), ("x", digest[i], length[i])))
    return reads, malformed, unsigned(cols["produce_ts_us"])[valid]


def _apply_reads(checker: Checker, iso: Any, part: pa.Table, fresh_id: Callable[[str], str | None],
                 now: float, stats: BatchStats, fill: Fill | None = None) -> None:
    """One reader's rows (runs, single records and latency rows, :mod:`monitor.watch.executor`)."""
    latency = part.filter(pc.equal(part.column("kind"), KIND_LATENCY))
    if latency.num_rows:
        part = part.filter(pc.not_equal(part.column("kind"), KIND_LATENCY))
    _latencies(iso, latency, now, stats)
    if not part.num_rows:
        return
    part = part.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    topics = part.column("topic").to_pylist()
    partitions = part.column("partition").to_numpy()
    items = _items(part, stats)
    start, n = 0, len(topics)
    while start < n:
        end = start
        while end < n and partitions[end] == partitions[start] and topics[end] == topics[start]:
            end += 1
        reads = items[start:end]
        name, p = topics[start], int(partitions[start])
        if not checker.apply_named_reads(iso, name, p, reads, fresh_id, fill):
            tid = fresh_id(name)  # nothing known of the name yet: where it points now
            if tid is None:
                stats.malformed["unknown_topic"] += sum(r.count if isinstance(r, ReadRun) else 1 for r in reads)
            else:
                checker.note_topic(name, tid)
                checker.apply_named_reads(iso, name, p, reads, fresh_id, fill)
        start = end


def _items(part: pa.Table, stats: BatchStats) -> list[Read | ReadRun]:
    """Each row as the checker reads it: a run, a canary record, or another record under its digest
    identity (counted by kind)."""
    offsets = part.column("offset").to_pylist()
    kind = part.column("kind").to_pylist()
    count = part.column("count").to_pylist()
    wid = unsigned(part.column("writer_id").to_numpy()).tolist()
    inc = part.column("incarnation").to_pylist()
    seq = unsigned(part.column("seq").to_numpy()).tolist()
    txn = unsigned(part.column("txn_id").to_numpy()).tolist()
    flags = part.column("flags").to_pylist()
    size, index = part.column("txn_size").to_pylist(), part.column("txn_index").to_pylist()
    digest, length = part.column("digest").to_pylist(), part.column("length").to_pylist()
    step = part.column("txn_step").to_pylist()
    items: list[Read | ReadRun] = []
    for i, k in enumerate(kind):
        if k == KIND_CANARY:
            items.append(ReadRun(offsets[i], count[i], wid[i], inc[i], seq[i], txn[i],
                                 bool(flags[i] & FLAG_INTENDED_ABORT), size[i], index[i], step[i]))
        else:
            stats.malformed[KIND_NAMES[k]] += 1
            items.append(Read(offsets[i], ("x", digest[i], length[i])))
    return items


def _latencies(iso: Any, rows: pa.Table, now: float, stats: BatchStats) -> None:
    """Produce → checked, from the executors' latency rows: each bin's age when decoded, plus the
    time from the decoding to now."""
    if rows.num_rows:
        age = latency_seconds(rows.column("offset").to_numpy()) + (now - rows.column("ts_us").to_numpy() / 1e6)
        age = age.clip(min=0)
        weights = rows.column("count").to_numpy().astype(np.float64)
    else:
        age, weights = np.zeros(0), np.zeros(0)
    counts, _ = np.histogram(age, bins=[-np.inf, *E2E_BUCKETS, np.inf], weights=weights)
    stats.e2e_counts[iso] = counts.astype(np.int64)
    stats.e2e_sum[iso] = float((age * weights).sum())
