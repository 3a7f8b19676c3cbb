"""The EOS worker's output record (written by ``EosWorker.java``), big-endian::

    offset size field
    0      2    magic             b"VE"
    2      1    version           1
    3      1    flags             bit 0: a drill's deliberate copy
    4      4    source partition
    8      8    source offset
    16     ≤48  the source value's first 48 bytes (its canary header, when it is one)

``decode`` never raises: anything else is ``None``, for the caller to count. The copied header
names the source record (:func:`decode_copy`): a copy is matched to the record it was made of, not
only to its position, which a rewritten source log reuses for other records.
"""

from __future__ import annotations

import struct

from monitor import record_format

MAGIC = b"VE"
VERSION = 1
HEAD = struct.Struct(">2sBBiq")
FLAG_DRILL_COPY = 0x01
SOURCE_NAME = struct.Struct(">2sBBQIQ")  # the canary header's magic, version, flags, writer_id, incarnation, seq


def decode(value: bytes | None) -> tuple[int, int] | None:
    """The source position (partition, offset) an output record names, or None."""
    if value is None or len(value) < HEAD.size:
        return None
    magic, version, _flags, partition, offset = HEAD.unpack_from(value)
    if magic != MAGIC or version != VERSION or partition < 0 or offset < 0:
        return None
    return partition, offset


def decode_copy(value: bytes | None) -> tuple[int, int, tuple | None] | None:
    """The source position an output record names and the source record's identity, ``(writer_id,
    incarnation, seq)`` as a reader of the source names it (:class:`invariants.model.Read`), when the
    copied bytes begin with a canary header; ``None`` in its place when they do not (a foreign record:
    its identity is a digest of its whole value, of which the copy keeps 48 bytes). None if not an
    output record at all."""
    position = decode(value)
    if position is None:
        return None
    assert value is not None
    ident = None
    if len(value) >= HEAD.size + record_format.HEADER_SIZE:
        magic, version, _flags, writer_id, incarnation, seq = SOURCE_NAME.unpack_from(value, HEAD.size)
        if magic == record_format.MAGIC and version == record_format.VERSION:
            ident = (writer_id, incarnation, seq)
    return (*position, ident)


def is_drill_copy(value: bytes | None) -> bool:
    """Whether an output record is a drill's deliberate copy (its flag)."""
    return decode(value) is not None and bool(value[3] & FLAG_DRILL_COPY)  # type: ignore[index]


def encode(partition: int, offset: int, source_value: bytes = b"", flags: int = 0) -> bytes:
    """What the worker writes (the tests' and the drills' own records)."""
    return HEAD.pack(MAGIC, VERSION, flags, partition, offset) + source_value[:48]
