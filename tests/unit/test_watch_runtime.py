"""The watch's batch handler: replays, crashes between evidence and state, restarts."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from invariants.catalog import Invariant, Isolation
from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, WriteOutcome, WriteRange, WriterRef, encode,
)
from monitor import record_format
from monitor.config import parse
from monitor.watch import state as state_store
from monitor.watch.executor import DECODED_SCHEMA, decode_batches
from monitor.watch.runtime import WatchRuntime

TID = "topic-id-1"
WID = record_format.writer_id_for("w")


def entry(n: int, body) -> bytes:
    return encode(LedgerEntry(WriterRef("w", WID, 1), n, 1, body))


def table(rows: list[tuple[int, int, int, bytes]]) -> pa.Table:
    """Kafka rows as the executors hand them to the driver (decoded by mapInArrow's function)."""
    src, part, off, val = zip(*rows) if rows else ((), (), (), ())
    kafka = pa.table({"src": pa.array(src, pa.int8()), "topic": ["canary" if s < 2 else "ledger" for s in src],
                      "partition": pa.array(part, pa.int32()), "offset": pa.array(off, pa.int64()),
                      "value": pa.array(val, pa.binary())})
    return pa.Table.from_batches(list(decode_batches(kafka.to_batches())), schema=DECODED_SCHEMA)


def canary(seq: int) -> bytes:
    return record_format.encode(record_format.CanaryRecord(WID, 1, seq, 1, 0, 0, 0, 0), 64)


class Df:
    def __init__(self, t: pa.Table) -> None:
        self.t = t

    def toArrow(self) -> pa.Table:  # noqa: N802 (PySpark's name)
        return self.t


def batch_with_lost_write(first_seq: int, count: int, lie_seq: int) -> Df:
    """Records first_seq.. at offsets = seq; the ledger claims lie_seq acked at offset first_seq + 5 (taken)."""
    rows = [(s, 0, off, canary(seq)) for s in (0, 1) for off, seq in
            enumerate(range(first_seq, first_seq + count), start=first_seq)]
    runs = (OutcomeRun(0, first_seq, count, WriteOutcome.ACKED, first_seq, 1, 2),
            OutcomeRun(0, lie_seq, 1, WriteOutcome.ACKED, first_seq + 5, 1, 2))
    writes = (WriteRange(0, first_seq, count), WriteRange(0, lie_seq, 1))
    n = first_seq // 40
    rows += [(2, 0, 2 * n, entry(2 * n, Intent(TID, writes))),
             (2, 0, 2 * n + 1, entry(2 * n + 1, Outcomes(TID, runs)))]
    return Df(table(rows))


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0}})

    def make() -> WatchRuntime:
        rt = WatchRuntime(cfg)
        rt.prober.view.topic_id = TID  # the canary topic's ID, as the prober's metadata has it
        monkeypatch.setattr(rt.topics, "fresh_id", lambda name: TID)
        monkeypatch.setattr(rt.topics, "topic_name_of", lambda tid: "canary")
        monkeypatch.setattr(rt.topics, "leader_of", lambda tid, p: 1)
        return rt

    return make


LOST = [(Invariant.LOST_WRITE, Isolation.READ_COMMITTED), (Invariant.LOST_WRITE, Isolation.READ_UNCOMMITTED)]


def lost(rt: WatchRuntime) -> list[int]:
    """lost_write in each reader, whatever the class."""
    return [sum(n for (inv, iso, _d), n in rt.published.violations.items() if (inv, iso) == k) for k in LOST]


def test_replayed_batch_is_skipped_and_a_torn_batch_is_redone_without_duplicate_evidence(runtime, monkeypatch):
    rt = runtime()
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    assert lost(rt) == [1, 1]
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # replay: already saved
    assert lost(rt) == [1, 1]
    lines = rt.evidence.path.read_text().splitlines()
    assert len(lines) == 2 and {json.loads(x)["invariant"] for x in lines} == {"lost_write"}
    assert {json.loads(x)["leader"] for x in lines} == {1}

    real_save = state_store.save
    monkeypatch.setattr(state_store, "save", lambda *_a: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError):
        rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # evidence written, state not saved
    assert len(rt.evidence.path.read_text().splitlines()) == 4
    monkeypatch.setattr(state_store, "save", real_save)
    assert lost(rt) == [1, 1]  # the half-applied batch was dropped
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # Spark hands it again
    assert lost(rt) == [2, 2]
    lines = rt.evidence.path.read_text().splitlines()
    assert len(lines) == 4 and [json.loads(x)["batch_id"] for x in lines] == [0, 0, 1, 1]

    again = runtime()  # a restarted monitor: counts restored before anything is served
    assert lost(again) == [2, 2]
    assert again.published.records_checked == rt.published.records_checked
    again.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    assert lost(again) == [2, 2]


def test_malformed_and_foreign_records_are_counted_not_fatal(runtime):
    rt = runtime()
    rows = [(1, 0, 0, b"not a canary record"), (1, 0, 1, b"VG" + bytes(10)), (1, 0, 2, canary(0)),
            (2, 0, 0, b"{not json")]
    rt.handle_batch(Df(table(rows)), 0)
    assert rt.published.malformed == {"foreign": 1, "malformed": 1, "ledger": 1}
    assert rt.published.records_checked[Isolation.READ_UNCOMMITTED] == 1
    assert sum(rt.published.violations.values()) == 0
    phases = rt.published.batch_seconds  # vigil_batch_seconds_total: where the batch's time went
    assert set(phases) == {"fetch", "check", "persist"} and all(v >= 0 for v in phases.values())
    assert phases["persist"] > 0  # the state was saved (fsync) inside the batch


def test_unreadable_state_is_an_error_not_a_silent_reset(tmp_path):
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0}})
    cfg.checkpoint_dir().mkdir(parents=True)
    (cfg.checkpoint_dir() / state_store.STATE_FILE).write_bytes(b"garbage")
    with pytest.raises(state_store.StateError, match="unreadable"):
        WatchRuntime(cfg)


def test_healthz_never_depends_on_freshness_and_ready_does(tmp_path, monkeypatch):
    import socket
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": port}})
    rt = WatchRuntime(cfg)
    rt.serve_metrics()

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    assert get("/healthz")[0] == 200
    assert get("/ready")[0] == 503  # the query has not started
    code, body = get("/metrics")
    assert code == 200 and ('vigil_violations_total{durability="guaranteed",invariant="lost_write",'
                            'isolation="read_committed"} 0.0') in body
    rt.status.running, rt.last_batch = True, __import__("time").time()
    assert get("/ready")[0] == 200
    rt.last_batch -= 3600
    assert get("/ready") == (503, "stale: last trigger 3600 s ago\n")
    assert get("/healthz")[0] == 200


def test_writes_below_the_log_start_the_prober_saw_are_expired_not_lost(runtime):
    from monitor.watch.prober import PartitionEnds

    rt = runtime()
    rt.prober.view.topic_id = TID
    rt.prober.view.ends[0] = PartitionEnds(log_start=10)  # retention deleted offsets below 10
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # the lie claims offset 5
    assert lost(rt) == [0, 0]
    assert rt.published.expired_unread == {"log_start": 2}


def test_a_partition_whose_re_read_fails_does_not_hold_up_the_others(runtime, monkeypatch):
    """One partition's leader away (RF 1, its node down): its range stays wanted, and the other
    partitions' re-reads are applied in the same round."""
    from invariants.checker import Refetch
    from monitor.watch.refetch import RangeRead

    rt = runtime()
    wanted = [Refetch(TID, 0, 0, 5), Refetch(TID, 1, 0, 5)]
    monkeypatch.setattr(rt.state.checker, "refetch_wanted", lambda: wanted)

    def read_both(name, partition, lo, hi):
        if partition == 0:
            raise TimeoutError("leader away")
        return {iso: RangeRead([], lo, hi) for iso in (Isolation.READ_COMMITTED, Isolation.READ_UNCOMMITTED)}

    applied = []
    monkeypatch.setattr(rt.refetcher, "read_both", read_both)
    monkeypatch.setattr(rt.state.checker, "apply_refetched", lambda iso, tid, p, reads, covered: applied.append(p))
    rt.service_refetches()
    assert applied == [1, 1] and rt.state.refetches == 1


def test_the_evidence_log_exists_from_the_start_and_a_restart_keeps_what_it_holds(runtime):
    rt = runtime()
    path = rt.cfg.evidence_path()
    assert path.exists() and path.read_bytes() == b""  # followable before any violation
    path.write_bytes(b'{"kept": true}\n')
    runtime()
    assert path.read_bytes() == b'{"kept": true}\n'
