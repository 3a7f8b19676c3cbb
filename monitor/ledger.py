"""Appending to the outcome ledger: what every writer was told, durably, outside the canary's
failure domain.

Each writer appends entries (:mod:`invariants.ledger_format` owns their types and wire form) to
the ledger topic, keyed by instance id so all incarnations of an instance stay in order in one
partition, produced with ``acks=all``, idempotence and an infinite message timeout, to a topic
with ``min.insync.replicas >= 2`` and unclean election off — whatever the canary topic's
settings, and optionally on a separate cluster. :class:`LedgerWriter` numbers the entries per
writer (instance, incarnation) from 0, so a lost entry shows as a gap (``outcome_gap``).

Because intents are durable before the send, the ledger knows every write that may exist. An
intent without an outcome is *pending*; when the same instance starts its next incarnation,
its predecessor's pending writes (and undecided transactions) become ``indeterminate`` — they
were in flight when it died — and entries the predecessor still writes afterwards are ignored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from invariants.errors import VigilError
from invariants.ledger_format import Body, LedgerEntry, OutcomeRun, WriteOutcome, WriterRef, encode
from monitor.clients import ProducerLike


class LedgerError(VigilError):
    pass


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True, slots=True)
class Delivery:
    """One write's outcome as a writer learnt it, before run-length encoding."""

    partition: int
    seq: int
    outcome: WriteOutcome
    offset: int
    send_ts_us: int
    done_ts_us: int
    error: str | None = None
    txn_id: int = 0
    log_start_after: int = -1  # see OutcomeRun


def encode_runs(results: Iterable[Delivery]) -> list[OutcomeRun]:
    """Run-length encode deliveries: consecutive seqs with one outcome, one transaction (and
    consecutive offsets)."""
    runs: list[OutcomeRun] = []
    for d in sorted(results, key=lambda d: (d.partition, d.seq)):
        if runs:
            last = runs[-1]
            next_offset = last.first_offset + last.count if last.first_offset >= 0 else -1
            if (last.partition == d.partition and last.first_seq + last.count == d.seq and last.outcome == d.outcome
                    and last.error == d.error and d.offset == next_offset and last.txn_id == d.txn_id
                    and last.log_start_after == d.log_start_after):
                runs[-1] = OutcomeRun(d.partition, last.first_seq, last.count + 1, d.outcome, last.first_offset,
                                      last.send_ts_us, max(last.done_ts_us, d.done_ts_us), d.error, d.txn_id,
                                      d.log_start_after)
                continue
        runs.append(OutcomeRun(d.partition, d.seq, 1, d.outcome, d.offset, d.send_ts_us, d.done_ts_us, d.error,
                               d.txn_id, d.log_start_after))
    return runs


class LedgerWriter:
    """Appends numbered entries for one writer (instance, incarnation)."""

    def __init__(self, producer: ProducerLike, topic: str, instance_id: str, writer_id: int,
                 incarnation: int) -> None:
        self.producer = producer
        self.topic = topic
        self.writer = WriterRef(instance_id, writer_id, incarnation)
        self.next_n = 0
        self._lock = threading.Lock()
        self._errors: list[str] = []
        self._waiting_since: float | None = None  # monotonic: a sync still waiting after a second
        self.placement = "shared"  # or "separate": the ledger on a cluster of its own (Config.ledger_placement)

    def waiting_s(self) -> float:
        """How long the current wait for durable entries has lasted (0: none). While a writer
        waits for its intent it sends nothing: a ledger that is away pauses the canary."""
        since = self._waiting_since
        return 0.0 if since is None else time.monotonic() - since

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"ledger entry lost: {err}")

    def append(self, body: Body, sync: bool = False, skip: int = 0) -> int:
        """Append an entry and return its number; ``sync`` waits until it is durable.

        ``skip`` leaves that many numbers unused first — only drills do that, to fake a
        lost ledger entry.
        """
        with self._lock:
            self.next_n += skip
            n = self.next_n
            self.next_n += 1
            value = encode(LedgerEntry(self.writer, n, now_us(), body))
            self.producer.produce(self.topic, value=value, key=self.writer.instance.encode(),
                                  on_delivery=self._delivered)
        if sync:
            self.sync()
        else:
            self.producer.poll(0)
        return n

    def sync(self, stop: threading.Event | None = None, timeout_s: float | None = None) -> None:
        """Wait until every appended entry is durable (at most ``timeout_s``); raise if one was lost."""
        started = time.monotonic()
        try:
            while (left := self.producer.flush(1.0)) > 0:
                self._waiting_since = started
                if stop is not None and stop.is_set():
                    raise LedgerError("stopped while waiting for the ledger")
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    raise LedgerError(f"the ledger did not take {left} entr{'y' if left == 1 else 'ies'} within "
                                      f"{timeout_s:.0f} s")
        finally:
            self._waiting_since = None
        if self._errors:
            raise LedgerError("; ".join(self._errors))
