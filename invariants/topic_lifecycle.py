"""The checker's topic part: which topic ID reads under a name belong to, and the end of IDs
that are gone (replaced, vanished, retired). A mixin of :class:`invariants.checker.Checker`,
whose module docstring describes the rules; it uses the checker's fold, families and views."""

from __future__ import annotations

from typing import Callable, Sequence

from invariants.attribution import lowest_and_highest_seqs
from invariants.model import Isolation, Read, ReadRun, ViewKey, is_canary, one_by_one


# what reads a range of a topic directly: (reader, name, topic ID, partition, lo, hi) -> its records, or
# None when it could not be read whole or the name points at another ID now (TopicLifecycle._fill_below)
Fill = Callable[[Isolation, str, str, int, int, int], "list[Read] | None"]

# Re-fetches refused in a row (per reader and partition) before one is applied as it is: the
# prober re-fetches every round (2-4 s), a broker serves a deleted topic's log for seconds at most.
REFETCH_PATIENCE = 5


class TopicLifecycle:
    def watch_topic_id(self, topic_id: str) -> None:
        """A topic ID the runtime knows to be a watched canary topic (ledger entries of it count)."""
        self.fold.watch_topic_id(topic_id)

    # -- topics ----------------------------------------------------------------------------

    def note_topic(self, name: str, topic_id: str) -> None:
        """The runtime sees ``topic_id`` under ``name`` now: every older ID of the name is gone."""
        self.fold.watch_topic_id(topic_id)
        prev = self.current_ids.get(name, "")
        self.topics.note(name, topic_id, after=prev if prev != topic_id else "")
        self.current_ids[name] = topic_id
        ids = self.topics.ids[name]
        for old in ids[:ids.index(topic_id)]:
            self._end(old, "vanished", wait=1)

    def topic_vanished(self, name: str) -> None:
        """The runtime found ``name`` gone for good: every ID it stood for is gone."""
        for tid in self.topics.ids.get(name, []):
            self._end(tid, "vanished", wait=1)

    def begin_batch(self) -> None:
        """A new micro-batch begins: it holds every ledger entry written before it was planned."""
        for end in self._ending.values():
            end[1] = max(0, end[1] - 1)

    def _end(self, topic_id: str, reason: str, wait: int = 0) -> None:
        if topic_id in self.topics.gone:
            return
        known = self._ending.get(topic_id)
        if known is None:
            self._ending[topic_id] = [reason, wait]
        elif reason == "retired" or wait < known[1]:
            self._ending[topic_id] = ["retired" if "retired" in (reason, known[0]) else reason, min(wait, known[1])]

    def _finish_topics(self) -> None:
        due = {tid: end[0] for tid, end in self._ending.items() if end[1] == 0}
        for tid in due:
            del self._ending[tid]
        for tid, reason in sorted(due.items(), key=lambda kv: (kv[1] != "retired", kv[0])):
            self.topics.gone[tid] = reason
            self.sink.extend(self.acked.end_topic(tid, lambda p, t=tid: self.recorded_log_start.get((t, p), 0),
                                                  reason))
            self._group_violations(tid, self.group_skips.end_topic(tid, self.views.get))
            self._eos_violations(self.eos_losses.end_topic(tid, self.views.get), tid)
            for key in [k for k in self.views if k.topic_id == tid]:
                del self.views[key]
                self._dirty.discard(key)
                self.suspects.pop(key, None)
            self.sequence.forget_topic(tid)
            self.offsets.forget_topic(tid)
            self.unconfirmed.forget_topic(tid)
            self.cycles.forget_topic(tid)
            self.max_acked = {k: v for k, v in self.max_acked.items() if k[2] != tid}
            self.rewrites = {k: v for k, v in self.rewrites.items() if k[0] != tid}
            self.rewriting = {k for k in self.rewriting if k[2] != tid}
            self.rewrite_marks = {k: v for k, v in self.rewrite_marks.items() if k[0] != tid}
            self.log_start = {k: v for k, v in self.log_start.items() if k[0] != tid}

    def _intended_id(self, partition: int, r: Read) -> str | None:
        """The topic ID a record was intended for, by its writer's intents (None: not known)."""
        return self.fold.topic_of(r.ident[0], r.ident[1], partition, r.ident[2]) if is_canary(r.ident) else None

    def apply_named_reads(self, iso: Isolation, name: str, partition: int, reads: Sequence[Read | ReadRun],
                          fresh_id: Callable[[str], str | None] = lambda _n: None,
                          fill: Fill | None = None) -> bool:
        """Reads of one reader and partition of topic ``name`` (Spark's rows), attributed to topic
        IDs (:mod:`invariants.attribution`; ``fresh_id``: the name's ID now, looked up only when
        offsets go backwards); False when nothing is known of the name yet (nothing applied).
        ``fill``: reads what Spark skipped below its first read of a recreated topic
        (:meth:`_fill_below`).

        **The old log's records are left out.** Right after a topic is recreated, an executor whose
        client still holds the old ID may fetch the old log from a broker that has not deleted it
        yet, at the offsets Spark planned on the new one, and the rest of the range from the new
        log once its client learnt the new ID: one batch, the old log's records first. So in a
        batch attributed to an ID, every record up to the last one intended for an *older* ID of
        the name is not applied (counted in ``old_log_reads``) — also records intended for the
        batch's own ID: a stale broker appends by name, so a write intended for the new ID can sit
        in the old log, and applied at that offset it would hide what the new log holds there.
        Measured in CI under the suite's load: a batch holding the old log up to its end (offset
        323) and the new log after it put 58 false ``inconsistent_offset`` and 3 false
        ``lost_write`` on the new ID while only batches of nothing but the old log were left
        out; a run before counted 34 and 32 that way. What the new log holds there is read again
        where an acknowledged write was passed without being read (:mod:`invariants.acked_writes`:
        a gap is read again first; :meth:`apply_refetched`). The price: stragglers (an old ID's
        records that landed in the new topic, a retry sent before its writer noticed the change)
        and what precedes them in a batch are checked only by that re-read.

        **Nor a writer's records above what it said it intended, in a batch put on an ID the name
        has since left.** The other way round: a batch planned on the old ID before the recreation
        may read the new log (written after it was planned: its intents are not folded yet, so
        :meth:`LedgerFold.topic_of` presumes them the writer's last ID, the old one) and is put on
        the old ID. Measured in CI: 154 records of the new log at offsets 0..153 of a partition
        the other reader had read on the old log put 154 false ``inconsistent_offset`` on each
        reader. A writer makes an intent durable before it sends, and the ledger is planned after
        the canary, so the old ID's own records are never above the folded intents — unless a
        catch-up's ledger lags the canary by ``maxOffsetsPerTrigger`` at the moment of a
        recreation: those would be left out too, and judged as unread. The new log is read again
        there for the new ID."""
        def fresh(n: str) -> str | None:
            now = fresh_id(n)
            if now is not None:
                self.note_topic(n, now)
            return now

        tid = self.topics.attribute(iso.value, name, partition, reads, lambda r: self._intended_id(partition, r),
                                    fresh)
        if tid is None:
            return False
        oldest = self.topics.oldest_named  # the oldest ID its records were intended for
        if oldest is not None and self.topics.older(name, oldest, tid):
            reads = one_by_one(reads)
            reads = self._kept(iso, reads, self._without_the_old_log(name, tid, partition, reads))
        if self.topics.newest(name) == tid and any(self._beyond_intents(partition, r)
                                                   for r in lowest_and_highest_seqs(reads)):
            # a batch planned before a recreation and run after it fetches the new log at the old
            # positions; its ledger rows end before the new log's intents (a writer's highest seq
            # read is beyond them if any is). The name's ID now, not
            # the prober's, which may not have seen the new one yet: found on the local cluster, Spark
            # paused across a recreation, 56 false inconsistent_offset per reader on the old ID
            fresh(name)
        newest = self.topics.newest(name)
        if newest is not None and self.topics.older(name, tid, newest):
            reads = one_by_one(reads)
            reads = self._kept(iso, reads, [r for r in reads if not self._beyond_intents(partition, r)])
        if reads:
            if fill is not None:
                self._fill_below(iso, name, tid, partition, reads[0].offset, fill)
            self.apply_reads(iso, tid, partition, reads)
        return True

    def _fill_below(self, iso: Isolation, name: str, tid: str, partition: int, first: int, fill: Fill) -> None:
        """Spark's first read of a recreated topic's new ID may begin above its log start: when no
        micro-batch was planned while the topic was gone, Spark keeps the old log's positions, finds
        the new log's end below them, skips that range (``failOnDataLoss`` false) and goes on from
        the new end. The new log's first records are then never read, and their acknowledged writes
        expire unread (``below_first_read``) instead of being checked. So before a reader's first
        read of an ID that replaced another under the name, ``[log start, first)`` is read
        directly (``fill(iso, name, tid, partition, lo, hi)``: the records, or None when the range
        could not be read whole, or the name no longer points at ``tid``) and applied first, as
        what the reader read there. Not on the first ID the checker knows of a name: a reader
        started at the log's end (``startingOffsets`` latest) is told to start there.

        **Up to the last canary record not known to be meant for ``tid``, nothing is applied**
        (counted in ``fill_left_out``): a broker may still serve the old log under the name right
        after the recreation, up to some offset and the new log after it, and stragglers (the old
        writers' retries, a transaction of the old topic aborted in the new log) land at the new
        log's head; content cannot tell these apart (as :meth:`_without_the_old_log`). What lies
        below the first record applied expires as before. Counted in ``filled_reads``."""
        ids = self.topics.ids.get(name, [])
        if tid in self.topics.gone or tid not in ids or ids.index(tid) == 0:
            return
        v = self.views.get(ViewKey(iso, tid, partition))
        if v is not None and v.start is not None:
            return
        lo = self.log_start.get((tid, partition), 0)
        if lo >= first:
            return
        got = [r for r in fill(iso, name, tid, partition, lo, first) or [] if r.offset < first]
        foreign = [i for i, r in enumerate(got) if is_canary(r.ident) and self._intended_id(partition, r) != tid]
        if foreign:
            self.fill_left_out[iso] = self.fill_left_out.get(iso, 0) + foreign[-1] + 1
            got = got[foreign[-1] + 1:]
        if got:
            self.filled_reads[iso] = self.filled_reads.get(iso, 0) + len(got)
            self.apply_reads(iso, tid, partition, got)

    def _kept(self, iso: Isolation, reads: Sequence[Read], kept: list[Read]) -> list[Read]:
        """``kept`` of ``reads``; the others, left out, counted in ``old_log_reads``."""
        self.old_log_reads[iso] = self.old_log_reads.get(iso, 0) + len(reads) - len(kept)
        return kept

    def _beyond_intents(self, partition: int, r: Read) -> bool:
        return is_canary(r.ident) and self.fold.beyond_intents(r.ident[0], r.ident[1], partition, r.ident[2])

    def _without_the_old_log(self, name: str, tid: str, partition: int, reads: Sequence[Read]) -> list[Read]:
        """``reads`` after the last one intended for an ID older than ``tid``."""
        last = max(i for i, r in enumerate(reads)
                   if (t := self._intended_id(partition, r)) is not None and self.topics.older(name, t, tid))
        return list(reads[last + 1:])

    def apply_refetched(self, iso: Isolation, topic_id: str, partition: int, reads: Sequence[Read],
                        covered: tuple[int, int]) -> bool:
        """A re-fetch of ``topic_id`` (read by topic name): applied as :meth:`apply_reads`, unless
        it may have read another log than the one asked for — most of its canary records were
        intended for another ID of the name, or any for an ID older than ``topic_id`` (right after
        a topic is recreated, a broker may still serve the old log under the name, up to its end
        and the new one after it: measured on the local cluster, 59 false lost_write and
        inconsistent_offset on a new ID that way). False: not applied, still wanted. Refused at
        most :data:`REFETCH_PATIENCE` times in a row per reader and partition: a broker serves a
        deleted log for seconds at most, while stragglers (an older ID's records that landed in the
        new log) stay there for good — after that the re-fetch is applied, stragglers as what the
        new log holds (without it, an acknowledged write missing beside a straggler was never
        judged, only expired at the horizon)."""
        known = [t for t in (self._intended_id(partition, r) for r in reads) if t is not None]
        name = self.topics.name_of(topic_id)
        key = (iso, topic_id, partition)
        if known and (sum(1 for t in known if t != topic_id) * 2 > len(known)
                      or any(self.topics.older(name, t, topic_id) for t in known)):
            refused = self.refused_refetches.get(key, 0) + 1
            if refused <= REFETCH_PATIENCE:
                self.refused_refetches[key] = refused
                return False
        self.refused_refetches.pop(key, None)
        self.apply_reads(iso, topic_id, partition, reads, covered=covered)
        return True
