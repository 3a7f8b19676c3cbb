"""The EOS worker's output record (written by ``EosWorker.java``), big-endian::

    offset size field
    0      2    magic             b"VE"
    2      1    version           1
    3      1    flags             bit 0: a drill's deliberate copy
    4      4    source partition
    8      8    source offset
    16     ≤48  the source value's first 48 bytes (its canary header, when it is one)

``decode`` never raises: anything else is ``None``, for the caller to count.
"""

from __future__ import annotations

import struct

MAGIC = b"VE"
VERSION = 1
HEAD = struct.Struct(">2sBBiq")
FLAG_DRILL_COPY = 0x01


def decode(value: bytes | None) -> tuple[int, int] | None:
    """The source position (partition, offset) an output record names, or None."""
    if value is None or len(value) < HEAD.size:
        return None
    magic, version, _flags, partition, offset = HEAD.unpack_from(value)
    if magic != MAGIC or version != VERSION or partition < 0 or offset < 0:
        return None
    return partition, offset


def is_drill_copy(value: bytes | None) -> bool:
    """Whether an output record is a drill's deliberate copy (its flag)."""
    return decode(value) is not None and bool(value[3] & FLAG_DRILL_COPY)  # type: ignore[index]


def encode(partition: int, offset: int, source_value: bytes = b"", flags: int = 0) -> bytes:
    """What the worker writes (the tests' and the drills' own records)."""
    return HEAD.pack(MAGIC, VERSION, flags, partition, offset) + source_value[:48]
