"""The ledger's entry types: the outcome enums and one frozen dataclass per entry kind (the wire
format, encoding and decoding are :mod:`invariants.ledger_format`'s, which re-exports these)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Union

from invariants.errors import VigilError


class WriteOutcome(str, enum.Enum):
    """The outcome of one write (see ``monitor/outcomes.py`` for how client errors map onto it)."""

    ACKED = "acked"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"
    UNCONFIRMED = "unconfirmed"
    PENDING = "pending"  # intent recorded, outcome not (yet) known


class TxnOutcome(str, enum.Enum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    INDETERMINATE = "indeterminate"
    PENDING = "pending"


class LedgerFormatError(VigilError):
    """Bytes that are not a ledger entry this version of Vigil reads."""


@dataclass(frozen=True, slots=True)
class WriterRef:
    """Who wrote an entry: one writer incarnation of one Vigil instance."""

    instance: str
    writer_id: int
    inc: int


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """What a writer does, as recorded in its ``Start`` entry."""

    name: str = ""
    role: str = "canary"  # canary | drill | bench
    acks: str = "all"
    idempotence: bool = True
    transactional: bool = False
    message_timeout_ms: int = 30000
    # the longest after its intent a record's outcome may take to reach the ledger, as the writer
    # bounds it (0: not recorded, its message timeout then): a transactional writer records its
    # records' outcomes when its transaction ends, after the commit or abort and their retries
    outcome_within_ms: int = 0


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """The canary topic's durability settings as a writer observed them (DescribeConfigs and the
    partitions' replica lists): what Kafka promises depends on them."""

    replication_factor: int
    min_insync_replicas: int
    unclean_leader_election: bool


@dataclass(frozen=True, slots=True)
class Start:
    """A writer starts, or carries on on a changed topic (``replaces``: the topic ID it wrote to
    before, which has vanished or been recreated; more partitions keep the ID)."""

    topic: str
    topic_id: str
    partitions: int
    settings: WriterSettings = field(default_factory=WriterSettings)
    topic_settings: TopicSettings | None = None
    replaces: str = ""


@dataclass(frozen=True, slots=True)
class WriteRange:
    partition: int
    first_seq: int
    count: int


@dataclass(frozen=True, slots=True)
class TxnInfo:
    id: int
    size: int
    abort: bool


@dataclass(frozen=True, slots=True)
class Intent:
    topic_id: str
    writes: tuple[WriteRange, ...]
    txn: TxnInfo | None = None


@dataclass(frozen=True, slots=True)
class OutcomeRun:
    """Seqs ``first_seq .. first_seq + count - 1`` of one partition, all with ``outcome``; when
    acked, ``first_seq + i`` sits at ``first_offset + i``."""

    partition: int
    first_seq: int
    count: int
    outcome: WriteOutcome
    first_offset: int
    send_ts_us: int
    done_ts_us: int
    error: str | None = None
    txn_id: int = 0  # the transaction the writes belong to (0: none)
    # for acks that went backwards or to 0: the partition's log start offset as listed after the
    # acknowledgement arrived (-1: not listed). An ack below it named an offset the log no longer
    # had when it was given: a bogus offset, judged at once.
    log_start_after: int = -1


@dataclass(frozen=True, slots=True)
class Outcomes:
    topic_id: str
    runs: tuple[OutcomeRun, ...]


@dataclass(frozen=True, slots=True)
class TxnEnd:
    id: int
    outcome: TxnOutcome
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PendingWrites:
    """Writes with a durable intent and no outcome yet."""

    partition: int
    first_seq: int
    count: int
    txn_id: int
    intent_ts_us: int


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A transaction begun and not ended: its whole intent."""

    id: int
    size: int
    abort: bool
    writes: tuple[WriteRange, ...]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    topic: str
    topic_id: str
    partitions: int
    settings: WriterSettings
    topic_settings: TopicSettings | None
    pending: tuple[PendingWrites, ...] = ()
    open_txns: tuple[OpenTxn, ...] = ()
    log_starts: tuple[int, ...] = ()  # per partition, the log start offset observed (empty: unknown)


@dataclass(frozen=True, slots=True)
class Init:
    """The writer is about to initialise its producer (InitProducerId, ``init_transactions``)."""


@dataclass(frozen=True, slots=True)
class Retire:
    """``vigil retire``: this topic ID is retired on purpose (deleting it breaks no promise)."""

    topic: str
    topic_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Stop:
    pass


Body = Union[Start, Intent, Outcomes, TxnEnd, Checkpoint, Init, Retire, Stop]
KINDS: dict[type, str] = {Start: "start", Intent: "intent", Outcomes: "outcomes", TxnEnd: "txn",
                          Checkpoint: "checkpoint", Init: "init", Retire: "retire", Stop: "stop"}


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    writer: WriterRef
    n: int
    ts_us: int
    body: Body
    append_ts_us: int = 0  # the broker's append time of the ledger record (0: unknown); not encoded

    @property
    def kind(self) -> str:
        return KINDS[type(self.body)]

    @property
    def time_us(self) -> int:
        """When the entry was appended, by the broker's clock where known (else the writer's)."""
        return self.append_ts_us or self.ts_us
