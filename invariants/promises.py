"""Promise classes: which violations break a promise Kafka makes, and which the configuration allowed.

Every verdict carries a durability class, computed here from what the ledger recorded — the
writer's settings (its ``Start`` entry) and the topic's settings as the writer last observed
them (``Start`` and ``Checkpoint`` entries) — never configured by hand:

``guaranteed``
    Kafka promises this cannot happen with these settings: a violation is a broken promise
    (it pages).
``at_risk``
    the settings allow it (e.g. ``acks=1`` may lose acknowledged writes when a leader fails):
    a violation is a *measurement* of the risk the team chose (a dashboard panel and a
    warning, quantified per writer), with the reason.
``unknown``
    the topic's settings could not be read when the write was made.

The class depends on the invariant, not only on the writer:

* **An acknowledged write never read** (``lost_write``): ``guaranteed`` only for ``acks=all``
  with idempotence, ``min.insync.replicas >= 2``, replication factor ``>= 3`` and unclean
  leader election off. Anything weaker is ``at_risk``, naming the first weakness.
* **A record that was read and then disappeared** (``lost_write`` of a vanished record,
  ``inconsistent_offset``): a reader only reads below the high watermark, so every in-sync
  replica had the record and any clean election keeps it — ``guaranteed`` whenever unclean
  election is off, whatever the acks; ``at_risk`` with unclean election on.
* **duplicate, reorder**: ``guaranteed`` for an idempotent writer on a topic without unclean
  election (a truncated log can lose the producer state idempotence relies on); a
  non-idempotent writer may duplicate and reorder on retries: ``at_risk``.
* **zero_offset, offset_mismatch**: a broker reporting an offset where the record is not —
  never allowed by any setting: ``guaranteed``.
* **aborted_read, partial_txn**: Kafka's transactional promise holds on a durable topic:
  ``guaranteed`` when the topic is (replication factor ``>= 3``, ``min.insync.replicas >= 2``,
  no unclean election), else ``at_risk`` (a lossy topic can tear a transaction).
* **outcome_gap** and the liveness invariants are about the ledger and availability, not about
  what the canary topic's configuration allows: ``guaranteed``.
* **group_skip, group_rewind, eos_loss, eos_duplicate** (the application canaries): judged on
  records a consumer read (below the high watermark) against what a group committed — classed
  as a record read (``read_record``) on the canary topic's latest observed settings: an unclean
  election may rewrite what a group had consumed and committed past (``at_risk``); otherwise
  ``guaranteed``. :func:`latest_topic_settings` gives the live checker and the audit the same
  settings once both have the whole ledger.
* **g0_write_cycle**: Kafka makes no promise that concurrent transactions are ordered alike on
  every partition: always ``at_risk``, reason ``kafka_allows`` (:mod:`invariants.write_cycles`).

The class is that of the settings in force when the write was made (the writer's latest
observation before its intent), so the live checker and the audit, which read the same
ledger, classify every write alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from invariants.ledger_format import Checkpoint, LedgerEntry, Start, TopicSettings, WriterSettings
from invariants.model import Durability


@dataclass(frozen=True, slots=True)
class Promise:
    durability: Durability
    reason: str = ""

    def to_doc(self) -> list:
        return [self.durability.value, self.reason]

    @classmethod
    def from_doc(cls, d: list) -> "Promise":
        return cls(Durability(d[0]), d[1])


GUARANTEED = Promise(Durability.GUARANTEED)
UNKNOWN = Promise(Durability.UNKNOWN, "topic settings not observed")
KAFKA_ALLOWS = Promise(Durability.AT_RISK, "kafka_allows")  # no setting makes Kafka promise otherwise


def _topic_weakness(topic: TopicSettings) -> str:
    if topic.unclean_leader_election:
        return "unclean leader election enabled"
    if topic.replication_factor < 3:
        return f"replication factor {topic.replication_factor}"
    if topic.min_insync_replicas < 2:
        return f"min.insync.replicas={topic.min_insync_replicas}"
    return ""


def acked_write(writer: WriterSettings, topic: TopicSettings | None) -> Promise:
    """An acknowledged write that was never read where it was acknowledged."""
    if writer.acks != "all":
        return Promise(Durability.AT_RISK, f"acks={writer.acks}")
    if not writer.idempotence:
        return Promise(Durability.AT_RISK, "not idempotent")
    if topic is None:
        return UNKNOWN
    weakness = _topic_weakness(topic)
    return Promise(Durability.AT_RISK, weakness) if weakness else GUARANTEED


def read_record(topic: TopicSettings | None) -> Promise:
    """A record a reader read (below the high watermark) that later changed or disappeared."""
    if topic is None:
        return UNKNOWN
    if topic.unclean_leader_election:
        return Promise(Durability.AT_RISK, "unclean leader election enabled")
    return GUARANTEED


def latest_topic_settings(entries: Iterable[LedgerEntry], topic_id: str) -> TopicSettings | None:
    """The canary topic's settings as the writers last observed them (``Start`` / ``Checkpoint``
    entries, in ledger order); None when none did."""
    last = None
    for e in entries:
        body = e.body
        if isinstance(body, (Start, Checkpoint)) and body.topic_id == topic_id and body.topic_settings is not None:
            last = body.topic_settings
    return last


def topic_ids_of(entries: Iterable[LedgerEntry], name: str) -> set[str]:
    """Every topic ID the writers observed under the topic ``name`` (``Start`` / ``Checkpoint``
    entries, and the IDs a recreated topic replaced): more than one, the topic was recreated."""
    ids: set[str] = set()
    for e in entries:
        body = e.body
        if isinstance(body, (Start, Checkpoint)) and body.topic == name:
            ids.add(body.topic_id)
            if isinstance(body, Start) and body.replaces:
                ids.add(body.replaces)
    return ids - {""}


NOT_IDEMPOTENT = "not idempotent"


def ordering(writer: WriterSettings, topic: TopicSettings | None) -> Promise:
    """Duplicates and reorders of one writer's records."""
    if not writer.idempotence:
        return Promise(Durability.AT_RISK, NOT_IDEMPOTENT)
    return read_record(topic)


def transaction(topic: TopicSettings | None) -> Promise:
    if topic is None:
        return UNKNOWN
    weakness = _topic_weakness(topic)
    return Promise(Durability.AT_RISK, weakness) if weakness else GUARANTEED


@dataclass(frozen=True, slots=True)
class WriteClass:
    """The classes of every verdict on one writer's writes, as of one observation of the topic."""

    writer: str  # the writer's configured name ("" when its Start entry was not seen)
    acked: Promise  # an acknowledged write never read where acknowledged
    read: Promise  # a record read and later changed or gone
    order: Promise  # duplicate, reorder
    txn: Promise  # aborted_read, partial_txn

    def to_doc(self) -> list:
        return [self.writer, self.acked.to_doc(), self.read.to_doc(), self.order.to_doc(), self.txn.to_doc()]

    @classmethod
    def from_doc(cls, d: list) -> "WriteClass":
        return cls(d[0], *(Promise.from_doc(p) for p in d[1:]))


UNKNOWN_CLASS = WriteClass("", UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)


def classify(writer: WriterSettings | None, topic: TopicSettings | None) -> WriteClass:
    """The classes of ``writer``'s writes on a topic with ``topic`` settings (None: not seen)."""
    if writer is None:
        return WriteClass("", UNKNOWN, read_record(topic), UNKNOWN, transaction(topic))
    return WriteClass(writer.name, acked_write(writer, topic), read_record(topic), ordering(writer, topic),
                      transaction(topic))


class ClassTable:
    """Writes classes once each in a saved state: ``ref`` numbers them, ``doc``/``from_doc`` keep them."""

    def __init__(self, classes: list[WriteClass] | None = None) -> None:
        self.classes: list[WriteClass] = list(classes or [])
        self._index: dict[WriteClass, int] = {c: i for i, c in enumerate(self.classes)}

    def ref(self, cls: WriteClass) -> int:
        i = self._index.get(cls)
        if i is None:
            i = self._index[cls] = len(self.classes)
            self.classes.append(cls)
        return i

    def get(self, i: int) -> WriteClass:
        return self.classes[i]

    def to_doc(self) -> list:
        return [c.to_doc() for c in self.classes]

    @classmethod
    def from_doc(cls, doc: list) -> "ClassTable":
        return cls([WriteClass.from_doc(d) for d in doc])


class SaveClassTable(ClassTable):
    """The table of one save: the same numbers, found by the object's identity first (a save refers
    to the same few objects some hundred thousand times, and a class's hash walks its fields). Only
    for the length of a save: it keeps every object it was shown (so that no id is reused meanwhile),
    and writers make a new, equal class at each start and checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self._by_id: dict[int, int] = {}
        self._shown: list[WriteClass] = []

    def ref(self, cls: WriteClass) -> int:
        i = self._by_id.get(id(cls))
        if i is None:
            i = self._by_id[id(cls)] = super().ref(cls)
            self._shown.append(cls)
        return i
