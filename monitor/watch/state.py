"""The watch's durable state: the checker, its counters and the evidence position, per batch.

Saved atomically (write, fsync, rename) after every applied micro-batch, under the batch id,
before anything of that batch is exported. ``foreachBatch`` may hand a batch again after a
restart (Spark had not committed it): a batch id at or below the saved one is skipped, so a
violation is never counted twice; a batch that was not saved is applied again from the
checker state before it, so none is forgotten. Liveness counts (from the prober, between
batches) are saved the same way before they are exported.

The file is a versioned JSON document (``vigil-state.json``, ``{"format": "vigil-watch-state",
"version": N, ...}``) written field by field from the objects it describes
(:meth:`WatchState.to_doc`), never a pickle of them. A state of another version is refused
with a message naming both versions (versions 3 and 4, the ones before, are read and saved as
this one); version 1 (``vigil-state.pkl``, a pickle written by Vigil 0.1) cannot be read by this
version.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from invariants.catalog import Invariant, Isolation
from invariants.checker import Checker
from invariants.errors import VigilError
from invariants.ledger_hold import LedgerHold
from invariants.model import Settings
from monitor.durable import replace_durably
from monitor.metrics import E2E_BUCKETS, E2E_BUCKETS_BEFORE, rebucket
from monitor.watch import ledger_hold as held_ledger

STATE_FILE = "vigil-state.json"
LEGACY_STATE_FILE = "vigil-state.pkl"  # version 1
STATE_FORMAT = "vigil-watch-state"
# 4: the latency histogram's bounds saved with it (finer buckets); 3 is read and carried over.
# 5: a transaction's header indexes saved as runs (a version 4 reader would find none); 3 and 4 are read
# 6: ledger rows held beside the state (<state>/ledger-held, monitor/watch/ledger_hold.py), which a version
#    5 reader would never apply; saved as 5 while nothing is held (the hold's threshold then only a hint)
STATE_VERSION = 6
HOLDLESS_VERSION = 5
READS_VERSIONS = (3, 4, HOLDLESS_VERSION, STATE_VERSION)
# the recovery command, named by every error about a damaged state
REBUILD_HINT = ("rebuild it with `vigil state rebuild` (its counts come back from the evidence, the rest from "
                "reading the retained logs again; see docs/runbooks.md#a-damaged-checker-state)")


@dataclass
class WatchState:
    settings: Settings
    watched: tuple[str, ...] = ()  # the canary topic names the checker accounts for (empty: all)
    batch_id: int = -1
    checker: Checker = None  # type: ignore[assignment]
    liveness: Counter = field(default_factory=Counter)  # (Invariant, Isolation) -> episodes counted
    malformed: Counter = field(default_factory=Counter)  # kind -> rows
    e2e_counts: dict[Isolation, np.ndarray] = field(default_factory=dict)
    e2e_sum: Counter = field(default_factory=Counter)
    evidence_bytes: int = 0
    incidents: dict[str, tuple[str, float]] = field(default_factory=dict)  # incident key -> (id, last seen)
    restarts: int = 0
    batches: int = 0
    last_batch_at: float = 0.0  # wall clock of the last applied batch (freshness survives restarts)
    open_episodes: dict[str, Any] = field(default_factory=dict)  # liveness episodes counted and still open
    refetches: int = 0
    ledger_hold: LedgerHold = None  # type: ignore[assignment]  # ledger rows fetched ahead, held

    def __post_init__(self) -> None:
        if self.checker is None:
            self.checker = Checker(self.settings, self.watched or None)
        if self.ledger_hold is None:
            self.ledger_hold = LedgerHold(0, released_through=self.batch_id)

    def add_e2e(self, iso: Isolation, counts: np.ndarray, total: float) -> None:
        prev = self.e2e_counts.get(iso)
        self.e2e_counts[iso] = counts if prev is None else prev + counts
        self.e2e_sum[iso] += total

    def to_doc(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT, "version": STATE_VERSION if self.ledger_hold.held() else HOLDLESS_VERSION,
            "batch_id": self.batch_id,
            "checker": self.checker.to_doc(),
            "liveness": [[inv.value, iso.value, n] for (inv, iso), n in self.liveness.items()],
            "malformed": dict(self.malformed),
            "e2e": [[iso.value, [int(c) for c in counts], float(self.e2e_sum[iso])]
                    for iso, counts in self.e2e_counts.items()],
            "e2e_bounds": list(E2E_BUCKETS),
            "evidence_bytes": self.evidence_bytes,
            "incidents": [[key, ident, seen] for key, (ident, seen) in self.incidents.items()],
            "restarts": self.restarts, "batches": self.batches, "last_batch_at": self.last_batch_at,
            "open_episodes": self.open_episodes, "refetches": self.refetches,
            "ledger_hold": self.ledger_hold.to_doc(),
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any], settings: Settings, watched: tuple[str, ...] = ()) -> "WatchState":
        st = cls(settings, watched, doc["batch_id"], Checker.from_doc(doc["checker"], settings))
        st.checker.fold.watched = frozenset(watched) if watched else None  # the configuration says what counts
        st.liveness = Counter({(Invariant(inv), Isolation(iso)): n for inv, iso, n in doc["liveness"]})
        st.malformed = Counter(doc["malformed"])
        bounds = tuple(doc.get("e2e_bounds", E2E_BUCKETS_BEFORE))
        for iso, counts, total in doc["e2e"]:
            if bounds != E2E_BUCKETS:  # saved by a version with other buckets: carried over
                counts = rebucket(counts, bounds, E2E_BUCKETS)
            st.e2e_counts[Isolation(iso)] = np.array(counts, dtype=np.int64)
            st.e2e_sum[Isolation(iso)] = total
        st.evidence_bytes = doc["evidence_bytes"]
        st.incidents = {key: (ident, seen) for key, ident, seen in doc["incidents"]}
        st.restarts, st.batches, st.last_batch_at = doc["restarts"], doc["batches"], doc["last_batch_at"]
        st.open_episodes = doc["open_episodes"]
        st.refetches = doc["refetches"]
        return st


class StateError(VigilError):
    pass


def load(directory: Path, settings: Settings, watched: tuple[str, ...] = ()) -> WatchState:
    path = directory / STATE_FILE
    if not path.exists():
        legacy = directory / LEGACY_STATE_FILE
        if legacy.exists():
            raise StateError(f"{legacy}: checker state version 1 (written by Vigil 0.1) cannot be read by this "
                             f"version (state version {STATE_VERSION}); move {directory} away to start a new "
                             "history (the Spark checkpoint inside it goes with it)")
        return WatchState(settings, watched)
    try:
        doc = json.loads(path.read_bytes())  # (once per start: exact for any integer, and a state saved with NaN)
    except (OSError, ValueError) as exc:  # a torn or foreign file must not be silently replaced
        raise StateError(f"{path}: unreadable checker state ({exc}); {REBUILD_HINT}") from None
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise StateError(f"{path}: not a Vigil checker state; {REBUILD_HINT}")
    if doc.get("version") not in READS_VERSIONS:
        raise StateError(f"{path}: checker state version {doc.get('version')!r} cannot be read by this version "
                         f"(state version {STATE_VERSION}); move {directory} away to start a new history")
    try:
        st = WatchState.from_doc(doc, settings, watched)
        st.ledger_hold = held_ledger.load(directory, doc.get("ledger_hold"), st.batch_id)
        return st
    except (KeyError, TypeError, ValueError, OSError, pa.ArrowException) as exc:
        raise StateError(f"{path}: damaged checker state ({type(exc).__name__}: {exc}); {REBUILD_HINT}") from None


class StateSaveError(StateError):
    """The state (or the evidence saved with it) could not be written: a full disk, a file-size
    limit, a read-only volume. ``reason``: the errno's name (ENOSPC, EFBIG, EROFS, EIO, ...)."""

    def __init__(self, what: Path, exc: OSError) -> None:
        self.reason = errno.errorcode.get(exc.errno or 0, "EIO")
        super().__init__(f"cannot save {what}: {exc.strerror or exc} ({self.reason}); nothing of this batch is "
                         f"exported, and it is applied again once it can be saved: free space on (or lift the limit "
                         f"of) the volume of {what.parent}. A damaged state is rebuilt with `vigil state rebuild`")


UNCHECKED_FILE = "unchecked"  # beside the state of a `vigil run --no-check`: what it read was never judged


def claim_for(directory: Path, spark_checkpoint: Path, check: bool) -> None:
    """A checkpoint directory is a checking monitor's or a ``--no-check`` run's, for good. A checking
    monitor refuses one where records were read unchecked (it would go on after them: never judged);
    a ``--no-check`` run refuses a checker's (it would move that Spark checkpoint past records it does
    not check) and marks the directory it takes. ``spark_checkpoint``: Spark's, paired with it
    (:meth:`monitor.config.Config.spark_checkpoint_dir`)."""
    marker = directory / UNCHECKED_FILE
    if marker.exists():
        if check:
            raise StateError(f"{directory} is the checkpoint of a `vigil run --no-check`, which read records "
                             f"without checking them: a checking monitor needs a directory of its own (another "
                             f"state_dir or watch.checkpoint_dir), or this one deleted")
        return
    if check:
        return
    if (directory / STATE_FILE).exists() or spark_checkpoint.exists():
        raise StateError(f"{directory} holds a checker's state: `--no-check` would read past what it has not "
                         f"checked yet; give the run a state_dir (or watch.checkpoint_dir) of its own")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        marker.write_text("records read here by `vigil run --no-check` were never checked\n")
    except OSError as exc:
        raise StateError(f"cannot mark {directory} as unchecked: {exc.strerror or exc}") from None


LOCK_FILE = "vigil.lock"


class Owner:
    """This process's claim on a state directory (a POSIX lock on ``vigil.lock``, held while the
    file stays open: released by the kernel when the process ends, however it ends)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def own(directory: Path, purpose: str = "a monitor") -> Owner:
    """Claim ``directory`` for this process; raise if another process holds it."""
    path = directory / LOCK_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StateError(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StateError(f"{directory} is in use by another process (pid {holder}: a running `vigil watch` or "
                         f"`vigil run`?); stop it first ({purpose} needs the checker state to itself)") from None
    try:  # who holds it, for the message above; on a full volume the lock alone will do
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass
    return Owner(fd)


def encode(doc: dict) -> bytes:
    """The state document as compact JSON (orjson; the standard library's encoder for anything
    orjson refuses, such as an integer beyond 64 bits: the same document, slower)."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return json.dumps(doc, separators=(",", ":")).encode()


def save(directory: Path, state: WatchState) -> int:
    """Atomically replace the saved state; returns its size in bytes. A failed write leaves the
    state saved before intact (and no partial file behind) and raises :class:`StateSaveError`."""
    data = encode(state.to_doc())
    try:
        directory.mkdir(parents=True, exist_ok=True)
        replace_durably(directory / STATE_FILE, lambda f: f.write(data))
    except OSError as exc:
        raise StateSaveError(directory / STATE_FILE, exc) from None
    return len(data)
