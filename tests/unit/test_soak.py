"""The soak's verdict: growth fitted after the warm-up, violations, a monitor that stopped checking."""

from __future__ import annotations

import sys
import subprocess
import os
import inspect
import random

import pytest

from monitor.config import load, parse
from monitor.soak import CHECKED_BY_DEFAULT, FIGURES, Sample, growth, judge, parse_duration, soak_config


def series(minutes: int, grow: dict[str, float] | None = None, noise: float = 0.02, seed: int = 1) -> list[Sample]:
    """A sample a minute: every figure flat (with noise) unless ``grow`` gives it a rise per minute.
    Memory is split as a real run's: the monitor's Python, the Spark JVM, and PySpark's Python
    workers (the largest of them grows for ``worker_rss``, the JVM for ``rss_steady``)."""
    rng = random.Random(seed)
    base = {"driver": 300 * 2**20, "jvm": 900 * 2**20, "worker": 150 * 2**20, "workers": 2,
            "state": 8 * 2**20, "checkpoint": 2 * 2**20, "fds": 400, "threads": 180}
    key = {"rss_steady": "jvm", "worker_rss": "worker", "rss": "jvm"}
    out = []
    for m in range(minutes + 1):
        v = {f: base[f] * (1 + rng.uniform(-noise, noise)) for f in base}
        for figure, per_minute in (grow or {}).items():
            v[key.get(figure, figure)] += per_minute * m
        workers = int(v["workers"] + 0.5)
        by = {"driver": int(v["driver"]), "jvm": int(v["jvm"]), "python_workers": int(v["worker"]) * workers}
        out.append(Sample(m * 60.0, sum(by.values()), int(v["state"]), int(v["checkpoint"]), int(v["fds"]),
                          int(v["threads"]), 1000.0 * m, 0.0, by, workers, int(v["worker"])))
    return out


def test_durations():
    assert [parse_duration(t) for t in ("90", "90s", "5m", "1h", "1h30m", "0.5m")] == [90, 90, 300, 3600, 5400, 30]
    for bad in ("", "5x", "m", "0s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_a_flat_run_passes_and_noise_is_not_growth():
    report = judge(series(60), 600, FIGURES, {})
    assert report["ok"], report["failures"]


@pytest.mark.parametrize("figure, per_minute", [("rss_steady", 8 * 2**20), ("worker_rss", 4 * 2**20),
                                                ("state", 40 * 2**10),
                                                ("checkpoint", 20 * 2**10), ("fds", 1), ("threads", 0.5)])
def test_a_slow_leak_fails_the_figure_that_leaks(figure, per_minute):
    """Leaks of the size that would take a canary down within weeks: 8 MiB/min in the JVM or the
    monitor, 4 MiB/min in a Python worker, a file descriptor a minute, a thread every two minutes."""
    samples = series(60, {figure: per_minute})
    report = judge(samples, 600, CHECKED_BY_DEFAULT, {})
    assert not report["ok"]
    assert [f.split(" ")[0] for f in report["failures"]] == [figure]
    assert judge(samples, 600, tuple(f for f in CHECKED_BY_DEFAULT if f != figure), {})["ok"]  # only checked ones


def test_memory_that_steps_with_the_number_of_python_workers_is_no_leak_but_a_worker_that_grows_is():
    """A composition with PySpark workers (Python on the executors): the total goes 1.29 GiB, 1.0,
    1.65, 1.0 as PySpark ends and starts workers, no process growing — and the same with the
    largest worker leaking 4 MiB a minute."""
    for leak, failures in ((0.0, []), (4 * 2**20, ["worker_rss"])):
        samples = series(60, {"worker_rss": leak})
        for s in samples:
            n = 2 if s.t_s < 1800 else 1 if s.t_s < 2640 else 4 if s.t_s < 3600 else 1
            s.rss += (n - s.python_workers) * s.largest_worker
            s.rss_by["python_workers"] = n * s.largest_worker
            s.python_workers = n
        assert [f.split(" ")[0] for f in judge(samples, 600, CHECKED_BY_DEFAULT, {})["failures"]] == failures


def test_a_figure_that_fills_up_during_the_warm_up_is_flat_after_it():
    samples = series(60)
    for s in samples:  # the checker's horizon fills in the first 25 minutes, then stays
        s.state = int(min(s.t_s / 1500, 1) * 8 * 2**20) + 1
    assert not growth(samples, "state", 0)["ok"]
    assert growth(samples, "state", 1800)["ok"]


def test_violations_or_a_monitor_that_stopped_checking_fail():
    final = {("vigil_violations_total", (("durability", "guaranteed"), ("invariant", "lost_write"),
                                         ("isolation", "read_committed"))): 2.0}
    report = judge(series(20), 300, FIGURES, final)
    assert report["violations"] == {"lost_write/read_committed": 2.0} and not report["ok"]
    stuck = series(20)
    for s in stuck:
        s.records_checked = 5000.0
    assert any("stopped checking" in f for f in judge(stuck, 300, FIGURES, {})["failures"])
    assert "only 2 samples" in growth(series(6), "fds", 300)["reason"]


def test_the_soak_config_has_its_own_short_lived_topics_and_keeps_the_secrets(tmp_path):
    base = parse({"kafka": {"bootstrap_servers": "b:9093",
                            "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                         "sasl_username": "u", "sasl_password": "pw"}},
                  "canary": {"extra_config": {"max.message.bytes": "2000000"}},
                  "watch": {"horizon_offsets": 3000}})
    cfg, path = soak_config(base, tmp_path, 90, 29999)
    assert load(path) == cfg
    assert cfg.kafka.security.sasl_password.get_secret_value() == "pw"
    assert cfg.canary.name.startswith("vigil-soak-") and cfg.ledger.topic == cfg.canary.name + "-ledger"
    assert cfg.canary.topic_configs()["retention.ms"] == "90000"
    assert cfg.canary.topic_configs()["max.message.bytes"] == "2000000"
    assert cfg.ledger.topic_configs()["retention.ms"] == "90000"
    assert cfg.ledger.topic_configs()["segment.ms"] == "22500"
    assert (cfg.metrics.port, cfg.watch.horizon_offsets, cfg.state_dir) == (29999, 3000, str(tmp_path / "state"))
    # the application canaries' groups and topics are the run's own, as the canary's are
    assert cfg.groups.enabled and cfg.groups.observation_topic == cfg.canary.name + "-group-obs"
    assert (cfg.groups.group, cfg.eos.group, cfg.eos.output_topic) == (
        cfg.canary.name + "-group", cfg.canary.name + "-eos", cfg.canary.name + "-eos-out")


def test_a_query_that_stopped_half_way_a_bad_exit_or_violations_found_while_draining_fail():
    stalled = series(20)
    for s in stalled[12:]:
        s.records_checked = stalled[11].records_checked  # checking stopped at minute 11, the run went on
    failures = judge(stalled, 300, FIGURES, {})["failures"]
    assert any("stopped checking" in f and "12.0" in f for f in failures)
    assert any("exited with 1" in f for f in judge(series(20), 300, FIGURES, {}, exit_code=1)["failures"])
    drained = judge(series(20), 300, FIGURES, {}, drained={"duplicate/read_committed": 1})
    assert drained["violations"] == {"duplicate/read_committed": 1} and not drained["ok"]
    cycles = judge(series(20), 300, FIGURES, {}, drained={"g0_write_cycle/read_committed": 3})
    assert cycles["violations"] == {"g0_write_cycle/read_committed": 3} and cycles["ok"]  # Kafka allows them


def test_the_process_tree_is_split_by_kind_and_the_chart_draws_each(tmp_path):
    from monitor.soak import Sample, chart, process_tree

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        by_kind: dict = {}
        counts: dict = {}
        rss, _fds, _threads = process_tree(os.getpid(), by_kind, counts)
        assert counts.get("python_workers", 0) >= 1 and counts["driver"] == 1  # the child: a Python process
        assert rss == sum(by_kind.values()) and by_kind["driver"] > 0
    finally:
        child.kill()
        child.wait()
    samples = [Sample(60.0 * i, 2**30, 1, 1, 10, 10, 1000.0 * i, 0, {"driver": 2**29, "jvm": 2**29}, i % 2)
               for i in range(6)]
    assert chart(samples, 60, tmp_path / "soak.png").stat().st_size > 10_000


def test_the_commands_default_checks_are_the_ones_the_verdict_is_designed_for():
    from monitor.cli.soak_cmd import soak

    default = inspect.signature(soak).parameters["checks"].default.default
    assert tuple(default.split(",")) == CHECKED_BY_DEFAULT and set(CHECKED_BY_DEFAULT) <= set(FIGURES)


# CI's 5-minute soak, 2026-11-23 (fds and threads every 15 s): two bursts of open file descriptors
# that were gone by the next sample
CI_FDS = [524, 529, 527, 527, 524, 525, 534, 522, 522, 527, 522, 525, 522, 522, 874, 522, 527, 874, 525, 522, 522]
CI_THREADS = [156, 197, 282, 340, 351, 354, 340, 353, 347, 355, 345, 345, 353, 346, 354, 349, 348, 355, 355, 348, 355]


def test_a_burst_that_comes_and_goes_is_no_growth_but_a_ramp_of_the_same_size_is():
    samples = [Sample(15.0 * i, 2**30, 2**20, 2**17, fds, threads, 1000.0 * i, 0.0)
               for i, (fds, threads) in enumerate(zip(CI_FDS, CI_THREADS))]
    report = judge(samples, 120, ("fds", "threads", "state", "checkpoint"), {})
    assert report["ok"], report["failures"]
    leaking = [Sample(s.t_s, s.rss, s.state, s.checkpoint, 522 + int(s.t_s // 15) * 5, s.threads,
                      s.records_checked, 0.0) for s in samples]  # 5 more every sample: 20 a minute
    assert [f.split(" ")[0] for f in judge(leaking, 120, ("fds",), {})["failures"]] == ["fds"]


def test_a_level_that_steps_up_and_stays_for_the_last_half_is_growth():
    samples = series(60)
    for s in samples:
        if s.t_s >= 35 * 60:
            s.fds += 100
    assert [f.split(" ")[0] for f in judge(samples, 600, ("fds",), {})["failures"]] == ["fds"]


# CI's 5-minute soak, 2026-11-26 (every 15 s after the 2-minute warm-up): threads of `vigil run` and
# its Spark JVM, all of the growth in Spark's block manager pools, which fill up to 100 threads each
CI_THREADS_AFTER_WARMUP = [333, 337, 348, 357, 355, 357, 351, 349, 348, 346, 369, 368, 365]


def test_threads_of_sparks_bounded_pools_are_shown_apart_and_not_judged_by_default():
    pools = [t - 200 for t in CI_THREADS_AFTER_WARMUP]  # what filled up: 133 .. 169
    samples = [Sample(120.0 + 15 * i, 2**30, 2**20, 2**17, 522, 200, 1000.0 * i, 0.0, pool_threads=p)
               for i, p in enumerate(pools)]
    whole = [Sample(s.t_s, s.rss, s.state, s.checkpoint, s.fds, s.threads + s.pool_threads, s.records_checked, 0.0)
             for s in samples]
    assert [f.split(" ")[0] for f in judge(whole, 120, ("threads",), {})["failures"]] == ["threads"]  # as CI failed
    assert judge(samples, 120, CHECKED_BY_DEFAULT, {})["ok"]
    assert [f.split(" ")[0] for f in judge(samples, 120, ("pool_threads",), {})["failures"]] == ["pool_threads"]


def test_threads_in_sparks_bounded_pools_are_counted_by_name(tmp_path, monkeypatch):
    import monitor.soak as soak

    tasks = tmp_path / "proc" / "7" / "task"
    for tid, name in enumerate(["main", "block-manager-a", "block-manager-s", "block-manager-s", "Executor task"]):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "comm").write_text(name + "\n")
    real = soak.Path
    monkeypatch.setattr(soak, "Path", lambda p: real(str(tmp_path) + p) if str(p).startswith("/proc/") else real(p))
    assert soak.bounded_pool_threads(7) == 3
