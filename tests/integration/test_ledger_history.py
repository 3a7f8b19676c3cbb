"""A ledger with a beginning nobody may see, and a ledger shared with other canary topics.

Retention trims the canary topic and the ledger while a checker that started with `latest` runs:
nothing is expected that was never announced, and nothing missing is a gap; a bogus ack at offset
0, long deleted by then, is judged at acknowledgement time. Writers of another
canary topic writing to the same ledger are not this checker's business.
"""

from __future__ import annotations

import time

from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import (
    Background, audit_counts, metrics_up, nonzero, sample, violations, wait_for, watch_config,
)

MINUTE_RETENTION = {"retention.ms": "60000", "segment.ms": "10000"}
BOGUS_ZERO = {("zero_offset", "read_committed"): 1, ("zero_offset", "read_uncommitted"): 1}


def test_retention_trims_canary_and_ledger_under_a_checker_that_started_late(cluster_ready, tmp_path):
    cfg, path = watch_config(
        cluster_ready, tmp_path, "retention", 29476,
        canary={"extra_config": MINUTE_RETENTION},
        ledger={"retention_ms": 60000, "extra_config": {"segment.ms": "10000"}, "checkpoint_interval_s": 5},
        watch={"starting_offsets": "latest"},
        writers=[{"name": "idempotent", "rate": 150}, {"name": "txn", "transactional": True, "rate": 30}])
    # two minutes of writes: retention (60 s, 10 s segments, checked every 5 s) starts deleting at
    # about 75 s, under a checker started at 25 s, and goes on segment by segment to the end
    writers = Background(path, "produce", "--writer", "idempotent", "--duration", "120", "--metrics-port", "0",
                         name="produce")
    txn = Background(path, "produce", "--writer", "txn", "--duration", "120", "--metrics-port", "0", name="txn")
    try:
        time.sleep(25)  # the ledger and the canary topic have history this checker will never read
        watch = Background(path, "watch", name="watch")
        port = cfg.metrics.port
        try:
            wait_for(lambda: metrics_up(port), 120, "the first batch")
            assert writers.wait(300) == 0, writers.tail()
            assert txn.wait(300) == 0, txn.tail()
            wait_for(lambda: (sample(port, "vigil_unseen_writes", isolation="read_uncommitted") == 0
                              and sample(port, "vigil_unseen_writes", isolation="read_committed") == 0), 90,
                     "the checker to catch up")
            assert nonzero(violations(port)) == {}  # in particular no outcome_gap and no lost_write
            # a bogus ack at offset 0, which retention deleted long ago: the log start listed after
            # the ack says so, and it is judged at once (before, both sides called it expired)
            drill = vigil_json(path, "drill", "zero_offset", "--count", "1")
            assert drill["injected"][0]["log_start_after"] > 0, drill
            wait_for(lambda: nonzero(violations(port)) == BOGUS_ZERO, 60, "the bogus zero offset",
                     show=lambda: nonzero(violations(port)))
            time.sleep(5)
            live = violations(port)
            checked = sample(port, "vigil_records_checked_total", isolation="read_uncommitted")
        finally:
            watch.stop()
    finally:
        writers.stop()
        txn.stop()
    assert nonzero(live) == BOGUS_ZERO  # no offset_mismatch: where it was read does not count
    assert checked > 5000
    report = vigil_json(path, "audit")
    assert nonzero(audit_counts(report)) == BOGUS_ZERO
    history = report["history"]
    assert any(off > 0 for off in history["ledger_first_offsets"].values()), history  # the ledger head is gone
    assert any(off > 0 for off in history["canary_log_start"].values()), history  # so is the canary topic's
    assert history["writers_joined_mid_stream"] >= 1
    assert report["undecided"] == 0


def test_a_second_canary_topic_on_the_same_ledger_is_ignored(cluster_ready, tmp_path):
    cfg, path = watch_config(cluster_ready, tmp_path, "shared-a", 29477, writers=[{"name": "idempotent", "rate": 150}])
    (tmp_path / "b").mkdir()
    _cfg_b, path_b = watch_config(cluster_ready, tmp_path / "b", "shared-b", 0, ledger={"topic": cfg.ledger.topic},
                                  writers=[{"name": "idempotent", "rate": 150}])
    port = cfg.metrics.port
    # (30 s of writes: about 4,500 records of A's for the reader, B's as many on the same ledger)
    a = Background(path, "produce", "--duration", "30", "--metrics-port", "0", name="produce-a")
    b = Background(path_b, "produce", "--duration", "30", "--metrics-port", "0", name="produce-b")
    watch = Background(path, "watch", name="watch")
    try:
        wait_for(lambda: metrics_up(port), 120, "the first batch")
        assert a.wait(200) == 0 and b.wait(200) == 0, (a.tail(), b.tail())
        time.sleep(cfg.watch.unseen_after_s + 5)
        unseen = {iso: sample(port, "vigil_unseen_writes", isolation=iso)
                  for iso in ("read_committed", "read_uncommitted")}
        live = violations(port)
    finally:
        watch.stop()
        a.stop()
        b.stop()
    assert unseen == {"read_committed": 0, "read_uncommitted": 0}  # B's writes are not late: not ours
    assert nonzero(live) == {}
    report = vigil_json(path, "audit")
    assert nonzero(audit_counts(report)) == {} and report["undecided"] == 0
    assert report["records_checked"]["read_uncommitted"] > 3000
