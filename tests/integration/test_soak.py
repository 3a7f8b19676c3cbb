"""The 5-minute soak CI runs (`vigil soak`; the hour-long one is a command whose figures are in the
README): under 1-minute retention, what must stay bounded within 5 minutes — file descriptors,
threads, the checker's state, the Spark checkpoint — stays flat after a 3-minute warm-up, with no violation."""

from __future__ import annotations

import json

from monitor.clients import admin, describe_topic, log_starts
from tests.integration.helpers import vigil
from tests.integration.watch_helpers import watch_config


def test_a_five_minute_soak_keeps_fds_threads_state_and_checkpoint_flat(cluster_ready, tmp_path):
    # a horizon of 3,000 offsets fills in under a minute at the default writers' 80 writes/s per
    # partition; the checker's state reached its bound (about 1.1-1.5 MiB) 0.8 min after the first
    # batch in one run and 2.5 min in another (same code, 2026-11-26: a 2-minute warm-up then judged
    # the end of the climb as growth), so the warm-up is 3 minutes; 2 minutes are judged, sampled every
    # 10 s (3 minutes every 15 s until 2026-11-29: the suite ran over its 50 minutes; in a CI run of
    # 2026-11-28 every figure was at its bound by 2.3 min — the checkpoint, the last, under its slack)
    cfg, path = watch_config(cluster_ready, tmp_path, "soak", 29479, watch={"horizon_offsets": 3000, "driver_java_options": ""})
    report_dir = tmp_path / "report"
    proc = vigil(path, "soak", "--duration", "5m", "--interval", "10s", "--warmup", "3m", "--retention", "1m",
                 "--checks", "fds,threads,state,checkpoint", "--report", str(report_dir), "--json", timeout=720)
    report = json.loads(proc.stdout)
    assert report["ok"], (report["failures"], proc.stderr[-3000:])
    assert report["violations"] == {} and report["exit_code"] == 0
    assert report["samples"] >= 28
    samples = json.loads((report_dir / "soak.json").read_text())["samples"]
    assert samples[-1]["records_checked"] > 50_000  # both readers, 5 minutes at 240 writes/s
    assert all(report["growth"][f]["ok"] for f in report["checked_figures"])
    assert (report_dir / "soak.png").stat().st_size > 10_000
    client = admin(cfg)
    info = describe_topic(client, report["topic"])
    assert all(start > 0 for start in log_starts(client, info))  # retention deleted segments under the run
