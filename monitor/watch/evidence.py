"""Evidence: every violation as a JSON line, enough to investigate without the monitor.

Each line carries the invariant, isolation, topic name and ID, partition, offsets, writer,
seq, transaction, the partition's leader at detection, the detection time, the batch id and
an incident id. Violations of one partition (or one writer, for writer-level invariants)
less than ``INCIDENT_GAP_S`` apart share an incident: one fault usually shows several ways.

Idempotent under batch replay: before a batch is written, the file is cut back to the length
recorded in the durable state with the previous batch, so lines of a batch that was written
but never saved disappear before the batch is written again. The optional evidence topic
(compacted) keys each record by that same position and index, so a replay overwrites its own
records, and after each write a ``<position>:end`` record says how many lines it holds (a shorter
write at the same position leaves the longer one's last keys behind: they are not read back).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from invariants.model import Violation

INCIDENT_GAP_S = 60.0


def incident_key(v: Violation) -> str:
    """What one incident groups: a partition, or (for writer-level invariants) one writer."""
    if v.partition >= 0:
        return f"{v.topic_id}/{v.partition}"
    writer = "-" if v.writer is None else f"{v.writer[0]:016x}/{v.writer[1]}"
    return f"writer/{writer}/{v.detail.split(':')[0]}"


def incident_for(incidents: dict[str, tuple[str, float]], v: Violation, now: float) -> str:
    key = incident_key(v)
    current = incidents.get(key)
    if current is None or now - current[1] > INCIDENT_GAP_S:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        where = f"{v.topic_id[:8]}-p{v.partition}" if v.partition >= 0 else "writer"
        current = (f"{stamp}-{where}-{v.invariant.value}", now)
    incidents[key] = (current[0], now)
    return current[0]


class EvidenceLog:
    """``refused``: told of every evidence record the topic did not take (its delivery report's
    error: an ACL, the topic gone, a timeout), as the client's ``error_cb`` is of the rest; the
    file keeps every line whatever the topic does."""

    def __init__(self, path: Path, producer: Any = None, topic: str = "",
                 refused: Callable[[Any], None] | None = None) -> None:
        self.path = path
        self.producer = producer
        self.topic = topic
        self.refused = refused
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)  # there from the start (empty until a violation): it can be followed

    def write(self, batch_id: int, violations: list[Violation], committed_bytes: int,
              incidents: dict[str, tuple[str, float]], topic_name: Callable[[str], str],
              leader: Callable[[str, int], int | None], now: float | None = None) -> int:
        """Append one batch's evidence after cutting back to ``committed_bytes``; returns the new length."""
        now = time.time() if now is None else now
        with self.path.open("ab") as f:
            f.truncate(committed_bytes)
            f.seek(committed_bytes)
            for i, v in enumerate(violations):
                record = v.to_json()
                record.update({
                    "topic": topic_name(v.topic_id) if v.topic_id else None,
                    "leader": leader(v.topic_id, v.partition) if v.partition >= 0 else None,
                    "detected_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
                    "batch_id": batch_id, "index": i, "incident": incident_for(incidents, v, now),
                })
                line = json.dumps(record, sort_keys=True, default=str).encode() + b"\n"
                f.write(line)
                if self.producer is not None and self.topic:
                    # keyed by where the line sits in the log: a replay rewrites the same keys
                    self.producer.produce(self.topic, key=f"{committed_bytes}:{i}".encode(), value=line[:-1],
                                          on_delivery=self._delivered)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        if self.producer is not None and self.topic:
            # how many lines this write holds: a shorter write at the same position (a batch handed
            # again after a cut one) leaves the longer one's last keys behind, and this says so
            self.producer.produce(self.topic, key=f"{committed_bytes}:end".encode(),
                                  value=str(len(violations)).encode(), on_delivery=self._delivered)
        if self.producer is not None:
            self.producer.flush(30)
        return size

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None and self.refused is not None:
            self.refused(err)
