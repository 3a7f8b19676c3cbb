"""Topic names, topic IDs and leaders, as the watch needs them for reads and evidence.

Spark rows carry topic names, the checker keys everything by topic ID and attributes reads itself
(:mod:`invariants.attribution`); it asks for the name's ID *now* (:meth:`TopicDirectory.fresh_id`,
a metadata lookup, cached for a second) only when a reader's offsets go backwards or a new reader
starts. Names of IDs come from what the checker learnt (the ledger, the prober's metadata).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from monitor import clients
from monitor.config import Config
from monitor.watch.prober import Prober

FRESH_FOR_S = 1.0


def topics_by_src(cfg: Config) -> dict[int, str]:
    """The topic each source (its ``src``) subscribes to: one name each, so a row's topic follows from its
    ``src`` and the driver's fetch leaves the column in the JVM
    (:func:`monitor.watch.spark.fetched_sources`)."""
    out = {0: cfg.canary.name, 1: cfg.canary.name, 2: cfg.ledger.topic}
    if cfg.eos.enabled:
        out[3] = cfg.eos.output_topic
    if cfg.groups.enabled:
        out[4] = cfg.groups.observation_topic
    return out


class TopicDirectory:
    def __init__(self, cfg: Config, prober: Prober, name_of: Callable[[str], str] = lambda _t: "") -> None:
        self.cfg = cfg
        self.prober = prober
        self.name_of = name_of  # the checker's knowledge: topic ID -> name
        self._admin: Any = None
        self._fresh: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()  # the batch and the re-fetch thread both ask: one client, one lookup

    def fresh_id(self, name: str, max_age_s: float = FRESH_FOR_S) -> str | None:
        """The ID ``name`` has now (None: missing, or nobody answered), looked up at most
        ``max_age_s`` ago. Thread-safe: a caller that waited for another's lookup gets its answer
        from the cache."""
        with self._lock:
            at, tid = self._fresh.get(name, (0.0, None))
            if time.monotonic() - at < max_age_s:
                return tid
            if self._admin is None:
                self._admin = clients.admin(self.cfg)
            try:
                info = clients.describe_topic(self._admin, name, timeout=10)
            except Exception:  # noqa: BLE001 - brokers away: not known now
                return None
            tid = None if info is None else info.topic_id
            self._fresh[name] = (time.monotonic(), tid)
            return tid

    def topic_name_of(self, topic_id: str) -> str:
        view = self.prober.snapshot()
        if topic_id == view.topic_id:
            return self.cfg.canary.name
        return self.name_of(topic_id)

    def leader_of(self, topic_id: str, partition: int) -> int | None:
        view = self.prober.snapshot()
        return view.leaders.get(partition) if topic_id == view.topic_id else None
