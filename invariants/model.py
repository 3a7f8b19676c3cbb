"""Shared vocabulary of the checkers: reads, write keys, transaction keys, violations, settings.

Plain tuples and frozen dataclasses, no I/O. A record read by a reader is identified by its
``ident``: ``(writer_id, incarnation, seq)`` for a canary record, ``("x", crc32, length)``
(:func:`foreign_ident`) for a foreign or malformed one (so two different records at one offset
can still be told apart).
"""

from __future__ import annotations

import enum
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple

from invariants.catalog import Invariant, Isolation

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE
READERS = (RC, RU)

Ident = tuple  # (writer_id, inc, seq) or ("x", crc32, length)


class WriteKey(NamedTuple):
    """One write: a seq of one writer incarnation on one partition of one topic ID."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    seq: int

    @property
    def ident(self) -> Ident:
        return (self.writer_id, self.inc, self.seq)

    @property
    def part(self) -> tuple[str, int]:
        return (self.topic_id, self.partition)


def write_keys(topic_id: str, partition: int, writer_id: int, inc: int, first_seq: int, count: int) -> list[WriteKey]:
    """The keys of seqs ``first_seq ..`` of one writer incarnation on one partition (tuple.__new__
    skips the named tuple's argument handling: a transaction's entries name up to a hundred writes)."""
    make = tuple.__new__
    return [make(WriteKey, (topic_id, partition, writer_id, inc, seq)) for seq in range(first_seq, first_seq + count)]


class TxnKey(NamedTuple):
    writer_id: int
    inc: int
    txn_id: int


class ViewKey(NamedTuple):
    """One reader's view of one partition."""

    iso: Isolation
    topic_id: str
    partition: int

    def to_doc(self) -> list:
        return [self.iso.value, self.topic_id, self.partition]

    @classmethod
    def from_doc(cls, d: list) -> "ViewKey":
        return cls(Isolation(d[0]), d[1], d[2])


@dataclass(frozen=True, slots=True)
class Read:
    """One record as one reader returned it."""

    offset: int
    ident: Ident
    txn_id: int = 0
    intended_abort: bool = False  # the record header's flag: its writer meant to abort its transaction
    txn_size: int = 0  # the header's: records in the whole transaction (all partitions)
    txn_index: int = 0  # the header's: this record's position in its transaction


@dataclass(frozen=True, slots=True)
class ReadRun:
    """Records one reader returned one after another, as one: ``count`` canary records of one writer
    incarnation, ``(writer_id, inc, seq + i)`` at ``offset + i`` — what the executors send for most
    of a partition (:mod:`monitor.watch.executor`). Outside transactions (``txn_id`` 0), or all of
    one transaction with the same flag and header size, record ``i``'s header index ``txn_index +
    i * txn_step``. Judged exactly as its records one by one (:meth:`invariants.checker.Checker.apply_reads`)."""

    offset: int
    count: int
    writer_id: int
    inc: int
    seq: int
    txn_id: int = 0
    intended_abort: bool = False
    txn_size: int = 0
    txn_index: int = 0
    txn_step: int = 0

    @property
    def last_offset(self) -> int:
        return self.offset + self.count - 1

    @property
    def ident(self) -> Ident:
        """The first record's."""
        return (self.writer_id, self.inc, self.seq)

    def reads(self) -> list[Read]:
        return [Read(self.offset + i, (self.writer_id, self.inc, self.seq + i), self.txn_id, self.intended_abort,
                     self.txn_size, self.txn_index + i * self.txn_step) for i in range(self.count)]


def one_by_one(reads: Iterable["Read | ReadRun"]) -> list[Read]:
    """Runs as their records."""
    out: list[Read] = []
    for r in reads:
        if isinstance(r, ReadRun):
            out.extend(r.reads())
        else:
            out.append(r)
    return out


def in_runs(reads: Iterable[Read], single_runs: bool = False) -> list["Read | ReadRun"]:
    """Reads in offset order with every stretch of two or more canary ones of one writer
    incarnation at consecutive offsets and seqs, outside transactions or of one transaction (same
    flag and size, indexes a constant step apart), as one run (``single_runs``: a canary read
    alone too, as the driver hands them over)."""
    out: list[Read | ReadRun] = []
    group: list[Read] = []

    def flush() -> None:
        if len(group) > 1 or (group and single_runs):
            first = group[0]
            step = group[1].txn_index - first.txn_index if len(group) > 1 else 0
            out.append(ReadRun(first.offset, len(group), first.ident[0], first.ident[1], first.ident[2],
                               first.txn_id, first.intended_abort, first.txn_size, first.txn_index, step))
        else:
            out.extend(group)
        group.clear()

    for r in reads:
        canary = is_canary(r.ident)
        if group and canary:
            last = group[-1]
            if (r.offset == last.offset + 1 and r.ident[0] == last.ident[0] and r.ident[1] == last.ident[1]
                    and r.ident[2] == last.ident[2] + 1 and r.txn_id == last.txn_id
                    and r.intended_abort == last.intended_abort and r.txn_size == last.txn_size
                    and (r.txn_id or (r.txn_index, last.txn_index) == (0, 0))
                    and (len(group) < 2 or r.txn_index - last.txn_index == group[1].txn_index - group[0].txn_index)):
                group.append(r)
                continue
        flush()
        if canary:
            group.append(r)
        else:
            out.append(r)
    flush()
    return out


def last_offset(r: "Read | ReadRun") -> int:
    return r.last_offset if isinstance(r, ReadRun) else r.offset


def read_ranges(reads: Iterable["Read | ReadRun"]) -> list[tuple[int, int]]:
    """Every offset read, in order, as ``[lo, hi)`` ranges of consecutive ones."""
    out: list[list[int]] = []
    for r in reads:
        lo, hi = (r.offset, r.offset + r.count) if isinstance(r, ReadRun) else (r.offset, r.offset + 1)
        if out and out[-1][1] == lo:
            out[-1][1] = hi
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def read_named(reads: Iterable["Read | ReadRun"]) -> list[tuple[int, Ident]]:
    """Every record read, in order, as (offset, identity)."""
    out: list[tuple[int, Ident]] = []
    for r in reads:
        if isinstance(r, ReadRun):
            out.extend((r.offset + i, (r.writer_id, r.inc, r.seq + i)) for i in range(r.count))
        else:
            out.append((r.offset, r.ident))
    return out


def is_canary(ident: Ident) -> bool:
    return ident[0] != "x"


def foreign_ident(value: bytes | None) -> Ident:
    """The identity of a value that is not a canary record: a digest of its bytes (the live
    checker and the audit must give one value the same identity for the offset checks)."""
    v = value or b""
    return ("x", zlib.crc32(v), len(v))


@dataclass(frozen=True)
class Settings:
    """Knobs both the live checker and the audit take, so they judge by the same rule.

    ``settle_offsets`` (H): an acked write missing at its offset is judged once the reader
    has read up to ``offset + H - 1``: found at another offset up to there → offset_mismatch,
    not found → lost_write. ``horizon_offsets``: how many offsets behind its frontier a
    reader's per-offset memory reaches (the live horizon; older anomalies are the audit's).
    """

    settle_offsets: int = 16
    horizon_offsets: int = 20_000


class Durability(str, enum.Enum):
    """Whether a violation breaks a promise Kafka makes (see :mod:`invariants.promises`)."""

    GUARANTEED = "guaranteed"
    AT_RISK = "at_risk"
    UNKNOWN = "unknown"


DURABILITIES = tuple(Durability)


class Verdict(str, enum.Enum):
    OK = "ok"
    UNDECIDED = "undecided"
    MISMATCH = "offset_mismatch"
    LOST = "lost_write"
    EXPIRED = "expired_unread"


@dataclass(frozen=True)
class Violation:
    invariant: Invariant
    isolation: Isolation
    topic_id: str = ""
    partition: int = -1
    offsets: tuple[int, ...] = ()
    writer: tuple[int, int] | None = None  # writer_id, incarnation
    seq: int | None = None
    txn_id: int | None = None
    detail: str = ""
    durability: Durability = Durability.GUARANTEED
    reason: str = ""  # why the configuration allowed it (at_risk) or why the class is unknown
    writer_name: str = ""  # the writer's configured name, when the ledger said it
    cause: str = ""  # e.g. "vanished": a record that was read and later disappeared
    other_txn: tuple[int, int, int] | None = None  # g0_write_cycle: the other transaction (writer, inc, txn id)

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant.value, "isolation": self.isolation.value, "topic_id": self.topic_id,
            "partition": self.partition, "offsets": list(self.offsets),
            "writer_id": None if self.writer is None else f"{self.writer[0]:016x}",
            "incarnation": None if self.writer is None else self.writer[1], "seq": self.seq,
            "txn_id": self.txn_id, "detail": self.detail, "durability": self.durability.value,
            "reason": self.reason, "writer": self.writer_name, "cause": self.cause,
            "other_txn": None if self.other_txn is None else [f"{self.other_txn[0]:016x}", *self.other_txn[1:]],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Violation":
        """The violation an evidence line (``to_json`` plus what the watch adds) describes."""
        writer = None if doc.get("writer_id") is None else (int(doc["writer_id"], 16), int(doc["incarnation"]))
        return cls(Invariant(doc["invariant"]), Isolation(doc["isolation"]), doc.get("topic_id") or "",
                   int(doc.get("partition", -1)), tuple(int(o) for o in doc.get("offsets") or ()), writer,
                   doc.get("seq"), doc.get("txn_id"), doc.get("detail") or "",
                   Durability(doc.get("durability") or Durability.GUARANTEED.value), doc.get("reason") or "",
                   doc.get("writer") or "", doc.get("cause") or "",
                   None if not doc.get("other_txn") else (int(doc["other_txn"][0], 16), *map(int, doc["other_txn"][1:])))

    def identity(self) -> tuple:
        """What makes two reports the same violation, whenever and however it was found again:
        what, where (topic ID, partition, its first two offsets) and whose (writer, seq,
        transaction). Not its cause nor its class: a write read and later gone (``vanished``,
        classed by the promise of a read) is, read again from the start, a write never read
        (``never_read``, classed by the promise of its ack). Not its offsets past the first two:
        a duplicate lists the copies read when it was counted, which depends on the batches.
        Its detail only when nothing else says which one it is (``outcome_gap``: the entries). The
        other transaction of a write cycle (the pair is the cycle; where it was seen depends on the
        batches)."""
        anonymous = not self.offsets and self.writer is None
        return (self.invariant.value, self.isolation.value, self.topic_id, self.partition, self.offsets[:2],
                self.writer, self.seq, self.txn_id, self.detail if anonymous else "", self.other_txn)

    @staticmethod
    def identity_doc(ident: tuple) -> list:
        return [*ident[:4], list(ident[4]), None if ident[5] is None else list(ident[5]), *ident[6:9],
                None if ident[9] is None else list(ident[9])]

    @staticmethod
    def identity_from_doc(doc: list) -> tuple:
        other = doc[9] if len(doc) > 9 else None  # absent before write cycles were counted
        return (*doc[:4], tuple(doc[4]), None if doc[5] is None else tuple(doc[5]), *doc[6:9],
                None if other is None else tuple(other))


LOST_CAUSES = ("never_read", "vanished", "topic_vanished")


def lost_cause(cause: str) -> str:
    """How a ``lost_write`` came about, as counted: never read where acknowledged (``never_read``),
    read there and later gone (``vanished``), or its topic ID gone (``topic_vanished``)."""
    return cause if cause in LOST_CAUSES else "never_read"


class ViolationSink:
    """Where the families report: counts per (invariant, isolation) and the new violations.

    After a rebuild (a checker state lost and rebuilt by reading the retained logs again), the
    violations counted before it are :meth:`seed`-ed from their evidence: counted at once, and
    each one found again in the logs is passed over, once, instead of being counted twice. What
    is never found again (its records deleted by retention) stays remembered: there are as many
    as violations were counted, and forgetting one below a log start is not safe — a bogus ack
    below it is judged from the ledger alone and found again."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[Invariant, Isolation, Durability]] = Counter()
        self.lost_by_writer: Counter[tuple[str, Isolation, Durability, str]] = Counter()  # ... and cause
        self.new: list[Violation] = []
        self.counted_before: Counter[tuple] = Counter()  # identities seeded and not yet found again

    def seed(self, earlier: Iterable[Violation]) -> None:
        """Count violations a lost state had counted (from their evidence), and pass over each
        when the logs show it again."""
        for v in earlier:
            self._count(v)
            self.counted_before[v.identity()] += 1

    def add(self, v: Violation) -> None:
        ident = v.identity()
        if self.counted_before[ident] > 0:  # counted before the rebuild: found again, not new
            self.counted_before[ident] -= 1
            if not self.counted_before[ident]:
                del self.counted_before[ident]
            return
        self._count(v)
        self.new.append(v)

    def _count(self, v: Violation) -> None:
        self.counts[(v.invariant, v.isolation, v.durability)] += 1
        if v.invariant is Invariant.LOST_WRITE:
            self.lost_by_writer[(v.writer_name, v.isolation, v.durability, lost_cause(v.cause))] += 1

    def extend(self, vs: list[Violation]) -> None:
        for v in vs:
            self.add(v)

    def take(self) -> list[Violation]:
        out, self.new = self.new, []
        return out
