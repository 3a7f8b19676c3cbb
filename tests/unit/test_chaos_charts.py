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
    t = Counter("vigil_producer_transactions", "t", ["writer", "outcome"], registry=reg)
    t.labels("a", "committed").inc(acked // 4)
    t.labels("a", "aborted").inc(failed)
    h = Histogram("vigil_producer_ack_latency_seconds", "l", ["writer"], buckets=[0.01, 0.1, 1.0], registry=reg)
    for x in acks:
        h.labels("a").observe(x)
    return generate_latest(reg).decode()


def test_a_scrape_is_summed_over_the_labels_the_chart_does_not_show():
    got = parse_metrics(_scrape(10, 2, 3, [0.005, 0.05]))
    assert got["writes"] == {"acked": 10.0, "failed": 2.0}
    assert got["violations"] == {"lost_write": 6.0}
    assert got["transactions"] == {"committed": 2.0, "aborted": 2.0}
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
    s2 = {**s1, "t": 12.0, "writes": {"acked": 130.0, "failed": 4.0}}
    t, writes = charts.per_second([s0, s1, s2], "writes")
    assert t == [2.0, 3.5, 12.0] and writes["acked"][0] == 10.0 and writes["acked"][1] != writes["acked"][1]
    assert writes["acked"][2] == 10.0  # the mean over the gap, the line broken before it


def test_fault_windows_run_from_a_fault_to_what_ends_it_and_one_off_steps_are_marks():
    steps = [{"at_s": 0.0, "fault": "isolate_replication", "nodes": [2]},
             {"at_s": 0.1, "fault": "wait_isr_shrunk", "nodes": [2]},
             {"at_s": 60.0, "fault": "kill", "nodes": [2]},
             {"at_s": 60.5, "fault": "heal", "nodes": []},
             {"at_s": 75.0, "fault": "start", "nodes": [2]},
             {"at_s": 80.0, "fault": "rolling_restart", "nodes": []}]
    windows, marks = charts.fault_windows(steps, 20.0)
    assert windows == [(20.0, 80.5, "isolate_replication 2"), (80.0, 95.0, "kill 2")]  # a heal ends cuts only
    assert marks == [(20.1, "wait_isr_shrunk 2"), (100.0, "rolling_restart")]
    undo = [{"at_s": 0.0, "fault": "isolate", "nodes": [3]}, {"at_s": 30.0, "fault": "undo isolate 3"}]
    assert charts.fault_windows(undo, 0.0) == ([(0.0, 30.0, "isolate 3")], [])


def test_leaders_are_broken_where_nobody_answered_and_none_is_zero():
    samples = [{"t": 1.0, "leaders": {"0": 2}}, {"t": 2.0, "leaders": {"0": -1}}, {"t": 3.0},
               {"t": 9.0, "leaders": {"0": 3}}]
    xs, ys = charts.leader_series(samples, 0)
    assert xs == [1.0, 2.0, 3.5, 9.0] and ys[:2] == [2.0, 0.0] and ys[2] != ys[2] and ys[3] == 3.0


def test_a_leaders_call_that_hangs_is_abandoned_and_asked_anew(tmp_path: Path, monkeypatch):
    import threading

    from monitor.chaos import sampler as sampling

    monkeypatch.setattr(sampling, "ABANDON_S", 0.2)
    release, calls = threading.Event(), []

    def leaders():
        calls.append(1)
        if len(calls) == 1:
            release.wait(5)  # hangs, as an admin client stuck on a dead broker did
        return {0: 3}

    s = sampling.Sampler("http://127.0.0.1:9/metrics", leaders, tmp_path / "t.jsonl", period_s=0.1)
    got = [s._leaders_now() for _ in range(10)]
    release.set()
    assert got[0] is None and {0: 3} in got and len(calls) == 1 + got.count({0: 3})  # one hung, then one a sample


def test_a_chart_is_rendered_to_png(tmp_path: Path):
    samples = [{"t": float(i), **parse_metrics(_scrape(10 + 100 * i, i // 10, i // 20, [0.01] * (i + 1))),
                "leaders": {"0": 1 if i < 25 else 2, "1": 3}} for i in range(50)]
    steps = [{"at_s": 0.0, "fault": "kill", "nodes": [1]}, {"at_s": 15.0, "fault": "start", "nodes": [1]}]
    out = charts.render(samples, steps, {"warm-up": 0.0, "faults": 20.0}, "S: t", tmp_path / "t.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_the_sampler_appends_a_sample_a_period_and_skips_what_does_not_answer(tmp_path: Path):
    import http.server
    import json
    import threading
    import time

    from monitor.chaos.sampler import Sampler, load

    body = _scrape(5, 0, 0, []).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    calls = []

    def leaders():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("no broker answered")
        if len(calls) == 2:
            time.sleep(0.2)  # slower than half a period: samples go on without it meanwhile
        return {0: 2}

    s = Sampler(f"http://127.0.0.1:{server.server_address[1]}/metrics", leaders, tmp_path / "t.jsonl", 0.05)
    s.start()
    try:
        deadline = time.monotonic() + 10
        while len(load(tmp_path / "t.jsonl")) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        s.finish()
        server.shutdown()
    samples = load(tmp_path / "t.jsonl")
    assert len(samples) >= 3 and not s.is_alive()
    assert samples[0]["writes"] == {"acked": 5.0, "failed": 0.0} and "leaders" not in samples[0]
    assert "leaders" not in samples[1] and samples[1]["writes"]  # the slow answer did not hold the sample up
    assert any(x.get("leaders") == {"0": 2} for x in samples[2:]) and json.loads(json.dumps(s.latest)) == s.latest
    def nothing():
        raise RuntimeError("no broker answered")

    assert Sampler("http://127.0.0.1:9/metrics", nothing, tmp_path / "dead.jsonl").sample() == {}
