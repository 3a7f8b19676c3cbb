"""Confirmation before counting: a verdict that rests on what a reader read *before* the evidence
arrived is counted only after those offsets were read again.

The log can change under the reader (a truncated leader, a broker that came back empty). A write
acknowledged at an offset this reader already passed, a record found a second time while its
first copy was read long ago, a seq lower than one read earlier at a lower offset: each could be
true of the log, or could be the reader's stale memory of a range that has since been
rewritten. Such a verdict becomes a :class:`Candidate` that names the offsets it rests on; the
runtime re-fetches them directly (:meth:`Pending.wanted`), the fresh reads are applied like any
other read (updating the view, and finding the rewrite if there was one), and only then is the
verdict evaluated again and counted — or dropped, when the fresh reads show it was the memory
that was stale. Until then it is undecided, never counted: what is unknown is not a violation.

Every application of reads to a view has an epoch; a candidate made at epoch ``e`` is satisfied
by reads of the same offsets at an epoch above ``e``. A family chooses ``e``: the acked-writes
family's late acknowledgements are satisfied by the reads applied in the same call (as fresh as
the evidence); verdicts resting on what a reader handed over (a loss, a duplicate, a reorder) only
by a later read, since a reader may hand over what it fetched before the evidence.

A candidate the view's horizon is about to forget (its offsets would no longer be remembered)
cannot wait any longer: its family judges it on what the view holds then (the checker does this
before forgetting), as it would have without asking for a re-read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from invariants.model import ViewKey

Ranges = list[list[int]]  # [[lo, hi), ...], sorted, disjoint


def subtract(ranges: Ranges, lo: int, hi: int) -> Ranges:
    out: Ranges = []
    for a, b in ranges:
        if b <= lo or a >= hi:
            out.append([a, b])
            continue
        if a < lo:
            out.append([a, lo])
        if b > hi:
            out.append([hi, b])
    return out


def merge(ranges: list[tuple[int, int]], gap: int = 0) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


@dataclass
class Candidate:
    key: ViewKey
    need: Ranges  # offsets still to be read again
    epoch: int  # reads of a later epoch satisfy it
    data: Any  # what the family needs to evaluate it again (its own, JSON-able via the family)


@dataclass
class Pending:
    """One family's candidates."""

    items: list[Candidate] = field(default_factory=list)

    def add(self, key: ViewKey, need: list[tuple[int, int]], epoch: int, data: Any) -> None:
        self.items.append(Candidate(key, [[lo, hi] for lo, hi in merge(need) if lo < hi], epoch, data))

    def read_again(self, key: ViewKey, lo: int, hi: int, epoch: int) -> None:
        """Offsets [lo, hi) of ``key`` were read at ``epoch``."""
        for c in self.items:
            if c.key == key and c.epoch < epoch:
                c.need = subtract(c.need, lo, hi)

    def below_log_start(self, key: ViewKey, log_start: int) -> None:
        """Offsets below the log start can never be read again: nothing more to wait for there."""
        for c in self.items:
            if c.key == key:
                c.need = subtract(c.need, 0, log_start)

    def take_ready(self) -> list[Candidate]:
        ready = [c for c in self.items if not c.need]
        if ready:
            self.items = [c for c in self.items if c.need]
        return ready

    def forget_below(self, key: ViewKey, cut: int) -> list[Candidate]:
        """Candidates resting on offsets the view no longer remembers (offset 0 it always does):
        returned, no longer kept."""
        gone, kept = [], []
        for c in self.items:
            below = c.key == key and any(lo < cut and [lo, hi] != [0, 1] for lo, hi in c.need)
            (gone if below else kept).append(c)
        if gone:
            self.items = kept
        return gone

    def wanted(self) -> list[tuple[str, int, int, int]]:
        """(topic_id, partition, lo, hi) still to be read again."""
        return [(c.key.topic_id, c.key.partition, lo, hi) for c in self.items for lo, hi in c.need]

    def to_doc(self, data_doc: Callable[[Any], Any]) -> list:
        return [[c.key.to_doc(), c.need, c.epoch, data_doc(c.data)] for c in self.items]

    @classmethod
    def from_doc(cls, doc: list, data_from: Callable[[Any], Any]) -> "Pending":
        return cls([Candidate(ViewKey.from_doc(k), need, epoch, data_from(d)) for k, need, epoch, d in doc])
