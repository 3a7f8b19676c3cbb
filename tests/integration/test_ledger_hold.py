"""The ledger hold (invariants/ledger_hold.py) across a kill -9, on a history built for it: a
catch-up whose ledger is far smaller than its canary, so Spark fetches the ledger well ahead of the
readers and the hold keeps it for most of the catch-up, whatever the run's timing."""

from __future__ import annotations

import time
from collections import Counter

from tests.drill_rows import drill_row
from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import (
    Background, audit_counts, final_counts, metrics_up, nonzero, sample, wait_for, watch_config,
)

DRILLS = {"duplicate": 2, "reorder": 1, "lost_write": 1, "partial_txn": 1}


def test_a_catch_up_killed_while_it_holds_ledger_rows_counts_exactly_what_the_audit_counts(cluster_ready, tmp_path):
    """A writer at 1,500 records/s (an outcome entry stands for 50 ms of its acknowledgements, so the
    ledger is a few percent of the canary's offsets) beside a transactional one, with drills between;
    then a catch-up in batches of 2,000 offsets per source with a 5 s lead: the ledger, fetched whole in
    the first batches, is held until the readers come near. The watch is killed -9 while rows are held,
    started again, holds them again from the files before Spark's first batch, and counts exactly the
    drills, as the audit does, no acknowledgement expired."""
    port = 29486
    cfg, path = watch_config(cluster_ready, tmp_path, "hold", port,
                             writers=[{"name": "fast", "rate": 1500},
                                      {"name": "txn", "transactional": True, "rate": 200,
                                       "transaction": {"size": 10}}],
                             watch={"max_offsets_per_trigger": 2000, "ledger_lead_s": 5})
    # (stopped 8 s after the last drill, however long the drills took: read past their settle window)
    fast = Background(path, "produce", "--writer", "fast", "--duration", "600", "--metrics-port", "0", name="fast")
    txn = Background(path, "produce", "--writer", "txn", "--duration", "600", "--metrics-port", "0", name="txn")
    want: Counter = Counter()
    try:
        time.sleep(8)
        assert fast.proc.poll() is None and txn.proc.poll() is None, (fast.tail(), txn.tail())
        for kind, count in DRILLS.items():
            assert vigil_json(path, "drill", kind, "--count", str(count))["count"] == count
            want.update(drill_row(kind, count))
        time.sleep(8)
        assert fast.stop() == 0, fast.tail()  # (SIGTERM: it ends cleanly, every write decided)
        assert txn.stop() == 0, txn.tail()
    finally:
        fast.stop()
        txn.stop()

    held = cfg.checkpoint_dir() / "ledger-held"
    watch = Background(path, "watch", name="watch-1")
    try:
        # (the gauge: rows held by a saved state; a file alone may be a batch's not saved yet)
        wait_for(lambda: (sample(port, "vigil_ledger_held_rows") or 0) > 0, 180, "ledger rows held in the catch-up",
                 interval=0.1, show=lambda: watch.tail())
        held_when_killed = sample(port, "vigil_ledger_held_rows")
        watch.kill9()
        assert any(held.glob("*.arrow"))
        watch = Background(path, "watch", "--until-caught-up", "--json", name="watch-2")
        wait_for(lambda: metrics_up(port), 120, "the restarted catch-up's /metrics")
        # held again from the files, before Spark's first batch (it takes far longer to come)
        assert sample(port, "vigil_ledger_held_rows") > 0
        assert watch.proc.wait(300) == 0, watch.tail()
    finally:
        watch.stop()
    assert not any(held.glob("*.arrow"))  # everything applied by the end
    found = watch.stdout_json()["checker"]
    print(f"ledger rows held when killed {held_when_killed:.0f}, at most after the restart "
          f"{found['ledger_held_peak']}; batches {found['batches']}, records checked {found['records_checked']}")
    counts = final_counts(watch)
    assert counts == dict(want), (counts, want)
    assert not any(found["expired_unread"].values()), found["expired_unread"]  # (none expired by the hold)
    assert nonzero(audit_counts(vigil_json(path, "audit"))) == dict(want)
