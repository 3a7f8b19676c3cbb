"""Each drill writes exactly what its --json says it wrote (checked by reading everything back)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from invariants.ledger_format import TxnOutcome, WriteOutcome
from invariants.model import TxnKey
from monitor import record_format
from monitor.drill_table import DRILL_KINDS
from monitor.record_format import CanaryRecord
from tests.drill_rows import drill_row
from tests.integration.helpers import VIGIL, read_all, read_ledger, vigil_json


def _records(env, topic, isolation, writer_id=None):
    out = {}
    for r in read_all(env["bootstrap"], topic, isolation):
        rec = record_format.decode(r.value)
        if isinstance(rec, CanaryRecord) and (writer_id is None or rec.writer_id == writer_id):
            out[(r.partition, r.offset)] = (rec, r.value)
    return out


def _seqs_at(records, partition):
    return {off: rec.seq for (p, off), (rec, _v) in records.items() if p == partition}


@pytest.mark.parametrize("kind", [k for k in DRILL_KINDS if k != "lso_stuck"])
def test_drill_writes_what_it_reports(cluster_ready, topics, kind):
    env = cluster_ready
    report = vigil_json(env["config_path"], "drill", kind, "--count", "2", "--partition", "1")
    assert report["kind"] == kind and report["count"] == 2 and report["partition"] == 1
    assert report["topic_id"] == topics.canary.topic_id
    assert {(e["invariant"], e["isolation"]): e["count"] for e in report["expected"]} == drill_row(kind, 2)
    wid, inc, p = report["writer_id"], report["incarnation"], report["partition"]
    book = read_ledger(env["bootstrap"], env["config"].ledger.topic)
    mine = _records(env, topics.canary.name, "read_uncommitted", wid)
    mine = {k: v for k, v in mine.items() if v[0].incarnation == inc}
    seqs = _seqs_at(mine, p)
    ledger = {k.seq: v for k, v in book.writes.items() if k.writer_id == wid and k.inc == inc}
    assert all(rec.drill for rec, _v in mine.values())
    injected = report["injected"]

    if kind == "lost_write":
        assert len(injected) == 2
        for item in injected:
            assert seqs[item["claimed_offset"]] == item["cover_seq"]
            assert item["seq"] not in seqs.values()
            assert ledger[item["seq"]].outcome is WriteOutcome.ACKED
            assert ledger[item["seq"]].offset == item["claimed_offset"] > 0
    elif kind == "duplicate":
        for item in injected:
            first, second = item["offsets"]
            assert first != second
            assert seqs[first] == seqs[second] == item["seq"]
            assert mine[(p, first)][1] == mine[(p, second)][1]
            assert ledger[item["seq"]].offset == first == item["acked_offset"]
        assert len(seqs) == 4
    elif kind == "reorder":
        for item in injected:
            s, s1 = item["seqs"]
            o_s, o_s1 = item["offsets"]
            assert o_s1 < o_s and seqs[o_s] == s and seqs[o_s1] == s1
            assert ledger[s].offset == o_s and ledger[s1].offset == o_s1
    elif kind == "zero_offset":
        everything = _records(env, topics.canary.name, "read_uncommitted")
        for item in injected:
            assert seqs[item["actual_offset"]] == item["seq"] and item["actual_offset"] > 0
            assert ledger[item["seq"]].offset == 0
            holder = everything.get((p, 0))
            assert holder is not None and (holder[0].writer_id, holder[0].seq) != (wid, item["seq"])
    elif kind == "offset_mismatch":
        for item in injected:
            assert seqs[item["actual_offset"]] == item["seq"]
            assert seqs[item["cover_offset"]] == item["cover_seq"]
            assert ledger[item["seq"]].offset == item["claimed_offset"] == item["actual_offset"] + 1
            assert item["claimed_offset"] <= item["cover_offset"]
    elif kind == "aborted_read":
        (item,) = injected
        committed = _seqs_at(_records(env, topics.canary.name, "read_committed", wid), p)
        for seq, off in zip(item["seqs"], item["offsets"]):
            assert committed[off] == seq
        assert book.txns[TxnKey(wid, inc, item["txn_id"])].outcome is TxnOutcome.ABORTED
        assert len(item["seqs"]) == 2
    elif kind == "partial_txn":
        committed = _seqs_at(_records(env, topics.canary.name, "read_committed", wid), p)
        for item in injected:
            assert committed[item["written"]["offset"]] == item["written"]["seq"]
            assert item["missing_seq"] not in seqs.values()
            txn = book.txns[TxnKey(wid, inc, item["txn_id"])]
            assert txn.outcome is TxnOutcome.COMMITTED and len(txn.writes) == 2
        assert len(injected) == 2
    elif kind == "g0_write_cycle":
        committed = _records(env, topics.canary.name, "read_committed", wid)
        assert len(injected) == 2
        for item in injected:
            (p, q), (a_p, a_q), (b_p, b_q) = item["partitions"], item["offsets_a"], item["offsets_b"]
            assert q == (p + 1) % topics.canary.partitions
            assert a_p < b_p and b_q < a_q  # opposite orders on the two partitions
            for txn_id, offs in zip(item["txn_ids"], ((a_p, a_q), (b_p, b_q))):
                for part, off in zip((p, q), offs):
                    rec = committed[(part, off)][0]
                    assert rec.incarnation == inc and rec.txn_id == txn_id and rec.txn_size == 2
                assert book.txns[TxnKey(wid, inc, txn_id)].outcome is TxnOutcome.COMMITTED
    elif kind == "outcome_gap":
        (item,) = injected
        assert book.gaps() .get((report["instance_id"], inc)) == item["missing_entries"]
        assert len(item["missing_entries"]) == 2
        assert seqs == {}


def test_lso_stuck_holds_the_last_stable_offset(cluster_ready, topics):
    env = cluster_ready
    partition = 2
    proc = subprocess.Popen(VIGIL + ["drill", "lso_stuck", "--count", "1", "--partition", str(partition),
                                     "--hold", "10", "--json", "--config", str(env["config_path"])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(5)  # the transaction is open by now
    marker = {}
    producer = Producer({"bootstrap.servers": env["bootstrap"], "acks": "all"})
    producer.produce(topics.canary.name, b"not-a-canary-marker", partition=partition,
                     on_delivery=lambda err, msg: marker.update(offset=msg.offset(), err=err))
    producer.flush(10)
    assert marker["err"] is None

    def rc_sees_marker(wait):
        c = Consumer({"bootstrap.servers": env["bootstrap"], "group.id": "it-lso", "isolation.level": "read_committed",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(topics.canary.name, partition, marker["offset"])])
        deadline = time.monotonic() + wait
        try:
            while time.monotonic() < deadline:
                for m in c.consume(100, 0.5):
                    if not m.error() and m.offset() == marker["offset"]:
                        return True
            return False
        finally:
            c.close()

    assert rc_sees_marker(2) is False, "read_committed read past an open transaction"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    (item,) = report["injected"]
    assert item["partition"] == partition and item["held_s"] == 10
    assert rc_sees_marker(10) is True
    book = read_ledger(env["bootstrap"], env["config"].ledger.topic)
    assert book.txns[TxnKey(report["writer_id"], report["incarnation"], item["txn_id"])].outcome is TxnOutcome.ABORTED
    ru = _records(env, topics.canary.name, "read_uncommitted", report["writer_id"])
    assert ru[(partition, item["offset"])][0].seq == item["seq"]
    rc = _records(env, topics.canary.name, "read_committed", report["writer_id"])
    assert (partition, item["offset"]) not in rc
