"""The observation log's records: one JSON object per record, keyed by the member's name.

``{"v": 1, "m": member, "k": kind, "t": ms since the epoch, "tp": the canary topic, ...}``; the kinds and their fields
are those :class:`invariants.groups.GroupJudge` reads (``p``: partitions, ``r``: per partition the
consumed offsets as ``[first, count]`` runs, ``o``: offsets of a commit, ``r`` of an ``ack``: its
result). A record that is not such an object is malformed: counted, never judged. One that
observes another canary topic (``tp``: two Vigil instances given one observation topic) is foreign:
counted, never judged, its offset taken like a malformed one's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

VERSION = 1
KINDS = ("started", "assigned", "revoked", "lost", "consumed", "intent", "ack", "progress", "drill", "seek", "fatal", "stopped")


def encode(member: str, kind: str, topic: str = "", **fields: Any) -> bytes:
    head = {"v": VERSION, "m": member, "k": kind, "t": int(time.time() * 1000)}
    if topic:
        head["tp"] = topic
    return json.dumps({**head, **fields}, separators=(",", ":")).encode()


def decode(value: bytes | None) -> dict[str, Any] | None:
    """The observation, or None for a malformed record."""
    try:
        obs = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obs, dict) or obs.get("v") != VERSION or obs.get("k") not in KINDS:
        return None
    return obs


@dataclass
class InOrder:
    """The log as the judge takes it: (offset, observation), a malformed or foreign one as ``{}``
    (its offset taken: no lost observation), and how many were malformed and foreign."""
    seen: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    malformed: int = 0
    foreign: int = 0


def in_order(records: Iterable[tuple[int, bytes | None]], topic: str | None) -> InOrder:
    """Records of the log as (offset, value), in order; those observing a canary topic other than
    ``topic`` are foreign (an observation without ``tp``, from before it was written, is taken;
    ``topic`` None takes every one)."""
    out = InOrder()
    for offset, value in records:
        obs = decode(value)
        if obs is None:
            out.malformed += 1
        elif topic is not None and obs.get("tp", topic) != topic:
            out.foreign += 1
            obs = None
        out.seen.append((offset, obs or {}))
    return out
