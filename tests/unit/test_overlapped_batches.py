"""``watch.overlap_check``: a batch written ahead, applied in the applier thread while Spark fetches
the next, and applied exactly once across crashes, failed saves and Spark handing it again."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.watch import rebuild as rebuilder
from monitor.watch import runtime as runtime_module
from monitor.watch import state as state_store
from monitor.watch import write_ahead
from monitor.watch.batch import EosInput
from tests.unit.test_watch_runtime import batch_with_lost_write, lost, runtime_maker


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    return runtime_maker(tmp_path, monkeypatch, overlap=True)


def raw_handler(rt):
    """The handler Spark calls (the fixture's wraps it to wait for the applier)."""
    return runtime_module.WatchRuntime.handle_batch.__get__(rt)


def evidence(rt) -> list[str]:
    return [json.loads(x)["invariant"] for x in rt.evidence.path.read_text().splitlines()] \
        if rt.evidence.path.exists() else []


def test_a_batch_written_ahead_reads_back_whole_with_what_the_watch_knew_beside_it(tmp_path):
    table = batch_with_lost_write(0, 40, 1000).toArrow()
    eos = EosInput({0: 7, 2: 9}, ({0: 5}, {0: 11, 1: 3}, [1]))
    for batch in (write_ahead.PendingBatch(3, table, eos, {0: 40, 1: 2}), write_ahead.PendingBatch(4, table),
                  write_ahead.PendingBatch(5, table, EosInput({}, None), {})):
        path = write_ahead.write(tmp_path, batch)
        assert path == tmp_path / "pending-batches" / f"{batch.batch_id}.arrow"
        back = write_ahead.read(path)
        assert back.table.equals(table) and back.table.schema.metadata is None
        assert (back.batch_id, back.eos, back.group_reader_at) == (batch.batch_id, batch.eos, batch.group_reader_at)
    assert write_ahead.pending_ids(tmp_path, 3) == [4, 5] and write_ahead.pending_ids(tmp_path, -1) == [3, 4, 5]
    (tmp_path / "pending-batches" / "6.arrow.tmp").write_bytes(b"cut short")
    write_ahead.drop_through(tmp_path, 4)
    assert sorted(p.name for p in (tmp_path / "pending-batches").iterdir()) == ["5.arrow", "6.arrow.tmp"]
    write_ahead.drop_through(tmp_path, 4, temporaries=True)
    assert sorted(p.name for p in (tmp_path / "pending-batches").iterdir()) == ["5.arrow"]


def test_a_damaged_or_misnamed_batch_file_is_a_clear_error_naming_it_and_the_way_out(tmp_path):
    path = write_ahead.write(tmp_path, write_ahead.PendingBatch(2, batch_with_lost_write(0, 40, 1000).toArrow()))
    path.with_name("3.arrow").write_bytes(path.read_bytes())
    with pytest.raises(state_store.StateError, match=r"3\.arrow: holds batch 2.*vigil state rebuild"):
        write_ahead.read(path.with_name("3.arrow"))
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(state_store.StateError, match=r"2\.arrow: a fetched batch not applied yet cannot be read"
                                                     r".*vigil state rebuild"):
        write_ahead.read(path)


def test_spark_fetches_the_next_batch_while_the_last_one_is_applied(runtime, monkeypatch):
    rt = runtime()
    handle = raw_handler(rt)
    entered, release = threading.Event(), threading.Event()
    real_apply = runtime_module.apply_batch

    def slow_apply(*a, **k):
        entered.set()
        assert release.wait(10)
        return real_apply(*a, **k)

    monkeypatch.setattr(runtime_module, "apply_batch", slow_apply)
    handle(batch_with_lost_write(0, 40, 1000), 0)  # returns: Spark commits it and goes on
    assert entered.wait(10) and rt.state.batch_id == -1 and rt.applying()
    assert (rt.dir / "pending-batches" / "0.arrow").exists()
    rt.on_progress(time.time() + 60)  # a trigger found nothing more: caught up only once it is applied
    assert not rt.wait_caught_up(timeout_s=0.6)
    fetched = []

    class NextDf:  # Spark's next batch: fetched while batch 0 is still being applied
        def toArrow(self):  # noqa: N802
            fetched.append(rt.state.batch_id)
            release.set()
            return batch_with_lost_write(40, 40, 1001).toArrow()

    handle(NextDf(), 1)
    assert fetched == [-1]  # fetched before batch 0 was applied
    rt.catch_up()
    assert rt.state.batch_id == 1 and lost(rt) == [2, 2] and not rt.applying()
    assert not (rt.dir / "pending-batches" / "0.arrow").exists() and not (rt.dir / "pending-batches" / "1.arrow").exists()
    assert rt.wait_caught_up(timeout_s=5)
    assert sorted(evidence(rt)) == ["lost_write"] * 4


def test_a_batch_written_ahead_before_a_crash_is_applied_at_the_start_once_even_when_handed_again(runtime, monkeypatch):
    rt = runtime()
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    # the monitor dies after writing batch 1 ahead (Spark has committed it, or not), before applying it
    write_ahead.write(rt.dir, rt._fetch(batch_with_lost_write(40, 40, 1001), 1))
    (rt.dir / "pending-batches" / "2.arrow.tmp").write_bytes(b"a write cut short")
    rt.owner.release()
    again = runtime()
    said = []
    monkeypatch.setattr(again, "progress", said.append)
    assert lost(again) == [1, 1] and again.applying() and again.taken_id() == 1
    again.apply_written_ahead()
    assert lost(again) == [2, 2] and again.state.batch_id == 1 and not again.applying()
    assert said == ["applying 1 batch(es) fetched before the restart and not checked yet (1..1)"]
    assert not list((again.dir / "pending-batches").iterdir())
    again.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # not committed by Spark: handed again
    assert lost(again) == [2, 2]
    again.handle_batch(batch_with_lost_write(80, 40, 1002), 2)
    assert lost(again) == [3, 3] and sorted(evidence(again)) == ["lost_write"] * 6


def test_a_batch_handed_again_before_the_start_applied_it_is_applied_once(runtime):
    """Spark's next batch comes before `apply_written_ahead` (or without it): the file goes first."""
    rt = runtime()
    write_ahead.write(rt.dir, rt._fetch(batch_with_lost_write(0, 40, 1000), 0))
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # handed again: fetched, then found applied
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    assert lost(rt) == [2, 2] and sorted(evidence(rt)) == ["lost_write"] * 4 and rt.state.batches == 2


def test_an_applier_whose_save_failed_is_tried_again_from_its_file_and_nothing_counts_twice(runtime, monkeypatch):
    rt = runtime()
    handle = raw_handler(rt)
    handle(batch_with_lost_write(0, 40, 1000), 0)
    rt.catch_up()
    real_save = state_store.save

    def refused(directory, state):
        raise state_store.StateSaveError(directory / state_store.STATE_FILE, OSError(28, "No space left on device"))

    monkeypatch.setattr(state_store, "save", refused)
    handle(batch_with_lost_write(40, 40, 1001), 1)  # committed in Spark; its applier cannot save
    rt._applier.join(10)
    assert rt.state.batch_id == 0 and lost(rt) == [1, 1] and rt.published.save_failures == {"ENOSPC": 1}
    assert write_ahead.pending_ids(rt.dir, 0) == [1]
    with pytest.raises(state_store.StateSaveError):  # Spark's next batch fails: the query restarts
        handle(batch_with_lost_write(80, 40, 1002), 2)
    assert write_ahead.pending_ids(rt.dir, 0) == [1] and lost(rt) == [1, 1]  # batch 2 not written ahead
    monkeypatch.setattr(state_store, "save", real_save)
    handle(batch_with_lost_write(80, 40, 1002), 2)  # handed again: batch 1 from its file first
    rt.catch_up()
    assert rt.state.batch_id == 2 and lost(rt) == [3, 3] and rt.state.batches == 3
    assert sorted(evidence(rt)) == ["lost_write"] * 6


def test_stopping_applies_the_last_batch_and_a_rebuild_moves_batches_written_ahead_aside(runtime):
    rt = runtime()
    raw_handler(rt)(batch_with_lost_write(0, 40, 1000), 0)
    rt.finish_applying()
    assert rt.state.batch_id == 0 and lost(rt) == [1, 1]
    write_ahead.write(rt.dir, rt._fetch(batch_with_lost_write(40, 40, 1001), 1))
    rt.owner.release()
    report = rebuilder.rebuild(rt.cfg, lambda: rebuilder.evidence_from_file(rt.cfg.evidence_path()), "file")
    pending = rt.dir / "pending-batches"
    assert str(pending) in {m[0] for m in report.moved} and not pending.exists()
    again = runtime()
    assert not again.applying() and lost(again) == [1, 1]


def test_a_planned_batch_written_ahead_counts_as_taken(runtime):
    from tests.unit.test_eos_wiring import offset_log

    rt = runtime()
    ck = rt.cfg.spark_checkpoint_dir()
    name = rt.cfg.canary.name
    offset_log(rt.cfg, 0, [{name: {"0": 9, "1": 4, "2": 7}}, {name: {"0": 9, "1": 4, "2": 7}}, {"ledger": {"0": 3}}])
    write_ahead.write(rt.dir, write_ahead.PendingBatch(0, pa.table({"src": pa.array([], pa.int8())})))
    rt.prober.view.partitions = 2
    rt.query_failed("Timeout of 60000ms expired before the position for partition vigil-canary-2 could be determined")
    assert (ck / "offsets" / "0").exists()  # its input is what the checker applies next: never planned again


def test_a_failed_applier_is_tried_again_between_batches_and_the_monitor_is_not_ready_meanwhile(runtime, monkeypatch):
    """No batch may come after the one whose save failed (nothing new to read): the re-fetch thread's
    round applies it from its file once it can be saved; until then readiness says why not, and the
    run does not count as caught up."""
    monkeypatch.setattr(runtime_module, "REFETCH_RETRY_S", 0.0)
    rt = runtime()
    rt.status.running = True
    real_save = state_store.save
    refusals = []

    def refused(directory, state):
        refusals.append(state.batch_id)
        raise state_store.StateSaveError(directory / state_store.STATE_FILE, OSError(28, "No space left on device"))

    monkeypatch.setattr(state_store, "save", refused)
    raw_handler(rt)(batch_with_lost_write(0, 40, 1000), 0)
    rt._applier.join(10)
    ready, why = rt.ready()
    assert not ready and rt.apply_error and "batch 0 not applied" in rt.apply_error and refusals == [0]
    rt.record_liveness([])  # a save by the prober that fails too: still not ready, nothing applied
    rt.retry_written_ahead()  # still full
    assert rt.state.batch_id == -1 and not rt.ready()[0] and len(refusals) == 3
    monkeypatch.setattr(state_store, "save", real_save)
    rt.record_liveness([])  # a save of something else succeeds: the batch is still not applied
    assert rt.ready() == (False, rt.apply_error)
    rt.on_progress(time.time() + 60)
    assert not rt.wait_caught_up(timeout_s=0.3)
    rt.retry_written_ahead()  # the re-fetch thread's next round
    assert rt.state.batch_id == 0 and lost(rt) == [1, 1] and rt.apply_error is None and rt.ready()[0]
    assert rt.wait_caught_up(timeout_s=5) and sorted(evidence(rt)) == ["lost_write"] * 2


def test_state_check_reads_the_batches_to_apply_first_and_refuses_a_damaged_one(runtime, tmp_path):
    from typer.testing import CliRunner

    from monitor.cli import app

    rt = runtime()
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    path = write_ahead.write(rt.dir, rt._fetch(batch_with_lost_write(40, 40, 1001), 1))
    rt.owner.release()
    config = tmp_path / "vigil.yaml"
    config.write_text(f"state_dir: {tmp_path}\n")
    result = CliRunner().invoke(app, ["state", "check", "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["pending_batches"] == [1] and json.loads(result.output)["batch_id"] == 0
    path.write_bytes(path.read_bytes()[:100])
    result = CliRunner().invoke(app, ["state", "check", "--config", str(config)])
    # (`vigil` prints a VigilError's text and exits 2: monitor.cli.main)
    assert isinstance(result.exception, state_store.StateError)
    assert "1.arrow: a fetched batch not applied yet cannot be read" in str(result.exception)


CRASHES = ("none", "before_handler", "after_write_ahead", "after_apply")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(CRASHES), st.booleans()), min_size=2, max_size=5))
def test_each_batch_is_applied_once_whatever_the_crashes_and_the_batches_spark_hands_again(tmp_path_factory, monkeypatch,
                                                                                          plan):
    """Batches with a loss each, handed as Spark would, the monitor dying at random points: before
    the handler ran (Spark hands the batch again), after the batch was written ahead (Spark may have
    committed it or not: ``again``), or after it was applied (idem). Whatever happens, each loss is
    counted once and each batch applied once."""
    make = runtime_maker(tmp_path_factory.mktemp("state"), monkeypatch, overlap=True)
    batch = [batch_with_lost_write(40 * i, 40, 1000 + i) for i in range(len(plan))]
    rt = make()
    rt.apply_written_ahead()

    def crash():
        nonlocal rt
        if rt._applier is not None:
            rt._applier.join(10)  # (a thread cannot be killed: its batch applied, saved, before the crash)
        rt.owner.release()
        rt = make()
        rt.apply_written_ahead()  # what run_watch does at the start

    for i, (how, again) in enumerate(plan):
        handle = raw_handler(rt)
        if how == "before_handler":
            crash()
            raw_handler(rt)(batch[i], i)  # not committed: handed again
        elif how == "after_write_ahead":
            write_ahead.write(rt.dir, rt._fetch(batch[i], i))
            crash()
            if again:
                raw_handler(rt)(batch[i], i)
        elif how == "after_apply":
            handle(batch[i], i)
            crash()
            if again:
                raw_handler(rt)(batch[i], i)
        else:
            handle(batch[i], i)
    rt.finish_applying()
    n = len(plan)
    assert rt.state.batch_id == n - 1 and rt.state.batches == n and not rt.applying()
    assert lost(rt) == [n, n] and sorted(evidence(rt)) == ["lost_write"] * (2 * n)
    rt.owner.release()
