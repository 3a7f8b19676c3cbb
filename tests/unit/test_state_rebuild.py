"""`vigil state rebuild`: a damaged state gives a clear error naming the command; the rebuilt state
counts the evidence's violations once, even as the retained logs are read again from their start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from invariants.catalog import Invariant, Isolation
from invariants.model import Durability, Violation
from monitor.watch import rebuild as rebuilder
from monitor.watch import state as state_store
from tests.unit.test_watch_runtime import (
    TID, batch_with_lost_write, full_disk, held_by_another_process, lost, runtime_maker, stall,
)


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    return runtime_maker(tmp_path, monkeypatch)


STALL = (Invariant.STALLED_POLL, Isolation.READ_COMMITTED, Durability.GUARANTEED)


def _history(rt) -> None:
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)
    rt.record_liveness([stall(0)])
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)


def test_a_damaged_state_is_rebuilt_from_the_evidence_and_the_logs_read_again_count_nothing_twice(runtime):
    rt = runtime()
    _history(rt)
    assert lost(rt) == [2, 2] and rt.published.violations[STALL] == 1
    checked = dict(rt.published.records_checked)
    spark = rt.cfg.spark_checkpoint_dir()
    spark.mkdir(parents=True)
    (spark / "offsets").write_text("{}")
    state_file = rt.dir / state_store.STATE_FILE
    state_file.write_bytes(state_file.read_bytes()[:100])  # torn by a crash on a failing disk
    with pytest.raises(state_store.StateError, match="vigil state rebuild"):
        runtime()
    evidence_before = rt.evidence.path.read_bytes()

    report = rebuilder.rebuild(rt.cfg, lambda: rebuilder.evidence_from_file(rt.cfg.evidence_path()), "file")
    assert report.violations == {"lost_write/read_committed": 2, "lost_write/read_uncommitted": 2,
                                 "stalled_poll/read_committed": 1}
    assert {m[0] for m in report.moved} == {str(state_file), str(spark)} and not spark.exists()
    assert all(Path(aside).exists() and ".replaced-" in aside for _path, aside in report.moved)  # kept
    again = runtime()  # counts restored before anything is served
    assert lost(again) == [2, 2] and again.published.violations[STALL] == 1
    assert again.published.records_checked == {Isolation.READ_COMMITTED: 0, Isolation.READ_UNCOMMITTED: 0}
    # a new Spark checkpoint: the retained logs from their start, batch ids from 0 again
    retained = [batch_with_lost_write(0, 40, 1000), batch_with_lost_write(40, 40, 1001)]
    for batch_id, df in enumerate(retained):
        again.handle_batch(df, batch_id)
    assert lost(again) == [2, 2] and dict(again.published.records_checked) == checked
    assert again.evidence.path.read_bytes() == evidence_before  # found again, not written again
    assert not again.state.checker.sink.counted_before
    again.handle_batch(batch_with_lost_write(80, 40, 1002), 2)  # a new loss is counted as usual
    assert lost(again) == [3, 3]


def test_a_torn_evidence_tail_is_cut_off_and_said(runtime):
    rt = runtime()
    _history(rt)
    with rt.evidence.path.open("ab") as f:
        f.write(b'{"invariant": "lost_wr')  # a line cut short by the full disk
    report = rebuilder.rebuild(rt.cfg, lambda: rebuilder.evidence_from_file(rt.cfg.evidence_path()), "file")
    assert report.torn_lines == 1 and sum(report.violations.values()) == 5
    assert rt.evidence.path.read_bytes().endswith(b"}\n")
    again = runtime()
    assert again.state.evidence_bytes == rt.evidence.path.stat().st_size


class Topic:
    """A compacted topic's content as a consumer reads it back: every record, in log order."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes]] = []

    def produce(self, topic, key, value, on_delivery=None):  # delivered at once: no report
        self.records.append((key, value))

    def flush(self, *_a):
        return 0


def test_the_evidence_topic_gives_back_the_file_even_after_a_cut_write_was_followed_by_a_shorter_one(
        runtime, monkeypatch):
    rt = runtime()
    topic = Topic()
    rt.evidence.producer, rt.evidence.topic = topic, "evidence"
    read_again = rt.service_refetches
    with monkeypatch.context() as m:
        m.setattr(rt, "service_refetches", lambda: None)
        rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # saved; its loss waits for the re-read
    with monkeypatch.context() as m:
        full_disk(m)
        read_again()  # 2 lines at 0, not saved
    rt.record_liveness([stall(0)])  # 1 line at 0
    read_again()  # the next round: 2 lines after it
    rt.handle_batch(batch_with_lost_write(40, 40, 1001), 1)
    file_lines = [json.loads(x) for x in rt.evidence.path.read_text().splitlines()]
    assert [d["invariant"] for d in file_lines] == ["stalled_poll"] + ["lost_write"] * 4
    for records in (topic.records, [r for r in topic.records if not r[0].endswith(b":end")]):
        evidence = rebuilder.evidence_from_topic(records)
        if records is topic.records:
            assert evidence.lines == file_lines  # the stale "0:1" of the cut write is left out
        else:  # written by a Vigil without end records: every key, the stale one included
            assert len(evidence.lines) == len(file_lines) + 1


def test_a_rebuild_while_a_monitor_runs_on_the_state_is_refused_and_changes_nothing(runtime):
    rt = runtime()
    _history(rt)
    saved = (rt.dir / state_store.STATE_FILE).read_bytes()
    rt.owner.release()  # that monitor is another process's now
    with held_by_another_process(rt.dir):
        read: list = []
        with pytest.raises(state_store.StateError, match="stop it first"):
            rebuilder.rebuild(rt.cfg, lambda: read.append(1), "file")
        assert read == []  # refused before reading anything (a topic may take minutes)
    assert (rt.dir / state_store.STATE_FILE).read_bytes() == saved


def test_a_write_cut_by_a_full_disk_and_cut_again_by_a_rebuild_reads_back_from_the_topic_as_the_file_holds_it(
        runtime):
    rt = runtime()
    topic = Topic()
    rt.evidence.producer, rt.evidence.topic = topic, "evidence"
    rt.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # 2 whole lines and their end record
    at = rt.evidence.path.stat().st_size
    cut = [json.dumps({**Violation(Invariant.DUPLICATE, Isolation.READ_COMMITTED, TID, 0, (o, o + 1), (7, 1), o)
                       .to_json(), "batch_id": 1, "index": i}, sort_keys=True).encode() for i, o in enumerate((3, 9, 15))]
    for i, line in enumerate(cut):  # every line reached the topic; the file got one and a half; no end record
        topic.produce("evidence", key=f"{at}:{i}".encode(), value=line)
    with rt.evidence.path.open("ab") as f:
        f.write(cut[0] + b"\n" + cut[1][:20])
    rt.owner.release()  # that monitor died on the full disk
    rebuilder.rebuild(rt.cfg, lambda: rebuilder.evidence_from_file(rt.cfg.evidence_path()), "file")  # cuts the tail
    again = runtime()
    again.evidence.producer, again.evidence.topic = topic, "evidence"
    again.handle_batch(batch_with_lost_write(0, 40, 1000), 0)  # the logs read again: nothing new
    again.handle_batch(batch_with_lost_write(40, 40, 1001), 1)  # a new loss, written after the cut
    file_lines = [json.loads(x) for x in again.evidence.path.read_text().splitlines()]
    assert [d["invariant"] for d in file_lines] == ["lost_write", "lost_write", "duplicate", "lost_write", "lost_write"]
    assert rebuilder.evidence_from_topic(topic.records).lines == file_lines
