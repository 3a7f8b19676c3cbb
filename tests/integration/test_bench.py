"""`vigil bench` runs end to end on a small pre-filled topic (the figures go in notes, not asserts)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from monitor.clients import admin
from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import watch_config


def test_bench_measures_all_three_readers_over_the_same_records(cluster_ready, tmp_path):
    _cfg, path = watch_config(cluster_ready, tmp_path, "bench", 0, watch={"max_offsets_per_trigger": 20000})
    out = vigil_json(path, "bench", "--records", "30000", timeout=600)
    assert out["records"] == 30000
    # three idempotent writers and a transactional one wrote them: read_uncommitted reads every
    # record, read_committed all but those of aborted transactions; every reader the same
    reads = out["bare_consumer"]["reads"]
    assert 30000 + 30000 * 0.5 < reads < 2 * 30000
    for name in ("bare_consumer", "spark_noop", "fetch_only", "checker"):
        assert out[name]["reads"] == reads, name
        assert out[name]["records_per_s"] > 0 and out[name]["peak_rss_mb"] > 0 and out[name]["cpu_s_per_m_reads"] > 0
    assert out["warmup"]["rows"] >= reads  # (b) and (c) both after the untimed pass (its ledger rows too)
    assert out["checker"]["reads_per_row"] > 1  # runs leave the executors, not records
    assert out["checker"]["violations"] == 0
    assert out["checker"]["batches"] >= 2  # maxOffsetsPerTrigger split the catch-up
    assert 0 < out["checker"]["state_mb"] <= out["checker"]["state_mb_peak"]
    assert 0 < out["ratio_checker_to_spark"] and 0 < out["ratio_checker_to_bare"] and 0 < out["ratio_fetch_to_spark"]
    assert out["fetch_only"]["rows"] >= reads
    # local mode decodes in Spark's JVM (watch.decode_on auto): runs, not records, reach the driver
    assert out["fetch_only"]["driver_rows"] * 5 < out["fetch_only"]["rows"]


def test_live_bench_reports_latency_percentiles_and_detects_every_drill(cluster_ready, tmp_path):
    cfg, path = watch_config(cluster_ready, tmp_path, "bench-live", 0)
    out = vigil_json(path, "bench", "--only", "live", "--drills", "2", "--rate", "500", "--warmup", "5",
                     "--floor", "10", timeout=600)
    live = out["live"]
    # the floor: the same load under `vigil run --no-check`, its produce → read latency, nothing judged
    floor = live["floor"]
    assert floor["violations"] == 0 and floor["records_checked"] == 0 and floor["topic"] != live["topic"]
    for iso in ("read_committed", "read_uncommitted"):
        assert floor["produce_to_read"][iso]["records"] > 0
        assert 0 < floor["produce_to_read"][iso]["p50_s"] <= floor["produce_to_read"][iso]["p99_s"]
    assert floor["time_split"]["batches"] > 0 and floor["time_split"]["per_batch_s"]["fetch"] > 0
    assert live["missed_drills"] == 0 and live["detection"]["n"] == 2
    assert 0 < live["detection"]["p50_s"] <= live["detection"]["p99_s"] < 30
    for iso in ("read_committed", "read_uncommitted"):
        assert live["produce_to_checked"][iso]["records"] > 0
        assert 0 < live["produce_to_checked"][iso]["p50_s"] <= live["produce_to_checked"][iso]["p99_s"]
    assert abs(sum(live["writers"].values()) - 500) < 0.2  # the config's writers, scaled to --rate together
    # its topics (the canary's, its ledger's, its application canaries') are deleted at the end
    client, deadline = admin(cfg), time.monotonic() + 15  # (brokers learn of a deletion a moment later)
    runs = (live["topic"], floor["topic"])
    while (left := [t for t in client.list_topics(timeout=10).topics if t.startswith(runs)]) and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == []
    # and their directories (named in their topics' names) are removed: the runs ended cleanly
    for topic in runs:
        assert not (Path(tempfile.gettempdir()) / f"vigil-bench-live-{topic.rsplit('-', 1)[-1]}").exists()
