"""A canary writer's part that follows its topic (a mixin of
:class:`monitor.canary.writer.CanaryWriter`): a missing topic created again, a new topic ID or
new partitions written to from then on, each announced in the ledger with a ``start`` entry."""

from __future__ import annotations

import time

from invariants.ledger_format import Start
from monitor.clients import TopicInfo

RECREATE_EVERY_S = 5.0  # how often a writer tries to create its missing topic again


class TopicFollowing:
    def follow_topic(self) -> bool:
        """Act on what the observer last saw of the topic; False while it is missing (send nothing)."""
        if self.observer is None:
            return True
        view = self.observer.latest
        if view.missing and self.recreate_topic is not None:
            if time.monotonic() - self._last_recreate < RECREATE_EVERY_S:
                return False
            self._last_recreate = time.monotonic()
            try:
                self.recreate_topic()  # with its configured settings (an existing one is left as it is)
            except Exception:  # noqa: BLE001 - the cluster away or refusing: try again later
                self._count_error("client")
                return False
            view = self.observer.refresh()
        if view.missing:
            return False
        info = view.info
        if info is None:  # nobody answered: carry on as before
            return True
        if info.topic_id != self.topic.topic_id:
            self._move_to(info, replaces=self.topic.topic_id)
        elif info.partitions > len(self.partitions):
            self._move_to(info)
        return True

    def _move_to(self, info: TopicInfo, replaces: str = "") -> None:
        """Carry on on a recreated topic (``replaces``: the old ID) or on more partitions."""
        if replaces:
            self._serve(0)
            self._renew_producer(f"topic {self.topic.name} recreated (was {replaces})")
            self.flush_outcomes(force=True)
            self._forget_acks()
        else:
            try:  # the producer must know the new partitions before a record is sent to one
                self.producer.list_topics(info.name, timeout=5)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a refusal is counted per record (failed, never sent)
                pass
        self.topic = info
        for p in range(len(self.partitions), info.partitions):
            self.next_seq.setdefault(p, 0)
        self.partitions = list(range(max(info.partitions, len(self.partitions))))
        self.ledger.append(Start(info.name, info.topic_id, info.partitions, self.settings(), self.topic_settings(),
                                 replaces))
        self.ledger.sync()
        if self.metrics is not None:
            self.metrics.topic_changes.labels(self.cfg.name, "recreated" if replaces else "partitions_added").inc()
