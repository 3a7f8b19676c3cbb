"""The live bench's arithmetic: percentiles of a histogram's growth, and per-bucket counts from /metrics."""

from __future__ import annotations

import pytest

from monitor.bench_live import _e2e, _summary, percentile
from monitor.metrics import E2E_BUCKETS

BOUNDS = (1.0, 2.0, 5.0)


def test_percentile_interpolates_within_the_bucket_that_holds_it():
    assert percentile(BOUNDS, [10, 0, 0, 0], 0.5) == pytest.approx(0.5)
    assert percentile(BOUNDS, [0, 10, 0, 0], 0.5) == pytest.approx(1.5)
    assert percentile(BOUNDS, [50, 40, 10, 0], 0.99) == pytest.approx(2.0 + 3.0 * 0.9)
    assert percentile(BOUNDS, [50, 50, 0, 0], 0.5) == pytest.approx(1.0)


def test_percentile_of_nothing_and_beyond_the_last_bound():
    assert percentile(BOUNDS, [0, 0, 0, 0], 0.5) is None
    assert percentile(BOUNDS, [1, 0, 0, 99], 0.99) == 5.0  # only "above 5 s" is known


def test_bucket_counts_come_back_from_cumulative_samples():
    labels = [*map(str, E2E_BUCKETS), "+Inf"]  # as monitor.metrics writes them: "1", not "1.0"
    cumulative = [i + 1 for i in range(len(labels))]  # one record per bucket
    samples = {("vigil_e2e_latency_seconds_bucket", tuple(sorted({"isolation": "read_committed", "le": le}.items()))): c
               for le, c in zip(labels, cumulative)}
    counts = _e2e(samples)
    assert counts["read_committed"] == [1.0] * len(labels)
    assert counts["read_uncommitted"] == [0.0] * len(labels)


def test_summary_reports_median_and_the_99th_value():
    s = _summary([float(i) for i in range(1, 101)])
    assert s["n"] == 100 and s["p50_s"] == 50.5 and s["p99_s"] == 99.0 and s["max_s"] == 100.0
    assert _summary([]) == {}


@pytest.mark.parametrize("running_before, keep, stopped", [
    (False, False, True),   # started for the bench: stopped at the end
    (False, True, False),   # --keep-cluster
    (True, False, False),   # found running (another bench, the test suite's cluster): left as found
])
def test_bench_stops_the_local_cluster_only_when_it_started_it(tmp_path, monkeypatch, running_before, keep, stopped):
    """`vigil bench` used to leave the local cluster it started running (three broker JVMs, found
    beside a CI run hours later)."""
    from typer.testing import CliRunner

    from monitor.cli import app, bench_cmd
    from monitor.cluster import access, local_cluster

    downs: list = []
    monkeypatch.setattr(bench_cmd, "_local_cluster_running", lambda cfg: running_before)
    monkeypatch.setattr(access, "up_for", lambda cfg, progress: None)
    monkeypatch.setattr(bench_cmd, "_bench", lambda *a: (_ for _ in ()).throw(RuntimeError("bench failed")))
    monkeypatch.setattr(local_cluster.LocalCluster, "down", lambda self, purge=False: downs.append(purge))
    path = tmp_path / "v.yaml"
    path.write_text(f"state_dir: {tmp_path / 'state'}\n")
    result = CliRunner().invoke(app, ["bench", "--config", str(path), *(["--keep-cluster"] if keep else [])])
    assert isinstance(result.exception, RuntimeError)  # a failed bench stops it too
    assert downs == ([False] if stopped else [])


def test_a_local_cluster_never_started_is_not_running(tmp_path):
    from monitor.cli.bench_cmd import _local_cluster_running
    from monitor.config import parse

    # (its own cluster directory: a local cluster running from the checkout, as a bench with --keep-cluster
    # leaves it, is no business of this test's)
    cfg = parse({"state_dir": str(tmp_path / "state"), "cluster": {"state_dir": str(tmp_path / "cluster")}}, "v.yaml")
    assert _local_cluster_running(cfg) is False
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.properties"))
