"""The watch's durable state: a versioned document, read back exactly, older versions refused clearly."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from invariants.model import Settings
from monitor.watch import state as state_store
from tests.unit.histories import build, run_live

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SETTINGS = Settings(settle_offsets=4, horizon_offsets=100_000)


def test_a_state_written_by_vigil_0_1_is_refused_naming_its_version(tmp_path):
    shutil.copy(FIXTURES / "state_v1" / "vigil-state.pkl", tmp_path / "vigil-state.pkl")
    with pytest.raises(state_store.StateError, match="version 1 .* cannot be read by this version "
                       f".*state version {state_store.STATE_VERSION}.*move .* away"):
        state_store.load(tmp_path, SETTINGS)


def test_the_saved_document_loads_back_to_the_same_state(tmp_path):
    h = build(2, [("lost_write", 0), ("duplicate", 1), ("partial_txn_unwritten", 0), ("aborted_read", 1), ("outcome_gap", 0)], 4, random.Random(1))
    st = state_store.WatchState(SETTINGS, batch_id=7)
    st.checker = run_live(h, SETTINGS, random.Random(2), restart_p=0.0)
    st.malformed["foreign"] += 3
    st.restarts, st.batches = 2, 9
    st.incidents["T/1"] = ("20260101T000000Z-T-p1-lost_write", 1.5)
    size = state_store.save(tmp_path, st)
    doc = json.loads((tmp_path / state_store.STATE_FILE).read_bytes())
    # nothing held of the ledger: saved as the version before, which an older Vigil reads
    assert doc["format"] == "vigil-watch-state" and doc["version"] == state_store.HOLDLESS_VERSION
    assert size == (tmp_path / state_store.STATE_FILE).stat().st_size
    back = state_store.load(tmp_path, SETTINGS)
    assert back.to_doc() == st.to_doc()
    assert {(inv, iso): n for (inv, iso, _d), n in back.checker.counts.items() if n} == dict(h.expected)
    assert back.malformed == {"foreign": 3} and back.incidents == st.incidents


@pytest.mark.parametrize("content, why", [
    (b"garbage", "unreadable"),
    (b'{"format": "something-else"}', "not a Vigil checker state"),
    (b'{"format": "vigil-watch-state", "version": 99}', "version 99 cannot be read"),
    (b'{"format": "vigil-watch-state", "version": 2}', "version 2 cannot be read"),
    (b'{"format": "vigil-watch-state", "version": 3}', "damaged"),
])
def test_a_bad_state_file_is_an_error_never_a_silent_reset(tmp_path, content, why):
    (tmp_path / state_store.STATE_FILE).write_bytes(content)
    with pytest.raises(state_store.StateError, match=why):
        state_store.load(tmp_path, SETTINGS)


def test_latencies_saved_over_the_buckets_before_are_carried_over_to_today_s(tmp_path):
    import numpy as np

    from invariants.catalog import Isolation
    from monitor.metrics import E2E_BUCKETS, E2E_BUCKETS_BEFORE

    st = state_store.WatchState(SETTINGS, batch_id=3)
    st.add_e2e(Isolation.READ_COMMITTED, np.arange(1, len(E2E_BUCKETS) + 2), 9.5)
    state_store.save(tmp_path, st)
    doc = json.loads((tmp_path / state_store.STATE_FILE).read_bytes())
    assert doc["e2e_bounds"] == list(E2E_BUCKETS)
    old = list(range(1, len(E2E_BUCKETS_BEFORE) + 2))  # as a version without the bounds saved it
    doc["e2e"] = [["read_committed", old, 9.5]]
    del doc["e2e_bounds"]
    (tmp_path / state_store.STATE_FILE).write_text(json.dumps(doc))
    counts = state_store.load(tmp_path, SETTINGS).e2e_counts[Isolation.READ_COMMITTED].tolist()
    assert len(counts) == len(E2E_BUCKETS) + 1 and sum(counts) == sum(old)
    for i, bound in enumerate((*E2E_BUCKETS_BEFORE, float("inf"))):  # the same count at or below each old bound
        j = len(E2E_BUCKETS) if bound == float("inf") else E2E_BUCKETS.index(bound)
        assert sum(counts[:j + 1]) == sum(old[:i + 1])


def test_the_state_is_encoded_as_the_standard_library_would_read_it_whatever_it_holds():
    """orjson, with the standard library's encoder for what orjson refuses (an integer beyond 64 bits)."""
    encode = state_store.encode
    doc = {"ids": [2**64 - 1, -(2**63), 0], "f": [1.5, 1e-7, 1795824245.123456], "s": "é", "t": (1, 2), 3: {"k": None}}
    assert json.loads(encode(doc)) == json.loads(json.dumps(doc))
    big = {"x": [2**64, 2**70]}
    assert json.loads(encode(big)) == big


def test_a_version_4_state_with_header_indexes_one_row_per_write_loads_as_this_version_saves_it(tmp_path):
    """Version 5 saves a transaction's header indexes as runs; a version 4 state (one row per
    write, else the same) is read, and saved again as version 5, to the same state."""
    h = build(2, [("partial_txn_unwritten", 0), ("aborted_read", 1), ("partial_txn_unwritten", 1)], 4,
              random.Random(3))
    st = state_store.WatchState(SETTINGS, batch_id=3)
    st.checker = run_live(h, SETTINGS, random.Random(4), restart_p=0.0)
    state_store.save(tmp_path, st)
    doc = json.loads((tmp_path / state_store.STATE_FILE).read_bytes())
    txns = doc["checker"]["txns"]["txns"]
    assert any(t["indexes_runs"] for t in txns)  # (the history's transactions were read)
    for t in txns:
        t["indexes"] = [[tid, p, wid, inc, seq + i, first + i * step]
                        for tid, p, runs in t.pop("indexes_runs") for wid, inc, seq, first, n, step in runs
                        for i in range(n)]
    doc["version"] = 4
    (tmp_path / state_store.STATE_FILE).write_text(json.dumps(doc))
    assert state_store.load(tmp_path, SETTINGS).to_doc() == st.to_doc()
