"""Run-length form of per-record state in the saved document.

Much of the checker's state is one entry per record — which record a reader holds at each
offset it remembers, which acknowledged writes were found where they were acknowledged — and
records come in runs: one writer's consecutive seqs at consecutive offsets. The watch saves the
whole state after every micro-batch, so its durable form matters to every batch's latency: a run
``[writer_id, inc, first_seq, first_offset, count, *same]`` stands for ``count`` rows
``(writer_id, inc, first_seq + i, first_offset + i, *same)``. Packing and unpacking are exact
inverses up to row order (the rows are sets keyed by ``(writer_id, inc, seq)``).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


def pack_runs(rows: Iterable[tuple]) -> list[list]:
    """Rows ``(writer_id, inc, seq, offset, *same)`` of integers (``writer_id`` and ``seq`` unsigned
    64-bit, the rest signed) as runs, sorted (see the module docstring). Vectorised: the watch packs
    some hundred thousand rows after every micro-batch."""
    cols = list(zip(*rows))
    if not cols:
        return []
    wid, seq = np.array(cols[0], dtype=np.uint64), np.array(cols[2], dtype=np.uint64)
    rest = [np.array(c, dtype=np.int64) for c in (cols[1], cols[3], *cols[4:])]  # inc, offset, *same
    inc, off, same = rest[0], rest[1], rest[2:]
    order = np.lexsort((off, seq, inc, wid))
    wid, seq, inc, off = wid[order], seq[order], inc[order], off[order]
    same = [c[order] for c in same]
    follows = (wid[1:] == wid[:-1]) & (inc[1:] == inc[:-1]) & (seq[:-1] != np.uint64(2**64 - 1)) \
        & (seq[1:] == seq[:-1] + np.uint64(1)) & (off[1:] == off[:-1] + 1)
    for c in same:
        follows &= c[1:] == c[:-1]
    starts = np.flatnonzero(np.concatenate(([True], ~follows)))
    counts = np.diff(np.append(starts, len(wid)))
    columns = [wid[starts].tolist(), inc[starts].tolist(), seq[starts].tolist(), off[starts].tolist(),
               counts.tolist(), *(c[starts].tolist() for c in same)]
    return [list(run) for run in zip(*columns)]


def unpack_runs(runs: Iterable[list]) -> Iterator[tuple]:
    """The rows of :func:`pack_runs`' runs."""
    for wid, inc, seq, off, n, *same in runs:
        for i in range(n):
            yield (wid, inc, seq + i, off + i, *same)
