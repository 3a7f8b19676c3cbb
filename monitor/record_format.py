"""The canary record format (version 1): one module for the producer, the reader and Spark.

A canary record value is a fixed 48-byte big-endian header followed by padding up to the
configured record size::

    offset size field
    0      2    magic            b"VG"
    2      1    version          1
    3      1    flags            bit 0 transactional, bit 1 intended abort, bit 2 drill
    4      8    writer_id        first 8 bytes of sha256(instance id), as unsigned
    12     4    incarnation      bumped and persisted on every start of that instance
    16     8    seq              per writer (writer_id, incarnation) and partition, from 0
    24     8    produce_ts_us    wall clock at send, microseconds since the epoch
    32     8    txn_id           per writer transaction number from 1; 0 = no transaction
    40     2    txn_size         records in the whole transaction (all partitions)
    42     2    txn_index        position of this record in its transaction
    44     4    padding_len      bytes that follow the header

The header is fixed-size so that a reader can decode a whole batch at once
(``numpy.frombuffer(b"".join(headers), dtype=HEADER_DTYPE)``) instead of record by record:
the checker has to keep up with a consumer that reads millions of records per second.

The Kafka key of a canary record is ``b"<writer_id hex>/<partition>"``; nothing reads it, it
only makes records human-greppable. Kafka's own producer id and epoch are not visible from
Python and change by themselves, so the writer identity lives in the value.

``decode`` never raises on bad input: foreign or malformed bytes come back as a
:class:`Malformed` value with the reason, so a caller counts them and carries on.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Union

import numpy as np

MAGIC = b"VG"
VERSION = 1
HEADER = struct.Struct(">2sBBQIQQQHHI")
HEADER_SIZE = HEADER.size  # 48
MAX_RECORD_SIZE = 1 << 20

FLAG_TRANSACTIONAL = 0x01
FLAG_INTENDED_ABORT = 0x02
FLAG_DRILL = 0x04
KNOWN_FLAGS = FLAG_TRANSACTIONAL | FLAG_INTENDED_ABORT | FLAG_DRILL

# The same layout for vectorised decoding of many headers at once.
HEADER_DTYPE = np.dtype(
    [
        ("magic", "S2"),
        ("version", "u1"),
        ("flags", "u1"),
        ("writer_id", ">u8"),
        ("incarnation", ">u4"),
        ("seq", ">u8"),
        ("produce_ts_us", ">u8"),
        ("txn_id", ">u8"),
        ("txn_size", ">u2"),
        ("txn_index", ">u2"),
        ("padding_len", ">u4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE


def writer_id_for(instance_id: str) -> int:
    """The 64-bit writer id carried in records for a Vigil instance id."""
    return int.from_bytes(hashlib.sha256(instance_id.encode("utf-8")).digest()[:8], "big")


@dataclass(frozen=True)
class CanaryRecord:
    writer_id: int
    incarnation: int
    seq: int
    produce_ts_us: int
    txn_id: int = 0
    txn_size: int = 0
    txn_index: int = 0
    flags: int = 0

    @property
    def transactional(self) -> bool:
        return bool(self.flags & FLAG_TRANSACTIONAL)

    @property
    def intended_abort(self) -> bool:
        return bool(self.flags & FLAG_INTENDED_ABORT)

    @property
    def drill(self) -> bool:
        return bool(self.flags & FLAG_DRILL)

    @property
    def writer(self) -> tuple[int, int]:
        return (self.writer_id, self.incarnation)


@dataclass(frozen=True)
class Malformed:
    """Bytes that are not a canary record of a version this code reads."""

    reason: str
    length: int


Decoded = Union[CanaryRecord, Malformed]


def encode(record: CanaryRecord, size: int = HEADER_SIZE) -> bytes:
    """Encode ``record`` padded to ``size`` bytes (at least the header)."""
    if size > MAX_RECORD_SIZE:
        raise ValueError(f"record size {size} exceeds {MAX_RECORD_SIZE}")
    padding = max(0, size - HEADER_SIZE)
    header = HEADER.pack(
        MAGIC,
        VERSION,
        record.flags,
        record.writer_id,
        record.incarnation,
        record.seq,
        record.produce_ts_us,
        record.txn_id,
        record.txn_size,
        record.txn_index,
        padding,
    )
    return header + bytes(padding)


def decode(value: bytes | None) -> Decoded:
    """Decode a record value; never raises."""
    if value is None:
        return Malformed("null value", 0)
    n = len(value)
    if n < HEADER_SIZE:
        return Malformed(f"too short: {n} < {HEADER_SIZE} bytes", n)
    try:
        (magic, version, flags, writer_id, incarnation, seq, ts, txn_id, txn_size, txn_index,
         padding) = HEADER.unpack_from(value)
    except (struct.error, TypeError) as exc:  # pragma: no cover - guarded by the length check
        return Malformed(f"unpack failed: {exc}", n)
    if magic != MAGIC:
        return Malformed(f"bad magic {magic!r}", n)
    if version != VERSION:
        return Malformed(f"unsupported version {version}", n)
    if flags & ~KNOWN_FLAGS:
        return Malformed(f"unknown flags 0x{flags:02x}", n)
    if HEADER_SIZE + padding != n:
        return Malformed(f"length {n} != header + padding {HEADER_SIZE + padding}", n)
    if txn_id == 0 and (txn_size or txn_index):
        return Malformed("transaction fields set without a transaction id", n)
    if txn_id and txn_index >= txn_size:
        return Malformed(f"txn_index {txn_index} >= txn_size {txn_size}", n)
    return CanaryRecord(writer_id, incarnation, seq, ts, txn_id, txn_size, txn_index, flags)


def decode_header_rows(rows: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode many headers at once, with exactly the acceptance rules of :func:`decode`: ``rows``
    the values' first :data:`HEADER_SIZE` bytes as an ``(n, 48)`` uint8 array (anything where a
    value is shorter), ``lengths`` the values' whole lengths (-1 for a null value). Returns
    ``(headers, valid)``: a structured array with :data:`HEADER_DTYPE` (rows of invalid values
    zeroed) and a mask of the well-formed canary records. Values are cut to rows by
    :func:`monitor.watch.executor.decode_values`, straight from Arrow buffers."""
    count = len(lengths)
    long_enough = lengths >= HEADER_SIZE
    headers = np.ascontiguousarray(rows, dtype=np.uint8).reshape(-1).view(HEADER_DTYPE)[:count].copy()
    valid = (
        long_enough
        & (headers["magic"] == MAGIC)
        & (headers["version"] == VERSION)
        & ((headers["flags"] & ~np.uint8(KNOWN_FLAGS)) == 0)
        & (lengths == HEADER_SIZE + headers["padding_len"].astype(np.int64))
        & ((headers["txn_id"] != 0) | ((headers["txn_size"] == 0) & (headers["txn_index"] == 0)))
        & ((headers["txn_id"] == 0) | (headers["txn_index"] < headers["txn_size"]))
    )
    headers[~valid] = np.zeros(1, dtype=HEADER_DTYPE)
    return headers, valid


def malformed_kind(value: bytes | None) -> str:
    """How a value that is not a well-formed canary record is counted: ``malformed`` when it
    starts with the canary magic bytes, ``foreign`` otherwise."""
    return "malformed" if (value or b"")[:2] == MAGIC else "foreign"


def record_key(writer_id: int, partition: int) -> bytes:
    return f"{writer_id:016x}/{partition}".encode()
