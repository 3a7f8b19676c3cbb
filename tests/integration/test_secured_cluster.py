"""Vigil on a secured cluster: the local cluster with `cluster.security: sasl_ssl` (SCRAM-SHA-512
over TLS, StandardAuthorizer, no access without an ACL), every client authenticating as the canary
principal from the one config — writers, ledger, Spark's source, prober, re-fetcher, audit."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import (
    AclBindingFilter, AclOperation, AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
    UserScramCredentialUpsertion,
)

from monitor.cluster.access import canary_acls, up_for
from monitor.cluster.local_cluster import LocalCluster
from monitor.config import parse
from monitor.drill_table import DRILL_KINDS
from tests.drill_rows import drill_row
from tests.integration.helpers import VIGIL, make_config, vigil_json
from tests.integration.watch_helpers import (
    Background, audit_counts, final_counts, metrics_up, nonzero, sample, scrape, violations, wait_for,
)

ISOS = ("read_committed", "read_uncommitted")
PASSWORD = "pw-" + secrets.token_hex(12)  # what every output is searched for
ROTATED = "pw2-" + secrets.token_hex(12)  # the password it is rotated to under a running monitor


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    ca = tmp / "cluster" / "tls" / "ca.pem"
    password_file = tmp / "canary.pw"  # read again while running: the password can be rotated
    password_file.write_text(PASSWORD + "\n")
    cfg, path = make_config(
        tmp, client_base=28092, internal_base=28292, control_port=28090,
        cluster={"security": "sasl_ssl"},
        kafka={"security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "vigil-canary",
                            "sasl_password_file": str(password_file), "ssl_ca_location": str(ca)}},
        canary={"name": "sec-canary"}, ledger={"topic": "sec-ledger", "checkpoint_interval_s": 5},
        metrics={"port": 29491},
        # stall threshold 20 s: the query started again for the rotated password reads nothing meanwhile
        watch={"stall_threshold_s": 20, "lso_stuck_threshold_s": 6, "poll_timeout_ms": 15000,
               "restart_backoff_max_s": 4, "certificate_check_interval_s": 2, "credentials_check_interval_s": 1},
        writers=[{"name": "idempotent", "rate": 100},
                 {"name": "txn", "transactional": True, "rate": 30, "transaction": {"size": 3}}])
    cluster = LocalCluster(cfg.cluster, print)
    try:
        up_for(cfg, print)
        yield {"cfg": cfg, "path": path, "cluster": cluster, "password_file": password_file}
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
    try:
        with pytest.raises(Exception):
            plain.list_topics(timeout=5)
    finally:
        del plain  # a client left alive reconnects (and logs it) every second for the rest of the session


def acked_writes(port: int) -> float:
    return sum(v for (name, labels), v in scrape(port).items()
               if name == "vigil_producer_writes_total" and dict(labels).get("outcome") == "acked")


def broker_expiries(port: int) -> dict[str, float]:
    """source -> the expiry /metrics shows for the certificate that broker presents."""
    return {dict(labels)["source"]: v for (name, labels), v in scrape(port).items()
            if name == "vigil_tls_certificate_expiry_timestamp_seconds" and dict(labels)["certificate"] == "broker"}


def test_a_clean_run_on_the_secured_cluster_checks_both_readers_and_never_shows_the_password(secured):
    """Also, under the running monitor: the brokers' certificate is renewed (a new key store the
    brokers load without a restart) and /metrics shows the new expiry within seconds while
    checking goes on; the canary's Write ACL is taken away and given back — one line naming the
    writer and the ACL, vigil_client_errors_total, writes acknowledged again, nothing lost; the
    canary's password is rotated (on the brokers and in kafka.security.sasl_password_file) and
    the brokers make every connection authenticate again — the open clients take the new password
    from the file, Spark's source when its query starts again, and checking goes on."""
    cfg, path, cluster = secured["cfg"], secured["path"], secured["cluster"]
    port = cfg.metrics.port
    addresses = sorted(cluster.bootstrap_servers.split(","))
    run = Background(path, "run", "--json", name="run")
    scrapes = []
    try:
        wait_for(lambda: metrics_up(port), 180, "the first batch", show=run.tail)
        wait_for(lambda: all((sample(port, "vigil_records_checked_total", isolation=iso) or 0) > 1000 for iso in ISOS),
                 120, "records checked in both readers", show=run.tail)
        first = cluster.tls.expires_at().timestamp()
        assert broker_expiries(port) == {a: first for a in addresses}
        assert sample(port, "vigil_tls_certificate_expiry_timestamp_seconds", cluster="canary", certificate="ca",
                      source=str(cluster.tls.ca_pem)) == pytest.approx(first, abs=5)
        renewed = cluster.renew_certificate(days=20)
        assert renewed < first - 300 * 86400
        wait_for(lambda: broker_expiries(port) == {a: renewed for a in addresses}, 30,
                 "the renewed certificate's expiry on /metrics", show=lambda: broker_expiries(port))
        checked = {iso: sample(port, "vigil_records_checked_total", isolation=iso) for iso in ISOS}
        wait_for(lambda: all(sample(port, "vigil_records_checked_total", isolation=iso) > checked[iso] + 500
                             for iso in ISOS), 60, "checking going on after the renewal", show=run.tail)

        # the canary's Write ACL on its topic taken away, then given back: the refused writes are
        # failed (never acknowledged, so nothing is lost), said once and counted
        write_acl = [b for b in canary_acls(cfg) if b.name == cfg.canary.name and b.operation == AclOperation.WRITE]
        admin = AdminClient(cluster.admin_conf())
        revoked_at = time.time()
        for f in admin.delete_acls([AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                                     b.operation, b.permission_type) for b in write_acl]).values():
            assert len(f.result()) == 1
        wait_for(lambda: (sample(port, "vigil_client_errors_total", client="writer-idempotent",
                                 kind="authorization") or 0) > 0, 60, "the refused writes counted", show=run.tail)
        for f in admin.create_acls(write_acl).values():
            f.result()
        restored_at = time.time()
        acked = acked_writes(port)
        wait_for(lambda: acked_writes(port) > acked + 300, 60, "writes acknowledged again", show=run.tail)

        # the password rotated: on the brokers and in the file; the brokers make every connection
        # authenticate again within 15 s (connections.max.reauth.ms), so only clients that took
        # the new password go on
        secured["password_file"].write_text(ROTATED + "\n")
        upsert = UserScramCredentialUpsertion("vigil-canary", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              ROTATED.encode())
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result()
        wait_for(lambda: sample(port, "vigil_credential_reloads_total", cluster="canary") == 1, 10,
                 "the new password given to the open clients", show=run.tail)
        time.sleep(35)  # two re-authentication periods: every connection has authenticated again
        refused = sample(port, "vigil_client_errors_total", client="writer-idempotent", kind="authentication") or 0
        acked, checked = acked_writes(port), {iso: sample(port, "vigil_records_checked_total", isolation=iso)
                                              for iso in ISOS}
        wait_for(lambda: acked_writes(port) > acked + 1000 and all(
            sample(port, "vigil_records_checked_total", isolation=iso) > checked[iso] + 1000 for iso in ISOS),
            60, "writing and checking going on with the rotated password", show=run.tail)
        assert (sample(port, "vigil_client_errors_total", client="writer-idempotent", kind="authentication")
                or 0) == refused  # no writer connection refused any more
        # Spark's Java consumer still held the old password: its re-authentication was refused, which
        # ended the query (restarted with the new one) — counted and said under client "spark"
        assert (sample(port, "vigil_client_errors_total", client="spark", kind="authentication") or 0) >= 1, run.tail()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            scrapes.append(resp.read().decode())
        assert scrape(port)  # parses
    finally:
        assert run.stop() == 0, run.tail()
    summary = run.stdout_json()
    assert all(summary["checker"]["records_checked"][iso] > 1000 for iso in ISOS), summary["checker"]
    # The Write ACL taken away may catch a transaction with a record already in one partition's log
    # and the rest refused, or held back while the topic's metadata says it is not allowed: its
    # abort waits for those (up to the writer's message.timeout.ms) and that partition's LSO stays
    # held meanwhile — a hanging transaction by lso_stuck's definition (the canary's transaction
    # outlasted the threshold), seen at most once per partition, only in that window, and counted
    # by the audit alike (checked below). Nothing else may be counted.
    lso = ("lso_stuck", "read_committed")
    counts = nonzero(final_counts(run))
    assert set(counts) <= {lso} and counts.get(lso, 0) <= 3, counts
    if counts:
        hangs = [json.loads(line) for line in cfg.evidence_path().read_text().splitlines()]
        hangs = [h for h in hangs if h["invariant"] == "lso_stuck"]
        assert max(Counter(h["partition"] for h in hangs).values()) == 1, hangs
        hung_at = [datetime.fromisoformat(h["detected_at"].replace("Z", "+00:00")).timestamp() for h in hangs]
        # detected at most message.timeout.ms (30 s) plus the threshold (6 s) after the ACL was back
        assert len(hung_at) == counts[lso] and all(revoked_at < t < restored_at + 30 + 6 + 10 for t in hung_at), (
            hung_at, revoked_at, restored_at)
    said = [line for line in run.err.read_text().splitlines() if line.startswith("vigil: writer-idempotent: ")]
    assert said and "an ACL does not allow this to 'vigil-canary'" in said[0] and "Topic authorization failed" in said[0]
    said = [line for line in run.err.read_text().splitlines() if line.startswith("vigil: spark: ")]
    assert said and "refused the credentials of 'vigil-canary'" in said[0] and "SaslAuthenticationException" in said[0]
    report = vigil_json(path, "audit")
    assert nonzero(audit_counts(report)) == counts and report["undecided"] == 0, (audit_counts(report), counts)
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
    leaked = sorted(name for name, text in texts.items() if PASSWORD in text or ROTATED in text)
    assert leaked == [], leaked


def test_every_drill_on_the_secured_cluster_is_found_live_and_by_the_audit(secured, tmp_path):
    """Every drill kind authenticates from the one config and writes under the canary principal's
    ACLs (its own topics, the `vigil-` transactional ids); the running monitor counts exactly each
    drill's row, and the audit the same history. Its own topics, so the clean run stays clean."""
    data = yaml.safe_load(secured["path"].read_text())
    data.update(canary={"name": "sec-drills"}, ledger={"topic": "sec-drills-ledger", "checkpoint_interval_s": 5},
                metrics={"port": 29493}, state_dir=str(tmp_path / "state"), instance_id="it-drills",
                writers=[{"name": "idempotent", "rate": 20}])
    path = tmp_path / "drills.yaml"
    path.write_text(yaml.safe_dump(data))
    up_for(parse(data, str(path)))  # the principal granted the new topics as well
    port = 29493
    run = Background(path, "run", "--json", name="drills")
    total: Counter = Counter()
    try:
        wait_for(lambda: metrics_up(port), 180, "the first batch", show=run.tail)
        for kind in DRILL_KINDS:
            before = violations(port)
            args = ["drill", kind, "--count", "1", "--partition", "1"]
            if kind == "lso_stuck":
                args += ["--hold", "16"]  # well past the 6 s threshold (see the plain cluster's drills test)
            report = vigil_json(path, *args)
            want = drill_row(kind, 1)
            assert {(e["invariant"], e["isolation"]): e["count"] for e in report["expected"]} == want

            def moved():
                now = violations(port)
                return nonzero({k: now[k] - before.get(k, 0) for k in now})

            wait_for(lambda: moved() == want, 30, f"{kind}: {want}", show=moved)
            total.update(want)
    finally:
        assert run.stop() == 0, run.tail()
    assert nonzero(final_counts(run)) == dict(total)
    assert set(k for k, _iso in total) >= {"lost_write", "duplicate", "reorder", "zero_offset", "offset_mismatch",
                                           "aborted_read", "partial_txn", "outcome_gap", "lso_stuck"}
    assert nonzero(audit_counts(vigil_json(path, "audit"))) == dict(total)


def test_a_wrong_password_is_one_clear_line_and_a_metric_and_the_monitor_waits_for_it(secured, tmp_path):
    """An external cluster (bootstrap servers set: nothing is created or granted for it) that
    refuses the credentials: no stack trace, no exit, no crash loop — the line naming the
    settings, vigil_client_errors_total, tries again with a growing wait; stops cleanly."""
    cluster = secured["cluster"]
    wrong = "wrong-" + secrets.token_hex(8)
    data = yaml.safe_load(secured["path"].read_text())
    data["kafka"]["bootstrap_servers"] = cluster.bootstrap_servers
    del data["kafka"]["security"]["sasl_password_file"]
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
    shown = subprocess.run(VIGIL + ["config", "show", "--config", str(path)], capture_output=True, text=True)
    assert shown.returncode == 0 and "sasl_password: '**********'" in shown.stdout
    assert not any(wrong in text for text in (err, run.out.read_text(), metrics, shown.stdout + shown.stderr))
