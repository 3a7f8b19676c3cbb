"""Liveness family: ``stalled_poll``, ``lso_stuck``, ``producer_stalled``.

These are judged on time, not on history, so the offline audit cannot recompute them exactly.
For ``lso_stuck`` it counts what the ledger and the final log show: a transaction whose first
record on a partition is in the final log and was acknowledged (the high watermark past it) more
than the threshold before the transaction committed or aborted (:mod:`monitor.audit.hanging`); a
transaction whose records never reached a partition, or vanished with it, held no LSO there, live
or in the audit. Each is an *episode*: it starts when the condition first holds, is counted once
when it has held for longer than its threshold, and ends when the condition clears; the
gauge ``vigil_stalled`` shows the episodes currently open.

**stalled_poll** (per reader and partition, from the direct poll prober). Records are
available — the high watermark (``read_uncommitted``) or the last stable offset
(``read_committed``) is beyond the prober's position — but polls return nothing and the
position does not move, for longer than the threshold. The high watermark is the one the
prober listed, or what the ledger's ``acks=all`` acknowledgements prove of it (such an ack is
given only once the high watermark passed the write: a lower bound of it, known even when the
leader stops answering right after a listing). Records acknowledged with ``acks=1`` or ``0``
may sit above the high watermark (a leader cut off from its followers keeps acknowledging
writes no reader may see): they are not available, and their wait is not a stall. When the
listed high watermark goes backwards (a truncation, or another topic under the name) the
acknowledgements of that partition are forgotten; a deleted topic is not judged at all. Cannot be inferred
from Spark alone: a query plans all partitions together, so one hung fetch blocks every
partition of the batch. False positives: a threshold below the broker's fetch/session timeouts
reports a slow broker as stalled (that is the point). Cannot be inferred: records nobody can
show exist — when the leader stops answering, the prober knows of waiting records from the last
watermarks it listed. Implies: end-to-end latency and ``unseen`` rise for the same partition.

**lso_stuck** (``read_committed``, per partition). The last stable offset does not advance
while the high watermark is beyond it and moves on, for longer than the canary's longest
transaction plus a margin (the threshold): a hanging transaction. Judged on fresh listings only:
a leader that does not answer (a restart) leaves the last values it gave, which must not look
like a frozen LSO. Implies ``unseen`` for ``read_committed`` on that partition until the
transaction ends. False positives: another application's long transaction on the canary topic
(the canary topic should be Vigil's own).

**producer_stalled** (per writer). A canary writer has a write waiting for its outcome — or
has announced it is initialising its producer (``init``: InitProducerId, ``init_transactions``)
and got no further — for longer than the threshold, from the ledger's entries (intents are
durable before the send). The threshold is the configured one, but never at or below the
writer's ``message.timeout.ms`` plus a margin (within that time the client may still report an
outcome). Durations run on the brokers' clock (:class:`BrokerClock`: the ledger topic's append
times), so a writer's clock cannot fake or hide a stall, and neither can the monitor's own lag:
while the prober has not read the ledger to its end, "now" is the newest append time it read.
The prober reads the ledger from ten minutes back, so a writer that began initialising before
the monitor started is seen. Cannot be inferred when the ledger itself is unreachable (the intent
never lands, an outcome sits in the writer's queue): for a ledger on a cluster of its own the
prober does not judge while it is away, and a wait that began before it came back counts from its
return — ``vigil_ledger_reachable`` and each writer's ``vigil_ledger_wait_seconds`` say it, as the
``VigilLedgerUnavailable`` alert (``cause="ledger"``); a ledger on the canary's cluster that is away
is the canary's cluster away, judged as always. Implies nothing by itself; with
``acks=all`` and fewer in-sync replicas than ``min.insync.replicas`` it is the expected
outcome (S7 of the chaos matrix).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Hashable

from invariants.catalog import Invariant, Isolation
from invariants.model import NONE, RC, RU, Violation


@dataclass
class StallTracker:
    """Episodes per key: ``observe(key, stuck, now)`` returns True exactly when an episode
    crosses ``threshold_s`` (count it then)."""

    threshold_s: float
    since: dict[Hashable, float] = field(default_factory=dict)
    counted: set[Hashable] = field(default_factory=set)

    def observe(self, key: Hashable, stuck: bool, now: float) -> bool:
        if not stuck:
            self.since.pop(key, None)
            self.counted.discard(key)
            return False
        start = self.since.setdefault(key, now)
        if key not in self.counted and now - start > self.threshold_s:
            self.counted.add(key)
            return True
        return False

    def open_episodes(self) -> set[Hashable]:
        return set(self.counted)

    def prime(self, keys: set[Hashable], now: float) -> None:
        """Episodes already counted before a restart: not counted again while they last."""
        for key in keys:
            self.since.setdefault(key, now)
            self.counted.add(key)


@dataclass
class PollProgress:
    """What the prober last saw for one reader and partition."""

    position: int = -1
    available_end: int = -1  # high watermark (ru) or LSO (rc)


def poll_stuck(prev: PollProgress, position: int, available_end: int) -> bool:
    """No progress although records are available beyond the position."""
    return available_end > position and position <= prev.position


def lso_stuck(prev_lso: int, lso: int, prev_high_watermark: int, high_watermark: int) -> bool:
    """The LSO has not moved while the high watermark is beyond it and moved on."""
    return lso <= prev_lso and high_watermark > lso and high_watermark > prev_high_watermark


PRODUCER_MARGIN_S = 5.0  # how far above message.timeout.ms a wait must go to be a stall


def producer_threshold(configured_s: float, message_timeout_ms: int) -> float:
    """The producer_stalled threshold for one writer: the configured one, but above the time the
    client may take to report an outcome at all."""
    return max(configured_s, message_timeout_ms / 1000 + PRODUCER_MARGIN_S)


@dataclass
class BrokerClock:
    """The brokers' clock, as the ledger's append times show it to a reader.

    ``observe`` each entry's append time with the reader's own time of reading it. ``now_us``:
    when the reader has read the ledger to its end, the reader's clock moved by the smallest
    difference seen recently (the skew plus the least delivery delay: never ahead of the
    brokers), and never before the newest append time read; while it has not (it lags), just the
    newest append time read — a lagging reader never sees time pass that it has not read.
    """

    latest_us: int = 0
    offsets: deque = field(default_factory=lambda: deque(maxlen=512))

    def observe(self, append_us: int, read_at_us: int) -> None:
        if append_us <= 0:
            return
        self.latest_us = max(self.latest_us, append_us)
        self.offsets.append(read_at_us - append_us)

    def now_us(self, read_at_us: int, caught_up: bool) -> int:
        if not self.offsets:
            return read_at_us  # nothing read yet: the reader's own clock
        if not caught_up:
            return self.latest_us
        return max(self.latest_us, read_at_us - min(self.offsets))


class LivenessJudge:
    """The liveness verdicts over what the prober observes (the prober itself only observes).

    Episode keys: ``(isolation, partition)`` for ``stalled_poll``, ``partition`` for
    ``lso_stuck``, ``(instance, incarnation)`` for ``producer_stalled``.
    """

    def __init__(self, stall_s: float, lso_s: float, producer_s: float) -> None:
        self.stall_s, self.lso_s, self.producer_s = stall_s, lso_s, producer_s
        self.stalls = StallTracker(stall_s)
        self.lso_episodes = StallTracker(lso_s)
        self.producers = StallTracker(0.0)
        self.prev: dict[tuple[Isolation, int], PollProgress] = {}
        self.prev_lso: dict[int, tuple[int, int]] = {}  # partition -> (LSO, high watermark) last listed

    def forget_positions(self) -> None:
        """The readers were reassigned (a new topic ID) or their topic is gone: earlier positions,
        ends and the episodes on them mean nothing (a reader cannot read a deleted topic; that
        is no stall of the partitions it had)."""
        self.prev.clear()
        self.prev_lso.clear()
        self.stalls = StallTracker(self.stall_s)
        self.lso_episodes = StallTracker(self.lso_s)

    def poll(self, iso: Isolation, topic_id: str, p: int, position: int, available_end: int,
             now: float) -> list[Violation]:
        """One reader's position on one partition (-1: none yet) and the end available to it."""
        key = (iso, p)
        prev = self.prev.get(key)
        if position < 0:  # no position yet (nothing fetched since the assignment at the end)
            position = prev.position if prev else available_end
        out = []
        # the first observation after a start says nothing (an episode counted before a restart
        # stays open until a real observation ends it)
        if prev is not None and self.stalls.observe(key, poll_stuck(prev, position, available_end), now):
            out.append(Violation(Invariant.STALLED_POLL, iso, topic_id, p, (position, available_end),
                                 detail=f"position {position}, records available up to {available_end}, no "
                                        f"progress for {self.stall_s:.0f} s"))
        self.prev[key] = PollProgress(position, available_end)
        return out

    def lso(self, topic_id: str, p: int, lso: int, high_watermark: int, now: float) -> list[Violation]:
        """A fresh listing of one partition's LSO and high watermark."""
        prev = self.prev_lso.get(p)
        out = []
        if prev is not None and lso >= 0:
            moving_on = lso_stuck(prev[0], lso, prev[1], high_watermark)
            frozen = lso <= prev[0] and high_watermark > lso
            # an open episode lasts while the LSO stays frozen below data; it starts only when the
            # high watermark moves on past a frozen LSO
            stuck = frozen if p in self.lso_episodes.since else moving_on
            if self.lso_episodes.observe(p, stuck, now):
                out.append(Violation(Invariant.LSO_STUCK, RC, topic_id, p, (lso, high_watermark),
                                     detail=f"LSO {lso} frozen below high watermark {high_watermark}"))
        if lso >= 0:
            self.prev_lso[p] = (lso, high_watermark)
        return out

    def producer(self, instance: str, writer: tuple[int, int], oldest_pending_us: int | None,
                 now: float, message_timeout_ms: int = 0) -> list[Violation]:
        """One writer: since when it has waited (the append time of its oldest write still waiting
        for an outcome, or of its ``init``), against ``now`` on the same (the brokers') clock."""
        threshold = producer_threshold(self.producer_s, message_timeout_ms)
        stuck = oldest_pending_us is not None and now - oldest_pending_us / 1e6 > threshold
        if self.producers.observe((instance, writer[1]), stuck, now):
            return [Violation(Invariant.PRODUCER_STALLED, NONE, writer=writer,
                              detail=f"{instance}: waiting for an outcome (or its producer's "
                                     f"initialisation) for more than {threshold:.0f} s")]
        return []

    def open_counts(self) -> dict[tuple[Invariant, Isolation], int]:
        stalls = self.stalls.open_episodes()
        return {
            (Invariant.STALLED_POLL, RC): sum(1 for k in stalls if k[0] is RC),
            (Invariant.STALLED_POLL, RU): sum(1 for k in stalls if k[0] is RU),
            (Invariant.LSO_STUCK, RC): len(self.lso_episodes.open_episodes()),
            (Invariant.PRODUCER_STALLED, NONE): len(self.producers.open_episodes()),
        }

    def open_doc(self) -> dict[str, Any]:
        """The counted, still open episodes, as the watch saves them."""
        return {"stalls": sorted([k[0].value, k[1]] for k in self.stalls.open_episodes()),
                "lso": sorted(self.lso_episodes.open_episodes()),
                "producers": sorted(list(k) for k in self.producers.open_episodes())}

    def prime(self, doc: dict[str, Any], now: float) -> None:
        """Episodes counted before a restart (from :meth:`open_doc`) are not counted again."""
        self.stalls.prime({(Isolation(iso), p) for iso, p in doc.get("stalls", ())}, now)
        self.lso_episodes.prime(set(doc.get("lso", ())), now)
        self.producers.prime({(inst, inc) for inst, inc in doc.get("producers", ())}, now)
