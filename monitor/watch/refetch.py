"""Re-fetching: reading a range of a partition again, directly, when the checker asks for it.

The checker counts a verdict that rests on offsets read before its evidence arrived only after
those offsets were read again (:mod:`invariants.confirm`), and asks for ranges that may have been
rewritten (:meth:`invariants.checker.Checker.refetch_wanted`). Spark will not read them again by
itself (it goes back only when the log end falls below its position at planning time), so the
watch reads them here, with one confluent-kafka consumer per isolation level, and hands the
records and the range they cover back to the checker.

A range is read from ``lo`` (or the partition's log start, if that is above: what retention deleted
is not "no record" but nothing to compare) until the consumer's position reaches ``hi`` or the end
it may read (high watermark, or last stable offset for ``read_committed``), within a time budget;
what was covered is what the checker may judge. A broker that does not answer leaves the range
wanted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from invariants.model import READERS, Isolation, Read
from monitor import clients
from monitor.config import Config
from monitor.watch.batch import to_reads


@dataclass
class RangeRead:
    reads: list[Read]
    lo: int
    hi: int  # offsets [lo, hi) were covered (hi == lo: nothing could be read)


class Refetcher:
    def __init__(self, cfg: Config, budget_s: float = 3.0, stop: threading.Event | None = None) -> None:
        self.cfg = cfg
        self.budget_s = budget_s
        self.stop = stop or threading.Event()  # set: nothing more is read (the monitor is stopping)
        self._consumers: dict[Isolation, Any] = {}

    def _consumer(self, iso: Isolation) -> Any:
        c = self._consumers.get(iso)
        if c is None:
            c = self._consumers[iso] = clients.consumer(self.cfg, iso.value, group=f"vigil-refetch-{iso.value}",
                                                        profile="probe")
        return c

    def read(self, iso: Isolation, topic: str, partition: int, lo: int, hi: int) -> RangeRead:
        if self.stop.is_set():
            return RangeRead([], lo, lo)  # nothing covered: the range stays wanted
        c = self._consumer(iso)
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.budget_s)
        lo, hi = max(lo, low), min(hi, high)  # above the end: nothing to read (a consumer would start over at the log start)
        if lo >= hi:
            return RangeRead([], lo, lo)
        c.assign([TopicPartition(topic, partition, lo)])
        offsets, values = [], []
        reached = lo
        deadline = time.monotonic() + self.budget_s
        try:
            while reached < hi and time.monotonic() < deadline and not self.stop.is_set():
                for msg in c.consume(1000, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            reached = max(reached, msg.offset())
                            deadline = 0.0  # nothing more to read now
                        continue
                    if msg.offset() < hi:
                        offsets.append(msg.offset())
                        values.append(msg.value())
                    reached = max(reached, msg.offset() + 1)
        finally:
            c.unassign()
        covered = min(reached, hi)
        reads, _malformed, _ts = to_reads([o for o in offsets if o < covered],
                                          [v for o, v in zip(offsets, values) if o < covered])
        return RangeRead(reads, lo, covered)

    def read_both(self, topic: str, partition: int, lo: int, hi: int) -> dict[Isolation, RangeRead]:
        return {iso: self.read(iso, topic, partition, lo, hi) for iso in READERS}

    def close(self) -> None:
        for c in self._consumers.values():
            c.close()
        self._consumers.clear()
