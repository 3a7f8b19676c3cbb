"""The chaos run's samples and chart: metrics parsed, rates and latency per second, fault windows."""

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from monitor.chaos import charts
from monitor.chaos.sampler import parse_metrics


def _scrape(acked: int, failed: int, lost: int, acks: list[float]) -> str:
    reg = CollectorRegistry()
    writes = Counter("vigil_producer_writes", "w", ["writer", "outcome"], registry=reg)
    writes.labels("a", "acked").inc(acked - 1)
    writes.labels("b", "acked").inc(1)
    writes.labels("a", "failed").inc(failed)
    v = Counter("vigil_violations", "v", ["invariant", "isolation", "durability"], registry=reg)
    v.labels("lost_write", "read_committed", "at_risk").inc(lost)
    v.labels("lost_write", "read_uncommitted", "at_risk").inc(lost)
    h = Histogram("vigil_producer_ack_latency_seconds", "l", ["writer"], buckets=[0.01, 0.1, 1.0], registry=reg)
    for x in acks:
        h.labels("a").observe(x)
    return generate_latest(reg).decode()


def test_a_scrape_is_summed_over_the_labels_the_chart_does_not_show():
    got = parse_metrics(_scrape(10, 2, 3, [0.005, 0.05]))
    assert got["writes"] == {"acked": 10.0, "failed": 2.0}
    assert got["violations"] == {"lost_write": 6.0}
    assert got["ack"]["count"] == 2 and got["ack"]["buckets"]["0.01"] == 1 and got["ack"]["buckets"]["+Inf"] == 2
    assert got["e2e"]["count"] == 0


def test_rates_and_latency_per_interval():
    s0 = {"t": 0.0, **parse_metrics(_scrape(10, 0, 0, [0.005] * 10))}
    s1 = {"t": 2.0, **parse_metrics(_scrape(30, 4, 1, [0.005] * 10 + [0.05] * 9 + [0.5]))}
    t, writes = charts.per_second([s0, s1], "writes")
    assert t == [2.0] and writes == {"acked": [10.0], "failed": [2.0]}
    t, means, p99 = charts.latency([s0, s1], "ack")
    assert t == [2.0] and abs(means[0] - (9 * 0.05 + 0.5) / 10) < 1e-9
    assert p99 == [1.0]  # the 10th of 10 observations lies in the bucket up to 1 s
    assert charts.latency([s0, s0], "ack") == ([], [], [])  # nothing observed: no point


def test_fault_windows_run_from_a_fault_to_what_ends_it_and_one_off_steps_are_marks():
    steps = [{"at_s": 0.0, "fault": "isolate_replication", "nodes": [2]},
             {"at_s": 0.1, "fault": "wait_isr_shrunk", "nodes": [2]},
             {"at_s": 60.0, "fault": "kill", "nodes": [2]},
             {"at_s": 60.5, "fault": "heal", "nodes": []},
             {"at_s": 75.0, "fault": "start", "nodes": [2]},
             {"at_s": 80.0, "fault": "rolling_restart", "nodes": []}]
    windows, marks = charts.fault_windows(steps, 20.0)
    assert windows == [(20.0, 80.5, "isolate_replication 2"), (80.0, 80.5, "kill 2")]
    assert marks == [(20.1, "wait_isr_shrunk 2"), (100.0, "rolling_restart")]
    undo = [{"at_s": 0.0, "fault": "isolate", "nodes": [3]}, {"at_s": 30.0, "fault": "undo isolate 3"}]
    assert charts.fault_windows(undo, 0.0) == ([(0.0, 30.0, "isolate 3")], [])


def test_a_chart_is_rendered_to_png(tmp_path: Path):
    samples = [{"t": float(i), **parse_metrics(_scrape(10 + 100 * i, i // 10, i // 20, [0.01] * (i + 1))),
                "leaders": {"0": 1 if i < 25 else 2, "1": 3}} for i in range(50)]
    steps = [{"at_s": 0.0, "fault": "kill", "nodes": [1]}, {"at_s": 15.0, "fault": "start", "nodes": [1]}]
    out = charts.render(samples, steps, {"warm-up": 0.0, "faults": 20.0}, "S: t", tmp_path / "t.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
