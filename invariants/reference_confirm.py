"""``group_skip`` and ``eos_loss`` counted live only once the record they name was read again.

Both rest on the reference reader's read of one offset of the canary topic: a skip on a record
``read_committed`` read that no member consumed before a commit passed it
(:meth:`invariants.groups.GroupJudge.read_reference`), a loss on a record it read that has no copy
in the pipeline's committed output below the group's committed offset
(:meth:`invariants.eos.EosLive.read_source`). A reader may hand over what it fetched before the
log changed under it (:mod:`invariants.confirm`). Found on the local cluster, a node back without
its data: after a member had reset to the new log, Spark's consumer still served the old log's
prefetched tail, at offsets where the new log holds transaction markers; a commit on the new log
passed them, and live counted 12 skips that the audit, which reads the final log, did not. An EOS
pipeline's group passes the same offsets the same way.

So live, such a finding is a candidate until ``read_committed`` read its offset again (a later
read than the one that made it; an ``eos_loss`` from the offset with a copy below it on: a record
gone or another there shows the log rewritten under the judgement, :mod:`invariants.eos`). It is counted when a record is still there — whichever record:
the audit judges the final log's record at that offset against the same consumption, which is by
offset — and dropped when none is. A view about to forget the offset, the log start passing it, or
the topic ending judge it on what the view holds then, as it would have without asking. A
finding made on an offset the view has already forgotten (a group or pipeline lagging Vigil's
reader by more than its horizon) is counted at once: found by a review, such a loss was dropped,
the re-read finding nothing the view remembered, while the audit counted it.

A ``group_skip`` also waits for the ledger (the checker's rule: ``wait``). The writers' ledger
entries may arrive a batch or more after the records they acknowledge: found on the local
cluster, a node back without its data under a group that committed past the new log's records
while the writers' acknowledgements going backwards (which show the offsets reused:
:meth:`invariants.groups.GroupJudge.rewritten`) were still on their way; live counted 7 skips in
2 of 6 runs that the audit, with the whole ledger, did not. A skip whose offset a rewrite turns
out to have reused is dropped while it waits, like one still to be read again. The wait (until
the ledger's clock is a few seconds on and the write of the record there has an outcome; at most
30 s on, or the writer's message timeout and a few seconds if that is longer — a transactional
writer's outcomes come when its transaction ends, after its commit or abort and their retries,
and its ``start`` records that bound) starts only once
the ledger has folded the skipped record's own intent: a from-scratch catch-up reads a rewritten
log's new records long before the ledger reaches their time, and a wait counted from when the
skip was found ran out first (18–31 false skips per catch-up of the wiped-partition history). Waiting skips are
saved with the others; restored, they start waiting again. An ``eos_loss`` waits for the ledger
the same way (without the intent's start: its record is the source topic's, read long before the
pipeline's output is judged).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable, Generic, Protocol, TypeVar

from invariants.confirm import Candidate, Pending
from invariants.model import RC, Ident, ViewKey
from invariants.read_index import PartitionView


class _AtOffset(Protocol):
    invariant: str
    partition: int
    offset: int


F = TypeVar("F", bound=_AtOffset)


class FindingsToConfirm(Generic[F]):
    """Findings of one invariant (dataclasses with ``invariant``, ``partition`` and ``offset``), each
    waiting for a re-read of its offset by ``read_committed``. The checker feeds ``pending`` the
    re-reads and log starts, and asks it what to read again, as it does its other families'."""

    def __init__(self, kind: Callable[..., F], invariant: str, pending: Pending | None = None) -> None:
        self.kind, self.invariant = kind, invariant
        self.pending = pending or Pending()
        # read again, waiting since (the caller's clock; None: the wait has not started, ``not_yet``)
        self.waiting: list[tuple[Candidate, int | None]] = []

    def hold(self, found: list[F], topic_id: str, view: Callable[[ViewKey], PartitionView]) -> list[F]:
        """Those of ``found`` of this invariant wait for a later read of their offset than the one
        the view holds now; the others are returned, and so are those on an offset the view read
        and no longer remembers (below its horizon: judged as a view about to forget judges, on what
        was read, since no re-read can be compared with it; a reader's stale tail is at its frontier,
        not 20,000 offsets below)."""
        rest = []
        for f in found:
            key = ViewKey(RC, topic_id, f.partition)
            v = view(key)
            if f.invariant != self.invariant or (f.offset < min(v.forgotten_below, v.frontier)
                                                 and not v.remembers(f.offset)):
                rest.append(f)
                continue
            since = getattr(f, "since", -1)  # (an eos_loss: read again from the copy below it)
            self.pending.add(key, [(since if 0 <= since < f.offset else f.offset, f.offset + 1)], v.epoch, f)
        return rest

    def confirmed(self, view: Callable[[ViewKey], PartitionView],
                  wait: Callable[[ViewKey, Ident, int], bool] | None = None, now: int = 0,
                  not_yet: Callable[[ViewKey, Ident], bool] | None = None) -> list[tuple[str, F]]:
        """The findings whose offset was read again, that still hold a record there, with the topic
        ID they are about — once ``wait(key, record, since)`` is False (``since``: ``now`` at the
        first call that asked ``wait``, the first at which ``not_yet(key, record)`` was False: the
        wait starts there); until then they wait, and are asked again at the next call.

        Not the last ``now`` at which ``not_yet`` was True: a catch-up's ledger clock may jump tens
        of seconds between two calls (a held ledger released as the readers move on), and a wait
        counted from before the jump ran out on the first call after it. Found on the local cluster
        (CI of 2026-11-29): the intent folded at 510.1 s, the skip last asked while unread at
        492.8 s, the wait's end at 522.8 s came before the writer's acknowledgements going
        backwards (540.2 s: its writes queued to the wiped node timed out first) — 7 false
        ``group_skip`` in the held catch-up of the wiped-partition history."""
        found: list[tuple[str, F]] = []
        ready: list[tuple[Candidate, int | None]] = [(c, None) for c in self.pending.take_ready()] + self.waiting
        self.waiting = []
        for c, since in ready:
            held = view(c.key).held(c.data.offset)
            if held is None:
                continue
            if not_yet is not None and not_yet(c.key, held):
                self.waiting.append((c, None))
                continue
            since = now if since is None else since
            if wait is not None and wait(c.key, held, since):
                self.waiting.append((c, since))
            else:
                found.append((c.key.topic_id, c.data))
        return found

    def unconfirmed(self, key: ViewKey, v: PartitionView, cut: int) -> list[F]:
        """Findings on offsets below ``cut``, which the view is about to forget: judged on what it holds."""
        leaving = [c for c, _since in self.waiting if c.key == key and c.data.offset < cut]
        if leaving:
            self.waiting = [(c, since) for c, since in self.waiting if not (c.key == key and c.data.offset < cut)]
        return [c.data for c in self.pending.forget_below(key, cut) + leaving if v.held(c.data.offset) is not None]

    def drop(self, topic_id: str, partition: int, lo: int, hi: int) -> None:
        """Findings on offsets ``[lo, hi)`` of a partition are not findings after all (offsets a
        rewrite reused: :meth:`invariants.groups.GroupJudge.rewritten`)."""
        def kept(c: Candidate) -> bool:
            return not (c.key.topic_id == topic_id and c.data.partition == partition and lo <= c.data.offset < hi)

        self.pending.items = [c for c in self.pending.items if kept(c)]
        self.waiting = [(c, since) for c, since in self.waiting if kept(c)]

    def end_topic(self, topic_id: str, view: Callable[[ViewKey], PartitionView | None]) -> list[F]:
        """A topic ID that is gone (it cannot be read again): its findings judged on what the views hold."""
        ending = [c for c in self.pending.items + [c for c, _since in self.waiting] if c.key.topic_id == topic_id]
        self.pending.items = [c for c in self.pending.items if c.key.topic_id != topic_id]
        self.waiting = [(c, since) for c, since in self.waiting if c.key.topic_id != topic_id]
        return [c.data for c in ending if (v := view(c.key)) is not None and v.held(c.data.offset) is not None]

    def to_doc(self) -> list:
        """The findings still to read again, and those waiting (nothing more to read: restored as
        ready, they start waiting again at the next confirmation)."""
        return Pending(self.pending.items + [c for c, _since in self.waiting]).to_doc(asdict)

    @classmethod
    def from_doc(cls, kind: Callable[..., F], invariant: str, doc: list | None) -> "FindingsToConfirm[F]":
        return cls(kind, invariant, Pending.from_doc(doc or [], lambda d: kind(**d)))
