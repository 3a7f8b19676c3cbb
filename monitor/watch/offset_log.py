"""Spark's offset log: a micro-batch's end offsets per source, as the checkpoint holds them.

``<checkpoint>/offsets/<batch id>``: a version line, a metadata line, then one JSON object per
source in the query's source order, keyed by topic name. A reader's end offset there is past
control records too — what the batch's records cannot say.
"""

from __future__ import annotations

import json
from pathlib import Path


def batch_ends(checkpoint: Path, batch_id: int, topic: str) -> dict[int, int]:
    """The end offsets, per partition, of the sources reading ``topic`` in ``batch_id`` ({} if the
    batch or the topic is not there); of several (the canary topic's two readers), the lowest: a
    read_committed reader's end is its last stable offset, never past a read_uncommitted one's."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()[2:]
    except OSError:
        return {}
    out: dict[int, int] = {}
    for line in lines:
        try:
            ends = json.loads(line)
        except ValueError:
            continue
        if isinstance(ends, dict) and isinstance(ends.get(topic), dict):
            for q, off in ends[topic].items():
                out[int(q)] = min(int(off), out.get(int(q), int(off)))
    return out
