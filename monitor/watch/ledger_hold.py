"""The ledger hold's adapter (:mod:`invariants.ledger_hold` has the rule and why): which ledger rows
a micro-batch brings, how near the canary readers are, whether the batch was cut short by
``maxOffsetsPerTrigger``, and the rows held, on disk.

**On disk.** The rows a batch leaves held are written to ``<state>/ledger-held/<batch id>.arrow``
(Arrow IPC: partition, append time, value) before the state of that batch is saved; the state saves
the threshold, the last batch that released everything, where each ledger partition's held rows
begin (batch, row) and every batch with a row held. Loading the state rebuilds the hold from the
files of the batches after the last that released everything, up to the state's batch, so a restart
(or a batch dropped half-applied) holds exactly what the saved state held; a file a held row needs
that is gone is an error naming it, never rows silently left out. A file of a batch above the saved
one is from a batch not saved and is ignored (written again when it is applied again). A file is
deleted once a saved state released all its rows. Spark does not fetch held rows again: its
checkpoint has moved past them.

**Values spilled.** Once a row's file is written, the hold keeps only where its value is in it
(:class:`Spilled`: batch and row), not the value: a held row took about 1.1 KB of memory with its
value (331 B of JSON on average, measured over outcome entries), and a catch-up of 50M reads holds
up to about 340,000 rows. The values are read back from the files (memory-mapped, the rows taken
within the file's record batches) when their rows are released (:func:`values_of`), before the state that
released them is saved and so before their files can be pruned. A file gone meanwhile fails the
batch, and the saved state can then not be loaded again: the watch saves nothing more
(:meth:`monitor.watch.runtime.WatchRuntime._revert`) and must be restarted, which names the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from invariants.ledger_hold import Held, LedgerHold
from monitor.durable import replace_durably
from invariants.ledger_format import LedgerFormatError, Outcomes, WriteOutcome, decode
from monitor.watch.batch import LEDGER_ROWS_SCHEMA, ledger_table
from monitor.watch.executor import KIND_CANARY, KIND_LATENCY



class Spilled(NamedTuple):
    """Where a held row's value is: the row ``index`` of batch ``batch_id``'s file."""

    batch_id: int
    index: int


class InBatch(NamedTuple):
    """Where the value of a row of the batch being applied is: its row in :func:`ledger_table`."""

    index: int


Item = tuple[int, "bytes | None | Spilled | InBatch"]  # a ledger row: (append time µs, value or where it is)

HELD_DIR = "ledger-held"
CANARY_SOURCES = (0, 1)  # the canary's read_committed and read_uncommitted sources
HELD_SCHEMA = LEDGER_ROWS_SCHEMA  # a held file: the rows of a batch's ledger_table left held


DECODE_CHUNK = 8192  # ledger rows whose values are Python objects at once, while a batch's are admitted
WRITE_CHUNK = 8192  # held rows whose values are copied at once, while a batch's file is written


def ledger_rows(ledger: pa.Table, where: Callable[[int], Any] = InBatch
                ) -> list[tuple[int, int | None, tuple[tuple[int, int], ...], Item]]:
    """The rows of a :func:`ledger_table` (or of a held file) as the hold admits them, their values
    left in it: ``where`` says where row i's value is (:class:`InBatch`, :class:`Spilled`). A
    catch-up's first batch may fetch most of its backlog's ledger, and its values as Python objects
    were the monitor's peak of memory."""
    partitions, stamps = ledger.column("partition").to_pylist(), ledger.column("ts_us").to_pylist()
    out = []
    for start in range(0, ledger.num_rows, DECODE_CHUNK):
        for i, value in enumerate(ledger.column("value").slice(start, DECODE_CHUNK).to_pylist(), start):
            ts, acked = due_of(value, stamps[i])
            out.append((partitions[i], ts, acked, (stamps[i], where(i))))
    return out


def due_of(value: bytes | None, append_ts_us: int) -> tuple[int | None, tuple[tuple[int, int], ...]]:
    """What decides when a ledger row is due: its writer's clock (None: not an entry) and the lowest
    canary offset it acknowledges per canary partition."""
    try:
        entry = decode(value, append_ts_us=append_ts_us)
    except LedgerFormatError:
        return None, ()
    acked: dict[int, int] = {}
    if isinstance(entry.body, Outcomes):
        for run in entry.body.runs:
            if run.outcome is WriteOutcome.ACKED and run.first_offset >= 0:
                acked[run.partition] = min(run.first_offset, acked.get(run.partition, run.first_offset))
    return entry.ts_us, tuple(sorted(acked.items()))


def take(directory: Path, hold: LedgerHold, batch_id: int, table: pa.Table, drained: bool
         ) -> list[tuple[int, "bytes | None"]]:
    """One batch through the hold (:meth:`LedgerHold.take`): the rows it leaves held written beside the
    state, and the rows to apply before its reads, (append time µs, value) in order."""
    ledger = ledger_table(table)
    released, still = hold.take(batch_id, ledger_rows(ledger), newest_read_us(table), read_ends(table), drained)
    write_held(directory, batch_id, still, ledger)
    return values_of(directory, released, ledger)


def _read(table: pa.Table) -> pa.Table:
    """The canary readers' rows (runs and single records; not the latency rows)."""
    src = table.column("src")
    rows = table.filter(pc.or_(pc.equal(src, CANARY_SOURCES[0]), pc.equal(src, CANARY_SOURCES[1])))
    if "kind" in rows.column_names:
        rows = rows.filter(pc.not_equal(rows.column("kind"), KIND_LATENCY))
    return rows


def _last_offsets(rows: pa.Table) -> pa.Array:
    if "count" not in rows.column_names:
        return rows.column("offset")
    return pc.subtract(pc.add(rows.column("offset"), pc.cast(rows.column("count"), pa.int64())), 1)


def newest_read_us(table: pa.Table) -> int | None:
    """The newest timestamp of a canary record this batch read, by either reader (a run row carries
    its newest record's: :func:`monitor.watch.executor.decode_batch`); None: none read. Only
    well-formed canary records count (a foreign record may carry any time), and no time at or
    below 0 (none known)."""
    rows = _read(table)
    if "kind" in rows.column_names:
        rows = rows.filter(pc.equal(rows.column("kind"), KIND_CANARY))
    if not rows.num_rows or "ts_us" not in rows.column_names:
        return None
    newest = pc.max(rows.column("ts_us")).as_py()
    return None if newest is None or newest <= 0 else int(newest)


def read_ends(table: pa.Table) -> dict[int, int]:
    """The highest offset this batch read per canary partition, by either reader."""
    rows = _read(table)
    if not rows.num_rows:
        return {}
    grouped = pa.table({"partition": rows.column("partition"), "last": _last_offsets(rows)}).group_by(
        "partition").aggregate([("last", "max")])
    return dict(zip(grouped.column("partition").to_pylist(), grouped.column("last_max").to_pylist()))


def cut_short(table: pa.Table, max_offsets_per_trigger: int) -> bool:
    """Whether ``maxOffsetsPerTrigger`` cut this batch short: a canary reader's offsets, from the
    first it read to the last, per partition, add up to nine tenths of it or more (the limit counts
    offsets; the ranges Spark planned can begin or end with a transaction marker no record is read
    at). A batch taken as cut short that was not (the last of a catch-up) leaves its rows to the
    next batch, or to Spark's word that the query read everything there was
    (:meth:`monitor.watch.runtime.WatchRuntime.release_held_ledger`); one taken as not cut short
    releases early, which is safe."""
    rows = _read(table)
    if not rows.num_rows:
        return False
    spans = pa.table({"src": rows.column("src"), "partition": rows.column("partition"),
                      "first": rows.column("offset"), "last": _last_offsets(rows)}).group_by(
        ["src", "partition"]).aggregate([("first", "min"), ("last", "max")])
    per_source: dict[int, int] = {}
    for src, first, last in zip(spans.column("src").to_pylist(), spans.column("first_min").to_pylist(),
                                spans.column("last_max").to_pylist()):
        per_source[src] = per_source.get(src, 0) + last - first + 1
    return max(per_source.values()) * 10 >= max_offsets_per_trigger * 9


def directory_of(directory: Path) -> Path:
    return directory / HELD_DIR


def path_of(directory: Path, batch_id: int) -> Path:
    return directory_of(directory) / f"{batch_id:012d}.arrow"


def write_held(directory: Path, batch_id: int, still: list[Held], ledger: pa.Table | None = None) -> None:
    """The rows batch ``batch_id`` left held, durably, before its state is saved (none: any file of
    an earlier attempt at this batch removed); ``ledger``: the batch's :func:`ledger_table`, where
    rows admitted from it have their values."""
    path = path_of(directory, batch_id)
    if not still:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if ledger is not None and all(isinstance(h.item[1], InBatch) for h in still):
        rows = pa.array([h.item[1].index for h in still], pa.int64())  # (the values stay Arrow's)

        def parts() -> Iterator[pa.Table]:  # (one chunk's copy of the values at a time, not the batch's)
            for start in range(0, len(rows), WRITE_CHUNK):
                yield ledger.take(rows.slice(start, WRITE_CHUNK))
    else:
        table = pa.table({"partition": pa.array([h.key for h in still], pa.int32()),
                          "ts_us": pa.array([h.item[0] for h in still], pa.int64()),
                          "value": pa.array([v for _ts, v in values_of(directory, [h.item for h in still], ledger)],
                                            pa.binary())}, schema=HELD_SCHEMA)

        def parts() -> Iterator[pa.Table]:
            yield table

    def write(f: Any) -> None:
        with pa.ipc.new_file(f, HELD_SCHEMA) as w:
            for part in parts():
                w.write_table(part)

    replace_durably(path, write)
    for h in still:  # written: the values are read back from the file when released
        h.item = (h.item[0], Spilled(batch_id, h.index))


def values_of(directory: Path, items: list[Item], ledger: pa.Table | None = None) -> list[tuple[int, "bytes | None"]]:
    """Rows with their values, in order: those spilled read back from their batches' files, those of
    the batch being applied taken from its ``ledger`` (:func:`ledger_table`). A file gone or short
    is an error (its rows would be lost); the batch fails, and loading the state saved names the
    file (:func:`load`)."""
    wanted: dict[int, list[int]] = {}
    here: list[int] = []
    for _ts, v in items:
        if isinstance(v, Spilled):
            wanted.setdefault(v.batch_id, []).append(v.index)
        elif isinstance(v, InBatch):
            here.append(v.index)
    if not wanted and not here:
        return items  # type: ignore[return-value]
    found: dict[Any, bytes | None] = {}
    if here:
        if ledger is None:
            raise ValueError("ledger rows of the batch being applied, without its ledger rows")
        found.update(zip(map(InBatch, here), ledger.column("value").take(pa.array(here, pa.int64())).to_pylist()))
    for b, rows in wanted.items():
        path = path_of(directory, b)
        try:
            with pa.memory_map(str(path)) as source:
                got = _values_at(source, rows)
        except (OSError, IndexError, pa.ArrowException) as exc:
            raise ValueError(f"ledger rows held from batch {b} cannot be read back from {path}: {exc}") from exc
        found.update(zip((Spilled(b, i) for i in rows), got))
    return [(ts, found[v] if isinstance(v, (Spilled, InBatch)) else v) for ts, v in items]


def _values_at(source: Any, rows: list[int]) -> list["bytes | None"]:
    """The values at ``rows`` of a held file, taken within each of its record batches: a file is
    written in chunks (:data:`WRITE_CHUNK`), and a ``take`` over the whole column first joins them
    (a copy of the file's every value, for each batch that releases a few of its rows)."""
    reader = pa.ipc.open_file(source)
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    starts = np.cumsum([0] + [b.num_rows for b in batches])
    at = np.asarray(rows, dtype=np.int64)
    if at.size and (at.min() < 0 or at.max() >= starts[-1]):
        raise IndexError(f"rows {at.min()}..{at.max()} asked of a file of {starts[-1]}")
    which = np.searchsorted(starts, at, side="right") - 1
    out: list[bytes | None] = [None] * len(rows)
    for k in np.unique(which):
        picked = np.flatnonzero(which == k)
        values = batches[k].column("value").take(pa.array(at[picked] - starts[k])).to_pylist()
        for j, value in zip(picked.tolist(), values):
            out[j] = value
    return out


def _held_files(directory: Path) -> list[tuple[int, Path]]:
    folder = directory_of(directory)
    if not folder.is_dir():
        return []
    out = []
    for p in folder.glob("*.arrow"):
        try:
            out.append((int(p.stem), p))
        except ValueError:
            continue
    return sorted(out)


def load(directory: Path, doc: dict[str, Any] | None, batch_id: int, lead_us: int = 0) -> LedgerHold:
    """The hold the state saved at ``batch_id`` held (``doc``: its saved threshold, last full release
    and heads; None: a state saved before the hold, which held nothing)."""
    if not doc:
        return LedgerHold(lead_us, released_through=batch_id)
    files = []
    for b, path in _held_files(directory):
        if doc["released_through"] < b <= batch_id:
            with pa.memory_map(str(path)) as source:
                t = pa.ipc.open_file(source).read_all()
            files.append((b, ledger_rows(t, lambda i, b=b: Spilled(b, i))))
    rows_in = dict((b, len(rows)) for b, rows in files)
    for key, b, index in doc.get("heads", []):  # Spark's checkpoint is past these rows: never silently lost
        if rows_in.get(b, 0) <= index:
            raise ValueError(f"ledger rows held from batch {b} (partition {key}) are missing: "
                             f"{path_of(directory, b)} is gone or short")
    for b in doc.get("batches", []):  # every file a row held needs, not only the heads' (states saved since 6d3adcf)
        if b not in rows_in:
            raise ValueError(f"ledger rows held from batch {b} are missing: {path_of(directory, b)} is gone")
    return LedgerHold.rebuild(lead_us, doc, files)


def prune(directory: Path, hold: LedgerHold, saved_batch_id: int) -> None:
    """After a save: the files whose rows that state released entirely, and any of a batch above
    it (an attempt not saved), removed."""
    oldest = hold.oldest_batch()
    for b, path in _held_files(directory):
        if b > saved_batch_id or b <= hold.released_through or (oldest is None or b < oldest):
            try:
                path.unlink()
            except OSError:
                pass  # left to the next save
