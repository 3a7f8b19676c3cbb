"""Offsets family: ``inconsistent_offset`` — one offset, two records — and the rewrites seen.

Judged per topic ID and partition, over what the readers returned, over time.

**inconsistent_offset.** One (topic ID, partition, offset) read holding two different records:
the ``read_committed`` and the ``read_uncommitted`` reader disagree, or one reader read the
offset again (Spark resuming lower after a truncation, the prober re-fetching a range on
evidence of a rewrite) and found another record than before. Once two different records have
been read at an offset — by any reader, at any time — every reader that read a record there
counts it once (in its own series), whether it saw both records or only one of them: the
count depends on what was read, not on the order the readers happened to read it in. An
offset that only one reader returned (``read_committed`` skips aborted and control records) is
not a disagreement; an offset that held a record and now holds none is a rewrite (and possibly a
``lost_write``), not a second record. False positives: none — an offset's record never changes
in Kafka's log unless it was truncated. Implies a truncation (an unclean election, an ``acks=1``
failover, a broker that came back empty) or a broker bug; look for ``lost_write`` in the same
incident.

**Class.** What a reader read was below the high watermark, which a clean election never
truncates: ``guaranteed`` unless unclean leader election is on. Taken from the first canary
record (in writer, incarnation, seq order) among those read at the offset, by the topic
settings its writer recorded (it waits for the writer's announcement in the ledger); offsets
holding only foreign records are ``unknown``.

**Rewrites** (``vigil_log_rewrites_total``, not a violation): every offset whose content a
re-read found changed — another record, a record where there was none, none where there was one
— counted once per offset.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from invariants.catalog import Invariant
from invariants.model import READERS, RC, RU, Ident, Isolation, ViewKey, Violation, is_canary
from invariants.promises import UNKNOWN, WriteClass
from invariants.read_index import PartitionView

Part = tuple[str, int]


def disagree(a: Ident | None, b: Ident | None) -> bool:
    """Two records at one offset differ (an offset one reader skipped is no disagreement)."""
    return a is not None and b is not None and a != b


def deciding_record(idents: list[Ident]) -> Ident | None:
    """The record whose writer classes an inconsistent offset: the first canary one, canonically."""
    canary = sorted(i for i in idents if is_canary(i))
    return canary[0] if canary else None


class OffsetsFamily:
    """``class_of(writer)``: the class the writer announced (None: not announced yet)."""

    def __init__(self, class_of: Callable[[tuple[int, int]], WriteClass | None]) -> None:
        self.class_of = class_of
        self.records: dict[Part, dict[int, set[Ident]]] = {}  # inconsistent offsets: every record read there
        self.readers: dict[Part, dict[int, set[Isolation]]] = {}  # ... and who read a record there
        self.flagged: dict[ViewKey, set[int]] = {}  # counted per reader
        self.parked: list[tuple[ViewKey, int]] = []  # counted once the deciding writer is announced
        self.rewritten: dict[Part, set[int]] = {}
        self.rewrites: Counter[Part] = Counter()

    def observe(self, key: ViewKey, off: int, ident: Ident, other: PartitionView | None) -> list[Violation]:
        """The reader of ``key`` holds ``ident`` at ``off`` now (a first read, or a re-read that
        found it); ``other``: the other reader's view of the partition."""
        part = (key.topic_id, key.partition)
        known = self.records.get(part)
        if known is None or off not in known:
            theirs = None if other is None else other.ident_at(off)
            if not disagree(ident, theirs):
                return []
        records = self.records.setdefault(part, {})
        readers = self.readers.setdefault(part, {})
        if off not in records:
            records[off] = {theirs}
            readers[off] = {RU if key.iso is RC else RC}
        records[off].add(ident)
        readers[off].add(key.iso)
        return self._flag_all(part, off)

    def on_change(self, key: ViewKey, off: int, old: Ident | None, new: Ident | None,
                  other: PartitionView | None) -> list[Violation]:
        """A re-read found ``new`` (None: nothing) where the reader held ``old`` (None: nothing)."""
        part = (key.topic_id, key.partition)
        done = self.rewritten.setdefault(part, set())
        if off not in done:
            done.add(off)
            self.rewrites[part] += 1
        if old is None:
            return [] if new is None else self.observe(key, off, new, other)
        out = []
        if new is not None and new != old:
            records = self.records.setdefault(part, {}).setdefault(off, set())
            readers = self.readers.setdefault(part, {}).setdefault(off, set())
            records.update((old, new))
            readers.add(key.iso)
            theirs = None if other is None else other.ident_at(off)
            if theirs is not None:
                records.add(theirs)
                readers.add(RU if key.iso is RC else RC)
            out = self._flag_all(part, off)
        return out

    def _flag_all(self, part: Part, off: int) -> list[Violation]:
        out: list[Violation] = []
        for iso in READERS:
            if iso in self.readers[part][off]:
                out += self._flag(ViewKey(iso, *part), off)
        return out

    def _flag(self, key: ViewKey, off: int) -> list[Violation]:
        seen = self.flagged.setdefault(key, set())
        if off in seen:
            return []
        part = (key.topic_id, key.partition)
        if off not in self.records.get(part, {}):  # parked, then forgotten by the other reader's horizon: the audit's
            return []
        records = sorted(self.records[part][off], key=lambda i: (not is_canary(i), i if is_canary(i) else ()))
        decider = deciding_record(records)
        promise = UNKNOWN
        if decider is not None:
            cls = self.class_of((decider[0], decider[1]))
            if cls is None:
                if (key, off) not in self.parked:
                    self.parked.append((key, off))
                return []
            promise = cls.read
        seen.add(off)
        detail = "records read here: " + ", ".join(map(str, records))
        return [Violation(Invariant.INCONSISTENT_OFFSET, key.iso, key.topic_id, key.partition, (off,), detail=detail,
                          durability=promise.durability, reason=promise.reason)]

    def judge_parked(self) -> list[Violation]:
        parked, self.parked = self.parked, []
        return [v for key, off in parked for v in self._flag(key, off)]

    def forget(self, key: ViewKey, v: PartitionView) -> None:
        cut = v.forgotten_below
        part = (key.topic_id, key.partition)
        flagged = self.flagged.get(key)
        if flagged:
            self.flagged[key] = {o for o in flagged if o >= cut}
        self.parked = [(k, o) for k, o in self.parked if k != key or o >= cut]
        for table in (self.records, self.readers):
            offs = table.get(part)
            if offs and min(offs) < cut:
                table[part] = {o: x for o, x in offs.items() if o >= cut}
        done = self.rewritten.get(part)
        if done:
            self.rewritten[part] = {o for o in done if o >= cut}

    def forget_topic(self, topic_id: str) -> None:
        """A topic ID that is gone: nothing of it is judged any more (its rewrite count stays)."""
        for table in (self.records, self.readers, self.rewritten):
            for part in [k for k in table if k[0] == topic_id]:
                del table[part]
        self.flagged = {k: v for k, v in self.flagged.items() if k.topic_id != topic_id}
        self.parked = [(k, o) for k, o in self.parked if k.topic_id != topic_id]

    def to_doc(self) -> dict[str, Any]:
        return {
            "records": [[tid, p, off, [list(i) for i in ids]] for (tid, p), offs in self.records.items()
                        for off, ids in offs.items()],
            "readers": [[tid, p, off, sorted(i.value for i in isos)] for (tid, p), offs in self.readers.items()
                        for off, isos in offs.items()],
            "flagged": [[k.to_doc(), sorted(offs)] for k, offs in self.flagged.items()],
            "parked": [[k.to_doc(), off] for k, off in self.parked],
            "rewritten": [[tid, p, sorted(offs)] for (tid, p), offs in self.rewritten.items()],
            "rewrites": [[tid, p, n] for (tid, p), n in self.rewrites.items()],
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any], class_of: Callable[[tuple[int, int]], WriteClass | None]
                 ) -> "OffsetsFamily":
        fam = cls(class_of)
        for tid, p, off, ids in doc["records"]:
            fam.records.setdefault((tid, p), {})[off] = {tuple(i) for i in ids}
        for tid, p, off, isos in doc["readers"]:
            fam.readers.setdefault((tid, p), {})[off] = {Isolation(i) for i in isos}
        fam.flagged = {ViewKey.from_doc(k): set(offs) for k, offs in doc["flagged"]}
        fam.parked = [(ViewKey.from_doc(k), off) for k, off in doc["parked"]]
        fam.rewritten = {(tid, p): set(offs) for tid, p, offs in doc["rewritten"]}
        fam.rewrites = Counter({(tid, p): n for tid, p, n in doc["rewrites"]})
        return fam
