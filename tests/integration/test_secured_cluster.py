"""Vigil on a secured cluster: the local cluster with `cluster.security: sasl_ssl` (SCRAM-SHA-512
over TLS, StandardAuthorizer, no access without an ACL), every client authenticating as the canary
principal from the one config — writers, ledger, Spark's source, prober, re-fetcher, audit."""

from __future__ import annotations

import json
import secrets
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from monitor.cluster.access import up_for
from monitor.cluster.local_cluster import LocalCluster
from tests.integration.helpers import VIGIL, make_config, vigil_json
from tests.integration.watch_helpers import (
    Background, audit_counts, final_counts, metrics_up, nonzero, sample, scrape, wait_for,
)

ISOS = ("read_committed", "read_uncommitted")
PASSWORD = "pw-" + secrets.token_hex(12)  # what every output is searched for


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    ca = tmp / "cluster" / "tls" / "ca.pem"
    cfg, path = make_config(
        tmp, client_base=28092, internal_base=28292, control_port=28090,
        cluster={"security": "sasl_ssl"},
        kafka={"security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "vigil-canary",
                            "sasl_password": PASSWORD, "ssl_ca_location": str(ca)}},
        canary={"name": "sec-canary"}, ledger={"topic": "sec-ledger", "checkpoint_interval_s": 5},
        metrics={"port": 29491},
        watch={"stall_threshold_s": 8, "lso_stuck_threshold_s": 6, "poll_timeout_ms": 15000,
               "restart_backoff_max_s": 4},
        writers=[{"name": "idempotent", "rate": 100},
                 {"name": "txn", "transactional": True, "rate": 30, "transaction": {"size": 3}}])
    cluster = LocalCluster(cfg.cluster, print)
    try:
        up_for(cfg, print)
        yield {"cfg": cfg, "path": path, "cluster": cluster}
    finally:
        cluster.down()


def test_the_canary_principal_may_use_its_topics_and_nothing_else(secured):
    cfg, cluster = secured["cfg"], secured["cluster"]
    conf = cfg.kafka.librdkafka(cluster.bootstrap_servers)
    client = AdminClient(conf)
    created = client.create_topics([NewTopic("not-vigils", 1, 1)], request_timeout=30)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        created["not-vigils"].result()
    # without credentials the client listener answers nothing at all
    plain = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "socket.timeout.ms": 3000})
    with pytest.raises(Exception):
        plain.list_topics(timeout=5)


def test_a_clean_run_on_the_secured_cluster_checks_both_readers_and_never_shows_the_password(secured):
    cfg, path = secured["cfg"], secured["path"]
    port = cfg.metrics.port
    run = Background(path, "run", "--json", name="run")
    scrapes = []
    try:
        wait_for(lambda: metrics_up(port), 180, "the first batch", show=run.tail)
        wait_for(lambda: all((sample(port, "vigil_records_checked_total", isolation=iso) or 0) > 1000 for iso in ISOS),
                 120, "records checked in both readers", show=run.tail)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            scrapes.append(resp.read().decode())
        assert scrape(port)  # parses
    finally:
        assert run.stop() == 0, run.tail()
    summary = run.stdout_json()
    assert all(summary["checker"]["records_checked"][iso] > 1000 for iso in ISOS), summary["checker"]
    assert nonzero(final_counts(run)) == {}
    report = vigil_json(path, "audit")
    assert nonzero(audit_counts(report)) == {} and report["undecided"] == 0
    shown = subprocess.run(VIGIL + ["config", "show", "--config", str(path)], capture_output=True, text=True)
    assert shown.returncode == 0 and "sasl_password" in shown.stdout
    # the secret appears nowhere Vigil writes or prints: outputs, metrics, evidence, state,
    # Spark's logs and checkpoint, the config it shows
    texts = {"run.out": run.out.read_text(errors="replace"), "run.err": run.err.read_text(errors="replace"),
             "metrics": scrapes[0], "config show": shown.stdout + shown.stderr,
             "audit": json.dumps(report)}
    for f in Path(cfg.state_dir).rglob("*"):
        if f.is_file():
            texts[str(f)] = f.read_bytes().decode(errors="replace")
    leaked = sorted(name for name, text in texts.items() if PASSWORD in text)
    assert leaked == [], leaked


def test_a_wrong_password_is_one_clear_line_and_a_metric_and_the_monitor_waits_for_it(secured, tmp_path):
    """An external cluster (bootstrap servers set: nothing is created or granted for it) that
    refuses the credentials: no stack trace, no exit, no crash loop — the line naming the
    settings, vigil_client_errors_total, tries again with a growing wait; stops cleanly."""
    cluster = secured["cluster"]
    wrong = "wrong-" + secrets.token_hex(8)
    data = yaml.safe_load(secured["path"].read_text())
    data["kafka"]["bootstrap_servers"] = cluster.bootstrap_servers
    data["kafka"]["security"]["sasl_password"] = wrong
    data["metrics"]["port"] = 29492
    data["state_dir"] = str(tmp_path / "state")
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(data))
    run = Background(path, "run", name="wrong")
    try:
        refused = wait_for(lambda: sample(29492, "vigil_client_errors_total", client="admin", kind="authentication"),
                           90, "the refusal counted", show=run.tail)
        assert refused >= 1
        wait_for(lambda: "trying again" in run.err.read_text(), 60, "a second try announced", show=run.tail)
        assert run.proc.poll() is None  # still running, waiting for a fix
        metrics = urllib.request.urlopen("http://127.0.0.1:29492/metrics", timeout=5).read().decode()
    finally:
        assert run.stop() == 0, run.tail()
    err = run.err.read_text()
    said = [line for line in err.splitlines() if line.startswith("vigil: admin: ")]
    assert len(said) == 1, err  # once a minute at most, however often the client retries
    assert "'vigil-canary'" in said[0] and "kafka.security.sasl_password" in said[0]
    assert "Traceback" not in err
    assert not any(wrong in text for text in (err, run.out.read_text(), metrics))
