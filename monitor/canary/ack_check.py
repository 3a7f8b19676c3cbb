"""A canary writer's check at acknowledgement time (a mixin of
:class:`monitor.canary.writer.CanaryWriter`).

An acknowledgement at offset 0, or below an earlier one of the same partition, is followed at
once by a listing of the partition's log start offset, recorded with the outcome
(``log_start_after`` on its outcome run) before the outcome reaches the ledger. An ack below the
log start listed *after* it named an offset the log no longer had when it was given: a bogus
offset, judged at once by the live checker and the audit alike (:mod:`invariants.acked_writes`),
without reading offset 0 — which retention may have deleted long ago.

Acks that go backwards with the log start still at or below them are what a truncated log or a
log that started again gives (the checker treats them as rewrite evidence); the partition's
highest ack then follows the new position, so only the first ack of a new log costs a listing.
A listing that fails records nothing: the read-time rules judge those writes as before.
"""

from __future__ import annotations

from dataclasses import replace

LIST_TIMEOUT_S = 5.0


class AckChecking:
    def _note_ack(self, index: int, partition: int, offset: int) -> None:
        """``self._results[index]`` acked ``offset`` of ``partition``."""
        top = self._highest_ack.get(partition, -1)
        suspect = offset == 0 or offset < top
        if suspect:
            self._to_list.append(index)
        self._highest_ack[partition] = offset if suspect else max(top, offset)

    def _list_after_acks(self) -> None:
        """The log starts of the partitions whose acks are suspect, put on those outcomes."""
        if not self._to_list:
            return
        indexes, self._to_list = self._to_list, []
        if self.observer is None:
            return
        starts = self.observer.list_log_starts(self.topic, LIST_TIMEOUT_S)
        if not starts:
            self._count_error("list_offsets")
            return
        for i in indexes:
            d = self._results[i]
            if d.partition < len(starts):
                self._results[i] = replace(d, log_start_after=starts[d.partition])

    def _forget_acks(self) -> None:
        """A new topic ID: its acks start again from nothing."""
        self._highest_ack.clear()
        self._to_list.clear()
