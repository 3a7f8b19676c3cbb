"""The outcome ledger: what every writer was told, durably, outside the canary's failure domain.

Each writer appends JSON entries to the ledger topic (keyed by instance id, so all
incarnations of an instance stay in order in one partition), produced with ``acks=all``,
idempotence and an infinite message timeout, to a topic with ``min.insync.replicas >= 2`` and
unclean election off — whatever the canary topic's settings, and optionally on a separate
cluster. Every entry carries ``n``, numbered per writer (instance, incarnation) from 0, so a
lost ledger entry shows as a gap (``outcome_gap``) instead of silently hiding verdicts.

Entry kinds (all carry ``v, instance, writer_id, inc, n, ts_us, kind``):

``start``     ``topic, topic_id, partitions, writer`` (the writer's settings)
``intent``    ``topic_id, writes: [[partition, first_seq, count], ...], txn: {id, size, abort} | null``
              — durable *before* any of these records is sent
``outcomes``  ``topic_id, runs: [[partition, first_seq, count, outcome, first_offset,
              send_ts_us, done_ts_us, error], ...]`` — run-length encoded: ``first_seq + i``
              got ``first_offset + i`` (offset -1 unless acked)
``txn``       ``id, outcome (committed | aborted | indeterminate), error``
``stop``      clean shutdown: every intent of this incarnation has an outcome

Because intents are durable before the send, the ledger knows every write that may exist. An
intent without an outcome is *pending*; when the same instance starts its next incarnation,
its predecessor's pending writes (and undecided transactions) become ``indeterminate`` — they
were in flight when it died — and entries the predecessor still writes afterwards are ignored. :class:`LedgerBook` folds entries into these per-write outcomes.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from monitor.clients import ProducerLike
from monitor.outcomes import TxnOutcome, WriteOutcome

LEDGER_VERSION = 1
WriteKey = tuple[int, int, str, int, int]  # writer_id, incarnation, topic_id, partition, seq


class LedgerError(Exception):
    pass


def now_us() -> int:
    return time.time_ns() // 1000


def encode_entry(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode()


def decode_entry(value: bytes | None) -> dict[str, Any] | None:
    """A ledger entry, or None for anything that is not one (counted by callers)."""
    if not value:
        return None
    try:
        entry = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or entry.get("v") != LEDGER_VERSION:
        return None
    for key, typ in (("instance", str), ("writer_id", int), ("inc", int), ("n", int), ("kind", str)):
        if not isinstance(entry.get(key), typ):
            return None
    return entry


@dataclass(frozen=True)
class OutcomeRun:
    partition: int
    first_seq: int
    count: int
    outcome: WriteOutcome
    first_offset: int
    send_ts_us: int
    done_ts_us: int
    error: str | None

    def as_list(self) -> list[Any]:
        return [self.partition, self.first_seq, self.count, self.outcome.value, self.first_offset,
                self.send_ts_us, self.done_ts_us, self.error]


def encode_runs(results: Iterable[tuple[int, int, WriteOutcome, int, int, int, str | None]]) -> list[OutcomeRun]:
    """Run-length encode (partition, seq, outcome, offset, send_ts, done_ts, error) results."""
    runs: list[OutcomeRun] = []
    for p, seq, outcome, offset, send_ts, done_ts, error in sorted(results, key=lambda r: (r[0], r[1])):
        if runs:
            last = runs[-1]
            next_offset = last.first_offset + last.count if last.first_offset >= 0 else -1
            if (last.partition == p and last.first_seq + last.count == seq and last.outcome == outcome
                    and last.error == error and offset == next_offset):
                runs[-1] = OutcomeRun(p, last.first_seq, last.count + 1, outcome, last.first_offset,
                                      last.send_ts_us, max(last.done_ts_us, done_ts), error)
                continue
        runs.append(OutcomeRun(p, seq, 1, outcome, offset, send_ts, done_ts, error))
    return runs


class LedgerWriter:
    """Appends numbered entries for one writer (instance, incarnation)."""

    def __init__(self, producer: ProducerLike, topic: str, instance_id: str, writer_id: int,
                 incarnation: int) -> None:
        self.producer = producer
        self.topic = topic
        self.instance_id = instance_id
        self.writer_id = writer_id
        self.incarnation = incarnation
        self.next_n = 0
        self._lock = threading.Lock()
        self._errors: list[str] = []

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"ledger entry lost: {err}")

    def append(self, kind: str, body: dict[str, Any], sync: bool = False, skip: int = 0) -> int:
        """Append an entry and return its number; ``sync`` waits until it is durable.

        ``skip`` leaves that many numbers unused first — only drills do that, to fake a
        lost ledger entry.
        """
        with self._lock:
            self.next_n += skip
            n = self.next_n
            self.next_n += 1
            entry = {"v": LEDGER_VERSION, "instance": self.instance_id, "writer_id": self.writer_id,
                     "inc": self.incarnation, "n": n, "ts_us": now_us(), "kind": kind, **body}
            self.producer.produce(self.topic, value=encode_entry(entry), key=self.instance_id.encode(),
                                  on_delivery=self._delivered)
        if sync:
            self.sync()
        else:
            self.producer.poll(0)
        return n

    def sync(self, stop: threading.Event | None = None) -> None:
        """Wait until every appended entry is durable; raise if one was lost."""
        while self.producer.flush(1.0) > 0:
            if stop is not None and stop.is_set():
                raise LedgerError("stopped while waiting for the ledger")
        if self._errors:
            raise LedgerError("; ".join(self._errors))


# -- folding the ledger into outcomes --------------------------------------------------------


@dataclass
class WriteState:
    outcome: WriteOutcome
    offset: int = -1
    txn_id: int = 0
    error: str | None = None
    send_ts_us: int = 0
    done_ts_us: int = 0


@dataclass
class TxnState:
    outcome: TxnOutcome
    intended_abort: bool
    size: int
    writes: list[WriteKey] = field(default_factory=list)
    error: str | None = None


@dataclass
class WriterLedger:
    instance: str
    writer_id: int
    incarnation: int
    topic_id: str | None = None
    next_n: int = 0
    missing: list[int] = field(default_factory=list)
    stopped: bool = False
    superseded: bool = False  # a later incarnation started: its entries from then on are ignored


class LedgerBook:
    """Folds ledger entries, in ledger order, into per-write and per-transaction outcomes."""

    def __init__(self) -> None:
        self.writers: dict[tuple[str, int], WriterLedger] = {}
        self.writes: dict[WriteKey, WriteState] = {}
        self.txns: dict[tuple[int, int, int], TxnState] = {}
        self.malformed = 0

    def apply_raw(self, value: bytes | None) -> None:
        entry = decode_entry(value)
        if entry is None:
            self.malformed += 1
        else:
            self.apply(entry)

    def apply(self, e: dict[str, Any]) -> None:
        key = (e["instance"], e["inc"])
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = WriterLedger(e["instance"], e["writer_id"], e["inc"])
        if e["n"] < w.next_n or w.superseded:
            return  # a re-read or duplicate entry, or a predecessor writing after its successor started
        w.missing.extend(range(w.next_n, e["n"]))
        w.next_n = e["n"] + 1
        kind = e["kind"]
        wid, inc = e["writer_id"], e["inc"]
        if kind == "start":
            w.topic_id = e.get("topic_id")
            self._close_predecessors(e["instance"], inc)
        elif kind == "intent":
            txn = e.get("txn")
            txn_id = txn["id"] if txn else 0
            keys = [(wid, inc, e["topic_id"], p, first + i) for p, first, count in e["writes"] for i in range(count)]
            for k in keys:
                self.writes.setdefault(k, WriteState(WriteOutcome.PENDING, txn_id=txn_id))
            if txn:
                self.txns[(wid, inc, txn_id)] = TxnState(TxnOutcome.PENDING, bool(txn["abort"]), txn["size"], keys)
        elif kind == "outcomes":
            for p, first, count, outcome, first_offset, send_ts, done_ts, error in e["runs"]:
                for i in range(count):
                    k = (wid, inc, e["topic_id"], p, first + i)
                    st = self.writes.setdefault(k, WriteState(WriteOutcome.PENDING))
                    st.outcome = WriteOutcome(outcome)
                    st.offset = first_offset + i if first_offset >= 0 else -1
                    st.error, st.send_ts_us, st.done_ts_us = error, send_ts, done_ts
        elif kind == "txn":
            t = self.txns.get((wid, inc, e["id"]))
            if t is not None:
                t.outcome, t.error = TxnOutcome(e["outcome"]), e.get("error")
        elif kind == "stop":
            w.stopped = True
            self._close(wid, inc, "writer stopped")

    def _close(self, writer_id: int, inc: int, reason: str) -> None:
        for k, st in self.writes.items():
            if k[0] == writer_id and k[1] == inc and st.outcome is WriteOutcome.PENDING:
                st.outcome, st.error = WriteOutcome.INDETERMINATE, reason
        for (wid, i, _), t in self.txns.items():
            if wid == writer_id and i == inc and t.outcome is TxnOutcome.PENDING:
                t.outcome, t.error = TxnOutcome.INDETERMINATE, reason

    def _close_predecessors(self, instance: str, inc: int) -> None:
        for (inst, i), w in self.writers.items():
            if inst == instance and i < inc and not w.superseded:
                self._close(w.writer_id, i, "writer restarted")
                w.superseded = True

    # -- queries ---------------------------------------------------------------------------

    def by_outcome(self) -> dict[WriteOutcome, int]:
        counts: dict[WriteOutcome, int] = {o: 0 for o in WriteOutcome}
        for st in self.writes.values():
            counts[st.outcome] += 1
        return counts

    def gaps(self) -> dict[tuple[str, int], list[int]]:
        return {k: list(w.missing) for k, w in self.writers.items() if w.missing}
