"""Drills: canary records and ledger entries that exhibit one anomaly on purpose.

A drill behaves like a lying or misbehaving writer (or broker) would, so an operator can prove
the whole path — checker, metrics, alert — end to end, and tests can prove detection. Each
drill writes as a fresh writer (``<instance>-drill-<kind>``, its own incarnation, records
flagged ``FLAG_DRILL``) so it never disturbs the accounting of the real canaries. What each
kind triggers is fixed in :mod:`monitor.drill_table`; :class:`DrillReport` says exactly what
was injected.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from confluent_kafka import Producer

from invariants.errors import VigilError
from invariants.ledger_format import (
    Intent, OutcomeRun, Outcomes, Start, Stop, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome, WriteRange,
    WriterSettings,
)
from monitor import client_config, clients, record_format
from monitor.canary.runner import Topics, open_ledger
from monitor.config import Config
from monitor.drill_table import DRILL_KINDS, expected_counts
from monitor.identity import WriterIdentity, claim
from monitor.ledger import LedgerWriter, now_us


class DrillError(VigilError):
    pass


@dataclass
class DrillReport:
    kind: str
    topic: str
    topic_id: str
    partition: int
    instance_id: str
    writer_id: int
    incarnation: int
    count: int
    injected: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["expected"] = [
            {"invariant": inv.value, "isolation": iso.value, "count": n}
            for (inv, iso), n in expected_counts(self.kind, self.count, below_log_start=sum(
                1 for i in self.injected if i.get("log_start_after", 0) > 0)).items()
        ]
        return data


class _Drill:
    """One drill run: a writer identity, its ledger, a producer, and helpers."""

    def __init__(self, config: Config, topics: Topics, kind: str, partition: int,
                 identity: WriterIdentity, ledger: LedgerWriter) -> None:
        self.config = config
        self.topic = topics.canary
        self.kind = kind
        self.partition = partition
        self.identity = identity
        self.ledger = ledger
        self.next_seq = 0
        self.producer = self.new_producer(idempotent=kind != "duplicate")
        self.report = DrillReport(kind, self.topic.name, self.topic.topic_id, partition, identity.instance_id,
                                  identity.writer_id, identity.incarnation, 0)
        # A drill plays a broker that breaks a promise: it announces the strongest settings, so what it
        # injects is classed (and pages) as a broken promise on a durable topic.
        settings = WriterSettings(name=kind, role="drill", acks="all", idempotence=True,
                                  transactional=kind in ("aborted_read", "partial_txn", "lso_stuck",
                                                         "g0_write_cycle"))
        self.ledger.append(Start(self.topic.name, self.topic.topic_id, self.topic.partitions, settings,
                                 clients.topic_settings(clients.admin(config), self.topic)), sync=True)

    def new_producer(self, idempotent: bool = True, transactional_id: str | None = None,
                     txn_timeout_ms: int = 60000) -> Producer:
        return clients.producer(client_config.drill_producer(self.config, self.identity.instance_id, idempotent,
                                                             transactional_id, txn_timeout_ms), "drill", self.config)

    def seqs(self, n: int) -> list[int]:
        first = self.next_seq
        self.next_seq += n
        return list(range(first, first + n))

    def record(self, seq: int, flags: int = 0, txn_id: int = 0, txn_size: int = 0, txn_index: int = 0) -> bytes:
        rec = record_format.CanaryRecord(self.identity.writer_id, self.identity.incarnation, seq, now_us(),
                                         txn_id, txn_size, txn_index, flags | record_format.FLAG_DRILL)
        return record_format.encode(rec, 100)

    def write(self, value: bytes, producer: Producer | None = None, partition: int | None = None) -> int:
        """Produce one value and wait for its offset."""
        result: dict[str, Any] = {}

        def delivered(err: Any, msg: Any) -> None:
            result["err"], result["offset"] = err, msg.offset()

        p = producer or self.producer
        p.produce(self.topic.name, value=value, partition=self.partition if partition is None else partition,
                  on_delivery=delivered)
        p.flush(30)
        if result.get("err") is not None or "offset" not in result:
            raise DrillError(f"drill write failed: {result.get('err', 'no delivery report')}")
        return int(result["offset"])

    def intent(self, seqs: list[int], txn: TxnInfo | None = None, partition: int | None = None) -> None:
        p = self.partition if partition is None else partition
        self.ledger.append(Intent(self.topic.topic_id, tuple(WriteRange(p, s, 1) for s in seqs), txn), sync=True)

    def outcomes(self, results: list[tuple[int, WriteOutcome, int]], partition: int | None = None,
                 listed: int = -1) -> None:
        """``listed``: the log start listed after these acks (-1: not listed)."""
        p = self.partition if partition is None else partition
        ts = now_us()
        runs = tuple(OutcomeRun(p, seq, 1, outcome, offset, ts, ts, log_start_after=listed)
                     for seq, outcome, offset in results)
        self.ledger.append(Outcomes(self.topic.topic_id, runs), sync=True)

    def ensure_offset_zero_taken(self) -> None:
        """Make sure offset 0 of the partition holds a record (an honest spacer if needed)."""
        _low, high = self.watermarks(self.partition)
        if high == 0:
            self.cover()

    def watermarks(self, partition: int) -> tuple[int, int]:
        consumer = clients.consumer(self.config, "read_uncommitted", group="vigil-drill")
        try:
            return clients.watermarks(consumer, self.topic.name, partition)
        finally:
            consumer.close()

    def cover(self) -> tuple[int, int]:
        """An honest record; returns (seq, offset)."""
        (seq,) = self.seqs(1)
        self.intent([seq])
        offset = self.write(self.record(seq))
        self.outcomes([(seq, WriteOutcome.ACKED, offset)])
        return seq, offset

    def finish(self) -> DrillReport:
        self.ledger.append(Stop(), sync=True)
        return self.report


# -- one function per kind -------------------------------------------------------------------


def _lost_write(d: _Drill, count: int) -> None:
    d.ensure_offset_zero_taken()
    for _ in range(count):
        cover_seq, offset = d.cover()
        (lie,) = d.seqs(1)
        d.intent([lie])
        d.outcomes([(lie, WriteOutcome.ACKED, offset)])
        d.report.injected.append({"seq": lie, "claimed_offset": offset, "cover_seq": cover_seq})


def _duplicate(d: _Drill, count: int) -> None:
    for _ in range(count):
        (seq,) = d.seqs(1)
        d.intent([seq])
        value = d.record(seq)
        first, second = d.write(value), d.write(value)
        d.outcomes([(seq, WriteOutcome.ACKED, first)])
        d.report.injected.append({"seq": seq, "offsets": [first, second], "acked_offset": first})


def _reorder(d: _Drill, count: int) -> None:
    for _ in range(count):
        s, s1 = d.seqs(2)
        d.intent([s, s1])
        o_late_seq = d.write(d.record(s1))
        o_early_seq = d.write(d.record(s))
        d.outcomes([(s, WriteOutcome.ACKED, o_early_seq), (s1, WriteOutcome.ACKED, o_late_seq)])
        d.report.injected.append({"seqs": [s, s1], "offsets": [o_early_seq, o_late_seq]})


def _zero_offset(d: _Drill, count: int) -> None:
    d.ensure_offset_zero_taken()
    for _ in range(count):
        (seq,) = d.seqs(1)
        d.intent([seq])
        offset = d.write(d.record(seq))
        low, _high = d.watermarks(d.partition)  # listed after the claim, as a writer does after an ack at 0
        d.outcomes([(seq, WriteOutcome.ACKED, 0)], listed=low)
        d.report.injected.append({"seq": seq, "actual_offset": offset, "claimed_offset": 0, "log_start_after": low})


def _offset_mismatch(d: _Drill, count: int) -> None:
    """Claims the offset right after the record's own: found one offset early, inside any settle
    window whatever else the partition receives meanwhile (a claim at an earlier cover record's
    offset could fall outside it on a busy partition and read as lost_write). The honest cover
    written afterwards makes the claimed offset exist, so readers pass it and judge at once."""
    for _ in range(count):
        (seq,) = d.seqs(1)
        d.intent([seq])
        offset = d.write(d.record(seq))
        cover_seq, cover_offset = d.cover()
        d.outcomes([(seq, WriteOutcome.ACKED, offset + 1)])
        d.report.injected.append({"seq": seq, "actual_offset": offset, "claimed_offset": offset + 1,
                                  "cover_seq": cover_seq, "cover_offset": cover_offset})


def _transactional_producer(d: _Drill, suffix: str, timeout_ms: int = 60000) -> Producer:
    producer = d.new_producer(transactional_id=f"vigil-{d.identity.instance_id}-{d.identity.incarnation}-{suffix}",
                              txn_timeout_ms=timeout_ms)
    producer.init_transactions(30)
    return producer


def _aborted_read(d: _Drill, count: int) -> None:
    producer = _transactional_producer(d, "t")
    seqs = d.seqs(count)
    txn_id = 1
    d.intent(seqs, TxnInfo(txn_id, count, True))
    producer.begin_transaction()
    flags = record_format.FLAG_TRANSACTIONAL | record_format.FLAG_INTENDED_ABORT
    offsets = [d.write(d.record(s, flags, txn_id, count, i), producer) for i, s in enumerate(seqs)]
    producer.commit_transaction(30)
    d.outcomes([(s, WriteOutcome.ACKED, o) for s, o in zip(seqs, offsets)])
    d.ledger.append(TxnEnd(txn_id, TxnOutcome.ABORTED), sync=True)
    d.report.injected.append({"txn_id": txn_id, "seqs": seqs, "offsets": offsets, "really": "committed",
                              "recorded": "aborted"})


def _partial_txn(d: _Drill, count: int) -> None:
    producer = _transactional_producer(d, "t")
    flags = record_format.FLAG_TRANSACTIONAL
    for txn_id in range(1, count + 1):
        written, phantom = d.seqs(2)
        d.intent([written, phantom], TxnInfo(txn_id, 2, False))
        producer.begin_transaction()
        offset = d.write(d.record(written, flags, txn_id, 2, 0), producer)
        producer.commit_transaction(30)
        d.outcomes([(written, WriteOutcome.ACKED, offset), (phantom, WriteOutcome.INDETERMINATE, -1)])
        d.ledger.append(TxnEnd(txn_id, TxnOutcome.COMMITTED), sync=True)
        d.report.injected.append({"txn_id": txn_id, "written": {"seq": written, "offset": offset},
                                  "missing_seq": phantom})


def _g0_write_cycle(d: _Drill, count: int) -> None:
    """Per unit, two transactions open at once (two transactional producers), each writing one
    record to this partition and one to the next, waiting for each record's offset: A then B here,
    B then A there; both committed. Real Kafka allows it; the records are honest (seqs in the
    order written on each partition, all acked, both transactions committed)."""
    if d.topic.partitions < 2:
        raise DrillError(f"g0_write_cycle needs two partitions; {d.topic.name} has one")
    p, q = d.partition, (d.partition + 1) % d.topic.partitions
    producers = [_transactional_producer(d, suffix) for suffix in ("a", "b")]
    flags = record_format.FLAG_TRANSACTIONAL
    for unit in range(count):
        txn_a, txn_b = 2 * unit + 1, 2 * unit + 2
        a_p, b_p, b_q, a_q = d.seqs(4)  # in the order they are written
        for txn_id, sp, sq in ((txn_a, a_p, a_q), (txn_b, b_p, b_q)):
            d.ledger.append(Intent(d.topic.topic_id, (WriteRange(p, sp, 1), WriteRange(q, sq, 1)),
                                   TxnInfo(txn_id, 2, False)), sync=True)
        for producer in producers:
            producer.begin_transaction()
        pa, pb = producers
        try:
            offsets = {"a_p": d.write(d.record(a_p, flags, txn_a, 2, 0), pa, p),
                       "b_p": d.write(d.record(b_p, flags, txn_b, 2, 0), pb, p),
                       "b_q": d.write(d.record(b_q, flags, txn_b, 2, 1), pb, q),
                       "a_q": d.write(d.record(a_q, flags, txn_a, 2, 1), pa, q)}
        except Exception:  # a write failed: end both transactions now, not at their timeout
            for producer, txn_id in ((pa, txn_a), (pb, txn_b)):
                producer.abort_transaction(30)
                d.ledger.append(TxnEnd(txn_id, TxnOutcome.ABORTED), sync=True)
            raise
        for producer in producers:
            producer.commit_transaction(30)
        d.outcomes([(a_p, WriteOutcome.ACKED, offsets["a_p"]), (b_p, WriteOutcome.ACKED, offsets["b_p"])], p)
        d.outcomes([(b_q, WriteOutcome.ACKED, offsets["b_q"]), (a_q, WriteOutcome.ACKED, offsets["a_q"])], q)
        for txn_id in (txn_a, txn_b):
            d.ledger.append(TxnEnd(txn_id, TxnOutcome.COMMITTED), sync=True)
        d.report.injected.append({"txn_ids": [txn_a, txn_b], "partitions": [p, q],
                                  "offsets_a": [offsets["a_p"], offsets["a_q"]],
                                  "offsets_b": [offsets["b_p"], offsets["b_q"]]})


def _outcome_gap(d: _Drill, count: int) -> None:
    first_missing = d.ledger.next_n
    d.ledger.append(Stop(), sync=True, skip=count)
    d.report.injected.append({"missing_entries": list(range(first_missing, first_missing + count))})


def _lso_stuck(d: _Drill, count: int, hold_s: float, progress: Callable[[str], None]) -> None:
    if count > d.topic.partitions:
        raise DrillError(f"lso_stuck --count {count} exceeds the {d.topic.partitions} partitions")
    open_txns = []
    flags = record_format.FLAG_TRANSACTIONAL | record_format.FLAG_INTENDED_ABORT
    for i in range(count):
        partition = (d.partition + i) % d.topic.partitions
        producer = _transactional_producer(d, f"p{partition}", int(hold_s * 1000) + 60000)
        (seq,) = d.seqs(1)
        txn_id = i + 1
        d.intent([seq], TxnInfo(txn_id, 1, True), partition)
        producer.begin_transaction()
        offset = d.write(d.record(seq, flags, txn_id, 1, 0), producer, partition)
        d.outcomes([(seq, WriteOutcome.ACKED, offset)], partition)
        open_txns.append((producer, txn_id))
        d.report.injected.append({"partition": partition, "txn_id": txn_id, "seq": seq, "offset": offset,
                                  "held_s": hold_s})
    progress(f"holding {count} transaction(s) open for {hold_s:.0f} s")
    time.sleep(hold_s)
    for producer, txn_id in open_txns:
        producer.abort_transaction(30)
        d.ledger.append(TxnEnd(txn_id, TxnOutcome.ABORTED), sync=True)


def run_drill(config: Config, topics: Topics, kind: str, count: int, partition: int = 0,
              hold_s: float = 90.0, progress: Callable[[str], None] = lambda _m: None) -> DrillReport:
    if kind not in DRILL_KINDS:
        raise DrillError(f"unknown drill {kind!r}; kinds: {', '.join(DRILL_KINDS)}")
    if count < 1:
        raise DrillError("--count must be at least 1")
    if not 0 <= partition < topics.canary.partitions:
        raise DrillError(f"--partition {partition} is not a partition of {topics.canary.name}")
    identity = claim(config.state_dir, f"{config.resolved_instance_id()}-drill-{kind}")
    try:
        drill = _Drill(config, topics, kind, partition, identity, open_ledger(config, identity))
        drill.report.count = count
        if kind == "lso_stuck":
            _lso_stuck(drill, count, hold_s, progress)
        else:
            {
                "lost_write": _lost_write, "duplicate": _duplicate, "reorder": _reorder,
                "zero_offset": _zero_offset, "offset_mismatch": _offset_mismatch,
                "aborted_read": _aborted_read, "partial_txn": _partial_txn, "outcome_gap": _outcome_gap,
                "g0_write_cycle": _g0_write_cycle,
            }[kind](drill, count)
        if kind != "outcome_gap":
            drill.finish()
        return drill.report
    finally:
        identity.release()
