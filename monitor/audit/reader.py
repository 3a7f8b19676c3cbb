"""Reading the whole history for the audit: every partition from the beginning, both
isolation levels, up to the end (high watermark / LSO), plus the whole ledger."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from confluent_kafka import KafkaError, TopicPartition

from invariants.catalog import Isolation
from invariants.errors import VigilError
from invariants.ledger_format import LedgerEntry, LedgerFormatError, decode
from invariants.model import foreign_ident
from monitor import clients, record_format
from monitor.config import Config

# A batch consume returns once it holds as many messages as asked for or its wait is over: with
# fewer left (every read here ends at the end of its partitions) it waits all of it, so the wait is
# short (measured: one audit of a 30-s topic spent 4 of its 8 s in five consumes of 1 s)
CONSUME_WAIT_S = 0.1


class AuditReadError(VigilError):
    pass


def committed_by(consumer: Any, topic: str, partitions: Iterable[int], timeout_s: float) -> dict[int, int]:
    """The committed offsets of ``consumer``'s group on ``topic`` (partitions without one left out).
    A consumer that never subscribes does not join the group: asking disturbs nothing."""
    got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0 and tp.error is None}


def committed_offsets(cfg: Config, group: str, topic: str, partitions: int, timeout_s: float = 30.0) -> dict[int, int]:
    """The group's committed offsets on ``topic``, from a consumer of its own."""
    c = clients.consumer(cfg, "read_committed", group=group)
    try:
        return committed_by(c, topic, range(partitions), timeout_s)
    finally:
        c.close()


def positions(consumer: Any, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Where ``consumer`` stands on those partitions (those without a position left out)."""
    return {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in partitions])
            if tp.offset >= 0}


def read_past(consumer: Any, topic: str, ends: dict[int, int], timeout_s: float,
              on_message: Callable[[Any], None], start: dict[int, int] | None = None) -> None:
    """Read ``topic`` from ``start`` (default: the beginning) until the position on each partition
    of ``ends`` is at or past its end; AuditReadError when that takes longer than ``timeout_s``."""
    consumer.assign([TopicPartition(topic, p, (start or {}).get(p, 0)) for p in ends])
    todo = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout_s
    while todo:
        if time.monotonic() > deadline:
            raise AuditReadError(f"{topic}: read_committed did not pass offsets {ends} on partitions "
                                 f"{sorted(todo)} within {timeout_s:.0f} s (a transaction still open there?)")
        for msg in consumer.consume(10000, CONSUME_WAIT_S):
            if msg.error() is None:  # (end-of-partition events and errors: the positions decide)
                on_message(msg)
        at = positions(consumer, topic, todo)
        todo = {p for p in todo if at.get(p, 0) < ends[p]}


def read_committed_now(consumer: Any, topic: str, partitions: int, timeout_s: float,
                       on_message: Callable[[Any], None]) -> dict[int, int]:
    """Read ``topic`` with ``consumer`` (read_committed) past its last stable offsets as they are
    now (writers may still be writing: a moving end is never reached on every partition at once);
    returns where the reader then stands (past control records), how far it is whole."""
    stable = {p: clients.watermarks(consumer, topic, p)[1] for p in range(partitions)}
    read_past(consumer, topic, stable, timeout_s, on_message)
    return positions(consumer, topic, range(partitions))


def last_records(cfg: Config, topic: str, tail: int = 2000, timeout_s: float = 30.0) -> dict[int, int]:
    """Per partition, the offset after the last record ``read_committed`` returns (what a group
    that consumed everything has committed): the tail of each partition read up to its last
    stable offset (0 where the tail holds none)."""
    c = clients.consumer(cfg, "read_committed", group="vigil-eos-ends")
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        marks = {p: clients.watermarks(c, topic, p) for p in meta.partitions}
        last = {p: 0 for p in marks}

        def note(msg: Any) -> None:
            last[msg.partition()] = msg.offset() + 1

        try:
            read_past(c, topic, {p: high for p, (low, high) in marks.items() if high > low}, timeout_s, note,
                      start={p: max(low, high - tail) for p, (low, high) in marks.items()})
        except AuditReadError:
            pass  # what was read by then
        return last
    finally:
        c.close()


def committed_to_the_end(cfg: Config, group: str, topic: str, timeout_s: float) -> bool:
    """Wait until ``group`` committed past every record ``topic`` holds now (its writers have
    stopped); False when it did not within ``timeout_s``."""
    need = last_records(cfg, topic)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = committed_offsets(cfg, group, topic, len(need))
        if all(got.get(p, 0) >= end for p, end in need.items()):
            return True
        time.sleep(0.5)
    return False


def read_to_end(consumer: Any, topic: str, partitions: int, timeout_s: float,
                 on_message: Callable[[Any], None], progress: Callable[[str], None]) -> None:
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    last_note = time.monotonic()
    count = 0
    while len(at_end) < partitions:
        if time.monotonic() > deadline:
            raise AuditReadError(f"{topic}: did not reach the end of partitions "
                                 f"{sorted(set(range(partitions)) - at_end)} within {timeout_s:.0f} s")
        for msg in consumer.consume(10000, CONSUME_WAIT_S):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            on_message(msg)
            count += 1
        if time.monotonic() - last_note > 5:
            progress(f"{topic}: {count} records read")
            last_note = time.monotonic()


@dataclass
class History:
    """Everything the audit judges: the whole ledger and every record of the canary topic."""

    entries: list[LedgerEntry]
    reads: dict  # isolation -> (topic id, partition) -> [(offset, ident, txn id[, abort flag, txn size, index])]
    log_start: dict[tuple[str, int], int]  # canary topic log start offsets
    topic_id: str  # "" when the canary topic does not exist (any more)
    malformed: dict[str, int]
    ledger_start: dict[int, int]  # per ledger partition, the first offset it still holds
    # per isolation, each partition's log start once that reader had read it to the end: every
    # offset at or above it was in the log throughout the read, whatever the reader returned there
    read_log_start: dict = field(default_factory=dict)


def read_ledger(cfg: Config, timeout_s: float = 600.0, progress: Callable[[str], None] = lambda _m: None
                ) -> tuple[list[LedgerEntry], int, dict[int, int]]:
    """The whole ledger, up to its end, partition by partition in offset order: its entries, how
    many records were not entries, and the first offset each partition still holds."""
    ledger_info = clients.describe_topic(clients.admin(cfg, ledger=True), cfg.ledger.topic)
    entries: list[LedgerEntry] = []
    ledger_start: dict[int, int] = {}
    malformed = 0
    if ledger_info is None:
        return entries, malformed, ledger_start
    by_partition: dict[int, list[tuple[int, LedgerEntry]]] = {}

    def on_ledger(msg: Any) -> None:
        nonlocal malformed
        try:
            entry = decode(msg.value(), append_ts_us=max(0, msg.timestamp()[1]) * 1000)
        except LedgerFormatError:
            malformed += 1
            return
        by_partition.setdefault(msg.partition(), []).append((msg.offset(), entry))
        ledger_start.setdefault(msg.partition(), msg.offset())

    c = clients.consumer(cfg, "read_committed", group="vigil-audit", ledger=True, profile="bulk")
    try:
        read_to_end(c, cfg.ledger.topic, ledger_info.partitions, timeout_s, on_ledger, progress)
    finally:
        c.close()
    for p in sorted(by_partition):
        entries.extend(e for _off, e in sorted(by_partition[p], key=lambda t: t[0]))
    return entries, malformed, ledger_start


def read_history(cfg: Config, timeout_s: float = 600.0, progress: Callable[[str], None] = lambda _m: None
                 ) -> History:
    """Read the whole ledger and both isolation levels of the canary topic, each up to its end. A
    canary topic that does not exist is no error: the ledger says what was written to it (and an
    empty log is evidence of loss)."""
    admin = clients.admin(cfg)
    info = clients.describe_topic(admin, cfg.canary.name)
    if info is None and clients.topic_exists(admin, cfg.canary.name):
        raise AuditReadError(f"canary topic {cfg.canary.name!r} exists but could not be described; try again")
    entries, bad_entries, ledger_start = read_ledger(cfg, timeout_s, progress)
    malformed = {"ledger": bad_entries, "foreign": 0, "malformed": 0}
    reads: dict[Isolation, dict[tuple[str, int], list[tuple[int, Any, int]]]] = {}
    read_log_start: dict[Isolation, dict[tuple[str, int], int]] = {}
    if info is None:
        progress(f"{cfg.canary.name}: the topic does not exist; judging from the ledger alone")
        return History(entries, {iso: {} for iso in Isolation if iso is not Isolation.NONE}, {}, "", malformed,
                       ledger_start)
    for iso in (Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED):
        per: dict[tuple[str, int], list[tuple[int, Any, int]]] = {}

        def on_canary(msg: Any, per: dict = per, iso: Isolation = iso) -> None:
            rec = record_format.decode(msg.value())
            if isinstance(rec, record_format.CanaryRecord):
                item = (msg.offset(), (rec.writer_id, rec.incarnation, rec.seq), rec.txn_id,
                        rec.intended_abort, rec.txn_size, rec.txn_index)
            else:
                if iso is Isolation.READ_UNCOMMITTED:
                    malformed[record_format.malformed_kind(msg.value())] += 1
                item = (msg.offset(), foreign_ident(msg.value()), 0)
            per.setdefault((info.topic_id, msg.partition()), []).append(item)

        c = clients.consumer(cfg, iso.value, group="vigil-audit", profile="bulk")
        try:
            read_to_end(c, cfg.canary.name, info.partitions, timeout_s, on_canary, progress)
            # no more fetches: a broker answers a connection's requests in turn, so each listing
            # waited behind a fetch waiting for records that never came (0.24 s each, measured)
            c.pause(c.assignment())
            low = {p: clients.watermarks(c, cfg.canary.name, p)[0]
                   for p in range(info.partitions)}
        finally:
            c.close()
        reads[iso] = per
        read_log_start[iso] = {(info.topic_id, p): off for p, off in low.items()}
    log_start = read_log_start[Isolation.READ_UNCOMMITTED]  # (the last read's)
    return History(entries, reads, log_start, info.topic_id, malformed, ledger_start, read_log_start)
