"""Spark's offset log: a micro-batch's end offsets per source, as the checkpoint holds them.

``<checkpoint>/offsets/<batch id>``: a version line, a metadata line, then one JSON object per
source in the query's source order, keyed by topic name. A reader's end offset there is past
control records too — what the batch's records cannot say. ``<checkpoint>/commits/<batch id>``
says Spark finished the batch; a planned batch without it is run again as planned on restart.
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


def drop_unrunnable_batch(checkpoint: Path, topic: str, partitions: set[int], taken: int) -> int | None:
    """The last planned batch, when it names partitions of ``topic`` that the topic does not have
    now (``partitions``: a topic recreated with fewer, before the writers could carry the added
    ones over), Spark never committed it and the checker never took it (``taken``: the last batch
    the checker took): removed with its checksum file, so the restarted query plans it again on
    the partitions there are. Run as planned, each of its tasks waits 60 s for the position of a
    partition that is not there and fails the query, again at every restart (found on the local
    cluster). Returns its id, or None when nothing was removed."""
    offsets = checkpoint / "offsets"
    ids = sorted(int(f.name) for f in offsets.glob("*") if f.name.isdigit()) if offsets.is_dir() else []
    if not ids or ids[-1] <= taken or (checkpoint / "commits" / str(ids[-1])).exists():
        return None
    last = ids[-1]
    if not set(batch_ends(checkpoint, last, topic)) - partitions:
        return None
    (offsets / str(last)).unlink(missing_ok=True)
    (offsets / f".{last}.crc").unlink(missing_ok=True)
    return last
