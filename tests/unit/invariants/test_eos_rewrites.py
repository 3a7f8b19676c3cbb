"""The EOS rules on a rewritten source partition, over generated histories: the old log, a rewrite
from some offset (a node back without its data: the records below survive, new records and
transaction markers above), a pipeline that either goes on from its committed offset on the new
log or starts again at its start, and Vigil's reader, the pipeline's output reader, the committed
samples and the judging interleaved at random (Vigil's reader reads the new log from anywhere at
or below where it was, as a Spark batch run again after a restart does). Whatever the timing, live
and the audit find no loss the pipeline did not make, and both find the same duplicates."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.catalog import Invariant
from invariants.checker import Checker
from invariants.eos import EosFinding, EosVerdict, eos_verdict
from invariants.model import RC, Read, Settings


class Watch:
    """What the watch does with the pipeline, through a whole :class:`Checker` (its reads, settles,
    re-reads of the source and saved document), reading the source as it is at the time."""

    NAME, TID = "canary", "tid-1"

    def __init__(self, log: list, checker: Checker | None = None) -> None:
        self.log = log  # the source partition as it is now (replaced when rewritten)
        self.checker = checker or Checker(Settings(horizon_offsets=20_000))
        if checker is None:
            self.checker.note_topic(self.NAME, self.TID)
            self.checker.eos_source = self.NAME

    def read_source(self, records: list) -> None:
        if records:
            self.checker.apply_reads(RC, self.TID, 0, [Read(o, ident) for o, ident in records])

    def read_output(self, records: list, reader_at: int) -> list:
        self.checker.apply_eos_output(0, records, reader_at)
        return self.judge()

    def committed(self, offsets: dict, ends: dict) -> None:
        self.checker.eos_committed(offsets, ends)

    def judge(self) -> list:
        found = self.checker.settle()
        for w in self.checker.refetch_wanted():  # the re-fetcher reads the source as it is now
            self.checker.apply_refetched(RC, w.topic_id, w.partition,
                                         [Read(o, self.log[o]) for o in range(w.lo, min(w.hi, len(self.log)))
                                          if self.log[o] is not None], (w.lo, w.hi))
            found += self.checker.settle()
        return [EosFinding(v.invariant.value, v.partition, v.offsets[0], 0)
                for v in found if v.invariant in (Invariant.EOS_LOSS, Invariant.EOS_DUPLICATE)]

    def restarted(self) -> "Watch":
        return Watch(self.log, Checker.from_doc(json.loads(json.dumps(self.checker.to_doc())), Settings()))


def _log(rng: random.Random, lo: int, hi: int, generation: int, before: list | None = None) -> list:
    """Entries per offset: a record's identity, or None for a transaction marker."""
    log = list(before or [])[:lo]
    log += [None if rng.random() < 0.25 else (1000, generation, o) for o in range(lo, hi)]
    return log


def _history(seed: int) -> dict:
    rng = random.Random(seed)
    old_len = rng.randint(4, 30)
    old = _log(rng, 0, old_len, 0)
    wiped_from = rng.randint(0, old_len)
    new = _log(rng, wiped_from, rng.randint(max(wiped_from, 1), 45), 1, old)
    lossy = rng.random() < 0.4
    pipeline_old_at = rng.randint(0, old_len)
    reset = pipeline_old_at > len(new) or rng.random() < 0.4
    steps: list[tuple] = []  # the pipeline's transactions: (copies, committed offset), and the rewrite
    lost: set[int] = set()
    # going on from its committed offset, the pipeline passes the new records below it unconsumed:
    # not judged where anything shows the offsets reused, else a loss (it did pass them)
    skipped = set() if reset else {o for o in range(wiped_from, pipeline_old_at) if o < len(new) and new[o]}
    # A limit, documented (invariants.eos): new records above the old log's last record and below
    # the offset the pipeline committed on it (past the old log's tail of transaction markers). No
    # copy names an old record there, no acknowledgement goes back, no read finds another record:
    # nothing shows the offsets reused, and the group's offset committed on the old log passes them
    # until the pipeline commits again (after a reset to the log's start, a record there is copied
    # later, so a loss judged meanwhile is false).
    last_old = max((o for o, ident in enumerate(old) if ident), default=-1)
    tail_passed = {o for o in range(last_old + 1, min(pipeline_old_at, len(new))) if new[o]}

    def consume(log: list, start: int, end: int) -> None:
        at = start
        while at < end:
            stop = min(end, at + rng.randint(1, 6))
            copies = []
            for o in range(at, stop):
                if log[o] is None:
                    continue
                if lossy and rng.random() < 0.1:
                    lost.add(o)  # consumed, its copy not in the committed output
                else:
                    copies.append((0, o, log[o]))
            steps.append(("txn", copies, stop))
            at = stop

    consume(old, 0, pipeline_old_at)
    steps.append(("rewrite",))
    consume(new, 0 if reset else pipeline_old_at, len(new))
    return {"rng": rng, "old": old, "new": new, "steps": steps, "lost": lost, "lossy": lossy, "skipped": skipped, "tail_passed": tail_passed,
            "wiped_from": wiped_from}


def _run(seed: int) -> tuple[dict, list, EosVerdict]:
    h = _history(seed)
    rng, old, new, steps, wiped_from = h["rng"], h["old"], h["new"], h["steps"], h["wiped_from"]
    watch = Watch(old)
    output: list[tuple] = []
    committed = 0
    read_at = 0  # Vigil's reader's position on the log it reads
    out_at = 0
    found: list = []
    pending = list(steps)

    def step(final: bool = False) -> None:
        nonlocal watch, committed, read_at, out_at
        if pending and (final or rng.random() < 0.4):
            s = pending.pop(0)
            if s[0] == "rewrite":
                watch.log = new
                # the writers' acknowledgements of the new records go back below their last ones on the
                # old log: the ledger shows those offsets reused (live waits for it: the group judge's
                # lagging-ledger wait; here it arrives with the rewrite)
                first_new = next((o for o in range(wiped_from, len(new)) if new[o]), None)
                last_old = max((o for o, ident in enumerate(old) if ident), default=-1)
                if first_new is not None and first_new <= last_old:
                    watch.checker._eos_pipeline(Watch.TID).rewritten(0, first_new, last_old + 1)
                read_at = rng.randint(0, read_at)  # a batch read again after a restart, or where it was
            else:
                output.extend(s[1])
                committed = s[2]
        log = watch.log
        end = len(log) if final else min(len(log), read_at + rng.randint(0, 7))
        watch.read_source([(o, log[o]) for o in range(read_at, end) if log[o] is not None])
        read_at = max(read_at, end)
        out_end = len(output) if final else min(len(output), out_at + rng.randint(0, 7))
        found.extend(watch.read_output(list(enumerate(output))[out_at:out_end], out_end))
        out_at = out_end
        if final or rng.random() < 0.5:
            watch.committed({0: committed}, {0: len(output)})
        if final or rng.random() < 0.5:
            found.extend(watch.judge())
        if rng.random() < 0.2:
            watch = watch.restarted()

    while pending:
        step()
    for _ in range(3):
        step(final=True)
    held = {o: ident for o, ident in enumerate(new) if ident is not None}
    return h, found, eos_verdict({0: sorted(held)}, {0: len(new)}, {0: committed}, output, held={0: held})


@settings(max_examples=3000, deadline=None)
@given(st.integers(0, 2**32))
def test_no_loss_is_found_on_a_rewritten_partition_that_the_pipeline_did_not_make(seed):
    h, found, verdict = _run(seed)
    live_losses = {f.offset for f in found if f.invariant == "eos_loss"}
    audit_losses = {o for _p, o in verdict.losses}
    made = h["lost"] | h["skipped"]
    assert live_losses <= made | h["tail_passed"], (live_losses, h["lost"], h["skipped"], h["tail_passed"])
    assert audit_losses <= made, (audit_losses, h["lost"], h["skipped"])
    if not made and not h["tail_passed"]:
        assert live_losses == audit_losses == set()
    live_dups = sorted(f.offset for f in found if f.invariant == "eos_duplicate")
    assert live_dups == [o for _p, o, _n in verdict.duplicates]
