"""The live checker under broker faults: rolling restart, a paused leader, all brokers paused."""

from __future__ import annotations

import json
import time

from monitor.clients import admin, describe_topic
from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import (
    HISTORY, Background, audit_counts, metrics_up, nonzero, sample, violations, wait_for, watch_config,
)


def test_rolling_restart_of_all_brokers_shows_no_violation(cluster_ready, tmp_path):
    cluster = cluster_ready["cluster"]
    cfg, path = watch_config(cluster_ready, tmp_path, "rolling", 29474, watch={"stall_threshold_s": 15})
    run = Background(path, "run", "--json", name="run")
    try:
        wait_for(lambda: metrics_up(cfg.metrics.port), 90, "the first batch")
        for node in (1, 2, 3):
            cluster.restart(node)
            cluster.wait_ready(60)
            time.sleep(5)
    finally:
        assert run.stop() == 0, run.tail()
    summary = run.stdout_json()
    assert all(w["outcomes"]["acked"] > 0 for w in summary["writers"])
    assert summary["checker"]["violations"] == {}
    assert nonzero(audit_counts(vigil_json(path, "audit"))) == {}


def test_paused_leader_stalls_only_its_partitions_and_the_monitor_recovers(cluster_ready, tmp_path):
    cluster = cluster_ready["cluster"]
    cfg, path = watch_config(
        cluster_ready, tmp_path, "stall", 29475,
        canary={"replication_factor": 1, "min_insync_replicas": 1, "partitions": 3},
        ledger={"partitions": 1},
        watch={"probe_interval_s": 3, "stall_threshold_s": 6, "poll_timeout_ms": 10000},
        writers=[{"name": "idempotent", "rate": 150}])
    port = cfg.metrics.port
    run = Background(path, "run", "--json", name="run")
    try:
        wait_for(lambda: metrics_up(port), 90, "the first batch")
        time.sleep(5)
        client = admin(cfg)
        info = describe_topic(client, cfg.canary.name)
        ledger_leader = describe_topic(client, cfg.ledger.topic).leaders[0]
        # The prober learns that acknowledged records wait from the ledger: pause a canary
        # leader that does not also lead the ledger (else the ledger's own failover comes first).
        node = next(leader for leader in info.leaders.values() if leader != ledger_leader)
        affected = {p for p, leader in info.leaders.items() if leader == node}
        assert affected != set(info.leaders)  # some partitions stay healthy
        cluster.pause(node)
        try:
            wait_for(lambda: violations(port)[("stalled_poll", "read_uncommitted")] >= 1, 60, "stalled_poll")
            assert sample(port, "vigil_up") is not None  # /metrics answers throughout
        finally:
            cluster.resume(node)
        evidence = [json.loads(line) for line in cfg.evidence_path().read_text().splitlines()]
        stalled = {r["partition"] for r in evidence if r["invariant"] == "stalled_poll"}
        assert stalled and stalled <= affected
        wait_for(lambda: sample(port, "vigil_stalls_open", invariant="stalled_poll", isolation="read_uncommitted") == 0,
                 60, "the stall to clear")
        checked = sample(port, "vigil_records_checked_total", isolation="read_uncommitted")
        wait_for(lambda: sample(port, "vigil_records_checked_total", isolation="read_uncommitted") > checked + 500,
                 120, "the query to catch up after the pause")
        assert sample(port, "vigil_up") == 1

        for n in (1, 2, 3):
            cluster.pause(n)
        try:
            time.sleep(4)
            frozen = sample(port, "vigil_last_batch_timestamp_seconds")
            time.sleep(12)
            assert sample(port, "vigil_last_batch_timestamp_seconds") == frozen  # freshness stops advancing
        finally:
            for n in (1, 2, 3):
                cluster.resume(n)
        wait_for(lambda: sample(port, "vigil_last_batch_timestamp_seconds") > frozen + 1, 120, "freshness to recover")
        checked = sample(port, "vigil_records_checked_total", isolation="read_committed")
        wait_for(lambda: sample(port, "vigil_records_checked_total", isolation="read_committed") > checked + 500,
                 120, "checking to resume")
        history = {k: v for k, v in violations(port).items() if k[0] in HISTORY}
    finally:
        assert run.stop() == 0, run.tail()
    assert nonzero(history) == {}
    assert nonzero({k: v for k, v in audit_counts(vigil_json(path, "audit")).items() if k[0] in HISTORY}) == {}
