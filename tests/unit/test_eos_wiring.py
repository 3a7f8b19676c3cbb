"""The EOS pipeline's way into the live checker: Spark's offset log read for the output reader's
position, the checkpoint's sources held against the config, output rows of a micro-batch, and the
retention rules of the live judgement."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from invariants.catalog import Invariant
from invariants.checker import Checker
from invariants.eos import EosFinding, EosLive
from invariants.model import RC, Read, Settings
from monitor.config import ConfigError, parse
from monitor.eos import output_format
from monitor.eos import worker as worker_module
from monitor.eos.worker import worker_for
from monitor.watch.batch import EosInput, apply_batch
from monitor.watch.eos_feed import EosFeed
from monitor.watch.executor import decode_table
from monitor.watch.main import _same_sources_as_the_checkpoint
from monitor.watch.state import StateError


def config(tmp_path, enabled=True):
    return parse({"state_dir": str(tmp_path), "eos": {"enabled": enabled, "output_topic": "out"},
                  "groups": {"enabled": False}, "canary": {"name": "canary"}, "ledger": {"topic": "ledger"}}, "t.yaml")


def offset_log(cfg, batch_id: int, sources: list[dict]) -> None:
    d = cfg.spark_checkpoint_dir() / "offsets"
    d.mkdir(parents=True, exist_ok=True)
    lines = ["v1", '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'] + [
        __import__("json").dumps(s) for s in sources]
    (d / str(batch_id)).write_text("\n".join(lines))


def test_the_output_readers_position_is_its_sources_entry_in_sparks_offset_log(tmp_path):
    cfg = config(tmp_path)
    feed = EosFeed(cfg)
    assert feed.positions_at(0) == {}
    offset_log(cfg, 7, [{"canary": {"0": 5}}, {"canary": {"0": 9}}, {"ledger": {"0": 3}}, {"out": {"0": 12, "1": 4}}])
    assert feed.positions_at(7) == {0: 12, 1: 4}
    assert feed.positions_at(8) == {}


def test_switching_eos_under_an_existing_checkpoint_is_refused_with_the_way_out(tmp_path):
    cfg = config(tmp_path, enabled=True)
    _same_sources_as_the_checkpoint(cfg)  # no checkpoint yet: fine
    offset_log(cfg, 0, [{"canary": {"0": 1}}, {"canary": {"0": 1}}, {"ledger": {"0": 1}}])
    with pytest.raises(StateError, match="eos.enabled is true.*vigil state rebuild"):
        _same_sources_as_the_checkpoint(cfg)
    _same_sources_as_the_checkpoint(config(tmp_path, enabled=False))
    offset_log(cfg, 1, [{"canary": {"0": 1}}, {"canary": {"0": 1}}, {"ledger": {"0": 1}}, {"out": {"0": 1}}])
    _same_sources_as_the_checkpoint(cfg)
    with pytest.raises(StateError, match="reads 4 sources .out after the canary and the ledger., this config 3"):
        _same_sources_as_the_checkpoint(config(tmp_path, enabled=False))


def read_again(ck: Checker, held: bool = True) -> list:
    """What read_committed finds when it reads again every range the checker wants (``held``: the
    records it read there the first time; else none, as where a new log holds markers)."""
    found = []
    for w in ck.refetch_wanted():
        reads = [Read(o, ("x", o, 1)) for o in range(w.lo, w.hi)] if held else []
        assert ck.apply_refetched(RC, w.topic_id, w.partition, reads, (w.lo, w.hi))
        found += ck.settle()
    return found


def test_a_loss_on_a_record_the_reread_no_longer_finds_is_dropped():
    """As for group_skip (tests/unit/test_group_wiring.py): a source record the reader handed over
    that the log no longer holds (an old log's prefetched tail) is no loss once read again."""
    ck = Checker()
    ck.note_topic("canary", "tid")
    ck.eos_source = "canary"
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in (0, 1, 2)])
    ck.eos_committed({0: 3}, {0: 0})
    assert [v for v in ck.settle() if v.invariant is Invariant.EOS_LOSS] == []
    assert [(w.lo, w.hi) for w in ck.refetch_wanted()] == [(0, 3)]
    ck = Checker.from_doc(json.loads(json.dumps(ck.to_doc())), Settings())  # a restart: they still wait
    ck.eos_source = "canary"
    assert read_again(ck, held=False) == [] and ck.refetch_wanted() == []


def test_a_batchs_output_rows_reach_the_checker_with_the_batchs_position_and_a_sample():
    ck = Checker()
    ck.note_topic("canary", "tid")
    ck.eos_source = "canary"
    values = [output_format.encode(0, 0), output_format.encode(0, 0), b"junk", output_format.encode(0, 2)]
    rows = pa.table({"src": pa.array([3, 3, 3, 3], pa.int8()), "topic": ["out"] * 4,
                     "partition": pa.array([0, 0, 0, 0], pa.int32()), "offset": pa.array([0, 1, 2, 3], pa.int64()),
                     "value": pa.array(values, pa.binary()), "ts_us": pa.array([0] * 4, pa.int64())})
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in (0, 1, 2)])
    found, stats = apply_batch(ck, decode_table(rows), lambda _n: "tid",
                               eos=EosInput({0: 5}, ({0: 3}, {0: 5}, [])))
    # the loss at 1 rests on what the reader handed over: counted once read_committed read it again,
    # from the offset with a copy below it (0): a record gone or another there would show the log
    # rewritten under the judgement
    assert [(v.invariant.value, v.offsets) for v in found] == [(Invariant.EOS_DUPLICATE.value, (0,))]
    assert [(w.lo, w.hi) for w in ck.refetch_wanted()] == [(0, 2)]
    found += read_again(ck)
    assert sorted((v.invariant.value, v.partition, v.offsets) for v in found) == [
        (Invariant.EOS_DUPLICATE.value, 0, (0,)), (Invariant.EOS_LOSS.value, 0, (1,))]
    assert stats.malformed["eos_output"] == 1
    assert all(v.topic_id == "tid" for v in found)


def test_no_loss_is_judged_below_the_canary_log_start_or_below_the_oldest_copy_of_a_trimmed_output():
    live = EosLive()
    live.read_source(0, range(10))
    live.read_output(0, [(100, (0, 6)), (101, (0, 8))], 102)
    live.committed({0: 10}, {0: 102}, output_trimmed=[0])  # the output's copies of 0..5 went with retention
    assert live.judge({0: 2}) == [EosFinding("eos_loss", 0, 7, 0), EosFinding("eos_loss", 0, 9, 0)]
    live = EosLive()
    live.read_source(0, range(4))
    live.read_output(0, [(0, (0, 3))], 1)
    live.committed({0: 4}, {0: 1})
    assert live.judge({0: 2}) == [EosFinding("eos_loss", 0, 2, 0)]  # 0 and 1: gone from the canary topic too


def test_samples_past_the_cap_keep_the_oldest_which_is_ready_first():
    live = EosLive()
    for i in range(EosLive.MAX_SAMPLES + 10):
        live.committed({0: i}, {0: i})
    assert len(live.samples) == EosLive.MAX_SAMPLES
    assert live.samples[0] == ({0: 0}, {0: 0}) and live.samples[-1][0] == {0: EosLive.MAX_SAMPLES + 9}


def test_the_worker_runs_on_the_configured_client_with_the_same_arguments_and_its_secrets_owner_only(
        tmp_path, monkeypatch):
    started = []

    class Proc:
        stdout: list = []

        def __init__(self, cmd, **_kw):
            started.append(cmd)

    monkeypatch.setattr(worker_module.subprocess, "Popen", Proc)
    monkeypatch.setattr(worker_module, "worker_classpath", lambda *_a: "cp")
    monkeypatch.setattr(worker_module, "find_java", lambda *_a: SimpleNamespace(executable="java"))
    for client in ("java", "librdkafka"):
        cfg = parse({"state_dir": str(tmp_path / client), "instance_id": "i", "canary": {"name": "canary"},
                     "eos": {"client": client, "group": "vigil-eos", "output_topic": "out", "abort_every": 4},
                     "kafka": {"bootstrap_servers": "b:1", "security": {"protocol": "SASL_PLAINTEXT",
                               "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u", "sasl_password": "pw"}}},
                    "t.yaml")
        w = worker_for(cfg)
        assert w.client == client
        w.start()
    java, twin = started
    # each client's close gets 22.5 s of the 30 s its runner allows a close call (eos.close_bound_s)
    tail = ["canary", "out", "vigil-eos", "vigil-eos-i", "4", str(tmp_path / "librdkafka" / "eos" / "control"), "22500"]
    assert java[:3] == ["java", "-Xmx256m", "-cp"] and java[-7:-2] == tail[:-2] and java[-1] == tail[-1]
    assert twin[1:3] == ["-m", "monitor.eos.rdkafka_worker"] and twin[-7:] == tail
    conf = Path(twin[3])
    assert json.loads(conf.read_text())["bootstrap.servers"] == "b:1" and conf.stat().st_mode & 0o077 == 0
    with pytest.raises(ConfigError, match="eos.client"):
        parse({"eos": {"client": "jvm"}}, "t.yaml")


CLOSING_WORKER = """
import json, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def emit(**e):
    print(json.dumps(e), flush=True)
emit(event="started")
while not stop:
    time.sleep(0.01)
emit(event="closing")
time.sleep(float(sys.argv[1]))
emit(event="closed_call", call="producer", ms=0)
time.sleep(float(sys.argv[2]))
emit(event="closed_call", call="consumer", ms=0)
emit(event="closed", ms=0)
time.sleep(float(sys.argv[3]))
"""


@pytest.mark.parametrize("producer_s, consumer_s, exit_s, returned, calls", [
    (1.2, 1.2, 1.2, True, 2), (0.1, 30, 0, False, 1), (30, 0.1, 0, False, 0), (0.1, 0.1, 30, False, 2)])
def test_each_close_call_is_bounded_on_its_own(tmp_path, producer_s, consumer_s, exit_s, returned, calls):
    """KAFKA-17734 is a close() that does not return: two slow closes and a slow exit within the
    bound each (3.6 s together, bound 2 s) are no hang; any one past it is, and the worker is
    killed (the exit: the librdkafka twin's handles are destroyed then)."""
    import subprocess
    import sys
    import threading

    worker = worker_for(parse({}, "<test>"))
    worker.proc = subprocess.Popen([sys.executable, "-c", CLOSING_WORKER, str(producer_s), str(consumer_s), str(exit_s)],
                                   stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    threading.Thread(target=worker._read, args=(worker.proc,), daemon=True).start()
    assert worker.wait_for("started", 1, 30)  # its SIGTERM handler in place
    assert worker.stop(close_bound_s=2.0, wind_down_s=30) is returned
    assert worker.proc.poll() is not None and not worker.stuck
    assert len(worker.of_kind("closed_call")) == calls
