"""Which topic ID a record read under a topic name belongs to.

Spark rows carry topic names; every verdict is keyed by topic ID, and a name can stand for
several IDs over time (a topic deleted and recreated, by an operator or by writers that found it
gone). The ID is never looked up by name when a batch arrives — the name may already point at a
new topic while the batch holds records of the old one, or the other way round. Instead, per
reader and partition (a *stream*), each batch's reads of the partition (one fetched range of one
log, so of one topic) get one ID:

1. **Content.** A canary record's (writer, incarnation, partition, seq) was intended for exactly
   one topic ID (the ledger's intents, :meth:`invariants.accounting.LedgerFold.topic_of`): seqs
   only grow, so a writer that moved to a new ID writes higher seqs there. Reads holding a
   record of a *newer* ID than the stream's move the stream to it. Records of *older* IDs on a
   stream already on a newer one are the old log, fetched from a broker that had not deleted it
   yet, or stragglers that landed in the new topic (a retry sent before its writer noticed the
   change); content cannot tell them apart, and neither is applied
   (:meth:`invariants.topic_lifecycle.TopicLifecycle.apply_named_reads`). Cannot be inferred: a
   reader that lagged on the old ID and goes on into the new log without its offsets going
   backwards (the new log already longer than its position), in a batch holding nothing but
   stragglers, stays on the old ID: those stragglers are judged there (a property test found
   ``inconsistent_offset`` that way; stragglers land right after a recreation, at the new log's
   head, so the reader must have lagged by the whole new log).
2. **Offsets going backwards** (Spark resuming lower: a truncated log, or a new, shorter one). A
   stream whose ID is known to be gone moves to the newest ID known for the name; otherwise the
   runtime is asked for the name's ID *now* (``fresh_id``, a metadata lookup made only then):
   another ID than the stream's means the topic was recreated, the same one a truncation.
3. A new stream starts at the newest of its reads' IDs by content; reads with no canary record
   of a known intent take the name's ID now (``fresh_id`` again), else the newest known. Not the
   name's ID now when the content says otherwise: a monitor that starts (or a reader whose first
   batch comes) late reads the old topic's tail while the name already points at the new one —
   measured on the local cluster, a delete under running writers put 5,819 false
   inconsistent offsets on the new ID that way. The price: a stream whose very first batch is a
   straggler of an old ID written into the new topic is attributed to the old ID (a reader
   that exists before the recreation, as Spark's do, is on rule 1 instead).

IDs of one name are ordered oldest first: by what replaced what (a writer's ``start`` names the
ID it replaces; the runtime sees the current one), else by when they were first seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from invariants.model import Read, ReadRun, last_offset


@dataclass
class Stream:
    topic_id: str
    last_offset: int


def lowest_and_highest_seqs(reads: Sequence[Read | ReadRun]) -> list[Read]:
    """Per writer incarnation, the canary reads of its lowest and highest seq: a writer's seqs
    only grow, and so do the IDs they were intended for, so these two name the oldest and the
    newest ID any of its reads names."""
    span: dict[tuple[Any, Any], list[Read]] = {}
    for item in reads:
        if isinstance(item, ReadRun):  # its first and last records
            last = Read(item.last_offset, (item.writer_id, item.inc, item.seq + item.count - 1))
            pair: tuple[Read, ...] = (Read(item.offset, item.ident), last)
        else:
            pair = (item,)
        for r in pair:
            _widen(span, r)
    return [r for lo, hi in span.values() for r in ((lo,) if lo is hi else (lo, hi))]


def _widen(span: dict[tuple[Any, Any], list[Read]], r: Read) -> None:
    """``span[writer]``: its reads of the lowest and the highest seq so far, ``r`` included."""
    w, inc, seq = r.ident
    if w == "x":
        return
    got = span.get((w, inc))
    if got is None:
        span[(w, inc)] = [r, r]
    elif seq < got[0].ident[2]:
        got[0] = r
    elif seq > got[1].ident[2]:
        got[1] = r


class TopicAttribution:
    def __init__(self) -> None:
        self.oldest_named: str | None = None  # the oldest ID the last attributed batch's records name
        self.ids: dict[str, list[str]] = {}  # name -> topic IDs, oldest first
        self.gone: dict[str, str] = {}  # topic ID -> why it is no longer read ("vanished", "retired")
        self.streams: dict[tuple[str, str, int], Stream] = {}  # (isolation, name, partition)

    def note(self, name: str, topic_id: str, after: str = "") -> bool:
        """``topic_id`` is (or was) ``name``; ``after``: an ID it is known to be newer than.
        True when the ID was not known before."""
        ids = self.ids.setdefault(name, [])
        new = topic_id not in ids
        if after and after in ids and (new or ids.index(topic_id) < ids.index(after)):
            if not new:
                ids.remove(topic_id)
            ids.insert(ids.index(after) + 1, topic_id)
        elif new:
            ids.append(topic_id)
        return new

    def name_of(self, topic_id: str) -> str:
        return next((n for n, ids in self.ids.items() if topic_id in ids), "")

    def newest(self, name: str) -> str | None:
        ids = self.ids.get(name)
        return ids[-1] if ids else None

    def _newer(self, name: str, a: str, b: str) -> bool:
        ids = self.ids.get(name, [])
        return a in ids and b in ids and ids.index(a) > ids.index(b)

    def older(self, name: str, a: str, b: str) -> bool:
        """``a`` is an ID ``name`` stood for before ``b``."""
        return self._newer(name, b, a)

    def attribute(self, iso: str, name: str, partition: int, reads: Sequence[Read],
                  topic_of: Callable[[Read], str | None],
                  fresh_id: Callable[[str], str | None] = lambda _n: None) -> str | None:
        """The topic ID of ``reads`` (one reader's batch of one partition, offset order); None when
        nothing is known of ``name``. ``topic_of``: a record's ID by its content; ``fresh_id``:
        the name's ID now (asked only for a new stream and when offsets go backwards)."""
        self.oldest_named = None
        if not reads:
            return None
        key = (iso, name, partition)
        content = oldest = None
        for r in lowest_and_highest_seqs(reads):
            tid = topic_of(r)
            if tid is not None:
                self.note(name, tid)
                if content is None or self._newer(name, tid, content):
                    content = tid
                if oldest is None or self._newer(name, oldest, tid):
                    oldest = tid
        self.oldest_named = oldest
        s = self.streams.get(key)
        if s is None:
            tid = content
            if tid is None:
                now = fresh_id(name)
                if now is not None:
                    self.note(name, now)
                tid = now if now is not None else self.newest(name)
            if tid is None:
                return None
            s = self.streams[key] = Stream(tid, last_offset(reads[-1]))
        elif content is not None and self._newer(name, content, s.topic_id):
            s.topic_id = content
        elif reads[0].offset <= s.last_offset:
            s.topic_id = self._after_going_back(name, s.topic_id, fresh_id)
        s.last_offset = last_offset(reads[-1])
        return s.topic_id

    def _after_going_back(self, name: str, tid: str, fresh_id: Callable[[str], str | None]) -> str:
        if tid in self.gone:
            return self.newest(name) or tid
        now = fresh_id(name)
        if now is not None and now != tid:
            self.note(name, now, after=tid)
            return now
        return tid

    # -- durable form ----------------------------------------------------------------------

    def to_doc(self) -> dict[str, Any]:
        return {"ids": self.ids, "gone": self.gone,
                "streams": [[*k, s.topic_id, s.last_offset] for k, s in self.streams.items()]}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "TopicAttribution":
        a = cls()
        a.ids = {n: list(ids) for n, ids in doc["ids"].items()}
        a.gone = dict(doc["gone"])
        a.streams = {(iso, name, p): Stream(tid, last) for iso, name, p, tid, last in doc["streams"]}
        return a
