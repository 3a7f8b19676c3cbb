"""A simulated cluster whose logs change under the readers, for the checker's property tests.

:class:`Sim` keeps one log per partition, a ledger, and two readers (read_committed and
read_uncommitted) that read micro-batches from the log *as it is when they read* — so a log that
is truncated and rewritten after they read it shows them new records at old offsets, as a
truncated leader does. It plays every part the runtime plays around the checker: Spark's reads
(resuming lower when the log end falls below a reader's position, if asked to), the ledger's
delivery, the prober (log start, a log end that went backwards), the re-fetches the checker asks
for, and monitor restarts. Steps interleave at random.

It also keeps the truth the tests hold the checker against, independently of it: what each reader
read at each offset over time (the recorder), and which records it knew to be acknowledged where.

The topic can be recreated under its name (:meth:`Sim.recreate`): a new topic ID with empty logs,
which the writers notice (a ``start`` that ``replaces`` the old ID) or not, and the prober sees
(:meth:`Checker.note_topic`). Readers read by *name*, as Spark does.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from invariants.catalog import Invariant, Isolation
from invariants.checker import Checker
from invariants.ledger_format import (
    Body, Checkpoint, Intent, LedgerEntry, OutcomeRun, Outcomes, Start, Stop, TopicSettings,
    WriteOutcome, WriteRange, WriterRef, WriterSettings,
)
from invariants.model import Read, Settings, in_runs

RC, RU = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED
READERS = (RC, RU)
TOPIC = "t-0001"
DURABLE = TopicSettings(3, 2, False)
UNCLEAN = TopicSettings(3, 1, True)


@dataclass
class Slot:
    ident: tuple  # (writer_id, inc, seq)
    intent_at: int = 0  # how much of the ledger existed once its intent was written


class SimWriter:
    ids = itertools.count(1)

    def __init__(self, sim: "Sim", topic_settings: TopicSettings = DURABLE) -> None:
        self.sim = sim
        self.wid = next(self.ids) * 104_729
        self.n = 0
        self.seq: Counter[int] = Counter()
        self.topic_settings = topic_settings
        self.settings = WriterSettings(f"w{self.wid}")
        self.tid = sim.tid
        self.entry(Start(TOPIC, sim.tid, sim.partitions, self.settings, topic_settings))
        sim.writers.append(self)

    def entry(self, body: Body) -> None:
        self.sim.ledger.append(LedgerEntry(WriterRef(f"w{self.wid}", self.wid, 1), self.n, 1000 + self.n, body))
        self.n += 1

    def write(self, p: int, k: int) -> list[tuple[tuple, int]]:
        """k records appended to partition p, acked where they landed: [(ident, offset)]."""
        first = self.seq[p]
        self.seq[p] += k
        self.entry(Intent(self.tid, (WriteRange(p, first, k),)))
        log = self.sim.logs[p]
        offs = []
        for s in range(first, first + k):
            offs.append(len(log))
            log.append(Slot((self.wid, 1, s), len(self.sim.ledger)))
        self.entry(Outcomes(self.tid, (OutcomeRun(p, first, k, WriteOutcome.ACKED, offs[0], 1, 2),)))
        self.sim.acked.append((self.tid, p, offs[0], k))
        return [((self.wid, 1, first + i), o) for i, o in enumerate(offs)]

    def notice(self) -> None:
        """The writer finds its topic recreated and carries on there (with growing seqs)."""
        if self.tid != self.sim.tid:
            old, self.tid = self.tid, self.sim.tid
            self.entry(Start(TOPIC, self.tid, self.sim.partitions, self.settings, self.topic_settings, old))

    def checkpoint(self) -> None:
        starts = tuple(self.sim.log_start[p] for p in range(self.sim.partitions)) if self.tid == self.sim.tid else ()
        self.entry(Checkpoint(TOPIC, self.tid, self.sim.partitions, self.settings, self.topic_settings,
                              log_starts=starts))

    def stop(self) -> None:
        self.entry(Stop())


@dataclass
class Sim:
    partitions: int
    rng: random.Random
    settings: Settings = field(default_factory=lambda: Settings(settle_offsets=4, horizon_offsets=1_000_000))
    resume_lower: bool = False
    restart_p: float = 0.1
    # a batch holds the intent of every record it holds (Spark plans the ledger source after the
    # canary's, and an intent is durable before its send); else the ledger may lag at random
    intents_first: bool = False
    logs: dict[int, list[Slot | None]] = field(default_factory=dict)
    log_start: dict[int, int] = field(default_factory=dict)
    ledger: list[LedgerEntry] = field(default_factory=list)
    delivered: int = 0
    pos: dict[tuple, int] = field(default_factory=dict)
    seen_end: dict[int, int] = field(default_factory=dict)
    observed: dict[tuple, set] = field(default_factory=dict)  # (iso, p, offset) -> records read there
    checker: Checker = None  # type: ignore[assignment]
    tid: str = TOPIC  # the topic ID the name has now
    writers: list = field(default_factory=list)
    acked: list = field(default_factory=list)  # (topic id, partition, first offset, count) of every ack
    generations: int = 0
    seen_change_at: int = 0  # how much of the ledger existed when the runtime last looked the topic up
    violations: list = field(default_factory=list)  # every verdict the checker returned
    # Spark's consumer keeps what it fetched past a micro-batch's end and serves the next batch of
    # the reader from it when that batch starts there: records fetched before the log changed
    prefetch: bool = False
    fetched: dict = field(default_factory=dict)  # (iso, p) -> (first offset, [ident or None, ...])
    # reads still to be served from the log the topic had before its last recreation (an executor
    # whose client still holds the old ID, fetching from a broker that has not deleted it yet)
    old_log_reads: int = 0
    old_logs: dict = field(default_factory=dict)
    old_log_start: dict = field(default_factory=dict)
    served_old: int = 0
    # reads handed over as the executors send them, plain stretches as runs (None: for half the
    # seeds, decided without drawing from the simulation's random numbers)
    runs: bool | None = None
    # the watch reads directly what Spark skipped below its first read of a recreated topic
    # (TopicLifecycle._fill_below), served like a re-fetch (the old log too, while old_log_reads last)
    fill: bool = False
    filled: int = 0

    def __post_init__(self) -> None:
        if self.runs is None:
            self.runs = sum(self.rng.getstate()[1][:8]) % 2 == 0
        self.logs = {p: [] for p in range(self.partitions)}
        self.log_start = {p: 0 for p in range(self.partitions)}
        self.pos = {(iso, p): 0 for iso in READERS for p in range(self.partitions)}
        self.seen_end = {p: 0 for p in range(self.partitions)}
        self.checker = Checker(self.settings, [TOPIC])

    # -- what the runtime does around the checker ----------------------------------------

    def read(self, iso: Isolation, p: int, k: int) -> None:
        """One Spark micro-batch of one reader and partition."""
        log, at = self.logs[p], max(self.pos[(iso, p)], self.log_start[p])
        if at > len(log):
            if not self.resume_lower:
                return  # Spark waits for the log to grow past its position
            at = len(log)  # the end fell below its position at planning: the next batch starts lower
        end = min(at + k, len(log))
        reads = [Read(o, log[o].ident) for o in range(at, end) if log[o] is not None]
        if self.prefetch:
            reads = self._prefetched(iso, p, at, end, reads)
        self.pos[(iso, p)] = end
        if reads and self.intents_first:
            self.deliver(max(log[o].intent_at for o in range(at, end) if log[o] is not None) - self.delivered)
        batch = reads
        if self._serve_old(p, at, end):
            # the range planned on the new log, fetched from the old one up to some offset (at most
            # the old log's end), the rest from the new one once the client learnt the new ID
            self.old_log_reads -= 1
            self.served_old += 1
            old = self.old_logs[p]
            cut = min(self.rng.randint(at + 1, end), len(old))
            reads = [r for r in reads if r.offset >= cut]
            batch = [Read(o, old[o].ident) for o in range(at, cut) if old[o] is not None] + reads
        if batch:
            self._observe(iso, p, reads)
            batch = in_runs(batch) if self.runs else batch
            fill = self._fill if self.fill else None
            if not self.checker.apply_named_reads(iso, TOPIC, p, batch, self.describe, fill):
                self.checker.note_topic(TOPIC, self.describe(TOPIC))  # a name it knows nothing of
                assert self.checker.apply_named_reads(iso, TOPIC, p, batch, self.describe, fill)

    def _fill(self, iso: Isolation, _name: str, tid: str, p: int, lo: int, hi: int) -> list[Read] | None:
        """The watch's direct read of ``[lo, hi)`` below a reader's first read (None: the name
        points at another ID now)."""
        if tid != self.tid:
            return None
        log = self.logs[p]
        lo, hi = max(lo, self.log_start[p]), min(hi, len(log))
        reads = [Read(o, log[o].ident) for o in range(lo, hi) if log[o] is not None]
        if lo < hi and self._serve_old(p, lo, hi):  # the old log up to some offset, the new one after it
            self.old_log_reads -= 1
            self.served_old += 1
            old = self.old_logs[p]
            cut = min(self.rng.randint(lo + 1, hi), len(old))
            return [Read(o, old[o].ident) for o in range(lo, cut) if old[o] is not None] + \
                [r for r in reads if r.offset >= cut]
        self._observe(iso, p, reads)
        self.filled += 1
        return reads

    def _prefetched(self, iso: Isolation, p: int, at: int, end: int, reads: list[Read]) -> list[Read]:
        """Spark's fetched data: a batch starting where the last one ended is served first from what
        was fetched then (however the log changed since), the rest from the log; what the fetch
        returned past the batch's end is kept for the next one."""
        first, held = self.fetched.pop((iso, p), (None, []))
        if first != at:
            held = []
        stale = [Read(o, held[o - at]) for o in range(at, min(end, at + len(held))) if held[o - at] is not None]
        reads = stale + [r for r in reads if r.offset >= at + len(held)]
        rest = held[end - at:] or [None if s is None else s.ident for s in self.logs[p][end:]]
        if rest:
            self.fetched[(iso, p)] = (end, rest)
        return reads

    def _serve_old(self, p: int, lo: int, hi: int) -> bool:
        """Whether [lo, hi) of the new log is fetched from the old one (up to some offset): at
        random while ``old_log_reads`` lasts, where the old log holds [lo, lo + 1) (below its log
        start a fetch fails rather than returning nothing)."""
        old = self.old_logs.get(p, [])
        return bool(self.old_log_reads and self.rng.random() < 0.5
                    and self.old_log_start.get(p, 0) <= lo < min(hi, len(old)) and old[lo] is not None)

    def deliver(self, k: int) -> None:
        """Ledger entries reach the checker; once every entry written before the runtime last saw
        the topic change has, a new micro-batch begins (Spark's next batch holds them all)."""
        if k <= 0:
            return
        chunk = self.ledger[self.delivered:self.delivered + k]
        self.delivered += len(chunk)
        if self.delivered >= self.seen_change_at:
            self.checker.begin_batch()
        self.checker.apply_ledger(chunk)

    def describe(self, _name: str) -> str:
        """The runtime's metadata lookup of the topic's ID now."""
        self.seen_change_at = len(self.ledger)
        return self.tid

    def probe(self) -> None:
        """The prober: the topic's ID now, log starts, and log ends seen going backwards."""
        self.checker.note_topic(TOPIC, self.describe(TOPIC))
        for p in range(self.partitions):
            end = len(self.logs[p])
            if end < self.seen_end[p]:
                self.checker.log_went_back(self.tid, p, end, self.seen_end[p])
            self.seen_end[p] = end
            if self.log_start[p]:
                self.checker.set_log_start(self.tid, p, self.log_start[p])

    def recreate(self, writers_notice: bool = True) -> str:
        """The topic is deleted and created again under its name: a new ID, empty logs."""
        old = self.tid
        self.generations += 1
        self.tid = f"{TOPIC}-g{self.generations}"
        self.old_logs, self.old_log_start = self.logs, self.log_start
        self.logs = {p: [] for p in range(self.partitions)}
        self.log_start = {p: 0 for p in range(self.partitions)}
        self.seen_end = {p: 0 for p in range(self.partitions)}
        if writers_notice:
            for w in self.writers:
                w.notice()
        return old

    def refetch(self) -> None:
        for w in self.checker.refetch_wanted():
            if w.topic_id != self.tid:
                continue  # a topic that is gone cannot be read again
            log = self.logs[w.partition]
            hi = min(w.hi, len(log))
            lo = max(w.lo, self.log_start[w.partition])
            if lo >= hi:
                continue
            old = self.old_logs.get(w.partition, [])
            for iso in READERS:
                reads = [Read(o, log[o].ident) for o in range(lo, hi) if log[o] is not None]
                if self._serve_old(w.partition, lo, hi):
                    self.old_log_reads -= 1  # the old log up to some offset, the new one after it
                    self.served_old += 1
                    cut = min(self.rng.randint(lo + 1, hi), len(old))
                    stale = [Read(o, old[o].ident) for o in range(lo, cut) if old[o] is not None]
                    self.checker.apply_refetched(iso, self.tid, w.partition, stale + [r for r in reads if r.offset >= cut],
                                                 (lo, hi))
                    continue
                self._observe(iso, w.partition, reads)
                self.checker.apply_refetched(iso, self.tid, w.partition, reads, (lo, hi))

    def settle(self) -> None:
        self.violations.extend(self.checker.settle())

    def restart(self) -> None:
        self.checker = Checker.from_doc(json.loads(json.dumps(self.checker.to_doc())), self.settings)

    def _observe(self, iso: Isolation, p: int, reads: list[Read]) -> None:
        for r in reads:
            self.observed.setdefault((iso, p, r.offset), set()).add(r.ident)

    def step(self) -> None:
        """One random step of the runtime."""
        roll = self.rng.random()
        if roll < 0.45:
            self.read(self.rng.choice(READERS), self.rng.randrange(self.partitions), self.rng.randint(1, 8))
        elif roll < 0.75:
            self.deliver(self.rng.randint(1, 4))
        elif roll < 0.85:
            self.probe()
        else:
            self.refetch()
        self.settle()
        if self.rng.random() < self.restart_p:
            self.restart()

    def drive(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def catch_up(self) -> None:
        """Every reader reads to the end of every partition (as the run's end does)."""
        for p in range(self.partitions):
            for iso in READERS:
                while self.pos[(iso, p)] < len(self.logs[p]) or (self.resume_lower and
                                                                  self.pos[(iso, p)] > len(self.logs[p])):
                    self.read(iso, p, 8)
                    self.settle()

    def finish(self) -> None:
        """Everything delivered, read, probed and re-fetched until the checker asks for nothing."""
        self.deliver(len(self.ledger))
        self.catch_up()
        self.probe()
        self.checker.begin_batch()  # the next (empty) batch: everything was delivered
        for _ in range(20):
            self.settle()
            if not self.checker.refetch_wanted():
                break
            self.refetch()
        self.settle()

    # -- the truth -------------------------------------------------------------------------

    def final_reads(self, iso: Isolation) -> dict[tuple[str, int], list[tuple[int, Any, int]]]:
        """What a reader of the final log returns (the audit's input)."""
        return {(self.tid, p): [(o, s.ident, 0) for o, s in enumerate(log) if s is not None and o >= self.log_start[p]]
                for p, log in self.logs.items()}

    def inconsistent_truth(self) -> Counter:
        """Per reader, offsets read holding two different records: every record any reader read at an
        offset over the run (the recorder), plus what the final log holds there, which a correct
        checker must have read by the end; each reader that read a record there counts it."""
        out: Counter = Counter()
        for p, log in self.logs.items():
            offsets = {o for (_i, q, o) in self.observed if q == p}
            for o in offsets:
                final = log[o].ident if o < len(log) and log[o] is not None else None
                records = set().union(*(self.observed.get((iso, p, o), set()) for iso in READERS))
                if final is not None:
                    records.add(final)
                if len(records) < 2:
                    continue
                for iso in READERS:
                    if self.observed.get((iso, p, o)) or (final is not None and o < len(log)):
                        out[(Invariant.INCONSISTENT_OFFSET, iso)] += 1
        return out
