"""Topic names, topic IDs and leaders, as the watch needs them for reads and evidence.

Spark rows carry topic names, the checker keys everything by topic ID: the canary topic's ID
comes from the prober's metadata, any other name is looked up once through the admin API.
"""

from __future__ import annotations

from typing import Any

from monitor import clients
from monitor.config import Config
from monitor.watch.prober import Prober


class TopicDirectory:
    def __init__(self, cfg: Config, prober: Prober) -> None:
        self.cfg = cfg
        self.prober = prober
        self._ids: dict[str, str] = {}
        self._admin: Any = None

    def topic_id_of(self, name: str) -> str | None:
        view = self.prober.snapshot()
        if name == self.cfg.canary.name and view.topic_id:
            return view.topic_id
        if name not in self._ids:
            if self._admin is None:
                self._admin = clients.admin(self.cfg)
            info = clients.describe_topic(self._admin, name, timeout=10)
            if info is None:
                return None
            self._ids[name] = info.topic_id
        return self._ids[name]

    def topic_name_of(self, topic_id: str) -> str:
        view = self.prober.snapshot()
        if topic_id == view.topic_id:
            return self.cfg.canary.name
        return next((n for n, t in self._ids.items() if t == topic_id), "")

    def leader_of(self, topic_id: str, partition: int) -> int | None:
        view = self.prober.snapshot()
        return view.leaders.get(partition) if topic_id == view.topic_id else None
