"""The watch's durable state: the checker, its counters and the evidence position, per batch.

Saved atomically (write, fsync, rename) after every applied micro-batch, under the batch id,
before anything of that batch is exported. ``foreachBatch`` may hand a batch again after a
restart (Spark had not committed it): a batch id at or below the saved one is skipped, so a
violation is never counted twice; a batch that was not saved is applied again from the
checker state before it, so none is forgotten. Liveness counts (from the prober, between
batches) are saved the same way before they are exported.
"""

from __future__ import annotations

import os
import pickle
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from invariants.checker import Checker
from invariants.model import Settings

STATE_FILE = "vigil-state.pkl"
STATE_VERSION = 1


@dataclass
class WatchState:
    settings: Settings
    batch_id: int = -1
    checker: Checker = None  # type: ignore[assignment]
    liveness: Counter = field(default_factory=Counter)  # (Invariant, Isolation) -> episodes counted
    malformed: Counter = field(default_factory=Counter)
    e2e_counts: dict[Any, np.ndarray] = field(default_factory=dict)
    e2e_sum: Counter = field(default_factory=Counter)
    evidence_bytes: int = 0
    incidents: dict[Any, tuple[str, float]] = field(default_factory=dict)
    restarts: int = 0
    batches: int = 0
    last_batch_at: float = 0.0  # wall clock of the last applied batch (freshness survives restarts)
    open_episodes: dict = field(default_factory=dict)  # liveness episodes counted and still open
    version: int = STATE_VERSION

    def __post_init__(self) -> None:
        if self.checker is None:
            self.checker = Checker(self.settings)

    def add_e2e(self, iso: Any, counts: np.ndarray, total: float) -> None:
        prev = self.e2e_counts.get(iso)
        self.e2e_counts[iso] = counts if prev is None else prev + counts
        self.e2e_sum[iso] += total


class StateError(Exception):
    pass


def load(directory: Path, settings: Settings) -> WatchState:
    path = directory / STATE_FILE
    if not path.exists():
        return WatchState(settings)
    try:
        with path.open("rb") as f:
            state = pickle.load(f)
    except Exception as exc:  # a torn or foreign file must not be silently replaced
        raise StateError(f"{path}: unreadable checker state ({exc}); move it away to start a new history") from exc
    if not isinstance(state, WatchState) or state.version != STATE_VERSION:
        raise StateError(f"{path}: not a Vigil checker state of version {STATE_VERSION}")
    if state.settings != settings:
        state.checker.settings = settings
        state.settings = settings
    return state


def save(directory: Path, state: WatchState) -> int:
    """Atomically replace the saved state; returns its size in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (STATE_FILE + ".tmp")
    with tmp.open("wb") as f:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    os.replace(tmp, directory / STATE_FILE)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return size
