"""The cluster's finalized feature levels (e.g. ``eligible.leader.replicas.version``), asked of a
broker with one ApiVersions v3 request: the Python client has no DescribeFeatures call, and a
chaos scenario that needs Eligible Leader Replicas on or off must check the cluster it runs on,
not the config that formatted it."""

from __future__ import annotations

import socket
import struct

API_VERSIONS = 18
FINALIZED_FEATURES_EPOCH_TAG = 1
FINALIZED_FEATURES_TAG = 2
ELR_FEATURE = "eligible.leader.replicas.version"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def varint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str:
        n = self.varint() - 1
        text = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return text

    def skip_tags(self) -> None:
        for _ in range(self.varint()):
            self.varint()
            self.pos += self.varint()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            return bytes(out + bytes([n]))
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return _varint(len(raw) + 1) + raw


def request(correlation_id: int = 1) -> bytes:
    """ApiVersions v3, request header v2; sized for the wire."""
    client = b"vigil"
    header = struct.pack(">hhih", API_VERSIONS, 3, correlation_id, len(client)) + client + b"\x00"
    body = _compact_string("vigil") + _compact_string("1") + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def parse_response(payload: bytes) -> dict[str, int]:
    """Finalized feature -> max version level, from an ApiVersions v3 response (after its size).
    A feature at level 0 is not listed, as brokers send it. Raises ValueError when the answer is
    an error or carries no valid finalized list."""
    r = _Reader(payload)
    r.take(">i")  # correlation id (response header v0, as ApiVersions always answers)
    error = r.take(">h")
    if error:
        raise ValueError(f"ApiVersions answered error code {error}")
    for _ in range(r.varint() - 1):  # api keys: key, min, max, tags
        r.pos += 6
        r.skip_tags()
    r.take(">i")  # throttle time
    features: dict[str, int] = {}
    epoch = -1
    for _ in range(r.varint()):
        tag, size = r.varint(), r.varint()
        end = r.pos + size
        if tag == FINALIZED_FEATURES_EPOCH_TAG:
            epoch = r.take(">q")
        elif tag == FINALIZED_FEATURES_TAG:
            for _ in range(r.varint() - 1):
                name = r.compact_string()
                features[name] = r.take(">h")
                r.take(">h")  # min version level
                r.skip_tags()
        r.pos = end
    # the finalized list is valid only with an epoch; a broker that has not loaded the metadata
    # yet (no metadata.version) would read as "every feature off"
    if epoch < 0 or "metadata.version" not in features:
        raise ValueError("the broker has no finalized features yet")
    return features


def finalized_features(host: str, port: int, timeout_s: float = 10.0) -> dict[str, int]:
    """Ask one broker (plaintext listener) for the cluster's finalized feature levels."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request())
        size = struct.unpack(">i", _recv(sock, 4))[0]
        return parse_response(_recv(sock, size))


def _recv(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("the broker closed the connection mid-answer")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
