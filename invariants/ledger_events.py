"""The typed events the ledger fold (:class:`invariants.accounting.LedgerFold`) turns entries
into, for the checker's families and the prober; :mod:`invariants.accounting` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from invariants.ledger_format import TopicSettings, TxnOutcome, WriterSettings
from invariants.model import TxnKey, WriteKey
from invariants.promises import UNKNOWN_CLASS, WriteClass


@dataclass(frozen=True, slots=True)
class AckedRun:
    """Acked writes outside transactions, run-length encoded as the ledger has them."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    first_seq: int
    count: int
    first_offset: int
    done_ts_us: int
    cls: WriteClass = UNKNOWN_CLASS
    log_start_after: int = -1  # listed after the acks arrived (-1: not listed); see OutcomeRun
    ack_ts_us: int = 0  # when the writer had the acks, by its clock (OutcomeRun.done_ts_us)


@dataclass(frozen=True, slots=True)
class UnconfirmedRun:
    """Writes sent with ``acks=0``: written or not, nobody was told."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    first_seq: int
    count: int


@dataclass(frozen=True, slots=True)
class TxnWritesIntended:
    """A transaction's writes ``first_seq .. first_seq + count - 1`` of one partition, intended."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    first_seq: int
    count: int
    txn: TxnKey
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class TxnWritesAcked:
    """A transaction's writes ``first_seq + i`` of one partition, acknowledged at ``first_offset + i``."""

    topic_id: str
    partition: int
    writer_id: int
    inc: int
    first_seq: int
    count: int
    first_offset: int
    txn: TxnKey
    done_ts_us: int
    cls: WriteClass = UNKNOWN_CLASS
    ack_ts_us: int = 0  # when the writer had the acks, by its clock (OutcomeRun.done_ts_us)


@dataclass(frozen=True, slots=True)
class TxnWriteDecided:
    """A transaction's write got an outcome other than acked (or its writer ended)."""

    write: WriteKey
    txn: TxnKey
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class TxnDecided:
    txn: TxnKey
    outcome: TxnOutcome
    cls: WriteClass = UNKNOWN_CLASS


@dataclass(frozen=True, slots=True)
class EntriesMissing:
    instance: str
    inc: int
    first_n: int
    count: int


@dataclass(frozen=True, slots=True)
class WriterClassified:
    """What a writer does and what its topic promises, as of its latest ``start``/``checkpoint``."""

    writer_id: int
    inc: int
    topic_id: str
    cls: WriteClass
    settings: WriterSettings
    topic_settings: TopicSettings | None


@dataclass(frozen=True, slots=True)
class TopicObserved:
    """A writer wrote (or writes) ``topic`` under ``topic_id``; ``log_starts``: per partition, the
    log start offset it observed (empty: not observed)."""

    topic: str
    topic_id: str
    partitions: int
    log_starts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicReplaced:
    """A writer found ``old_id`` gone (deleted, or recreated as ``new_id``) and carries on on ``new_id``."""

    topic: str
    old_id: str
    new_id: str


@dataclass(frozen=True, slots=True)
class TopicRetired:
    topic: str
    topic_id: str


LedgerEvent = Union[AckedRun, UnconfirmedRun, TxnWritesIntended, TxnWritesAcked, TxnWriteDecided, TxnDecided,
                    EntriesMissing, WriterClassified, TopicObserved, TopicReplaced, TopicRetired]
