"""A micro-batch's input kept on disk from Spark's commit until the checker has applied it.

With ``watch.overlap_check`` the batch handler returns as soon as a batch is fetched, decoded and
written here: Spark commits it and fetches the next while the checker applies it in a thread of
its own (:mod:`monitor.watch.runtime`). Spark never hands a committed batch again, so a batch is
applied exactly once by this rule: **a file here whose id is above the saved state's batch id is
applied, in id order, before any later batch** — at the monitor's start, and before the next batch
once the applier failed. A batch whose file was written but which Spark did not commit (a crash
between the two) is handed again with the same offsets (Spark re-plans a batch id as its offset
log says): applied from the file, the handed copy is then skipped as already applied.

``<checker state dir>/pending-batches/<batch id>.arrow``: an Arrow IPC file of the decoded table
(:data:`monitor.watch.executor.DECODED_SCHEMA`: runs, single rows, latency rows — a few rows per
producer batch) whose schema metadata holds what the watch knew beside it when it was fetched (the
EOS output reader's positions and the group's sample, where the group canary's reader stood). A
file is written to a temporary name, synced and renamed, so a name here is always a whole batch;
it is removed once the state that applied it is saved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from monitor.durable import replace_durably
from monitor.watch.batch import EosInput
from monitor.watch.state import StateError, StateSaveError

DIR = "pending-batches"
SUFFIX = ".arrow"
META_KEY = b"vigil.batch"


@dataclass
class PendingBatch:
    """One fetched micro-batch: what :func:`monitor.watch.batch.apply_batch` takes."""

    batch_id: int
    table: pa.Table
    eos: EosInput | None = None
    group_reader_at: dict[int, int] | None = None


def _pairs(d: dict[int, int] | None) -> list[list[int]] | None:
    return None if d is None else [[int(k), int(v)] for k, v in sorted(d.items())]


def _dict(pairs: list[list[int]] | None) -> dict[int, int] | None:
    return None if pairs is None else {int(k): int(v) for k, v in pairs}


def _meta(batch: PendingBatch) -> bytes:
    eos = None
    if batch.eos is not None:
        sample = batch.eos.sample
        eos = {"positions": _pairs(batch.eos.positions),
               "sample": None if sample is None else [_pairs(sample[0]), _pairs(sample[1]), list(sample[2])]}
    return json.dumps({"batch_id": batch.batch_id, "eos": eos, "group_reader_at": _pairs(batch.group_reader_at)},
                      separators=(",", ":")).encode()


def _from_meta(table: pa.Table, raw: bytes) -> PendingBatch:
    doc = json.loads(raw)
    eos = None
    if doc["eos"] is not None:
        s = doc["eos"]["sample"]
        eos = EosInput(_dict(doc["eos"]["positions"]) or {},
                       None if s is None else (_dict(s[0]), _dict(s[1]), [int(q) for q in s[2]]))
    return PendingBatch(int(doc["batch_id"]), table.replace_schema_metadata(None), eos,
                        _dict(doc["group_reader_at"]))


def directory_of(state_dir: Path) -> Path:
    return state_dir / DIR


def path_of(state_dir: Path, batch_id: int) -> Path:
    return directory_of(state_dir) / f"{batch_id}{SUFFIX}"


def write(state_dir: Path, batch: PendingBatch) -> Path:
    """Write ``batch`` whole under its id (synced, then renamed in); raises
    :class:`~monitor.watch.state.StateSaveError` when the volume refuses it. No partial file is left;
    a whole one may be, when only the directory's sync failed: it is the batch Spark hands again
    (not committed), and it is applied from there first."""
    final = path_of(state_dir, batch.batch_id)
    table = batch.table.replace_schema_metadata({META_KEY: _meta(batch)})

    def write_table(f: BinaryIO) -> None:
        with pa.ipc.new_file(f, table.schema) as out:
            out.write_table(table)

    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        replace_durably(final, write_table)
    except OSError as exc:
        raise StateSaveError(final, exc) from None
    return final


def read(path: Path) -> PendingBatch:
    """The batch written at ``path``; a file that cannot be read is a :class:`StateError` naming it
    and the way out (its batch is committed in Spark: without it the state cannot go on)."""
    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
        raw = (table.schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise ValueError("no batch description in its metadata")
        batch = _from_meta(table, raw)
    except (OSError, ValueError, KeyError, TypeError, IndexError, pa.ArrowException) as exc:
        raise StateError(f"{path}: a fetched batch not applied yet cannot be read ({type(exc).__name__}: {exc}); "
                         "Spark has committed it, so the checker state cannot go on without it: rebuild the state "
                         "from the evidence and the retained logs with `vigil state rebuild`") from None
    if path.name != f"{batch.batch_id}{SUFFIX}":
        raise StateError(f"{path}: holds batch {batch.batch_id}, not the one its name says; rebuild the state "
                         "with `vigil state rebuild`")
    return batch


def pending_ids(state_dir: Path, after: int) -> list[int]:
    """The ids of the batches written here above ``after`` (the saved state's batch id), in order."""
    d = directory_of(state_dir)
    if not d.is_dir():
        return []
    ids = (int(p.name[:-len(SUFFIX)]) for p in d.iterdir()
           if p.name.endswith(SUFFIX) and p.name[:-len(SUFFIX)].isdigit())
    return sorted(i for i in ids if i > after)


def drop_through(state_dir: Path, batch_id: int, temporaries: bool = False) -> None:
    """Remove the files of batches up to ``batch_id`` (applied and saved); ``temporaries``: also
    what a write cut short left (only when no write can be under way: at the start). A file that
    cannot be removed stays (it is at or below the saved id, so it is never applied again)."""
    d = directory_of(state_dir)
    if not d.is_dir():
        return
    for p in d.iterdir():
        stem = p.name[:-len(SUFFIX)] if p.name.endswith(SUFFIX) else ""
        if (temporaries and p.name.endswith(".tmp")) or (stem.isdigit() and int(stem) <= batch_id):
            try:
                p.unlink()
            except OSError:
                pass
