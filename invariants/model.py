"""Shared vocabulary of the checkers: what a read, a write key and a violation look like.

Plain tuples and frozen dataclasses, no I/O. A record read by a reader is identified by its
``ident``: ``(writer_id, incarnation, seq)`` for a canary record, ``("x", crc32, length)``
(:func:`foreign_ident`) for a foreign or malformed one (so two different records at one offset can still be told apart).
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass
from typing import Any

from invariants.catalog import Invariant, Isolation

RC, RU, NONE = Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED, Isolation.NONE
READERS = (RC, RU)

Ident = tuple  # (writer_id, inc, seq) or ("x", crc32, length)
WriteKey = tuple[str, int, int, int, int]  # topic_id, partition, writer_id, inc, seq
TxnKey = tuple[int, int, int]  # writer_id, inc, txn_id


@dataclass(frozen=True, slots=True)
class Read:
    """One record as one reader returned it."""

    offset: int
    ident: Ident
    txn_id: int = 0


def is_canary(ident: Ident) -> bool:
    return ident[0] != "x"


def foreign_ident(value: bytes | None) -> Ident:
    """The identity of a value that is not a canary record: a digest of its bytes (the live
    checker and the audit must give one value the same identity for the offset checks)."""
    v = value or b""
    return ("x", zlib.crc32(v), len(v))


@dataclass(frozen=True)
class Settings:
    """Knobs both the live checker and the audit take, so they judge by the same rule.

    ``settle_offsets`` (H): an acked write missing at its offset is judged once the reader
    has read up to ``offset + H - 1``: found at another offset up to there → offset_mismatch,
    not found → lost_write. ``horizon_offsets``: how many offsets behind its frontier a
    reader's per-offset memory reaches (the live horizon; older anomalies are the audit's).
    """

    settle_offsets: int = 16
    horizon_offsets: int = 20_000


class Verdict(str, enum.Enum):
    OK = "ok"
    UNDECIDED = "undecided"
    MISMATCH = "offset_mismatch"
    LOST = "lost_write"
    EXPIRED = "expired_unread"


@dataclass(frozen=True)
class Violation:
    invariant: Invariant
    isolation: Isolation
    topic_id: str = ""
    partition: int = -1
    offsets: tuple[int, ...] = ()
    writer: tuple[int, int] | None = None  # writer_id, incarnation
    seq: int | None = None
    txn_id: int | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant.value, "isolation": self.isolation.value, "topic_id": self.topic_id,
            "partition": self.partition, "offsets": list(self.offsets),
            "writer_id": None if self.writer is None else f"{self.writer[0]:016x}",
            "incarnation": None if self.writer is None else self.writer[1], "seq": self.seq,
            "txn_id": self.txn_id, "detail": self.detail,
        }
