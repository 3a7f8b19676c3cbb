"""Canary writers against the real cluster: every write accounted for, read back where acked."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time

from invariants.ledger_format import TxnOutcome, WriteOutcome
from monitor import record_format
from monitor.audit.book import LedgerBook
from monitor.canary.runner import WriterThread, open_writer
from monitor.config import WriterConfig
from monitor.record_format import CanaryRecord, writer_id_for
from tests.integration.helpers import VIGIL, read_all, read_ledger, vigil_json


def _writes_of(book: LedgerBook, instance: str):
    wid = writer_id_for(instance)
    return {k: v for k, v in book.writes.items() if k.writer_id == wid}


def _decoded(records):
    out = {}
    for r in records:
        rec = record_format.decode(r.value)
        if isinstance(rec, CanaryRecord):
            out[(r.partition, r.offset)] = rec
    return out


def test_idempotent_60s_at_1000_per_second(cluster_ready, topics):
    env = cluster_ready
    summary = vigil_json(env["config_path"], "produce", "--writer", "idempotent", "--rate", "1000",
                         "--duration", "60", "--instance-id", "it-idem60", "--metrics-port", "0", timeout=200)
    assert summary["planned"] >= 57_000, summary
    assert summary["outcomes"]["indeterminate"] == 0
    assert summary["outcomes"]["failed"] == 0
    assert summary["outcomes"]["acked"] == summary["planned"]

    book = read_ledger(env["bootstrap"], env["config"].ledger.topic)
    writes = _writes_of(book, "it-idem60")
    assert len(writes) == summary["planned"]
    assert {st.outcome for st in writes.values()} == {WriteOutcome.ACKED}
    assert book.gaps() == {}

    by_offset = _decoded(read_all(env["bootstrap"], topics.canary.name, "read_uncommitted"))
    wid = writer_id_for("it-idem60")
    for k, st in writes.items():
        assert k.topic_id == topics.canary.topic_id
        rec = by_offset.get((k.partition, st.offset))
        assert rec is not None, f"acked write p{k.partition} seq {k.seq} missing at offset {st.offset}"
        assert (rec.writer_id, rec.incarnation, rec.seq) == (wid, k.inc, k.seq)
    # every partition got canary traffic
    assert {k.partition for k in writes} == set(range(topics.canary.partitions))


def test_transactional_reads_match_outcomes(cluster_ready, topics):
    env = cluster_ready
    summary = vigil_json(env["config_path"], "produce", "--writer", "txn", "--rate", "60", "--duration", "20",
                         "--abort-ratio", "0.3", "--txn-size", "4", "--instance-id", "it-txn",
                         "--metrics-port", "0", timeout=200)
    txns = summary["transactions"]
    assert txns["committed"] > 0 and txns["aborted"] > 0
    assert txns["indeterminate"] == 0 and txns["pending"] == 0

    book = read_ledger(env["bootstrap"], env["config"].ledger.topic)
    wid = writer_id_for("it-txn")
    inc = summary["incarnation"]
    committed, aborted = set(), set()
    for tkey, t in book.txns.items():
        if (tkey.writer_id, tkey.inc) != (wid, inc):
            continue
        target = committed if t.outcome is TxnOutcome.COMMITTED else aborted
        assert t.outcome in (TxnOutcome.COMMITTED, TxnOutcome.ABORTED)
        for key in t.writes:
            st = book.writes[key]
            assert st.outcome is WriteOutcome.ACKED
            target.add((key.partition, st.offset, key.seq))
    assert len(committed) == 4 * txns["committed"] and len(aborted) == 4 * txns["aborted"]

    def mine(isolation):
        got = set()
        for (p, off), rec in _decoded(read_all(env["bootstrap"], topics.canary.name, isolation)).items():
            if (rec.writer_id, rec.incarnation) == (wid, inc):
                got.add((p, off, rec.seq))
        return got

    assert mine("read_committed") == committed
    assert mine("read_uncommitted") == committed | aborted


def test_broker_kill_mid_run(cluster_ready, topics):
    env = cluster_ready
    cluster, config = env["cluster"], env["config"]
    wcfg = WriterConfig(name="killtest", acks="all", idempotence=True, rate=500)
    writer = open_writer(config, wcfg, topics, instance_id="it-brokerkill")
    stop = threading.Event()
    thread = WriterThread(writer, stop, duration=30)
    thread.start()
    time.sleep(8)
    victim = topics.canary.leaders[0]
    samples = []
    t_kill = time.monotonic()
    samples.append(writer.in_flight)
    cluster.kill(victim)
    while time.monotonic() - t_kill < 12:
        samples.append(writer.in_flight)
        time.sleep(0.05)
    acked_before_restart = writer.counts[WriteOutcome.ACKED]
    cluster.start_node(victim)
    thread.join(120)
    assert not thread.is_alive()
    assert thread.error is None, thread.error
    assert writer.counts[WriteOutcome.ACKED] > acked_before_restart  # kept writing

    book = read_ledger(env["bootstrap"], config.ledger.topic)
    writes = _writes_of(book, "it-brokerkill")
    assert len(writes) == writer.planned >= 14_000
    outcomes = collections.Counter(st.outcome for st in writes.values())
    assert outcomes[WriteOutcome.PENDING] == 0, outcomes
    assert outcomes[WriteOutcome.INDETERMINATE] <= max(samples), (outcomes, max(samples))
    assert outcomes[WriteOutcome.ACKED] + outcomes[WriteOutcome.INDETERMINATE] + outcomes[WriteOutcome.FAILED] == len(writes)


def test_kill9_producer_gets_new_incarnation(cluster_ready, topics):
    env = cluster_ready
    cmd = VIGIL + ["produce", "--writer", "idempotent", "--rate", "500", "--instance-id", "it-kill9",
                   "--metrics-port", "0", "--config", str(env["config_path"])]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    assert first.poll() is None
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    second = vigil_json(env["config_path"], "produce", "--writer", "idempotent", "--rate", "500", "--duration", "5",
                        "--instance-id", "it-kill9", "--metrics-port", "0", timeout=120)
    wid = writer_id_for("it-kill9")
    book = read_ledger(env["bootstrap"], env["config"].ledger.topic)
    incs = sorted(i for (inst, i) in book.writers if inst == "it-kill9")
    assert incs[-1] == second["incarnation"] and len(incs) >= 2
    dead, alive = incs[-2], incs[-1]
    assert alive == dead + 1

    dead_writes = {k: v for k, v in book.writes.items() if k.writer_id == wid and k.inc == dead}
    alive_writes = {k: v for k, v in book.writes.items() if k.writer_id == wid and k.inc == alive}
    dead_outcomes = collections.Counter(v.outcome for v in dead_writes.values())
    assert dead_outcomes[WriteOutcome.PENDING] == 0
    assert set(dead_outcomes) <= {WriteOutcome.ACKED, WriteOutcome.INDETERMINATE}
    assert dead_outcomes[WriteOutcome.ACKED] >= 2_000
    # in flight at the kill: at most the last half second or so of a 500/s writer
    assert dead_outcomes[WriteOutcome.INDETERMINATE] <= 250, dead_outcomes
    assert all(v.error == "writer restarted" for v in dead_writes.values()
               if v.outcome is WriteOutcome.INDETERMINATE)
    assert {v.outcome for v in alive_writes.values()} == {WriteOutcome.ACKED}
    assert second["in_flight"] == 0

    # no sequence number was reused: each (incarnation, partition, seq) is in the log at most once
    seen = collections.Counter()
    for r in read_all(env["bootstrap"], topics.canary.name, "read_uncommitted"):
        rec = record_format.decode(r.value)
        if isinstance(rec, CanaryRecord) and rec.writer_id == wid:
            seen[(rec.incarnation, r.partition, rec.seq)] += 1
    assert seen and max(seen.values()) == 1
    assert {inc for inc, _p, _s in seen} >= {dead, alive}
