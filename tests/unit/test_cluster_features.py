"""Reading finalized feature levels out of an ApiVersions v3 answer."""

import struct

import pytest

from monitor.cluster import features


def _cs(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def _tag(tag: int, data: bytes) -> bytes:
    return bytes([tag, len(data)]) + data


def answer(finalized: dict[str, int], error: int = 0, epoch: int = 5) -> bytes:
    api_keys = b"".join(struct.pack(">hhh", k, 0, 9) + b"\x00" for k in (0, 1, 18))
    supported = bytes([2]) + _cs("metadata.version") + struct.pack(">hh", 1, 27) + b"\x00"
    final = bytes([len(finalized) + 1]) + b"".join(_cs(n) + struct.pack(">hh", lvl, lvl) + b"\x00"
                                                   for n, lvl in finalized.items())
    tags = _tag(0, supported) + _tag(1, struct.pack(">q", epoch)) + _tag(2, final)
    return (struct.pack(">ih", 7, error) + bytes([4]) + api_keys + struct.pack(">i", 0) + bytes([3]) + tags)


def test_finalized_levels_are_read_past_the_api_keys_and_the_other_tags():
    got = features.parse_response(answer({"metadata.version": 27, features.ELR_FEATURE: 1}))
    assert got == {"metadata.version": 27, "eligible.leader.replicas.version": 1}
    assert features.ELR_FEATURE not in features.parse_response(answer({"metadata.version": 27}))


def test_an_error_answer_or_one_without_a_valid_finalized_list_is_no_answer():
    with pytest.raises(ValueError, match="error code 35"):
        features.parse_response(answer({}, error=35))
    with pytest.raises(ValueError, match="no finalized features"):
        features.parse_response(answer({"metadata.version": 27}, epoch=-1))
    with pytest.raises(ValueError, match="no finalized features"):
        features.parse_response(answer({}))  # not even metadata.version: not loaded yet


def test_the_request_is_sized_for_the_wire():
    req = features.request(correlation_id=9)
    assert struct.unpack(">i", req[:4])[0] == len(req) - 4
    assert struct.unpack(">hhi", req[4:12]) == (features.API_VERSIONS, 3, 9)
