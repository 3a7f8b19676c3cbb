"""A real Prometheus scraping a running `vigil run`: every dashboard panel query returns data,
and drills make the matching shipped alerts go pending/firing."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from monitor.drill_table import expected_counts
from tests.integration.helpers import vigil_json
from tests.integration.watch_helpers import Background, metrics_up, wait_for, watch_config

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "vigil-rules.yml"
DASHBOARD = ROOT / "grafana" / "vigil-dashboard.json"
PROM_PORT = 29490


def query(expr: str) -> dict:
    url = f"http://127.0.0.1:{PROM_PORT}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def alerts() -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{PROM_PORT}/api/v1/alerts", timeout=10) as resp:
        return {a["labels"]["alertname"]: a["state"] for a in json.loads(resp.read())["data"]["alerts"]}


def test_dashboard_queries_return_data_and_drills_fire_their_alerts(cluster_ready, tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is missing: ./test.sh installs the Debian package"
    cfg, path = watch_config(cluster_ready, tmp_path, "prom", 29476)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "vigil", "static_configs": [{"targets": [f"127.0.0.1:{cfg.metrics.port}"]}]}],
    }))
    run = Background(path, "run", name="run")
    prom = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{PROM_PORT}"],
                            stdout=(tmp_path / "prom.out").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: metrics_up(cfg.metrics.port), 90, "the first batch")
        wait_for(lambda: query("vigil_up == 1")["data"]["result"], 60, "Prometheus scraping vigil_up")
        time.sleep(20)  # a few scrapes for rate() windows
        dash = json.loads(DASHBOARD.read_text())
        empty = []
        for panel in dash["panels"]:
            for target in panel["targets"]:
                answer = query(target["expr"])
                assert answer["status"] == "success", (panel["title"], answer)
                if not answer["data"]["result"]:
                    empty.append((panel["title"], target["expr"]))
        assert not empty, f"panels without data: {empty}"
        for annotation in dash["annotations"]["list"]:
            assert query(annotation["expr"])["status"] == "success"
        assert not {a for a, state in alerts().items() if state == "firing"}, alerts()

        rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
        alert_for = {r["labels"]["invariant"]: r["alert"] for r in rules if "invariant" in r["labels"]}
        want = set()
        for kind in ("lost_write", "duplicate", "aborted_read", "outcome_gap"):
            vigil_json(path, "drill", kind, "--count", "1")
            want |= {alert_for[inv.value] for inv, _iso in expected_counts(kind, 1)}
        found = wait_for(lambda: want <= {a for a, s in alerts().items() if s in ("pending", "firing")} and alerts(),
                         60, f"alerts {sorted(want)}")
        assert want <= set(found)
        # safety alerts carry no `for:`: they fire at once, not just pending
        wait_for(lambda: all(alerts().get(a) == "firing" for a in want), 30, "firing")
    finally:
        prom.terminate()
        prom.wait(30)
        run.stop()
