"""Run-length form of per-record state in the saved document.

Much of the checker's state is one entry per record — which record a reader holds at each
offset it remembers, which acknowledged writes were found where they were acknowledged — and
records come in runs: one writer's consecutive seqs at consecutive offsets. The watch saves the
whole state after every micro-batch, so its durable form matters to every batch's latency: a run
``[writer_id, inc, first_seq, first_offset, count, *same]`` stands for ``count`` rows
``(writer_id, inc, first_seq + i, first_offset + i, *same)``. Packing and unpacking are exact
inverses up to row order (the rows are sets keyed by ``(writer_id, inc, seq)``).

Most of that state does not change from one batch to the next: only the offsets near the
frontier, and the few a re-read rewrote. So the runs are also kept per *chunk* of
``DOC_CHUNK`` offsets (:class:`ChunkRuns`), dropped when a row of the chunk changes, and
:func:`merge_runs` joins the chunks' runs into exactly what :func:`pack_runs` gives for all rows.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import numpy as np

DOC_CHUNK = 1024  # offsets per chunk of cached runs
_KEEP = [True]  # whether durable forms are kept between saves (off: every save computes all, the tests' reference)


def keeping() -> bool:
    """Whether the parts of the durable form kept since the last save may be used."""
    return _KEEP[0]


@contextmanager
def computed_afresh() -> Iterator[None]:
    """Within: every durable form is computed from the state itself, nothing kept is used (the
    tests compare the two)."""
    _KEEP[0] = False
    try:
        yield
    finally:
        _KEEP[0] = True


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


def runs_in_order(rows: Iterable[tuple[int, int, int, int]]) -> list[list[int]]:
    """Rows ``(writer_id, inc, seq, offset)`` as :func:`pack_runs`' runs, in the order given (no
    sorting, no numpy: for a few rows, or rows whose order is kept); a row joins the run before it
    when it is that run's next seq at its next offset."""
    out: list[list[int]] = []
    for wid, inc, seq, at in rows:
        last = out[-1] if out else None
        if (last is not None and last[0] == wid and last[1] == inc and last[2] + last[4] == seq
                and last[3] + last[4] == at):
            last[4] += 1
        else:
            out.append([wid, inc, seq, at, 1])
    return out


def unpack_runs(runs: Iterable[list]) -> Iterator[tuple]:
    """The rows of :func:`pack_runs`' runs."""
    for wid, inc, seq, off, n, *same in runs:
        for i in range(n):
            yield (wid, inc, seq + i, off + i, *same)


def merge_runs(runs: list[list]) -> list[list]:
    """Runs of disjoint row sets (unique ``(writer_id, inc, seq)``), each set packed by
    :func:`pack_runs`, as :func:`pack_runs` packs their union: sorted, and a run that the next one
    continues (same writer and incarnation, next seq at the next offset, same other columns)
    joined with it."""
    out: list[list] = []
    for run in sorted(runs, key=lambda r: (r[0], r[1], r[2], r[3])):
        last = out[-1] if out else None
        if (last is not None and last[0] == run[0] and last[1] == run[1] and last[2] + last[4] == run[2]
                and last[3] + last[4] == run[3] and last[5:] == run[5:]):
            out[-1] = [*last[:4], last[4] + run[4], *last[5:]]
        else:
            out.append(list(run))
    return out


class ChunkRuns:
    """Runs per chunk of ``size`` offsets, kept until a row of the chunk changes."""

    def __init__(self, size: int = DOC_CHUNK) -> None:
        self.size = size
        self.chunks: dict[int, list[list]] = {}

    def changed(self, offset: int) -> None:
        """A row at ``offset`` was added, removed or changed."""
        self.chunks.pop(offset // self.size, None)

    def changed_below(self, cut: int) -> None:
        """Rows below ``cut`` were dropped (forgotten)."""
        for c in [c for c in self.chunks if c * self.size < cut]:
            del self.chunks[c]

    def runs(self, lo: int, hi: int, rows_in: Callable[[int, int], Iterable[tuple]]) -> list[list]:
        """The runs of every row with its offset in ``[lo, hi)``; ``rows_in(a, b)``: the rows with
        offsets in ``[a, b)``, asked only for chunks not kept."""
        out: list[list] = []
        if hi <= lo:
            return out
        for c in range(lo // self.size, (hi - 1) // self.size + 1):
            a, b = c * self.size, (c + 1) * self.size
            whole = a >= lo and b <= hi and keeping()  # only whole chunks are kept: the frontier's grows, the lowest shrinks
            got = self.chunks.get(c) if whole else None
            if got is None:
                got = pack_runs(rows_in(max(a, lo), min(b, hi)))
                if whole:
                    self.chunks[c] = got
            out.extend(got)
        return merge_runs(out)


def offset_runs(offsets: Iterable[int]) -> list[list[int]]:
    """Offsets (sorted here) as ``[first, count]`` runs of consecutive ones."""
    out: list[list[int]] = []
    for o in sorted(offsets):
        if out and out[-1][0] + out[-1][1] == o:
            out[-1][1] += 1
        else:
            out.append([o, 1])
    return out


def run_offsets(runs: Iterable[Iterable[int]]) -> list[int]:
    """The offsets of :func:`offset_runs`' runs."""
    return [first + i for first, count in runs for i in range(count)]

