"""What a canary writer knows of its topic: whether it exists, its ID and partitions, its
durability settings and its partitions' log start offsets — read at start and every few seconds
after, in the background.

The settings go into the writer's ``start`` and ``checkpoint`` ledger entries, so every verdict on
its writes is classed by the configuration in force when they were made
(:mod:`invariants.promises`), by the live checker and the audit alike; the log starts go into its
checkpoints, so that when the topic vanishes everyone knows which of its writes were still there.
The writer acts on what is seen here: a topic gone, recreated with a new ID, or given more
partitions (:mod:`monitor.canary.writer`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from invariants.ledger_format import TopicSettings
from monitor import clients
from monitor.clients import TopicInfo


@dataclass(frozen=True)
class TopicView:
    info: TopicInfo | None  # None: the topic could not be described (missing, or no broker answered)
    settings: TopicSettings | None
    observed_at: float
    missing: bool = False  # the cluster answered and the topic is not there
    log_starts: tuple[int, ...] = ()  # per partition, when listed


class TopicObserver(threading.Thread):
    """Describes ``name`` every ``interval_s``; :attr:`latest` is the newest view."""

    def __init__(self, admin: Any, name: str, interval_s: float = 10.0,
                 on_view: Callable[[TopicView], None] = lambda _v: None) -> None:
        super().__init__(name=f"topic-watch-{name}", daemon=True)
        self.admin = admin
        self.topic = name
        self.interval_s = interval_s
        self.on_view = on_view
        self.stop_event = threading.Event()
        self.latest = TopicView(None, None, 0.0)
        self.most_partitions = 0  # the most partitions the topic was seen with (a recreation keeps them)

    def refresh(self, timeout: float = 5.0) -> TopicView:
        try:
            info = clients.describe_topic(self.admin, self.topic, timeout=timeout)
            missing = info is None and not clients.topic_exists(self.admin, self.topic, timeout=timeout)
        except Exception:  # noqa: BLE001 - brokers away: nothing new is known
            return self.latest
        settings = clients.topic_settings(self.admin, info, timeout) if info is not None else None
        same_topic = info is not None and self.latest.info is not None and \
            self.latest.info.topic_id == info.topic_id
        if info is not None and settings is None and same_topic:
            settings = self.latest.settings
        starts = clients.log_starts(self.admin, info, timeout) if info is not None else ()
        if info is not None and not starts and same_topic:
            starts = self.latest.log_starts
        self.latest = TopicView(info, settings, time.time(), missing, starts)
        if info is not None:
            self.most_partitions = max(self.most_partitions, info.partitions)
        self.on_view(self.latest)
        return self.latest

    def list_log_starts(self, info: TopicInfo, timeout: float) -> tuple[int, ...]:
        """Every partition's log start offset now (empty when any did not answer)."""
        return clients.log_starts(self.admin, info, timeout)

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            self.refresh()

    def stop(self) -> None:
        self.stop_event.set()
