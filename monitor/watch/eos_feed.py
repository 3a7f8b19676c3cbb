"""What the watch tells the checker about the EOS pipeline besides its output records
(:mod:`invariants.eos`): samples of the pipeline group's committed offsets, each with the output's
high watermarks taken right after it, and where Spark's ``read_committed`` reader of the output
stands after a batch: the batch's end offsets as Spark's offset log holds them (past commit
markers too — what a batch's records cannot say).

A sample is taken on the driver at every micro-batch, and after every prober round too (when the
output is read to its end no batch comes, yet the last commits are still to be judged); one that
fails is skipped (the next samples again: judging waits, nothing is judged wrongly).
"""

from __future__ import annotations

import threading
from typing import Any

from monitor import clients
from monitor.audit.reader import committed_by
from monitor.config import Config
from monitor.watch.offset_log import batch_ends


class EosFeed:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.topic = cfg.eos.output_topic
        self._consumer: Any = None
        self._ends: Any = None
        self._lock = threading.Lock()
        self._closed = False
        self.failed_samples = 0

    def positions_at(self, batch_id: int) -> dict[int, int]:
        """The output reader's end offsets for ``batch_id``, from Spark's offset log ({} if absent)."""
        return batch_ends(self.cfg.spark_checkpoint_dir(), batch_id, self.topic)

    def sample(self) -> tuple[dict[int, int], dict[int, int], list[int]] | None:
        """(committed offsets of the group on the canary topic, the output's high watermarks after,
        the output partitions whose log start is past 0). Short timeouts: it runs in the batch path
        and on the prober's thread."""
        with self._lock:
            return self._sample() if not self._closed else None

    def _sample(self) -> tuple[dict[int, int], dict[int, int], list[int]] | None:
        try:
            if self._consumer is None:
                # a consumer that never subscribes does not join the group: asking disturbs nothing
                self._consumer = clients.consumer(self.cfg, "read_committed", group=self.cfg.eos.group)
                # high watermarks: librdkafka lists offsets at the client's isolation level, and a
                # read_committed client's "latest" is the last stable offset
                self._ends = clients.consumer(self.cfg, "read_uncommitted", group="vigil-eos-ends")
            c = self._consumer
            src = c.list_topics(self.cfg.canary.name, timeout=2).topics.get(self.cfg.canary.name)
            out = c.list_topics(self.topic, timeout=2).topics.get(self.topic)
            if src is None or out is None or src.error is not None or out.error is not None:
                raise LookupError("topics not there")
            committed = committed_by(c, self.cfg.canary.name, src.partitions, timeout_s=3)
            marks = {q: clients.watermarks(self._ends, self.topic, q, within_s=2, timeout_s=2) for q in out.partitions}
            return committed, {q: high for q, (_low, high) in marks.items()}, [q for q, (low, _h) in marks.items() if low > 0]
        except Exception:  # noqa: BLE001 (a sample is optional: the next batch takes another)
            self.failed_samples += 1
            return None
        finally:
            # never assigned, these consumers are polled for nothing but their queued events (errors
            # while brokers are down): served here, they do not pile up until close()
            for c in (self._consumer, self._ends):
                if c is not None:
                    try:
                        c.poll(0)
                    except Exception:  # noqa: BLE001 (serving events is optional too)
                        pass

    def close(self) -> None:
        with self._lock:  # not while a sample is being taken
            self._closed = True
            for c in (self._consumer, self._ends):
                if c is not None:
                    c.close()
            self._consumer = self._ends = None
