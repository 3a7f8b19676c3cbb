"""`vigil state rebuild`: a new checker state when the saved one is damaged or lost.

Spark's checkpoint holds only offsets, so the checker's state cannot come from it. What a lost
state knew comes back from two places:

- **the counters**, from the evidence (the file, or the compacted evidence topic when the file
  went with the state): every violation counted before is counted again at once, and remembered
  so that, when the logs show it again, it is passed over instead of counted twice
  (:meth:`invariants.model.ViolationSink.seed`);
- **the rest** (what each reader read, the writers' acks, open transactions), by reading the
  retained canary and ledger logs again from their start: the damaged state and the Spark
  checkpoint paired with it are moved aside (renamed, never deleted), so the next `vigil watch`
  starts a new checkpoint at ``watch.starting_offsets`` (``earliest``).

What the retained logs no longer hold (segments retention deleted) is not judged again, and the
violations counted there stay counted. Records checked, malformed records and latency histograms
start again from what the retained logs hold: Prometheus sees those counters reset once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from invariants.catalog import Invariant
from invariants.errors import VigilError
from invariants.model import Settings, Violation
from monitor.config import Config
from monitor.watch import state as state_store
from monitor.watch import ledger_hold as held_ledger
from monitor.watch import write_ahead

# judged by the prober between batches (counted in the state's liveness counts), not by the checker
LIVENESS = frozenset({Invariant.STALLED_POLL, Invariant.LSO_STUCK, Invariant.PRODUCER_STALLED})


class RebuildError(VigilError):
    pass


@dataclass
class Evidence:
    lines: list[dict[str, Any]] = field(default_factory=list)
    found: list[Violation] = field(default_factory=list)  # what each line says
    torn: int = 0  # lines that were not whole JSON (a write cut short by a full disk): left out

    def file_bytes(self) -> bytes:
        """The evidence file holding exactly these lines."""
        return b"".join(json.dumps(doc, sort_keys=True).encode() + b"\n" for doc in self.lines)


@dataclass
class RebuildReport:
    source: str
    violations: dict[str, int]
    torn_lines: int
    moved: list[tuple[str, str]]
    state_path: str
    starting_offsets: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "violations": self.violations, "torn_lines": self.torn_lines,
                "moved": [{"from": a, "to": b} for a, b in self.moved], "state": self.state_path,
                "starting_offsets": self.starting_offsets}


def parse_evidence(lines: list[bytes]) -> Evidence:
    out = Evidence()
    for raw in lines:
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
            found = Violation.from_json(doc)
        except (ValueError, KeyError, TypeError):
            out.torn += 1
            continue
        out.lines.append(doc)
        out.found.append(found)
    return out


def evidence_from_file(path: Path) -> Evidence:
    if not path.exists():
        return Evidence()
    return parse_evidence(path.read_bytes().split(b"\n"))


def evidence_from_topic(records: list[tuple[bytes | None, bytes | None]]) -> Evidence:
    """The evidence file as the topic holds it (records in log order). Each write at byte
    position P put its lines under keys ``P:0``, ``P:1``, ... and then ``P:end`` = how many; the
    last value of a key wins (a batch handed again rewrote its keys). The file is followed from
    position 0: a write's lines, then the write at the position they end at. Stale keys of a longer
    write cut earlier at the same position are left out by its ``end``."""
    lines: dict[tuple[int, int], bytes] = {}
    ends: dict[int, int] = {}
    for key, value in records:
        if key is None or value is None:
            continue
        try:
            at, index = key.decode().split(":")
            if index == "end":
                ends[int(at)] = int(value)
            else:
                lines[(int(at), int(index))] = value
        except ValueError:
            continue
    if not ends:  # written by a Vigil before end records: every key, in file order
        return parse_evidence([lines[k] for k in sorted(lines)])
    starts = sorted({at for at, _i in lines})
    ordered: list[bytes] = []
    pos = 0  # where the file's next byte is
    for n, start in enumerate(starts):
        if start < pos:  # inside lines already taken: a longer write, cut, that a later one replaced
            continue
        count = ends.get(start)
        following = starts[n + 1] if n + 1 < len(starts) else None
        at, i = start, 0
        while (start, i) in lines and (count is None or i < count):
            line = lines[(start, i)]
            # a write without its end (cut by a full disk, or older than end records) stops where
            # the next write began: what it wrote past that was cut from the file
            if count is None and following is not None and at + len(line) + 1 > following:
                break
            ordered.append(line)
            at, i = at + len(line) + 1, i + 1
        pos = at
    return parse_evidence(ordered)


def seeded_state(cfg: Config, evidence: Evidence) -> state_store.WatchState:
    """A new watch state that has counted the evidence's violations and waits to find the
    checker's ones again in the logs."""
    st = state_store.WatchState(Settings(cfg.watch.settle_offsets, cfg.watch.horizon_offsets), (cfg.canary.name,))
    st.checker.sink.seed(v for v in evidence.found if v.invariant not in LIVENESS)
    for v in evidence.found:
        if v.invariant in LIVENESS:
            st.liveness[(v.invariant, v.isolation)] += 1
    return st


def rebuild(cfg: Config, read_evidence: Callable[[], Evidence], source: str,
            say: Callable[[str], None] = lambda _m: None, now: float | None = None) -> RebuildReport:
    """Move the damaged state and its Spark checkpoint aside and save a state seeded from the
    evidence ``read_evidence`` reads — once this process holds the state (no monitor runs on it)."""
    directory = cfg.checkpoint_dir()
    owner = state_store.own(directory, "a rebuild")
    try:
        return _rebuild(cfg, read_evidence(), source, say, now, directory)
    finally:
        owner.release()


def _rebuild(cfg: Config, evidence: Evidence, source: str, say: Callable[[str], None], now: float | None,
             directory: Path) -> RebuildReport:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now))
    moved = []
    for path in (directory / state_store.STATE_FILE, directory / state_store.LEGACY_STATE_FILE,
                 cfg.spark_checkpoint_dir(), write_ahead.directory_of(directory), held_ledger.directory_of(directory),
                 directory / state_store.UNCHECKED_FILE):  # (a --no-check run's mark: its checkpoint goes too)
        if path.exists():
            aside = path.with_name(f"{path.name}.replaced-{stamp}")
            path.rename(aside)
            moved.append((str(path), str(aside)))
            say(f"moved {path} aside to {aside}")
    (directory / (state_store.STATE_FILE + ".tmp")).unlink(missing_ok=True)
    st = seeded_state(cfg, evidence)
    evidence_path = cfg.evidence_path()
    # from the topic: the file went with the state and is written again; from a file with a torn
    # tail: it is cut off, so that the next batch appends after whole lines
    if source == "topic" or evidence.torn:
        evidence_path.parent.mkdir(parents=True, exist_ok=True)
        evidence_path.write_bytes(evidence.file_bytes())
    st.evidence_bytes = evidence_path.stat().st_size if evidence_path.exists() else 0
    state_store.save(directory, st)
    counts: Counter[str] = Counter()
    for doc in evidence.lines:
        counts[f"{doc['invariant']}/{doc['isolation']}"] += 1
    return RebuildReport(source, dict(sorted(counts.items())), evidence.torn, moved,
                         str(directory / state_store.STATE_FILE), cfg.watch.starting_offsets)
