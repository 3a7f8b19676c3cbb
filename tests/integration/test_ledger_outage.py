"""The outcome ledger on a second local cluster (one node, RF 1, min ISR 1), stopped for 45 s
while the canary's cluster stays up.

What it costs: the second cluster's start (~15 s) and one 1-node JVM (heap 256 MB) for the length
of this test, ~2.5 minutes in all (148 s measured alone, on the shared session cluster)."""

from __future__ import annotations

import time

from monitor import clients
from monitor.cluster.local_cluster import LocalCluster
from monitor.config import ClusterConfig
from monitor.clients import watermarks
from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import (
    Background, audit_counts, final_counts, metrics_up, nonzero, sample, scrape, violations, wait_for, watch_config,
)

ISOS = ("read_committed", "read_uncommitted")
WRITERS = ("idempotent", "txn")


def acked(port: int) -> float:
    return sum(v for (name, labels), v in scrape(port).items()
               if name == "vigil_producer_writes_total" and dict(labels).get("outcome") == "acked")


def canary_end(cfg) -> int:
    """The canary topic's high watermarks, summed."""
    c = clients.consumer(cfg, "read_uncommitted", group="vigil-test-watermarks")
    try:
        return sum(watermarks(c, cfg.canary.name, p)[1] for p in range(cfg.canary.partitions))
    finally:
        c.close()


def test_a_ledger_cluster_that_goes_down_pauses_the_canary_and_is_no_canary_fault(cluster_ready, tmp_path):
    """While the ledger is away: no canary record is written (every intent must be durable first),
    /metrics answers, the prober says the ledger is unreachable and each writer how long it has
    waited for it — the inputs of VigilLedgerUnavailable, which silences the canary-stall and
    staleness alerts — and no producer_stalled is counted, neither then nor once the outcomes
    queued meanwhile arrive. Once back: writing and checking go on, and no violation at all, live
    or in the audit (no outcome_gap: the ledger producer never gives up on an entry)."""
    ledger = LocalCluster(ClusterConfig(
        nodes=1, min_insync_replicas=1, heap_mb=256, client_port_base=26192, internal_port_base=26392,
        proxy_control_port=26190, state_dir=str(tmp_path / "ledger-cluster")), print)
    try:
        ledger.up()
        cfg, path = watch_config(
            cluster_ready, tmp_path, "ledgerout", 29481,
            ledger={"kafka": {"bootstrap_servers": ledger.bootstrap_servers}, "replication_factor": 1,
                    "min_insync_replicas": 1},
            # producer_stalled at 10 s (above the writers' 5 s message timeout): the outage is four times that
            watch={"producer_stall_s": 10},
            writers=[{"name": "idempotent", "rate": 50, "message_timeout_ms": 5000},
                     {"name": "txn", "transactional": True, "rate": 15, "message_timeout_ms": 5000,
                      "transaction": {"size": 3}}])
        port = cfg.metrics.port
        run = Background(path, "run", "--json", name="run")
        try:
            wait_for(lambda: metrics_up(port), 180, "the first batch", show=run.tail)
            wait_for(lambda: all((sample(port, "vigil_records_checked_total", isolation=iso) or 0) > 500
                                 for iso in ISOS), 120, "records checked in both readers", show=run.tail)
            assert sample(port, "vigil_ledger_reachable", ledger="separate") == 1

            ledger.stop_node(1)
            stopped = time.monotonic()
            wait_for(lambda: sample(port, "vigil_ledger_reachable", ledger="separate") == 0, 30,
                     "the ledger found unreachable", show=run.tail)
            time.sleep(max(0.0, 6 - (time.monotonic() - stopped)))  # the writes already sent get their acks
            end = canary_end(cfg)
            waits = []
            while time.monotonic() - stopped < 45:
                time.sleep(3)
                assert sample(port, "vigil_up") is not None  # /metrics answers throughout
                waits.append({w: sample(port, "vigil_ledger_wait_seconds", writer=w, ledger="separate")
                              for w in WRITERS})
            # no canary record whose intent could not be made durable
            assert canary_end(cfg) == end
            assert waits[-1]["idempotent"] > 30 and waits[-1]["txn"] > 30, waits
            assert sample(port, "vigil_ledger_reachable", ledger="separate") == 0
            assert nonzero(violations(port)) == {}

            ledger.start_node(1)
            ledger.wait_ready(90)
            wait_for(lambda: sample(port, "vigil_ledger_reachable", ledger="separate") == 1, 60,
                     "the ledger answering again", show=run.tail)
            wait_for(lambda: all(sample(port, "vigil_ledger_wait_seconds", writer=w, ledger="separate") == 0
                                 for w in WRITERS), 60, "the writers no longer waiting", show=run.tail)
            before, checked = acked(port), {iso: sample(port, "vigil_records_checked_total", isolation=iso)
                                            for iso in ISOS}
            wait_for(lambda: acked(port) > before + 500 and all(
                sample(port, "vigil_records_checked_total", isolation=iso) > checked[iso] + 500 for iso in ISOS),
                120, "writing and checking going on", show=run.tail)
            wait_for(lambda: all(sample(port, "vigil_unseen_writes", isolation=iso) == 0 for iso in ISOS), 60,
                     "the checker caught up", show=run.tail)
            time.sleep(12)  # past the producer_stalled threshold once more, after the queued outcomes came in
        finally:
            assert run.stop() == 0, run.tail()
        assert canary_end(cfg) > end
        assert nonzero(final_counts(run)) == {}
        report = vigil_json(path, "audit")
        assert nonzero(audit_counts(report)) == {} and report["undecided"] == 0, report
    finally:
        ledger.down()
