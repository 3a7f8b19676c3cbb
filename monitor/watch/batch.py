"""The thin adapter between a micro-batch (an Arrow table) and the pure checker.

Columns: ``src`` (0 = canary read_committed, 1 = canary read_uncommitted, 2 = ledger),
``topic``, ``partition``, ``offset``, ``value`` and, when present, ``ts_us`` (the record's
timestamp: the broker's append time on the ``LogAppendTime`` ledger topic). Canary values are
decoded in bulk with :func:`monitor.record_format.decode_headers`; anything that is not a
well-formed canary record is counted (``foreign`` without the magic bytes, ``malformed`` with
them) and still takes part in the offset checks under a digest identity. Ledger values that are
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
from invariants.model import RC, RU, Read, Violation, foreign_ident
from monitor.metrics import E2E_BUCKETS
from monitor.record_format import FLAG_INTENDED_ABORT, decode_headers, malformed_kind

SRC_RC, SRC_RU, SRC_LEDGER = 0, 1, 2
ISOLATION_OF = {SRC_RC: RC, SRC_RU: RU}


@dataclass
class BatchStats:
    malformed: Counter = field(default_factory=Counter)  # kind -> rows
    e2e_counts: dict[Any, np.ndarray] = field(default_factory=dict)  # iso -> bucket counts (+Inf last)
    e2e_sum: Counter = field(default_factory=Counter)


def apply_batch(checker: Checker, table: pa.Table, fresh_id: Callable[[str], str | None],
                now: float | None = None) -> tuple[list[Violation], BatchStats]:
    """Feed one micro-batch to the checker: ledger first, then each reader's partitions."""
    now = time.time() if now is None else now
    stats = BatchStats()
    checker.begin_batch()
    ledger = table.filter(pc.equal(table.column("src"), SRC_LEDGER))
    if ledger.num_rows:
        ledger = ledger.sort_by([("partition", "ascending"), ("offset", "ascending")])
        stamps = ledger.column("ts_us").to_pylist() if "ts_us" in ledger.column_names else [0] * ledger.num_rows
        entries = []
        for value, ts in zip(ledger.column("value").to_pylist(), stamps):
            try:
                entries.append(decode(value, append_ts_us=ts or 0))
            except LedgerFormatError:
                stats.malformed["ledger"] += 1
        checker.apply_ledger(entries)
    for s, iso in ISOLATION_OF.items():
        part = table.filter(pc.equal(table.column("src"), s))
        if not part.num_rows:
            continue
        part = part.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        _apply_reads(checker, iso, part, fresh_id, now, stats)
    return checker.settle(), stats


def to_reads(offsets: Any, values: list[bytes | None]) -> tuple[list[Read], Counter, np.ndarray]:
    """Records of one partition as the checker reads them, the malformed ones counted by kind,
    and the produce timestamps (µs) of the canary ones. The Spark batches and the re-fetches
    both decode through here, so a record has one identity whichever way it was read."""
    headers, valid = decode_headers(values)
    wid, inc, seq = headers["writer_id"].tolist(), headers["incarnation"].tolist(), headers["seq"].tolist()
    txn = headers["txn_id"].tolist()
    abort = ((headers["flags"] & FLAG_INTENDED_ABORT) != 0).tolist()
    size, index = headers["txn_size"].tolist(), headers["txn_index"].tolist()
    malformed: Counter = Counter()
    reads = []
    for i, ok in enumerate(valid.tolist()):
        if ok:
            reads.append(Read(int(offsets[i]), (wid[i], inc[i], seq[i]), txn[i], abort[i], size[i], index[i]))
        else:
            malformed[malformed_kind(values[i])] += 1
            reads.append(Read(int(offsets[i]), foreign_ident(values[i])))
    return reads, malformed, headers["produce_ts_us"][valid]


def _apply_reads(checker: Checker, iso: Any, part: pa.Table, fresh_id: Callable[[str], str | None],
                 now: float, stats: BatchStats) -> None:
    values = part.column("value").to_pylist()
    topics = part.column("topic").to_pylist()
    partitions = part.column("partition").to_numpy()
    offsets = part.column("offset").to_numpy()
    latencies = []
    start = 0
    n = len(values)
    while start < n:
        end = start
        while end < n and partitions[end] == partitions[start] and topics[end] == topics[start]:
            end += 1
        reads, malformed, ts = to_reads(offsets[start:end], values[start:end])
        stats.malformed.update(malformed)
        latencies.append((now - ts / 1e6).clip(min=0))
        name, p = topics[start], int(partitions[start])
        if not checker.apply_named_reads(iso, name, p, reads, fresh_id):
            tid = fresh_id(name)  # nothing known of the name yet: where it points now
            if tid is None:
                stats.malformed["unknown_topic"] += end - start
            else:
                checker.note_topic(name, tid)
                checker.apply_named_reads(iso, name, p, reads, fresh_id)
        start = end
    latency = np.concatenate(latencies) if latencies else np.zeros(0)
    counts, _ = np.histogram(latency, bins=[-np.inf, *E2E_BUCKETS, np.inf])
    stats.e2e_counts[iso] = counts
    stats.e2e_sum[iso] = float(latency.sum())
