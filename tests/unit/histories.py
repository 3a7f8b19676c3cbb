"""Histories for the checker tests: a log per partition, what each reader returned, the
ledger, and the anomalies injected on purpose (the expected violations).

Each incident is written by its own fresh writer (like a drill), between honest background
records, so its expected effect is exact and independent of the others.
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
from invariants.doc_runs import computed_afresh
from invariants.ledger_format import (
    Body, Intent, LedgerEntry, OutcomeRun, Outcomes, Start, Stop, TxnEnd, TxnInfo, TxnOutcome, WriteOutcome,
    WriteRange, WriterRef, WriterSettings, TopicSettings,
)
from invariants.model import Durability, Read, Settings, in_runs

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE
TOPIC = "t-0001"
DURABLE = TopicSettings(replication_factor=3, min_insync_replicas=2, unclean_leader_election=False)
I = Invariant

EFFECTS: dict[str, dict[tuple[Invariant, Isolation], int]] = {
    "clean": {}, "clean_abort": {}, "unacked_writes": {}, "clean_commit": {}, "undecided_txn_visible": {},
    "partial_txn_undecided": {(I.PARTIAL_TXN, RC): 1},
    "lost_write_outside_window": {(I.LOST_WRITE, RC): 1, (I.LOST_WRITE, RU): 1},
    "lost_write_in_run": {(I.LOST_WRITE, RC): 1, (I.LOST_WRITE, RU): 1},
    "aborted_read_unacked": {(I.ABORTED_READ, RC): 2}, "clean_abort_landed_late": {}, "zombie_writer_ignored": {},
    "lost_write": {(I.LOST_WRITE, RC): 1, (I.LOST_WRITE, RU): 1},
    "lost_write_truncated": {(I.LOST_WRITE, RC): 1, (I.LOST_WRITE, RU): 1},
    "duplicate": {(I.DUPLICATE, RC): 1, (I.DUPLICATE, RU): 1},
    "reorder": {(I.REORDER, RC): 1, (I.REORDER, RU): 1},
    "zero_offset": {(I.ZERO_OFFSET, RC): 1, (I.ZERO_OFFSET, RU): 1, (I.OFFSET_MISMATCH, RC): 1, (I.OFFSET_MISMATCH, RU): 1},
    "offset_mismatch": {(I.OFFSET_MISMATCH, RC): 1, (I.OFFSET_MISMATCH, RU): 1},
    "zero_offset_below_log_start": {(I.ZERO_OFFSET, RC): 1, (I.ZERO_OFFSET, RU): 1},
    "offset_below_log_start": {(I.OFFSET_MISMATCH, RC): 2, (I.OFFSET_MISMATCH, RU): 2},
    "inconsistent_offset": {(I.INCONSISTENT_OFFSET, RC): 1, (I.INCONSISTENT_OFFSET, RU): 1},
    "aborted_read": {(I.ABORTED_READ, RC): 2},
    "aborted_read_abort_unreturned": {(I.ABORTED_READ, RC): 2},
    "intended_abort_without_ledger": {},
    "partial_txn_unwritten": {(I.PARTIAL_TXN, RC): 1},
    "partial_txn_torn": {(I.PARTIAL_TXN, RC): 1, (I.LOST_WRITE, RC): 1},
    "outcome_gap": {(I.OUTCOME_GAP, NONE): 2},
    "txn_across_partitions": {},
    "partial_txn_across_partitions": {(I.PARTIAL_TXN, RC): 1, (I.LOST_WRITE, RC): 1},
    "interleaved_writers": {},
    "retry_duplicate_acked_second": {(I.DUPLICATE, RC): 1, (I.DUPLICATE, RU): 1},
    "acks0_writes": {},
    "partial_txn_torn_by_headers": {(I.PARTIAL_TXN, RC): 1},
    "whole_txn_by_headers": {},
    "g0_write_cycle": {(I.G0_WRITE_CYCLE, RC): 1},
    "concurrent_txns_in_order": {},
    # incidents a whole run long (the executors send runs: a run must never hide one)
    "duplicate_run": {(I.DUPLICATE, RC): 3, (I.DUPLICATE, RU): 3},
    "reorder_run": {(I.REORDER, RC): 3, (I.REORDER, RU): 3},
    "inconsistent_run": {(I.INCONSISTENT_OFFSET, RC): 3, (I.INCONSISTENT_OFFSET, RU): 3, (I.LOST_WRITE, RU): 3},
}
# The durability class of what each incident shows, when it is not ``guaranteed``: a
# non-idempotent writer's duplicate is allowed by its settings; two foreign records at one offset
# have no writer whose topic settings could class them.
CLASS_OF_INCIDENT = {"retry_duplicate_acked_second": Durability.AT_RISK, "inconsistent_offset": Durability.UNKNOWN,
                     "partial_txn_torn_by_headers": Durability.UNKNOWN,  # the ledger says nothing of it
                     "g0_write_cycle": Durability.AT_RISK}  # Kafka allows it
KINDS = tuple(EFFECTS)  # each incident is named after what it shows


@dataclass
class Slot:
    ident: Any
    txn_id: int = 0
    rc: bool = True  # visible to read_committed
    ru_ident: Any = None  # what read_uncommitted sees instead (inconsistent offsets)
    hole: bool = False  # offset taken but no reader returns it (truncated)
    abort: bool = False  # the header's intended-abort flag (its writer meant to abort the transaction)
    size: int = 0  # the header's transaction size and this record's index in it
    index: int = 0


class _Writer:
    ids = itertools.count(1)

    def __init__(self, history: "History", predecessor: "_Writer | None" = None,
                 settings: WriterSettings | None = None) -> None:
        self.h = history
        self.wid = predecessor.wid if predecessor else next(self.ids) * 7919
        self.inc = predecessor.inc + 1 if predecessor else 1
        self.n = 0
        self.seq: Counter[int] = Counter()
        self.settings = settings or WriterSettings(f"w{self.wid}")
        self.entry(Start(TOPIC, TOPIC, self.h.partitions, self.settings, DURABLE))

    def entry(self, body: Body, skip: int = 0) -> None:
        self.n += skip
        ref = WriterRef(f"w{self.wid}", self.wid, self.inc)
        self.h.ledger.append(LedgerEntry(ref, self.n, 1_000_000 + len(self.h.ledger), body))
        self.n += 1

    def seqs(self, p: int, k: int) -> list[int]:
        first = self.seq[p]
        self.seq[p] += k
        return list(range(first, first + k))

    def intent(self, p: int, seqs: list[int], txn: TxnInfo | None = None) -> None:
        writes: list[WriteRange] = []
        for s in seqs:  # contiguous seqs as one range, as the real writers record them
            if writes and writes[-1].first_seq + writes[-1].count == s:
                writes[-1] = WriteRange(p, writes[-1].first_seq, writes[-1].count + 1)
            else:
                writes.append(WriteRange(p, s, 1))
        self.entry(Intent(TOPIC, tuple(writes), txn))

    def outcomes(self, p: int, results: list[tuple[int, str, int]], listed: int = -1) -> None:
        """``listed``: the log start the writer listed after these acks (-1: none)."""
        runs: list[OutcomeRun] = []
        for s, outcome, off in results:  # run-length encoded like monitor.ledger.encode_runs
            last = runs[-1] if runs else None
            if (last and last.first_seq + last.count == s and last.outcome.value == outcome
                    and (off == last.first_offset + last.count if last.first_offset >= 0 else off == -1)):
                runs[-1] = OutcomeRun(p, last.first_seq, last.count + 1, last.outcome, last.first_offset, 1, 2,
                                      log_start_after=listed)
            else:
                runs.append(OutcomeRun(p, s, 1, WriteOutcome(outcome), off, 1, 2, log_start_after=listed))
        self.entry(Outcomes(TOPIC, tuple(runs)))

    def ident(self, seq: int) -> tuple[int, int, int]:
        return (self.wid, self.inc, seq)


@dataclass
class History:
    partitions: int
    settle: int = 4
    logs: dict[int, list[Slot]] = field(default_factory=dict)
    ledger: list[LedgerEntry] = field(default_factory=list)
    expected: Counter = field(default_factory=Counter)
    unconfirmed_missing: int = 0  # acks=0 writes that never landed, per reader
    foreign = itertools.count(1)

    def __post_init__(self) -> None:
        self.logs = {p: [] for p in range(self.partitions)}
        self.background = _Writer(self)

    def append(self, p: int, slot: Slot) -> int:
        self.logs[p].append(slot)
        return len(self.logs[p]) - 1

    def honest(self, w: _Writer, p: int, k: int = 1) -> list[tuple[int, int]]:
        seqs = w.seqs(p, k)
        w.intent(p, seqs)
        offs = [self.append(p, Slot(w.ident(s))) for s in seqs]
        w.outcomes(p, [(s, "acked", o) for s, o in zip(seqs, offs)])
        return list(zip(seqs, offs))

    # -- incidents -------------------------------------------------------------------------

    def incident(self, kind: str, p: int) -> None:
        if kind == "outcome_gap":
            w = _Writer(self)
            w.entry(Stop(), skip=2)
            self.expected.update(EFFECTS[kind])
            return
        w = _Writer(self)
        effects = getattr(self, f"_{kind}")(w, p)  # None: as EFFECTS says
        w.entry(Stop())
        self.expected.update(EFFECTS[kind] if effects is None else effects)

    def _clean(self, w: _Writer, p: int) -> None:
        self.honest(w, p, 3)

    def _txn_across_partitions(self, w: _Writer, p: int, rc_sees_second: bool = True) -> None:
        """A committed transaction with one write on this partition and one on the next."""
        q = (p + 1) % self.partitions
        (s0,), (s1,) = w.seqs(p, 1), w.seqs(q, 1)
        info = TxnInfo(1, 2, False)
        w.entry(Intent(TOPIC, (WriteRange(p, s0, 1), WriteRange(q, s1, 1)), info))
        o0 = self.append(p, Slot(w.ident(s0), txn_id=1))
        self.honest(self.background, q, 1)
        o1 = self.append(q, Slot(w.ident(s1), txn_id=1, rc=rc_sees_second))
        w.outcomes(p, [(s0, "acked", o0)])
        w.outcomes(q, [(s1, "acked", o1)])
        w.entry(TxnEnd(1, TxnOutcome.COMMITTED))

    def _partial_txn_across_partitions(self, w: _Writer, p: int) -> None:
        """As above, but read_committed never sees the second write (it is in the log, acked)."""
        self._txn_across_partitions(w, p, rc_sees_second=False)

    def _g0_write_cycle(self, w: _Writer, p: int, cycle: bool = True) -> dict | None:
        """Two writers' committed transactions open at once, each with a record on this partition
        and the next: the first is first here, and second (``cycle``) or first there too."""
        if self.partitions < 2:  # one partition orders them one way only: no cycle
            self._txn(w, p, 2, 2, 2, "committed")
            return {}
        q = (p + 1) % self.partitions
        v = _Writer(self)
        first, second = [((wr.seqs(p, 1)[0], wr.seqs(q, 1)[0]), wr) for wr in (w, v)]
        for (sp, sq), wr in (first, second):
            wr.entry(Intent(TOPIC, (WriteRange(p, sp, 1), WriteRange(q, sq, 1)), TxnInfo(1, 2, False)))
        offs: dict[tuple[int, int], int] = {}
        on_q = (second, first) if cycle else (first, second)
        for part, order, i in ((p, (first, second), 0), (q, on_q, 1)):
            for seqs, wr in order:
                offs[(wr.wid, part)] = self.append(part, Slot(wr.ident(seqs[i]), txn_id=1, size=2, index=i))
        for (sp, sq), wr in (first, second):
            wr.outcomes(p, [(sp, "acked", offs[(wr.wid, p)])])
            wr.outcomes(q, [(sq, "acked", offs[(wr.wid, q)])])
            wr.entry(TxnEnd(1, TxnOutcome.COMMITTED))
        v.entry(Stop())
        return None

    def _concurrent_txns_in_order(self, w: _Writer, p: int) -> dict | None:
        """As above, but in the same order on both partitions: no cycle."""
        self._g0_write_cycle(w, p, cycle=False)
        return {}

    def _interleaved_writers(self, w: _Writer, p: int) -> None:
        """Two writers' records alternating on one partition, each in its own seq order."""
        v = _Writer(self)
        for _ in range(3):
            self.honest(w, p, 1)
            self.honest(v, p, 1)
        v.entry(Stop())

    def _retry_duplicate_acked_second(self, w: _Writer, p: int) -> None:
        """A non-idempotent writer's retry: the record landed twice, the ack names the second copy."""
        w = _Writer(self, settings=WriterSettings(f"w{w.wid}-acks1", acks="1", idempotence=False))
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        self.append(p, Slot(w.ident(s)))
        self.honest(self.background, p, 1)
        second = self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", second)])
        w.entry(Stop())

    def _acks0_writes(self, w: _Writer, p: int) -> None:
        """An acks=0 writer: nothing it writes is ever expected, whether it landed or not."""
        w = _Writer(self, settings=WriterSettings(f"w{w.wid}-acks0", acks="0", idempotence=False))
        seqs = w.seqs(p, 2 + self.settle)
        w.intent(p, seqs)
        for s in seqs:
            if s != seqs[1]:  # seqs[1] never landed: missing once seq 1 + H was read
                self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "unconfirmed", -1) for s in seqs])
        w.entry(Stop())
        self.unconfirmed_missing += 1

    def _lost_write(self, w: _Writer, p: int) -> None:
        (_s, cover), = self.honest(w, p)
        (lie,) = w.seqs(p, 1)
        w.intent(p, [lie])
        w.outcomes(p, [(lie, "acked", cover)])

    def _lost_write_truncated(self, w: _Writer, p: int) -> None:
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        off = self.append(p, Slot(w.ident(s), hole=True))
        w.outcomes(p, [(s, "acked", off)])

    def _lost_write_in_run(self, w: _Writer, p: int) -> None:
        """Eight writes announced in two intents, acked as one run; the seventh never reaches a reader."""
        seqs = w.seqs(p, 8)
        w.intent(p, seqs[:3])
        w.intent(p, seqs[3:])
        offs = [self.append(p, Slot(w.ident(s), hole=i == 6)) for i, s in enumerate(seqs)]
        w.outcomes(p, [(s, "acked", o) for s, o in zip(seqs, offs)])

    def _aborted_read_unacked(self, w: _Writer, p: int) -> None:
        """An aborted transaction whose writes timed out (indeterminate) yet read_committed sees them."""
        self._txn(w, p, 2, 0, 0, "aborted")
        for s in range(w.seq[p] - 2, w.seq[p]):
            self.honest(self.background, p, 1)
            self.append(p, Slot(w.ident(s), txn_id=1, rc=True))

    def _clean_abort_landed_late(self, w: _Writer, p: int) -> None:
        """An honest abort: one write acked, one timed out but landed, both only read_uncommitted."""
        s0, s1 = w.seqs(p, 2)
        w.intent(p, [s0, s1], TxnInfo(1, 2, True))
        o0 = self.append(p, Slot(w.ident(s0), txn_id=1, rc=False))
        self.honest(self.background, p, 2)
        self.append(p, Slot(w.ident(s1), txn_id=1, rc=False))
        w.outcomes(p, [(s0, "acked", o0), (s1, "indeterminate", -1)])
        w.entry(TxnEnd(1, TxnOutcome.ABORTED))

    def _zombie_writer_ignored(self, w: _Writer, p: int) -> None:
        """A predecessor's outcomes and abort land after its successor started: ignored."""
        seqs = w.seqs(p, 2)
        w.intent(p, seqs, TxnInfo(1, 2, True))
        offs = [self.append(p, Slot(w.ident(s), txn_id=1, rc=False)) for s in seqs]
        successor = _Writer(self, w)
        w.outcomes(p, [(s, "acked", o) for s, o in zip(seqs, offs)])
        w.entry(TxnEnd(1, TxnOutcome.ABORTED))
        successor.entry(Stop())

    def _duplicate(self, w: _Writer, p: int) -> None:
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        first = self.append(p, Slot(w.ident(s)))
        self.honest(self.background, p)
        self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", first)])

    def _reorder(self, w: _Writer, p: int) -> None:
        s, s1 = w.seqs(p, 2)
        w.intent(p, [s, s1])
        late = self.append(p, Slot(w.ident(s1)))
        early = self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", early), (s1, "acked", late)])

    def _duplicate_run(self, w: _Writer, p: int) -> None:
        """Three writes acked at consecutive offsets, the same three records again right after."""
        seqs = w.seqs(p, 3)
        w.intent(p, seqs)
        offs = [self.append(p, Slot(w.ident(s))) for s in seqs]
        for s in seqs:
            self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", o) for s, o in zip(seqs, offs)])

    def _reorder_run(self, w: _Writer, p: int) -> None:
        """Six writes in order of seq, the last three landed before the first three."""
        seqs = w.seqs(p, 6)
        w.intent(p, seqs)
        offs = {s: self.append(p, Slot(w.ident(s))) for s in seqs[3:] + seqs[:3]}
        w.outcomes(p, [(s, "acked", offs[s]) for s in seqs])

    def _inconsistent_run(self, w: _Writer, p: int) -> None:
        """Three writes acked at consecutive offsets where read_committed reads them and
        read_uncommitted reads another writer's three (announced, never acknowledged) instead."""
        v = _Writer(self)
        seqs, others = w.seqs(p, 3), v.seqs(p, 3)
        w.intent(p, seqs)
        v.intent(p, others)
        offs = [self.append(p, Slot(w.ident(s), ru_ident=v.ident(o))) for s, o in zip(seqs, others)]
        w.outcomes(p, [(s, "acked", o) for s, o in zip(seqs, offs)])
        v.entry(Stop())

    def _zero_offset(self, w: _Writer, p: int) -> None:
        self.honest(self.background, p, 7)  # more than one read chunk between offset 0 and it
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", 0)])

    def _zero_offset_below_log_start(self, w: _Writer, p: int) -> None:
        """Acked at 0 while the log start listed right after the ack was higher (retention had
        deleted offset 0): bogus at once, wherever the record is and whatever offset 0 held."""
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        at = self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", 0)], listed=at)

    def _offset_below_log_start(self, w: _Writer, p: int) -> None:
        """Two acks at an early offset, both below the log start listed after them: bogus; an honest
        ack of the same run above it is judged as usual."""
        self.honest(self.background, p, 3)
        s, s1, s2 = w.seqs(p, 3)
        w.intent(p, [s, s1, s2])
        for x in (s, s1):
            self.append(p, Slot(w.ident(x)))
        at = self.append(p, Slot(w.ident(s2)))
        w.outcomes(p, [(s, "acked", at - 2), (s1, "acked", at - 1), (s2, "acked", at)], listed=at)

    def _offset_mismatch(self, w: _Writer, p: int) -> None:
        (_c, cover), = self.honest(w, p)
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", cover)])

    def _lost_write_outside_window(self, w: _Writer, p: int) -> None:
        """Acked at o, but the record sits at o + settle: just outside the settle window."""
        (_c, cover), = self.honest(w, p)
        (s,) = w.seqs(p, 1)
        w.intent(p, [s])
        self.honest(self.background, p, self.settle - 1)
        self.append(p, Slot(w.ident(s)))
        w.outcomes(p, [(s, "acked", cover)])

    def _inconsistent_offset(self, w: _Writer, p: int) -> None:
        self.append(p, Slot(("x", next(self.foreign)), ru_ident=("x", next(self.foreign))))

    def _txn(self, w: _Writer, p: int, size: int, written: int, rc_visible: int, recorded: str,
             phantom_outcome: str = "indeterminate", meant_to_abort: bool = False) -> None:
        seqs = w.seqs(p, size)
        meant = recorded == "aborted" or meant_to_abort
        w.intent(p, seqs, TxnInfo(1, size, meant))
        offs = [self.append(p, Slot(w.ident(s), txn_id=1, rc=i < rc_visible, abort=meant))
                for i, s in enumerate(seqs[:written])]
        results = [(s, "acked", o) for s, o in zip(seqs, offs)]
        results += [(s, phantom_outcome, -1) for s in seqs[written:]]
        w.outcomes(p, results)
        w.entry(TxnEnd(1, TxnOutcome(recorded)))

    def _aborted_read(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 2, 2, 2, "aborted")

    def _aborted_read_abort_unreturned(self, w: _Writer, p: int) -> None:
        """The writer meant to abort (its records say so), the abort call never returned
        (indeterminate), and read_committed sees the records: aborted_read by the header alone."""
        self._txn(w, p, 2, 2, 2, "indeterminate", meant_to_abort=True)

    def _intended_abort_without_ledger(self, w: _Writer, p: int) -> None:
        """Records flagged intended-abort read by read_committed, of a transaction the ledger says
        nothing of (no intent, no outcome: a ledger read from the middle): not judged, its class
        is not known."""
        for s in w.seqs(p, 2):
            self.append(p, Slot(w.ident(s), txn_id=7, abort=True))

    def _clean_abort(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 3, 3, 0, "aborted")

    def _partial_txn_unwritten(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 2, 1, 1, "committed")

    def _partial_txn_torn(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 2, 2, 1, "committed")

    def _clean_commit(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 3, 3, 3, "committed")

    def _undecided_txn_visible(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 2, 2, 2, "indeterminate")

    def _partial_txn_undecided(self, w: _Writer, p: int) -> None:
        self._txn(w, p, 3, 3, 1, "indeterminate")

    def _txn_by_headers(self, w: _Writer, p: int, rc_sees_all: bool) -> None:
        """Transactions 1 and 3 (intents, committed, one record on every partition) around
        transaction 2, of which the ledger holds nothing (read from the middle, as it were): one
        record on every partition and one more on this one, the last hidden from read_committed
        unless ``rc_sees_all``. Only its records' headers tell its size."""
        parts = range(self.partitions)

        def committed(txn_id: int) -> None:
            seqs = {q: w.seqs(q, 1)[0] for q in parts}
            w.entry(Intent(TOPIC, tuple(WriteRange(q, seqs[q], 1) for q in parts), TxnInfo(txn_id, len(seqs), False)))
            for q in parts:
                off = self.append(q, Slot(w.ident(seqs[q]), txn_id=txn_id, size=len(seqs), index=q))
                w.outcomes(q, [(seqs[q], "acked", off)])
            w.entry(TxnEnd(txn_id, TxnOutcome.COMMITTED))

        committed(1)
        size = self.partitions + 1
        for i, q in enumerate([*parts, p]):
            (seq,) = w.seqs(q, 1)
            self.append(q, Slot(w.ident(seq), txn_id=2, size=size, index=i, rc=rc_sees_all or i < size - 1))
        committed(3)

    def _partial_txn_torn_by_headers(self, w: _Writer, p: int) -> None:
        self._txn_by_headers(w, p, rc_sees_all=False)

    def _whole_txn_by_headers(self, w: _Writer, p: int) -> None:
        self._txn_by_headers(w, p, rc_sees_all=True)

    def _unacked_writes(self, w: _Writer, p: int) -> None:
        seqs = w.seqs(p, 2)
        w.intent(p, seqs)
        self.append(p, Slot(w.ident(seqs[0])))
        w.outcomes(p, [(seqs[0], "indeterminate", -1), (seqs[1], "failed", -1)])

    # -- what readers return ---------------------------------------------------------------

    def reads(self, iso: Isolation, p: int) -> list[Read]:
        out = []
        for off, slot in enumerate(self.logs[p]):
            if slot.hole or (iso is RC and not slot.rc):
                continue
            ident = slot.ru_ident if iso is RU and slot.ru_ident is not None else slot.ident
            out.append(Read(off, ident, slot.txn_id, slot.abort, slot.size, slot.index))
        return out


def build(partitions: int, incidents: list[tuple[str, int]], settle: int, rng: random.Random,
          background: int = 2) -> History:
    """``background``: at most that many honest records before each incident (0 to it, at random)."""
    h = History(partitions, settle)
    for p in range(partitions):
        h.honest(h.background, p)  # offset 0 of every partition: an honest record
    for kind, p in incidents:
        h.honest(h.background, p % partitions, rng.randint(0, background))
        h.incident(kind, p % partitions)
    for p in range(partitions):
        h.honest(h.background, p, settle + 1)  # read past everything
    h.background.entry(Stop())
    return h


def save(checker: Checker) -> dict:
    """The checker's durable document, as the watch saves it after every batch: what the save kept
    of the saves before must give exactly the document computed afresh."""
    doc = checker.to_doc()
    with computed_afresh():
        assert doc == checker.to_doc()
    return doc


def restart(checker: Checker, settings: Settings) -> Checker:
    """A monitor restart: the checker saved as its durable document (through JSON) and loaded again."""
    return Checker.from_doc(json.loads(json.dumps(save(checker))), settings)


def run_live(h: History, settings: Settings, rng: random.Random, restart_p: float = 0.2,
             order: str = "random", checker: Checker | None = None, found: list | None = None,
             batches: int | None = None, runs: bool = False, trace: list | None = None,
             chunk: int = 6) -> Checker:
    """Feed the history in random micro-batches, restarting the checker from its saved document at
    random boundaries.

    ``order``: ``random`` interleaves ledger and reads; ``ledger_first`` / ``reads_first``
    deliver all of one before any of the other (outcomes known early / arriving late).
    ``checker``: start from this one (default: a new one); ``found``: collects every violation
    reported, as the watch's evidence does; ``batches``: stop after that many (the rest unread).
    ``runs``: each batch's reads of a partition handed over as the executors send them, plain
    stretches as runs (:func:`invariants.model.in_runs`; the same random choices either way);
    ``trace``: collects the checker's document after every batch; ``chunk``: at most that many
    items of a stream per batch.
    """
    found = [] if found is None else found
    streams: list[tuple[str, Any, list]] = [("ledger", None, list(h.ledger))]
    for iso in (RC, RU):
        for p in range(h.partitions):
            streams.append(("reads", (iso, p), h.reads(iso, p)))
    checker = Checker(settings) if checker is None else checker
    if order != "random":
        first = [s for s in streams if (s[0] == "ledger") == (order == "ledger_first")]
        streams = first + [s for s in streams if s not in first]
    done = 0
    while any(s[2] for s in streams):
        if batches is not None and done >= batches:
            return checker
        done += 1
        live = [s for s in streams if s[2]]
        batch = rng.sample(live, len(live)) if order == "random" else live[:1]
        for kind, key, items in batch:
            if not items:
                continue
            k = rng.randint(0, min(len(items), chunk))
            part, items[:] = items[:k], items[k:]
            if kind == "ledger":
                checker.apply_ledger(part)
            else:
                checker.apply_reads(key[0], TOPIC, key[1], in_runs(part) if runs else part)
        found.extend(checker.settle())
        if trace is not None:
            trace.append(checker.to_doc())
        if rng.random() < 0.5:  # the runtime answers re-fetch requests after some batches
            answer_refetches(checker, h.reads, rounds=1, found=found)
        if rng.random() < restart_p:
            checker = restart(checker, settings)
        elif rng.random() < 0.5:
            save(checker)
    found.extend(checker.settle())
    answer_refetches(checker, h.reads, found=found)
    return checker


def answer_refetches(ck: Checker, log: Any, rounds: int = 5, found: list | None = None) -> None:
    """What the runtime does: read again, directly, what the checker asks for (here: from ``log(iso, p)``)."""
    for _ in range(rounds):
        wanted = ck.refetch_wanted()
        if not wanted:
            return
        for w in wanted:
            for iso in (RC, RU):
                reads = [r for r in log(iso, w.partition) if w.lo <= r.offset < w.hi]
                ck.apply_reads(iso, w.topic_id, w.partition, reads, covered=(w.lo, w.hi))
        new = ck.settle()
        if found is not None:
            found.extend(new)


def audit_input(h: History) -> dict:
    return {iso: {(TOPIC, p): [(r.offset, r.ident, r.txn_id, r.intended_abort, r.txn_size, r.txn_index)
                               for r in h.reads(iso, p)]
                  for p in range(h.partitions)}
            for iso in (RC, RU)}
