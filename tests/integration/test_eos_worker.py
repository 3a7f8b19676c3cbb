"""The EOS worker against the real cluster, on the Java client and on its librdkafka twin: killed
mid-transaction and restarted, aborting on purpose, it loses nothing and writes nothing twice (the
audit of :mod:`monitor.eos.audit`); each drill it applies is found exactly; where it stood after
each abort is reported."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter

import pytest
import yaml

from invariants.eos import AFTER_ABORT_CLASSES, classify_after_abort
from monitor import clients
from monitor.audit.reader import committed_offsets
from monitor.eos.audit import audit
from monitor.eos.worker import EosWorker, after_abort_class
from tests.integration.helpers import read_all, vigil, write_source_with_aborts

PARTITIONS = 3


def _caught_up(env, group: str, topic: str, within_s: float) -> dict[int, int]:
    """Wait until the group's committed offsets pass the last record read_committed reads on each
    partition (the end itself may be a transaction's control record, which no offset commit passes)."""
    need = {p: 0 for p in range(PARTITIONS)}
    for r in read_all(env["bootstrap"], topic, "read_committed"):
        need[r.partition] = max(need[r.partition], r.offset + 1)
    deadline = time.monotonic() + within_s
    while True:
        committed = committed_offsets(env["config"], group, topic, PARTITIONS)
        if all(committed.get(p, 0) >= need[p] for p in range(PARTITIONS)):
            return committed
        assert time.monotonic() < deadline, f"the worker did not catch up: {committed} vs {need}"
        time.sleep(0.5)


@pytest.mark.parametrize("client", ["java", "librdkafka"])
def test_eos_worker_killed_and_aborting_loses_nothing_and_each_drill_is_found_exactly(cluster_ready, tmp_path, client):
    env = cluster_ready
    cfg = env["config"]
    suffix = uuid.uuid4().hex[:8]
    source, output, group = f"eos-src-{suffix}", f"eos-out-{suffix}", f"vigil-eos-{suffix}"
    admin = clients.admin(cfg)
    for name in (source, output):
        clients.ensure_topic(admin, name, PARTITIONS, 3, {"min.insync.replicas": "2"})
    worker = EosWorker(cfg, source, output, group, f"vigil-eos-{suffix}", tmp_path / "eos", abort_every=4,
                       client=client)
    stop, written = threading.Event(), Counter()
    writer = threading.Thread(target=write_source_with_aborts, args=(env["bootstrap"], source, stop, written), daemon=True)
    writer.start()
    try:
        worker.start()
        assert worker.wait_for("assigned", 1, 60), worker.events
        for kill in range(2):  # killed mid-stream (mostly mid-transaction: it is always in one) and restarted
            assert worker.wait_for("abort", 2 * (kill + 1), 60), worker.events
            worker.kill()
            worker.start()
        worker.drill("eos_duplicate")
        dup = worker.wait_for("drill", 1, 60)
        assert [d["kind"] for d in dup] == ["eos_duplicate"], worker.events
        worker.drill("eos_loss")
        drills = worker.wait_for("drill", 2, 60)
        lost = [d for d in drills if d["kind"] == "eos_loss"]
        assert lost, worker.events
        # An audit while the worker runs (transactions committing as it reads: the group's offsets
        # can be visible before an output partition's commit marker) finds nothing the drills did not do.
        running = audit(cfg, source, output, group)
        skipped = {(d["partition"], o) for d in lost for o in range(d["from"], d["to"])}
        assert set(running.verdict.losses) <= skipped, running.verdict.losses
        assert set(running.verdict.duplicates) <= {(dup[0]["partition"], dup[0]["offset"], 2)}
    finally:
        stop.set()
        writer.join(60)
    try:
        committed = _caught_up(env, group, source, 90)
        assert worker.stop(close_bound_s=30), "the worker's close() did not return within 30 s"
    finally:
        worker.kill()
    closed = worker.of_kind("closed")
    assert closed and closed[-1]["ms"] < 30_000

    result = audit(cfg, source, output, group)
    assert result.committed == committed
    assert result.malformed_output == 0 and result.drill_copies == 1
    # Exactly what the drills did, nothing else: the skipped records are lost, the copy is a duplicate.
    expected_lost = set()
    for d in lost:
        expected_lost |= {(d["partition"], o) for o in range(d["from"], d["to"])}
    # Only what a read_committed reader reads there is a record (not aborted ones, not control records).
    assert set(result.verdict.losses) <= expected_lost, (result.verdict.losses, lost)
    assert len(result.verdict.losses) == sum(d["records"] for d in lost), (result.verdict.losses, worker.events[-60:])
    assert result.verdict.duplicates == ((dup[0]["partition"], dup[0]["offset"], 2),)
    # Every record read_committed reads was judged; each is in the output once, but the drills'.
    assert result.source_records == written["committed"] + written["plain"]
    assert result.judged_records == result.source_records
    assert result.output_records == result.source_records - len(result.verdict.losses) + 1

    aborts = worker.of_kind("abort")
    classes = worker.after_abort_classes()
    assert set(classes) <= set(AFTER_ABORT_CLASSES) and sum(classes.values()) == len(aborts) >= 4
    if client == "java":
        # abortTransaction does not move the Java consumer: right after it, it stands where it read
        # to, and (without a rebalance in between) its next poll resumes there, past the aborted records.
        assert all(a["after"] == a["end"] for a in aborts), aborts
        assert classes["advance"] >= 1, classes
        # by records, nothing else: past the aborted records, or (a rebalance in the next poll) at
        # the first of them again from the committed offset. By positions, a marker between the
        # position and the next record made an advance read "other"
        assert set(classes) <= {"advance", "rewind"}, [a for a in aborts if after_abort_class(a) != "advance"]
    # The group's offsets never ran ahead of the worker (they may trail its position by the
    # control records it passed).
    assert all(a["committed"] <= a["before"] < a["end"] for a in aborts), aborts
    # The command line says the same, and fails on it.
    conf = yaml.safe_load(env["config_path"].read_text())
    conf.setdefault("canary", {})["name"] = source
    conf["eos"] = {"output_topic": output, "group": group, "client": client}
    path = tmp_path / "eos.yaml"
    path.write_text(yaml.safe_dump(conf))
    cli = vigil(path, "eos", "audit", "--json", check=False)
    assert cli.returncode == 1, cli.stderr
    said = json.loads(cli.stdout.strip().splitlines()[-1])
    assert (said["eos_loss"], said["eos_duplicate"]) == (len(result.verdict.losses), 1)
    assert said["judged_records"] == result.source_records
    by_positions = Counter(classify_after_abort(a["before"], a["end"], a["resumed"] if a["resumed"] >= 0 else a["after"],
                                                a["committed"]) for a in aborts)
    print(f"\nEOS worker ({client}): {written}, {len(aborts)} aborts {dict(classes)} (by positions {dict(by_positions)}), output {result.output_records}, "
          f"close {closed[-1]['ms']} ms, losses {len(result.verdict.losses)} (drill), duplicates 1 (drill)")
