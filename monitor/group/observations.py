"""The observation log's records: one JSON object per record, keyed by the member's name.

``{"v": 1, "m": member, "k": kind, "t": ms since the epoch, ...}``; the kinds and their fields
are those :class:`invariants.groups.GroupJudge` reads (``p``: partitions, ``r``: per partition the
consumed offsets as ``[first, count]`` runs, ``o``: offsets of a commit, ``r`` of an ``ack``: its
result). A record that is not such an object is malformed: counted, never judged.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

VERSION = 1
KINDS = ("started", "assigned", "revoked", "lost", "consumed", "intent", "ack", "progress", "drill", "seek", "fatal", "stopped")


def encode(member: str, kind: str, **fields: Any) -> bytes:
    return json.dumps({"v": VERSION, "m": member, "k": kind, "t": int(time.time() * 1000), **fields},
                      separators=(",", ":")).encode()


def decode(value: bytes | None) -> dict[str, Any] | None:
    """The observation, or None for a malformed record."""
    try:
        obs = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obs, dict) or obs.get("v") != VERSION or obs.get("k") not in KINDS:
        return None
    return obs


def in_order(records: Iterable[tuple[int, bytes | None]]) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """Records of the log as (offset, value), in order, as the judge takes them: (offset,
    observation), a malformed one as ``{}`` (its offset taken: no lost observation), and how many
    were malformed."""
    out, malformed = [], 0
    for offset, value in records:
        obs = decode(value)
        malformed += obs is None
        out.append((offset, obs or {}))
    return out, malformed
