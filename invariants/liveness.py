"""Liveness family: ``stalled_poll``, ``lso_stuck``, ``producer_stalled``.

These are judged on time, not on history, so the offline audit cannot recompute them exactly
(it reports what the ledger shows: transactions held open longer than the ``lso_stuck``
threshold). Each is an *episode*: it starts when the condition first holds, is counted once
when it has held for longer than its threshold, and ends when the condition clears; the
gauge ``vigil_stalled`` shows the episodes currently open.

**stalled_poll** (per reader and partition, from the direct poll prober). Records are
available — the high watermark (``read_uncommitted``) or the last stable offset
(``read_committed``) is beyond the prober's position — but polls return nothing and the
position does not move, for longer than the threshold. Cannot be inferred from Spark alone: a
query plans all partitions together, so one hung fetch blocks every partition of the batch.
False positives: a threshold below the broker's fetch/session timeouts reports a slow broker
as stalled (that is the point). Cannot be inferred: records nobody can show exist — when the
leader stops answering, the prober knows of waiting records from the last watermarks it got
and from the writers' acked offsets in the ledger; if that leader also leads the writer's
ledger partition, the evidence arrives only after the ledger fails over.
Implies: end-to-end latency and ``unseen`` rise for the same partition.

**lso_stuck** (``read_committed``, per partition). The last stable offset does not advance
while the high watermark is beyond it and moves on, for longer than the canary's longest
transaction plus a margin (the threshold): a hanging transaction. Implies ``unseen`` for
``read_committed`` on that partition until the transaction ends. False positives: another
application's long transaction on the canary topic (the canary topic should be Vigil's own).

**producer_stalled** (per writer). A canary writer has a write waiting for its outcome for
longer than the threshold (from the ledger's intents, which are durable before the send).
Cannot be inferred when the ledger itself is unreachable (the intent never lands): then the
producer metrics' last-ack timestamp is the signal. Implies nothing by itself; with
``acks=all`` and fewer in-sync replicas than ``min.insync.replicas`` it is the expected
outcome (S7 of the chaos matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable


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


def lso_stuck(prev_lso: int, lso: int, high_watermark: int) -> bool:
    """The LSO has not moved while there is data beyond it."""
    return lso <= prev_lso and high_watermark > lso
