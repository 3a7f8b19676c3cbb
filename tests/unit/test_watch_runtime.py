"""The watch's batch handler: replays, crashes between evidence and state, restarts."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

from invariants.catalog import Invariant, Isolation
from invariants.ledger_format import (
    Intent, LedgerEntry, OutcomeRun, Outcomes, WriteOutcome, WriteRange, WriterRef, encode,
)
from invariants.model import READERS, Durability, Violation
from monitor import record_format
from monitor.config import parse
from monitor.metrics import E2E_BUCKETS
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


@pytest.fixture(params=["in_handler", "overlapped"])
def runtime(request, tmp_path, monkeypatch):
    """Each test twice: batches applied in Spark's handler, and applied in the applier thread once
    written ahead (``watch.overlap_check``), the test then waiting for the applier as Spark's next
    batch would (:meth:`WatchRuntime.catch_up`: a failure of the applier is raised there)."""
    return runtime_maker(tmp_path, monkeypatch, overlap=request.param == "overlapped")


def runtime_maker(tmp_path, monkeypatch, overlap: bool = False):
    """Makes runtimes on one state directory (each a monitor (re)started there)."""
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0}, "watch": {"overlap_check": overlap}})

    def make() -> WatchRuntime:
        rt = WatchRuntime(cfg)
        if overlap:
            handed = rt.handle_batch

            def handle_and_wait(df, batch_id):
                handed(df, batch_id)
                rt.catch_up()

            monkeypatch.setattr(rt, "handle_batch", handle_and_wait)
        rt.prober.view.topic_id = TID  # the canary topic's ID, as the prober's metadata has it
        monkeypatch.setattr(rt.topics, "fresh_id", lambda name, max_age_s=None: TID)
        monkeypatch.setattr(rt.topics, "topic_name_of", lambda tid: "canary")
        monkeypatch.setattr(rt.topics, "leader_of", lambda tid, p: 1)
        monkeypatch.setattr(rt.refetcher, "read_both", read_log_again)
        return rt

    return make


def read_log_again(topic: str, partition: int, lo: int, hi: int) -> dict:
    """The re-fetch, from the log these tests' batches are cut from: partition 0's offset o holds
    the canary record of seq o (batch_with_lost_write). A lost write is counted once its offset
    was read again after the batch (invariants.acked_writes): by this, at the end of the batch."""
    from monitor.watch.batch import to_reads
    from monitor.watch.refetch import RangeRead

    hi = hi if partition == 0 else lo
    reads, _malformed, _ts = to_reads(list(range(lo, hi)), [canary(o) for o in range(lo, hi)])
    return {iso: RangeRead(reads, lo, max(lo, hi)) for iso in READERS}


def read_both_failing_on(partition: int, tried: list | None = None):
    """A re-fetcher whose reads of ``partition`` fail (its leader away) and that reads nothing
    elsewhere; ``tried`` collects the partitions it was asked for."""
    from monitor.watch.refetch import RangeRead

    def read_both(name, p, lo, hi):
        if tried is not None:
            tried.append(p)
        if p == partition:
            raise TimeoutError("leader away")
        return {iso: RangeRead([], lo, hi) for iso in READERS}

    return read_both


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
    saves = iter([real_save, lambda *_a: (_ for _ in ()).throw(OSError("disk gone"))])
    monkeypatch.setattr(state_store, "save", lambda *a: next(saves)(*a))
    # the batch is saved; the re-read that confirms its loss writes the evidence, then its save fails
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    assert len(rt.evidence.path.read_text().splitlines()) == 4
    monkeypatch.setattr(state_store, "save", real_save)
    assert lost(rt) == [1, 1]  # the half-applied re-read was dropped
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # Spark hands it again: already saved
    assert lost(rt) == [1, 1]
    rt.service_refetches()  # the next round reads it again (after the prober's, or the next batch)
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
    overlapped = {"wait", "write_ahead"} if rt.cfg.watch.overlap_check else set()  # (the handler's, beside the applier)
    assert set(phases) == {"fetch", "check", "persist", *overlapped} and all(v >= 0 for v in phases.values())
    assert phases["persist"] > 0  # the state was saved (fsync) inside the batch
    if overlapped:
        assert phases["write_ahead"] > 0  # the batch's file written (fsync) before the applier took it


def test_a_batch_handler_waiting_for_the_applier_before_it_counts_that_as_wait_not_fetch(tmp_path, monkeypatch):
    """vigil_batch_seconds_total with the overlap: the applier of the batch before holds the batch
    lock while it checks; the next batch's handler, its fetch done, waits for it: ``wait``, not ``fetch``."""
    from monitor.watch import runtime as runtime_module

    slow_s = 0.6
    checked = runtime_module.apply_batch

    def slow_check(*args, **kwargs):
        time.sleep(slow_s)
        return checked(*args, **kwargs)

    monkeypatch.setattr(runtime_module, "apply_batch", slow_check)
    rt = runtime_maker(tmp_path, monkeypatch, overlap=True)()
    WatchRuntime.handle_batch(rt, Df(table([(0, 0, 0, canary(0))])), 0)  # (Spark's: no wait after)
    WatchRuntime.handle_batch(rt, Df(table([(0, 0, 1, canary(1))])), 1)  # while batch 0 is checked
    rt.catch_up()
    phases = rt.published.batch_seconds
    assert phases["wait"] >= slow_s / 2
    assert phases["fetch"] < slow_s / 2
    assert rt.state.batch_id == 1


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
    # the usual reasons a save fails, from 0: an alert on increase() sees the first failure too
    assert 'vigil_state_save_failures_total{reason="ENOSPC"} 0.0' in body
    assert 'vigil_state_save_failures_total{reason="EFBIG"} 0.0' in body
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

    rt = runtime()
    wanted = [Refetch(TID, 0, 0, 5), Refetch(TID, 1, 0, 5)]
    monkeypatch.setattr(rt.state.checker, "refetch_wanted", lambda: wanted)
    applied = []
    monkeypatch.setattr(rt.refetcher, "read_both", read_both_failing_on(0))
    monkeypatch.setattr(rt.state.checker, "apply_refetched", lambda iso, tid, p, reads, covered: applied.append(p))
    rt.service_refetches()
    assert applied == [1, 1] and rt.state.refetches == 1


def test_a_re_read_during_which_the_topic_was_deleted_and_created_again_is_dropped(runtime, monkeypatch):
    """The re-fetcher reads by name: a topic deleted and created again while a range was read may
    hand back the new topic's records at the old ID's offsets. Applied under the old ID, they would
    be two records at one offset (inconsistent_offset, a false alarm); the name is looked up again
    after the read, uncached, and such a read is dropped."""
    from invariants.checker import Refetch

    rt = runtime()
    wanted = [Refetch(TID, 0, 0, 5), Refetch(TID, 1, 0, 5)]
    monkeypatch.setattr(rt.state.checker, "refetch_wanted", lambda: wanted)
    ids = {"now": TID}
    looked: list = []

    def fresh_id(name, max_age_s=None):
        looked.append(max_age_s)
        return ids["now"]

    def read_both(name, p, lo, hi):
        from monitor.watch.refetch import RangeRead
        if p == 0 and not looked.count(0.0):
            ids["now"] = "new-id"  # deleted and created again while partition 0 was first read
        return {iso: RangeRead([], lo, hi) for iso in READERS}

    applied: list = []
    monkeypatch.setattr(rt.topics, "fresh_id", fresh_id)
    monkeypatch.setattr(rt.refetcher, "read_both", read_both)
    monkeypatch.setattr(rt.state.checker, "apply_refetched", lambda iso, tid, p, reads, covered: applied.append(p))
    rt.service_refetches()
    assert applied == [] and rt.state.refetches == 0  # partition 1's pre-check saw the new ID too
    assert 0.0 in looked  # the look-up after the read was not answered from the cache
    ids["now"] = TID  # (as if the name pointed back: only the read's own check decides)
    rt.service_refetches()
    assert applied == [0, 0, 1, 1]


def test_a_direct_read_below_sparks_first_read_is_all_or_nothing_and_of_the_id_asked_for(runtime, monkeypatch):
    """The read below Spark's first read of a recreated topic (TopicLifecycle._fill_below): the
    records when read up to the first read and the name still points at the ID after the read
    (uncached); None when the read stopped short (a gap the checker would take for offsets without
    records), the name moved on before or after it, or the read failed."""
    from invariants.model import RC, Read
    from monitor.watch.refetch import RangeRead

    rt = runtime()
    ids = {"now": TID}
    looked: list = []

    def fresh_id(name, max_age_s=None):
        looked.append(max_age_s)
        return ids["now"]

    answer = {"range": lambda lo, hi: RangeRead([Read(lo, ("x", 1, 1))], lo, hi)}
    monkeypatch.setattr(rt.topics, "fresh_id", fresh_id)
    monkeypatch.setattr(rt.filler, "read", lambda iso, name, p, lo, hi: answer["range"](lo, hi))
    assert rt._fill(RC, "c", TID, 0, 0, 5) == [Read(0, ("x", 1, 1))]
    assert looked == [0.0, 0.0]  # before and after the read, never from the cache
    answer["range"] = lambda lo, hi: RangeRead([Read(2, ("x", 1, 1))], 2, hi)  # retention took 0 and 1
    assert rt._fill(RC, "c", TID, 0, 0, 5) == [Read(2, ("x", 1, 1))]
    answer["range"] = lambda lo, hi: RangeRead([Read(lo, ("x", 1, 1))], lo, hi - 1)  # stopped short
    assert rt._fill(RC, "c", TID, 0, 0, 5) is None
    answer["range"] = lambda lo, hi: (ids.update(now="new-id"), RangeRead([], lo, hi))[1]  # recreated meanwhile
    assert rt._fill(RC, "c", TID, 0, 0, 5) is None
    assert rt._fill(RC, "c", TID, 0, 0, 5) is None  # (and the name no longer points at it)

    def fails(lo, hi):
        raise RuntimeError("leader away")

    ids["now"] = TID
    answer["range"] = fails
    assert rt._fill(RC, "c", TID, 0, 0, 5) is None


def test_ranges_of_a_partition_whose_re_read_failed_let_the_others_go_first(runtime, monkeypatch):
    """More ranges of an unreadable partition than a round takes, sorted first: it is tried once
    per round and then left alone for a while, so the others' verdicts are not starved."""
    from invariants.checker import Refetch
    from monitor.watch import runtime as runtime_module

    rt = runtime()
    many = runtime_module.MAX_REFETCHES_PER_ROUND + 2
    wanted = [Refetch(TID, 0, 10 * i, 10 * i + 5) for i in range(many)] + [Refetch(TID, 1, 0, 5)]
    monkeypatch.setattr(rt.state.checker, "refetch_wanted", lambda: wanted)
    tried: list[int] = []
    monkeypatch.setattr(rt.refetcher, "read_both", read_both_failing_on(0, tried))
    monkeypatch.setattr(rt.state.checker, "apply_refetched", lambda *_a: None)
    rt.service_refetches()
    assert tried == [0, 1]  # once, not once per range: the other partitions' ranges are reached
    tried.clear()
    rt.service_refetches()
    assert tried == [1]  # a while later it is tried again


def test_the_evidence_log_exists_from_the_start_and_a_restart_keeps_what_it_holds(runtime):
    rt = runtime()
    path = rt.cfg.evidence_path()
    assert path.exists() and path.read_bytes() == b""  # followable before any violation
    path.write_bytes(b'{"kept": true}\n')
    runtime()
    assert path.read_bytes() == b'{"kept": true}\n'


def full_disk(monkeypatch, code: int = errno.ENOSPC) -> None:
    """The state's volume full: every save of the state fails with ``code``."""
    def fail(*_a, **_k):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(state_store.os, "replace", fail)


def stall(partition: int) -> Violation:
    return Violation(Invariant.STALLED_POLL, Isolation.READ_COMMITTED, TID, partition, (5, 9))


def test_a_full_disk_fails_the_batch_with_a_clear_error_and_nothing_is_lost_or_counted_twice(runtime, monkeypatch):
    rt = runtime()
    rt.status.running = True
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    assert lost(rt) == [1, 1] and rt.ready()[0]
    with monkeypatch.context() as m:
        full_disk(m)
        with pytest.raises(state_store.StateSaveError) as err:
            rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
        message = str(err.value)
        # overlapped, the batch written ahead is the first file the full volume refuses
        refused = "pending-batches/1.arrow" if rt.cfg.watch.overlap_check else state_store.STATE_FILE
        assert "No space left on device (ENOSPC)" in message and refused in message
        assert "nothing of this batch is exported" in message and "vigil state rebuild" in message
        assert lost(rt) == [1, 1]  # /metrics keeps what was saved
        assert rt.published.save_failures == {"ENOSPC": 1}
        assert rt.ready() == (False, "checker state not saved (ENOSPC)")
        assert not (rt.dir / (state_store.STATE_FILE + ".tmp")).exists()  # no partial file takes space
        rt.record_liveness([stall(0)])  # the prober between batches: counted, not yet exported
        rt.count_restart()  # the supervisor restarts the query: it must not die of the full disk
        assert rt.published.save_failures == {"ENOSPC": 3}
        rt.refresh()  # the gauges recomputed between batches: what is not saved is still not exported
        stalls = (Invariant.STALLED_POLL, Isolation.READ_COMMITTED, Durability.GUARANTEED)
        assert rt.published.violations.get(stalls, 0) == 0 and rt.published.restarts == 0
        with pytest.raises(state_store.StateSaveError):
            rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # handed again, still full
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # space again: handed again, saved
    assert lost(rt) == [2, 2] and rt.ready()[0]
    assert rt.published.violations[(Invariant.STALLED_POLL, Isolation.READ_COMMITTED, Durability.GUARANTEED)] == 1
    assert rt.published.restarts == 1
    lines = [json.loads(x) for x in rt.evidence.path.read_text().splitlines()]
    assert sorted(x["invariant"] for x in lines) == ["lost_write"] * 4 + ["stalled_poll"]  # each once
    again = runtime()  # and a restart finds it all saved
    assert lost(again) == [2, 2] and again.published.restarts == 1
    assert again.published.violations[(Invariant.STALLED_POLL, Isolation.READ_COMMITTED, Durability.GUARANTEED)] == 1


def test_evidence_that_cannot_be_written_is_a_failed_save_too(runtime, monkeypatch):
    rt = runtime()
    said: list[str] = []
    monkeypatch.setattr(rt, "progress", said.append)
    with monkeypatch.context() as m:
        m.setattr(rt.evidence, "write", lambda *_a, **_k: (_ for _ in ()).throw(OSError(errno.EFBIG, "File too large")))
        rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # saved; the re-read finding its loss is not
    assert rt.published.save_failures == {"EFBIG": 1} and lost(rt) == [0, 0]
    assert any(re.search(r"checker state not saved: .*evidence\.jsonl: File too large \(EFBIG\)", m) for m in said)
    assert rt.state.checker.refetch_wanted()  # still to be read again
    rt.service_refetches()
    assert lost(rt) == [1, 1]


def test_liveness_counted_while_the_disk_was_full_gets_its_evidence_when_a_restart_saves_first(runtime, monkeypatch):
    rt = runtime()
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    with monkeypatch.context() as m:
        full_disk(m)
        rt.record_liveness([stall(0)])
    rt.count_restart()  # the supervisor's restart is the first save once there is space again
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    lines = [json.loads(x)["invariant"] for x in rt.evidence.path.read_text().splitlines()]
    assert sorted(lines) == ["lost_write"] * 4 + ["stalled_poll"]


def test_a_full_disk_that_also_holds_stderr_kills_nothing(tmp_path, monkeypatch):
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0}})

    def stderr_full(_message: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    rt = WatchRuntime(cfg, stderr_full)
    with monkeypatch.context() as m:
        full_disk(m)
        rt.count_restart()  # the supervisor's call: neither the save nor saying it may raise
    assert rt.published.save_failures == {"ENOSPC": 1}


@contextlib.contextmanager
def held_by_another_process(directory):
    """A state directory claimed (`state.own`) by another process while the block runs; yields its pid."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from monitor.watch.state import own; own(Path(sys.argv[1])); print('held', flush=True); "
                               "time.sleep(60)", str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_second_monitor_on_the_same_state_is_refused_naming_the_first(tmp_path):
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0}})
    with held_by_another_process(cfg.checkpoint_dir()) as pid:
        with pytest.raises(state_store.StateError, match=rf"in use by another process \(pid {pid}"):
            WatchRuntime(cfg)
    WatchRuntime(cfg)  # the lock went with its process


def test_a_high_watermark_gone_backwards_is_still_to_be_read_again_after_a_save_that_failed(runtime, monkeypatch):
    rt = runtime()
    monkeypatch.setattr(rt, "service_refetches", lambda: None)  # no cluster to read from here
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    monkeypatch.setattr(rt.prober, "take_rewinds", lambda: [(TID, 0, 10, 30)])
    rt.after_probe()  # the prober saw the high watermark go back from 30 to 10: [0, 30) is suspect (cut at or below 10)
    wanted = {k: [list(r) for r in ranges] for k, ranges in rt.state.checker.suspects.items()}
    assert wanted and all(ranges == [[0, 30]] for ranges in wanted.values())
    with monkeypatch.context() as m:
        full_disk(m)
        with pytest.raises(state_store.StateSaveError):
            rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    assert dict(rt.state.checker.suspects) == wanted  # the revert kept what the prober will not hand again
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    assert runtime().state.checker.suspects  # and it was saved


def test_a_refusal_of_spark_s_ledger_source_names_the_ledger_s_settings(tmp_path, monkeypatch):
    from monitor import client_errors

    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0},
                 "ledger": {"kafka": {"bootstrap_servers": "ledger:9092",
                                      "security": {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "ledger-user",
                                                   "sasl_password": "x"}}}})
    said: list[str] = []
    monkeypatch.setattr(client_errors.ERRORS, "say", said.append)
    monkeypatch.setattr(client_errors.ERRORS, "_said", {})
    WatchRuntime(cfg).query_failed(
        "Query terminated with exception\\nCaused by: org.apache.kafka.common.errors.TopicAuthorizationException: "
        f"Not authorized to access topics: [{cfg.ledger.topic}]")
    assert said and "'ledger-user'" in said[0] and said[0].startswith("vigil: spark: an ACL does not allow")


def test_a_lock_file_that_cannot_be_made_is_a_clear_error(tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the checkpoint directory should be")
    with pytest.raises(state_store.StateError, match="cannot open .*vigil.lock"):
        state_store.own(blocked)


def test_caught_up_waits_for_the_re_reads_the_verdicts_wait_for(runtime, monkeypatch):
    """The end of a run: the last trigger read everything, and the loss it found is counted once its
    offset was read again (the re-read failed after the batch: the broker was away)."""
    from monitor.watch import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "REFETCH_RETRY_S", 0.2)
    rt = runtime()
    real = rt.refetcher.read_both
    monkeypatch.setattr(rt.refetcher, "read_both", read_both_failing_on(0))
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    assert lost(rt) == [0, 0] and rt.state.checker.refetch_wanted()
    monkeypatch.setattr(rt.refetcher, "read_both", real)
    rt.on_progress(time.time() + 60)  # a trigger, started after the wait began, found nothing left
    assert rt.wait_caught_up(timeout_s=10)
    assert lost(rt) == [1, 1] and not rt.state.checker.refetch_wanted()


def test_caught_up_gives_up_on_re_reads_that_cannot_be_made(runtime, monkeypatch):
    rt = runtime()
    monkeypatch.setattr(rt.refetcher, "read_both", read_both_failing_on(0))
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    rt.on_progress(time.time() + 60)
    began = time.monotonic()
    assert rt.wait_caught_up(timeout_s=10, reread_s=0.5)
    assert 0.5 <= time.monotonic() - began < 5 and lost(rt) == [0, 0]


def test_with_the_re_fetch_thread_a_batch_returns_before_its_re_reads_and_they_follow(runtime, monkeypatch):
    rt = runtime()
    reading, release = threading.Event(), threading.Event()

    def slow_read(topic, partition, lo, hi):  # a re-read that takes as long as the test says
        reading.set()
        assert release.wait(10)
        return read_log_again(topic, partition, lo, hi)

    monkeypatch.setattr(rt.refetcher, "read_both", slow_read)
    rt.start_refetching()
    try:
        rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # returns while its re-read is still being made
        assert reading.wait(10)
        assert lost(rt) == [0, 0] and rt.state.batch_id == 0  # Spark's next trigger need not wait for it
        release.set()
        deadline = time.monotonic() + 10
        while lost(rt) != [1, 1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost(rt) == [1, 1]
    finally:
        release.set()
        rt.stop.set()
        rt.stop_refetching()
    assert not rt._refetch_thread.is_alive()


def test_stopping_closes_the_re_fetcher_only_after_its_read_under_way_ended_and_applies_nothing(runtime, monkeypatch):
    rt = runtime()
    reading, active, events = threading.Event(), [], []

    def read_until_stopped(topic, partition, lo, hi):  # a read that ends at its next poll after the stop
        active.append(1)
        reading.set()
        while not rt.stop.wait(0.05):
            pass
        time.sleep(1.0)  # (well past the 0.2 s the first stop_refetching waits, on a loaded machine too)
        events.append("read ended")
        active.pop()
        return read_log_again(topic, partition, lo, hi)

    monkeypatch.setattr(rt.refetcher, "read_both", read_until_stopped)
    monkeypatch.setattr(rt.refetcher, "close", lambda: events.append("closed while reading" if active else "closed"))
    rt.start_refetching()
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    assert reading.wait(10)
    rt.stop.set()
    rt.stop_refetching(timeout_s=0.1)  # the read outlasts the wait: its consumers are not closed under it
    assert events == []
    rt.stop_refetching()
    assert events == ["read ended", "closed"]
    assert lost(rt) == [0, 0] and rt.state.checker.refetch_wanted()  # not applied: still to be read again


def test_a_planned_batch_on_partitions_a_recreated_topic_lacks_is_planned_again_never_a_taken_one(runtime):
    """Found on the local cluster: a partition added, then the topic deleted within the writers'
    5 s look at it, recreated with the configured 2: the batch Spark had planned on 3 failed after
    60 s at every restart. A failed query's unrunnable planned batch is removed and planned again —
    never one Spark committed or the checker took, and not while the topic is missing."""
    from tests.unit.test_eos_wiring import offset_log

    rt = runtime()
    ck = rt.cfg.spark_checkpoint_dir()
    name = rt.cfg.canary.name
    three = [{name: {"0": 9, "1": 4, "2": 7}}, {name: {"0": 9, "1": 4, "2": 7}}, {"ledger": {"0": 3}}]
    offset_log(rt.cfg, 0, three)
    (ck / "offsets" / ".0.crc").write_text("x")
    rt.prober.view.partitions = 2
    rt.prober.view.missing_since = 1.0  # missing: nothing is known of it yet
    rt.query_failed("boom")
    assert (ck / "offsets" / "0").exists()
    rt.prober.view.missing_since = 0.0
    rt.state.batch_id = 0  # the checker took it: left as it is
    rt.query_failed("boom")
    assert (ck / "offsets" / "0").exists()
    rt.state.batch_id = -1
    (ck / "commits").mkdir()
    (ck / "commits" / "0").write_text("v1")  # Spark finished it
    rt.query_failed("boom")
    assert (ck / "offsets" / "0").exists()
    (ck / "commits" / "0").unlink()
    rt.prober.view.partitions = 3  # the topic has them all: it runs as planned
    rt.query_failed("boom")
    assert (ck / "offsets" / "0").exists()
    rt.prober.view.partitions = 2
    rt.query_failed("Timeout of 60000ms expired before the position for partition vigil-canary-2 could be determined")
    assert not (ck / "offsets" / "0").exists() and not (ck / "offsets" / ".0.crc").exists()
    offset_log(rt.cfg, 1, [{name: {"0": 9, "1": 4}}, {name: {"0": 9, "1": 4}}, {"ledger": {"0": 3}}])
    rt.query_failed("boom")  # its partitions are there
    assert (ck / "offsets" / "1").exists()


def test_no_check_counts_produce_to_read_latency_only_and_keeps_its_directory_apart(tmp_path, monkeypatch):
    """`vigil run --no-check` (the pipeline's floor, `vigil bench --live`): a batch's latency is counted
    as a checking monitor counts it, and nothing is judged — the lost write of the same batch goes
    uncounted, as do liveness verdicts and high watermarks gone backwards. Its checkpoint directory is
    marked: a checking monitor refuses it, and it refuses a checker's."""
    # each record 15 s old when the batch is cut: in the (10, 30] bucket at its check, however slow the machine
    monkeypatch.setattr(sys.modules[__name__], "canary", lambda seq: record_format.encode(
        record_format.CanaryRecord(WID, 1, seq, int((time.time() - 15) * 1e6), 0, 0, 0, 0), 64))

    def counted(check: bool, where) -> WatchRuntime:
        cfg = parse({"state_dir": str(where), "metrics": {"port": 0}})
        rt = WatchRuntime(cfg, check=check)
        rt.prober.view.topic_id = TID
        monkeypatch.setattr(rt.topics, "fresh_id", lambda name, max_age_s=None: TID)
        monkeypatch.setattr(rt.topics, "topic_name_of", lambda tid: "canary")
        monkeypatch.setattr(rt.topics, "leader_of", lambda tid, p: 1)
        monkeypatch.setattr(rt.refetcher, "read_both", read_log_again)
        rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
        rt.catch_up()
        return rt

    checker, floor = counted(True, tmp_path / "checker"), counted(False, tmp_path / "floor")
    assert lost(checker) == [1, 1] and lost(floor) == [0, 0]
    for iso in READERS:
        assert list(floor.published.e2e_counts[iso]) == list(checker.published.e2e_counts[iso])
        assert floor.published.e2e_counts[iso][E2E_BUCKETS.index(30)] == 40  # each record's latency, once per reader
        assert floor.published.records_checked.get(iso, 0) == 0
    floor.record_liveness([Violation(Invariant.STALLED_POLL, Isolation.READ_COMMITTED, TID, 0)])
    monkeypatch.setattr(floor.prober, "take_rewinds", lambda: [(TID, 0, 0, 40)])
    floor.after_probe()
    assert sum(floor.published.violations.values()) == 0 and sum(floor.state.liveness.values()) == 0
    assert floor.unsaved_rewinds == [] and floor.state.checker.refetch_wanted() == []
    stalled = {(Invariant.STALLED_POLL, Isolation.READ_COMMITTED): 1}  # an episode the prober's rounds opened
    for rt in (checker, floor):
        rt.prober.view.open_stalls = dict(stalled)
        rt.refresh()
    assert checker.published.stalls_open == stalled and floor.published.stalls_open == {}
    floor.owner.release()
    checker.owner.release()
    floor_cfg = parse({"state_dir": str(tmp_path / "floor"), "metrics": {"port": 0}})
    with pytest.raises(state_store.StateError, match=r"--no-check.*without checking them"):
        WatchRuntime(floor_cfg)
    with pytest.raises(state_store.StateError, match=r"holds a checker's state"):
        WatchRuntime(parse({"state_dir": str(tmp_path / "checker"), "metrics": {"port": 0}}), check=False)
    WatchRuntime(floor_cfg, check=False).owner.release()  # its own again (a refusal left no lock behind)
    from monitor.watch import rebuild as rebuilder  # a rebuild moves the mark aside with the Spark checkpoint
    rebuilder.rebuild(floor_cfg, lambda: rebuilder.evidence_from_file(floor_cfg.evidence_path()), "file")
    WatchRuntime(floor_cfg).owner.release()
