"""A set of offsets kept as sorted, disjoint ranges: a reader's offsets come in long stretches,
so memory and time follow the stretches, not the offsets.

Used where a family remembers which offsets a reader read until something passes them (the group
canary's reference reads, :mod:`invariants.groups`). Saved as ``[first, count]`` runs, the form of
:func:`invariants.doc_runs.offset_runs`.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Iterator


def ranges_of(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Offsets in ascending order as ``[lo, hi)`` ranges of consecutive ones."""
    out: list[list[int]] = []
    for o in offsets:
        if out and out[-1][1] == o:
            out[-1][1] += 1
        elif out and out[-1][0] <= o < out[-1][1]:
            continue
        else:
            out.append([o, o + 1])
    return [(lo, hi) for lo, hi in out]


class OffsetSet:
    def __init__(self) -> None:
        self._lo: list[int] = []  # range starts, ascending
        self._hi: list[int] = []  # ... and ends (exclusive); ranges disjoint and not touching
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[int]:
        for lo, hi in zip(self._lo, self._hi):
            yield from range(lo, hi)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetSet) and (self._lo, self._hi) == (other._lo, other._hi)

    def add_range(self, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        if not self._lo or lo > self._hi[-1]:  # the usual case: past everything
            self._lo.append(lo)
            self._hi.append(hi)
            self._count += hi - lo
            return
        i = bisect.bisect_left(self._hi, lo)  # the first range ending at or after lo
        j = bisect.bisect_right(self._lo, hi)  # ranges [i, j) touch [lo, hi)
        if i < j:
            lo, hi = min(lo, self._lo[i]), max(hi, self._hi[j - 1])
            self._count -= sum(self._hi[k] - self._lo[k] for k in range(i, j))
        self._lo[i:j] = [lo]
        self._hi[i:j] = [hi]
        self._count += hi - lo

    def add(self, offsets: Iterable[int]) -> None:
        for lo, hi in ranges_of(sorted(offsets)):
            self.add_range(lo, hi)

    def discard_below(self, limit: int) -> None:
        """Every offset below ``limit`` taken out."""
        i = bisect.bisect_right(self._hi, limit)  # ranges [0, i) end at or below limit
        self._count -= sum(self._hi[k] - self._lo[k] for k in range(i))
        del self._lo[:i], self._hi[:i]
        if self._lo and self._lo[0] < limit:
            self._count -= limit - self._lo[0]
            self._lo[0] = limit

    def discard_from(self, offset: int) -> None:
        """Every offset at or above ``offset`` taken out."""
        i = bisect.bisect_left(self._lo, offset)  # ranges [i, ...) start at or above it
        self._count -= sum(self._hi[k] - self._lo[k] for k in range(i, len(self._lo)))
        del self._lo[i:], self._hi[i:]
        if self._hi and self._hi[-1] > offset:
            self._count -= self._hi[-1] - offset
            self._hi[-1] = offset

    def discard_range(self, lo: int, hi: int) -> None:
        """Every offset in ``[lo, hi)`` taken out."""
        i = bisect.bisect_right(self._hi, lo)  # the first range ending after lo
        j = bisect.bisect_left(self._lo, hi)  # ranges [i, j) overlap [lo, hi)
        if lo >= hi or i >= j:
            return
        kept = [(a, b) for a, b in ((self._lo[i], lo), (hi, self._hi[j - 1])) if a < b]
        self._count -= sum(self._hi[k] - self._lo[k] for k in range(i, j)) - sum(b - a for a, b in kept)
        self._lo[i:j] = [a for a, _b in kept]
        self._hi[i:j] = [b for _a, b in kept]

    def covers(self, lo: int, hi: int) -> bool:
        """Whether every offset in ``[lo, hi)`` is in the set."""
        i = bisect.bisect_right(self._lo, lo) - 1  # the last range starting at or below lo
        return lo >= hi or (i >= 0 and self._hi[i] >= hi)

    def below(self, limit: int) -> Iterator[int]:
        """The offsets below ``limit``, ascending."""
        for lo, hi in zip(self._lo, self._hi):
            if lo >= limit:
                return
            yield from range(lo, min(hi, limit))

    def nth(self, k: int) -> int:
        """The ``k``-th smallest offset (from 0)."""
        for lo, hi in zip(self._lo, self._hi):
            if k < hi - lo:
                return lo + k
            k -= hi - lo
        raise IndexError(k)

    def clear(self) -> None:
        self._lo, self._hi, self._count = [], [], 0

    def to_runs(self) -> list[list[int]]:
        return [[lo, hi - lo] for lo, hi in zip(self._lo, self._hi)]

    @classmethod
    def from_runs(cls, runs: Iterable[Iterable[int]]) -> "OffsetSet":
        s = cls()
        for first, count in sorted((int(f), int(c)) for f, c in runs):
            s.add_range(first, first + count)
        return s
