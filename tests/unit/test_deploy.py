"""Alert rules (promtool), dashboard, runbooks, Kubernetes manifests and the Dockerfile."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from invariants.catalog import CATALOG
from monitor.cluster.jars import SPARK_KAFKA_CONNECTOR
from monitor.config import parse
from monitor.eos.runner import EosPipeline
from monitor.group.runner import GroupRunner
from monitor.metrics import producer_metrics
from monitor.watch.runtime import WatchRuntime

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "vigil-rules.yml"
RULE_TESTS = ROOT / "tests" / "alerts" / "vigil-rules.test.yml"
DASHBOARD = ROOT / "grafana" / "vigil-dashboard.json"
OVERLAYS = sorted(p.name for p in (ROOT / "deploy" / "k8s" / "overlays").iterdir())
K8S_VERSION = "1.32.0"


def rules() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"][0]["rules"]


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: ./test.sh installs the Debian package prometheus"
    return path


# -- alert rules ---------------------------------------------------------------------------


def test_promtool_checks_the_rule_file():
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules())} rules found" in proc.stdout


def test_promtool_unit_tests_of_the_shipped_rules_pass():
    spec = yaml.safe_load(RULE_TESTS.read_text())
    assert [(RULE_TESTS.parent / f).resolve() for f in spec["rule_files"]] == [RULES.resolve()]  # not a copy
    proc = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_is_tested_firing_and_silent():
    fires: dict[str, int] = {}
    silent: dict[str, set[str]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            name = check["alertname"]
            if check["exp_alerts"]:
                fires[name] = fires.get(name, 0) + 1
            else:
                silent.setdefault(name, set()).add(case["name"].split(" silent ")[-1] if " silent " in case["name"] else "")
    for rule in rules():
        name = rule["alert"]
        assert fires.get(name), f"{name}: no test where it fires"
        assert {"on a clean series", "on a missed scrape"} <= silent.get(name, set()), name
        assert any("restart" in s for s in silent.get(name, set())), f"{name}: no restart case"


def test_one_alert_per_invariant_with_its_severity_and_a_runbook_entry():
    by_invariant = {r["labels"].get("invariant"): r for r in rules() if "invariant" in r["labels"]}
    assert set(by_invariant) == {inv.value for inv in CATALOG}
    for inv, info in CATALOG.items():
        assert by_invariant[inv.value]["labels"]["severity"] == info.severity.value
    names = {r["alert"] for r in rules()}
    assert {"VigilMonitorDown", "VigilMonitorStale", "VigilCanaryProducerStalled", "VigilOutcomeGap"} <= names
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    for rule in rules():
        anchor = rule["annotations"]["runbook_url"].split("#")[1]
        assert f"## {rule['alert']}" in runbooks and anchor == rule["alert"].lower()
    safety = {"lost_write", "duplicate", "reorder", "zero_offset", "offset_mismatch", "inconsistent_offset",
              "aborted_read", "partial_txn", "outcome_gap"}
    safety_rules = [r for r in rules() if r["labels"].get("invariant") in safety]
    assert {r["labels"]["invariant"] for r in safety_rules} == safety
    for rule in safety_rules:
        assert "for" not in rule, f"{rule['alert']}: a safety violation pages at once"
    for name in ("VigilMonitorDown", "VigilMonitorStale"):
        assert next(r for r in rules() if r["alert"] == name).get("for"), name


# -- dashboard -----------------------------------------------------------------------------


def exported_metric_names(tmp_path) -> set[str]:
    cfg = parse({"state_dir": str(tmp_path), "metrics": {"port": 0}})
    registry = CollectorRegistry()
    producer_metrics(registry).init_writer("w", transactional=True)
    WatchRuntime(cfg).serve_metrics(registry)
    EosPipeline(cfg, registry)  # what `vigil run` adds with eos.enabled and groups.enabled
    GroupRunner(cfg, registry)
    names: set[str] = set()
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# TYPE "):  # families without samples yet still declare their type
            _, _, name, kind = line.split(" ")
            if kind == "counter":
                names.add(name if name.endswith("_total") else name + "_total")
            elif kind == "histogram":
                names |= {name + s for s in ("_bucket", "_sum", "_count")}
            else:
                names.add(name)
    return names


def test_dashboard_uses_a_datasource_variable_and_only_exported_metrics(tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    assert any(v["type"] == "datasource" and v["name"] == "datasource" for v in dash["templating"]["list"])
    exported = exported_metric_names(tmp_path)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]] + [a["expr"] for a in dash["annotations"]["list"]]
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
    used = {m for e in exprs for m in re.findall(r"\b(vigil_[a-z0-9_]+)", e)}
    assert used - exported == set()
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("violations", "unseen", "latency", "lag", "progress", "acks", "failures", "freshness"):
        assert topic in titles, topic
    assert dash["annotations"]["list"], "fault windows as annotations"


def test_alert_rules_and_their_tests_are_rendered_from_the_catalog():
    spec = importlib.util.spec_from_file_location("render_alerts", ROOT / "scripts" / "render_alerts.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    for path, fn in render.RENDERED.items():
        assert path.read_text() == fn(), f"run python scripts/render_alerts.py ({path.name})"


def test_safety_alerts_page_only_on_broken_promises():
    for rule in rules():
        inv = rule["labels"].get("invariant")
        if inv in {"lost_write", "duplicate", "reorder", "zero_offset", "offset_mismatch", "inconsistent_offset",
                   "aborted_read", "partial_txn", "outcome_gap"}:
            assert 'durability="guaranteed"' in rule["expr"] and rule["labels"]["severity"] == "critical", rule["alert"]
    warnings = {r["alert"]: r for r in rules() if r["labels"]["severity"] == "warning"}
    assert {"VigilLossAllowedByConfiguration", "VigilAtRiskViolation", "VigilUnclassifiedViolation"} <= set(warnings)


def test_generated_deploy_files_are_in_sync():
    spec = importlib.util.spec_from_file_location("render", ROOT / "scripts" / "render_deploy.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    for name, fn in render.RENDERED.items():
        assert (render.GENERATED / name).read_text() == fn(), f"run python scripts/render_deploy.py ({name})"


# -- Kubernetes ----------------------------------------------------------------------------


def kustomize(overlay: str) -> list[dict]:
    path = ROOT / "deploy" / "k8s" / "overlays" / overlay
    kubectl = shutil.which("kubectl")
    ok = kubectl and "Kustomize Version: v5" in subprocess.run([kubectl, "version", "--client"], capture_output=True,
                                                                text=True).stdout
    cmd = [kubectl, "kustomize", str(path)] if ok else [
        str(Path(os.environ.get("HOME", "/root")) / ".cache" / "vigil" / "bin" / "kustomize"), "build", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


CUSTOM = {
    "ServiceMonitor": lambda d: d["spec"]["endpoints"] and d["spec"]["selector"]["matchLabels"],
    "PrometheusRule": lambda d: all(r["alert"] and r["expr"] for g in d["spec"]["groups"] for r in g["rules"]),
    "SparkApplication": lambda d: all(d["spec"][k] for k in ("type", "mode", "image", "mainApplicationFile",
                                                             "sparkVersion", "driver", "executor")),
    "KafkaTopic": lambda d: d["metadata"]["labels"]["strimzi.io/cluster"] and d["spec"]["partitions"] > 0
    and d["spec"]["replicas"] > 0,
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates(overlay):
    docs = kustomize(overlay)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "StatefulSet", "Service", "ServiceMonitor", "PrometheusRule",
            "NetworkPolicy"} <= kinds
    for d in docs:
        if d["kind"] in CUSTOM:
            assert CUSTOM[d["kind"]](d), d["metadata"]["name"]
            continue
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment"):
            pod = d["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            for c in pod["containers"]:
                assert c["securityContext"]["readOnlyRootFilesystem"] is True
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["resources"]["limits"]["memory"] and c["livenessProbe"]
    watch = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "vigil-watch"]
    if overlay == "spark-on-k8s":
        assert not watch and "SparkApplication" in kinds
    else:
        (dep,) = watch
        assert dep["spec"]["strategy"]["type"] == "Recreate"
        c = dep["spec"]["template"]["spec"]["containers"][0]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/ready"
        assert any(v.get("persistentVolumeClaim") for v in dep["spec"]["template"]["spec"]["volumes"])
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vigil-config")
    vigil_yaml = yaml.safe_load(config["data"]["vigil.yaml"])
    assert vigil_yaml["metrics"]["bind"] == "0.0.0.0"
    os.environ.setdefault("VIGIL_SASL_USERNAME", "u")
    os.environ.setdefault("VIGIL_SASL_PASSWORD", "p")
    from monitor.config import expand_env

    parse(expand_env(vigil_yaml))  # the shipped config is a valid Vigil config
    security = vigil_yaml.get("kafka", {}).get("security", {})
    assert bool(security.get("sasl_password_file")) == (overlay == "sasl-tls")
    if security.get("sasl_password_file"):  # a rotated password reaches the running pods as a file
        directory = str(Path(security["sasl_password_file"]).parent)
        for d in docs:
            if d["kind"] in ("StatefulSet", "Deployment"):
                pod = d["spec"]["template"]["spec"]
                (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == directory]
                assert "subPath" not in mount and mount["readOnly"]  # subPath mounts are never updated
                (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
                assert volume["secret"]["secretName"] == "vigil-kafka", d["metadata"]["name"]
    assert all(d["kind"] == "StatefulSet" for d in docs if d["metadata"]["name"].startswith("vigil-canary")
               and d["kind"] in ("StatefulSet", "Deployment"))


def test_dockerfile_has_the_package_the_jre_and_the_pinned_jars():
    text = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M) and "openjdk-17-jre-headless" in text
    assert "pip install --no-cache-dir ." in text and "COPY monitor" in text and "COPY invariants" in text
    for g, a, v in SPARK_KAFKA_CONNECTOR:
        assert f"{g}:{a}:{v}" in text
    assert re.search(r"^USER 10001$", text, re.M) and 'ENTRYPOINT ["vigil"]' in text
    assert "VIGIL_JAR_CACHE=/opt/vigil/jars" in text and "spark_app.py" in text


def test_readme_links_dashboard_alerts_runbooks_and_deploy_docs():
    readme = (ROOT / "README.md").read_text()
    for target in ("grafana/vigil-dashboard.json", "deploy/prometheus/vigil-rules.yml", "docs/runbooks.md",
                   "docs/deploy.md"):
        assert f"]({target})" in readme and (ROOT / target).exists(), target
